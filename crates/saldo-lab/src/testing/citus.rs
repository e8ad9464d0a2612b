//! The Citus half of the harness: one local Citus cluster per test process (a coordinator and
//! two workers from `pg-local`, Citus-enabled binaries found as `pg_local::citus::find_binaries`
//! says), and a fresh distributed database for every test, migrated in the Citus layout.
//!
//! A Citus database cannot be cloned from a template (its shards live on the workers, named by
//! the coordinator's metadata), so each test database is made distributed and migrated anew:
//! a few seconds, against tens of milliseconds on one node; Citus suites stay small.
//!
//! Without Citus, every test using it fails with pg-local's one-line "Citus not found" error,
//! which says what to install: it is not skipped.

use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use saldo::db::{self, Layout};
use saldo::retry::TxOptions;

use super::{pool_with, TestDb, NEXT_DB, TEST_DEADLOCK_TIMEOUT};

/// Connections per node: the coordinator opens its own to the workers for every session that
/// runs a distributed statement, so the workers need as many as the coordinator (and more: the
/// stock suites' races on a 16-connection pool, with multi-shard statements, ran 200 out).
const NODE_CONNECTIONS: u32 = 400;
/// Connections one coordinator session opens to one worker for a multi-shard statement at most
/// (Citus's default is 16): a race of 16 sessions could otherwise ask a worker for 256.
const EXECUTOR_POOL_SIZE: &str = "4";
/// Shards per distributed table: enough for products and accounts to land on both workers,
/// few enough that creating a test database's tables stays quick.
const SHARD_COUNT: &str = "8";
/// Background workers per node: Citus runs a maintenance daemon per distributed database, and a
/// test process makes one database per test (PostgreSQL's default of 8 ran out).
const WORKER_PROCESSES: &str = "128";

/// How long a test waits for a connection of its pool (one node's default is 10 s).
const CITUS_POOL_WAIT_TIMEOUT_MS: u64 = 60_000;

/// The suites' lock and statement timeouts on Citus (one node's defaults: 5 s and 10 s). A hot
/// product's row is held through a 2PC commit there (its order's router is on another shard),
/// so a race of a hundred buyers queues longer on it; on a 2-core machine shared with another
/// cluster that outlasted 5 s. A bound still, only a looser one.
const CITUS_LOCK_TIMEOUT_MS: u64 = 30_000;
const CITUS_STATEMENT_TIMEOUT_MS: u64 = 60_000;

static CITUS: OnceLock<Result<pg_local::CitusCluster, String>> = OnceLock::new();

/// The shared Citus test cluster (started on first use).
pub fn citus_cluster() -> &'static pg_local::CitusCluster {
    let cluster = CITUS.get_or_init(|| {
        std::thread::spawn(|| {
            let mut config = pg_local::CitusConfig::default()
                .setting("deadlock_timeout", TEST_DEADLOCK_TIMEOUT)
                .setting("citus.shard_count", SHARD_COUNT)
                .setting("max_worker_processes", WORKER_PROCESSES)
                .setting("citus.max_adaptive_executor_pool_size", EXECUTOR_POOL_SIZE);
            config.node.max_connections = NODE_CONNECTIONS;
            pg_local::CitusCluster::start(&config).map_err(|e| e.to_string())
        })
        .join()
        .unwrap_or_else(|_| Err("Citus test cluster start-up panicked".into()))
    });
    match cluster {
        Ok(c) => c,
        Err(e) => panic!("test Citus cluster unavailable: {e}"),
    }
}

/// A fresh database distributed over the Citus test cluster's workers, migrated (Citus layout).
pub async fn citus_db() -> TestDb {
    citus_db_with_pool(16).await
}

/// Like [`citus_db`] with a pool of `max_size` connections.
pub async fn citus_db_with_pool(max_size: usize) -> TestDb {
    let name = format!(
        "c_{}_{}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::Relaxed)
    );
    let created = name.clone();
    tokio::task::spawn_blocking(move || citus_cluster().create_database(&created))
        .await
        .expect("create_database panicked")
        .unwrap_or_else(|e| panic!("create Citus test database {name}: {e}"));
    let url = citus_cluster().url(&name);
    // A Citus statement costs a few hops more than one node's: a race of hundreds of buyers
    // on one product's row queues longer for a connection, which is not what it tests.
    let pool = pool_with(&url, max_size, CITUS_POOL_WAIT_TIMEOUT_MS);
    let layout = db::migrate(&pool)
        .await
        .unwrap_or_else(|e| panic!("migrate {name}: {e}"));
    assert_eq!(
        layout,
        Layout::Citus,
        "a Citus database migrates distributed"
    );
    TestDb {
        pool,
        url,
        tx: TxOptions::default()
            .with_lock_timeout_ms(CITUS_LOCK_TIMEOUT_MS)
            .with_statement_timeout_ms(CITUS_STATEMENT_TIMEOUT_MS),
        layout: Layout::Citus,
    }
}
