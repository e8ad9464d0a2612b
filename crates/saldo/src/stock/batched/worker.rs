//! One partition's worker: drain the queue into a batch, grant the batch in one transaction,
//! answer every waiter. Business refusals are per-order answers inside a committed batch; only
//! a database failure fails a batch, and then (unless it is a deadlock or serialization failure,
//! which rerun the whole batch) its orders are replayed one by one through the `atomic` path,
//! so one bad order never takes its batch-mates down with it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::time::Instant;

use chrono::{DateTime, Utc};
use deadpool_postgres::Client;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use futures::stream::StreamExt;

use super::job::{Job, Work};
use crate::batch::lane::Counters;
use crate::batch::schedule::{drive, Pace, Shared};
use crate::domain::{AllocationMode, LocationId};
use crate::domain::{OrderId, ProductId, Quantity};
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::allocate::{allocate, Shortfall, Source};
use crate::stock::atomic::Atomic;
use crate::stock::layout;
use crate::stock::lifecycle::{
    self, current_items, insert_rows, parse_rows, plan, settle, Intent, NewRows, Plan, Row,
};
use crate::stock::locations;
use crate::stock::sql::{LOCK_STOCK, ORDERS_ROWS};
use crate::stock::types::{ConfirmOutcome, Reservation, ReserveRequest, ReservedItem, Status};
use crate::store::deadline;
use crate::store::handle::Store;
use crate::store::retry::{in_transaction, TxOptions};
use crate::store::schema::Layout;
use crate::telemetry;

/// Confirms of a failed batch replayed side by side at most.
const FALLBACK_CONCURRENCY: usize = 16;

pub(super) struct Worker {
    pub partition: usize,
    pub store: Store,
    /// The store's transaction options with `index_paths_only`: every statement of a batch
    /// transaction has an index path, and a sequential scan is never the right plan for it.
    pub tx: TxOptions,
    pub pace: Pace,
    /// What this partition's callers and worker share: queue count, claims, wake-up.
    pub shared: Arc<Shared>,
    pub counters: Arc<Counters>,
    /// Dropped when the task ends: lets tests prove the workers stopped.
    pub _alive: Arc<()>,
}

impl Worker {
    /// Runs until every sender is dropped, the queue is drained and every batch has ended
    /// (the shared loop, [`drive`]).
    pub async fn run(self, rx: mpsc::Receiver<Job>) {
        drive(&self.shared, rx, self.pace, |jobs| self.process(jobs)).await;
        tracing::debug!(partition = self.partition, "batched worker stopped");
    }

    /// Runs one batch. Jobs whose caller withdrew them are dropped; jobs whose deadline passed
    /// before the batch began are answered "not applied" and never run; the rest run under
    /// the earliest of their deadlines, so every caller has its answer in time.
    async fn process(&self, jobs: Vec<Job>) {
        let mut runnable = Vec::with_capacity(jobs.len());
        for job in jobs {
            if job.deadline.is_some_and(|d| d <= Instant::now()) {
                // Never started (the ticket stays queued): the caller may withdraw it too, and
                // either way the answer is the same truth.
                job.refuse(|operation| Error::DeadlineExceeded { operation });
            } else if job.ticket.start() {
                runnable.push(job);
            }
        }
        let deadline = runnable.iter().filter_map(|j| j.deadline).min();
        deadline::within_opt(deadline, self.run_batch(runnable)).await;
    }

    async fn run_batch(&self, mut jobs: Vec<Job>) {
        if jobs.len() == 1 {
            let Some(job) = jobs.pop() else { return };
            match job.work {
                Work::Reserve { request, reply } => {
                    let _ = reply.send(reserve_alone(&self.store, &self.counters, &request).await);
                }
                Work::Confirm { order_id, reply } => {
                    let _ = reply.send(confirm_alone(&self.store, &self.counters, &order_id).await);
                }
            }
            return;
        }
        // A batch holds one kind (see `schedule`), so one of these stays empty.
        let mut reserves = Vec::new();
        let mut confirms = Vec::new();
        for job in jobs {
            match job.work {
                Work::Reserve { request, reply } => reserves.push((request, reply, job.deadline)),
                Work::Confirm { order_id, reply } => confirms.push((order_id, reply, job.deadline)),
            }
        }
        if !reserves.is_empty() {
            self.reserve_batch(reserves).await;
        }
        if !confirms.is_empty() {
            self.confirm_batch(confirms).await;
        }
    }

