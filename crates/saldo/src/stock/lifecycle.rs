//! The part of the stock lifecycle every strategy shares: the idempotency decision, writing
//! reservation rows, confirm, release, and applying stock deltas in product order.

use std::collections::BTreeMap;
use std::time::Instant;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::Client;
use uuid::Uuid;

use crate::domain::{OrderId, ProductId, Quantity};
use crate::error::Error;
use crate::retry::in_transaction;
use crate::stock::{
    ConfirmOutcome, ReleaseOutcome, Reservation, ReserveRequest, ReservedItem, Status, Store,
};
use crate::telemetry;

/// How a strategy takes units from `available` into `reserved` inside the reserve transaction.
/// `items` come in ascending product id; the taker must lock in that order, and must fail with
/// [`Error::InsufficientStock`] or [`Error::UnknownProduct`] naming the product that ran out.
#[async_trait]
pub trait UnitTaker: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    async fn take(&self, client: &Client, items: &[(ProductId, Quantity)]) -> Result<(), Error>;
}

const LIVE_INDEX: &str = "reservations_live_order_product";
/// A unique violation on the live index means a concurrent copy of this order committed first;
/// rerunning sees its rows and answers as a replay. Twice is enough; the bound is a guard.
const REPLAY_RACE_ATTEMPTS: usize = 3;

const ORDER_ROWS: &str = "SELECT id, product_id, quantity, status, expires_at FROM reservations \
     WHERE order_id = $1 ORDER BY product_id, created_at";
const ORDER_ROWS_FOR_UPDATE: &str = "SELECT id, product_id, quantity, status, expires_at \
     FROM reservations WHERE order_id = $1 ORDER BY product_id, created_at FOR UPDATE";
const INSERT_RESERVATIONS: &str = "INSERT INTO reservations \
     (id, order_id, product_id, quantity, expires_at) \
     SELECT unnest($1::uuid[]), $2, unnest($3::bigint[]), unnest($4::int[]), \
            now() + make_interval(secs => $5) \
     RETURNING product_id, quantity, expires_at";
const LOCK_STOCK: &str =
    "SELECT product_id FROM stock WHERE product_id = ANY($1) ORDER BY product_id FOR UPDATE";
pub(crate) const APPLY_DELTAS: &str = "UPDATE stock s SET available = s.available + d.a, \
     reserved = s.reserved + d.r, version = s.version + 1, updated_at = now() \
     FROM unnest($1::bigint[], $2::int[], $3::int[]) AS d(product_id, a, r) \
     WHERE s.product_id = d.product_id";
const SETTLE: &str =
    "UPDATE reservations SET status = $2, settled_at = clock_timestamp() WHERE id = ANY($1)";

#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub id: Uuid,
    pub item: ReservedItem,
}

pub(crate) fn parse_rows(rows: &[tokio_postgres::Row]) -> Result<Vec<Row>, Error> {
    rows.iter()
        .map(|r| {
            let status: String = r.try_get(3)?;
            Ok(Row {
                id: r.try_get(0)?,
                item: ReservedItem {
                    product_id: ProductId::new(r.try_get(1)?)?,
                    quantity: r.try_get(2)?,
                    status: Status::parse(&status),
                    expires_at: r.try_get(4)?,
                },
            })
        })
        .collect()
}

/// What to do with a reserve request, given the order's existing rows.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Every requested product is live with the same quantity, nothing else is live.
    Replay,
    Conflict,
    /// Take these; the rest of the request is already live.
    Take(Vec<(ProductId, Quantity)>),
}

pub(crate) fn plan(request: &ReserveRequest, existing: &[Row]) -> Plan {
    let live: BTreeMap<ProductId, i32> = existing
        .iter()
        .filter(|r| r.item.status.is_live())
        .map(|r| (r.item.product_id, r.item.quantity))
        .collect();
    let dead: Vec<ProductId> = existing
        .iter()
        .filter(|r| !r.item.status.is_live())
        .map(|r| r.item.product_id)
        .collect();
    // A live product the request does not carry, or carries with another quantity: conflict.
    for (product, quantity) in &live {
        if request.items.get(*product).map(Quantity::get) != Some(*quantity) {
            return Plan::Conflict;
        }
    }
    let missing: Vec<(ProductId, Quantity)> = request
        .items
        .iter()
        .filter(|(p, _)| !live.contains_key(p))
        .collect();
    if missing.is_empty() {
        return Plan::Replay;
    }
    // Adding products to an order that still holds some is allowed only for products whose
    // reservation expired or was released (the re-reserve after a partial confirm).
    if !live.is_empty() && missing.iter().any(|(p, _)| !dead.contains(p)) {
        return Plan::Conflict;
    }
    Plan::Take(missing)
}

/// Why a conditional take found nothing: the product does not exist, or it ran out.
pub async fn refusal(client: &Client, product: ProductId, quantity: Quantity) -> Error {
    let row = client
        .query_opt(
            "SELECT available FROM stock WHERE product_id = $1",
            &[&product.get()],
        )
        .await;
    match row {
        Ok(None) => Error::UnknownProduct(product),
        Ok(Some(r)) => Error::InsufficientStock {
            product_id: product,
            requested: quantity.get(),
            available: r.get(0),
        },
        Err(e) => e.into(),
    }
}

