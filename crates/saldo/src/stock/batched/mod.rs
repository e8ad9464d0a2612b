//! The `batched` strategy: group commit at the application level, the answer to a hot product.
//!
//! One hot stock row serialises every transaction that touches it (seed 000), so one reservation
//! per transaction sells at most 1 / lock-hold-time per second. Here reservations queue per
//! partition of products; one worker per partition takes whatever queued while its previous
//! batch ran, and grants the whole batch in ONE transaction that locks each stock row once.
//! The contract is exactly `atomic`'s: no oversell, all-or-nothing per order, grants in arrival
//! order, idempotency decided under the row lock, refusals naming the product.
//!
//! Routing: an order goes to the partition of its smallest product id. Correctness never depends
//! on the partition — every batch locks its rows in ascending product id, so batches of different
//! partitions (or of other processes) cannot deadlock and the row lock stays the only
//! coordinator; the partition only groups work so that one product's orders meet in one batch.
//!
//! Low load: a partition runs up to `in_flight` transactions at once on disjoint products and
//! orders (see `schedule`), and when nothing is queued on a partition and nothing in flight
//! shares a request's products or order, the caller runs it itself as one `atomic` transaction
//! (a batch of one, without the hop to the worker and back). So a lone buyer pays what `atomic`
//! pays, and batches form only when requests actually meet.
//!
//! Confirms go through the same workers (each sale is a reserve and a confirm, and a confirm
//! settles on the same hot stock row); release and order reads use the shared lifecycle.
//! Workers start on the first `reserve` or `confirm` (on the caller's tokio runtime) and end
//! when the last clone of the [`Batched`] value is dropped: their queues close and drain.

mod job;
mod schedule;
mod worker;

pub use worker::{BATCH_ORDERS, BATCH_SECONDS};

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::deadline;
use job::{Counters, Job, Ticket, Work};
use schedule::Shared;

use crate::domain::OrderId;
use crate::error::Error;
use crate::stock::atomic::Atomic;
use crate::stock::lifecycle;
use crate::stock::types::{
    ConfirmOutcome, ReleaseOutcome, RereserveRequest, Reservation, ReserveRequest, ReservedItem,
    StockStrategy, Store,
};

/// Default number of partitions (workers). Each holds one connection while its batch runs.
pub const DEFAULT_PARTITIONS: usize = 4;
/// Most partitions a configuration may ask for.
pub const MAX_PARTITIONS: usize = 64;
/// Default queue capacity per partition: beyond it `reserve` answers `Overloaded` at once.
pub const DEFAULT_QUEUE_CAPACITY: usize = 4_096;
/// Most queued requests per partition a configuration may ask for.
pub const MAX_QUEUE_CAPACITY: usize = 1_000_000;
/// Default most orders granted by one transaction.
pub const DEFAULT_MAX_BATCH: usize = 512;
/// Most orders one batch may hold, whatever the configuration says (bounds the statement size:
/// at most this × `MAX_ITEMS_PER_ORDER` rows per insert).
pub const MAX_BATCH_LIMIT: usize = 10_000;
/// Longest optional linger (waiting for more requests before starting a batch).
pub const MAX_LINGER: Duration = Duration::from_millis(50);
/// Default batches one partition may run at once (each on its own connection). Batches in
/// flight never share a product or an order, so this only lets unrelated orders proceed
/// without waiting for each other's batch; a hot product still has one batch at a time.
pub const DEFAULT_IN_FLIGHT: usize = 2;
/// Most batches in flight per partition a configuration may ask for.
pub const MAX_IN_FLIGHT: usize = 64;
/// How long a caller whose job started before its deadline keeps waiting for the answer: the
/// batch runs under that deadline, so only a COMMIT in flight (or a bug) can take longer.
const ANSWER_GRACE: Duration = Duration::from_secs(deadline::COMMIT_GRACE.as_secs() + 1);

/// Knobs of the batched engine; every value is clamped to its limit when the engine is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchedConfig {
    pub partitions: usize,
    pub queue_capacity: usize,
    pub max_batch: usize,
    /// Zero by default: the next batch is whatever queued while the previous one ran.
    pub linger: Duration,
    /// Batch transactions one partition may run at once, on products and orders disjoint
    /// from one another.
    pub in_flight: usize,
}