    async fn reserve_batch(&self, jobs: Vec<(ReserveRequest, Reply<Reservation>, Deadline)>) {
        let started = Instant::now();
        let requests: Vec<&ReserveRequest> = jobs.iter().map(|j| &j.0).collect();
        let requests = &requests[..];
        let layout = self.store.layout();
        let result = in_transaction(
            &self.store.pool,
            &self.tx,
            Operation::ReserveBatch,
            move |client| crate::tx_body!(client => grant_batch(client, layout, requests)),
        )
        .await;
        record_batch(Operation::Reserve, started, jobs.len());
        match result {
            Ok(outcomes) => {
                self.counters.committed(jobs.len());
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
            Err(e) => {
                self.warn_fallback(Operation::Reserve, jobs.len(), &e);
                // A batch that waited out a lock: the products still locked are named, and only
                // the orders that touch them are refused, so a locked product holds up its
                // partition-mates for one lock timeout at most.
                let locked = if e.is_timeout() || matches!(e, Error::DeadlineExceeded { .. }) {
                    self.still_locked(requests).await
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
                            let alone = lifecycle::reserve(&self.store, &Atomic, intent);
                            deadline::within_opt(deadline, alone).await
                        }
                    };
                    let _ = reply.send(outcome);
                }
            }
        }
    }

    /// Which of the batch's products another transaction still holds locked (read with SKIP
    /// LOCKED, so this never waits). Empty when it cannot tell.
    async fn still_locked(&self, requests: &[&ReserveRequest]) -> HashSet<i64> {
        let products: BTreeSet<i64> = requests
            .iter()
            .flat_map(|r| r.items.iter().map(|(p, _)| p.get()))
            .collect();
        let products: Vec<i64> = products.into_iter().collect();
        let probe = &products;
        let layout = self.store.layout();
        let free = in_transaction(
            &self.store.pool,
            &self.tx,
            Operation::LockProbe,
            move |client| crate::tx_body!(client => layout::unlocked(client, layout, probe)),
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

    async fn confirm_batch(&self, jobs: Vec<(OrderId, Reply<ConfirmOutcome>, Deadline)>) {
        let started = Instant::now();
        let order_ids: Vec<&OrderId> = jobs.iter().map(|j| &j.0).collect();
        let order_ids = &order_ids[..];
        let layout = self.store.layout();
        let result = in_transaction(
            &self.store.pool,
            &self.tx,
            Operation::ConfirmBatch,
            move |client| crate::tx_body!(client => confirm_tx(client, layout, order_ids)),
        )
        .await;
        record_batch(Operation::Confirm, started, jobs.len());
        match result {
            Ok(outcomes) => {
                let newly: u64 = outcomes.iter().flatten().map(|(_, n)| n).sum();
                telemetry::settled("confirmed", newly);
                for (outcome, n) in outcomes.iter().flatten() {
                    lifecycle::note_confirmed_with_missing(outcome, *n);
                }
                self.counters.committed(jobs.len());
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
                self.warn_fallback(Operation::Confirm, jobs.len(), &e);
                // Side by side (bounded), each under its own deadline: a confirm stuck behind a
                // locked product does not hold up the others for its lock timeout.
                futures::stream::iter(jobs)
                    .for_each_concurrent(
                        FALLBACK_CONCURRENCY,
                        |(order_id, reply, deadline)| async move {
                            let alone = lifecycle::confirm(&self.store, &order_id);
                            let _ = reply.send(deadline::within_opt(deadline, alone).await);
                        },
                    )
                    .await;
            }
        }
    }

    fn warn_fallback(&self, operation: Operation, orders: usize, e: &Error) {
        tracing::warn!(
            partition = self.partition,
            operation = operation.as_str(),
            orders,
            error = %e,
            "batch failed; answering its orders one by one"
        );
        self.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
    }
}

type Reply<T> = oneshot::Sender<Result<T, Error>>;

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
/// A job's deadline, carried from its caller.
type Deadline = Option<Instant>;

/// An order that meets no other in flight runs alone: a reserve as one `atomic` transaction
/// (cheaper than the batch transaction for a single order: ~0.3 ms less, measured), a confirm
/// through the shared lifecycle. Its claim keeps FIFO and idempotency as they are. Timed and
/// counted like a batch of one. Used by the worker for a batch of one and by callers on an idle
/// partition.
pub(super) async fn reserve_alone(
    store: &Store,
    counters: &Counters,
    request: &ReserveRequest,
) -> Result<Reservation, Error> {
    let started = Instant::now();
    let outcome = lifecycle::reserve(store, &Atomic, Intent::Reserve(request)).await;
    record_batch(Operation::Reserve, started, 1);
    counters.committed(1);
    outcome
}

/// See [`reserve_alone`].
pub(super) async fn confirm_alone(
    store: &Store,
    counters: &Counters,
    order_id: &OrderId,
) -> Result<ConfirmOutcome, Error> {
    let started = Instant::now();
    let outcome = lifecycle::confirm(store, order_id).await;
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

/// What one order of the batch came to, before the insert tells the new rows' expiry.
enum Decision {
    Refused(Error),
    /// The order's live rows are the first `rows` rows of its list (a later duplicate in the same
    /// batch may append more).
    Live {
        rows: usize,
        replayed: bool,
    },
}

/// What the batch transaction read under its locks.
struct Locked {
    /// `available` of every locked stock row (the batch's products that exist).
    available: HashMap<i64, i32>,
    /// Those of them with a backorder limit: an order they cannot serve from `available` is
    /// routed to the backorder path instead of refused (`stock::backorders`).
    backorderable: HashSet<i64>,
    /// The location rows of the batch's products stocked per location, locked after the stock
    /// rows ((product, location) order), their `available` decremented as orders are granted.
    sources: HashMap<i64, Vec<Source>>,
    /// The existing rows of the batch's orders; granted rows are appended as they are decided.
    by_order: HashMap<String, Vec<Row>>,
}

/// What the batch grants, decided in memory: one decision per request in arrival order, the
/// rows to write and the units taken per product.
struct Grants<'a> {
    decisions: Vec<Decision>,
    new_rows: NewRows<'a>,
    taken: BTreeMap<i64, i32>,
    /// Products stocked per location: units taken per (product, location), and where each
    /// granted row's units came from.
    location_taken: BTreeMap<(i64, LocationId), (i32, i32)>,
    allocations: HashMap<Uuid, (ProductId, Vec<(LocationId, i32)>)>,
}

/// Allocates the order's items on located products (split, in priority order) against the
/// batch's in-memory location rows, deciding nothing yet: all of them, or the refusal.
fn allocate_located(
    sources: &HashMap<i64, Vec<Source>>,
    take: &[(ProductId, Quantity)],
) -> Result<HashMap<ProductId, Vec<(LocationId, i32)>>, Error> {
    let mut out = HashMap::new();
    for &(product, quantity) in take {
        let Some(from) = sources.get(&product.get()) else {
            continue;
        };
        match allocate(quantity.get(), AllocationMode::Split, None, from) {
            Ok(parts) => {
                out.insert(product, parts);
            }
            Err(Shortfall::Insufficient { available }) => {
                return Err(Error::InsufficientStock {
                    product_id: product,
                    requested: quantity.get(),
                    available,
                })
            }
            Err(Shortfall::UnknownLocation) => {
                return Err(Error::invariant("a split allocation named a location"))
            }
        }
    }
    Ok(out)
}

/// Takes a granted row's allocated units from the in-memory location rows and records them.
fn take_at_locations(
    sources: &mut HashMap<i64, Vec<Source>>,
    grants: &mut Grants<'_>,
    id: Uuid,
    product: ProductId,
    parts: &[(LocationId, i32)],
) {
    if let Some(from) = sources.get_mut(&product.get()) {
        for (location, quantity) in parts {
            if let Some(source) = from.iter_mut().find(|s| &s.location_id == location) {
                source.available -= quantity;
            }
            let d = grants
                .location_taken
                .entry((product.get(), location.clone()))
                .or_default();
            d.0 -= quantity;
            d.1 += quantity;
        }
    }
    grants.allocations.insert(id, (product, parts.to_vec()));
}

/// The batch transaction: lock, read, decide in arrival order, write once, per-order answers.
async fn grant_batch(
    client: &Client,
    layout: Layout,
    requests: &[&ReserveRequest],
) -> Result<Vec<Result<Reservation, Error>>, Error> {
    let mut locked = lock_and_read(client, layout, requests).await?;
    // What each order's rows showed before the batch: its router lists those products already.
    let known: HashMap<&str, HashSet<i64>> = match layout {
        Layout::Single => HashMap::new(),
        Layout::Citus => requests
            .iter()
            .map(|r| {
                let shown = locked
                    .by_order
                    .get(r.order_id.as_str())
                    .map(|rows| rows.iter().map(|row| row.item.product_id.get()).collect());
                (r.order_id.as_str(), shown.unwrap_or_default())
            })
            .collect(),
    };
    let grants = grant_in_memory(requests, &mut locked)?;
    if !grants.new_rows.is_empty() {
        let written = write_grants(client, layout, &grants).await?;
        let new = written
            .values()
            .map(|r| (r.order_id.as_str(), r.item.product_id.get()));
        layout::route(client, layout, new, &known).await?;
        patch_written(&mut locked.by_order, written)?;
    }
    let outcomes = requests
        .iter()
        .zip(grants.decisions)
        .map(|(request, decision)| match decision {
            Decision::Refused(e) => Err(e),
            Decision::Live { rows, replayed } => {
                let all = locked
                    .by_order
                    .get(request.order_id.as_str())
                    .map_or(&[][..], |v| &v[..rows.min(v.len())]);
                Ok(Reservation {
                    order_id: request.order_id.clone(),
                    items: current_items(all),
                    replayed,
                })
            }
        })
        .collect();
    Ok(outcomes)
}

/// Locks the batch's stock rows (ascending product id) and reads its orders' rows, pipelined:
/// both go out at once and the server runs them in order, so the read sees the state under the
/// lock.
async fn lock_and_read(
    client: &Client,
    layout: Layout,
    requests: &[&ReserveRequest],
) -> Result<Locked, Error> {
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
    let read = client.prepare_cached(ORDERS_ROWS).await?;
    let read_params: [&(dyn ToSql + Sync); 1] = [&order_ids];
    let (stock_rows, existing) = match layout {
        Layout::Single => {
            let lock = client.prepare_cached(LOCK_STOCK).await?;
            let lock_params: [&(dyn ToSql + Sync); 1] = [&products];
            futures::try_join!(
                client.query(&lock, &lock_params),
                client.query(&read, &read_params)
            )?
        }
        // One product per locking statement, in order; the orders' rows read after them (a
        // read across shards, unlocked, which Citus allows).
        Layout::Citus => {
            let stock_rows = layout::lock_stock(client, layout, &products).await?;
            (stock_rows, client.query(&read, &read_params).await?)
        }
    };
    metrics::histogram!(telemetry::STOCK_LOCK_WAIT, "strategy" => "batched")
        .record(started.elapsed().as_secs_f64());

    let mut available: HashMap<i64, i32> = HashMap::with_capacity(stock_rows.len());
    let mut backorderable = HashSet::new();
    let mut located = Vec::new();
    for row in &stock_rows {
        let product: i64 = row.try_get("product_id")?;
        available.insert(product, row.try_get("available")?);
        if row.try_get::<_, i32>("backorder_limit")? > 0 {
            backorderable.insert(product);
        }
        if row.try_get("located")? {
            located.push(product);
        }
    }
    // Products stocked per location: their location rows too, after every stock row (one
    // more statement, only for a batch that has such a product).
    let sources = locations::lock_sources(client, &located).await?;
    let mut by_order: HashMap<String, Vec<Row>> = HashMap::with_capacity(order_ids.len());
    for row in parse_rows(&existing)? {
        by_order.entry(row.order_id.clone()).or_default().push(row);
    }
    Ok(Locked {
        available,
        backorderable,
        sources,
        by_order,
    })
}

/// Grants in arrival order against the in-memory counts, all-or-nothing per order, deciding
/// each order through the shared idempotency [`plan`].
fn grant_in_memory<'a>(
    requests: &[&'a ReserveRequest],
    locked: &mut Locked,
) -> Result<Grants<'a>, Error> {
    let mut grants = Grants {
        decisions: Vec::with_capacity(requests.len()),
        new_rows: NewRows::default(),
        taken: BTreeMap::new(),
        location_taken: BTreeMap::new(),
        allocations: HashMap::new(),
    };
    for &request in requests {
        let rows = locked
            .by_order
            .entry(request.order_id.as_str().to_owned())
            .or_default();
        let decision = match plan(Intent::Reserve(request), rows) {
            Ok(Plan::Replay) => Decision::Live {
                rows: rows.len(),
                replayed: true,
            },
            Err(refusal) => Decision::Refused(refusal),
            Ok(Plan::Take(take)) => {
                match first_refusal(&locked.available, &locked.backorderable, &take)
                    .map_or_else(|| allocate_located(&locked.sources, &take), Err)
                {
                    Err(refusal) => Decision::Refused(refusal),
                    Ok(allocated) => {
                        for (product, quantity) in take {
                            let Some(left) = locked.available.get_mut(&product.get()) else {
                                // `first_refusal` just found the product among the locked rows.
                                return Err(Error::invariant(format!(
                                "product {product} granted in a batch but not among its locked rows"
                            )));
                            };
                            *left -= quantity.get();
                            *grants.taken.entry(product.get()).or_default() += quantity.get();
                            let id = Uuid::now_v7();
                            grants.new_rows.push(
                                id,
                                &request.order_id,
                                product,
                                quantity,
                                request.ttl,
                                None,
                            );
                            if let Some(parts) = allocated.get(&product) {
                                grants.new_rows.mark_allocated();
                                take_at_locations(
                                    &mut locked.sources,
                                    &mut grants,
                                    id,
                                    product,
                                    parts,
                                );
                            }
                            rows.push(placeholder_row(id, &request.order_id, product, quantity));
                        }
                        Decision::Live {
                            rows: rows.len(),
                            replayed: false,
                        }
                    }
                }
            }
        };
        grants.decisions.push(decision);
    }
    Ok(grants)
}