pub(crate) async fn reserve(
    store: &Store,
    taker: &dyn UnitTaker,
    request: &ReserveRequest,
) -> Result<Reservation, Error> {
    let mut last = None;
    for _ in 0..REPLAY_RACE_ATTEMPTS {
        let result = in_transaction(
            &store.pool,
            &store.tx,
            "reserve",
            move |client| crate::tx_body!(client => reserve_tx(client, taker, request)),
        )
        .await;
        match result {
            Err(e) if e.is_unique_violation_of(LIVE_INDEX) => last = Some(e),
            other => return other,
        }
    }
    Err(last.unwrap_or_else(|| Error::IdempotencyConflict(request.order_id.clone())))
}

async fn reserve_tx(
    client: &Client,
    taker: &dyn UnitTaker,
    request: &ReserveRequest,
) -> Result<Reservation, Error> {
    let stmt = client.prepare_cached(ORDER_ROWS).await?;
    let existing = parse_rows(&client.query(&stmt, &[&request.order_id.as_str()]).await?)?;
    let take = match plan(request, &existing) {
        Plan::Replay => {
            return Ok(Reservation {
                order_id: request.order_id.clone(),
                items: live_items(&existing),
                replayed: true,
            })
        }
        Plan::Conflict => return Err(Error::IdempotencyConflict(request.order_id.clone())),
        Plan::Take(take) => take,
    };

    let started = Instant::now();
    taker.take(client, &take).await?;
    metrics::histogram!(telemetry::STOCK_LOCK_WAIT, "strategy" => taker.name())
        .record(started.elapsed().as_secs_f64());

    let ids: Vec<Uuid> = take.iter().map(|_| Uuid::new_v4()).collect();
    let products: Vec<i64> = take.iter().map(|(p, _)| p.get()).collect();
    let quantities: Vec<i32> = take.iter().map(|(_, q)| q.get()).collect();
    let ttl_s = request.ttl.as_duration().as_secs_f64();
    let stmt = client.prepare_cached(INSERT_RESERVATIONS).await?;
    let inserted = client
        .query(
            &stmt,
            &[
                &ids,
                &request.order_id.as_str(),
                &products,
                &quantities,
                &ttl_s,
            ],
        )
        .await?;
    let mut items = live_items(&existing);
    for r in inserted {
        let expires_at: DateTime<Utc> = r.try_get(2)?;
        items.push(ReservedItem {
            product_id: ProductId::new(r.try_get(0)?)?,
            quantity: r.try_get(1)?,
            status: Status::Active,
            expires_at,
        });
    }
    items.sort_by_key(|i| i.product_id);
    Ok(Reservation {
        order_id: request.order_id.clone(),
        items,
        replayed: false,
    })
}

pub(crate) fn live_items(rows: &[Row]) -> Vec<ReservedItem> {
    rows.iter()
        .filter(|r| r.item.status.is_live())
        .map(|r| r.item.clone())
        .collect()
}

/// Adds (available, reserved) deltas to stock rows, locking them in ascending product id.
pub(crate) async fn apply_deltas(
    client: &Client,
    deltas: &BTreeMap<ProductId, (i32, i32)>,
) -> Result<(), Error> {
    if deltas.is_empty() {
        return Ok(());
    }
    let products: Vec<i64> = deltas.keys().map(|p| p.get()).collect();
    if deltas.len() > 1 {
        // One multi-row UPDATE locks in plan order; lock explicitly in id order first.
        let stmt = client.prepare_cached(LOCK_STOCK).await?;
        client.query(&stmt, &[&products]).await?;
    }
    let available: Vec<i32> = deltas.values().map(|d| d.0).collect();
    let reserved: Vec<i32> = deltas.values().map(|d| d.1).collect();
    let stmt = client.prepare_cached(APPLY_DELTAS).await?;
    client
        .execute(&stmt, &[&products, &available, &reserved])
        .await?;
    Ok(())
}

/// Moves `rows` (locked, active) to `status` and applies their stock deltas.
pub(crate) async fn settle(client: &Client, rows: &[&Row], status: Status) -> Result<(), Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut deltas: BTreeMap<ProductId, (i32, i32)> = BTreeMap::new();
    for r in rows {
        let d = deltas.entry(r.item.product_id).or_default();
        let back_to_available = if status == Status::Confirmed {
            0
        } else {
            r.item.quantity
        };
        d.0 += back_to_available;
        d.1 -= r.item.quantity;
    }
    apply_deltas(client, &deltas).await?;
    // settled_at is taken after the stock rows are locked, so it orders consistently with the
    // physical counts the audit compares against.
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let status_text = match status {
        Status::Confirmed => "confirmed",
        Status::Released => "released",
        Status::Expired => "expired",
        Status::Active => "active",
    };
    let stmt = client.prepare_cached(SETTLE).await?;
    client.execute(&stmt, &[&ids, &status_text]).await?;
    Ok(())
}

