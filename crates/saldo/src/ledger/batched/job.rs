//! What travels through a ledger partition's queue: a [`Job`] (one movement owned, its reply
//! channel, its caller's deadline and its [`Ticket`]) and what the shared scheduler reads of it.
//!
//! A leaf of `ledger::batched`: the worker and the engine import from here.

use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::batch::schedule::Batchable;
use crate::batch::Ticket;
use crate::domain::{AccountId, Amount, TransferId};
use crate::error::Error;
use crate::ledger::types::{Movement, Transfer, TransferKind};

/// A [`Movement`] that owns its id, so that it can wait in a queue.
#[derive(Debug, Clone)]
pub(crate) struct Op {
    pub id: TransferId,
    pub from: AccountId,
    pub to: AccountId,
    pub amount: Amount,
    pub kind: TransferKind,
}

impl Op {
    pub fn of(m: &Movement<'_>) -> Op {
        Op {
            id: m.id.clone(),
            from: m.from,
            to: m.to,
            amount: m.amount,
            kind: m.kind,
        }
    }

    pub fn movement(&self) -> Movement<'_> {
        Movement {
            id: &self.id,
            from: self.from,
            to: self.to,
            amount: self.amount,
            kind: self.kind,
        }
    }
}

/// A queued movement with the deadline it carries from its caller (see [`crate::deadline`]).
pub(crate) struct Job {
    pub op: Op,
    pub reply: oneshot::Sender<Result<Transfer, Error>>,
    pub deadline: Option<Instant>,
    pub ticket: Arc<Ticket>,
}

impl Batchable for Job {
    /// Every movement (transfer, deposit, withdrawal) is the same transaction shape: one kind.
    type Kind = ();

    /// Both accounts the movement locks.
    fn rows(&self) -> impl Iterator<Item = i64> + '_ {
        [self.op.from.get(), self.op.to.get()].into_iter()
    }

    /// The transfer id: a replay is never in a second batch in flight.
    fn key(&self) -> &str {
        self.op.id.as_str()
    }

    fn kind(&self) {}

    fn abandoned(&self) -> bool {
        self.ticket.withdrawn() || self.reply.is_closed()
    }
}
