//! One partition's batches: grant a batch of reserves in one transaction (lock the stock rows in
//! product order, read the orders' rows under the locks, decide in memory ([`super::grant`]),
//! write once), confirm a batch of orders in one transaction, answer every waiter.
//!
//! Business refusals are per-order answers inside a committed batch; only a database failure
//! fails a batch, and then (unless it is a deadlock or serialization failure, which rerun the
//! whole batch) its orders are answered one by one as their own transactions, so one bad order
//! never takes its batch-mates down with it.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::Ordering;

use futures::stream::StreamExt;
use tokio::sync::oneshot;
use tokio::time::Instant;
use uuid::Uuid;

use super::grant::{grant_all, patch_written, Decision, Grants, Locked, FIRST_POSITION};
use super::job::{Granted, Job, Work};
use crate::batch::lane::Counters;
use crate::batch::worker::Worker;
use crate::domain::{Lines, OrderId};
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::decide::plan::{current_items, order_tags, Intent};
use crate::stock::decide::settle::{apply, confirmed, moves, select, Moved, Settling};
use crate::stock::flows::order_events;
use crate::stock::flows::{reserve, settle};
use crate::stock::model::{ConfirmOutcome, Placement, Reservation, ReserveRequest, Row};
use crate::stock::movements::MoveKind;
use crate::stock::rows::{locations, reservations, stock};
use crate::stock::strategy::atomic::Atomic;
use crate::store::deadline;
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::in_transaction;
use crate::telemetry;

/// Confirms of a failed batch replayed side by side at most.
const FALLBACK_CONCURRENCY: usize = 16;

type Reply<T> = oneshot::Sender<Result<T, Error>>;
/// A job's deadline, carried from its caller.
type Deadline = Option<Instant>;

/// Runs one job alone: the engine's one-request transaction.
pub(super) async fn run_alone(worker: &Worker, job: Job) {
    match job.work {
        Work::Reserve { request, reply } => {
            let outcome = reserve_alone(&worker.store, &worker.counters, &request).await;
            let _ = reply.send(outcome.map(Granted::Reserved));
        }
        Work::Confirm {
            order_id,
            lines,
            reply,
        } => {
            let outcome =
                confirm_alone(&worker.store, &worker.counters, &order_id, lines.as_ref()).await;
            let _ = reply.send(outcome);
        }
    }
}

/// Runs a batch (one kind only: see `batch::schedule`).
pub(super) async fn run_batch(worker: &Worker, jobs: Vec<Job>) {
    let mut reserves = Vec::new();
    let mut confirms = Vec::new();
    for job in jobs {
        match job.work {
            Work::Reserve { request, reply } => reserves.push((request, reply, job.deadline)),
            Work::Confirm {
                order_id,
                lines,
                reply,
            } => confirms.push(((order_id, lines), reply, job.deadline)),
        }
    }
    if !reserves.is_empty() {
        reserve_batch(worker, reserves).await;
    }
    if !confirms.is_empty() {
        confirm_batch(worker, confirms).await;
    }
}

async fn reserve_batch(worker: &Worker, jobs: Vec<(ReserveRequest, Reply<Granted>, Deadline)>) {
    let started = Instant::now();
    let requests: Vec<&ReserveRequest> = jobs.iter().map(|j| &j.0).collect();
    let requests = &requests[..];
    let writer = worker.store.writer();
    let result = in_transaction(
        &worker.store.pool,
        &worker.tx,
        Operation::ReserveBatch,
        move |client| crate::write_tx!(client, writer => |tx| grant_batch(&tx, requests)),
    )
    .await;
    record_batch(Operation::Reserve, started, jobs.len());
    match result {
        Ok(outcomes) => {
            worker.counters.committed(jobs.len());
            answer_each(Operation::Reserve, jobs, outcomes);
        }
        Err(Error::OutcomeUnknown { cause, .. }) => {
            for (_, reply, _) in jobs {
                let _ = reply.send(Err(Error::OutcomeUnknown {
                    operation: Operation::Reserve,
                    cause: cause.clone(),
                }));
            }
        }
        Err(e) => reserve_one_by_one(worker, jobs, &e).await,
    }
}

