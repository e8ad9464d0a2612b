//! The test harness: one private PostgreSQL per test process (started by `pg-local`), a
//! migrated template database, and a fresh database cloned from it for every test, in tens of
//! milliseconds. Real PostgreSQL, no mocks: locking behaviour is what the tests are about.
//!
//! `SALDO_TEST_ISOLATION=serializable` starts the cluster with
//! `default_transaction_isolation = serializable`, the behaviour a distributed SQL engine shows.
//! [`test_db_serializable`] always uses a second cluster started that way, so one test binary
//! can rerun the suites under serializable isolation within a plain `cargo test`.
//!
//! Test clusters run with `deadlock_timeout = 50ms` (the persistent cluster keeps 1 s): the
//! naive-transfer tests provoke deadlocks on purpose and must stay fast.
//!
//! [`until_caught`] reruns a demonstration that a naive strategy fails (a race, so not certain
//! in one run) a bounded number of times until the failure shows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use deadpool_postgres::Pool;
use saldo::db::{self, PoolOptions};
use saldo::retry::{RetryPolicy, TxOptions};
use saldo::stock::Store;

const TEMPLATE: &str = "saldo_template";

struct Shared {
    cluster: pg_local::Cluster,
    /// The transaction options tests on this cluster run with.
    tx: TxOptions,
}

/// Attempts per transaction on the serializable cluster. Under SERIALIZABLE (or REPEATABLE
/// READ) a transaction that waited on a row lock fails with 40001 when the holder commits an
/// update of that row, so a race of hundreds of writers on one or two hot rows (the suites'
/// whole point) burns through the default 4 attempts; a distributed SQL engine behaves alike.
/// Measured with [`SERIALIZABLE_POOL`] connections: 8 attempts fail about one run in two, 16
/// passed every run; 24 leaves a wide margin for a loaded machine.
pub const SERIALIZABLE_MAX_ATTEMPTS: u32 = 24;
/// Connections of a serializable test database: every waiter on a hot row loses when the holder
/// commits, so fewer concurrent contenders waste fewer attempts (and the suite runs faster).
pub const SERIALIZABLE_POOL: usize = 8;

/// How long a test backend waits on a lock before the deadlock detector runs.
const TEST_DEADLOCK_TIMEOUT: &str = "50ms";

static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();
static SERIALIZABLE: OnceLock<Result<Shared, String>> = OnceLock::new();
static NEXT_DB: AtomicU64 = AtomicU64::new(0);

/// A fresh, migrated database on the shared test cluster.
pub struct TestDb {
    pub url: String,
    pub pool: Pool,
    /// The transaction options suites should use: the defaults, except that the serializable
    /// cluster allows [`SERIALIZABLE_MAX_ATTEMPTS`] attempts.
    pub tx: TxOptions,
    /// Single, or Citus for a database from [`citus_db`].
    pub layout: db::Layout,
    /// Drops a Citus test database when the test is done with it (`None` on one node, where a
    /// database left behind costs nothing until the cluster stops).
    _dropped_at_end: Option<citus::DroppedAtEnd>,
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

fn pool_for(url: &str, max_size: usize) -> Pool {
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

fn shared() -> &'static Shared {
    started(&SHARED, || {
        std::env::var("SALDO_TEST_ISOLATION")
            .ok()
            .map(|level| level.replace('-', " "))
    })
}

fn serializable() -> &'static Shared {
    started(&SERIALIZABLE, || Some("serializable".to_owned()))
}

fn started(
    cell: &'static OnceLock<Result<Shared, String>>,
    isolation: fn() -> Option<String>,
) -> &'static Shared {
    let shared = cell.get_or_init(|| {
        // Start and migrate on a plain thread: we may be called from inside a tokio runtime.
        std::thread::spawn(move || start_shared(isolation()))
            .join()
            .unwrap_or_else(|_| Err("test cluster start-up panicked".into()))
    });
    match shared {
        Ok(s) => s,
        Err(e) => panic!("test PostgreSQL unavailable: {e}"),
    }
}

fn start_shared(isolation: Option<String>) -> Result<Shared, String> {
    let mut config =
        pg_local::Config::ephemeral().setting("deadlock_timeout", TEST_DEADLOCK_TIMEOUT);
    let mut tx = TxOptions::default();
    if let Some(level) = isolation {
        if level != "read committed" {
            let retry = RetryPolicy::default().with_max_attempts(SERIALIZABLE_MAX_ATTEMPTS);
            tx = tx.with_retry(retry);
        }
        config = config.setting("default_transaction_isolation", &level);
    }
    let cluster = pg_local::Cluster::start(&config).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        db::create_database(&cluster.url("postgres"), TEMPLATE, None)
            .await
            .map_err(|e| e.to_string())?;
        let pool = pool_for(&cluster.url(TEMPLATE), 1);
        db::migrate_to_serve(&pool)
            .await
            .map_err(|e| e.to_string())?;
        pool.close();
        Ok::<_, String>(())
    })?;
    Ok(Shared { cluster, tx })
}

/// Creates a fresh migrated database for one test.
pub async fn test_db() -> TestDb {
    test_db_with_pool(32).await
}

/// Like [`test_db`] with a pool of `max_size` connections.
pub async fn test_db_with_pool(max_size: usize) -> TestDb {
    fresh_db(shared(), max_size).await
}

/// A fresh migrated database on the second test cluster, whose every transaction is
/// SERIALIZABLE unless it says otherwise.
pub async fn test_db_serializable() -> TestDb {
    test_db_serializable_with_pool(SERIALIZABLE_POOL).await
}

/// Like [`test_db_serializable`] with a pool of `max_size` connections.
pub async fn test_db_serializable_with_pool(max_size: usize) -> TestDb {
    fresh_db(serializable(), max_size).await
}

async fn fresh_db(shared: &Shared, max_size: usize) -> TestDb {
    let name = format!(
        "t_{}_{}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::Relaxed)
    );
    db::create_database(&shared.cluster.url("postgres"), &name, Some(TEMPLATE))
        .await
        .unwrap_or_else(|e| panic!("create test database {name}: {e}"));
    let url = shared.cluster.url(&name);
    TestDb {
        pool: pool_for(&url, max_size),
        url,
        tx: shared.tx.clone(),
        layout: db::Layout::Single,
        _dropped_at_end: None,
    }
}

/// Pid of the shared test postmaster, if started (for the orphan check).
pub fn cluster_pid() -> Option<u32> {
    SHARED
        .get()
        .and_then(|s| s.as_ref().ok())
        .and_then(|s| s.cluster.pid())
}

/// Pid of the serializable test postmaster, if started.
pub fn serializable_cluster_pid() -> Option<u32> {
    SERIALIZABLE
        .get()
        .and_then(|s| s.as_ref().ok())
        .and_then(|s| s.cluster.pid())
}

mod caught;
pub use caught::{until_caught, NAIVE_ATTEMPTS};

mod citus;
pub use citus::{
    accounts_on_two_workers, citus_cluster, citus_db, citus_db_with_pool, citus_server, worker_of,
};
