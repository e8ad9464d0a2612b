//! The Citus half of the harness: one local Citus cluster per test process (a coordinator and
//! two workers from `pg-local`, Citus-enabled binaries found as `pg_local::citus::find_binaries`
//! says), and a fresh distributed database for every test, migrated in the Citus layout.
//!
//! A Citus database cannot be cloned from a template (its shards live on the workers, named by
//! the coordinator's metadata), so a test database is made distributed and migrated anew
//! (seconds, against tens of milliseconds on one node), or a spare one a finished test handed
//! back is emptied to how it was migrated (about a second; `citus_reuse` says when it is not
//! reused). Spares beyond a few are dropped on every node.
//!
//! Without Citus, every test using it fails with pg-local's one-line "Citus not found" error,
//! which says what to install: it is not skipped.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use saldo::db::{self, Layout};
use saldo::retry::TxOptions;

use super::citus_reuse;
use super::db::{TestDb, NEXT_DB, TEST_DEADLOCK_TIMEOUT};

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

static CITUS: OnceLock<Result<Arc<pg_local::CitusCluster>, String>> = OnceLock::new();

/// The shared Citus test cluster as a place for the lab's scratch databases.
pub fn citus_server() -> crate::scratch::Server {
    crate::scratch::Server::Citus(started().clone())
}

/// The shared Citus test cluster (started on first use).
pub fn citus_cluster() -> &'static pg_local::CitusCluster {
    started()
}

/// The shared Citus test cluster, started on first use; a failed start panics, in this test and
/// in every later one that asks.
fn started() -> &'static Arc<pg_local::CitusCluster> {
    let cluster = CITUS.get_or_init(|| {
        std::thread::spawn(|| {
            let mut config = pg_local::CitusConfig::default()
                .setting("deadlock_timeout", TEST_DEADLOCK_TIMEOUT)
                .setting("citus.shard_count", SHARD_COUNT)
                .setting("max_worker_processes", WORKER_PROCESSES)
                .setting("citus.max_adaptive_executor_pool_size", EXECUTOR_POOL_SIZE);
            config.node.max_connections = NODE_CONNECTIONS;
            pg_local::CitusCluster::start(&config)
                .map(Arc::new)
                .map_err(|e| e.to_string())
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

/// Like [`citus_db`] with a pool of `max_size` connections: a spare emptied back to how it was
/// migrated when one waits ([`citus_reuse`]), otherwise a new one.
pub async fn citus_db_with_pool(max_size: usize) -> TestDb {
    let cluster = started();
    let (name, baseline) = match citus_reuse::take(cluster).await {
        Some(spare) => (spare.name, Some(spare.baseline)),
        None => {
            let name = created().await;
            let baseline = match citus_reuse::Baseline::capture(cluster, &name).await {
                Ok(baseline) => Some(Arc::new(baseline)),
                Err(why) => {
                    eprintln!("Citus test database {name} will not be reused ({why})");
                    None
                }
            };
            (name, baseline)
        }
    };
    let url = cluster.url(&name);
    TestDb {
        pool: citus_pool(&url, max_size),
        url,
        tx: TxOptions::default()
            .with_lock_timeout_ms(CITUS_WAIT_MS)
            .with_statement_timeout_ms(CITUS_WAIT_MS),
        layout: Layout::Citus,
        _at_end: Some(Box::new(citus_reuse::Returned {
            cluster: cluster.clone(),
            name,
            baseline,
        })),
    }
}

/// A new database distributed over the cluster's workers and migrated (Citus layout): its name.
async fn created() -> String {
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
    // The migration's own pool, closed before the test's opens.
    let pool = citus_pool(&citus_cluster().url(&name), 1);
    let layout = db::migrate(&pool)
        .await
        .unwrap_or_else(|e| panic!("migrate {name}: {e}"));
    assert_eq!(
        layout,
        Layout::Citus,
        "a Citus database migrates distributed"
    );
    name
}

/// How long a Citus test transaction may wait for a lock or a statement, and a caller for a
/// pooled connection. The suites' races queue hundreds of transfers on one or two rows; on
/// Citus each holder commits by 2PC across workers, two orders of magnitude slower than one
/// node's commit on a busy 2-core machine, so the default 5 s lock timeout and 10 s pool wait
/// (sized for one node) would fail a correct run. A bound still: nothing waits forever.
const CITUS_WAIT_MS: u64 = 60_000;

fn citus_pool(url: &str, max_size: usize) -> deadpool_postgres::Pool {
    let options = db::PoolOptions {
        max_size,
        wait_timeout_ms: CITUS_WAIT_MS,
        ..db::PoolOptions::default()
    };
    match db::connect(url, &options) {
        Ok(pool) => pool,
        Err(e) => panic!("Citus test pool for {}: {e}", pg_local::redact(url)),
    }
}

/// The worker (`host:port`) holding the shard that `key` hashes to
/// ([`saldo::ops::citus_node_of`]).
pub async fn worker_of(db: &TestDb, by: saldo::ops::DistributedBy, key: i64) -> String {
    match saldo::ops::citus_node_of(&db.pool, by, key).await {
        Ok(Some(node)) => node,
        Ok(None) => panic!("no placement for key {key}"),
        Err(e) => panic!("shard placement: {e}"),
    }
}

/// Two customer account ids, ascending, whose `accounts` shards (and so their journal sides) are
/// on different workers, proven by Citus's placement metadata: 1 and the first id after it
/// that hashes to the other worker ([`saldo::ops::citus_key_elsewhere`], which the race lab's
/// crossed transfers use too).
pub async fn accounts_on_two_workers(db: &TestDb) -> (i64, i64) {
    use saldo::ops::{citus_key_elsewhere, DistributedBy, MAX_PLACEMENT_PROBE};
    match citus_key_elsewhere(&db.pool, DistributedBy::Account).await {
        Ok(Some(id)) => (1, id),
        Ok(None) => panic!("no account in 2..={MAX_PLACEMENT_PROBE} off the worker of account 1"),
        Err(e) => panic!("shard placement: {e}"),
    }
}
