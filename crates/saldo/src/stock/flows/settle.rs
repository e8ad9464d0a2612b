//! Settling an order's reservations: confirm (active → confirmed, units leave `reserved`),
//! release (active → released, units back to `available`), and the read of an order. The
//! sweeper's expiry ([`super::sweeper`]) and the batched confirm settle through [`settle`] too.
//!
//! Lock order: the order's reservation rows first, then its stock rows in ascending product
//! id, then the location rows of what was allocated at locations.

use crate::domain::{Lines, OrderId, Tags};
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::movements::MoveKind;
use std::collections::{BTreeMap, HashMap};

use crate::stock::decide::plan::order_tags;
use crate::stock::decide::settle::{self as decide, Move, Moved, Settling};
use crate::stock::flows::order_events;
use crate::stock::model::{ConfirmOutcome, ReleaseOutcome, ReservedItem, Row, Status};
use crate::stock::rows::{backorders, locations, reservations, stock};
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::{checkout, in_transaction};
use crate::telemetry;

/// Settles `moves` (rows locked, stored active, each to its status): their stock rows (locked
/// here, in product order, once for all), the backorders the released and expired ones drop,
/// their location rows, then the rows themselves with their orders' event positions after
/// `last` (each order's latest position), and those events. Answers what moved, for the
/// answers and, once committed, the metrics ([`note_moves`]).
pub(crate) async fn settle(
    tx: &Tx<'_>,
    moves: &[Move<'_>],
    last: &HashMap<String, i64>,
) -> Result<Vec<Moved>, Error> {
    if moves.is_empty() {
        return Ok(Vec::new());
    }
    stock::apply_deltas(tx, &decide::stock_deltas(moves)).await?;
    let dropped: Vec<&Row> = moves
        .iter()
        .filter(|(_, to)| *to != Status::Confirmed)
        .map(|(r, _)| *r)
        .collect();
    backorders::drop(tx, &dropped).await?;
    settle_locations(tx, moves).await?;
    // settled_at is taken after the stock rows are locked, so it orders consistently with the
    // physical counts the audit compares against.
    let positions = decide::number(moves, last);
    for status in [Status::Confirmed, Status::Released, Status::Expired] {
        let rows: Vec<(&Row, i64)> = moves
            .iter()
            .zip(&positions)
            .filter(|((_, to), _)| *to == status)
            .map(|((r, _), p)| (*r, *p))
            .collect();
        if !rows.is_empty() {
            reservations::settle(tx, &rows, status).await?;
        }
    }
    let moved: Vec<Moved> = moves
        .iter()
        .zip(&positions)
        .map(|((r, to), p)| (r.id, *to, *p))
        .collect();
    emit_settled(tx, moves, &moved);
    Ok(moved)
}

/// The location rows of what was allocated at locations.
async fn settle_locations(tx: &Tx<'_>, moves: &[Move<'_>]) -> Result<(), Error> {
    let allocated: Vec<uuid::Uuid> = moves
        .iter()
        .filter(|(r, _)| r.allocated)
        .map(|(r, _)| r.id)
        .collect();
    if allocated.is_empty() {
        return Ok(());
    }
    let allocations = locations::allocations_of(tx, &allocated).await?;
    // A located row wholly backordered (and never filled) has no allocations yet.
    let held = moves
        .iter()
        .any(|(r, _)| r.allocated && r.item.quantity > r.item.backordered);
    if allocations.is_empty() && held {
        return Err(Error::invariant(format!(
            "{} allocated reservation rows have no allocations",
            allocated.len()
        )));
    }
    let deltas = decide::location_deltas(&allocations, moves);
    locations::lock_and_apply(tx, &deltas).await
}

/// One event per (order, status) moved to, at the position its rows were written with.
fn emit_settled(tx: &Tx<'_>, moves: &[Move<'_>], moved: &[Moved]) {
    if !tx.records_events() {
        return;
    }
    let mut groups: BTreeMap<(i64, &str, Status), Vec<ReservedItem>> = BTreeMap::new();
    for ((row, _), (_, to, position)) in moves.iter().zip(moved) {
        let item = ReservedItem {
            status: *to,
            ..row.item.clone()
        };
        groups
            .entry((*position, row.order_id.as_str(), *to))
            .or_default()
            .push(item);
    }
    for ((position, order_id, status), items) in groups {
        let kind = match status {
            Status::Confirmed => order_events::CONFIRMED,
            Status::Released => order_events::RELEASED,
            Status::Expired | Status::Active => order_events::EXPIRED,
        };
        order_events::emit(tx, order_id, position, kind, &items);
    }
}

/// Counts committed moves per status.
pub(crate) fn note_moves(moved: &[Moved]) {
    for status in [Status::Confirmed, Status::Released, Status::Expired] {
        let n = moved.iter().filter(|(_, to, _)| *to == status).count() as u64;
        telemetry::settled(status.as_str(), n);
    }
}