/// A granted row before the insert returns it: the database's clock gives `created_at` and
/// `expires_at`, so both stay at a placeholder until [`patch_written`] replaces the whole row
/// (a row left unpatched is an invariant failure, never answered).
fn placeholder_row(id: Uuid, order_id: &OrderId, product: ProductId, quantity: Quantity) -> Row {
    Row {
        id,
        order_id: order_id.as_str().to_owned(),
        request_key: None,
        created_at: DateTime::<Utc>::MIN_UTC,
        allocated: false,
        item: ReservedItem {
            product_id: product,
            quantity: quantity.get(),
            status: Status::Active,
            expires_at: DateTime::<Utc>::MIN_UTC,
            backordered: 0,
            allocations: Vec::new(),
        },
    }
}

/// One INSERT of every granted row and one UPDATE of every touched stock row, pipelined. The
/// stock rows are held since [`lock_and_read`], so the UPDATE must find each of them.
async fn write_grants(
    client: &Client,
    layout: Layout,
    grants: &Grants<'_>,
) -> Result<HashMap<Uuid, Row>, Error> {
    let products: Vec<i64> = grants.taken.keys().copied().collect();
    let to_available: Vec<i32> = grants.taken.values().map(|q| -q).collect();
    let to_reserved: Vec<i32> = grants.taken.values().copied().collect();
    let (inserted, updated) = futures::try_join!(
        insert_rows(client, layout, &grants.new_rows),
        layout::apply_deltas(client, layout, &products, &to_available, &to_reserved)
    )?;
    if updated != products.len() as u64 {
        return Err(Error::invariant(format!(
            "batch updated {updated} stock rows, expected {} (all locked by the batch)",
            products.len()
        )));
    }
    if !grants.allocations.is_empty() {
        locations::apply_location_deltas(client, &grants.location_taken).await?;
        let mut rows = locations::Allocations::default();
        for (id, (product, parts)) in &grants.allocations {
            for (location, quantity) in parts {
                rows.push(*id, *product, location, *quantity);
            }
        }
        rows.insert(client).await?;
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

/// Replaces every placeholder with the row the insert returned.
fn patch_written(
    by_order: &mut HashMap<String, Vec<Row>>,
    mut written: HashMap<Uuid, Row>,
) -> Result<(), Error> {
    let expected = written.len();
    for row in by_order.values_mut().flatten() {
        if let Some(stored) = written.remove(&row.id) {
            *row = stored;
        }
    }
    if !written.is_empty() {
        return Err(Error::invariant(format!(
            "{} of {expected} inserted reservation rows match no granted row",
            written.len()
        )));
    }
    let unpatched = by_order
        .values()
        .flatten()
        .filter(|r| r.created_at == DateTime::<Utc>::MIN_UTC)
        .count();
    if unpatched > 0 {
        return Err(Error::invariant(format!(
            "{unpatched} granted reservation rows kept their placeholder timestamps"
        )));
    }
    Ok(())
}

/// The first item (in product order) the in-memory counts cannot serve, as `atomic` names it;
/// on a product with a backorder limit, the order is routed to the backorder path instead
/// (answered [`Error::NeedsBackorderPath`], which `Batched::reserve` follows).
fn first_refusal(
    available: &HashMap<i64, i32>,
    backorderable: &HashSet<i64>,
    take: &[(ProductId, Quantity)],
) -> Option<Error> {
    for &(product, quantity) in take {
        match available.get(&product.get()) {
            None => return Some(Error::UnknownProduct(product)),
            Some(&a) if a < quantity.get() => {
                if backorderable.contains(&product.get()) {
                    return Some(Error::NeedsBackorderPath(product));
                }
                return Some(Error::InsufficientStock {
                    product_id: product,
                    requested: quantity.get(),
                    available: a,
                });
            }
            Some(_) => {}
        }
    }
    None
}

/// One order's confirm answer and how many of its rows this confirm moved.
type Confirmed = (ConfirmOutcome, u64);

/// The confirm batch: lock every row of the orders, settle all active ones in one pass (each
/// stock row updated once), answer each order through the shared
/// [`lifecycle::confirmed_outcome`], so it answers as `lifecycle::confirm` would.
async fn confirm_tx(
    client: &Client,
    layout: Layout,
    order_ids: &[&OrderId],
) -> Result<Vec<Result<Confirmed, Error>>, Error> {
    let mut keys: Vec<&str> = order_ids.iter().map(|o| o.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut by_order: HashMap<String, Vec<Row>> = HashMap::with_capacity(keys.len());
    let mut rows = layout::lock_orders_rows(client, layout, &keys).await?;
    crate::stock::locations::attach(client, &mut rows).await?;
    for row in rows {
        by_order.entry(row.order_id.clone()).or_default().push(row);
    }
    let active: Vec<&Row> = by_order
        .values()
        .flatten()
        .filter(|r| r.item.status == Status::Active)
        .collect();
    settle(client, layout, &active, Status::Confirmed).await?;
    let outcomes = order_ids
        .iter()
        .map(|&order_id| {
            match by_order
                .get_mut(order_id.as_str())
                .filter(|r| !r.is_empty())
            {
                Some(rows) => Ok(lifecycle::confirmed_outcome(order_id, rows)),
                None => Err(Error::UnknownOrder(order_id.clone())),
            }
        })
        .collect();
    Ok(outcomes)
}
