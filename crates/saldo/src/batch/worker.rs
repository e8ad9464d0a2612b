//! What a partition's worker does the same in both engines: its settings, its loop (the shared
//! [`drive`]), and the preamble of every batch: jobs whose caller withdrew them are dropped,
//! jobs whose deadline passed before the batch began are answered "not applied" and never run,
//! and the rest run under the earliest of their deadlines (so every caller has its answer in
//! time), one job alone as the engine's one-request transaction, several as a batch.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::lane::Counters;
use super::schedule::{drive, Batchable, Pace, Shared};
use super::Ticket;
use crate::store::deadline;
use crate::store::handle::Store;
use crate::store::retry::TxOptions;

/// A queued job as the preamble sees it.
pub(crate) trait Queued: Batchable {
    /// The deadline it carries from its caller.
    fn deadline(&self) -> Option<Instant>;
    /// Who decides its fate: its worker starting it, or its caller withdrawing it.
    fn ticket(&self) -> &Ticket;
    /// Answers a job that will never run because its deadline passed: not applied.
    fn refuse_late(self);
}

/// One partition's worker settings, the same for both engines.
pub(crate) struct Worker {
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
    pub fn new(
        partition: usize,
        store: &Store,
        pace: Pace,
        shared: Arc<Shared>,
        counters: &Arc<Counters>,
        alive: &Arc<()>,
    ) -> Worker {
        Worker {
            partition,
            store: store.clone(),
            tx: store.tx.clone().with_index_paths_only(),
            pace,
            shared,
            counters: counters.clone(),
            _alive: alive.clone(),
        }
    }

    /// Runs until every sender is dropped, the queue is drained and every batch has ended;
    /// each batch through [`preamble`] and then `alone` (one job) or `many`.
    pub async fn run<J, A, AF, M, MF>(&self, rx: mpsc::Receiver<J>, alone: A, many: M)
    where
        J: Queued,
        A: Fn(J) -> AF,
        AF: Future<Output = ()>,
        M: Fn(Vec<J>) -> MF,
        MF: Future<Output = ()>,
    {
        drive(&self.shared, rx, self.pace, |jobs| {
            preamble(jobs, &alone, &many)
        })
        .await;
        tracing::debug!(partition = self.partition, "batched worker stopped");
    }
}

/// See the module header.
pub(crate) async fn preamble<J, A, AF, M, MF>(jobs: Vec<J>, alone: A, many: M)
where
    J: Queued,
    A: FnOnce(J) -> AF,
    AF: Future<Output = ()>,
    M: FnOnce(Vec<J>) -> MF,
    MF: Future<Output = ()>,
{
    let mut runnable = Vec::with_capacity(jobs.len());
    for job in jobs {
        if job.deadline().is_some_and(|d| d <= Instant::now()) {
            // Never started (the ticket stays queued): the caller may withdraw it too, and
            // either way the answer is the same truth.
            job.refuse_late();
        } else if job.ticket().start() {
            runnable.push(job);
        }
    }
    let deadline = runnable.iter().filter_map(|j| j.deadline()).min();
    deadline::within_opt(deadline, async move {
        if runnable.len() == 1 {
            if let Some(job) = runnable.pop() {
                alone(job).await;
            }
        } else if !runnable.is_empty() {
            many(runnable).await;
        }
    })
    .await;
}
