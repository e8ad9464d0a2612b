//! The few stock steps whose SQL differs on Citus, each a small function that picks the
//! statement by the schema's [`Layout`]: on one node the statement of `stock::sql` runs as it
//! always did; on Citus its twin takes its locks one product (the distribution value) per
//! statement in ascending product id, reads an order through its router row (`orders`) so it
//! visits only its products' shards, and writes that router after the ordered stock locks
//! (ARCHITECTURE.md, "On Citus": Citus refuses a `FOR UPDATE` spanning shards, and a router
//! written before the rows it routes to could close a lock cycle across workers).

use std::collections::{BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Utc};
use deadpool_postgres::Client;
use uuid::Uuid;

use crate::domain::OrderId;
use crate::error::Error;
use crate::stock::lifecycle::{parse_rows, Row};
use crate::stock::sql::{
    route_orders_values, APPLY_DELTAS, APPLY_ONE_DELTA, CLOCK, DUE_PRODUCTS, DUE_ROWS,
    LOCK_ONE_STOCK, LOCK_STOCK, ORDERS_PRODUCTS, ORDERS_ROWS_FOR_UPDATE, ORDER_PRODUCTS,
    ORDER_ROWS, ORDER_ROWS_FOR_UPDATE, ORDER_ROWS_ROUTED, PROBE_LOCKS, PROBE_ONE_LOCK,
    PRODUCT_DUE_ROWS, PRODUCT_ORDERS_ROWS_FOR_UPDATE, SETTLE, SETTLE_AT,
};
use crate::store::schema::Layout;

/// The products of an order's router row (none: the order has no rows).
async fn routed_products(client: &Client, order_id: &str) -> Result<Vec<i64>, Error> {
    let stmt = client.prepare_cached(ORDER_PRODUCTS).await?;
    let row = client.query_opt(&stmt, &[&order_id]).await?;
    let mut products: Vec<i64> = match row {
        Some(r) => r.try_get("products")?,
        None => Vec::new(),
    };
    products.sort_unstable();
    products.dedup();
    Ok(products)
}

/// One order's rows, unlocked, per product oldest first.
pub(crate) async fn order_rows(
    client: &Client,
    layout: Layout,
    order_id: &OrderId,
) -> Result<Vec<Row>, Error> {
    let rows = match layout {
        Layout::Single => {
            let stmt = client.prepare_cached(ORDER_ROWS).await?;
            client.query(&stmt, &[&order_id.as_str()]).await?
        }
        Layout::Citus => {
            let products = routed_products(client, order_id.as_str()).await?;
            if products.is_empty() {
                return Ok(Vec::new());
            }
            let stmt = client.prepare_cached(ORDER_ROWS_ROUTED).await?;
            client
                .query(&stmt, &[&order_id.as_str(), &products])
                .await?
        }
    };
    parse_rows(&rows)
}

/// One order's rows, locked, per product oldest first: confirm, release and extend's first step.
pub(crate) async fn lock_order_rows(
    client: &Client,
    layout: Layout,
    order_id: &OrderId,
) -> Result<Vec<Row>, Error> {
    match layout {
        Layout::Single => {
            let stmt = client.prepare_cached(ORDER_ROWS_FOR_UPDATE).await?;
            parse_rows(&client.query(&stmt, &[&order_id.as_str()]).await?)
        }
        Layout::Citus => lock_orders_rows(client, layout, &[order_id.as_str()]).await,
    }
}

/// Many orders' rows, locked: on one node in (order, product, created) order by one statement;
/// on Citus per product of their routers, ascending, then by order (the rows come back in
/// product order, which is all the callers rely on).
pub(crate) async fn lock_orders_rows(
    client: &Client,
    layout: Layout,
    keys: &[&str],
) -> Result<Vec<Row>, Error> {
    if layout == Layout::Single {
        let stmt = client.prepare_cached(ORDERS_ROWS_FOR_UPDATE).await?;
        return parse_rows(&client.query(&stmt, &[&keys]).await?);
    }
    let stmt = client.prepare_cached(ORDERS_PRODUCTS).await?;
    let mut per_product: std::collections::BTreeMap<i64, BTreeSet<String>> = Default::default();
    for r in client.query(&stmt, &[&keys]).await? {
        let order_id: String = r.try_get("order_id")?;
        for product in r.try_get::<_, Vec<i64>>("products")? {
            per_product
                .entry(product)
                .or_default()
                .insert(order_id.clone());
        }
    }
    let lock = client
        .prepare_cached(PRODUCT_ORDERS_ROWS_FOR_UPDATE)
        .await?;
    let mut rows = Vec::new();
    for (product, orders) in per_product {
        let orders: Vec<&str> = orders.iter().map(String::as_str).collect();
        rows.extend(parse_rows(
            &client.query(&lock, &[&product, &orders]).await?,
        )?);
    }
    Ok(rows)
}

/// Locks stock rows in ascending product id and returns them (`product_id`, `available`,
/// `backorder_limit`, `located`); `products` must be ascending and distinct.
pub(crate) async fn lock_stock(
    client: &Client,
    layout: Layout,
    products: &[i64],
) -> Result<Vec<tokio_postgres::Row>, Error> {
    debug_assert!(products.windows(2).all(|w| w[0] < w[1]));
    match layout {
        Layout::Single => {
            let stmt = client.prepare_cached(LOCK_STOCK).await?;
            Ok(client.query(&stmt, &[&products]).await?)
        }
        Layout::Citus => {
            let stmt = client.prepare_cached(LOCK_ONE_STOCK).await?;
            let mut rows = Vec::with_capacity(products.len());
            for product in products {
                rows.extend(client.query_opt(&stmt, &[product]).await?);
            }
            Ok(rows)
        }
    }
}

