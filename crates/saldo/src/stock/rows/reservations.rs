//! Reservation rows: the row model, reading and locking an order's rows, writing new rows,
//! settling them, and (on Citus) the `orders` router that says which shards an order's rows
//! live on.
//!
//! On Citus an order is read through its router row (`orders.products`), then only those
//! products' shards, and locked per product of the router, ascending; the router is written by
//! every reserve after its stock locks (a router written before the rows it routes to could
//! close a lock cycle across workers).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::domain::{OrderId, ProductId, Quantity, Tags, Ttl};
use crate::error::Error;
use crate::stock::model::{parse_status, ReservedItem, Row, Status, StockRow};
use crate::stock::rows::stock;
use crate::stock::sql;
use crate::store::dialect::{Param, Tx};
use crate::store::tags;

/// A unique violation on the live index means a concurrent copy of this order committed first;
/// rerunning sees its rows and answers as a replay (`in_idempotent_transaction`).
pub(crate) const LIVE_INDEX: &str = "reservations_live_order_product";

/// Reads rows selected with [`crate::reservation_columns!`], by column name. A row stored active
/// but past its expiry (`lapsed`, decided by the database's clock in the same statement) reads
/// as expired: it is, for every operation, whether or not the sweeper has run.
pub(crate) fn parse(rows: &[tokio_postgres::Row]) -> Result<Vec<Row>, Error> {
    rows.iter()
        .map(|r| {
            let lapsed: bool = r.try_get("lapsed")?;
            let stored = parse_status(&r.try_get::<_, String>("status")?)?;
            Ok(Row {
                id: r.try_get("id")?,
                order_id: r.try_get("order_id")?,
                request_key: r.try_get("request_key")?,
                created_at: r.try_get("created_at")?,
                allocated: r.try_get("allocated")?,
                lapsed,
                order_position: r.try_get("order_position")?,
                tags: tags::from_row(r)?,
                item: ReservedItem {
                    product_id: ProductId::new(r.try_get("product_id")?)?,
                    quantity: r.try_get("quantity")?,
                    status: if lapsed { Status::Expired } else { stored },
                    expires_at: r.try_get("expires_at")?,
                    backordered: r.try_get("backordered")?,
                    allocations: Vec::new(),
                    returned: r.try_get("returned")?,
                },
            })
        })
        .collect()
}

/// The products of an order's router row (none: the order has no rows). Citus only.
async fn routed_products(tx: &Tx<'_>, order_id: &str) -> Result<Vec<i64>, Error> {
    let row = tx
        .query_opt(&sql::CITUS_ORDER_PRODUCTS, &[&order_id])
        .await?;
    let mut products: Vec<i64> = match row {
        Some(r) => r.try_get("products")?,
        None => Vec::new(),
    };
    products.sort_unstable();
    products.dedup();
    Ok(products)
}

/// One order's rows, unlocked, per product oldest first.
pub(crate) async fn of_order(tx: &Tx<'_>, order_id: &OrderId) -> Result<Vec<Row>, Error> {
    if !tx.dialect().is_citus() {
        return parse(&tx.query(&sql::ORDER_ROWS, &[&order_id.as_str()]).await?);
    }
    let products = routed_products(tx, order_id.as_str()).await?;
    if products.is_empty() {
        return Ok(Vec::new());
    }
    let rows = tx
        .query(&sql::CITUS_ORDER_ROWS, &[&order_id.as_str(), &products])
        .await?;
    parse(&rows)
}

/// One order's rows, locked, per product oldest first: confirm, release and extend's first step.
pub(crate) async fn lock_order(tx: &Tx<'_>, order_id: &OrderId) -> Result<Vec<Row>, Error> {
    if !tx.dialect().is_citus() {
        let rows = tx
            .query(&sql::ORDER_ROWS_FOR_UPDATE, &[&order_id.as_str()])
            .await?;
        return parse(&rows);
    }
    lock_orders(tx, &[order_id.as_str()]).await
}

/// Many orders' rows, unlocked (a batch reads them under its stock locks).
pub(crate) async fn of_orders(tx: &Tx<'_>, order_ids: &[&str]) -> Result<Vec<Row>, Error> {
    parse(&tx.query(&sql::ORDERS_ROWS, &[&order_ids]).await?)
}

/// Locks stock rows (ascending product id) and reads many orders' rows under those locks: on
/// one node pipelined (both statements go out at once and the server runs them in order, so the
/// read sees the state under the lock); on Citus the read follows the locks, which take one
/// product per statement.
pub(crate) async fn lock_stock_and_read(
    tx: &Tx<'_>,
    products: &[i64],
    order_ids: &[&str],
) -> Result<(BTreeMap<i64, StockRow>, Vec<Row>), Error> {
    if tx.dialect().is_citus() {
        let locked = stock::lock(tx, products).await?;
        return Ok((locked, of_orders(tx, order_ids).await?));
    }
    futures::try_join!(stock::lock(tx, products), of_orders(tx, order_ids))
}