/// A failed reserve batch: each order as its own transaction, under its own deadline. A batch
/// that waited out a lock names the products still locked and refuses only the orders that touch
/// them, so a locked product holds up its partition-mates for one lock timeout at most.
async fn reserve_one_by_one(
    worker: &Worker,
    jobs: Vec<(ReserveRequest, Reply<Granted>, Deadline)>,
    e: &Error,
) {
    warn_fallback(worker, Operation::Reserve, jobs.len(), e);
    let locked = if e.is_timeout() || matches!(e, Error::DeadlineExceeded { .. }) {
        let requests: Vec<&ReserveRequest> = jobs.iter().map(|j| &j.0).collect();
        still_locked(worker, &requests).await
    } else {
        HashSet::new()
    };
    for (request, reply, deadline) in jobs {
        let held = request
            .items
            .iter()
            .map(|(p, _)| p)
            .find(|p| locked.contains(&p.get()));
        let outcome = match held {
            Some(product_id) => Err(Error::ProductLocked(product_id)),
            None => {
                let intent = Intent::Reserve(&request);
                let placement = Placement::default();
                let alone = reserve::reserve(&worker.store, &Atomic, intent, &placement);
                deadline::within_opt(deadline, alone).await
            }
        };
        let _ = reply.send(outcome.map(Granted::Reserved));
    }
}

/// Which of the batch's products another transaction still holds locked (read with SKIP
/// LOCKED, so this never waits). Empty when it cannot tell.
async fn still_locked(worker: &Worker, requests: &[&ReserveRequest]) -> HashSet<i64> {
    let products: BTreeSet<i64> = requests
        .iter()
        .flat_map(|r| r.items.iter().map(|(p, _)| p.get()))
        .collect();
    let products: Vec<i64> = products.into_iter().collect();
    let probe = &products;
    let dialect = worker.store.dialect();
    let free = in_transaction(
        &worker.store.pool,
        &worker.tx,
        Operation::LockProbe,
        move |client| crate::tx_body!(client => stock::unlocked(&Tx::new(client, dialect), probe)),
    )
    .await;
    match free {
        Ok(free) => products.into_iter().filter(|p| !free.contains(p)).collect(),
        Err(e) => {
            tracing::warn!(error = %e, "could not probe which products are locked");
            HashSet::new()
        }
    }
}

/// A queued confirm: the order and the lines it names (`None`: all).
type ConfirmJob = (OrderId, Option<Lines>);

async fn confirm_batch(worker: &Worker, jobs: Vec<(ConfirmJob, Reply<ConfirmOutcome>, Deadline)>) {
    let started = Instant::now();
    let order_ids: Vec<(&OrderId, Option<&Lines>)> =
        jobs.iter().map(|j| (&j.0 .0, j.0 .1.as_ref())).collect();
    let order_ids = &order_ids[..];
    let writer = worker.store.writer();
    let result = in_transaction(
        &worker.store.pool,
        &worker.tx,
        Operation::ConfirmBatch,
        move |client| crate::write_tx!(client, writer => |tx| confirm_tx(&tx, order_ids)),
    )
    .await;
    record_batch(Operation::Confirm, started, jobs.len());
    match result {
        Ok((outcomes, moved)) => {
            settle::note_moves(&moved);
            for (outcome, moved) in outcomes.iter().flatten() {
                settle::note_confirmed_order(outcome, moved);
            }
            worker.counters.committed(jobs.len());
            let outcomes = outcomes.into_iter().map(|o| o.map(|(outcome, _)| outcome));
            answer_each(Operation::Confirm, jobs, outcomes.collect());
        }
        Err(Error::OutcomeUnknown { cause, .. }) => {
            for (_, reply, _) in jobs {
                let _ = reply.send(Err(Error::OutcomeUnknown {
                    operation: Operation::Confirm,
                    cause: cause.clone(),
                }));
            }
        }
        Err(e) => {
            warn_fallback(worker, Operation::Confirm, jobs.len(), &e);
            // Side by side (bounded), each under its own deadline: a confirm stuck behind a
            // locked product does not hold up the others for its lock timeout.
            futures::stream::iter(jobs)
                .for_each_concurrent(
                    FALLBACK_CONCURRENCY,
                    |((order_id, lines), reply, deadline)| async move {
                        let alone = settle::confirm(&worker.store, &order_id, lines.as_ref());
                        let _ = reply.send(deadline::within_opt(deadline, alone).await);
                    },
                )
                .await;
        }
    }
}

