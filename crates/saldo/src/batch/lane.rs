//! A partition as its callers see it: admission (run alone on an idle partition, queue, or
//! answer "overloaded"), the deadline-aware wait for a queued job's answer, the workers started
//! on first use, and the counters of what the engine did.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::schedule::{Batchable, Claim, Shared};
use super::Ticket;
use crate::error::Error;
use crate::operation::Operation;
use crate::store::deadline;

/// How long a caller whose job started before its deadline keeps waiting for the answer: the
/// batch runs under that deadline, so only a COMMIT in flight (or a bug) can take longer.
const ANSWER_GRACE: Duration = Duration::from_secs(deadline::COMMIT_GRACE.as_secs() + 1);

/// Counters of what the workers did, for the benchmark and for tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchedStats {
    /// Batch transactions committed.
    pub batches: u64,
    /// Requests answered (reservations and confirms; ledger operations).
    pub orders: u64,
    /// Batches that failed with a non-retryable error and were replayed one by one.
    pub fallbacks: u64,
    /// Largest batch seen.
    pub largest_batch: u64,
}

/// What an engine's transactions did, for the benchmark and for tests.
#[derive(Default)]
pub(crate) struct Counters {
    pub batches: AtomicU64,
    pub requests: AtomicU64,
    pub fallbacks: AtomicU64,
    pub largest_batch: AtomicU64,
}

impl Counters {
    pub(crate) fn stats(&self) -> BatchedStats {
        BatchedStats {
            batches: self.batches.load(Ordering::Relaxed),
            orders: self.requests.load(Ordering::Relaxed),
            fallbacks: self.fallbacks.load(Ordering::Relaxed),
            largest_batch: self.largest_batch.load(Ordering::Relaxed),
        }
    }

    /// One transaction of the engine answered `requests` requests.
    pub(crate) fn committed(&self, requests: usize) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(requests as u64, Ordering::Relaxed);
        self.largest_batch
            .fetch_max(requests as u64, Ordering::Relaxed);
    }
}

/// A caller's own one-request transaction on an idle partition: its claim lasts until this is
/// dropped, even if the caller's future is dropped half-way.
pub(crate) struct DirectClaim {
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

/// Where [`Lanes::admit`] put a request.
pub(crate) enum Admission {
    /// The partition was idle for it: the caller runs it alone, holding this claim meanwhile.
    Direct(DirectClaim),
    /// In the partition's queue: the answer comes through the job's reply channel.
    Queued,
}

/// One partition as callers see it. The worker holds only `shared`: were it to hold the sender,
/// its own channel could never close.
struct Lane<J> {
    sender: mpsc::Sender<J>,
    shared: Arc<Shared>,
}

/// Every partition of an engine, and the receivers its workers take when they start.
pub(crate) struct Lanes<J> {
    /// Names the engine in "overloaded" answers.
    engine: &'static str,
    lanes: Vec<Lane<J>>,
    capacity: usize,
    in_flight: usize,
    pending: Mutex<Vec<(usize, mpsc::Receiver<J>)>>,
    started: OnceLock<()>,
}

impl<J: Batchable> Lanes<J> {
    /// `partitions` queues of `capacity` each (both at least 1); no task is spawned here.
    pub fn new(engine: &'static str, partitions: usize, capacity: usize, in_flight: usize) -> Self {
        let mut lanes = Vec::with_capacity(partitions.max(1));
        let mut pending = Vec::with_capacity(partitions.max(1));
        for index in 0..partitions.max(1) {
            let (sender, rx) = mpsc::channel(capacity.max(1));
            lanes.push(Lane {
                sender,
                shared: Arc::new(Shared::default()),
            });
            pending.push((index, rx));
        }
        Lanes {
            engine,
            lanes,
            capacity: capacity.max(1),
            in_flight: in_flight.max(1),
            pending: Mutex::new(pending),
            started: OnceLock::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.lanes.len()
    }

    /// Requests waiting in the queues (not yet taken into a batch).
    pub fn queued(&self) -> usize {
        self.lanes
            .iter()
            .map(|l| l.shared.waiting.load(Ordering::Acquire))
            .sum()
    }

    /// Starts the workers once, on the caller's runtime: `spawn` gets each partition's index,
    /// receiver and shared state.
    pub fn start(&self, mut spawn: impl FnMut(usize, mpsc::Receiver<J>, Arc<Shared>)) {
        self.started.get_or_init(|| {
            let receivers = match self.pending.lock() {
                Ok(mut guard) => std::mem::take(&mut *guard),
                // A panic while holding this lock can only come from a bug in this function; the
                // receivers are still intact.
                Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
            };
            for (partition, rx) in receivers {
                spawn(partition, rx, self.lanes[partition].shared.clone());
            }
        });
    }

    /// Decides where a request goes, under the partition's claims lock so that the order of
    /// decisions is the order of the queue: straight to the caller when nothing is queued on
    /// the partition and no transaction in flight shares its rows or key (and a slot is free),
    /// else into the queue. A full queue answers `Overloaded` at once.
    pub fn admit(&self, partition: usize, job: J) -> Result<Admission, Error> {
        let engine = self.engine;
        let Some(Lane { sender, shared }) = self.lanes.get(partition) else {
            return Err(Error::Overloaded(format!(
                "{engine} engine has no partitions"
            )));
        };
        let mut claims = shared.claims();
        if shared.waiting.load(Ordering::Acquire) == 0
            && claims.len() < self.in_flight
            && !claims.touches(&job)
        {
            let id = claims.insert(Claim::of(&job));
            return Ok(Admission::Direct(DirectClaim {
                shared: shared.clone(),
                id,
            }));
        }
        let capacity = self.capacity;
        let full = || {
            Error::Overloaded(format!(
                "{engine} queue of partition {partition} is full ({capacity} requests)"
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
                        Error::Overloaded(format!("{engine} worker {partition} is not running"))
                    }
                })
            }
        }
    }

    /// Waits for a queued job's answer. At the caller's deadline a job still queued is
    /// withdrawn (the worker will never start it: "not applied" is true); one already started
    /// runs under that deadline, so its answer follows within the commit grace.
    pub async fn answer<T>(
        &self,
        partition: usize,
        operation: Operation,
        ticket: &Ticket,
        answer: oneshot::Receiver<Result<T, Error>>,
    ) -> Result<T, Error> {
        let engine = self.engine;
        let stopped = || {
            Err(Error::Overloaded(format!(
                "{engine} worker {partition} stopped before answering"
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
            metrics::counter!(crate::telemetry::DEADLINE_EXCEEDED, "operation" => operation.as_str())
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
}

/// Spreads row ids over partitions (Fibonacci hashing, so consecutive ids spread too).
pub(crate) fn partition_for(row_id: i64, partitions: usize) -> usize {
    let h = (row_id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h >> 32) as usize) % partitions.max(1)
}

/// A stable hash of a key (FNV-1a) over partitions.
pub(crate) fn partition_for_key(key: &str, partitions: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (h % partitions.max(1) as u64) as usize
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
        assert!(partition_for_key("order-1", 3) < 3);
    }
}