/// Many orders' rows, locked: on one node in (order, product, created) order by one statement;
/// on Citus per product of their routers, ascending, then by order (the rows come back in
/// product order, which is all the callers rely on).
pub(crate) async fn lock_orders(tx: &Tx<'_>, keys: &[&str]) -> Result<Vec<Row>, Error> {
    if !tx.dialect().is_citus() {
        return parse(&tx.query(&sql::ORDERS_ROWS_FOR_UPDATE, &[&keys]).await?);
    }
    let mut per_product: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
    for r in tx.query(&sql::CITUS_ORDERS_PRODUCTS, &[&keys]).await? {
        let order_id: String = r.try_get("order_id")?;
        for product in r.try_get::<_, Vec<i64>>("products")? {
            per_product
                .entry(product)
                .or_default()
                .insert(order_id.clone());
        }
    }
    let mut rows = Vec::new();
    for (product, orders) in per_product {
        let orders: Vec<&str> = orders.iter().map(String::as_str).collect();
        let locked = tx
            .query(
                &sql::CITUS_PRODUCT_ORDERS_ROWS_FOR_UPDATE,
                &[&product, &orders],
            )
            .await?;
        rows.extend(parse(&locked)?);
    }
    Ok(rows)
}

/// Up to `batch` due rows, locked with SKIP LOCKED. On Citus: the products with due rows are
/// found unlocked, then each one's due rows are locked in ascending product id (its expiry
/// order within the product), until the batch is full.
pub(crate) async fn lock_due(tx: &Tx<'_>, batch: i64) -> Result<Vec<Row>, Error> {
    if !tx.dialect().is_citus() {
        return parse(&tx.query(&sql::DUE_ROWS, &[&batch]).await?);
    }
    let products: Vec<i64> = tx
        .query(&sql::CITUS_DUE_PRODUCTS, &[&batch])
        .await?
        .iter()
        .map(|r| r.try_get("product_id"))
        .collect::<Result<_, _>>()?;
    lock_due_of(tx, &products, batch).await
}

/// Whether any reservation of `products` is due (unlocked; see [`sql::ANY_DUE_OF`]).
pub(crate) async fn any_due_of(tx: &Tx<'_>, products: &[i64]) -> Result<bool, Error> {
    let row = tx.query_one(&sql::ANY_DUE_OF, &[&products]).await?;
    Ok(row.try_get("due")?)
}

/// Up to `batch` due rows of `products` (ascending), locked with SKIP LOCKED, product by
/// product: never waits, so it may run after other locks are taken.
pub(crate) async fn lock_due_of(
    tx: &Tx<'_>,
    products: &[i64],
    batch: i64,
) -> Result<Vec<Row>, Error> {
    let mut rows = Vec::new();
    for product in products {
        let left = batch - rows.len() as i64;
        if left <= 0 {
            break;
        }
        let due = tx.query(&sql::PRODUCT_DUE_ROWS, &[product, &left]).await?;
        rows.extend(parse(&due)?);
    }
    Ok(rows)
}

/// Moves rows (locked) to `status`, each with its order's new event position; `settled_at`
/// from the clock read now (after the stock rows were locked: the audit orders settles against
/// counts by it). On Citus the clock is read by its own statement.
pub(crate) async fn settle(tx: &Tx<'_>, rows: &[(&Row, i64)], status: Status) -> Result<(), Error> {
    let ids: Vec<Uuid> = rows.iter().map(|(r, _)| r.id).collect();
    let products: Vec<i64> = rows.iter().map(|(r, _)| r.item.product_id.get()).collect();
    let positions: Vec<i64> = rows.iter().map(|(_, p)| *p).collect();
    let status = status.as_str();
    if !tx.dialect().is_citus() {
        tx.execute(&sql::SETTLE, &[&ids, &products, &positions, &status])
            .await?;
        return Ok(());
    }
    let at: DateTime<Utc> = tx.query_one(&sql::CLOCK, &[]).await?.try_get("at")?;
    tx.execute(
        &sql::CITUS_SETTLE,
        &[&ids, &products, &positions, &status, &at],
    )
    .await?;
    Ok(())
}