fn warn_fallback(worker: &Worker, operation: Operation, orders: usize, e: &Error) {
    tracing::warn!(
        partition = worker.partition,
        operation = operation.as_str(),
        orders,
        error = %e,
        "batch failed; answering its orders one by one"
    );
    worker.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
}

/// Sends each job its outcome, in order. A committed batch answers every job it ran: a count
/// that differs is an invariant failure, reported to every caller (the batch committed, so what
/// each one got is unknown to us) instead of leaving the unmatched ones unanswered.
fn answer_each<W, T>(
    operation: Operation,
    jobs: Vec<(W, Reply<T>, Deadline)>,
    outcomes: Vec<Result<T, Error>>,
) {
    if outcomes.len() != jobs.len() {
        let broken = Error::invariant(format!(
            "a {operation} batch of {} jobs answered {} outcomes",
            jobs.len(),
            outcomes.len()
        ));
        for (_, reply, _) in jobs {
            let _ = reply.send(Err(Error::Invariant(broken.to_string())));
        }
        return;
    }
    for ((_, reply, _), outcome) in jobs.into_iter().zip(outcomes) {
        // The caller may have gone; its answer has nowhere to go.
        let _ = reply.send(outcome);
    }
}

/// An order that meets no other in flight runs alone: a reserve as one `atomic` transaction
/// (cheaper than the batch transaction for a single order: ~0.3 ms less, measured), a confirm
/// through the shared flow. Its claim keeps FIFO and idempotency as they are. Timed and counted
/// like a batch of one. Used by the worker for a batch of one and by callers on an idle
/// partition.
pub(super) async fn reserve_alone(
    store: &Store,
    counters: &Counters,
    request: &ReserveRequest,
) -> Result<Reservation, Error> {
    let started = Instant::now();
    let intent = Intent::Reserve(request);
    let outcome = reserve::reserve(store, &Atomic, intent, &Placement::default()).await;
    record_batch(Operation::Reserve, started, 1);
    counters.committed(1);
    outcome
}

/// See [`reserve_alone`].
pub(super) async fn confirm_alone(
    store: &Store,
    counters: &Counters,
    order_id: &OrderId,
    lines: Option<&Lines>,
) -> Result<ConfirmOutcome, Error> {
    let started = Instant::now();
    let outcome = settle::confirm(store, order_id, lines).await;
    record_batch(Operation::Confirm, started, 1);
    counters.committed(1);
    outcome
}

/// One transaction of the engine (a batch, or an order run alone): its duration and how many
/// orders it answered.
fn record_batch(operation: Operation, started: Instant, orders: usize) {
    metrics::histogram!(telemetry::BATCH_SECONDS, "operation" => operation.as_str())
        .record(started.elapsed().as_secs_f64());
    metrics::histogram!(telemetry::BATCH_ORDERS, "operation" => operation.as_str())
        .record(orders as f64);
}

