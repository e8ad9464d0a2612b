//! What travels through a partition's queue: a [`Job`] (the work, its reply channel, its
//! caller's deadline and its [`Ticket`]), and the engine's counters.
//!
//! A leaf of `batched`: the schedule, the worker and the engine import from here, and nothing
//! here imports them back.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::domain::OrderId;
use crate::error::Error;
use crate::stock::types::{ConfirmOutcome, Reservation, ReserveRequest};

/// The two kinds of batch transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Reserve,
    Confirm,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub batches: AtomicU64,
    pub orders: AtomicU64,
    pub fallbacks: AtomicU64,
    pub largest_batch: AtomicU64,
}

impl Counters {
    /// One transaction of the engine answered `orders` orders.
    pub(super) fn committed(&self, orders: usize) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.orders.fetch_add(orders as u64, Ordering::Relaxed);
        self.largest_batch
            .fetch_max(orders as u64, Ordering::Relaxed);
    }
}

/// One queued operation and where its answer goes.
pub(crate) enum Work {
    Reserve {
        request: ReserveRequest,
        reply: oneshot::Sender<Result<Reservation, Error>>,
    },
    Confirm {
        order_id: OrderId,
        reply: oneshot::Sender<Result<ConfirmOutcome, Error>>,
    },
}

/// Who may decide a queued job's fate: the worker starting it, or its caller withdrawing it at
/// its deadline. Exactly one wins, so a caller told "not applied" can trust it.
#[derive(Debug, Default)]
pub(crate) struct Ticket(AtomicU8);

const QUEUED: u8 = 0;
const STARTED: u8 = 1;
const WITHDRAWN: u8 = 2;

impl Ticket {
    /// The worker is about to run the job: false when its caller withdrew it first.
    pub(crate) fn start(&self) -> bool {
        self.0
            .compare_exchange(QUEUED, STARTED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The caller's deadline came: false when the worker started the job first.
    pub(super) fn withdraw(&self) -> bool {
        self.0
            .compare_exchange(QUEUED, WITHDRAWN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    pub(super) fn withdrawn(&self) -> bool {
        self.0.load(Ordering::Acquire) == WITHDRAWN
    }
}

/// A queued operation with the deadline it carries from its caller (see [`crate::deadline`]).
pub(crate) struct Job {
    pub work: Work,
    pub deadline: Option<Instant>,
    pub ticket: Arc<Ticket>,
}

impl Job {
    pub(crate) fn new(work: Work, deadline: Option<Instant>) -> Self {
        Job {
            work,
            deadline,
            ticket: Arc::default(),
        }
    }

    /// The order this job is about: no two batches in flight share one.
    pub(super) fn order(&self) -> &str {
        match &self.work {
            Work::Reserve { request, .. } => request.order_id.as_str(),
            Work::Confirm { order_id, .. } => order_id.as_str(),
        }
    }

    /// The stock rows a reserve locks (a confirm's products are unknown until its rows are read;
    /// it is kept apart by its order id alone).
    pub(super) fn products(&self) -> impl Iterator<Item = i64> + '_ {
        let items = match &self.work {
            Work::Reserve { request, .. } => Some(request.items.iter()),
            Work::Confirm { .. } => None,
        };
        items.into_iter().flatten().map(|(p, _)| p.get())
    }

    pub(super) fn kind(&self) -> Kind {
        match self.work {
            Work::Reserve { .. } => Kind::Reserve,
            Work::Confirm { .. } => Kind::Confirm,
        }
    }

    /// Answers a job that will never run with `error` (for its operation).
    pub(super) fn refuse(self, error: impl Fn(&'static str) -> Error) {
        // The caller may have gone; then the answer has nowhere to go.
        match self.work {
            Work::Reserve { reply, .. } => drop(reply.send(Err(error("reserve")))),
            Work::Confirm { reply, .. } => drop(reply.send(Err(error("confirm")))),
        }
    }

    /// True when the caller stopped waiting (went away, or withdrew at its deadline).
    pub(super) fn abandoned(&self) -> bool {
        self.ticket.withdrawn()
            || match &self.work {
                Work::Reserve { reply, .. } => reply.is_closed(),
                Work::Confirm { reply, .. } => reply.is_closed(),
            }
    }
}
