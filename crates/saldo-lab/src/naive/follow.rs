//! The naive feed reader of the `events-follow` race, and the late committer that shows its bug.
//!
//! The reader follows the outbox the way most outbox relays do: "events with an id above the
//! highest I have seen, in id order". Ids are taken when a transaction writes, not when it
//! commits, so a transaction that took id 10 and commits after one that took id 11 is skipped
//! for good: the reader has moved past 10 when it becomes visible.
//!
//! The late committer is such a transaction, written by hand: it appends one event (a sale's,
//! in a stream of its own) and holds its transaction open until told to commit. (A real one is
//! any write transaction that is slow between its events and its COMMIT: a large batch, a
//! slow disk, a Citus two-phase commit.)

use deadpool_postgres::{Object, Pool};
use saldo::error::Error;
use saldo::operation::Operation;
use saldo::retry::checkout;

/// The naive reader's name in reports.
pub const NAME: &str = "naive-follow";

/// Events one naive read returns at most.
const PAGE: i64 = 500;

const READ_AFTER_ID: &str = "SELECT id, stream_type || ':' || stream_id AS stream, position \
     FROM events WHERE id > $1 ORDER BY id LIMIT $2";
const LATE_EVENT: &str = "INSERT INTO events (stream_type, stream_id, position, type, data) \
     VALUES ('sale', $1, 1, 'sale.created', '{\"late\": true}') RETURNING id";

/// One event as a reader saw it: its id, its stream and its position there.
pub type Seen = (i64, String, i64);

/// The "highest id seen" reader.
#[derive(Debug, Default)]
pub struct IdReader {
    last_id: i64,
}

impl IdReader {
    /// The events above the highest id seen so far, in id order.
    pub async fn poll(&mut self, pool: &Pool) -> Result<Vec<Seen>, Error> {
        let client = checkout(pool, Operation::Lab).await?;
        let rows = client.query(READ_AFTER_ID, &[&self.last_id, &PAGE]).await?;
        let mut seen = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: i64 = row.try_get("id")?;
            self.last_id = self.last_id.max(id);
            seen.push((id, row.try_get("stream")?, row.try_get("position")?));
        }
        Ok(seen)
    }
}

/// A transaction that has appended its event and not committed yet.
pub struct LateCommit {
    client: Object,
    pub event_id: i64,
}

impl LateCommit {
    /// Opens the transaction and appends the event of sale `sale_id`.
    pub async fn begin(pool: &Pool, sale_id: &str) -> Result<LateCommit, Error> {
        let client = checkout(pool, Operation::Lab).await?;
        client.batch_execute("BEGIN").await?;
        let event_id = client
            .query_one(LATE_EVENT, &[&sale_id])
            .await?
            .try_get(0)?;
        Ok(LateCommit { client, event_id })
    }

    pub async fn commit(self) -> Result<(), Error> {
        self.client.batch_execute("COMMIT").await?;
        Ok(())
    }
}