impl Default for BatchedConfig {
    fn default() -> Self {
        BatchedConfig {
            partitions: DEFAULT_PARTITIONS,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            max_batch: DEFAULT_MAX_BATCH,
            linger: Duration::ZERO,
            in_flight: DEFAULT_IN_FLIGHT,
        }
    }
}

impl BatchedConfig {
    fn clamped(&self) -> BatchedConfig {
        BatchedConfig {
            partitions: self.partitions.clamp(1, MAX_PARTITIONS),
            queue_capacity: self.queue_capacity.clamp(1, MAX_QUEUE_CAPACITY),
            max_batch: self.max_batch.clamp(1, MAX_BATCH_LIMIT),
            linger: self.linger.min(MAX_LINGER),
            in_flight: self.in_flight.clamp(1, MAX_IN_FLIGHT),
        }
    }
}

/// Counters of what the workers did, for the benchmark and for tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchedStats {
    /// Batch transactions committed.
    pub batches: u64,
    /// Reservations and confirms answered by committed batches.
    pub orders: u64,
    /// Batches that failed with a non-retryable error and were replayed order by order.
    pub fallbacks: u64,
    /// Largest batch seen.
    pub largest_batch: u64,
}

/// A caller's own one-order transaction on an idle partition: its claim lasts until this is
/// dropped, even if the caller's future is dropped half-way.
struct DirectClaim {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for DirectClaim {
    fn drop(&mut self) {
        let mut claims = self.shared.claims();
        claims.remove(self.id);
        // Read under the lock: a caller that saw this claim and queued did so before we got it.
        if self.shared.waiting.load(Ordering::Acquire) > 0 {
            self.shared.wake.notify_one();
        }
    }
}

/// Where `admit` put a request.
enum Admission {
    /// The partition was idle for it: the caller runs it as one `atomic` transaction.
    Direct(DirectClaim),
    /// In the partition's queue: the answer comes through the job's reply channel.
    Queued,
}

/// One partition as callers see it. The worker holds only `shared`: were it to hold the sender,
/// its own channel could never close.
struct Partition {
    sender: mpsc::Sender<Job>,
    shared: Arc<Shared>,
}

/// Receivers kept until the workers start on the first `reserve`.
type Pending = Mutex<Vec<(usize, mpsc::Receiver<Job>)>>;

/// The batched strategy. Cheap to clone; clones share the queues and workers.
#[derive(Clone)]
pub struct Batched {
    store: Store,
    config: BatchedConfig,
    partitions: Arc<Vec<Partition>>,
    pending: Arc<Pending>,
    started: Arc<OnceLock<()>>,
    counters: Arc<Counters>,
    /// Every worker holds a clone; a dead [`Weak`] proves they all ended.
    alive: Arc<()>,
}

impl Batched {
    /// Builds the queues. No task is spawned here: workers start on the first `reserve`, on the
    /// runtime that calls it, so building outside a runtime is fine.
    pub fn new(store: Store, config: &BatchedConfig) -> Self {
        let config = config.clamped();
        let mut partitions = Vec::with_capacity(config.partitions);
        let mut receivers = Vec::with_capacity(config.partitions);
        for index in 0..config.partitions {
            let (sender, rx) = mpsc::channel(config.queue_capacity);
            let shared = Arc::new(Shared::default());
            partitions.push(Partition { sender, shared });
            receivers.push((index, rx));
        }
        Batched {
            store,
            config,
            partitions: Arc::new(partitions),
            pending: Arc::new(Mutex::new(receivers)),
            started: Arc::new(OnceLock::new()),
            counters: Arc::new(Counters::default()),
            alive: Arc::new(()),
        }
    }

    /// The configuration in force (after clamping).
    pub fn config(&self) -> &BatchedConfig {
        &self.config
    }

    /// What the workers did so far.
    pub fn stats(&self) -> BatchedStats {
        let c = &self.counters;
        BatchedStats {
            batches: c.batches.load(Ordering::Relaxed),
            orders: c.orders.load(Ordering::Relaxed),
            fallbacks: c.fallbacks.load(Ordering::Relaxed),
            largest_batch: c.largest_batch.load(Ordering::Relaxed),
        }
    }

    /// Requests waiting in the queues (not yet taken into a batch).
    pub fn queued(&self) -> usize {
        self.partitions
            .iter()
            .map(|p| p.shared.waiting.load(Ordering::Acquire))
            .sum()
    }

