//! The part of the stock lifecycle every strategy shares: the idempotency decision, writing
//! reservation rows, confirm, release, and applying stock deltas in product order.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::Client;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::domain::{OrderId, OrderItems, ProductId, Quantity, Ttl};
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::backorders;
use crate::stock::layout;
use crate::stock::locations;
use crate::stock::sql::{
    insert_reservations_values, INSERT_ALLOCATED_RESERVATIONS, INSERT_RESERVATIONS, LOCK_STOCK,
    ORDER_ROWS, RESERVATIONS_VALUES_CHUNK,
};
use crate::stock::types::{
    ConfirmOutcome, PendingItem, Placement, ReleaseOutcome, RereserveRequest, Reservation,
    ReserveRequest, ReservedItem, Status,
};
use crate::store::handle::Store;
use crate::store::retry::{checkout, in_idempotent_transaction, in_transaction};
use crate::store::schema::Layout;
use crate::telemetry;

/// How a strategy takes units from `available` into `reserved` inside the reserve transaction.
/// `items` come in ascending product id; the taker must lock in that order, and must fail with
/// [`Error::InsufficientStock`] or [`Error::UnknownProduct`] naming the product that ran out —
/// or, when that product accepts backorders, with [`Error::NeedsBackorderPath`] (decided from
/// the row it read anyway, e.g. [`take_refusal`]), and the reserve reruns on the locked
/// backorder path. A taker that never does simply never backorders.
#[async_trait]
pub trait UnitTaker: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    async fn take(&self, client: &Client, items: &[(ProductId, Quantity)]) -> Result<(), Error>;
}

/// A unique violation on the live index means a concurrent copy of this order committed first;
/// rerunning sees its rows and answers as a replay ([`in_idempotent_transaction`]).
pub(crate) const LIVE_INDEX: &str = "reservations_live_order_product";

#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub id: Uuid,
    pub order_id: String,
    /// `None` for rows written by the order's own reserve request; the re-reserve's key else.
    pub request_key: Option<String>,
    /// Transaction start of the request that wrote the row: rows of one request share it.
    pub created_at: DateTime<Utc>,
    /// The row has `reservation_allocations` (written by the located path).
    pub allocated: bool,
    pub item: ReservedItem,
}

/// Reads rows selected with [`reservation_columns!`], by column name.
pub(crate) fn parse_rows(rows: &[tokio_postgres::Row]) -> Result<Vec<Row>, Error> {
    rows.iter()
        .map(|r| {
            let status: String = r.try_get("status")?;
            Ok(Row {
                id: r.try_get("id")?,
                order_id: r.try_get("order_id")?,
                request_key: r.try_get("request_key")?,
                created_at: r.try_get("created_at")?,
                allocated: r.try_get("allocated")?,
                item: ReservedItem {
                    product_id: ProductId::new(r.try_get("product_id")?)?,
                    quantity: r.try_get("quantity")?,
                    status: Status::parse(&status)?,
                    expires_at: r.try_get("expires_at")?,
                    backordered: r.try_get("backordered")?,
                    allocations: Vec::new(),
                },
            })
        })
        .collect()
}

/// Whose rows a reserve-like request is about, and how to decide on them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Intent<'a> {
    /// The order's own request, keyed by the order id.
    Reserve(&'a ReserveRequest),
    /// A re-reserve of what expired or was released, keyed by its own request key.
    Rereserve(&'a RereserveRequest),
    /// Lab only (`naive-replay`): the rule before issue 11, under which an order id stopped
    /// being an idempotency key once the order was released or expired, so a late retry took
    /// the units again. Kept to show `saldo race late-retry` failing without the rule.
    ForgetfulReserve(&'a ReserveRequest),
}

impl Intent<'_> {
    pub fn order_id(&self) -> &OrderId {
        match self {
            Intent::Reserve(r) | Intent::ForgetfulReserve(r) => &r.order_id,
            Intent::Rereserve(r) => &r.order_id,
        }
    }
    pub fn ttl(&self) -> Ttl {
        match self {
            Intent::Reserve(r) | Intent::ForgetfulReserve(r) => r.ttl,
            Intent::Rereserve(r) => r.ttl,
        }
    }
    pub fn request_key(&self) -> Option<&str> {
        match self {
            Intent::Reserve(_) | Intent::ForgetfulReserve(_) => None,
            Intent::Rereserve(r) => Some(r.rereserve_id.as_str()),
        }
    }
}

/// What to do with a request, given the order's existing rows.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// The request was made before: answer with the order's current state, take nothing.
    Replay,
    /// Take these units and write a row for each.
    Take(Vec<(ProductId, Quantity)>),
}

