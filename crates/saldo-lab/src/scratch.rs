//! The scratch database the lab and the bench work in: created on the server they are pointed
//! at, migrated, reset between runs and dropped at the end. Nothing outside it is touched, so
//! both are safe to point at a server with other data on it (the user needs CREATEDB).
//!
//! Any connection string works, the Unix-socket URLs pg-local returns included
//! (`postgresql://postgres:<pw>@%2Fpath:5432/db`): the scratch pool is opened with the
//! server's connection settings and only the database name replaced
//! ([`saldo::db::connect_database`], through `tokio_postgres::Config`), never by editing the
//! URL. Creating, dropping and emptying the database are saldo's functions ([`saldo::db`],
//! [`saldo::fixtures`]): no SQL here.
//!
//! On a local Citus cluster ([`Server::Citus`], `--citus-workers`), a scratch database is made
//! distributed on every node by pg-local (a Citus database cannot be created on the coordinator
//! alone) and migrated in the Citus layout; the operations then run as they run on Citus.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use saldo::db::{self, PoolOptions};
use saldo::error::Error;
use saldo::retry::TxOptions;
use saldo::stock::Store;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Connections the race lab's pool opens at most (the oversubscribed sale's pool had 20).
pub const LAB_POOL_SIZE: usize = 32;
/// How long a racing buyer may wait for a connection: a widened window queues buyers behind
/// the pool.
pub const LAB_POOL_WAIT_MS: u64 = 120_000;
/// deadlock_timeout of the race lab's scratch database, when the lab may set it.
pub const LAB_DEADLOCK_TIMEOUT_MS: u64 = 100;
/// The least `lock_timeout` and `statement_timeout` of a race on Citus. A race piles every
/// contender onto one or two rows on purpose, and on Citus each holder commits by 2PC across
/// workers: 60 crossed transfers queued behind each other were measured past the 10 s default
/// statement timeout on a busy 2-core CI machine (three cancelled with 57014), which is the
/// queue's length, not a bug the race is after. Still a bound: nothing waits forever.
pub const LAB_CITUS_MIN_WAIT_MS: u64 = 60_000;

/// How a scratch database is opened.
#[derive(Debug, Clone, Default)]
pub struct ScratchOptions {
    /// The pool on the scratch database.
    pub pool: PoolOptions,
    /// Shorten `deadlock_timeout` on the scratch database (needs superuser; elsewhere the
    /// server's setting stays, with a note in the log).
    pub deadlock_timeout: Option<Duration>,
    /// On Citus, raise every store's `lock_timeout` and `statement_timeout` to at least this
    /// ([`Scratch::store`]).
    pub citus_min_wait: Option<Duration>,
}

/// Where scratch databases are made.
#[derive(Clone)]
pub enum Server {
    /// A PostgreSQL server, by the URL of any database on it (the user needs CREATEDB).
    Url(String),
    /// A local Citus cluster started by this process (pg-local): each scratch database is
    /// created on every node and distributed.
    Citus(Arc<pg_local::CitusCluster>),
}

impl From<&str> for Server {
    fn from(url: &str) -> Server {
        Server::Url(url.to_owned())
    }
}

impl Server {
    /// `single` or `citus×N` (N workers): how the bench labels what it ran on.
    pub fn label(&self) -> String {
        match self {
            Server::Url(_) => "single".into(),
            Server::Citus(c) => format!("citus×{}", c.workers().len()),
        }
    }
}

/// A scratch database for one invocation.
pub struct Scratch {
    server: Server,
    name: String,
    pool: Pool,
    /// The schema's layout (Citus when the server is a Citus coordinator).
    layout: db::Layout,
    /// See [`ScratchOptions::citus_min_wait`].
    citus_min_wait: Option<Duration>,
}

/// `<prefix>_<pid>_<n>`: unique per process and call.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

impl Scratch {
    /// The race lab's scratch database `saldo_race_<pid>_<n>`: a pool of [`LAB_POOL_SIZE`]
    /// with a long wait, and `deadlock_timeout` [`LAB_DEADLOCK_TIMEOUT_MS`]: every deadlock
    /// waits that long before PostgreSQL looks for the cycle (1 s by default); with 200 crossed
    /// transfers that queues minutes of waiting behind the victims, and the lab only needs the
    /// cycle detected.
    pub async fn for_race(server: impl Into<Server>) -> Result<Scratch, Error> {
        let options = ScratchOptions {
            pool: PoolOptions {
                max_size: LAB_POOL_SIZE,
                wait_timeout_ms: LAB_POOL_WAIT_MS,
                ..PoolOptions::default()
            },
            deadlock_timeout: Some(Duration::from_millis(LAB_DEADLOCK_TIMEOUT_MS)),
            citus_min_wait: Some(Duration::from_millis(LAB_CITUS_MIN_WAIT_MS)),
        };
        Scratch::create(&server.into(), &unique_name("saldo_race"), &options).await
    }

