//! The outbox of one write transaction: the events its changes make, appended to the `events`
//! table by the same transaction, just before COMMIT ([`Outbox::flush`]).
//!
//! The data-access functions that write a row push the event of that write as they write it
//! (a stock row's `stock.changed`, from the row the statement returned); the flows push the
//! events only they know (an order's). So an event exists exactly when its change commits: a
//! transaction that rolls back takes its events with it, and no write path can commit a change
//! without its event by forgetting to write one. The flush is one multi-row INSERT.
//!
//! `saldo_events_written_total{stream_type}` counts committed events only: a flush tallies its
//! events in the attempt's scope ([`counting_committed`], entered by `retry`'s attempt), and
//! the tally is counted once that attempt's COMMIT succeeded. A rolled-back attempt, a retried
//! one and a COMMIT whose answer was lost count nothing.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Mutex;

use deadpool_postgres::Client;
use serde_json::Value;

use crate::error::Error;
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
}

impl StreamType {
    pub const ALL: [StreamType; 5] = [
        StreamType::Product,
        StreamType::Order,
        StreamType::Sale,
        StreamType::Account,
        StreamType::Transfer,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StreamType::Product => "product",
            StreamType::Order => "order",
            StreamType::Sale => "sale",
            StreamType::Account => "account",
            StreamType::Transfer => "transfer",
        }
    }

    pub fn parse(s: &str) -> Option<StreamType> {
        StreamType::ALL.into_iter().find(|t| t.as_str() == s)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Events flushed by one transaction attempt, by stream type, not yet known to be committed.
type Tally = RefCell<[u64; StreamType::ALL.len()]>;

tokio::task_local! {
    static WRITTEN: Tally;
}

/// Runs one transaction attempt, then counts the events its flushes wrote when `committed`
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

/// Adds flushed events to the attempt's tally (outside an attempt, counts them at once).
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

    fn take(&self) -> Vec<NewEvent> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Appends every pushed event, in the order pushed (one statement; none when empty).
    pub async fn flush(&self, client: &Client) -> Result<(), Error> {
        let events = self.take();
        if events.is_empty() {
            return Ok(());
        }
        if events.len() > MAX_EVENTS_PER_TRANSACTION {
            return Err(Error::invariant(format!(
                "a transaction made {} events, more than {MAX_EVENTS_PER_TRANSACTION}",
                events.len()
            )));
        }
        let stream_types: Vec<&str> = events.iter().map(|e| e.stream_type.as_str()).collect();
        let stream_ids: Vec<&str> = events.iter().map(|e| e.stream_id.as_str()).collect();
        let positions: Vec<i64> = events.iter().map(|e| e.position).collect();
        let kinds: Vec<&str> = events.iter().map(|e| e.kind).collect();
        let data: Vec<&Value> = events.iter().map(|e| &e.data).collect();
        let stmt = client.prepare_cached(INSERT).await?;
        client
            .execute(
                &stmt,
                &[&stream_types, &stream_ids, &positions, &kinds, &data],
            )
            .await?;
        tally(&events);
        Ok(())
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        let left = self.events.get_mut().map_or(0, |e| e.len());
        // A transaction that failed drops its events with it (right); one that succeeded without
        // flushing would be a write path outside `write_tx!`: say so loudly.
        if left > 0 && !std::thread::panicking() {
            tracing::debug!(events = left, "outbox dropped with events not flushed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metric_labels_are_the_stream_types() {
        let names: Vec<&str> = StreamType::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(names, telemetry::EVENT_STREAM_TYPES);
        for (i, t) in StreamType::ALL.iter().enumerate() {
            assert_eq!(t.index(), i);
        }
    }
}