/// The idempotency decision (issue 11: idempotency is per request, for good).
///
/// A request that already wrote rows is a replay whatever those rows became since (confirmed,
/// released, expired): it answers the order's current state and takes nothing. The same key
/// with other items is a conflict. Taking again what expired or was released is only done by a
/// re-reserve, which is a request of its own with its own key.
pub(crate) fn plan(intent: Intent<'_>, existing: &[Row]) -> Result<Plan, Error> {
    match intent {
        Intent::Reserve(request) => plan_reserve(request, existing),
        Intent::Rereserve(request) => plan_rereserve(request, existing),
        Intent::ForgetfulReserve(request) => {
            let live: Vec<Row> = existing
                .iter()
                .filter(|r| r.item.status.is_live())
                .cloned()
                .collect();
            plan_reserve(request, &live)
        }
    }
}

fn plan_reserve(request: &ReserveRequest, existing: &[Row]) -> Result<Plan, Error> {
    if existing.is_empty() {
        return Ok(Plan::Take(request.items.iter().collect()));
    }
    // The rows of the order's first request: no request key, the earliest transaction.
    let first_at = existing
        .iter()
        .filter(|r| r.request_key.is_none())
        .map(|r| r.created_at)
        .min();
    let original: BTreeMap<ProductId, i32> = existing
        .iter()
        .filter(|r| r.request_key.is_none() && Some(r.created_at) == first_at)
        .map(|r| (r.item.product_id, r.item.quantity))
        .collect();
    if same_items(&original, &request.items) {
        Ok(Plan::Replay)
    } else {
        Err(Error::IdempotencyConflict(request.order_id.clone()))
    }
}

fn plan_rereserve(request: &RereserveRequest, existing: &[Row]) -> Result<Plan, Error> {
    if existing.is_empty() {
        return Err(Error::UnknownOrder(request.order_id.clone()));
    }
    let key = request.rereserve_id.as_str();
    let mine: BTreeMap<ProductId, i32> = existing
        .iter()
        .filter(|r| r.request_key.as_deref() == Some(key))
        .map(|r| (r.item.product_id, r.item.quantity))
        .collect();
    if !mine.is_empty() {
        return match &request.items {
            Some(items) if !same_items(&mine, items) => {
                Err(Error::IdempotencyConflict(request.order_id.clone()))
            }
            _ => Ok(Plan::Replay),
        };
    }
    let missing = missing_items(existing);
    let take: Vec<(ProductId, Quantity)> = match &request.items {
        None => missing
            .iter()
            .map(|i| Ok((i.product_id, Quantity::new(i64::from(i.quantity))?)))
            .collect::<Result<_, Error>>()?,
        Some(items) => {
            for (product, _) in items.iter() {
                if !missing.iter().any(|m| m.product_id == product) {
                    let held = existing.iter().any(|r| r.item.product_id == product);
                    return Err(Error::NotRereservable {
                        order_id: request.order_id.clone(),
                        product_id: product,
                        why: if held {
                            "still held (active or confirmed)"
                        } else {
                            "not part of the order"
                        },
                    });
                }
            }
            items.iter().collect()
        }
    };
    if take.is_empty() {
        return Err(Error::NothingToRereserve(request.order_id.clone()));
    }
    Ok(Plan::Take(take))
}

fn same_items(rows: &BTreeMap<ProductId, i32>, items: &OrderItems) -> bool {
    rows.len() == items.len()
        && items
            .iter()
            .all(|(p, q)| rows.get(&p).copied() == Some(q.get()))
}

