//! Reading the feed (a page after a [`Cursor`], filtered), its end, and retention.
//!
//! The feed only grows at its end ([`super::sequencer`] appends to it), so a cursor (the `seq`
//! of the last event read) never misses an event nor sees one twice. A read first runs a
//! sequencer pass (cheap when nothing is new; skipped when another pass is running), so a reader
//! never waits for a background task to see what has committed.
//!
//! Retention ([`prune`]) deletes the oldest events of the feed past a duration, in bounded
//! batches, and remembers how far it went: a cursor from before that point lost events and is
//! refused ([`Error::CursorExpired`]): the reader resynchronises from the list endpoints.

use std::time::Duration;

use crate::error::Error;
use crate::operation::Operation;
use crate::store::dialect::{Sql, Tx};
use crate::store::handle::Store;
use crate::store::retry::{checkout, in_transaction};
use crate::telemetry;

use super::model::{Cursor, Event, Filter, Page};
use super::sequencer;

/// Most events one page returns.
pub const MAX_PAGE: usize = 1_000;
/// Events a filtered read looks at, at most, to fill one page (the next cursor then points past
/// them, so a reader of a rare type still moves forward).
pub const MAX_SCAN: i64 = 5_000;
/// Events deleted per retention statement.
pub const PRUNE_BATCH: i64 = 5_000;
/// Retention batches per [`prune`] call at most.
pub const MAX_PRUNE_BATCHES: usize = 100;
/// Default retention of events.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// The feed after a `seq`, in order.
const READ: Sql = Sql::same(
    "SELECT f.seq, e.id, e.stream_type, e.stream_id, e.position, e.type, e.at, e.data \
       FROM feed f JOIN events e ON e.xid = f.xid AND e.id = f.id \
      WHERE f.seq > $1 ORDER BY f.seq LIMIT $2",
);
/// The feed's ends: the last `seq` given and how far retention went.
const ENDS: Sql = Sql::same("SELECT last_seq, pruned_seq FROM feed_state");

/// Reads a page of the feed after `after` (`None`: from the oldest event kept), see the module
/// header. `limit` is clamped to 1..=[`MAX_PAGE`].
pub async fn read(
    store: &Store,
    after: Option<Cursor>,
    limit: usize,
    filter: &Filter,
) -> Result<Page, Error> {
    sequencer::pass(store).await?;
    let client = checkout(&store.pool, Operation::Events).await?;
    let tx = Tx::new(&client, store.dialect());
    let ends = tx.query_one(&ENDS, &[]).await?;
    let pruned = Cursor::at(ends.try_get("pruned_seq")?);
    let after = match after {
        Some(after) if after < pruned => {
            return Err(Error::CursorExpired {
                cursor: after.to_string(),
            })
        }
        Some(after) => after,
        None => pruned,
    };
    let limit = limit.clamp(1, MAX_PAGE);
    let scan = if filter.is_empty() {
        limit as i64
    } else {
        MAX_SCAN
    };
    let rows = tx.query(&READ, &[&after.seq(), &scan]).await?;
    let mut events = Vec::with_capacity(limit.min(rows.len()));
    let mut next = after;
    for row in &rows {
        let here = Cursor::at(row.try_get("seq")?);
        let kind: String = row.try_get("type")?;
        let stream_type: String = row.try_get("stream_type")?;
        let stream_id: String = row.try_get("stream_id")?;
        next = here;
        if !filter.matches(&kind, &stream_type, &stream_id) {
            continue;
        }
        events.push(Event {
            cursor: here.to_string(),
            seq: here.seq(),
            id: row.try_get("id")?,
            kind,
            stream: format!("{stream_type}:{stream_id}"),
            position: row.try_get("position")?,
            at: row.try_get("at")?,
            data: row.try_get("data")?,
        });
        if events.len() == limit {
            break;
        }
    }
    Ok(Page {
        events,
        next: next.to_string(),
    })
}

/// The feed's current end: a reader starting here sees only what comes after now.
pub async fn end(store: &Store) -> Result<Cursor, Error> {
    sequencer::pass(store).await?;
    let client = checkout(&store.pool, Operation::Events).await?;
    let row = Tx::new(&client, store.dialect())
        .query_one(&ENDS, &[])
        .await?;
    Ok(Cursor::at(row.try_get("last_seq")?))
}

