//! The one-node test clusters, each started on first use and shared by every test of the
//! process: the plain one (isolation from `SALDO_TEST_ISOLATION`) and the serializable one. Each
//! holds a migrated template database, and every test gets a fresh clone of it.

use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use saldo::db;
use saldo::retry::{RetryPolicy, TxOptions};

use super::db::{pool_for, TestDb, NEXT_DB, TEST_DEADLOCK_TIMEOUT};

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

static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();
static SERIALIZABLE: OnceLock<Result<Shared, String>> = OnceLock::new();

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
        _at_end: None,
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