/// Why a conditional take found nothing: the product does not exist, it ran out, or it is
/// stocked per location ([`Error::StockedByLocation`]: the conditional takes leave located
/// products alone, and the caller reroutes the operation to the located path).
pub async fn refusal(client: &Client, product: ProductId, quantity: Quantity) -> Error {
    read_refusal(client, product, quantity, false).await
}

/// [`refusal`] for a reservation's take: a product that accepts backorders answers
/// [`Error::NeedsBackorderPath`] instead (the limit is read by the same statement, so a
/// product without one pays nothing more on the refusal path either).
pub async fn take_refusal(client: &Client, product: ProductId, quantity: Quantity) -> Error {
    read_refusal(client, product, quantity, true).await
}

async fn read_refusal(
    client: &Client,
    product: ProductId,
    quantity: Quantity,
    route: bool,
) -> Error {
    let row = client
        .query_opt(
            "SELECT available, backorder_limit, located FROM stock WHERE product_id = $1",
            &[&product.get()],
        )
        .await;
    // One read of the three columns: a column that cannot be read is an error, never taken
    // for "not located" (which would answer a located product "insufficient stock").
    let read = |r: &tokio_postgres::Row| -> Result<(i32, i32, bool), tokio_postgres::Error> {
        Ok((
            r.try_get("available")?,
            r.try_get("backorder_limit")?,
            r.try_get("located")?,
        ))
    };
    match row {
        Ok(None) => Error::UnknownProduct(product),
        Ok(Some(r)) => match read(&r) {
            Ok((_, _, true)) => Error::StockedByLocation(product),
            Ok((_, limit, false)) if route && limit > 0 => Error::NeedsBackorderPath(product),
            Ok((available, _, false)) => Error::InsufficientStock {
                product_id: product,
                requested: quantity.get(),
                available,
            },
            Err(e) => e.into(),
        },
        Err(e) => e.into(),
    }
}

/// How a reserve transaction takes its units.
#[derive(Clone, Copy)]
enum Taking<'a> {
    /// The strategy's own take (the hot path; nothing about backorders).
    By(&'a dyn UnitTaker),
    /// The locked backorder path ([`backorders::take`]).
    Backordering,
}

/// Reserve or re-reserve through `taker`, in one transaction (rerun as a replay when a
/// concurrent copy of the same request committed first). A take refused on a product that
/// accepts backorders rolls back and reruns once on the locked backorder path; an order that
/// meets a product stocked per location is rolled back at that product and runs again on the
/// located path (so products with neither pay nothing for either feature). A product never has
/// both (`stock::backorders::set_policy` and `stock::locations::set_count` refuse it), so the
/// reroutes end: strategy → backorder path → located path at most.
pub(crate) async fn reserve(
    store: &Store,
    taker: &dyn UnitTaker,
    intent: Intent<'_>,
) -> Result<Reservation, Error> {
    match reserve_with(store, Taking::By(taker), intent).await {
        Err(Error::NeedsBackorderPath(_)) => reserve_backordering(store, intent).await,
        other => other,
    }
}

/// Reserve on the locked backorder path straight away (how `batched` routes an order its batch
/// could not serve on a product with a backorder limit).
pub(crate) async fn reserve_backordering(
    store: &Store,
    intent: Intent<'_>,
) -> Result<Reservation, Error> {
    reserve_with(store, Taking::Backordering, intent).await
}

async fn reserve_with(
    store: &Store,
    taking: Taking<'_>,
    intent: Intent<'_>,
) -> Result<Reservation, Error> {
    let layout = store.layout();
    let result = in_idempotent_transaction(
        &store.pool,
        &store.tx,
        Operation::Reserve,
        LIVE_INDEX,
        move |client| crate::tx_body!(client => reserve_tx(client, layout, taking, intent)),
    )
    .await;
    match result {
        Err(Error::StockedByLocation(_)) => {
            locations::reserve(store, intent, &Placement::default()).await
        }
        other => other,
    }
}

