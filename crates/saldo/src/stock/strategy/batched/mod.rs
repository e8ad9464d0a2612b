//! The `batched` strategy: group commit at the application level, the answer to a hot product.
//!
//! One hot stock row serialises every transaction that touches it, so one reservation
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
//! settles on the same hot stock row); everything else runs the shared flows.
//! Workers start on the first `reserve` or `confirm` (on the caller's tokio runtime) and end
//! when the last clone of the [`Batched`] value is dropped: their queues close and drain.

mod grant;
pub(crate) mod job;
mod worker;

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use tokio::sync::oneshot;

pub use crate::batch::config::{
    BatchedConfig, DEFAULT_IN_FLIGHT, DEFAULT_MAX_BATCH, DEFAULT_PARTITIONS,
    DEFAULT_QUEUE_CAPACITY, MAX_BATCH_LIMIT, MAX_IN_FLIGHT, MAX_LINGER, MAX_PARTITIONS,
    MAX_QUEUE_CAPACITY,
};
pub use crate::batch::lane::BatchedStats;
use crate::batch::lane::{partition_for, partition_for_key, Admission, Counters, Lanes};
use crate::batch::worker::Worker;
use crate::domain::{Lines, OrderId};
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::decide::plan::Intent;
use crate::stock::flows::reserve;
use crate::stock::model::{ConfirmOutcome, Placement, Reservation, ReserveRequest};
use crate::stock::strategy::atomic::Atomic;
use crate::stock::strategy::StockStrategy;
use crate::stock::taker::UnitTaker;
use crate::store::deadline;
use crate::store::handle::Store;
pub use crate::telemetry::{BATCH_ORDERS, BATCH_SECONDS};
use job::{Granted, Job, Work};

/// The batched strategy. Cheap to clone; clones share the queues and workers.
#[derive(Clone)]
pub struct Batched {
    store: Store,
    config: BatchedConfig,
    lanes: Arc<Lanes<Job>>,
    counters: Arc<Counters>,
    /// Every worker holds a clone; a dead [`Weak`] proves they all ended.
    alive: Arc<()>,
}

impl Batched {
    /// Builds the queues. No task is spawned here: workers start on the first `reserve`, on the
    /// runtime that calls it, so building outside a runtime is fine.
    pub fn new(store: Store, config: &BatchedConfig) -> Self {
        let config = config.clamped();
        let lanes = Lanes::new(
            "batched",
            config.partitions,
            config.queue_capacity,
            config.in_flight,
        );
        Batched {
            store,
            config,
            lanes: Arc::new(lanes),
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
        self.counters.stats()
    }

    /// Requests waiting in the queues (not yet taken into a batch).
    pub fn queued(&self) -> usize {
        self.lanes.queued()
    }

    /// A handle that stays upgradable while any worker task is alive (shutdown tests).
    pub fn workers_alive(&self) -> Weak<()> {
        Arc::downgrade(&self.alive)
    }

    /// The partition of an order: that of its smallest product id.
    fn partition_of(&self, request: &ReserveRequest) -> usize {
        let first = request.items.iter().next().map_or(0, |(p, _)| p.get());
        partition_for(first, self.lanes.len())
    }

    fn admit(&self, partition: usize, job: Job) -> Result<Admission, Error> {
        self.start_workers();
        self.lanes.admit(partition, job)
    }

    fn start_workers(&self) {
        self.lanes.start(|partition, rx, shared| {
            let w = Worker::new(
                partition,
                &self.store,
                self.config.pace(),
                shared,
                &self.counters,
                &self.alive,
            );
            tokio::spawn(async move {
                w.run(
                    rx,
                    |job| worker::run_alone(&w, job),
                    |jobs| worker::run_batch(&w, jobs),
                )
                .await;
            });
        });
    }
}

#[async_trait]
impl StockStrategy for Batched {
    fn name(&self) -> &'static str {
        "batched"
    }

    /// An order run as its own transaction (a re-reserve, an order the batch hands over) takes
    /// like `atomic`: the row locks keep it correct beside the batches.
    fn taker(&self) -> &dyn UnitTaker {
        &Atomic
    }

    /// Runs on the store the engine was built with (the same as `_store`).
    async fn reserve(
        &self,
        _store: &Store,
        request: &ReserveRequest,
    ) -> Result<Reservation, Error> {
        let (reply, answer) = oneshot::channel();
        let work = Work::Reserve {
            request: request.clone(),
            reply,
        };
        let job = Job::new(work, deadline::current());
        let ticket = job.ticket.clone();
        let partition = self.partition_of(request);
        let granted = match self.admit(partition, job)? {
            Admission::Direct(claim) => {
                let outcome = worker::reserve_alone(&self.store, &self.counters, request).await;
                drop(claim);
                return outcome;
            }
            Admission::Queued => {
                self.lanes
                    .answer(partition, Operation::Reserve, &ticket, answer)
                    .await?
            }
        };
        match granted {
            Granted::Reserved(reservation) => Ok(reservation),
            // Its items need what a batch does not grant (backorders): its own transaction.
            Granted::Alone => {
                let intent = Intent::Reserve(request);
                reserve::reserve(&self.store, &Atomic, intent, &Placement::default()).await
            }
        }
    }

    /// Confirms are batched too: each one settles on the product's stock row, so on a hot
    /// product one confirm per transaction would cap sales at `atomic`'s rate. An order's
    /// products are unknown before its rows are read, so confirms spread by order id.
    async fn confirm(
        &self,
        _store: &Store,
        order_id: &OrderId,
        lines: Option<&Lines>,
    ) -> Result<ConfirmOutcome, Error> {
        let (reply, answer) = oneshot::channel();
        let work = Work::Confirm {
            order_id: order_id.clone(),
            lines: lines.cloned(),
            reply,
        };
        let job = Job::new(work, deadline::current());
        let ticket = job.ticket.clone();
        let partition = partition_for_key(order_id.as_str(), self.lanes.len());
        match self.admit(partition, job)? {
            Admission::Direct(claim) => {
                let outcome =
                    worker::confirm_alone(&self.store, &self.counters, order_id, lines).await;
                drop(claim);
                outcome
            }
            Admission::Queued => {
                self.lanes
                    .answer(partition, Operation::Confirm, &ticket, answer)
                    .await
            }
        }
    }
}
