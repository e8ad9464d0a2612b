//! Stock rows: what a take reads of a product, locking rows in the global order, writing
//! deltas, probing locks, and the admin reads and writes (counts, adjustments, repairs,
//! movements).

use std::collections::{BTreeMap, HashSet};

use crate::domain::ProductId;
use crate::error::Error;
use crate::stock::model::{Stock, StockRow};
use crate::stock::sql;
use crate::store::dialect::Tx;
use crate::store::outbox::{NewEvent, StreamType};

/// A [`StockRow`] from a row selected with the take's columns.
fn stock_row(row: &tokio_postgres::Row) -> Result<StockRow, Error> {
    Ok(StockRow {
        available: row.try_get("available")?,
        backorder_limit: row.try_get("backorder_limit")?,
        backordered: row.try_get("backordered")?,
        located: row.try_get("located")?,
    })
}

/// What a declined take sees of `product`, unlocked: `None` when it does not exist.
pub(crate) async fn seen(tx: &Tx<'_>, product: ProductId) -> Result<Option<StockRow>, Error> {
    let row = tx.query_opt(&sql::SEEN_ROW, &[&product.get()]).await?;
    row.as_ref().map(stock_row).transpose()
}

/// Locks the rows of `products` (ascending, distinct: the lock order) and reads them; a product
/// that does not exist is absent from the answer.
pub(crate) async fn lock(tx: &Tx<'_>, products: &[i64]) -> Result<BTreeMap<i64, StockRow>, Error> {
    debug_assert!(products.windows(2).all(|w| w[0] < w[1]));
    let rows = tx.query_keys(&sql::LOCK_STOCK, products, &[]).await?;
    rows.iter()
        .map(|r| Ok((r.try_get("product_id")?, stock_row(r)?)))
        .collect()
}

/// Of `products` (ascending), those no other transaction holds locked (never waits).
pub(crate) async fn unlocked(tx: &Tx<'_>, products: &[i64]) -> Result<HashSet<i64>, Error> {
    let rows = tx.query_keys(&sql::PROBE_LOCKS, products, &[]).await?;
    rows.iter()
        .map(|r| r.try_get::<_, i64>("product_id").map_err(Error::from))
        .collect()
}

/// Records the movement (V22) and the `stock.changed` event of each stock row a write returned
/// (every stock write returns its rows: `stock_update!`). The product's movement seq and stream
/// position are the row's version, which every write moves by one: gap-free, in the order the
/// row lock orders the writes. The movement's cause is the one the flow set on the transaction.
pub fn changed(tx: &Tx<'_>, rows: &[tokio_postgres::Row]) -> Result<(), Error> {
    if let Some(journal) = tx.journal() {
        for row in rows {
            journal.record(
                row.try_get("product_id")?,
                row.try_get("version")?,
                (
                    row.try_get("available")?,
                    row.try_get("reserved")?,
                    row.try_get("backordered")?,
                ),
            );
        }
    }
    if !tx.records_events() {
        return Ok(());
    }
    for row in rows {
        let product: i64 = row.try_get("product_id")?;
        let version: i64 = row.try_get("version")?;
        let data = serde_json::json!({
            "product_id": product,
            "available": row.try_get::<_, i32>("available")?,
            "reserved": row.try_get::<_, i32>("reserved")?,
            "backordered": row.try_get::<_, i32>("backordered")?,
        });
        tx.emit(NewEvent {
            stream_type: StreamType::Product,
            stream_id: product.to_string(),
            position: version,
            kind: STOCK_CHANGED,
            data,
        });
    }
    Ok(())
}

/// The event of a stock row's write.
pub const STOCK_CHANGED: &str = "stock.changed";

/// Runs a stock write and records its events; answers the rows it wrote.
pub(crate) async fn write(
    tx: &Tx<'_>,
    sql: &crate::store::dialect::Sql,
    params: &[crate::store::dialect::Param<'_>],
) -> Result<Vec<tokio_postgres::Row>, Error> {
    let rows = tx.query(sql, params).await?;
    changed(tx, &rows)?;
    Ok(rows)
}

/// Adds (available, reserved) deltas to rows this transaction holds locked (ascending product
/// id): one UPDATE on one node; on Citus one per product, in that order. Returns the rows
/// updated.
pub(crate) async fn write_deltas(
    tx: &Tx<'_>,
    products: &[i64],
    available: &[i32],
    reserved: &[i32],
) -> Result<u64, Error> {
    debug_assert!(products.windows(2).all(|w| w[0] < w[1]));
    if !tx.dialect().is_citus() {
        let rows = write(tx, &sql::APPLY_DELTAS, &[&products, &available, &reserved]).await?;
        return Ok(rows.len() as u64);
    }
    let mut updated = 0;
    for ((product, a), r) in products.iter().zip(available).zip(reserved) {
        updated += write(tx, &sql::APPLY_ONE_DELTA, &[product, a, r])
            .await?
            .len() as u64;
    }
    Ok(updated)
}

/// Adds (available, reserved) deltas to stock rows not locked yet, locking them in ascending
/// product id first when there are several (one multi-row UPDATE locks in plan order).
pub(crate) async fn apply_deltas(
    tx: &Tx<'_>,
    deltas: &BTreeMap<ProductId, (i32, i32)>,
) -> Result<(), Error> {
    if deltas.is_empty() {
        return Ok(());
    }
    let products: Vec<i64> = deltas.keys().map(|p| p.get()).collect();
    if deltas.len() > 1 && !tx.dialect().is_citus() {
        lock(tx, &products).await?;
    }
    let available: Vec<i32> = deltas.values().map(|d| d.0).collect();
    let reserved: Vec<i32> = deltas.values().map(|d| d.1).collect();
    write_deltas(tx, &products, &available, &reserved).await?;
    Ok(())
}

/// What a locked take writes to one row it holds: units out of `available`, into `reserved`
/// (not when sold), and promised (`backordered`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RowDelta {
    pub available: i32,
    pub reserved: i32,
    pub backordered: i32,
}