async fn reserve_tx(
    client: &Client,
    layout: Layout,
    taking: Taking<'_>,
    intent: Intent<'_>,
) -> Result<Reservation, Error> {
    let order_id = intent.order_id();
    let mut rows = layout::order_rows(client, layout, order_id).await?;
    let take = match plan(intent, &rows)? {
        Plan::Replay => {
            locations::attach(client, &mut rows).await?;
            return Ok(Reservation {
                order_id: order_id.clone(),
                items: current_items(&rows),
                replayed: true,
            });
        }
        Plan::Take(take) => take,
    };

    let started = Instant::now();
    let (taken, strategy) = match taking {
        Taking::By(taker) => (
            taker.take(client, &take).await.map(|()| Vec::new()),
            taker.name(),
        ),
        Taking::Backordering => (backorders::take(client, &take).await, "backorder"),
    };
    let backordered = match taken {
        Ok(backordered) => backordered,
        // Rolls back: the whole reserve reruns on the backorder path (see `reserve`).
        Err(route @ Error::NeedsBackorderPath(_)) => return Err(route),
        Err(refusal) => return replay_of_concurrent_copy(client, intent, refusal).await,
    };
    metrics::histogram!(telemetry::STOCK_LOCK_WAIT, "strategy" => strategy)
        .record(started.elapsed().as_secs_f64());

    let mut new_rows = NewRows::default();
    let ttl = intent.ttl();
    for &(product, quantity) in &take {
        let id = Uuid::new_v4();
        new_rows.push(id, order_id, product, quantity, ttl, intent.request_key());
    }
    let mut written = insert_rows(client, layout, &new_rows).await?;
    backorders::mark(client, &mut written, &backordered).await?;
    if layout == Layout::Citus {
        // The router after the ordered stock locks (ARCHITECTURE.md, "On Citus").
        let known = HashMap::from([(
            order_id.as_str(),
            rows.iter().map(|r| r.item.product_id.get()).collect(),
        )]);
        let new = take.iter().map(|(p, _)| (order_id.as_str(), p.get()));
        layout::route(client, layout, new, &known).await?;
    }
    rows.extend(written);
    Ok(Reservation {
        order_id: order_id.clone(),
        items: current_items(&rows),
        replayed: false,
    })
}

/// A take refused for want of stock may have waited on the row lock for a concurrent copy of
/// this very request, which then took the units: that is a replay, not a refusal. Under READ
/// COMMITTED the next statement sees what committed meanwhile, so read the order again. Answers
/// the replay, or the original refusal (also when the transaction is aborted and cannot read).
pub(crate) async fn replay_of_concurrent_copy(
    client: &Client,
    intent: Intent<'_>,
    refusal: Error,
) -> Result<Reservation, Error> {
    if !matches!(
        refusal,
        Error::InsufficientStock { .. } | Error::VersionConflict { .. }
    ) {
        return Err(refusal);
    }
    let order_id = intent.order_id();
    let Ok(stmt) = client.prepare_cached(ORDER_ROWS).await else {
        return Err(refusal);
    };
    let Ok(rows) = client.query(&stmt, &[&order_id.as_str()]).await else {
        return Err(refusal);
    };
    match parse_rows(&rows).map(|rows| (plan(intent, &rows), rows)) {
        Ok((Ok(Plan::Replay), rows)) => Ok(Reservation {
            order_id: order_id.clone(),
            items: current_items(&rows),
            replayed: true,
        }),
        _ => Err(refusal),
    }
}

/// Reservation rows to write, as the parallel arrays [`INSERT_RESERVATIONS`] takes: one order's
/// items (reserve, re-reserve) or a whole batch's.
#[derive(Debug, Default)]
pub(crate) struct NewRows<'a> {
    ids: Vec<Uuid>,
    orders: Vec<&'a str>,
    products: Vec<i64>,
    quantities: Vec<i32>,
    ttls_s: Vec<f64>,
    request_keys: Vec<Option<&'a str>>,
    /// Which rows have allocations; all false on every path but the located one.
    allocated: Vec<bool>,
}

