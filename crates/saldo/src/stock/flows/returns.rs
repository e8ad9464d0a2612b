//! Returns (`POST /v1/orders/{id}/returns`): confirmed units of an order come back into
//! `available` or a non-sellable state such as `damaged` (at a location, for a product stocked
//! per location), with a reason, all items or none, idempotent by the return's own id.
//!
//! One transaction, in the global lock order: the order's reservation rows (so two returns of
//! one order run one after the other, whatever the strategy), the return's key looked up under
//! them (a replay answers what the first did; another payload is [`Error::ReturnConflict`]),
//! the locations' retirement under a share lock, the stock rows in product order, the location
//! rows. Then each line's `returned` count is raised by the conditional UPDATE that refuses
//! more than was confirmed ([`Error::ReturnExceedsConfirmed`], nothing written), the units go
//! back, the return's rows are written (stamped while the stock rows are held, so the audit
//! orders them against counts) and `order.returned` is recorded at the order's next position.
//! Units back into `available` are an arrival: the product's live backorders are locked before
//! the stock rows, and they fill those backorders first ([`fill_from_return`]).

use std::collections::BTreeSet;

use crate::domain::{LocationId, ProductId, StockState};
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::decide::returns as decide;
use crate::stock::decide::settle::LocationDeltas;
use crate::stock::flows::backorders::fill_backorders;
use crate::stock::flows::{order_events, settle};
use crate::stock::model::{Return, ReturnItemRequest, ReturnRequest, ReturnedItem, Row};
use crate::stock::movements::MoveKind;
use crate::stock::rows::backorders as backorder_rows;
use crate::stock::rows::stock::Movement;
use crate::stock::rows::{locations, moves, returns, sales, stock};
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::in_idempotent_transaction;

/// Brings the request's units back, or none (see the module header).
pub async fn record(store: &Store, request: &ReturnRequest) -> Result<Return, Error> {
    let writer = store.writer();
    in_idempotent_transaction(
        &store.pool,
        &store.tx,
        Operation::Return,
        returns::RETURN_KEY,
        move |client| crate::write_tx!(client, writer => |tx| return_tx(&tx, request)),
    )
    .await
}

