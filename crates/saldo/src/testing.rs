//! The test harness: one private PostgreSQL per test process (started by `pg-local`), a
//! migrated template database, and a fresh database cloned from it for every test, in tens of
//! milliseconds. Real PostgreSQL, no mocks: locking behaviour is what the tests are about.
//!
//! `SALDO_TEST_ISOLATION=serializable` starts the cluster with
//! `default_transaction_isolation = serializable`, the behaviour a distributed SQL engine shows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use deadpool_postgres::Pool;
use tokio_postgres::NoTls;

use crate::db::{self, PoolOptions};
use crate::retry::TxOptions;
use crate::stock::Store;

const TEMPLATE: &str = "saldo_template";

struct Shared {
    cluster: pg_local::Cluster,
}

static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();
static NEXT_DB: AtomicU64 = AtomicU64::new(0);

/// A fresh, migrated database on the shared test cluster.
pub struct TestDb {
    pub url: String,
    pub pool: Pool,
}

impl TestDb {
    /// A [`Store`] with default transaction options.
    pub fn store(&self) -> Store {
        Store::new(self.pool.clone(), TxOptions::default())
    }

    /// A second, independent pool on the same database (e.g. a second "process").
    pub fn new_pool(&self, max_size: usize) -> Pool {
        pool_for(&self.url, max_size)
    }
}

fn pool_for(url: &str, max_size: usize) -> Pool {
    let options = PoolOptions {
        max_size,
        ..PoolOptions::default()
    };
    match db::connect(url, &options) {
        Ok(pool) => pool,
        Err(e) => panic!("test pool for {url}: {e}"),
    }
}

fn shared() -> &'static Shared {
    let shared = SHARED.get_or_init(|| {
        // Start and migrate on a plain thread: we may be called from inside a tokio runtime.
        std::thread::spawn(start_shared)
            .join()
            .unwrap_or_else(|_| Err("test cluster start-up panicked".into()))
    });
    match shared {
        Ok(s) => s,
        Err(e) => panic!("test PostgreSQL unavailable: {e}"),
    }
}

fn start_shared() -> Result<Shared, String> {
    let mut config = pg_local::Config::ephemeral();
    if let Ok(level) = std::env::var("SALDO_TEST_ISOLATION") {
        let level = level.replace('-', " ");
        config = config.setting("default_transaction_isolation", &level);
    }
    let cluster = pg_local::Cluster::start(&config).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&cluster.url("postgres"), NoTls)
            .await
            .map_err(|e| e.to_string())?;
        let conn = tokio::spawn(conn);
        client
            .batch_execute(&format!("CREATE DATABASE {TEMPLATE}"))
            .await
            .map_err(|e| e.to_string())?;
        let pool = pool_for(&cluster.url(TEMPLATE), 1);
        db::migrate(&pool).await.map_err(|e| e.to_string())?;
        pool.close();
        drop(client);
        let _ = conn.await;
        Ok::<_, String>(())
    })?;
    Ok(Shared { cluster })
}

/// Creates a fresh migrated database for one test.
pub async fn test_db() -> TestDb {
    test_db_with_pool(32).await
}

/// Like [`test_db`] with a pool of `max_size` connections.
pub async fn test_db_with_pool(max_size: usize) -> TestDb {
    let shared = shared();
    let name = format!(
        "t_{}_{}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::Relaxed)
    );
    let (client, conn) = tokio_postgres::connect(&shared.cluster.url("postgres"), NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to test cluster: {e}"));
    let conn = tokio::spawn(conn);
    client
        .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {TEMPLATE}"))
        .await
        .unwrap_or_else(|e| panic!("create test database {name}: {e}"));
    drop(client);
    let _ = conn.await;
    let url = shared.cluster.url(&name);
    TestDb {
        pool: pool_for(&url, max_size),
        url,
    }
}

/// Pid of the shared test postmaster, if started (for the orphan check).
pub fn cluster_pid() -> Option<u32> {
    SHARED
        .get()
        .and_then(|s| s.as_ref().ok())
        .and_then(|s| s.cluster.pid())
}
