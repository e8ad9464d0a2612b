//! Operator operations on stock: a physical count, an adjustment with a reason, a read. Each
//! writes an append-only `stock_movements` row in the same transaction, so the audit can prove
//! the stock row against its history. Units that arrive (a count above on hand, a positive
//! adjustment) go to the product's backorders first ([`backorders::after_arrival`]), in the
//! same transaction. A product stocked per location is counted per location
//! ([`super::locations::set_count`]): its row is the sum of its locations, which a
//! product-wide count or delta would break.

use crate::domain::{ProductId, Reason, MAX_STOCK_COUNT};
use crate::error::{Error, InputError};
use crate::operation::Operation;
use crate::stock::flows::backorders;
use crate::stock::model::Stock;
use crate::stock::movements::MoveKind;
use crate::stock::rows::backorders as backorder_rows;
use crate::stock::rows::stock::{self, AdminRow, Movement};
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::{checkout, in_transaction};

/// A product stocked per location is counted per location; a bundle holds no units at all.
fn refuse_located(product_id: ProductId, row: &AdminRow) -> Result<(), Error> {
    row.refuse_bundle()?;
    if row.located {
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
    let writer = store.writer();
    in_transaction(&store.pool, &store.tx, Operation::SetCount, move |client| {
        crate::write_tx!(client, writer => |tx| async {
            tx.cause(MoveKind::Count.cause());
            stock::ensure(&tx, product_id).await?;
            backorder_rows::prelock(&tx, product_id).await?;
            let row = stock::lock_one(&tx, product_id)
                .await?
                .ok_or(Error::UnknownProduct(product_id))?;
            refuse_located(product_id, &row)?;
            let current = row.stock;
            if count < current.reserved {
                return Err(Error::CountBelowReserved {
                    product_id,
                    count,
                    reserved: current.reserved,
                });
            }
            let written = stock::set_available(&tx, product_id, count - current.reserved).await?;
            let movement = Movement {
                product: product_id,
                kind: "count",
                quantity: count,
                reason: "",
                location: None,
            };
            let movement_id = stock::record(&tx, movement).await?;
            let arrived = count - (current.available + current.reserved);
            backorders::after_arrival(&tx, written, arrived, movement_id, None).await
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
    // `unsigned_abs`, not `abs`: `i64::MIN.abs()` overflows.
    if delta == 0 || delta.unsigned_abs() > u64::from(MAX_STOCK_COUNT.unsigned_abs()) {
        return Err(InputError::DeltaOutOfRange(delta).into());
    }
    let delta = i32::try_from(delta).map_err(|_| InputError::DeltaOutOfRange(delta))?;
    let writer = store.writer();
    in_transaction(&store.pool, &store.tx, Operation::Adjust, move |client| {
        crate::write_tx!(client, writer => |tx| adjust_tx(&tx, product_id, delta, reason))
    })
    .await
}

async fn adjust_tx(
    tx: &Tx<'_>,
    product_id: ProductId,
    delta: i32,
    reason: &Reason,
) -> Result<Stock, Error> {
    tx.cause(MoveKind::Adjustment.cause());
    if delta > 0 {
        backorder_rows::prelock(tx, product_id).await?;
    }
    let row = stock::lock_one(tx, product_id)
        .await?
        .ok_or(Error::UnknownProduct(product_id))?;
    refuse_located(product_id, &row)?;
    let current = row.stock;
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
    // Within MAX_STOCK_COUNT (checked above), so it fits.
    let written = stock::set_available(tx, product_id, next as i32).await?;
    let movement = Movement {
        product: product_id,
        kind: "adjustment",
        quantity: delta,
        reason: reason.as_str(),
        location: None,
    };
    let movement_id = stock::record(tx, movement).await?;
    backorders::after_arrival(tx, written, delta, movement_id, None).await
}

/// Reads a product's stock.
pub async fn get(store: &Store, product_id: ProductId) -> Result<Stock, Error> {
    let client = checkout(&store.pool, Operation::StockRead).await?;
    let tx = Tx::new(&client, store.dialect());
    stock::read(&tx, product_id)
        .await?
        .ok_or(Error::UnknownProduct(product_id))
}
