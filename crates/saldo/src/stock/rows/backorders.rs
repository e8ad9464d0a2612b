//! Backorder bookkeeping on reservation and stock rows: marking new backorders with their
//! arrival numbers, dropping the backorders of released or expired rows, locking a product's
//! live backorders before its stock row (arrival paths), and the rows of a fill.
//!
//! Single node only: a backorder limit is refused on Citus, so no product there has one.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::domain::ProductId;
use crate::error::Error;
use crate::stock::model::{parse_status, Fill, Row, Waiting};
use crate::stock::rows::stock;
use crate::stock::sql;
use crate::store::dialect::Tx;

/// Records the backordered units of just-inserted rows (with their arrival numbers, taken from
/// the sequence under the stock row lock), and on the in-memory rows. `backordered[i]` belongs
/// to `rows[i]`.
pub(crate) async fn mark(tx: &Tx<'_>, rows: &mut [Row], backordered: &[i32]) -> Result<(), Error> {
    let mut ids = Vec::new();
    let mut units = Vec::new();
    for (row, &b) in rows.iter_mut().zip(backordered) {
        if b > 0 {
            row.item.backordered = b;
            ids.push(row.id);
            units.push(b);
        }
    }
    if ids.is_empty() {
        return Ok(());
    }
    tx.execute(&sql::MARK_BACKORDERS, &[&ids, &units]).await?;
    Ok(())
}

/// Takes the backorders of released or expired rows off their products' `backordered` (stock
/// rows already locked by the caller). No statement when none.
pub(crate) async fn drop(tx: &Tx<'_>, rows: &[&Row]) -> Result<(), Error> {
    let mut per_product: BTreeMap<i64, i32> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.item.backordered > 0) {
        *per_product.entry(r.item.product_id.get()).or_default() += r.item.backordered;
    }
    if per_product.is_empty() {
        return Ok(());
    }
    let products: Vec<i64> = per_product.keys().copied().collect();
    let units: Vec<i32> = per_product.values().copied().collect();
    stock::write(tx, &sql::DROP_BACKORDERS, &[&products, &units]).await?;
    Ok(())
}

/// Locks the product's live backorders: called by an arrival path BEFORE it locks the stock
/// row, to keep the global lock order (reservation rows, then stock).
pub(crate) async fn prelock(tx: &Tx<'_>, product: ProductId) -> Result<(), Error> {
    tx.query(&sql::PRELOCK_BACKORDERS, &[&product.get()])
        .await?;
    Ok(())
}

/// The oldest live backorders of `product` that `units` reach, locked, in arrival order.
pub(crate) async fn oldest(
    tx: &Tx<'_>,
    product: ProductId,
    units: i32,
) -> Result<Vec<Waiting>, Error> {
    let rows = tx
        .query(&sql::OLDEST_BACKORDERS, &[&product.get(), &units])
        .await?;
    rows.iter()
        .map(|r| {
            Ok(Waiting {
                id: r.try_get("id")?,
                order_id: r.try_get("order_id")?,
                product_id: ProductId::new(r.try_get("product_id")?)?,
                status: parse_status(&r.try_get::<_, String>("status")?)?,
                backordered: r.try_get("backordered")?,
                arrival: r.try_get("backorder_arrival")?,
            })
        })
        .collect()
}

/// Writes `fills` of `product`'s backorders: each row's remaining backorder, and the
/// append-only `backorder_fills` rows naming the movement that brought the units.
pub(crate) async fn write_fills(
    tx: &Tx<'_>,
    product: ProductId,
    movement_id: i64,
    fills: &[Fill],
) -> Result<(), Error> {
    let ids: Vec<Uuid> = fills.iter().map(|f| f.id).collect();
    let arrivals: Vec<i64> = fills.iter().map(|f| f.arrival).collect();
    let units: Vec<i32> = fills.iter().map(|f| f.units).collect();
    let sold: Vec<bool> = fills.iter().map(|f| f.sold).collect();
    let positions: Vec<i64> = fills.iter().map(|f| f.position).collect();
    tx.execute(&sql::FILL_ROWS, &[&ids, &units, &positions])
        .await?;
    tx.execute(
        &sql::RECORD_FILLS,
        &[&product.get(), &movement_id, &ids, &arrivals, &units, &sold],
    )
    .await?;
    Ok(())
}

/// The stock row's side of a fill: units to reserved (active backorders) or out of on hand
/// (confirmed ones, sold).
pub(crate) async fn fill_stock(
    tx: &Tx<'_>,
    product: ProductId,
    to_reserved: i32,
    to_sold: i32,
) -> Result<(), Error> {
    // Through `stock::write`, like every stock write: its movement and `stock.changed` (the row's
    // version moved; without them the product's journal and event stream would have a gap).
    let params: [crate::store::dialect::Param<'_>; 3] = [&product.get(), &to_reserved, &to_sold];
    stock::write(tx, &sql::FILL_STOCK, &params).await?;
    Ok(())
}