impl<'a> NewRows<'a> {
    pub fn push(
        &mut self,
        id: Uuid,
        order_id: &'a OrderId,
        product: ProductId,
        quantity: Quantity,
        ttl: Ttl,
        request_key: Option<&'a str>,
    ) {
        self.ids.push(id);
        self.orders.push(order_id.as_str());
        self.products.push(product.get());
        self.quantities.push(quantity.get());
        self.ttls_s.push(ttl.as_duration().as_secs_f64());
        self.request_keys.push(request_key);
        self.allocated.push(false);
    }

    /// Marks the row just pushed as one with allocations.
    pub fn mark_allocated(&mut self) {
        if let Some(last) = self.allocated.last_mut() {
            *last = true;
        }
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// Writes `rows` and answers them as rows, in the order given, with the database's
/// `created_at` and `expires_at`: on one node in one statement; on Citus as multi-row VALUES
/// of at most [`RESERVATIONS_VALUES_CHUNK`] rows each, which Citus routes row by row to the
/// shards (its `INSERT … SELECT` runs through the coordinator). Every row must come back:
/// anything else is an invariant failure, never a shorter answer.
pub(crate) async fn insert_rows(
    client: &Client,
    layout: Layout,
    rows: &NewRows<'_>,
) -> Result<Vec<Row>, Error> {
    let allocated = rows.allocated.iter().any(|&a| a);
    let returned = if layout == Layout::Citus && !allocated {
        let mut returned = Vec::with_capacity(rows.len());
        for start in (0..rows.len()).step_by(RESERVATIONS_VALUES_CHUNK) {
            let end = (start + RESERVATIONS_VALUES_CHUNK).min(rows.len());
            let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(6 * (end - start));
            for i in start..end {
                params.push(&rows.ids[i]);
                params.push(&rows.orders[i]);
                params.push(&rows.products[i]);
                params.push(&rows.quantities[i]);
                params.push(&rows.ttls_s[i]);
                params.push(&rows.request_keys[i]);
            }
            // One statement text per chunk size: at most RESERVATIONS_VALUES_CHUNK of them.
            let stmt = client
                .prepare_cached(&insert_reservations_values(end - start))
                .await?;
            returned.extend(client.query(&stmt, &params).await?);
        }
        returned
    } else {
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![
            &rows.ids,
            &rows.orders,
            &rows.products,
            &rows.quantities,
            &rows.ttls_s,
            &rows.request_keys,
        ];
        // Rows with allocations (the located path) say so; every other path keeps its
        // statement.
        let insert = if allocated {
            params.push(&rows.allocated);
            INSERT_ALLOCATED_RESERVATIONS
        } else {
            INSERT_RESERVATIONS
        };
        let stmt = client.prepare_cached(insert).await?;
        client.query(&stmt, &params).await?
    };
    let mut times: HashMap<Uuid, (DateTime<Utc>, DateTime<Utc>)> =
        HashMap::with_capacity(returned.len());
    for r in &returned {
        times.insert(
            r.try_get("id")?,
            (r.try_get("created_at")?, r.try_get("expires_at")?),
        );
    }
    let mut written = Vec::with_capacity(rows.len());
    for i in 0..rows.len() {
        let Some(&(created_at, expires_at)) = times.get(&rows.ids[i]) else {
            return Err(Error::invariant(format!(
                "inserted {} reservation rows, expected {}: row {} did not come back",
                returned.len(),
                rows.len(),
                rows.ids[i]
            )));
        };
        written.push(Row {
            id: rows.ids[i],
            order_id: rows.orders[i].to_owned(),
            request_key: rows.request_keys[i].map(str::to_owned),
            created_at,
            allocated: rows.allocated[i],
            item: ReservedItem {
                product_id: ProductId::new(rows.products[i])?,
                quantity: rows.quantities[i],
                status: Status::Active,
                expires_at,
                backordered: 0,
                allocations: Vec::new(),
            },
        });
    }
    Ok(written)
}

/// The order's current state: per product, its latest row (a re-reserved product shows the new
/// row, not the expired one). `rows` are in product order, each product's rows oldest first.
pub(crate) fn current_items(rows: &[Row]) -> Vec<ReservedItem> {
    let mut latest: BTreeMap<ProductId, &ReservedItem> = BTreeMap::new();
    for r in rows {
        latest.insert(r.item.product_id, &r.item);
    }
    latest.into_values().cloned().collect()
}

/// Adds (available, reserved) deltas to stock rows, locking them in ascending product id.
pub(crate) async fn apply_deltas(
    client: &Client,
    layout: Layout,
    deltas: &BTreeMap<ProductId, (i32, i32)>,
) -> Result<(), Error> {
    if deltas.is_empty() {
        return Ok(());
    }
    let products: Vec<i64> = deltas.keys().map(|p| p.get()).collect();
    if deltas.len() > 1 && layout == Layout::Single {
        // One multi-row UPDATE locks in plan order; lock explicitly in id order first. (On
        // Citus every product is its own UPDATE, issued in id order.)
        let stmt = client.prepare_cached(LOCK_STOCK).await?;
        client.query(&stmt, &[&products]).await?;
    }
    let available: Vec<i32> = deltas.values().map(|d| d.0).collect();
    let reserved: Vec<i32> = deltas.values().map(|d| d.1).collect();
    layout::apply_deltas(client, layout, &products, &available, &reserved).await?;
    Ok(())
}

/// Moves `rows` (locked, active) to `status` and applies their stock deltas. Only allocated
/// units (quantity − backordered) were reserved: a confirm sells them and leaves the backorder
/// pending; a release or expiry gives them back and drops the backorder.
pub(crate) async fn settle(
    client: &Client,
    layout: Layout,
    rows: &[&Row],
    status: Status,
) -> Result<(), Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut deltas: BTreeMap<ProductId, (i32, i32)> = BTreeMap::new();
    for r in rows {
        let d = deltas.entry(r.item.product_id).or_default();
        let allocated = r.item.quantity - r.item.backordered;
        let back_to_available = if status == Status::Confirmed {
            0
        } else {
            allocated
        };
        d.0 += back_to_available;
        d.1 -= allocated;
    }
    apply_deltas(client, layout, &deltas).await?;
    if status != Status::Confirmed {
        backorders::drop_backorders(client, rows).await?;
    }
    // Then the location rows of what has allocations (stock rows first: the lock order).
    locations::settle(client, rows, status).await?;
    // settled_at is taken after the stock rows are locked, so it orders consistently with the
    // physical counts the audit compares against.
    let status_text = match status {
        Status::Confirmed => "confirmed",
        Status::Released => "released",
        Status::Expired => "expired",
        Status::Active => "active",
    };
    layout::settle_rows(client, layout, rows, status_text).await
}

async fn lock_order(
    client: &Client,
    layout: Layout,
    order_id: &OrderId,
) -> Result<Vec<Row>, Error> {
    let mut rows = layout::lock_order_rows(client, layout, order_id).await?;
    if rows.is_empty() {
        return Err(Error::UnknownOrder(order_id.clone()));
    }
    locations::attach(client, &mut rows).await?;
    Ok(rows)
}

pub(crate) async fn confirm(store: &Store, order_id: &OrderId) -> Result<ConfirmOutcome, Error> {
    let layout = store.layout();
    let outcome = in_transaction(&store.pool, &store.tx, Operation::Confirm, move |client| {
        crate::tx_body!(client => async {
            let mut rows = lock_order(client, layout, order_id).await?;
            let active: Vec<&Row> = rows
                .iter()
                .filter(|r| r.item.status == Status::Active)
                .collect();
            settle(client, layout, &active, Status::Confirmed).await?;
            Ok(confirmed_outcome(order_id, &mut rows))
        })
    })
    .await?;
    telemetry::settled("confirmed", outcome.1);
    note_confirmed_with_missing(&outcome.0, outcome.1);
    Ok(outcome.0)
}

/// What a confirm answers for one order whose active rows it has just settled: those rows
/// become confirmed in `rows`; every confirmed row is what it holds as sold, every product
/// whose latest row is dead is missing. Also how many rows this confirm moved. Shared by
/// [`confirm`] and the batched confirm, so both answer alike.
pub(crate) fn confirmed_outcome(order_id: &OrderId, rows: &mut [Row]) -> (ConfirmOutcome, u64) {
    let mut newly = 0u64;
    for r in rows.iter_mut() {
        if r.item.status == Status::Active {
            r.item.status = Status::Confirmed;
            newly += 1;
        }
    }
    let confirmed = rows
        .iter()
        .filter(|r| r.item.status == Status::Confirmed)
        .map(|r| r.item.clone())
        .collect();
    let pending = rows
        .iter()
        .filter(|r| r.item.status == Status::Confirmed && r.item.backordered > 0)
        .map(|r| PendingItem {
            product_id: r.item.product_id,
            quantity: r.item.backordered,
        })
        .collect();
    let outcome = ConfirmOutcome {
        order_id: order_id.clone(),
        confirmed,
        missing: missing_items(rows),
        pending,
    };
    (outcome, newly)
}

/// Counts a confirm that moved rows while part of the order was already lost (the customer paid
/// for items it no longer holds: re-reserve or refund). Called once the confirm committed.
pub(crate) fn note_confirmed_with_missing(outcome: &ConfirmOutcome, newly: u64) {
    if !outcome.missing.is_empty() && newly > 0 {
        metrics::counter!(telemetry::CONFIRMED_WITH_MISSING).increment(1);
    }
}

/// Products whose latest row is dead (expired or released): what a confirm reports missing and
/// what a re-reserve may take again.
pub(crate) fn missing_items(rows: &[Row]) -> Vec<ReservedItem> {
    current_items(rows)
        .into_iter()
        .filter(|i| !i.status.is_live())
        .collect()
}

pub(crate) async fn release(store: &Store, order_id: &OrderId) -> Result<ReleaseOutcome, Error> {
    let layout = store.layout();
    let (outcome, newly) =
        in_transaction(&store.pool, &store.tx, Operation::Release, move |client| {
            crate::tx_body!(client => async {
                let rows = lock_order(client, layout, order_id).await?;
                let active: Vec<&Row> = rows
                    .iter()
                    .filter(|r| r.item.status == Status::Active)
                    .collect();
                settle(client, layout, &active, Status::Released).await?;
                let newly = active.len() as u64;
                let released = rows
                    .iter()
                    .filter(|r| matches!(r.item.status, Status::Active | Status::Released))
                    .map(|r| ReservedItem {
                        status: Status::Released,
                        ..r.item.clone()
                    })
                    .collect();
                Ok((
                    ReleaseOutcome {
                        order_id: order_id.clone(),
                        released,
                    },
                    newly,
                ))
            })
        })
        .await?;
    telemetry::settled("released", newly);
    Ok(outcome)
}

pub(crate) async fn order(store: &Store, order_id: &OrderId) -> Result<Vec<ReservedItem>, Error> {
    let client = checkout(&store.pool, Operation::Order).await?;
    let mut rows = layout::order_rows(&client, store.layout(), order_id).await?;
    if rows.is_empty() {
        return Err(Error::UnknownOrder(order_id.clone()));
    }
    locations::attach(&client, &mut rows).await?;
    Ok(rows.into_iter().map(|r| r.item).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{OrderItems, RequestKey, Ttl};

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_700_000_000 + seconds, 0).expect("time")
    }

