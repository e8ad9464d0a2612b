//! What travels through a partition's queue: a [`Job`] (the work, its reply channel, its
//! caller's deadline and its [`Ticket`]), and what the shared scheduler reads of it.
//!
//! A leaf of `batched`: the worker and the engine import from here, and nothing here imports
//! them back.

use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::batch::schedule::Batchable;
use crate::batch::worker::Queued;
use crate::batch::Ticket;
use crate::domain::{Lines, OrderId};
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::model::{ConfirmOutcome, Reservation, ReserveRequest};

/// The two kinds of batch transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Reserve,
    Confirm,
}

/// What a batch answers a queued reserve: its reservation, or that the order is not the batch's
/// to grant (it needs backorders, decided from the rows the batch locked) and runs as its own
/// transaction instead, on the path that decides such items.
#[derive(Debug)]
pub(crate) enum Granted {
    Reserved(Reservation),
    Alone,
}

/// One queued operation and where its answer goes.
pub(crate) enum Work {
    Reserve {
        request: ReserveRequest,
        reply: oneshot::Sender<Result<Granted, Error>>,
    },
    Confirm {
        order_id: OrderId,
        /// The lines to confirm (`None`: the whole order).
        lines: Option<Lines>,
        reply: oneshot::Sender<Result<ConfirmOutcome, Error>>,
    },
}

/// A queued operation with the deadline it carries from its caller.
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
}

impl Queued for Job {
    fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    fn ticket(&self) -> &Ticket {
        &self.ticket
    }

    fn refuse_late(self) {
        // The caller may have gone; then the answer has nowhere to go.
        match self.work {
            Work::Reserve { reply, .. } => drop(reply.send(Err(Error::DeadlineExceeded {
                operation: Operation::Reserve,
            }))),
            Work::Confirm { reply, .. } => drop(reply.send(Err(Error::DeadlineExceeded {
                operation: Operation::Confirm,
            }))),
        }
    }
}

impl Batchable for Job {
    type Kind = Kind;

    /// The stock rows a reserve locks (a confirm's products are unknown until its rows are read;
    /// it is kept apart by its order id alone).
    fn rows(&self) -> impl Iterator<Item = i64> + '_ {
        let items = match &self.work {
            Work::Reserve { request, .. } => Some(request.items.iter()),
            Work::Confirm { .. } => None,
        };
        items.into_iter().flatten().map(|(p, _)| p.get())
    }

    /// The order this job is about: no two batches in flight share one.
    fn key(&self) -> &str {
        match &self.work {
            Work::Reserve { request, .. } => request.order_id.as_str(),
            Work::Confirm { order_id, .. } => order_id.as_str(),
        }
    }

    fn kind(&self) -> Kind {
        match self.work {
            Work::Reserve { .. } => Kind::Reserve,
            Work::Confirm { .. } => Kind::Confirm,
        }
    }

    fn abandoned(&self) -> bool {
        self.ticket.withdrawn()
            || match &self.work {
                Work::Reserve { reply, .. } => reply.is_closed(),
                Work::Confirm { reply, .. } => reply.is_closed(),
            }
    }
}