/// The last event position of each of `order_ids` (orders without rows are absent).
pub(crate) async fn positions(
    tx: &Tx<'_>,
    order_ids: &[&str],
) -> Result<HashMap<String, i64>, Error> {
    let rows = tx.query(&sql::ORDER_POSITIONS, &[&order_ids]).await?;
    rows.iter()
        .map(|r| Ok((r.try_get("order_id")?, r.try_get("position")?)))
        .collect()
}

/// Moves the expiry of `ids` (locked, active) to now + `ttl`; answers each row's new expiry.
pub(crate) async fn extend(
    tx: &Tx<'_>,
    ids: &[Uuid],
    ttl: Ttl,
    position: i64,
) -> Result<HashMap<Uuid, DateTime<Utc>>, Error> {
    let ttl_s = ttl.as_duration().as_secs_f64();
    let updated = tx
        .query(&sql::EXTEND_ROWS, &[&ids, &ttl_s, &position])
        .await?;
    if updated.len() != ids.len() {
        // The rows were locked and active: nothing can have moved them.
        return Err(Error::invariant(format!(
            "extended {} of {} locked active rows",
            updated.len(),
            ids.len()
        )));
    }
    updated
        .iter()
        .map(|r| Ok((r.try_get("id")?, r.try_get("expires_at")?)))
        .collect()
}

/// The transaction's clock (`now()`): the instant its comparisons of expiries are made at.
pub(crate) async fn now(tx: &Tx<'_>) -> Result<DateTime<Utc>, Error> {
    Ok(tx.query_one(&sql::NOW, &[]).await?.try_get("now")?)
}

/// Reservation rows to write, as the parallel arrays [`sql::INSERT_RESERVATIONS`] takes: one
/// order's items (reserve, re-reserve) or a whole batch's.
#[derive(Debug, Default)]
pub(crate) struct NewRows<'a> {
    ids: Vec<Uuid>,
    orders: Vec<&'a str>,
    products: Vec<i64>,
    quantities: Vec<i32>,
    ttls_s: Vec<f64>,
    request_keys: Vec<Option<&'a str>>,
    /// Which rows have allocations; all false but on located products.
    allocated: Vec<bool>,
    /// The order's event position the row is written with (its `reservation.created` event).
    positions: Vec<i64>,
    /// The order's reference and metadata (on the rows of its first request only).
    tags: Vec<&'a Tags>,
}

/// What every row of one order's new lines shares.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OrderLines<'a> {
    pub order_id: &'a OrderId,
    pub ttl: Ttl,
    pub request_key: Option<&'a str>,
    /// The order's event position the rows are written with (its `reservation.created`).
    pub position: i64,
    /// The order's reference and metadata: its first request's; none for a re-reserve.
    pub tags: &'a Tags,
}