/// The age of the oldest committed event not yet in the feed: those after the sequencer's
/// frontier (what this snapshot sees of them committed) and those it held back. Both come from
/// small ranges (the primary key after the frontier, the deferred set), never a scan of the feed.
const LAG: Sql = Sql::same(
    "SELECT GREATEST(0, COALESCE(extract(epoch FROM clock_timestamp() - LEAST( \
        (SELECT min(e.at) FROM events e, feed_state s \
          WHERE (e.xid, e.id) > (s.next_xid, s.next_id)), \
        (SELECT min(e.at) FROM feed_deferred d JOIN events e ON e.xid = d.xid AND e.id = d.id) \
     )), 0))::float8 AS lag",
);

/// How far the feed is behind what has committed (see [`LAG`]: an event's age counts from its
/// transaction's start); sets `saldo_event_feed_lag_seconds`. Zero when every committed event
/// is in the feed.
pub async fn lag(store: &Store) -> Result<Duration, Error> {
    let client = checkout(&store.pool, Operation::Events).await?;
    let row = Tx::new(&client, store.dialect())
        .query_one(&LAG, &[])
        .await?;
    let seconds: f64 = row.try_get("lag")?;
    telemetry::event_feed_lag(seconds);
    Ok(Duration::try_from_secs_f64(seconds).unwrap_or_default())
}

/// Deletes the feed's oldest events past `retention`, [`PRUNE_BATCH`] at a time and at most
/// [`MAX_PRUNE_BATCHES`] batches, recording how far it went; answers how many it deleted.
pub async fn prune(store: &Store, retention: Duration) -> Result<u64, Error> {
    let secs = retention.as_secs_f64();
    let dialect = store.dialect();
    let mut total = 0;
    for _ in 0..MAX_PRUNE_BATCHES {
        let deleted = in_transaction(
            &store.pool,
            &store.tx,
            Operation::PruneEvents,
            move |client| crate::tx_body!(client => prune_batch(&Tx::new(client, dialect), secs)),
        )
        .await?;
        total += deleted;
        telemetry::events_pruned(deleted);
        if deleted < PRUNE_BATCH as u64 {
            break;
        }
    }
    Ok(total)
}

/// How far retention went, locked against a concurrent prune (a sequencer pass skips a round).
const PRUNED_FOR_UPDATE: Sql = Sql::same("SELECT pruned_seq FROM feed_state FOR UPDATE");
/// The oldest events of the feed, each saying whether it is past the retention.
const OLDEST: Sql = Sql::same(
    "SELECT f.seq, e.at < now() - make_interval(secs => $1) AS old \
       FROM feed f JOIN events e ON e.xid = f.xid AND e.id = f.id \
      WHERE f.seq > $2 ORDER BY f.seq LIMIT $3",
);
const DELETE_EVENTS: Sql = Sql::same(
    "DELETE FROM events e USING feed f \
      WHERE f.seq > $1 AND f.seq <= $2 AND e.xid = f.xid AND e.id = f.id",
);
const DELETE_FEED: Sql = Sql::same("DELETE FROM feed WHERE seq > $1 AND seq <= $2");
const RECORD_PRUNED: Sql = Sql::same("UPDATE feed_state SET pruned_seq = $1");

/// One batch: the prefix of the oldest events that are all past the retention, deleted.
async fn prune_batch(tx: &Tx<'_>, retention_s: f64) -> Result<u64, Error> {
    let pruned: i64 = tx
        .query_one(&PRUNED_FOR_UPDATE, &[])
        .await?
        .try_get("pruned_seq")?;
    let rows = tx
        .query(&OLDEST, &[&retention_s, &pruned, &PRUNE_BATCH])
        .await?;
    let mut last = None;
    for row in &rows {
        if !row.try_get::<_, bool>("old")? {
            break;
        }
        last = Some(row.try_get::<_, i64>("seq")?);
    }
    let Some(last) = last else {
        return Ok(0);
    };
    let deleted = tx.execute(&DELETE_EVENTS, &[&pruned, &last]).await?;
    tx.execute(&DELETE_FEED, &[&pruned, &last]).await?;
    tx.execute(&RECORD_PRUNED, &[&last]).await?;
    Ok(deleted)
}
