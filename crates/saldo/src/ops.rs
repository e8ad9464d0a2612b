//! Operator views of the live database: who is waiting on a lock, who blocks them and
//! for how long, and how many deadlocks PostgreSQL has detected. The CLI (`saldo locks`) and the
//! service (`GET /v1/admin/locks`, the deadlock counter in `/metrics`) read the same queries here.

use deadpool_postgres::Pool;
use serde::Serialize;

use crate::error::Error;
use crate::operation::Operation;
use crate::store::retry::checkout;

/// Most blocked sessions returned by one look.
pub const MAX_BLOCKED_SESSIONS: i64 = 1_000;
/// Characters of each waiting query shown.
pub const QUERY_PREFIX_CHARS: i32 = 80;

/// The blocked-sessions view: sessions of this database that wait on a lock, the pids that block
/// them, how long their transaction has been open, and the start of their query. Sessions of other
/// databases on the same server are none of this service's business (and were once shown: a test
/// on a shared cluster saw another test's waiters).
const BLOCKED: &str = "
SELECT a.pid,
       pg_blocking_pids(a.pid)                                        AS blocked_by,
       a.wait_event_type,
       (extract(epoch FROM now() - a.xact_start) * 1000)::bigint       AS transaction_age_ms,
       left(a.query, $2)                                              AS query
  FROM pg_stat_activity a
 WHERE a.datname = current_database()
   AND cardinality(pg_blocking_pids(a.pid)) > 0
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
    let client = checkout(pool, Operation::Locks).await?;
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
    let client = checkout(pool, Operation::Deadlocks).await?;
    let row = client.query_opt(DEADLOCKS, &[]).await?;
    Ok(match row {
        Some(r) => r.try_get::<_, Option<i64>>("deadlocks")?.unwrap_or(0),
        None => 0,
    })
}

/// A distributed table whose rows saldo places by an integer key (Citus layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DistributedBy {
    /// `stock` and everything co-located with it, by product id.
    Product,
    /// `accounts` and their journal sides, by account id.
    Account,
}

impl DistributedBy {
    fn table(self) -> &'static str {
        match self {
            DistributedBy::Product => "stock",
            DistributedBy::Account => "accounts",
        }
    }
}

/// The node (`host:port`) holding the shard of `key` (Citus layout only: the race lab and the
/// tests use it to put two accounts or products on different workers, and say so).
const NODE_OF: &str = "SELECT n.nodename || ':' || n.nodeport \
     FROM pg_dist_placement p JOIN pg_dist_node n ON n.groupid = p.groupid \
     WHERE p.shardid = get_shard_id_for_distribution_column($1::text::regclass, $2::bigint) \
     ORDER BY n.nodeid LIMIT 1";

/// See [`NODE_OF`]; `None` when the key's shard has no placement (never, on a sound cluster).
pub async fn citus_node_of(
    pool: &Pool,
    by: DistributedBy,
    key: i64,
) -> Result<Option<String>, Error> {
    let client = checkout(pool, Operation::Lab).await?;
    let row = client.query_opt(NODE_OF, &[&by.table(), &key]).await?;
    Ok(row.map(|r| r.try_get(0)).transpose()?)
}

/// How far [`citus_key_elsewhere`] looks: with any shard count a Citus cluster uses, keys
/// 1..=1000 hash onto every shard.
pub const MAX_PLACEMENT_PROBE: i64 = 1_000;

/// [`NODE_OF`] for keys 1..=`$2` at once, in one statement: the smallest key whose node is not
/// key 1's.
const KEY_ELSEWHERE: &str = "WITH placed AS ( \
       SELECT k, (SELECT n.nodename || ':' || n.nodeport \
                    FROM pg_dist_placement p JOIN pg_dist_node n ON n.groupid = p.groupid \
                   WHERE p.shardid = get_shard_id_for_distribution_column($1::text::regclass, k) \
                   ORDER BY n.nodeid LIMIT 1) AS node \
         FROM generate_series(1::bigint, $2::bigint) k) \
     SELECT k FROM placed \
      WHERE node IS NOT NULL AND node IS DISTINCT FROM (SELECT node FROM placed WHERE k = 1) \
      ORDER BY k LIMIT 1";

/// The smallest key in `2..=MAX_PLACEMENT_PROBE` whose shard is on another node than key 1's:
/// a pair of keys a test or a race can be sure crosses workers (`None` on one worker).
pub async fn citus_key_elsewhere(pool: &Pool, by: DistributedBy) -> Result<Option<i64>, Error> {
    let client = checkout(pool, Operation::Lab).await?;
    let row = client
        .query_opt(KEY_ELSEWHERE, &[&by.table(), &MAX_PLACEMENT_PROBE])
        .await?;
    Ok(row.map(|r| r.try_get(0)).transpose()?)
}
