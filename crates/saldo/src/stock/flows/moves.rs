//! Moves (`POST /v1/products/{id}/moves`): units of one product go from one place (`available`
//! or a non-sellable state, at a location for a product stocked per location) to another, with a
//! reason, all or nothing, idempotent by the move's id (per product).
//!
//! One transaction, in the global lock order: the product's live backordered reservation rows
//! when units may arrive into `available` (as every arrival path locks them), the destination
//! location's retirement under a share lock (a retired location takes nothing), the product's
//! stock row, then its location rows in location order. Under those locks the move's id is
//! looked up (a replay answers what the first did; another payload is [`Error::MoveConflict`]),
//! the source's units are checked ([`Error::MoveShort`]: only `available` and the states are
//! sources, so reserved units never move) and the rows are written by conditional UPDATEs that
//! cannot go below zero. A move that changes the product's `available` records a `move`
//! movement in its history (the on-hand audit's input); one that raises it is an arrival and
//! fills the product's backorders first ([`backorders::after_arrival`], the arrivals' one path;
//! a located product's fills are allocated at the move's destination).
//! The move's row is stamped while the stock row is held, and `stock.moved` is recorded.

use serde_json::json;

use crate::domain::StockState;
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::decide::moves as decide;
use crate::stock::flows::backorders;
use crate::stock::model::{Move, MoveRequest};
use crate::stock::movements::MoveKind;
use crate::stock::rows::backorders as backorder_rows;
use crate::stock::rows::locations;
use crate::stock::rows::moves::{self, held};
use crate::stock::rows::stock::{self, Movement};
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::outbox::{NewEvent, StreamType};
use crate::store::retry::in_transaction;

/// The event of a move (its own stream's only event); named with the other stock events.
pub use crate::stock::flows::order_events::STOCK_MOVED;

/// Moves the request's units, or none (see the module header).
pub async fn record(store: &Store, request: &MoveRequest) -> Result<Move, Error> {
    decide::refuse_nowhere(request)?;
    let writer = store.writer();
    in_transaction(
        &store.pool,
        &store.tx,
        Operation::Move,
        move |client| crate::write_tx!(client, writer => |tx| move_tx(&tx, request)),
    )
    .await
}

async fn move_tx(tx: &Tx<'_>, request: &MoveRequest) -> Result<Move, Error> {
    let product = request.product_id;
    let quantity = request.quantity.get();
    let (from, to) = (&request.from, &request.to);
    tx.cause(MoveKind::Move.cause().move_id(request.move_id.as_str()));
    let arrives = to.state == StockState::Available && from.state != StockState::Available;
    if arrives {
        backorder_rows::prelock(tx, product).await?;
    }
    // A retired location takes no stock: read under a share lock before any stock row (the
    // locations' lock order, as returns take it).
    if let Some(location) = &to.location_id {
        locations::refuse_retired(tx, location).await?;
    }
    let row = stock::lock_one(tx, product)
        .await?
        .ok_or(Error::UnknownProduct(product))?;
    row.refuse_bundle()?;
    if let Some(done) = moves::find(tx, product, &request.move_id).await? {
        return if decide::same_request(&done, request) {
            Ok(done)
        } else {
            Err(Error::MoveConflict(request.move_id.clone()))
        };
    }
    decide::check_places(product, row.located, request)?;
    let totals = held(row.stock.available, &moves::states(tx, product).await?);
    let product_deltas = decide::deltas(from.state, to.state, quantity);
    if row.located {
        move_located(tx, request, &product_deltas).await?;
    } else {
        decide::check_units(product, from, &totals, &totals, to.state, quantity)?;
    }
    let written = moves::write_product(tx, product, &product_deltas).await?;
    let arrived = product_deltas[StockState::Available.index()];
    if arrived != 0 {
        let movement = Movement {
            product,
            kind: "move",
            quantity: arrived,
            reason: request.reason.as_str(),
            location: None,
        };
        let movement_id = stock::record(tx, movement).await?;
        // A located product's units arrive at the destination (both ends are named).
        let at = to.location_id.as_ref().filter(|_| row.located);
        backorders::after_arrival(tx, written, arrived, movement_id, at).await?;
    }
    let done = moves::insert(
        tx,
        product,
        &request.move_id,
        quantity,
        from,
        to,
        request.reason.as_str(),
    )
    .await?;
    emit(tx, &done);
    Ok(done)
}

/// A located product's move: both ends named (checked before), their rows locked in location
/// order, the source's units checked there, and each end's row written.
async fn move_located(
    tx: &Tx<'_>,
    request: &MoveRequest,
    product_deltas: &[i32; 4],
) -> Result<(), Error> {
    let product = request.product_id;
    let quantity = request.quantity.get();
    let (from, to) = (&request.from, &request.to);
    // Both ends are named (checked above); the rows are locked in location order.
    let (Some(source), Some(destination)) = (&from.location_id, &to.location_id) else {
        return Err(Error::StockedByLocation(product));
    };
    let mut names = vec![source.as_str(), destination.as_str()];
    names.sort_unstable();
    names.dedup();
    let rows = moves::lock_locations(tx, product, &names).await?;
    let unknown = |l: &crate::domain::LocationId| Error::UnknownLocation {
        product_id: product,
        location_id: l.clone(),
    };
    let at_source = rows.get(source.as_str()).ok_or_else(|| unknown(source))?;
    let at_destination = rows
        .get(destination.as_str())
        .ok_or_else(|| unknown(destination))?;
    decide::check_units(product, from, at_source, at_destination, to.state, quantity)?;
    let mut out = [0; 4];
    out[from.state.index()] = -quantity;
    let mut into = [0; 4];
    into[to.state.index()] = quantity;
    if source == destination {
        moves::write_location(tx, product, source.as_str(), product_deltas).await?;
    } else {
        for (location, d) in [(source, out), (destination, into)] {
            moves::write_location(tx, product, location.as_str(), &d).await?;
        }
    }
    Ok(())
}

/// The `stock.moved` event of a move, the only event of its stream `<product>:<move_id>`.
fn emit(tx: &Tx<'_>, done: &Move) {
    if !tx.records_events() {
        return;
    }
    tx.emit(NewEvent {
        stream_type: StreamType::Move,
        stream_id: format!("{}:{}", done.product_id, done.move_id),
        position: 1,
        kind: STOCK_MOVED,
        data: json!({
            "product_id": done.product_id,
            "move_id": done.move_id,
            "quantity": done.quantity,
            "from": done.from,
            "to": done.to,
            "reason": done.reason,
            "moved_at": done.moved_at,
        }),
    });
}
