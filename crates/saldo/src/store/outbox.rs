//! The outbox of one write transaction: the events its changes make, appended to the `events`
//! table by the same transaction, in the same round trip as its COMMIT.
//!
//! The data-access functions that write a row push the event of that write as they write it
//! (a stock row's `stock.changed`, from the row the statement returned); the flows push the
//! events only they know (an order's). So an event exists exactly when its change commits: a
//! transaction that rolls back takes its events with it, and no write path can commit a change
//! without its event by forgetting to write one. The append is one multi-row INSERT, sent
//! together with the COMMIT ([`append_and_commit`]).
//!
//! `saldo_events_written_total{stream_type}` counts committed events only: an append tallies its
//! events in the attempt's scope ([`counting_committed`], entered by `retry`'s attempt), and
//! the tally is counted once that attempt's COMMIT succeeded. A rolled-back attempt, a retried
//! one and a COMMIT whose answer was lost count nothing.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Mutex;

use deadpool_postgres::Client;
use serde_json::Value;

use crate::error::Error;
use crate::store::journal::{self, NewMovement};
use crate::telemetry;

/// Events one transaction may append at most (a batch of the batched engines is bounded far
/// below; a transaction over it is a bug, refused before COMMIT).
pub const MAX_EVENTS_PER_TRANSACTION: usize = 100_000;

/// The kinds of stream an event belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamType {
    Product,
    Order,
    Sale,
    Account,
    Transfer,
    /// A stock move's own stream (`<product>:<move_id>`), one event.
    Move,
}

impl StreamType {
    pub const ALL: [StreamType; 6] = [
        StreamType::Product,
        StreamType::Order,
        StreamType::Sale,
        StreamType::Account,
        StreamType::Transfer,
        StreamType::Move,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StreamType::Product => "product",
            StreamType::Order => "order",
            StreamType::Sale => "sale",
            StreamType::Account => "account",
            StreamType::Transfer => "transfer",
            StreamType::Move => "move",
        }
    }

    pub fn parse(s: &str) -> Option<StreamType> {
        StreamType::ALL.into_iter().find(|t| t.as_str() == s)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Events appended by one transaction attempt, by stream type, not yet known to be committed.
type Tally = RefCell<[u64; StreamType::ALL.len()]>;

tokio::task_local! {
    static WRITTEN: Tally;
}

/// Runs one transaction attempt, then counts the events its append wrote when `committed`
/// says its COMMIT succeeded (see the module header).
pub(crate) async fn counting_committed<T>(
    attempt: impl Future<Output = T>,
    committed: impl FnOnce(&T) -> bool,
) -> T {
    WRITTEN
        .scope(Tally::default(), async move {
            let ended = attempt.await;
            if committed(&ended) {
                let tally = WRITTEN.with(|t| t.take());
                for (kind, n) in StreamType::ALL.iter().zip(tally) {
                    telemetry::events_written(kind.as_str(), n);
                }
            }
            ended
        })
        .await
}

/// Adds appended events to the attempt's tally (outside an attempt, counts them at once).
fn tally(events: &[NewEvent]) {
    let mut counts = [0u64; StreamType::ALL.len()];
    for e in events {
        counts[e.stream_type.index()] += 1;
    }
    let in_attempt = WRITTEN.try_with(|t| {
        for (slot, n) in t.borrow_mut().iter_mut().zip(counts) {
            *slot += n;
        }
    });
    if in_attempt.is_err() {
        for (kind, n) in StreamType::ALL.iter().zip(counts) {
            telemetry::events_written(kind.as_str(), n);
        }
    }
}

/// One event to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub stream_type: StreamType,
    pub stream_id: String,
    /// Its gap-free position in the stream (1, 2, …).
    pub position: i64,
    /// `stock.changed`, `reservation.created`, …
    pub kind: &'static str,
    /// The state after the change.
    pub data: Value,
}

const INSERT: &str = "INSERT INTO events (stream_type, stream_id, position, type, data) \
     SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::jsonb[])";

/// The events of one transaction so far.
#[derive(Debug, Default)]
pub struct Outbox {
    events: Mutex<Vec<NewEvent>>,
}

impl Outbox {
    pub fn push(&self, event: NewEvent) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event);
    }

    /// The events pushed so far, handed to the COMMIT ([`append_and_commit`]).
    pub(crate) fn take(&self) -> Vec<NewEvent> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Refuses a transaction that made more events (or stock movements) than
/// [`MAX_EVENTS_PER_TRANSACTION`] (a bug).
pub(crate) fn within_bound(events: &[NewEvent], moves: usize) -> Result<(), Error> {
    if moves > MAX_EVENTS_PER_TRANSACTION {
        return Err(Error::invariant(format!(
            "a transaction made {moves} stock movements, more than {MAX_EVENTS_PER_TRANSACTION}"
        )));
    }
    if events.len() > MAX_EVENTS_PER_TRANSACTION {
        return Err(Error::invariant(format!(
            "a transaction made {} events, more than {MAX_EVENTS_PER_TRANSACTION}",
            events.len()
        )));
    }
    Ok(())
}

/// Why [`append_and_commit`] failed, told apart by the statement that failed: the events INSERT
/// runs inside the transaction (its coded error aborts it, so nothing commits), while an error
/// of the COMMIT itself proves a refusal only for the SQLSTATEs of [`refused_at_commit`].
#[derive(Debug)]
pub(crate) enum CommitFailure {
    /// Preparing the events INSERT failed: nothing was sent that could commit.
    Prepare(tokio_postgres::Error),
    /// The events INSERT failed: with a code, the server aborted the transaction and the COMMIT
    /// behind it only rolled back; without one, the connection broke with both in flight.
    Insert(tokio_postgres::Error),
    /// The COMMIT failed (the INSERT, if any, succeeded).
    Commit(tokio_postgres::Error),
}