impl<'a> NewRows<'a> {
    pub fn push(
        &mut self,
        id: Uuid,
        order: &OrderLines<'a>,
        product: ProductId,
        quantity: Quantity,
    ) {
        self.positions.push(order.position);
        self.ids.push(id);
        self.orders.push(order.order_id.as_str());
        self.products.push(product.get());
        self.quantities.push(quantity.get());
        self.ttls_s.push(order.ttl.as_duration().as_secs_f64());
        self.request_keys.push(order.request_key);
        self.allocated.push(false);
        self.tags.push(order.tags);
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

    /// The row pushed `i`-th, as the engine will hold it once written (with the database's
    /// `created_at` and `expires_at`).
    /// The rows' references and metadata as the INSERT binds them (one element per row).
    fn tag_columns(&self) -> (Vec<Option<&str>>, Vec<Option<serde_json::Value>>) {
        self.tags
            .iter()
            .map(|t| {
                (
                    t.reference.as_ref().map(|r| r.as_str()),
                    t.metadata.as_ref().map(|m| m.to_json()),
                )
            })
            .unzip()
    }

    fn written(
        &self,
        i: usize,
        created_at: DateTime<Utc>,
        expires_at: DateTime<Utc>,
    ) -> Result<Row, Error> {
        Ok(Row {
            id: self.ids[i],
            order_id: self.orders[i].to_owned(),
            request_key: self.request_keys[i].map(str::to_owned),
            created_at,
            allocated: self.allocated[i],
            lapsed: false,
            order_position: self.positions[i],
            tags: self.tags[i].clone(),
            item: ReservedItem {
                product_id: ProductId::new(self.products[i])?,
                quantity: self.quantities[i],
                status: Status::Active,
                expires_at,
                backordered: 0,
                allocations: Vec::new(),
                returned: 0,
            },
        })
    }
}

/// Writes `rows` and answers them as rows, in the order given, with the database's
/// `created_at` and `expires_at`: on one node in one statement; on Citus as multi-row `VALUES`
/// of at most [`sql::RESERVATIONS_VALUES_CHUNK`] rows each. Every row must come back: anything
/// else is an invariant failure, never a shorter answer.
pub(crate) async fn insert(tx: &Tx<'_>, rows: &NewRows<'_>) -> Result<Vec<Row>, Error> {
    let (references, metadata) = rows.tag_columns();
    let returned = if tx.dialect().is_citus() {
        insert_values(tx, rows, (&references, &metadata)).await?
    } else {
        let params: [Param<'_>; 10] = [
            &rows.ids,
            &rows.orders,
            &rows.products,
            &rows.quantities,
            &rows.ttls_s,
            &rows.request_keys,
            &rows.allocated,
            &rows.positions,
            &references,
            &metadata,
        ];
        tx.query(&sql::INSERT_RESERVATIONS, &params).await?
    };
    let mut times: HashMap<Uuid, (DateTime<Utc>, DateTime<Utc>)> =
        HashMap::with_capacity(returned.len());
    for r in &returned {
        times.insert(
            r.try_get("id")?,
            (r.try_get("created_at")?, r.try_get("expires_at")?),
        );
    }
    (0..rows.len())
        .map(|i| {
            let Some(&(created_at, expires_at)) = times.get(&rows.ids[i]) else {
                return Err(Error::invariant(format!(
                    "inserted {} reservation rows, expected {}: row {} did not come back",
                    returned.len(),
                    rows.len(),
                    rows.ids[i]
                )));
            };
            rows.written(i, created_at, expires_at)
        })
        .collect()
}

/// The Citus form of [`insert`]: multi-row `VALUES`, chunked.
async fn insert_values(
    tx: &Tx<'_>,
    rows: &NewRows<'_>,
    (references, metadata): (&[Option<&str>], &[Option<serde_json::Value>]),
) -> Result<Vec<tokio_postgres::Row>, Error> {
    if rows.allocated.iter().any(|&a| a) {
        return Err(Error::invariant(
            "reservation rows with allocations on Citus (stock per location is not offered there)",
        ));
    }
    let mut returned = Vec::with_capacity(rows.len());
    let width = sql::CITUS_INSERT_RESERVATIONS.width();
    for start in (0..rows.len()).step_by(sql::RESERVATIONS_VALUES_CHUNK) {
        let end = (start + sql::RESERVATIONS_VALUES_CHUNK).min(rows.len());
        let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(width * (end - start));
        for i in start..end {
            params.push(&rows.ids[i]);
            params.push(&rows.orders[i]);
            params.push(&rows.products[i]);
            params.push(&rows.quantities[i]);
            params.push(&rows.ttls_s[i]);
            params.push(&rows.request_keys[i]);
            params.push(&rows.positions[i]);
            params.push(&references[i]);
            params.push(&metadata[i]);
        }
        let text = sql::CITUS_INSERT_RESERVATIONS.statement(end - start);
        let stmt = tx.client().prepare_cached(&text).await?;
        returned.extend(tx.client().query(&stmt, &params).await?);
    }
    Ok(returned)
}

/// Writes the routers of new rows (Citus only; a no-op on one node; after the stock locks, see
/// the module header): each order's row gains the products it did not list yet. `known` holds,
/// per order, the products its existing rows showed, which are routed already.
pub(crate) async fn route(
    tx: &Tx<'_>,
    new_rows: impl IntoIterator<Item = (&str, i64)>,
    known: &HashMap<&str, HashSet<i64>>,
) -> Result<(), Error> {
    if !tx.dialect().is_citus() {
        return Ok(());
    }
    let mut pairs: BTreeSet<(&str, i64)> = BTreeSet::new();
    for (order_id, product) in new_rows {
        if !known.get(order_id).is_some_and(|k| k.contains(&product)) {
            pairs.insert((order_id, product));
        }
    }
    if pairs.is_empty() {
        return Ok(());
    }
    // One row per order; the pairs are sorted, so each order's products come ascending and
    // distinct.
    let mut per_order: Vec<(&str, Vec<i64>)> = Vec::new();
    for (order_id, product) in pairs {
        match per_order.last_mut() {
            Some((last, products)) if *last == order_id => products.push(product),
            _ => per_order.push((order_id, vec![product])),
        }
    }
    // Chunked like the reservation rows: a bounded number of statement texts.
    for chunk in per_order.chunks(sql::RESERVATIONS_VALUES_CHUNK) {
        let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(2 * chunk.len());
        for (order_id, products) in chunk {
            params.push(order_id);
            params.push(products);
        }
        let text = sql::CITUS_ROUTE_ORDERS.statement(chunk.len());
        let stmt = tx.client().prepare_cached(&text).await?;
        tx.client().execute(&stmt, &params).await?;
    }
    Ok(())
}
