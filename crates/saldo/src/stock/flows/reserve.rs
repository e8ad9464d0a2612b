//! Reserve and re-reserve: one transaction, every item or none.
//!
//! Read the order's rows → decide replay, conflict or take ([`decide::plan`]) → take the units
//! item by item ([`taking`]: the strategy's take, the locked path for what it declines) →
//! write the reservation rows (with their backorders and allocations) and, on Citus, the
//! order's router → answer the order as it now stands. A concurrent copy of the same request
//! that commits first makes this one rerun as a replay (the unique live index, through
//! `in_idempotent_transaction`), or, when its take was refused after waiting for that copy's
//! row lock, read the order again and answer the replay.

use std::collections::HashMap;
use std::time::Instant;

use uuid::Uuid;

use crate::error::Error;
use crate::operation::Operation;
use crate::stock::decide::plan::{current_items, kept_placement, order_tags, plan, Intent, Plan};
use crate::stock::decide::settle::{apply, moves, Settling};
use crate::stock::flows::order_events;
use crate::stock::flows::settle::{lock_order, settle};
use crate::stock::flows::taking::{take_items, Destination, ItemTaken};
use crate::stock::model::{Placement, Reservation};
use crate::stock::movements::MoveKind;
use crate::stock::rows::backorders;
use crate::stock::rows::locations::{self, Allocations};
use crate::stock::rows::reservations::{self, NewRows, OrderLines, LIVE_INDEX};
use crate::stock::taker::UnitTaker;
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::in_idempotent_transaction;
use crate::telemetry;

/// Reserves (or re-reserves) through `taker`, in one transaction.
pub(crate) async fn reserve(
    store: &Store,
    taker: &dyn UnitTaker,
    intent: Intent<'_>,
    placement: &Placement,
) -> Result<Reservation, Error> {
    if placement.is_default() || store.dialect().offers_locations_and_backorders() {
        let writer = store.writer();
        in_idempotent_transaction(
            &store.pool,
            &store.tx,
            Operation::Reserve,
            LIVE_INDEX,
            move |client| {
                crate::write_tx!(client, writer => |tx| reserve_tx(&tx, taker, intent, placement))
            },
        )
        .await
    } else {
        // An order naming a location on a layout without stock per location: refused before
        // any lock.
        Err(Error::UnsupportedOnCitus("stock per location"))
    }
}

async fn reserve_tx(
    tx: &Tx<'_>,
    taker: &dyn UnitTaker,
    intent: Intent<'_>,
    placement: &Placement,
) -> Result<Reservation, Error> {
    let order_id = intent.order_id();
    let mut rows = reservations::of_order(tx, order_id).await?;
    let take = match plan(intent, &rows)? {
        Plan::Replay => {
            locations::attach(tx, &mut rows).await?;
            return Ok(Reservation {
                order_id: order_id.clone(),
                items: current_items(&rows),
                replayed: true,
                tags: order_tags(&rows),
            });
        }
        Plan::Take(take) => take,
    };
    if rows.iter().any(|r| r.lapsed) {
        // A re-reserve of lines past their expiry that the sweeper has not expired yet: expire
        // them here first (they still hold their units and the order's live index).
        tx.cause(MoveKind::Expire.cause().order(order_id.as_str()));
        rows = expire_lapsed(tx, order_id).await?;
    }
    // A re-reserve takes each lost line again where it was held: one location is kept (pinned),
    // a split is split again (`kept_placement`).
    let kept;
    let placement = if let Intent::Rereserve(_) = intent {
        locations::attach(tx, &mut rows).await?;
        kept = kept_placement(&rows);
        &kept
    } else {
        placement
    };

    tx.cause(MoveKind::Reserve.cause().order(order_id.as_str()));
    let started = Instant::now();
    let taken = match take_items(tx, taker, &take, placement, Destination::Reserved).await {
        Ok(taken) => taken,
        Err(refusal) => return replay_of_concurrent_copy(tx, intent, refusal).await,
    };
    metrics::histogram!(telemetry::STOCK_LOCK_WAIT, "strategy" => taker.name())
        .record(started.elapsed().as_secs_f64());

    // The order's next event position (1 for a new order); a concurrent writer of the same
    // order that takes it too meets this one on the events' unique index (see `order_events`).
    let position = order_events::last_position(&rows) + 1;
    let lines = OrderLines {
        order_id,
        ttl: intent.ttl(),
        request_key: intent.request_key(),
        position,
        tags: intent.tags(),
    };
    let new_rows = new_rows(&lines, &take, &taken);
    let mut written = reservations::insert(tx, &new_rows).await?;
    let backordered: Vec<i32> = taken.iter().map(ItemTaken::backordered).collect();
    backorders::mark(tx, &mut written, &backordered).await?;
    write_allocations(tx, &mut written, &taken).await?;
    let created = written.iter().map(|r| &r.item);
    // The order's reference and metadata: this request's when it is the order's first.
    let tags = if rows.is_empty() {
        intent.tags().clone()
    } else {
        order_tags(&rows)
    };
    order_events::emit_created(tx, order_id.as_str(), position, created, &tags);
    // The router after the ordered stock locks (a no-op on one node).
    let known = HashMap::from([(
        order_id.as_str(),
        rows.iter().map(|r| r.item.product_id.get()).collect(),
    )]);
    let new = take.iter().map(|(p, _)| (order_id.as_str(), p.get()));
    reservations::route(tx, new, &known).await?;
    rows.extend(written);
    Ok(Reservation {
        order_id: order_id.clone(),
        items: current_items(&rows),
        replayed: false,
        tags: order_tags(&rows),
    })
}