pub(crate) async fn add(tx: &Tx<'_>, product: ProductId, d: RowDelta) -> Result<(), Error> {
    let params: [crate::store::dialect::Param<'_>; 4] =
        [&product.get(), &d.available, &d.reserved, &d.backordered];
    let updated = write(tx, &sql::ADD_TO_ROW, &params).await?.len();
    if updated != 1 {
        return Err(Error::invariant(format!(
            "the locked take of product {product} updated {updated} rows"
        )));
    }
    Ok(())
}

/// A [`Stock`] from a row with its columns by name (every stock read and `RETURNING`).
pub(crate) fn stock_of(product_id: ProductId, row: &tokio_postgres::Row) -> Result<Stock, Error> {
    Ok(Stock {
        product_id,
        available: row.try_get("available")?,
        reserved: row.try_get("reserved")?,
        version: row.try_get("version")?,
        backorder_limit: row.try_get("backorder_limit")?,
        backordered: row.try_get("backordered")?,
    })
}

/// A product's row as the admin paths read it.
pub(crate) struct AdminRow {
    pub stock: Stock,
    pub located: bool,
    pub bundle: bool,
}

impl AdminRow {
    /// A bundle's own row takes no units (its stock is its components'): every admin path that
    /// would add or move some refuses it here, before the schema's check would.
    pub(crate) fn refuse_bundle(&self) -> Result<(), Error> {
        if self.bundle {
            return Err(Error::ProductIsBundle(self.stock.product_id));
        }
        Ok(())
    }
}

/// Reads `product`'s row, unlocked.
pub(crate) async fn read(tx: &Tx<'_>, product: ProductId) -> Result<Option<Stock>, Error> {
    let row = tx.query_opt(&sql::STOCK_ROW, &[&product.get()]).await?;
    row.map(|r| stock_of(product, &r)).transpose()
}

/// Locks `product`'s row and reads it (`None`: no such product).
pub(crate) async fn lock_one(tx: &Tx<'_>, product: ProductId) -> Result<Option<AdminRow>, Error> {
    let Some(row) = tx.query_opt(&sql::LOCK_ROW, &[&product.get()]).await? else {
        return Ok(None);
    };
    Ok(Some(AdminRow {
        stock: stock_of(product, &row)?,
        located: row.try_get("located")?,
        bundle: row.try_get("bundle")?,
    }))
}

/// Creates `product` at zero when it is new.
pub(crate) async fn ensure(tx: &Tx<'_>, product: ProductId) -> Result<(), Error> {
    tx.execute(&sql::ENSURE_PRODUCT, &[&product.get()]).await?;
    Ok(())
}

/// Sets the row's `available` (a count or an adjustment) and answers the row.
pub(crate) async fn set_available(
    tx: &Tx<'_>,
    product: ProductId,
    available: i32,
) -> Result<Stock, Error> {
    let rows = write(tx, &sql::SET_AVAILABLE, &[&product.get(), &available]).await?;
    one(product, &rows)
}

/// The one row a write of `product` returned.
fn one(product: ProductId, rows: &[tokio_postgres::Row]) -> Result<Stock, Error> {
    match rows {
        [row] => stock_of(product, row),
        _ => Err(Error::invariant(format!(
            "a write of product {product} returned {} rows",
            rows.len()
        ))),
    }
}

/// Sets the row's backorder limit and answers the row.
pub(crate) async fn set_policy(
    tx: &Tx<'_>,
    product: ProductId,
    limit: i32,
) -> Result<Stock, Error> {
    let rows = write(tx, &sql::SET_POLICY, &[&product.get(), &limit]).await?;
    one(product, &rows)
}

/// Writes the counters a repair computed.
pub(crate) async fn repair(
    tx: &Tx<'_>,
    product: ProductId,
    available: i32,
    reserved: i32,
    backordered: i32,
) -> Result<(), Error> {
    let params: [crate::store::dialect::Param<'_>; 4] =
        [&product.get(), &available, &reserved, &backordered];
    write(tx, &sql::REPAIR_ROW, &params).await?;
    Ok(())
}

/// A movement of the product's history (append-only): a count, an adjustment (with its
/// reason), per location or for the whole product. Returns its id.
pub(crate) struct Movement<'a> {
    pub product: ProductId,
    pub kind: &'a str,
    pub quantity: i32,
    pub reason: &'a str,
    pub location: Option<&'a str>,
}

pub(crate) async fn record(tx: &Tx<'_>, m: Movement<'_>) -> Result<i64, Error> {
    let row = tx
        .query_one(
            &sql::RECORD_MOVEMENT,
            &[
                &m.product.get(),
                &m.kind,
                &m.quantity,
                &m.reason,
                &m.location,
            ],
        )
        .await?;
    Ok(row.try_get("id")?)
}