    /// The bench's scratch database `saldo_bench_<pid>` with a pool of `pool_size`.
    pub async fn for_bench(server: impl Into<Server>, pool_size: usize) -> Result<Scratch, Error> {
        let options = ScratchOptions {
            pool: PoolOptions {
                max_size: pool_size,
                ..PoolOptions::default()
            },
            deadlock_timeout: None,
            citus_min_wait: None,
        };
        // One per server: a side-by-side bench makes one on each.
        let name = format!("saldo_bench_{}", std::process::id());
        Scratch::create(&server.into(), &name, &options).await
    }

    /// Creates and migrates database `name` on `server`.
    pub async fn create(
        server: &Server,
        name: &str,
        options: &ScratchOptions,
    ) -> Result<Scratch, Error> {
        let pool = match server {
            Server::Url(server_url) => {
                refuse_citus_coordinator(server_url).await?;
                db::create_database(server_url, name, None).await?;
                if let Some(timeout) = options.deadlock_timeout {
                    if let Err(e) = db::set_deadlock_timeout(server_url, name, timeout).await {
                        tracing::info!(error = %e, "keeping the server's deadlock_timeout");
                    }
                }
                db::connect_database(server_url, name, &options.pool)?
            }
            Server::Citus(cluster) => {
                // Its deadlock_timeout is the cluster's own (set when it was started): the
                // workers' detectors and the coordinator's distributed one read it there.
                let (nodes, created) = (cluster.clone(), name.to_owned());
                tokio::task::spawn_blocking(move || nodes.create_database(&created))
                    .await
                    .map_err(|e| Error::Migration(format!("creating {name}: {e}")))?
                    .map_err(|e| Error::Migration(format!("creating {name} on Citus: {e}")))?;
                db::connect(&cluster.url(name), &options.pool)?
            }
        };
        let scratch = Scratch {
            server: server.clone(),
            pool,
            name: name.to_owned(),
            layout: db::Layout::Single,
            citus_min_wait: options.citus_min_wait,
        };
        match db::migrate_to_serve(&scratch.pool).await {
            Ok(layout) => {
                let mut scratch = scratch;
                scratch.layout = layout;
                Ok(scratch)
            }
            Err(e) => {
                scratch.drop_database().await?;
                Err(e)
            }
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// A store on the scratch database with `tx` options (on Citus, waits raised to at least
    /// [`ScratchOptions::citus_min_wait`] when the scratch has one).
    pub fn store(&self, tx: TxOptions) -> Store {
        let tx = match (self.layout, self.citus_min_wait) {
            (db::Layout::Citus, Some(least)) => {
                let least = u64::try_from(least.as_millis()).unwrap_or(u64::MAX);
                let (lock, statement) = (tx.lock_timeout_ms, tx.statement_timeout_ms);
                tx.with_lock_timeout_ms(lock.max(least))
                    .with_statement_timeout_ms(statement.max(least))
            }
            _ => tx,
        };
        Store::new(self.pool.clone(), tx).with_layout(self.layout)
    }

    /// Back to empty tables: the fresh state every race run starts from.
    pub async fn reset(&self) -> Result<(), Error> {
        saldo::fixtures::empty_all(&self.pool).await
    }

    /// Closes the pool and drops the database (terminating any session left on it).
    pub async fn drop_database(self) -> Result<(), Error> {
        self.pool.close();
        match &self.server {
            Server::Url(server_url) => db::drop_database(server_url, &self.name).await,
            Server::Citus(cluster) => {
                let (cluster, name) = (cluster.clone(), self.name.clone());
                tokio::task::spawn_blocking(move || cluster.drop_database(&name))
                    .await
                    .map_err(|e| Error::Migration(format!("dropping {}: {e}", self.name)))?
                    .map_err(|e| Error::Migration(format!("dropping {} on Citus: {e}", self.name)))
            }
        }
    }

    /// The layout the scratch database was migrated in.
    pub fn layout(&self) -> db::Layout {
        self.layout
    }
}

/// A database created on a Citus coordinator by URL would not be distributed (Citus needs its
/// extension and its workers registered in every new database, which only the cluster's
/// operator can do): the lab would measure a single node and call it Citus. Refused, naming
/// the way that works.
async fn refuse_citus_coordinator(server_url: &str) -> Result<(), Error> {
    let pool = db::connect(server_url, &PoolOptions::default())?;
    let layout = db::layout(&pool).await;
    pool.close();
    if layout? == db::Layout::Citus {
        return Err(Error::Migration(
            "this server is a Citus coordinator: a scratch database made there would not be \
             distributed. Race and bench on Citus with `--citus-workers N` (a local cluster)"
                .into(),
        ));
    }
    Ok(())
}