impl CommitFailure {
    /// True when the error proves nothing was committed: a coded INSERT error, or a COMMIT
    /// refused with a SQLSTATE that only a rollback gives. Anything else (no answer, a server
    /// going away, an internal error from a Citus coordinator whose postmaster died while it
    /// sent COMMIT PREPARED after its own commit record) leaves the outcome unknown.
    pub(crate) fn proves_rollback(&self) -> bool {
        match self {
            CommitFailure::Prepare(_) => true,
            CommitFailure::Insert(e) => e.code().is_some(),
            CommitFailure::Commit(e) => e.code().is_some_and(refused_at_commit),
        }
    }

    pub(crate) fn into_error(self) -> tokio_postgres::Error {
        match self {
            CommitFailure::Prepare(e) | CommitFailure::Insert(e) | CommitFailure::Commit(e) => e,
        }
    }
}

/// SQLSTATEs with which a COMMIT refuses, having rolled back: class 40 (serialization failure,
/// deadlock, a constraint checked at commit) and class 23 (a deferred constraint). Every other
/// error at COMMIT may come after the commit record was written: on Citus the coordinator
/// commits locally before it tells the workers, and an error raised then still reaches us.
pub(crate) fn refused_at_commit(code: &tokio_postgres::error::SqlState) -> bool {
    let code = code.code();
    code.starts_with("40") || code.starts_with("23")
}

/// Appends `events` (in the order pushed, one statement) and the stock journal's `moves` (one
/// statement; on Citus chunks of multi-row `VALUES`) and commits, pipelined: the INSERT and
/// the COMMIT leave together, so the transaction holds its row locks one round trip less; on a
/// hot row that round trip is the throughput. The INSERT is sent first (a future of the client
/// sends its request when first polled, and `join` polls in order).
///
/// When the INSERT fails, the server has aborted the transaction and the COMMIT behind it only
/// rolls back: the INSERT's error is the answer ([`CommitFailure::Insert`]).
pub(crate) async fn append_and_commit(
    client: &Client,
    events: &[NewEvent],
    moves: &[NewMovement],
    citus: bool,
) -> Result<(), CommitFailure> {
    if events.is_empty() && moves.is_empty() {
        return client
            .batch_execute("COMMIT")
            .await
            .map_err(CommitFailure::Commit);
    }
    // Every statement is prepared before the first is sent: the pipeline below must send the
    // INSERTs before the COMMIT.
    let stmt = if events.is_empty() {
        None
    } else {
        Some(
            client
                .prepare_cached(INSERT)
                .await
                .map_err(CommitFailure::Prepare)?,
        )
    };
    let columns = journal::Columns::of(moves);
    let journal = journal::prepare(client, citus, &columns)
        .await
        .map_err(CommitFailure::Prepare)?;
    let stream_types: Vec<&str> = events.iter().map(|e| e.stream_type.as_str()).collect();
    let stream_ids: Vec<&str> = events.iter().map(|e| e.stream_id.as_str()).collect();
    let positions: Vec<i64> = events.iter().map(|e| e.position).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind).collect();
    let data: Vec<&Value> = events.iter().map(|e| &e.data).collect();
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
        [&stream_types, &stream_ids, &positions, &kinds, &data];
    let mut inserts = Vec::with_capacity(journal.len() + 1);
    if let Some(stmt) = &stmt {
        inserts.push(client.execute(stmt, &params));
    }
    for (stmt, params) in &journal {
        inserts.push(client.execute(stmt, params));
    }
    // `join_all` polls in order, so the INSERTs leave before the COMMIT.
    let (inserted, committed) = futures::future::join(
        futures::future::join_all(inserts),
        client.batch_execute("COMMIT"),
    )
    .await;
    for result in inserted {
        result.map_err(CommitFailure::Insert)?;
    }
    committed.map_err(CommitFailure::Commit)?;
    tally(events);
    Ok(())
}

impl Drop for Outbox {
    fn drop(&mut self) {
        let left = self.events.get_mut().map_or(0, |e| e.len());
        // A transaction that failed drops its events with it (right); one that succeeded without
        // handing its events to the COMMIT would be a write path outside `write_tx!`.
        if left > 0 && !std::thread::panicking() {
            tracing::debug!(events = left, "outbox dropped with events not appended");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a rollback's SQLSTATEs prove that a failed COMMIT committed nothing; an internal
    /// error (a Citus coordinator's postmaster dying during COMMIT PREPARED), a cancel or a
    /// shutdown may come after the commit record.
    #[test]
    fn only_rollback_states_prove_a_refused_commit() {
        use tokio_postgres::error::SqlState;
        for refused in [
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::T_R_INTEGRITY_CONSTRAINT_VIOLATION,
            SqlState::UNIQUE_VIOLATION,
            SqlState::CHECK_VIOLATION,
        ] {
            assert!(refused_at_commit(&refused), "{}", refused.code());
        }
        for unknown in [
            SqlState::INTERNAL_ERROR,
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::QUERY_CANCELED,
            SqlState::CONNECTION_FAILURE,
            SqlState::IO_ERROR,
        ] {
            assert!(!refused_at_commit(&unknown), "{}", unknown.code());
        }
    }

    #[test]
    fn the_metric_labels_are_the_stream_types() {
        let names: Vec<&str> = StreamType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(names, telemetry::EVENT_STREAM_TYPES);
        for (i, t) in StreamType::ALL.iter().enumerate() {
            assert_eq!(t.index(), i);
        }
    }
}
