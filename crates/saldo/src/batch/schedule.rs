//! Which queued jobs form a partition's next batch while other batches are still in flight, and
//! the worker loop that starts them.
//!
//! A partition may run several batch transactions at once, so that two requests on different
//! rows never wait for each other's batch (at low load a batch is one request, and a single
//! in-flight batch per partition would serialise them). Concurrency must not cost the contract:
//!
//! - **FIFO per row**: a new batch never takes a row (a product, an account) that a batch in
//!   flight holds or is locking, and once a queued job is passed over, every later job sharing
//!   one of its rows is passed over too, so no later request can overtake an earlier one on a
//!   row.
//! - **One key at a time**: an idempotency key (an order id, a transfer id) is never in two
//!   batches in flight, so idempotency is still decided by one transaction that sees the other's
//!   commit.
//! - **One kind per batch**: a batch holds one kind of job (reserves or confirms), so each is one
//!   transaction; passing over a job of the other kind blocks its keys like any other.
//!
//! The scan is incremental: while nothing in flight changes, newly queued jobs are checked
//! against the sets the last fruitless scan built instead of rescanning the whole queue (a hot
//! row keeps hundreds of blocked jobs queued while its batch runs).

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, Notify};

/// What the scheduler needs to know of a queued job.
pub(crate) trait Batchable {
    type Kind: Copy + PartialEq;
    /// The rows the job's transaction locks (product ids, account ids).
    fn rows(&self) -> impl Iterator<Item = i64> + '_;
    /// Its idempotency key: no two batches in flight share one.
    fn key(&self) -> &str;
    /// Jobs of one kind only form a batch.
    fn kind(&self) -> Self::Kind;
    /// True when the caller stopped waiting (went away, or withdrew at its deadline).
    fn abandoned(&self) -> bool;
}

/// The keys of a batch in flight: what no other batch may take until it ends.
#[derive(Debug, Default)]
pub(crate) struct Claim {
    pub rows: HashSet<i64>,
    pub keys: HashSet<String>,
}

impl Claim {
    /// The keys of one job alone (a caller's own one-request transaction).
    pub fn of<J: Batchable>(job: &J) -> Claim {
        let mut claim = Claim::default();
        claim.add(job);
        claim
    }

    fn add<J: Batchable>(&mut self, job: &J) {
        self.rows.extend(job.rows());
        self.keys.insert(job.key().to_owned());
    }

    fn touches<J: Batchable>(&self, job: &J) -> bool {
        self.keys.contains(job.key()) || job.rows().any(|p| self.rows.contains(&p))
    }
}

/// The transactions in flight on one partition: the worker's batches and the one-request
/// transactions callers run themselves when their partition is idle. Shared under a mutex by
/// the worker and the callers; every change bumps `generation`, so the worker's cached scan
/// knows when it is stale.
#[derive(Debug, Default)]
pub(crate) struct Claims {
    by_id: HashMap<u64, Claim>,
    next_id: u64,
    generation: u64,
}

impl Claims {
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn touches<J: Batchable>(&self, job: &J) -> bool {
        self.by_id.values().any(|c| c.touches(job))
    }

    pub fn insert(&mut self, claim: Claim) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.generation += 1;
        self.by_id.insert(id, claim);
        id
    }

    pub fn remove(&mut self, id: u64) {
        self.generation += 1;
        self.by_id.remove(&id);
    }
}

/// The queue of one partition and the scheduler's memory of its last scan.
pub(crate) struct Queue<J> {
    pending: VecDeque<J>,
    /// Keys of every batch in flight, plus those of jobs passed over by the last scan.
    blocked: Claim,
    /// Jobs at the front of `pending` the last scan passed over, and the claims generation it
    /// saw; a full rescan is due when the claims changed since.
    scanned: Option<(usize, u64)>,
}

