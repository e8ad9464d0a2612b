//! A test database ([`TestDb`]) and what tests do with one: a store on it, a second pool, rows
//! held locked by another session ([`RowLock`]), waiting for a lock waiter, the audits. It knows
//! neither cluster that makes databases (`single`, `citus`): both build on it, so it imports
//! nothing else of the harness.

use std::sync::atomic::AtomicU64;

use deadpool_postgres::Pool;
use saldo::db::{self, PoolOptions};
use saldo::retry::TxOptions;
use saldo::stock::Store;

/// How long a test backend waits on a lock before the deadlock detector runs.
pub(super) const TEST_DEADLOCK_TIMEOUT: &str = "50ms";
/// The number in the next test database's name, unique in this process on every cluster.
pub(super) static NEXT_DB: AtomicU64 = AtomicU64::new(0);

/// A fresh, migrated database on the shared test cluster.
pub struct TestDb {
    pub url: String,
    pub pool: Pool,
    /// The transaction options suites should use: the defaults, except that the serializable
    /// cluster allows [`super::SERIALIZABLE_MAX_ATTEMPTS`] attempts.
    pub tx: TxOptions,
    /// Single, or Citus for a database from [`super::citus_db`].
    pub layout: db::Layout,
    /// What becomes of a Citus test database when the test is done with it (kept as a spare
    /// or dropped: `citus_reuse`); `None` on one node, where a database left behind costs
    /// nothing until the cluster stops.
    pub(super) _at_end: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl TestDb {
    /// A [`Store`] with this cluster's transaction options ([`TestDb::tx`]) and layout.
    pub fn store(&self) -> Store {
        Store::new(self.pool.clone(), self.tx.clone()).with_layout(self.layout)
    }

    /// A second, independent pool on the same database (e.g. a second "process").
    pub fn new_pool(&self, max_size: usize) -> Pool {
        pool_for(&self.url, max_size)
    }
}

/// How long [`TestDb::until_lock_waiter`] waits at most.
const LOCK_WAITER_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A second session holding rows locked inside an open transaction until released: it makes an
/// engine's batch wait inside its transaction, so a test can queue exactly the next batch
/// without timing.
pub struct RowLock(deadpool_postgres::Object);

impl RowLock {
    /// Opens a transaction and runs `lock_sql` (a `SELECT … FOR UPDATE` taking the ids as a
    /// bigint array `$1`). On Citus, once per id (ascending, as given), each with a one-id
    /// array: Citus refuses a `FOR UPDATE` spanning shards and routes a one-value one.
    pub async fn take(db: &TestDb, lock_sql: &str, ids: &[i64]) -> RowLock {
        let client = db.pool.get().await.expect("client");
        client.batch_execute("BEGIN").await.expect("begin");
        match db.layout {
            db::Layout::Single => {
                client.query(lock_sql, &[&ids]).await.expect("lock");
            }
            db::Layout::Citus => {
                for id in ids {
                    client.query(lock_sql, &[&vec![*id]]).await.expect("lock");
                }
            }
        }
        RowLock(client)
    }

    /// [`RowLock::take`] one id at a time, in the order given, with `lock_sql` taking one
    /// bigint `$1`: how a test holds rows on Citus, which refuses a `FOR UPDATE` over shards.
    pub async fn take_each(db: &TestDb, lock_sql: &str, ids: &[i64]) -> RowLock {
        let client = db.pool.get().await.expect("client");
        client.batch_execute("BEGIN").await.expect("begin");
        for id in ids {
            client.query(lock_sql, &[id]).await.expect("lock");
        }
        RowLock(client)
    }

    pub async fn release(self) {
        self.0.batch_execute("ROLLBACK").await.expect("rollback");
    }
}

impl TestDb {
    /// The stock audit of this database's layout (on Citus the per-product one,
    /// `saldo::audit::citus`).
    pub async fn audit_stock(&self) -> Result<Vec<saldo::audit::Divergence>, saldo::Error> {
        saldo::audit::audit_stock_of(&self.pool, self.layout).await
    }

    /// Waits (bounded) until some session of this database waits for a row lock (on Citus:
    /// on any node, as `citus_lock_waits` sees it; the coordinator's session itself waits for
    /// the worker's answer, not for a lock).
    pub async fn until_lock_waiter(&self) {
        let client = self.pool.get().await.expect("client");
        let started = std::time::Instant::now();
        // On Citus both views: a wait between distributed transactions shows in
        // `citus_lock_waits`, a routed statement waiting on its worker in
        // `citus_stat_activity` (each suite's engine tests met one or the other).
        let waiters = match self.layout {
            db::Layout::Single => {
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock'"
            }
            db::Layout::Citus => {
                "SELECT (SELECT count(*) FROM citus_lock_waits) \
                      + (SELECT count(*) FROM citus_stat_activity \
                          WHERE datname = current_database() AND wait_event_type = 'Lock')"
            }
        };
        loop {
            let n: i64 = client
                .query_one(waiters, &[])
                .await
                .expect("pg_stat_activity")
                .get(0);
            if n > 0 {
                return;
            }
            assert!(
                started.elapsed() < LOCK_WAITER_LIMIT,
                "no session ever waited"
            );
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }
}

/// Every ledger divergence the audit of `store`'s layout finds, as text: one node's
/// [`saldo::audit::audit_ledger`]; on Citus the per-account checks and the per-transfer double
/// entry ([`saldo::audit::citus`]), where a transfer left unresolved counts too (when a test
/// audits, every operation it ran has returned, so no 2PC of its own is in flight).
pub async fn ledger_divergences(store: &Store) -> Vec<String> {
    use saldo::audit::citus;
    let text = |d: &dyn std::fmt::Debug| format!("{d:?}");
    match store.layout() {
        db::Layout::Single => saldo::audit::audit_ledger(&store.pool)
            .await
            .expect("ledger audit")
            .iter()
            .map(|d| text(d))
            .collect(),
        db::Layout::Citus => {
            let mut out: Vec<String> = citus::audit_accounts(&store.pool)
                .await
                .expect("Citus account audit")
                .iter()
                .map(|d| text(d))
                .collect();
            let (divergences, unresolved) =
                citus::audit_transfers(&store.pool, citus::CitusAuditOptions::default())
                    .await
                    .expect("Citus transfer audit");
            out.extend(divergences.iter().map(|d| text(d)));
            out.extend(unresolved.iter().map(|id| format!("unresolved {id}")));
            out
        }
    }
}

pub(super) fn pool_for(url: &str, max_size: usize) -> Pool {
    pool_with(url, max_size, PoolOptions::default().wait_timeout_ms)
}

/// [`pool_for`] waiting up to `wait_timeout_ms` for a connection.
fn pool_with(url: &str, max_size: usize, wait_timeout_ms: u64) -> Pool {
    let options = PoolOptions {
        max_size,
        wait_timeout_ms,
        ..PoolOptions::default()
    };
    match db::connect(url, &options) {
        Ok(pool) => pool,
        Err(e) => panic!("test pool for {}: {e}", pg_local::redact(url)),
    }
}
