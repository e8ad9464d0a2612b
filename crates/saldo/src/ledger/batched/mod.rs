//! The batched ledger engine: group commit for a hot account, the money twin of the stock
//! side's batched strategy (both run on [`crate::batch`]).
//!
//! One hot account row serialises every transaction that touches it (a transfer locks both of
//! its rows), so one transfer per transaction moves money at most 1 / lock-hold-time per
//! second — and every deposit, withdrawal and opening meets on system account 0. Here movements
//! queue per partition; one worker per partition takes whatever queued while its previous batch
//! ran and applies the whole batch in ONE transaction that locks each account once (see
//! `worker`). The contract is exactly `ordered`'s: accounts locked in ascending id, funds and
//! overflow checked in arrival order on the locked balances, each movement all-or-nothing,
//! idempotent by transfer id (a replay inside or across batches answers the original result).
//!
//! Routing: a movement goes to the partition of its smaller account id (the system account for
//! every deposit and withdrawal). Correctness never depends on the partition — every batch locks
//! in ascending id — the partition only groups the movements of one hot account into one batch.
//!
//! Low load: on an idle partition (nothing queued, no transaction in flight sharing an account
//! or the transfer id) the caller runs its movement itself as one `ordered` transaction, so a
//! lone transfer pays what `ordered` pays. Queues are bounded: a full one answers
//! [`Error::Overloaded`] at once. The scheduling pieces (claims, FIFO per account, deadlines,
//! admission, the worker's loop and preamble) are the stock engine's, shared through
//! `crate::batch`.
//!
//! - `job`: what travels through a queue;
//! - `plan`: the batch decided in memory, operation by operation (pure);
//! - `batch`: the batch transaction (read and lock, decide, write once);
//! - `worker`: a batch or a lone operation run and answered.

mod batch;
mod job;
mod plan;
mod worker;

pub use crate::telemetry::{LEDGER_BATCH_OPERATIONS, LEDGER_BATCH_SECONDS};

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use tokio::sync::oneshot;

use crate::batch::config::BatchedConfig;
use crate::batch::lane::BatchedStats;
use crate::batch::lane::{partition_for, partition_for_key, Admission, Counters, Lanes};
use crate::batch::worker::Worker;
use crate::domain::{AccountId, TransferId};
use crate::error::Error;
use crate::ledger::apply::NewTransfer;
use crate::ledger::transitions::Settle;
use crate::ledger::types::Transfer;
use crate::store::deadline;
use crate::store::handle::Store;
use job::{Job, Op};

/// The batched ledger engine. Cheap to clone; clones share the queues and workers, which start
/// on the first movement (on the caller's runtime) and end when the last clone is dropped.
#[derive(Clone)]
pub struct BatchedLedger {
    store: Store,
    config: BatchedConfig,
    lanes: Arc<Lanes<Job>>,
    counters: Arc<Counters>,
    /// The accounts of holds this engine placed, so their settles can be routed.
    holds: Arc<HoldSides>,
    /// Every worker holds a clone; a dead [`Weak`] proves they all ended.
    alive: Arc<()>,
}

/// Most holds whose accounts the engine remembers; when full it forgets them all (a settle it
/// cannot route is only routed by id instead: correctness never depends on this).
const MAX_REMEMBERED_HOLDS: usize = 100_000;

/// The accounts of recently placed holds, bounded by [`MAX_REMEMBERED_HOLDS`].
#[derive(Default)]
struct HoldSides(std::sync::Mutex<HashMap<String, (AccountId, AccountId)>>);

impl HoldSides {
    fn remember(&self, id: &TransferId, from: AccountId, to: AccountId) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_REMEMBERED_HOLDS {
            map.clear();
        }
        map.insert(id.as_str().to_owned(), (from, to));
    }

    /// The hold's accounts, forgotten once asked for (a repeated settle is routed by id).
    fn sides(&self, id: &TransferId) -> Option<(AccountId, AccountId)> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(id.as_str())
    }
}

impl BatchedLedger {
    /// Builds the queues (the knobs are the stock engine's, clamped to the same limits). No task
    /// is spawned here, so building outside a runtime is fine.
    pub fn new(store: Store, config: &BatchedConfig) -> Self {
        let config = config.clamped();
        let lanes = Lanes::new(
            "batched ledger",
            config.partitions,
            config.queue_capacity,
            config.in_flight,
        );
        BatchedLedger {
            store,
            config,
            lanes: Arc::new(lanes),
            counters: Arc::new(Counters::default()),
            holds: Arc::default(),
            alive: Arc::new(()),
        }
    }

    /// The configuration in force (after clamping).
    pub fn config(&self) -> &BatchedConfig {
        &self.config
    }

    /// What the engine did so far (`orders` counts movements).
    pub fn stats(&self) -> BatchedStats {
        self.counters.stats()
    }

    /// Movements waiting in the queues (not yet taken into a batch).
    pub fn queued(&self) -> usize {
        self.lanes.queued()
    }

    /// A handle that stays upgradable while any worker task is alive (shutdown tests).
    pub fn workers_alive(&self) -> Weak<()> {
        Arc::downgrade(&self.alive)
    }

    /// Places one validated transfer, deposit, withdrawal or hold. It goes to the partition of
    /// its smaller account id (the system account for every deposit and withdrawal).
    pub(crate) async fn place(&self, t: &NewTransfer<'_>) -> Result<Transfer, Error> {
        let m = &t.movement;
        let partition = partition_for(m.from.get().min(m.to.get()), self.lanes.len());
        let placed = self.submit(partition, Op::place(t)).await;
        if let Ok(hold) = &placed {
            if t.pending.is_some() {
                self.holds.remember(&hold.id, hold.from, hold.to);
            }
        }
        placed
    }

    /// Posts or voids a hold. When this engine placed it, the settle goes to the hold's
    /// partition with its accounts (hold and post then meet in one batch on a hot account);
    /// otherwise its accounts are unknown until its row is read, and settles spread by transfer
    /// id (as the stock engine's confirms spread by order id).
    pub(crate) async fn settle(&self, id: &TransferId, how: Settle) -> Result<Transfer, Error> {
        let sides = self.holds.sides(id);
        let partition = match sides {
            Some((from, to)) => partition_for(from.get().min(to.get()), self.lanes.len()),
            None => partition_for_key(id.as_str(), self.lanes.len()),
        };
        let op = Op::Settle {
            id: id.clone(),
            how,
            sides,
        };
        self.submit(partition, op).await
    }

    /// Runs `op` alone on an idle partition, else through the partition's queue and a batch.
    async fn submit(&self, partition: usize, op: Op) -> Result<Transfer, Error> {
        self.start_workers();
        let (reply, answer) = oneshot::channel();
        let operation = op.operation();
        let job = Job {
            op: op.clone(),
            reply,
            deadline: deadline::current(),
            ticket: Arc::default(),
        };
        let ticket = job.ticket.clone();
        match self.lanes.admit(partition, job)? {
            Admission::Direct(claim) => {
                let outcome = worker::apply_alone(&self.store, &self.counters, &op).await;
                drop(claim);
                outcome
            }
            Admission::Queued => {
                self.lanes
                    .answer(partition, operation, &ticket, answer)
                    .await
            }
        }
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