/// The reservation rows of the order's new lines: one per item taken, marked where the take
/// allocated locations.
fn new_rows<'a>(
    lines: &OrderLines<'a>,
    take: &[(crate::domain::ProductId, crate::domain::Quantity)],
    taken: &[ItemTaken],
) -> NewRows<'a> {
    let mut rows = NewRows::default();
    for ((product, quantity), item) in take.iter().zip(taken) {
        rows.push(Uuid::new_v4(), lines, *product, *quantity);
        if item.locations().is_some() {
            rows.mark_allocated();
        }
    }
    rows
}

/// Locks the order's rows (reservation rows before any stock row: the lock order), expires
/// those past their expiry, and answers the rows as they now are.
async fn expire_lapsed(
    tx: &Tx<'_>,
    order_id: &crate::domain::OrderId,
) -> Result<Vec<crate::stock::model::Row>, Error> {
    let mut rows = lock_order(tx, order_id).await?;
    let moves = moves(&rows, Settling::Expire);
    let last = order_events::last_positions(&rows);
    let moved = settle(tx, &moves, &last).await?;
    apply(&mut rows, &moved);
    Ok(rows)
}

/// The `reservation_allocations` of the items served over locations (after their rows), and
/// the same on the rows the answer shows.
async fn write_allocations(
    tx: &Tx<'_>,
    written: &mut [crate::stock::model::Row],
    taken: &[ItemTaken],
) -> Result<(), Error> {
    let mut allocations = Allocations::default();
    for (row, item) in written.iter_mut().zip(taken) {
        let Some(parts) = item.locations() else {
            continue;
        };
        for (location, quantity) in parts {
            allocations.push(row.id, row.item.product_id, location, *quantity);
        }
        row.item.allocations = locations::in_location_order(parts);
    }
    allocations.insert(tx).await
}

/// The `outcome` label a reserve is counted under (by the engine, once per request, whatever
/// the strategy).
pub(crate) fn outcome(result: &Result<Reservation, Error>) -> &'static str {
    match result {
        Ok(r) if r.replayed => "replayed",
        Ok(_) => "reserved",
        Err(Error::InsufficientStock { .. }) => "insufficient_stock",
        Err(Error::IdempotencyConflict(_)) => "idempotency_conflict",
        Err(Error::NothingToRereserve(_) | Error::NotRereservable { .. }) => "not_rereservable",
        Err(Error::UnknownOrder(_)) => "unknown_order",
        Err(Error::DeadlineExceeded { .. }) => "deadline_exceeded",
        Err(Error::ProductLocked(_)) => "product_locked",
        Err(Error::OutcomeUnknown { .. }) => "outcome_unknown",
        Err(Error::VersionConflict { .. }) => "version_conflict",
        Err(Error::UnknownProduct(_)) => "unknown_product",
        Err(Error::UnknownLocation { .. }) => "unknown_location",
        Err(Error::Input(_)) => "invalid",
        Err(_) => "error",
    }
}

/// A take refused for want of stock may have waited on the row lock for a concurrent copy of
/// this very request, which then took the units: that is a replay, not a refusal. Under READ
/// COMMITTED the next statement sees what committed meanwhile, so read the order again. Answers
/// the replay, or the original refusal (also when the transaction is aborted and cannot read).
pub(crate) async fn replay_of_concurrent_copy(
    tx: &Tx<'_>,
    intent: Intent<'_>,
    refusal: Error,
) -> Result<Reservation, Error> {
    if !matches!(
        refusal,
        Error::InsufficientStock { .. } | Error::VersionConflict { .. }
    ) {
        return Err(refusal);
    }
    let order_id = intent.order_id();
    let Ok(rows) = reservations::of_order(tx, order_id).await else {
        return Err(refusal);
    };
    match plan(intent, &rows) {
        Ok(Plan::Replay) => Ok(Reservation {
            order_id: order_id.clone(),
            items: current_items(&rows),
            replayed: true,
            tags: order_tags(&rows),
        }),
        _ => Err(refusal),
    }
}