impl<J: Batchable> Queue<J> {
    pub fn new() -> Self {
        Queue {
            pending: VecDeque::new(),
            blocked: Claim::default(),
            scanned: None,
        }
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn push(&mut self, job: J) {
        self.pending.push_back(job);
    }

    /// The next batch: up to `max_batch` jobs of one kind, in arrival order, none touching a key
    /// in `in_flight` or a key of a job passed over before it, and the keys it claims. `None`
    /// when nothing can start. Callers that went away are dropped on the way: nothing is
    /// done in their name.
    pub fn next_batch(&mut self, in_flight: &Claims, max_batch: usize) -> Option<(Vec<J>, Claim)> {
        let start = match self.scanned {
            Some((n, generation)) if generation == in_flight.generation => n,
            _ => {
                self.blocked = Claim::default();
                for claim in in_flight.by_id.values() {
                    self.blocked.rows.extend(claim.rows.iter().copied());
                    self.blocked.keys.extend(claim.keys.iter().cloned());
                }
                0
            }
        };

        let mut kind = None;
        let mut claim = Claim::default();
        // Positions (ascending) of the jobs leaving the queue, and whether each joins the batch
        // (true) or is dropped because its caller went away (false).
        let mut leaving: Vec<(usize, bool)> = Vec::new();
        let mut taken = 0;
        for (index, job) in self.pending.iter().enumerate().skip(start) {
            if taken >= max_batch.max(1) {
                break;
            }
            if job.abandoned() {
                leaving.push((index, false));
            } else if !self.blocked.touches(job) && kind.is_none_or(|k| k == job.kind()) {
                kind = Some(job.kind());
                claim.add(job);
                leaving.push((index, true));
                taken += 1;
            } else {
                self.blocked.add(job);
            }
        }
        let mut jobs = Vec::with_capacity(taken);
        if !leaving.is_empty() {
            let mut rest = VecDeque::with_capacity(self.pending.len() - leaving.len());
            let mut leaving = leaving.into_iter().peekable();
            for (index, job) in std::mem::take(&mut self.pending).into_iter().enumerate() {
                match leaving.next_if(|(at, _)| *at == index) {
                    Some((_, true)) => jobs.push(job),
                    Some((_, false)) => {}
                    None => rest.push_back(job),
                }
            }
            self.pending = rest;
        }
        if jobs.is_empty() {
            // Every job still queued was checked against `blocked`: the next call resumes here.
            self.scanned = Some((self.pending.len(), in_flight.generation));
            return None;
        }
        // Something starts: the caller adds its claim, so the next scan starts over.
        self.scanned = None;
        Some((jobs, claim))
    }
}

/// What a partition's callers and its worker share.
#[derive(Default)]
pub(crate) struct Shared {
    /// Requests accepted and not yet taken into a batch (in the channel or in the worker's
    /// queue). Bounded by the queue capacity; beyond it callers get `Overloaded`.
    pub waiting: AtomicUsize,
    /// Every transaction in flight on this partition, the worker's and the callers' own.
    claims: Mutex<Claims>,
    /// Wakes the worker when a caller's own transaction ends while jobs wait.
    pub wake: Notify,
}

impl Shared {
    pub fn claims(&self) -> MutexGuard<'_, Claims> {
        // Nothing panics while holding this lock (set operations only); should that ever change,
        // the claims are still consistent enough to go on with.
        self.claims.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// How a worker forms batches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    pub max_batch: usize,
    /// Waiting for more requests before starting a batch (zero: never).
    pub linger: Duration,
    /// Transactions in flight on the partition at once, callers' own included.
    pub in_flight: usize,
}

/// A partition's worker loop: runs until every sender is dropped, the queue is drained and
/// every batch has ended. Batches run concurrently inside the calling task (up to
/// `pace.in_flight` transactions on the partition, counting callers' own, each on its own
/// pooled connection); [`Queue`] decides which queued jobs may start while others are in
/// flight, and `process` runs one batch.
pub(crate) async fn drive<J, F, Fut>(
    shared: &Shared,
    mut rx: mpsc::Receiver<J>,
    pace: Pace,
    process: F,
) where
    J: Batchable,
    F: Fn(Vec<J>) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut queue = Queue::new();
    let mut flights = FuturesUnordered::new();
    let mut receiving = true;
    // The channel plus `queue` never hold more than the queue capacity: callers reserve a
    // slot in `waiting` before sending, and the slot is given back here when the job leaves
    // the queue (into a batch, or dropped because its caller went away).
    let mut received = Vec::with_capacity(pace.max_batch);
    let mut linger_until: Option<tokio::time::Instant> = None;
    let process = &process;
    loop {
        let lingering = linger_until.is_some_and(|t| tokio::time::Instant::now() < t)
            && queue.len() < pace.max_batch;
        if !lingering && !queue.is_empty() {
            let mut claims = shared.claims();
            while claims.len() < pace.in_flight && !queue.is_empty() {
                let before = queue.len();
                let next = queue.next_batch(&claims, pace.max_batch);
                shared
                    .waiting
                    .fetch_sub(before - queue.len(), Ordering::AcqRel);
                let Some((jobs, claim)) = next else {
                    break;
                };
                let id = claims.insert(claim);
                flights.push(async move {
                    process(jobs).await;
                    id
                });
            }
        }
        if queue.is_empty() {
            linger_until = None;
        }
        if !receiving && queue.is_empty() && flights.is_empty() {
            break;
        }
        tokio::select! {
            Some(id) = flights.next(), if !flights.is_empty() => {
                shared.claims().remove(id);
            }
            n = rx.recv_many(&mut received, pace.max_batch), if receiving => {
                if n == 0 {
                    receiving = false;
                }
                if queue.is_empty() && !pace.linger.is_zero() && n > 0 {
                    linger_until = Some(tokio::time::Instant::now() + pace.linger);
                }
                for job in received.drain(..) {
                    queue.push(job);
                }
            }
            // A caller's own transaction ended while jobs waited: they may start now.
            () = shared.wake.notified() => {}
            () = tokio::time::sleep_until(linger_until.unwrap_or_else(tokio::time::Instant::now)),
                if lingering => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Weak};

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Kind {
        Reserve,
        Confirm,
    }

    /// A queued job as the scheduler sees one: rows, a key, a kind, and a caller who may leave.
    struct Job {
        key: String,
        rows: Vec<i64>,
        kind: Kind,
        caller: Weak<()>,
    }

    impl Batchable for Job {
        type Kind = Kind;
        fn rows(&self) -> impl Iterator<Item = i64> + '_ {
            self.rows.iter().copied()
        }
        fn key(&self) -> &str {
            &self.key
        }
        fn kind(&self) -> Kind {
            self.kind
        }
        fn abandoned(&self) -> bool {
            self.caller.strong_count() == 0
        }
    }

