//! Operator views of the live database (seed 002): who is waiting on a lock, who blocks them and
//! for how long, and how many deadlocks PostgreSQL has detected. The CLI (`saldo locks`) and the
//! service (`GET /v1/admin/locks`, the deadlock counter in `/metrics`) read the same queries here.

use deadpool_postgres::Pool;
use serde::Serialize;

use crate::error::Error;
use crate::retry::checkout;

/// Most blocked sessions returned by one look.
pub const MAX_BLOCKED_SESSIONS: i64 = 1_000;
/// Characters of each waiting query shown (seed 002 shows 80).
pub const QUERY_PREFIX_CHARS: i32 = 80;

/// Seed 002's view: sessions that wait on a lock, the pids that block them, how long their
/// transaction has been open, and the start of their query.
const BLOCKED: &str = "
SELECT a.pid,
       pg_blocking_pids(a.pid)                                        AS blocked_by,
       a.wait_event_type,
       (extract(epoch FROM now() - a.xact_start) * 1000)::bigint       AS transaction_age_ms,
       left(a.query, $2)                                              AS query
  FROM pg_stat_activity a
 WHERE cardinality(pg_blocking_pids(a.pid)) > 0
 ORDER BY a.xact_start NULLS LAST
 LIMIT $1";

const DEADLOCKS: &str = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()";

/// A session waiting on a lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockedSession {
    pub pid: i32,
    /// The sessions it waits for.
    pub blocked_by: Vec<i32>,
    pub wait_event_type: Option<String>,
    /// How long its transaction has been open; `None` outside a transaction.
    pub transaction_age_ms: Option<i64>,
    pub query: Option<String>,
}

/// Sessions waiting on locks now, oldest transaction first, at most [`MAX_BLOCKED_SESSIONS`].
pub async fn locks(pool: &Pool) -> Result<Vec<BlockedSession>, Error> {
    let client = checkout(pool, "locks").await?;
    let rows = client
        .query(BLOCKED, &[&MAX_BLOCKED_SESSIONS, &QUERY_PREFIX_CHARS])
        .await?;
    rows.iter()
        .map(|r| {
            Ok(BlockedSession {
                pid: r.try_get("pid")?,
                blocked_by: r.try_get("blocked_by")?,
                wait_event_type: r.try_get("wait_event_type")?,
                transaction_age_ms: r.try_get("transaction_age_ms")?,
                query: r.try_get("query")?,
            })
        })
        .collect()
}

/// Deadlocks PostgreSQL has detected in this database since its statistics were reset.
pub async fn deadlocks(pool: &Pool) -> Result<i64, Error> {
    let client = checkout(pool, "deadlocks").await?;
    let row = client.query_opt(DEADLOCKS, &[]).await?;
    Ok(match row {
        Some(r) => r.try_get::<_, Option<i64>>("deadlocks")?.unwrap_or(0),
        None => 0,
    })
}
