//! Group commit, the pieces both batched engines share: the stock engine
//! ([`crate::stock::batched`], a hot product) and the ledger engine
//! ([`crate::ledger::batched`], a hot account).
//!
//! Both queue requests per partition, let one worker per partition drain what queued into
//! batches, and run each batch as one transaction that locks its rows once each in id order.
//! What they share does not depend on what a batch does:
//!
//! - [`schedule`]: which queued jobs may form the next batch while others are in flight (FIFO
//!   per row, one idempotency key at a time, one kind per batch) and the worker's loop;
//! - [`lane`]: a partition as callers see it (admission: run alone on an idle partition, queue,
//!   or answer "overloaded"), the deadline-aware wait for an answer, and the engine's counters;
//! - [`Ticket`]: who decides a queued job's fate, its worker or its caller's deadline.
//!
//! What a batch does (grant reservations, move money) stays with each engine.

pub mod config;
pub(crate) mod lane;
pub(crate) mod schedule;
pub(crate) mod worker;

use std::sync::atomic::{AtomicU8, Ordering};

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
    pub(crate) fn withdraw(&self) -> bool {
        self.0
            .compare_exchange(QUEUED, WITHDRAWN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    pub(crate) fn withdrawn(&self) -> bool {
        self.0.load(Ordering::Acquire) == WITHDRAWN
    }
}