async fn lock_order(client: &Client, order_id: &OrderId) -> Result<Vec<Row>, Error> {
    let stmt = client.prepare_cached(ORDER_ROWS_FOR_UPDATE).await?;
    let rows = parse_rows(&client.query(&stmt, &[&order_id.as_str()]).await?)?;
    if rows.is_empty() {
        return Err(Error::UnknownOrder(order_id.clone()));
    }
    Ok(rows)
}

pub(crate) async fn confirm(store: &Store, order_id: &OrderId) -> Result<ConfirmOutcome, Error> {
    let outcome = in_transaction(&store.pool, &store.tx, "confirm", move |client| {
        crate::tx_body!(client => async {
            let mut rows = lock_order(client, order_id).await?;
            let active: Vec<&Row> = rows
                .iter()
                .filter(|r| r.item.status == Status::Active)
                .collect();
            settle(client, &active, Status::Confirmed).await?;
            let newly = active.len() as u64;
            for r in rows.iter_mut() {
                if r.item.status == Status::Active {
                    r.item.status = Status::Confirmed;
                }
            }
            let confirmed: Vec<ReservedItem> = rows
                .iter()
                .filter(|r| r.item.status == Status::Confirmed)
                .map(|r| r.item.clone())
                .collect();
            let missing = missing_items(&rows);
            Ok((
                ConfirmOutcome {
                    order_id: order_id.clone(),
                    confirmed,
                    missing,
                },
                newly,
            ))
        })
    })
    .await?;
    telemetry::settled("confirmed", outcome.1);
    if !outcome.0.missing.is_empty() && outcome.1 > 0 {
        metrics::counter!(telemetry::CONFIRMED_WITH_MISSING).increment(1);
    }
    Ok(outcome.0)
}

/// Products whose latest row is dead and that have no live row.
pub(crate) fn missing_items(rows: &[Row]) -> Vec<ReservedItem> {
    let mut latest: BTreeMap<ProductId, &ReservedItem> = BTreeMap::new();
    for r in rows {
        // Rows come ordered by product then creation, so the last one per product wins.
        latest.insert(r.item.product_id, &r.item);
    }
    latest
        .into_values()
        .filter(|i| !i.status.is_live())
        .cloned()
        .collect()
}

pub(crate) async fn release(store: &Store, order_id: &OrderId) -> Result<ReleaseOutcome, Error> {
    let (outcome, newly) = in_transaction(&store.pool, &store.tx, "release", move |client| {
        crate::tx_body!(client => async {
            let rows = lock_order(client, order_id).await?;
            let active: Vec<&Row> = rows
                .iter()
                .filter(|r| r.item.status == Status::Active)
                .collect();
            settle(client, &active, Status::Released).await?;
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
    let client = store
        .pool
        .get()
        .await
        .map_err(|e| Error::Pool(e.to_string()))?;
    let stmt = client.prepare_cached(ORDER_ROWS).await?;
    let rows = parse_rows(&client.query(&stmt, &[&order_id.as_str()]).await?)?;
    if rows.is_empty() {
        return Err(Error::UnknownOrder(order_id.clone()));
    }
    Ok(rows.into_iter().map(|r| r.item).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{OrderItems, Ttl};

    fn row(product: i64, quantity: i32, status: Status) -> Row {
        Row {
            id: Uuid::new_v4(),
            item: ReservedItem {
                product_id: ProductId::new(product).expect("id"),
                quantity,
                status,
                expires_at: Utc::now(),
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

    #[test]
    fn idempotency_plans() {
        use Status::*;
        assert!(matches!(plan(&req(&[(1, 1)]), &[]), Plan::Take(_)));
        assert_eq!(plan(&req(&[(1, 1)]), &[row(1, 1, Active)]), Plan::Replay);
        assert_eq!(plan(&req(&[(1, 1)]), &[row(1, 1, Confirmed)]), Plan::Replay);
        assert_eq!(plan(&req(&[(1, 2)]), &[row(1, 1, Active)]), Plan::Conflict);
        assert_eq!(plan(&req(&[(2, 1)]), &[row(1, 1, Active)]), Plan::Conflict);
        assert_eq!(
            plan(&req(&[(1, 1), (2, 1)]), &[row(1, 1, Active)]),
            Plan::Conflict
        );
        // Re-reserve of what expired, keeping what is still held.
        let p = plan(
            &req(&[(1, 1), (2, 1)]),
            &[row(1, 1, Confirmed), row(2, 1, Expired)],
        );
        assert_eq!(
            p,
            Plan::Take(vec![(
                ProductId::new(2).expect("id"),
                Quantity::new(1).expect("q")
            )])
        );
        // A fully released order may be reserved again.
        assert!(matches!(
            plan(&req(&[(1, 1)]), &[row(1, 1, Released)]),
            Plan::Take(_)
        ));
    }
}
