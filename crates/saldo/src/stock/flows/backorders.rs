//! Backorders and preorders: a product may promise up to `backorder_limit` units it does not
//! have. A reservation takes what is available and backorders the rest (all items or none;
//! past the limit, the usual insufficient-stock refusal); a product with no stock and a limit
//! is a preorder. When units arrive they go to the oldest backorders first, in the same
//! transaction ([`fill_backorders`], the one place that does it), and only what remains becomes
//! available. A product stocked per location takes backorders too: a reservation (split over
//! its locations, the default placement) takes what its locations have and backorders the
//! rest; a pinned or single placement is not backordered ([`crate::stock::decide::take`]), so
//! units arriving at any location may fill any backorder, and the fill allocates them there.
//!
//! Bookkeeping: a reservation's `quantity` = allocated + `backordered`. `stock.reserved` counts
//! allocated units of active reservations only (on hand = available + reserved);
//! `stock.backordered` = Σ `backordered` of live reservations. Confirm sells what is allocated
//! and leaves the backorder pending; a fill of a confirmed reservation sends its units straight
//! to sold. Release and expiry give back the allocated units and drop the backorder. Each fill
//! writes a `backorder_fills` row: the audit's evidence of arrival order and of what left on
//! hand through a backorder.
//!
//! Where the take happens: a strategy's take declines a short item of a product with a limit,
//! and the locked path backorders it ([`super::taking`]); a product without a limit pays
//! nothing. Lock order: arrival paths lock the product's live backordered reservation rows
//! (in order id order, as batched confirms lock many orders' rows) before its stock row; rows
//! that committed between the two are newer than all of those and locked after the stock row
//! (a rare cycle with their own confirm surfaces as 40P01 and reruns).

use crate::domain::{InputError, LocationId, ProductId, MAX_BACKORDER_LIMIT};
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::decide::backorders::{fill, number, Filled};
use crate::stock::decide::settle::LocationDeltas;
use crate::stock::flows::order_events;
use crate::stock::model::Stock;
use crate::stock::movements::MoveKind;
use crate::stock::rows::{backorders, locations, reservations, stock};
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::in_transaction;

/// Rounds of [`fill_backorders`] at most: each locks the oldest backorders that the remaining
/// units cover; a later round only runs when a row left between the read and its lock.
const MAX_FILL_ROUNDS: usize = 8;

/// Sets a product's `backorder_limit` (0..=[`MAX_BACKORDER_LIMIT`]). Lowering it below what is
/// backordered now is refused ([`Error::BackorderLimitBelowBackordered`]), nothing written.
pub async fn set_policy(store: &Store, product_id: ProductId, limit: i64) -> Result<Stock, Error> {
    if !(0..=i64::from(MAX_BACKORDER_LIMIT)).contains(&limit) {
        return Err(InputError::BackorderLimitOutOfRange(limit).into());
    }
    let limit = i32::try_from(limit).map_err(|_| InputError::BackorderLimitOutOfRange(limit))?;
    // Refusing the limit keeps every product of such a layout off the backorder path.
    if !store.dialect().offers_locations_and_backorders() {
        return Err(Error::UnsupportedOnCitus("backorders"));
    }
    let writer = store.writer();
    in_transaction(
        &store.pool,
        &store.tx,
        Operation::SetPolicy,
        move |client| {
            crate::write_tx!(client, writer => |tx| async {
                let row = stock::lock_one(&tx, product_id)
                    .await?
                    .ok_or(Error::UnknownProduct(product_id))?;
                row.refuse_bundle()?;
                if limit < row.stock.backordered {
                    return Err(Error::BackorderLimitBelowBackordered {
                        product_id,
                        limit,
                        backordered: row.stock.backordered,
                    });
                }
                tx.cause(MoveKind::Policy.cause());
                stock::set_policy(&tx, product_id, limit).await
            })
        },
    )
    .await
}

/// THE fill: `arrived` units just added to `product`'s available (by the movement
/// `movement_id`, whose transaction holds the stock row) go to the oldest live backorders
/// first (arrival order), possibly filling the last one partially; only what remains stays
/// available. Every arrival of units calls this, in its own transaction. For a product
/// stocked per location the units arrived `at` one location (its row locked by the caller):
/// each fill is allocated there (the reservation's allocations grow, a confirmed one's units
/// are sold from there), and only what remains stays available at that location.
pub(crate) async fn fill_backorders(
    tx: &Tx<'_>,
    product: ProductId,
    arrived: i32,
    movement_id: i64,
    at: Option<&LocationId>,
) -> Result<Filled, Error> {
    let mut filled = Filled::default();
    let mut left = arrived;
    for _ in 0..MAX_FILL_ROUNDS {
        if left <= 0 {
            break;
        }
        let waiting = backorders::oldest(tx, product, left).await?;
        if waiting.is_empty() {
            break;
        }
        let (mut fills, round, rest) = fill(left, &waiting);
        let mut orders: Vec<&str> = fills.iter().map(|f| f.order_id.as_str()).collect();
        orders.sort_unstable();
        orders.dedup();
        let last = reservations::positions(tx, &orders).await?;
        number(&mut fills, &last);
        backorders::write_fills(tx, product, movement_id, &fills).await?;
        if let Some(location) = at {
            locations::allocate_fills(tx, product, location, &fills).await?;
        }
        order_events::emit_fills(tx, &fills);
        filled.to_reserved += round.to_reserved;
        filled.to_sold += round.to_sold;
        left = rest;
    }
    if filled.total() > 0 {
        backorders::fill_stock(tx, product, filled.to_reserved, filled.to_sold).await?;
        if let Some(location) = at {
            let here = (product.get(), location.clone());
            let delta = (-filled.total(), filled.to_reserved);
            locations::apply_deltas(tx, &LocationDeltas::from([(here, delta)])).await?;
        }
    }
    Ok(filled)
}

/// After a movement raised on hand by `arrived` units (`at` a location, for a product stocked
/// per location): fill the backorders, and answer the row as it ends up (`written` when
/// nothing was backordered).
pub(crate) async fn after_arrival(
    tx: &Tx<'_>,
    written: Stock,
    arrived: i32,
    movement_id: i64,
    at: Option<&LocationId>,
) -> Result<Stock, Error> {
    if arrived <= 0 || written.backordered == 0 {
        return Ok(written);
    }
    let filled = fill_backorders(tx, written.product_id, arrived, movement_id, at).await?;
    if filled.total() == 0 {
        return Ok(written);
    }
    stock::read(tx, written.product_id)
        .await?
        .ok_or(Error::UnknownProduct(written.product_id))
}