    /// A handle that stays upgradable while any worker task is alive (shutdown tests).
    pub fn workers_alive(&self) -> Weak<()> {
        Arc::downgrade(&self.alive)
    }

    /// The partition of an order: that of its smallest product id.
    fn partition_of(&self, request: &ReserveRequest) -> usize {
        let first = request.items.iter().next().map_or(0, |(p, _)| p.get());
        partition_for(first, self.partitions.len())
    }

    /// Decides where a request goes, under the partition's claims lock so that the order of
    /// decisions is the order of the queue: straight to the caller when nothing is queued on
    /// the partition and no transaction in flight shares its products or order (and a slot is
    /// free), else into the queue. A full queue answers `Overloaded` at once.
    fn admit(&self, partition: usize, job: Job) -> Result<Admission, Error> {
        self.start_workers();
        let Some(Partition { sender, shared }) = self.partitions.get(partition) else {
            return Err(Error::Overloaded("batched engine has no partitions".into()));
        };
        let mut claims = shared.claims();
        if shared.waiting.load(Ordering::Acquire) == 0
            && claims.len() < self.config.in_flight
            && !claims.touches(&job)
        {
            let id = claims.insert(schedule::Claim::of(&job));
            let claim = DirectClaim {
                shared: shared.clone(),
                id,
            };
            return Ok(Admission::Direct(claim));
        }
        let capacity = self.config.queue_capacity;
        let full = || {
            Error::Overloaded(format!(
                "batched queue of partition {partition} is full ({capacity} requests)"
            ))
        };
        if shared.waiting.load(Ordering::Acquire) >= capacity {
            return Err(full());
        }
        // Counted before it is sent: the worker gives the slot back when it takes the job.
        shared.waiting.fetch_add(1, Ordering::AcqRel);
        match sender.try_send(job) {
            Ok(()) => Ok(Admission::Queued),
            // The channel holds as many as `waiting` allows, so `Full` cannot happen unless the
            // worker is gone; either way the slot is given back.
            Err(e) => {
                shared.waiting.fetch_sub(1, Ordering::AcqRel);
                Err(match e {
                    mpsc::error::TrySendError::Full(_) => full(),
                    mpsc::error::TrySendError::Closed(_) => {
                        Error::Overloaded(format!("batched worker {partition} is not running"))
                    }
                })
            }
        }
    }

    /// Waits for a queued job's answer. At the caller's deadline a job still queued is
    /// withdrawn (the worker will never start it: "not applied" is true); one already started
    /// runs under that deadline, so its answer follows within the commit grace.
    async fn answer<T>(
        partition: usize,
        operation: &'static str,
        ticket: &Ticket,
        answer: oneshot::Receiver<Result<T, Error>>,
    ) -> Result<T, Error> {
        let stopped = || {
            Err(Error::Overloaded(format!(
                "batched worker {partition} stopped before answering"
            )))
        };
        let Some(deadline) = deadline::current() else {
            return answer.await.unwrap_or_else(|_| stopped());
        };
        tokio::pin!(answer);
        tokio::select! {
            answered = &mut answer => return answered.unwrap_or_else(|_| stopped()),
            () = tokio::time::sleep_until(deadline) => {}
        }
        if ticket.withdraw() {
            metrics::counter!(crate::telemetry::DEADLINE_EXCEEDED, "operation" => operation)
                .increment(1);
            return Err(Error::DeadlineExceeded { operation });
        }
        match tokio::time::timeout(ANSWER_GRACE, answer).await {
            Ok(answered) => answered.unwrap_or_else(|_| stopped()),
            Err(_) => Err(Error::OutcomeUnknown {
                operation,
                cause: "its batch outlived the deadline".into(),
            }),
        }
    }