/// The order's rows, locked, with their allocations; an order without rows is unknown.
pub(crate) async fn lock_order(tx: &Tx<'_>, order_id: &OrderId) -> Result<Vec<Row>, Error> {
    let mut rows = reservations::lock_order(tx, order_id).await?;
    if rows.is_empty() {
        return Err(Error::UnknownOrder(order_id.clone()));
    }
    locations::attach(tx, &mut rows).await?;
    Ok(rows)
}

/// active → confirmed, of the named lines (`None`: the whole order); a named product the order
/// has no line of refuses the whole request, nothing written.
pub(crate) async fn confirm(
    store: &Store,
    order_id: &OrderId,
    lines: Option<&Lines>,
) -> Result<ConfirmOutcome, Error> {
    let writer = store.writer();
    let (outcome, moved) =
        in_transaction(&store.pool, &store.tx, Operation::Confirm, move |client| {
            crate::write_tx!(client, writer => |tx| async {
                tx.cause(MoveKind::Confirm.cause().order(order_id.as_str()));
                let mut rows = lock_order(&tx, order_id).await?;
                let last = order_events::last_positions(&rows);
                decide::select(order_id, &mut rows, lines)?;
                let moves = decide::moves(&rows, Settling::Confirm);
                let moved = settle(&tx, &moves, &last).await?;
                decide::apply(&mut rows, &moved);
                Ok((decide::confirmed(order_id, &rows), moved))
            })
        })
        .await?;
    note_confirmed(&outcome, &moved);
    Ok(outcome)
}

/// Counts what a committed confirm moved, and a confirm that lost part of the order (the
/// customer paid for items it no longer holds: re-reserve or refund), every such confirm: one
/// that confirmed nothing because everything was lost included, the worst case.
pub(crate) fn note_confirmed(outcome: &ConfirmOutcome, moved: &[Moved]) {
    note_moves(moved);
    note_confirmed_order(outcome, moved);
}

/// [`note_confirmed`] without the moves (the batched confirm counts a batch's moves once).
pub(crate) fn note_confirmed_order(outcome: &ConfirmOutcome, moved: &[Moved]) {
    let confirmed_now = moved.iter().any(|(_, to, _)| *to == Status::Confirmed);
    let expired_now = moved.iter().any(|(_, to, _)| *to == Status::Expired);
    // A replay (nothing moved) counted once already, when it first answered.
    if !outcome.missing.is_empty() && (confirmed_now || expired_now || outcome.confirmed.is_empty())
    {
        metrics::counter!(telemetry::CONFIRMED_WITH_MISSING).increment(1);
    }
}

/// active → released (a line past its expiry: expired); an order with no line to release is
/// refused after what expired is committed ([`decide::released`]). With named lines
/// (`Some`), only those, and a named line that is sold or expired refuses the whole request
/// with nothing written ([`decide::refuse_unreleasable`]).
pub(crate) async fn release(
    store: &Store,
    order_id: &OrderId,
    lines: Option<&Lines>,
) -> Result<ReleaseOutcome, Error> {
    let writer = store.writer();
    let (outcome, moved) =
        in_transaction(&store.pool, &store.tx, Operation::Release, move |client| {
            crate::write_tx!(client, writer => |tx| async {
                tx.cause(MoveKind::Release.cause().order(order_id.as_str()));
                let mut rows = lock_order(&tx, order_id).await?;
                let last = order_events::last_positions(&rows);
                decide::select(order_id, &mut rows, lines)?;
                if lines.is_some() {
                    decide::refuse_unreleasable(order_id, &rows)?;
                }
                let moves = decide::moves(&rows, Settling::Release);
                let moved = settle(&tx, &moves, &last).await?;
                decide::apply(&mut rows, &moved);
                // A refusal is an answer of a committed transaction: what expired stays expired.
                Ok((decide::released(order_id, &rows), moved))
            })
        })
        .await?;
    note_moves(&moved);
    outcome
}

/// Every reservation row of an order (with its allocations), and the order's reference and
/// metadata.
pub(crate) async fn order(
    store: &Store,
    order_id: &OrderId,
) -> Result<(Vec<ReservedItem>, Tags), Error> {
    let client = checkout(&store.pool, Operation::Order).await?;
    let tx = Tx::new(&client, store.dialect());
    let mut rows = reservations::of_order(&tx, order_id).await?;
    if rows.is_empty() {
        return Err(Error::UnknownOrder(order_id.clone()));
    }
    locations::attach(&tx, &mut rows).await?;
    let tags = order_tags(&rows);
    Ok((rows.into_iter().map(|r| r.item).collect(), tags))
}
