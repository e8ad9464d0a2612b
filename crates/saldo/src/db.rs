//! Connection pool and migrations. Every pool timeout is set explicitly: a request waits a
//! bounded time for a connection, never forever.

use std::time::Duration;

use deadpool_postgres::{ManagerConfig, Pool, PoolConfig, RecyclingMethod, Runtime, Timeouts};
use tokio_postgres::NoTls;

use crate::error::Error;

mod embedded {
    refinery::embed_migrations!("../../migrations");
}

/// Default pool size and timeouts (the CLI's flags default to these too).
pub const DEFAULT_POOL_SIZE: usize = 32;
pub const DEFAULT_POOL_WAIT_TIMEOUT_MS: u64 = 10_000;
pub const DEFAULT_POOL_CREATE_TIMEOUT_MS: u64 = 5_000;
pub const DEFAULT_POOL_RECYCLE_TIMEOUT_MS: u64 = 5_000;

/// Pool sizing and timeouts.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    pub max_size: usize,
    pub wait_timeout_ms: u64,
    pub create_timeout_ms: u64,
    pub recycle_timeout_ms: u64,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            max_size: DEFAULT_POOL_SIZE,
            wait_timeout_ms: DEFAULT_POOL_WAIT_TIMEOUT_MS,
            create_timeout_ms: DEFAULT_POOL_CREATE_TIMEOUT_MS,
            recycle_timeout_ms: DEFAULT_POOL_RECYCLE_TIMEOUT_MS,
        }
    }
}

/// Creates a pool for `url`. Connections are opened lazily.
pub fn connect(url: &str, options: &PoolOptions) -> Result<Pool, Error> {
    connect_with(url, None, options)
}

/// Creates a pool for database `dbname` on the server of `url` (e.g. a scratch database).
pub fn connect_database(url: &str, dbname: &str, options: &PoolOptions) -> Result<Pool, Error> {
    connect_with(url, Some(dbname), options)
}

fn connect_with(url: &str, dbname: Option<&str>, options: &PoolOptions) -> Result<Pool, Error> {
    let cfg = deadpool_postgres::Config {
        url: Some(url.to_owned()),
        dbname: dbname.map(str::to_owned),
        manager: Some(ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        }),
        pool: Some(PoolConfig {
            max_size: options.max_size,
            timeouts: Timeouts {
                wait: Some(Duration::from_millis(options.wait_timeout_ms)),
                create: Some(Duration::from_millis(options.create_timeout_ms)),
                recycle: Some(Duration::from_millis(options.recycle_timeout_ms)),
            },
            ..PoolConfig::default()
        }),
        ..Default::default()
    };
    cfg.create_pool(Some(Runtime::Tokio1), NoTls)
        .map_err(Error::from)
}

/// Applies the migrations in `migrations/`, idempotently. An advisory lock serialises several
/// processes migrating one database at once.
pub async fn migrate(pool: &Pool) -> Result<(), Error> {
    let mut client = pool.get().await.map_err(Error::from)?;
    client
        .batch_execute("SELECT pg_advisory_lock(724101)")
        .await?;
    let result = embedded::migrations::runner()
        .run_async(&mut **client)
        .await
        .map(|_| ())
        .map_err(|e| Error::Migration(e.to_string()));
    client
        .batch_execute("SELECT pg_advisory_unlock(724101)")
        .await?;
    result
}
