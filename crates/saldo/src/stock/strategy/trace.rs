//! Lab-only record of the read–write window: which session read which balance, and what it
//! wrote. The race lab hands a [`TraceSink`] to the strategies through `StrategyConfig` so that
//! `saldo race --explain` can print the interleaving that actually happened, like the last-unit article's
//! two-session timeline. Production code never sets a sink; recording is then a no-op.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;

use crate::domain::ProductId;

/// Most events one sink keeps; later ones are counted, not stored, so a big race stays bounded.
pub const MAX_TRACE_EVENTS: usize = 10_000;

/// One step a session took on one product.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum TraceStep {
    /// Read the row without a lock (naive, optimistic).
    Read {
        available: i32,
        reserved: i32,
        version: i64,
    },
    /// Read the row under `FOR UPDATE` (pessimistic): nobody can change it until commit.
    Locked { available: i32 },
    /// The read said there is not enough: refused.
    Refused { available: i32 },
    /// Wrote the row; the values it holds after this statement.
    Wrote { available: i32, reserved: i32 },
    /// The optimistic UPDATE found another version: someone wrote in between.
    VersionMoved { read_version: i64 },
    /// The write failed with this SQLSTATE (23514: the CHECK refused negative stock).
    WriteFailed { sqlstate: String },
}

/// One event: a session (one `take` call), a product, a time since the sink was created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceEvent {
    pub session: u32,
    pub product_id: ProductId,
    pub at_us: u64,
    pub step: TraceStep,
}

#[derive(Debug)]
struct State {
    events: Vec<TraceEvent>,
    dropped: u64,
    next_session: u32,
}

/// A shared, bounded event log. Cloning shares it.
#[derive(Debug, Clone)]
pub struct TraceSink {
    started: Instant,
    state: Arc<Mutex<State>>,
}

impl Default for TraceSink {
    fn default() -> Self {
        TraceSink::new()
    }
}

impl TraceSink {
    pub fn new() -> Self {
        TraceSink {
            started: Instant::now(),
            state: Arc::new(Mutex::new(State {
                events: Vec::new(),
                dropped: 0,
                next_session: 1,
            })),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves a log that is still a valid prefix.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new session number (1, 2, …) for one `take` call.
    pub fn session(&self) -> u32 {
        let mut s = self.state();
        let n = s.next_session;
        s.next_session = s.next_session.saturating_add(1);
        n
    }

    pub fn record(&self, session: u32, product_id: ProductId, step: TraceStep) {
        let at_us = u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let mut s = self.state();
        if s.events.len() >= MAX_TRACE_EVENTS {
            s.dropped += 1;
            return;
        }
        s.events.push(TraceEvent {
            session,
            product_id,
            at_us,
            step,
        });
    }

    /// Every kept event in time order, and how many were dropped at the bound.
    pub fn events(&self) -> (Vec<TraceEvent>, u64) {
        let s = self.state();
        let mut events = s.events.clone();
        events.sort_by_key(|e| (e.at_us, e.session));
        (events, s.dropped)
    }
}

/// A session of an optional sink: what the takers carry through one `take`. Public for the race
/// lab's naive takers (`saldo-lab`).
pub struct Session<'a> {
    sink: Option<&'a TraceSink>,
    id: u32,
}

impl<'a> Session<'a> {
    pub fn start(sink: Option<&'a TraceSink>) -> Self {
        let id = sink.map_or(0, TraceSink::session);
        Session { sink, id }
    }

    pub fn record(&self, product_id: ProductId, step: impl FnOnce() -> TraceStep) {
        if let Some(sink) = self.sink {
            sink.record(self.id, product_id, step());
        }
    }

    /// Records what a write's `RETURNING available, reserved` says the row now holds.
    pub fn record_written(
        &self,
        product_id: ProductId,
        row: &tokio_postgres::Row,
    ) -> Result<(), tokio_postgres::Error> {
        let (available, reserved): (i32, i32) =
            (row.try_get("available")?, row.try_get("reserved")?);
        self.record(product_id, || TraceStep::Wrote {
            available,
            reserved,
        });
        Ok(())
    }
}