    /// A row of the order's own request (written at time 0) or of re-reserve `key` (time 1).
    fn row(product: i64, quantity: i32, status: Status, key: Option<&str>) -> Row {
        Row {
            id: Uuid::new_v4(),
            order_id: "o1".into(),
            request_key: key.map(str::to_owned),
            created_at: at(if key.is_some() { 1 } else { 0 }),
            allocated: false,
            item: ReservedItem {
                product_id: ProductId::new(product).expect("id"),
                quantity,
                status,
                expires_at: Utc::now(),
                backordered: 0,
                allocations: Vec::new(),
            },
        }
    }

    fn req(items: &[(i64, i64)]) -> ReserveRequest {
        ReserveRequest {
            order_id: OrderId::new("o1").expect("id"),
            items: OrderItems::new(items.iter().copied()).expect("items"),
            ttl: Ttl::default(),
        }
    }

    fn rereq(key: &str, items: Option<&[(i64, i64)]>) -> RereserveRequest {
        RereserveRequest {
            order_id: OrderId::new("o1").expect("id"),
            rereserve_id: RequestKey::new(key).expect("key"),
            items: items.map(|i| OrderItems::new(i.iter().copied()).expect("items")),
            ttl: Ttl::default(),
        }
    }

    fn p(product: i64, quantity: i64) -> (ProductId, Quantity) {
        (
            ProductId::new(product).expect("id"),
            Quantity::new(quantity).expect("q"),
        )
    }