/// The batch transaction: lock, read, decide in arrival order, write once, per-order answers.
async fn grant_batch(
    tx: &Tx<'_>,
    requests: &[&ReserveRequest],
) -> Result<Vec<Result<Granted, Error>>, Error> {
    let mut locked = lock_and_read(tx, requests).await?;
    // What each order's rows showed before the batch: its router lists those products already.
    let known: HashMap<&str, HashSet<i64>> = requests
        .iter()
        .map(|r| {
            let shown = locked
                .by_order
                .get(r.order_id.as_str())
                .map(|rows| rows.iter().map(|row| row.item.product_id.get()).collect());
            (r.order_id.as_str(), shown.unwrap_or_default())
        })
        .collect();
    let grants = grant_all(requests, &mut locked)?;
    // Each product's movement names the order that took from it (none when several did).
    let granted = requests
        .iter()
        .zip(&grants.decisions)
        .filter(|(_, d)| {
            matches!(
                d,
                Decision::Live {
                    replayed: false,
                    ..
                }
            )
        })
        .flat_map(|(r, _)| r.items.iter().map(|(p, _)| (p.get(), r.order_id.as_str())));
    tx.cause_orders(MoveKind::Reserve.as_str(), granted);
    if !grants.new_rows.is_empty() {
        let written = write_grants(tx, &grants).await?;
        let new = written
            .values()
            .map(|r| (r.order_id.as_str(), r.item.product_id.get()));
        reservations::route(tx, new, &known).await?;
        patch_written(&mut locked.by_order, written)?;
        emit_created(tx, requests, &grants.decisions, &locked);
    }
    let outcomes = requests
        .iter()
        .zip(grants.decisions)
        .map(|(request, decision)| match decision {
            Decision::Refused(e) => Err(e),
            Decision::Alone => Ok(Granted::Alone),
            Decision::Live { rows, replayed } => {
                let all = locked
                    .by_order
                    .get(request.order_id.as_str())
                    .map_or(&[][..], |v| &v[..rows.min(v.len())]);
                Ok(Granted::Reserved(Reservation {
                    order_id: request.order_id.clone(),
                    items: current_items(all),
                    replayed,
                    tags: order_tags(all),
                }))
            }
        })
        .collect();
    Ok(outcomes)
}

/// The `reservation.created` event of every order the batch granted (each a new order: its
/// first event).
fn emit_created(
    tx: &Tx<'_>,
    requests: &[&ReserveRequest],
    decisions: &[Decision],
    locked: &Locked,
) {
    for (request, decision) in requests.iter().zip(decisions) {
        let Decision::Live {
            replayed: false, ..
        } = decision
        else {
            continue;
        };
        let order = request.order_id.as_str();
        let rows = locked.by_order.get(order).map_or(&[][..], |v| &v[..]);
        let items = rows
            .iter()
            .filter(|r| r.order_position == FIRST_POSITION)
            .map(|r| &r.item);
        order_events::emit_created(tx, order, FIRST_POSITION, items, &request.tags);
    }
}

/// Locks the batch's stock rows (ascending product id) and reads its orders' rows under those
/// locks, then the location rows of its products stocked per location.
async fn lock_and_read(tx: &Tx<'_>, requests: &[&ReserveRequest]) -> Result<Locked, Error> {
    let mut products: Vec<i64> = requests
        .iter()
        .flat_map(|r| r.items.iter().map(|(p, _)| p.get()))
        .collect();
    products.sort_unstable();
    products.dedup();
    let mut order_ids: Vec<&str> = requests.iter().map(|r| r.order_id.as_str()).collect();
    order_ids.sort_unstable();
    order_ids.dedup();

    let started = Instant::now();
    let (locked_rows, existing) =
        reservations::lock_stock_and_read(tx, &products, &order_ids).await?;
    metrics::histogram!(telemetry::STOCK_LOCK_WAIT, "strategy" => "batched")
        .record(started.elapsed().as_secs_f64());
    let located: Vec<i64> = locked_rows
        .iter()
        .filter(|(_, row)| row.located)
        .map(|(p, _)| *p)
        .collect();
    let sources = locations::lock_sources(tx, &located).await?;
    let mut by_order: HashMap<String, Vec<Row>> = HashMap::with_capacity(order_ids.len());
    for row in existing {
        by_order.entry(row.order_id.clone()).or_default().push(row);
    }
    Ok(Locked {
        stock: locked_rows.into_iter().collect(),
        sources,
        by_order,
    })
}

