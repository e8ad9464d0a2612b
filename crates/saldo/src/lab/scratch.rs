//! The lab's own database: `saldo_race_<pid>_<n>`, created on the server the lab is pointed at,
//! migrated, reset between runs and dropped at the end. Nothing outside it is touched, so the
//! lab is safe to point at a server with other data on it (the user needs CREATEDB).

use std::sync::atomic::{AtomicU32, Ordering};

use deadpool_postgres::Pool;
use tokio_postgres::NoTls;

use crate::db::{self, PoolOptions};
use crate::lab::{LabError, LAB_POOL_SIZE, LAB_POOL_WAIT_MS};
use crate::retry::TxOptions;
use crate::stock::Store;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// deadlock_timeout of the scratch database, when the lab may set it.
pub const LAB_DEADLOCK_TIMEOUT_MS: u64 = 100;

/// Empties every saldo table but keeps the schema (and the system account of the ledger).
const RESET: &str = "TRUNCATE reservations, stock_movements, stock, transfers; \
     DELETE FROM accounts WHERE id <> 0; UPDATE accounts SET balance = 0 WHERE id = 0";

/// A scratch database for one lab invocation.
pub struct Scratch {
    server_url: String,
    name: String,
    pool: Pool,
}

async fn admin(server_url: &str, sql: &str) -> Result<(), LabError> {
    let (client, conn) = tokio_postgres::connect(server_url, NoTls)
        .await
        .map_err(|e| {
            LabError::Scratch(format!("connect to {}: {e}", pg_local::redact(server_url)))
        })?;
    let conn = tokio::spawn(conn);
    let result = client
        .batch_execute(sql)
        .await
        .map_err(|e| LabError::Scratch(format!("{sql}: {e}")));
    drop(client);
    let _ = conn.await;
    result
}

impl Scratch {
    /// Creates and migrates a fresh scratch database on the server of `server_url`.
    pub async fn create(server_url: &str) -> Result<Scratch, LabError> {
        let name = format!(
            "saldo_race_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        // Identifiers cannot be bound parameters; the name is built from numbers only.
        admin(server_url, &format!("CREATE DATABASE {name}")).await?;
        // Every deadlock waits deadlock_timeout (1 s by default) before PostgreSQL looks for the
        // cycle; with 200 crossed transfers that queues minutes of waiting behind the victims.
        // The lab only needs the cycle detected, so it shortens the wait on its own database.
        // Needs superuser (the embedded cluster's user); elsewhere the server's setting stays.
        if let Err(e) = admin(
            server_url,
            &format!("ALTER DATABASE {name} SET deadlock_timeout = '{LAB_DEADLOCK_TIMEOUT_MS}ms'"),
        )
        .await
        {
            tracing::info!(error = %e, "keeping the server's deadlock_timeout");
        }
        let options = PoolOptions {
            max_size: LAB_POOL_SIZE,
            wait_timeout_ms: LAB_POOL_WAIT_MS,
            ..PoolOptions::default()
        };
        let scratch = Scratch {
            server_url: server_url.to_owned(),
            pool: db::connect_database(server_url, &name, &options)?,
            name,
        };
        if let Err(e) = db::migrate(&scratch.pool).await {
            scratch.drop_database().await?;
            return Err(e.into());
        }
        Ok(scratch)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// A store on the scratch database with `tx` options.
    pub fn store(&self, tx: TxOptions) -> Store {
        Store::new(self.pool.clone(), tx)
    }

    /// Back to empty tables: the fresh state every run starts from.
    pub async fn reset(&self) -> Result<(), LabError> {
        let client = self
            .pool
            .get()
            .await
            .map_err(|e| LabError::Scratch(e.to_string()))?;
        client
            .batch_execute(RESET)
            .await
            .map_err(|e| LabError::Scratch(format!("reset: {e}")))
    }

    /// Closes the pool and drops the database (terminating any session left on it).
    pub async fn drop_database(self) -> Result<(), LabError> {
        self.pool.close();
        admin(
            &self.server_url,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        )
        .await
    }
}