    #[test]
    fn a_reserve_request_is_a_replay_whatever_its_rows_became() {
        use Status::*;
        let plan_of = |r: &ReserveRequest, rows: &[Row]| plan(Intent::Reserve(r), rows);
        assert_eq!(
            plan_of(&req(&[(1, 1)]), &[]).ok(),
            Some(Plan::Take(vec![p(1, 1)]))
        );
        for status in [Active, Confirmed, Released, Expired] {
            assert_eq!(
                plan_of(&req(&[(1, 1)]), &[row(1, 1, status, None)]).ok(),
                Some(Plan::Replay),
                "{status:?}"
            );
        }
        // Other items under the same order id: a conflict, live or not.
        for status in [Active, Released, Expired] {
            let rows = [row(1, 1, status, None)];
            for items in [&[(1, 2)][..], &[(2, 1)], &[(1, 1), (2, 1)]] {
                assert!(matches!(
                    plan_of(&req(items), &rows),
                    Err(Error::IdempotencyConflict(_))
                ));
            }
        }
        // After a re-reserve, the order's own request is still recognised by its first rows.
        let rows = [
            row(1, 1, Expired, None),
            row(1, 1, Active, Some("k1")),
            row(2, 1, Confirmed, None),
        ];
        assert_eq!(
            plan_of(&req(&[(1, 1), (2, 1)]), &rows).ok(),
            Some(Plan::Replay)
        );
    }