    fn start_workers(&self) {
        self.started.get_or_init(|| {
            let receivers = match self.pending.lock() {
                Ok(mut guard) => std::mem::take(&mut *guard),
                // A panic while holding this lock can only come from a bug elsewhere in this
                // function; the receivers are still intact.
                Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
            };
            for (partition, rx) in receivers {
                let worker = worker::Worker {
                    partition,
                    store: self.store.clone(),
                    tx: self.store.tx.clone().with_index_paths_only(),
                    max_batch: self.config.max_batch,
                    linger: self.config.linger,
                    in_flight: self.config.in_flight,
                    shared: self.partitions[partition].shared.clone(),
                    counters: self.counters.clone(),
                    _alive: self.alive.clone(),
                };
                tokio::spawn(worker.run(rx));
            }
        });
    }
}

/// Spreads product ids over partitions (Fibonacci hashing, so consecutive ids spread too).
fn partition_for(product_id: i64, partitions: usize) -> usize {
    let h = (product_id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h >> 32) as usize) % partitions.max(1)
}

/// The partition of a confirm: a stable hash of the order id (FNV-1a).
fn partition_for_order(order_id: &OrderId, partitions: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in order_id.as_str().bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (h % partitions.max(1) as u64) as usize
}

#[async_trait::async_trait]
impl StockStrategy for Batched {
    fn name(&self) -> &'static str {
        "batched"
    }

    fn store(&self) -> &Store {
        &self.store
    }

    async fn reserve(&self, request: &ReserveRequest) -> Result<Reservation, Error> {
        let (reply, answer) = oneshot::channel();
        let work = Work::Reserve {
            request: request.clone(),
            reply,
        };
        let job = Job::new(work, deadline::current());
        let ticket = job.ticket.clone();
        let partition = self.partition_of(request);
        let result = match self.admit(partition, job) {
            Ok(Admission::Direct(claim)) => {
                let outcome = worker::reserve_alone(&self.store, &self.counters, request).await;
                drop(claim);
                outcome
            }
            Ok(Admission::Queued) => Self::answer(partition, "reserve", &ticket, answer).await,
            Err(e) => Err(e),
        };
        crate::stock::types::telemetry_outcome(&result);
        result
    }

    /// Confirms are batched too: each one settles on the product's stock row, so on a hot
    /// product one confirm per transaction would cap sales at `atomic`'s rate. An order's
    /// products are unknown before its rows are read, so confirms spread by order id.
    async fn confirm(&self, order_id: &OrderId) -> Result<ConfirmOutcome, Error> {
        let (reply, answer) = oneshot::channel();
        let work = Work::Confirm {
            order_id: order_id.clone(),
            reply,
        };
        let job = Job::new(work, deadline::current());
        let ticket = job.ticket.clone();
        let partition = partition_for_order(order_id, self.partitions.len());
        match self.admit(partition, job)? {
            Admission::Direct(claim) => {
                let outcome = worker::confirm_alone(&self.store, &self.counters, order_id).await;
                drop(claim);
                outcome
            }
            Admission::Queued => Self::answer(partition, "confirm", &ticket, answer).await,
        }
    }

    /// Re-reserves are rare (what expired or was released, on purpose): one `atomic`
    /// transaction, like an order run alone. The row locks keep it correct beside the batches.
    async fn rereserve(&self, request: &RereserveRequest) -> Result<Reservation, Error> {
        let intent = lifecycle::Intent::Rereserve(request);
        let result = lifecycle::reserve(&self.store, &Atomic, intent).await;
        crate::stock::types::telemetry_outcome(&result);
        result
    }

    async fn release(&self, order_id: &OrderId) -> Result<ReleaseOutcome, Error> {
        lifecycle::release(&self.store, order_id).await
    }

    async fn order(&self, order_id: &OrderId) -> Result<Vec<ReservedItem>, Error> {
        lifecycle::order(&self.store, order_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_cover_every_worker_and_stay_in_range() {
        let mut seen = [false; 4];
        for id in 1..1_000 {
            let p = partition_for(id, 4);
            assert!(p < 4);
            seen[p] = true;
        }
        assert!(seen.iter().all(|s| *s));
        assert_eq!(partition_for(7, 1), 0);
    }

    #[test]
    fn config_is_clamped_to_its_limits() {
        let c = BatchedConfig {
            partitions: 0,
            queue_capacity: usize::MAX,
            max_batch: 0,
            linger: Duration::from_secs(10),
            in_flight: 0,
        }
        .clamped();
        assert_eq!(
            c,
            BatchedConfig {
                partitions: 1,
                queue_capacity: MAX_QUEUE_CAPACITY,
                max_batch: 1,
                linger: MAX_LINGER,
                in_flight: 1,
            }
        );
    }
}
