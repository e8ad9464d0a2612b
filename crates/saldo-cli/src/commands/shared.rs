//! What several commands share: `saldo`'s global flags ([`Global`]: refusing
//! `--citus-workers` where it does not apply, opening the command's database and a pool on
//! it), the store of a database migrated as `saldo serve` needs it ([`serving_store`]), and the
//! store of a database a tool only attaches to, never migrating it ([`attached_store`]).

use anyhow::{Context, Result};
use deadpool_postgres::Pool;
use saldo::db::PoolOptions;
use saldo::retry::TxOptions;
use saldo::stock::Store;

use crate::database::{self, Database, EmbeddedOptions, Role};

/// `saldo`'s global flags, as every command sees them.
#[derive(Debug, Clone, Default)]
pub struct Global {
    /// `--database-url`; `None`: the embedded cluster.
    pub database_url: Option<String>,
    pub embedded: EmbeddedOptions,
    /// `--citus-workers` (bounded by the parser: 1 ..= MAX_CITUS_WORKERS).
    pub citus_workers: Option<usize>,
}

impl Global {
    /// Refuses `--citus-workers` for a command that does not start a local Citus cluster.
    pub fn no_citus_workers(&self) -> Result<()> {
        anyhow::ensure!(
            self.citus_workers.is_none(),
            "--citus-workers starts a local Citus cluster for serve, race and bench only; give \
             other commands a Citus coordinator with --database-url"
        );
        Ok(())
    }

    /// The command's database ([`database::open_with`]) and a pool on it.
    pub async fn open_pool(self, role: Role) -> Result<(Database, Pool)> {
        let database = database::open_with(self.database_url, self.embedded, role).await?;
        let pool = saldo::db::connect(&database.url, &PoolOptions::default())?;
        Ok((database, pool))
    }
}

/// A store on `pool` once its database is migrated as `saldo serve` needs it (in its layout).
pub async fn serving_store(pool: &Pool) -> Result<Store> {
    let layout = saldo::db::migrate_to_serve(pool)
        .await
        .context("migrating the database")?;
    Ok(Store::new(pool.clone(), TxOptions::default()).with_layout(layout))
}

/// A store on `pool` for a command that looks at a database and works on its rows (`locks`,
/// `audit`, `sweep`): the schema must already be exactly this binary's; it is never migrated
/// (see [`database::schema_as_built`]).
pub async fn attached_store(pool: &Pool) -> Result<Store> {
    let layout = database::schema_as_built(pool).await?;
    Ok(Store::new(pool.clone(), TxOptions::default()).with_layout(layout))
}