    #[test]
    fn a_rereserve_takes_only_what_was_lost_and_only_once() {
        use Status::*;
        let plan_of = |r: &RereserveRequest, rows: &[Row]| plan(Intent::Rereserve(r), rows);
        assert!(matches!(
            plan_of(&rereq("k1", None), &[]),
            Err(Error::UnknownOrder(_))
        ));
        let lost = [row(1, 2, Expired, None), row(2, 1, Confirmed, None)];
        assert_eq!(
            plan_of(&rereq("k1", None), &lost).ok(),
            Some(Plan::Take(vec![p(1, 2)]))
        );
        assert_eq!(
            plan_of(&rereq("k1", Some(&[(1, 1)])), &lost).ok(),
            Some(Plan::Take(vec![p(1, 1)]))
        );
        assert!(matches!(
            plan_of(&rereq("k1", Some(&[(2, 1)])), &lost),
            Err(Error::NotRereservable { .. })
        ));
        assert!(matches!(
            plan_of(&rereq("k1", Some(&[(3, 1)])), &lost),
            Err(Error::NotRereservable { .. })
        ));
        let held = [row(1, 2, Active, None)];
        assert!(matches!(
            plan_of(&rereq("k1", None), &held),
            Err(Error::NothingToRereserve(_))
        ));
        // Its own rows exist: a replay, even after they expired again.
        for status in [Active, Expired, Released, Confirmed] {
            let rows = [row(1, 2, Expired, None), row(1, 2, status, Some("k1"))];
            assert_eq!(
                plan_of(&rereq("k1", None), &rows).ok(),
                Some(Plan::Replay),
                "{status:?}"
            );
            assert!(matches!(
                plan_of(&rereq("k1", Some(&[(1, 1)])), &rows),
                Err(Error::IdempotencyConflict(_))
            ));
            // Another key may take again what its predecessor lost.
            if !status.is_live() {
                assert_eq!(
                    plan_of(&rereq("k2", None), &rows).ok(),
                    Some(Plan::Take(vec![p(1, 2)]))
                );
            }
        }
    }
}
