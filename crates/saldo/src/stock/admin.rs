//! Operator operations on stock: a physical count, an adjustment with a reason, a read. Each
//! writes an append-only `stock_movements` row in the same transaction, so the audit can prove
//! the stock row against its history. Units that arrive (a count above on hand, a positive
//! adjustment) go to the product's backorders first ([`backorders::fill_backorders`]), in the
//! same transaction.

use crate::domain::{ProductId, Reason, MAX_STOCK_COUNT};
use crate::error::{Error, InputError};
use crate::operation::Operation;
use crate::stock::backorders;
use crate::stock::sql::STOCK_ROW;
use crate::stock::types::Stock;
use crate::store::handle::Store;
use crate::store::retry::{checkout, in_transaction};

const LOCK_ROW: &str = "SELECT available, reserved, version, backorder_limit, backordered, \
     located FROM stock WHERE product_id = $1 FOR UPDATE";
const SET_AVAILABLE: &str = crate::stock_update!(
    "available = $2",
    "WHERE product_id = $1 \
     RETURNING available, reserved, version, backorder_limit, backordered"
);
const RECORD: &str = "INSERT INTO stock_movements (product_id, kind, quantity, reason) \
     VALUES ($1, $2, $3, $4) RETURNING id";

/// A [`Stock`] from a row with its columns by name (every stock read and `RETURNING` here).
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

/// After a movement raised on hand by `arrived` units: fill the backorders, and answer the
/// row as it ends up (`written` when nothing was backordered).
async fn after_arrival(
    client: &deadpool_postgres::Client,
    written: Stock,
    arrived: i32,
    movement_id: i64,
) -> Result<Stock, Error> {
    if arrived <= 0 || written.backordered == 0 {
        return Ok(written);
    }
    let filled =
        backorders::fill_backorders(client, written.product_id, arrived, movement_id).await?;
    if filled.total() == 0 {
        return Ok(written);
    }
    let row = client
        .query_one(STOCK_ROW, &[&written.product_id.get()])
        .await?;
    stock_of(written.product_id, &row)
}

/// A product stocked per location is counted per location (`stock::locations::set_count`):
/// its row is the sum of its locations, which a product-wide count or delta would break.
fn refuse_located(product_id: ProductId, row: &tokio_postgres::Row) -> Result<(), Error> {
    if row.try_get::<_, bool>("located")? {
        return Err(Error::StockedByLocation(product_id));
    }
    Ok(())
}

/// Sets the physical count: on-hand (available + reserved) becomes `count`. Creates the
/// product if it is new. Refused when `count` is below what is reserved.
pub async fn set_count(store: &Store, product_id: ProductId, count: i64) -> Result<Stock, Error> {
    if !(0..=i64::from(MAX_STOCK_COUNT)).contains(&count) {
        return Err(InputError::CountOutOfRange(count).into());
    }
    let count = i32::try_from(count).map_err(|_| InputError::CountOutOfRange(count))?;
    in_transaction(&store.pool, &store.tx, Operation::SetCount, move |client| {
        crate::tx_body!(client => async {
            client
                .execute(
                    "INSERT INTO stock (product_id, available) VALUES ($1, 0) \
                     ON CONFLICT (product_id) DO NOTHING",
                    &[&product_id.get()],
                )
                .await?;
            backorders::prelock(client, product_id).await?;
            let row = client.query_one(LOCK_ROW, &[&product_id.get()]).await?;
            refuse_located(product_id, &row)?;
            let current = stock_of(product_id, &row)?;
            if count < current.reserved {
                return Err(Error::CountBelowReserved {
                    product_id,
                    count,
                    reserved: current.reserved,
                });
            }
            let row = client
                .query_one(SET_AVAILABLE, &[&product_id.get(), &(count - current.reserved)])
                .await?;
            let movement = client
                .query_one(RECORD, &[&product_id.get(), &"count", &count, &""])
                .await?;
            let arrived = count - (current.available + current.reserved);
            let written = stock_of(product_id, &row)?;
            after_arrival(client, written, arrived, movement.try_get("id")?).await
        })
    })
    .await
}

/// Adds `delta` (restock > 0, write-off < 0) to available. Refused if available would go negative.
pub async fn adjust(
    store: &Store,
    product_id: ProductId,
    delta: i64,
    reason: &Reason,
) -> Result<Stock, Error> {
    // `unsigned_abs`, not `abs`: `i64::MIN.abs()` overflows (a panic in debug builds, and in
    // release it stays negative, passed the bound and was truncated to a zero-unit movement).
    if delta == 0 || delta.unsigned_abs() > u64::from(MAX_STOCK_COUNT.unsigned_abs()) {
        return Err(InputError::DeltaOutOfRange(delta).into());
    }
    let delta = i32::try_from(delta).map_err(|_| InputError::DeltaOutOfRange(delta))?;
    in_transaction(&store.pool, &store.tx, Operation::Adjust, move |client| {
        crate::tx_body!(client => async {
            if delta > 0 {
                backorders::prelock(client, product_id).await?;
            }
            let row = client
                .query_opt(LOCK_ROW, &[&product_id.get()])
                .await?
                .ok_or(Error::UnknownProduct(product_id))?;
            refuse_located(product_id, &row)?;
            let current = stock_of(product_id, &row)?;
            let next = i64::from(current.available) + i64::from(delta);
            if next < 0 {
                return Err(Error::AdjustmentWouldGoNegative {
                    product_id,
                    delta,
                    available: current.available,
                });
            }
            let on_hand_after = next + i64::from(current.reserved);
            if on_hand_after > i64::from(MAX_STOCK_COUNT) {
                return Err(Error::StockWouldExceedLimit {
                    product_id,
                    delta,
                    on_hand_after,
                    max: MAX_STOCK_COUNT,
                });
            }
            let row = client
                .query_one(SET_AVAILABLE, &[&product_id.get(), &(next as i32)])
                .await?;
            let movement = client
                .query_one(
                    RECORD,
                    &[&product_id.get(), &"adjustment", &delta, &reason.as_str()],
                )
                .await?;
            let written = stock_of(product_id, &row)?;
            after_arrival(client, written, delta, movement.try_get("id")?).await
        })
    })
    .await
}

/// Reads a product's stock.
pub async fn get(store: &Store, product_id: ProductId) -> Result<Stock, Error> {
    let client = checkout(&store.pool, Operation::StockRead).await?;
    let row = client
        .query_opt(STOCK_ROW, &[&product_id.get()])
        .await?
        .ok_or(Error::UnknownProduct(product_id))?;
    stock_of(product_id, &row)
}