/// Of `products` (ascending), those no other transaction holds locked (never waits).
pub(crate) async fn unlocked(
    client: &Client,
    layout: Layout,
    products: &[i64],
) -> Result<HashSet<i64>, Error> {
    let rows = match layout {
        Layout::Single => client.query(PROBE_LOCKS, &[&products]).await?,
        Layout::Citus => {
            let mut rows = Vec::with_capacity(products.len());
            for product in products {
                rows.extend(client.query_opt(PROBE_ONE_LOCK, &[product]).await?);
            }
            rows
        }
    };
    rows.iter()
        .map(|r| r.try_get::<_, i64>("product_id").map_err(Error::from))
        .collect()
}

/// Adds (available, reserved) deltas to stock rows (ascending product id, as given): on one
/// node one UPDATE (after an explicit lock in id order when there are several rows); on Citus
/// one UPDATE per product, in that order, so each statement locks one shard's row. Returns the
/// rows updated.
pub(crate) async fn apply_deltas(
    client: &Client,
    layout: Layout,
    products: &[i64],
    available: &[i32],
    reserved: &[i32],
) -> Result<u64, Error> {
    debug_assert!(products.windows(2).all(|w| w[0] < w[1]));
    match layout {
        Layout::Single => {
            let stmt = client.prepare_cached(APPLY_DELTAS).await?;
            Ok(client
                .execute(&stmt, &[&products, &available, &reserved])
                .await?)
        }
        Layout::Citus => {
            let stmt = client.prepare_cached(APPLY_ONE_DELTA).await?;
            let mut updated = 0;
            for ((product, a), r) in products.iter().zip(available).zip(reserved) {
                updated += client.execute(&stmt, &[product, a, r]).await?;
            }
            Ok(updated)
        }
    }
}

/// Moves rows (locked) to `status`. On Citus the clock is read by its own statement (Citus
/// refuses a VOLATILE function in an UPDATE of a distributed table), still after the stock
/// rows were locked, and the UPDATE is routed by the rows' products.
pub(crate) async fn settle_rows(
    client: &Client,
    layout: Layout,
    rows: &[&Row],
    status: &str,
) -> Result<(), Error> {
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    match layout {
        Layout::Single => {
            let stmt = client.prepare_cached(SETTLE).await?;
            client.execute(&stmt, &[&ids, &status]).await?;
        }
        Layout::Citus => {
            let at: DateTime<Utc> = client.query_one(CLOCK, &[]).await?.try_get("at")?;
            let products: BTreeSet<i64> = rows.iter().map(|r| r.item.product_id.get()).collect();
            let products: Vec<i64> = products.into_iter().collect();
            let stmt = client.prepare_cached(SETTLE_AT).await?;
            client
                .execute(&stmt, &[&ids, &status, &at, &products])
                .await?;
        }
    }
    Ok(())
}

/// Up to `batch` due rows, locked with SKIP LOCKED. On Citus: the products with due rows are
/// found unlocked, then each one's due rows are locked in ascending product id (its expiry
/// order within the product), until the batch is full.
pub(crate) async fn lock_due_rows(
    client: &Client,
    layout: Layout,
    batch: i64,
) -> Result<Vec<Row>, Error> {
    if layout == Layout::Single {
        let stmt = client.prepare_cached(DUE_ROWS).await?;
        return parse_rows(&client.query(&stmt, &[&batch]).await?);
    }
    let stmt = client.prepare_cached(DUE_PRODUCTS).await?;
    let products: Vec<i64> = client
        .query(&stmt, &[&batch])
        .await?
        .iter()
        .map(|r| r.try_get("product_id"))
        .collect::<Result<_, _>>()?;
    let lock = client.prepare_cached(PRODUCT_DUE_ROWS).await?;
    let mut rows = Vec::new();
    for product in products {
        let left = batch - rows.len() as i64;
        if left <= 0 {
            break;
        }
        rows.extend(parse_rows(&client.query(&lock, &[&product, &left]).await?)?);
    }
    Ok(rows)
}

/// Writes the routers of new rows (Citus only; after the stock locks, see the module header):
/// each order's row gains the products it did not list yet. `known` holds, per order, the
/// products its existing rows showed, which are routed already.
pub(crate) async fn route(
    client: &Client,
    layout: Layout,
    new_rows: impl IntoIterator<Item = (&str, i64)>,
    known: &HashMap<&str, HashSet<i64>>,
) -> Result<(), Error> {
    if layout == Layout::Single {
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
    // One row per order (a multi-row VALUES: see `sql::route_orders_values`); the pairs are
    // sorted, so each order's products come ascending and distinct.
    let mut per_order: Vec<(&str, Vec<i64>)> = Vec::new();
    for (order_id, product) in pairs {
        match per_order.last_mut() {
            Some((last, products)) if *last == order_id => products.push(product),
            _ => per_order.push((order_id, vec![product])),
        }
    }
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
        Vec::with_capacity(2 * per_order.len());
    for (order_id, products) in &per_order {
        params.push(order_id);
        params.push(products);
    }
    // One statement text per batch size: bounded by the batch's order count.
    let stmt = client
        .prepare_cached(&route_orders_values(per_order.len()))
        .await?;
    client.execute(&stmt, &params).await?;
    Ok(())
}