/// One INSERT of every granted row and one UPDATE of every touched stock row, pipelined. The
/// stock rows are held since [`lock_and_read`], so the UPDATE must find each of them.
async fn write_grants(tx: &Tx<'_>, grants: &Grants<'_>) -> Result<HashMap<Uuid, Row>, Error> {
    let products: Vec<i64> = grants.taken.keys().copied().collect();
    let to_available: Vec<i32> = grants.taken.values().map(|q| -q).collect();
    let to_reserved: Vec<i32> = grants.taken.values().copied().collect();
    let (inserted, updated) = futures::try_join!(
        reservations::insert(tx, &grants.new_rows),
        stock::write_deltas(tx, &products, &to_available, &to_reserved)
    )?;
    if updated != products.len() as u64 {
        return Err(Error::invariant(format!(
            "batch updated {updated} stock rows, expected {} (all locked by the batch)",
            products.len()
        )));
    }
    if !grants.allocations.is_empty() {
        locations::apply_deltas(tx, &grants.location_taken).await?;
        let mut rows = locations::Allocations::default();
        for (id, (product, parts)) in &grants.allocations {
            for (location, quantity) in parts {
                rows.push(*id, *product, location, *quantity);
            }
        }
        rows.insert(tx).await?;
    }
    Ok(inserted
        .into_iter()
        .map(|mut row| {
            if let Some((_, parts)) = grants.allocations.get(&row.id) {
                row.item.allocations = locations::in_location_order(parts);
            }
            (row.id, row)
        })
        .collect())
}

/// One order's confirm answer and what this confirm moved of it.
type Confirmed = (ConfirmOutcome, Vec<Moved>);

/// The confirm batch: lock every row of the orders, settle all active ones in one pass (each
/// stock row updated once), answer each order as the confirm of one order would.
///
/// A confirm that names lines settles only those (the union over the batch's confirms of one
/// order) and answers about them; one that names a product its order has no line of is refused
/// alone ([`select`]) and moves nothing.
async fn confirm_tx(
    tx: &Tx<'_>,
    order_ids: &[(&OrderId, Option<&Lines>)],
) -> Result<(Vec<Result<Confirmed, Error>>, Vec<Moved>), Error> {
    let mut keys: Vec<&str> = order_ids.iter().map(|(o, _)| o.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut rows = reservations::lock_orders(tx, &keys).await?;
    locations::attach(tx, &mut rows).await?;
    let last = order_events::last_positions(&rows);
    let mut by_order: HashMap<String, Vec<Row>> = HashMap::with_capacity(keys.len());
    for row in rows {
        by_order.entry(row.order_id.clone()).or_default().push(row);
    }
    // Each confirm's own rows (its lines), or its refusal.
    let selected: Vec<Result<Vec<Row>, Error>> = order_ids
        .iter()
        .map(|&(order_id, lines)| {
            let mut rows = by_order
                .get(order_id.as_str())
                .filter(|r| !r.is_empty())
                .cloned()
                .ok_or_else(|| Error::UnknownOrder(order_id.clone()))?;
            select(order_id, &mut rows, lines)?;
            Ok(rows)
        })
        .collect();
    let mut chosen: HashMap<uuid::Uuid, &Row> = HashMap::new();
    for row in selected.iter().flatten().flatten() {
        chosen.entry(row.id).or_insert(row);
    }
    let mut to_settle: Vec<Row> = chosen.into_values().cloned().collect();
    to_settle
        .sort_by(|a, b| (&a.order_id, a.item.product_id).cmp(&(&b.order_id, b.item.product_id)));
    let moves = moves(&to_settle, Settling::Confirm);
    let settled = to_settle
        .iter()
        .map(|r| (r.item.product_id.get(), r.order_id.as_str()));
    tx.cause_orders(MoveKind::Confirm.as_str(), settled);
    let moved = settle::settle(tx, &moves, &last).await?;
    let outcomes = order_ids
        .iter()
        .zip(selected)
        .map(|(&(order_id, _), rows)| {
            let mut rows = rows?;
            apply(&mut rows, &moved);
            let mine: Vec<Moved> = moved
                .iter()
                .filter(|(id, _, _)| rows.iter().any(|r| r.id == *id))
                .copied()
                .collect();
            Ok((confirmed(order_id, &rows), mine))
        })
        .collect();
    Ok((outcomes, moved))
}