async fn return_tx(tx: &Tx<'_>, request: &ReturnRequest) -> Result<Return, Error> {
    // The executor mode Citus needs to write a reference table beside distributed ones.
    sales::begin(tx).await?;
    let order_id = &request.order_id;
    tx.cause(
        MoveKind::Return
            .cause()
            .order(order_id.as_str())
            .return_id(request.return_id.as_str()),
    );
    let rows = settle::lock_order(tx, order_id).await?;
    if let Some(done) = returns::find(tx, &request.return_id).await? {
        return if decide::same_request(&done, request) {
            Ok(done)
        } else {
            Err(Error::ReturnConflict(request.return_id.clone()))
        };
    }
    let mut planned: Vec<(&Row, &ReturnItemRequest, Option<LocationId>)> = Vec::new();
    for item in request.items.iter() {
        let line = decide::line_of(order_id, &rows, item.product_id)?;
        let location = item
            .location_id
            .clone()
            .or_else(|| decide::default_location(line));
        planned.push((line, item, location));
    }
    // A location's retirement is read before any stock row (the locations' lock order).
    let named: BTreeSet<&LocationId> = planned.iter().filter_map(|p| p.2.as_ref()).collect();
    for location in named {
        locations::refuse_retired(tx, location).await?;
    }
    let products: Vec<i64> = planned.iter().map(|p| p.0.item.product_id.get()).collect();
    // Units back into `available` are an arrival: the product's live backorders are locked
    // before its stock row, as every arrival path does (reservation rows, then stock).
    if tx.dialect().offers_locations_and_backorders() {
        for (_, item, _) in planned
            .iter()
            .filter(|p| p.1.state == StockState::Available)
        {
            backorder_rows::prelock(tx, item.product_id).await?;
        }
    }
    let locked = stock::lock(tx, &products).await?;
    let mut items = Vec::with_capacity(planned.len());
    for (_, item, location) in &planned {
        let product = item.product_id;
        let located = locked
            .get(&product.get())
            .ok_or(Error::UnknownProduct(product))?
            .located;
        let location = place(tx, product, located, item, location.clone()).await?;
        items.push(ReturnedItem {
            product_id: product,
            quantity: item.quantity.get(),
            location_id: location,
            state: item.state,
        });
    }
    let position = order_events::last_position(&rows) + 1;
    for ((line, item, _), _) in planned.iter().zip(&items) {
        returns::raise(tx, line, item.quantity.get(), position).await?;
    }
    // Units into `available` in one write; units into a state each through the move's write
    // (the product's row and, located, its location's).
    let available: Vec<i32> = items.iter().map(into_available).collect();
    let reserved = vec![0; items.len()];
    if available.iter().any(|&a| a != 0) {
        stock::write_deltas(tx, &products, &available, &reserved).await?;
    }
    let mut at_locations = LocationDeltas::new();
    for item in items.iter().filter(|i| i.state != StockState::Available) {
        let mut deltas = [0; 4];
        deltas[item.state.index()] = item.quantity;
        moves::write_product(tx, item.product_id, &deltas).await?;
        if let Some(location) = &item.location_id {
            moves::write_location(tx, item.product_id, location.as_str(), &deltas).await?;
        }
    }
    for item in items.iter().filter(|i| i.state == StockState::Available) {
        if let Some(location) = &item.location_id {
            at_locations.insert(
                (item.product_id.get(), location.clone()),
                (item.quantity, 0),
            );
        }
    }
    locations::lock_and_apply(tx, &at_locations).await?;
    let reason = request.reason.as_str();
    for item in items.iter().filter(|i| i.state == StockState::Available) {
        let backordered = locked
            .get(&item.product_id.get())
            .is_some_and(|row| row.backordered > 0);
        if backordered {
            fill_from_return(tx, item, reason).await?;
        }
    }
    returns::insert(tx, &request.return_id, order_id, reason).await?;
    let done = returns::insert_items(tx, &request.return_id, order_id, reason, &items).await?;
    order_events::emit_return(tx, position, &done);
    Ok(done)
}

/// A returned item's units, just put back into `available` (at its location, located), go to
/// the product's oldest backorders first, as any arrival's do: the return's `return` movement
/// is the history row the fills name.
async fn fill_from_return(tx: &Tx<'_>, item: &ReturnedItem, reason: &str) -> Result<(), Error> {
    let movement = Movement {
        product: item.product_id,
        kind: "return",
        quantity: item.quantity,
        reason,
        location: None,
    };
    let movement_id = stock::record(tx, movement).await?;
    let at = item.location_id.as_ref();
    fill_backorders(tx, item.product_id, item.quantity, movement_id, at).await?;
    Ok(())
}

/// The units an item adds to its product's `available`.
fn into_available(item: &ReturnedItem) -> i32 {
    if item.state == StockState::Available {
        item.quantity
    } else {
        0
    }
}

/// Where an item's units go: a product stocked per location takes them at the named location
/// (one it is stocked at) or, unnamed, where its line was allocated; any other product takes
/// them into its row alone, and naming a location for it is refused.
async fn place(
    tx: &Tx<'_>,
    product: ProductId,
    located: bool,
    item: &ReturnItemRequest,
    location: Option<LocationId>,
) -> Result<Option<LocationId>, Error> {
    match (located, location) {
        (false, None) => Ok(None),
        (true, None) => Err(Error::StockedByLocation(product)),
        (_, Some(location)) => {
            if located && returns::stocked_at(tx, product, &location).await? {
                Ok(Some(location))
            } else {
                let named = item.location_id.clone().unwrap_or(location);
                Err(Error::UnknownLocation {
                    product_id: product,
                    location_id: named,
                })
            }
        }
    }
}
