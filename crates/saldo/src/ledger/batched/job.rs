//! What travels through a ledger partition's queue: a [`Job`] (one operation owned, its reply
//! channel, its caller's deadline and its [`Ticket`]) and what the shared scheduler reads of it.
//!
//! A leaf of `ledger::batched`: the worker and the engine import from here.

use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::batch::schedule::Batchable;
use crate::batch::worker::Queued;
use crate::batch::Ticket;
use crate::domain::{AccountId, Amount, Tags, TransferId, TransferTimeout};
use crate::error::Error;
use crate::ledger::apply::NewTransfer;
use crate::ledger::transitions::Settle;
use crate::ledger::types::{Movement, Transfer, TransferKind};
use crate::operation::Operation;

/// One ledger operation, owned so that it can wait in a queue.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// A new transfer, deposit or withdrawal: posted at once, or held (`pending`).
    Place {
        id: TransferId,
        from: AccountId,
        to: AccountId,
        amount: Amount,
        kind: TransferKind,
        pending: Option<TransferTimeout>,
        tags: Tags,
    },
    /// The post or void of a hold; `sides` are its two accounts when the engine placed the hold
    /// (transfer rows never change accounts), so it can queue and lock with them.
    Settle {
        id: TransferId,
        how: Settle,
        sides: Option<(AccountId, AccountId)>,
    },
}

impl Op {
    pub fn place(t: &NewTransfer<'_>) -> Op {
        let m = &t.movement;
        Op::Place {
            id: m.id.clone(),
            from: m.from,
            to: m.to,
            amount: m.amount,
            kind: m.kind,
            pending: t.pending,
            tags: t.tags.clone(),
        }
    }

    pub fn id(&self) -> &TransferId {
        match self {
            Op::Place { id, .. } | Op::Settle { id, .. } => id,
        }
    }

    /// The new transfer a `Place` asks for.
    pub fn new_transfer(&self) -> Option<NewTransfer<'_>> {
        match self {
            Op::Place {
                id,
                from,
                to,
                amount,
                kind,
                pending,
                tags,
            } => Some(NewTransfer {
                movement: Movement {
                    id,
                    from: *from,
                    to: *to,
                    amount: *amount,
                    kind: *kind,
                },
                pending: *pending,
                tags,
                reverses: None,
            }),
            Op::Settle { .. } => None,
        }
    }

    /// The operation's name in metrics and in "not applied" answers.
    pub fn operation(&self) -> Operation {
        match self {
            Op::Place { .. } => match self.new_transfer() {
                Some(t) => t.operation(),
                None => Operation::Transfer,
            },
            Op::Settle {
                how: Settle::Post(_),
                ..
            } => Operation::Post,
            Op::Settle { .. } => Operation::Void,
        }
    }
}

/// A queued operation with the deadline it carries from its caller (see [`crate::store::deadline`]).
pub(crate) struct Job {
    pub op: Op,
    pub reply: oneshot::Sender<Result<Transfer, Error>>,
    pub deadline: Option<Instant>,
    pub ticket: Arc<Ticket>,
}

impl Queued for Job {
    fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    fn ticket(&self) -> &Ticket {
        &self.ticket
    }

    fn refuse_late(self) {
        let operation = self.op.operation();
        // The caller may have gone; then the answer has nowhere to go.
        let _ = self.reply.send(Err(Error::DeadlineExceeded { operation }));
    }
}

impl Batchable for Job {
    /// Placements and settles share one transaction shape (lock accounts, decide in memory,
    /// write once): one kind.
    type Kind = ();

    /// The accounts the operation locks. A settle's accounts are unknown until its transfer is
    /// read, unless the engine placed the hold; an unknown one is kept apart by its transfer id
    /// alone (as the stock engine's confirms are).
    fn rows(&self) -> impl Iterator<Item = i64> + '_ {
        let accounts = match &self.op {
            Op::Place { from, to, .. } => Some([from.get(), to.get()]),
            Op::Settle {
                sides: Some((from, to)),
                ..
            } => Some([from.get(), to.get()]),
            Op::Settle { sides: None, .. } => None,
        };
        accounts.into_iter().flatten()
    }

    /// The transfer id: operations on one transfer are never in two batches in flight.
    fn key(&self) -> &str {
        self.op.id().as_str()
    }

    fn kind(&self) {}

    fn abandoned(&self) -> bool {
        self.ticket.withdrawn() || self.reply.is_closed()
    }
}