    /// The callers the tests keep waiting, so that no job counts as abandoned.
    type Keep = Vec<Arc<()>>;

    fn job(keep: &mut Keep, order: &str, rows: &[i64], kind: Kind) -> Job {
        let caller = Arc::new(());
        let job = Job {
            key: order.to_owned(),
            rows: rows.to_vec(),
            kind,
            caller: Arc::downgrade(&caller),
        };
        keep.push(caller);
        job
    }

    fn reserve(keep: &mut Keep, order: &str, products: &[i64]) -> Job {
        job(keep, order, products, Kind::Reserve)
    }

    fn confirm(keep: &mut Keep, order: &str) -> Job {
        job(keep, order, &[], Kind::Confirm)
    }

    fn orders(jobs: &[Job]) -> Vec<&str> {
        jobs.iter().map(|j| j.key()).collect()
    }

    #[test]
    fn a_batch_takes_jobs_in_arrival_order_up_to_its_size() {
        let mut keep = Keep::new();
        let mut q: Queue<Job> = Queue::new();
        for (i, p) in [1, 2, 1, 3].iter().enumerate() {
            q.push(reserve(&mut keep, &format!("o{i}"), &[*p]));
        }
        let (jobs, claim) = q.next_batch(&Claims::default(), 3).expect("a batch");
        assert!(jobs.iter().all(|j| j.kind() == Kind::Reserve));
        assert_eq!(orders(&jobs), ["o0", "o1", "o2"]);
        assert_eq!(claim.rows, HashSet::from([1, 2]));
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn products_in_flight_are_not_taken_and_later_jobs_keep_their_place() {
        let mut keep = Keep::new();
        let mut q: Queue<Job> = Queue::new();
        let mut busy = Claims::default();
        let mut product_1 = Claim::default();
        product_1.rows.insert(1);
        let held = busy.insert(product_1);
        // o0 waits for product 1; o1 wants 1 and 2, so product 2 is blocked behind it; o2 wants
        // only 2 and must not overtake o1; o3 is free.
        q.push(reserve(&mut keep, "o0", &[1]));
        q.push(reserve(&mut keep, "o1", &[1, 2]));
        q.push(reserve(&mut keep, "o2", &[2]));
        q.push(reserve(&mut keep, "o3", &[3]));
        let (jobs, claim) = q.next_batch(&busy, 10).expect("a batch");
        assert_eq!(orders(&jobs), ["o3"]);
        assert_eq!(q.len(), 3);
        busy.insert(claim);
        // Nothing else can start while product 1 is busy, however often we ask.
        assert!(q.next_batch(&busy, 10).is_none());
        q.push(reserve(&mut keep, "o4", &[2]));
        assert!(q.next_batch(&busy, 10).is_none());
        busy.remove(held);
        let (jobs, _) = q.next_batch(&busy, 10).expect("a batch");
        assert_eq!(orders(&jobs), ["o0", "o1", "o2", "o4"]);
    }

    #[test]
    fn a_claim_taken_from_outside_invalidates_the_cached_scan() {
        let mut keep = Keep::new();
        let mut q: Queue<Job> = Queue::new();
        let mut busy = Claims::default();
        let mut product_1 = Claim::default();
        product_1.rows.insert(1);
        let held = busy.insert(product_1);
        q.push(reserve(&mut keep, "o0", &[1]));
        assert!(q.next_batch(&busy, 10).is_none(), "product 1 is busy");
        // A caller runs its own transaction on product 2 (the partition's queue had nothing for
        // product 2 then); a job for product 2 queued after it must wait for it.
        let mut product_2 = Claim::default();
        product_2.rows.insert(2);
        busy.insert(product_2);
        q.push(reserve(&mut keep, "o1", &[2]));
        assert!(q.next_batch(&busy, 10).is_none(), "product 2 is busy too");
        busy.remove(held);
        let (jobs, _) = q.next_batch(&busy, 10).expect("a batch");
        assert_eq!(orders(&jobs), ["o0"]);
    }

    #[test]
    fn an_order_in_flight_is_never_in_a_second_batch() {
        let mut keep = Keep::new();
        let mut q: Queue<Job> = Queue::new();
        let mut busy = Claims::default();
        let mut order_0 = Claim::default();
        order_0.keys.insert("o0".into());
        busy.insert(order_0);
        q.push(confirm(&mut keep, "o0"));
        q.push(reserve(&mut keep, "o0", &[5]));
        q.push(reserve(&mut keep, "o1", &[6]));
        let (jobs, _) = q.next_batch(&busy, 10).expect("a batch");
        assert!(jobs.iter().all(|j| j.kind() == Kind::Reserve));
        assert_eq!(orders(&jobs), ["o1"]);
    }

    #[test]
    fn a_batch_holds_one_kind_and_the_other_kind_waits_its_turn() {
        let mut keep = Keep::new();
        let mut q: Queue<Job> = Queue::new();
        q.push(confirm(&mut keep, "a"));
        q.push(reserve(&mut keep, "b", &[1]));
        q.push(confirm(&mut keep, "c"));
        let (jobs, _) = q.next_batch(&Claims::default(), 10).expect("a batch");
        assert!(jobs.iter().all(|j| j.kind() == Kind::Confirm));
        assert_eq!(orders(&jobs), ["a", "c"]);
        let (jobs, _) = q.next_batch(&Claims::default(), 10).expect("a batch");
        assert!(jobs.iter().all(|j| j.kind() == Kind::Reserve));
        assert_eq!(orders(&jobs), ["b"]);
        assert!(q.is_empty());
    }

    #[test]
    fn abandoned_jobs_are_dropped_before_they_are_batched() {
        let mut keep = Keep::new();
        let mut q: Queue<Job> = Queue::new();
        q.push(reserve(&mut keep, "gone", &[1]));
        keep.clear();
        q.push(reserve(&mut keep, "kept", &[1]));
        let (jobs, _) = q.next_batch(&Claims::default(), 10).expect("a batch");
        assert_eq!(orders(&jobs), ["kept"]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_caller_leaving_from_the_scanned_part_does_not_hide_later_jobs() {
        let mut keep = Keep::new();
        let mut q: Queue<Job> = Queue::new();
        let mut busy = Claims::default();
        let mut product_1 = Claim::default();
        product_1.rows.insert(1);
        busy.insert(product_1);
        q.push(reserve(&mut keep, "a", &[1]));
        q.push(reserve(&mut keep, "b", &[1]));
        assert!(q.next_batch(&busy, 10).is_none(), "product 1 is busy");
        q.push(reserve(&mut keep, "c", &[3]));
        keep.remove(0); // the caller of `a` goes away
        let (jobs, _) = q.next_batch(&busy, 10).expect("c is free to start");
        assert_eq!(orders(&jobs), ["c"]);
    }
}
