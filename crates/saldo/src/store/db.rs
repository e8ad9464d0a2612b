//! Connection pool and migrations. Every pool timeout is set explicitly: a request waits a
//! bounded time for a connection, never forever.

use std::time::Duration;

use deadpool_postgres::{ManagerConfig, Pool, PoolConfig, RecyclingMethod, Runtime, Timeouts};
use tokio_postgres::NoTls;

use crate::error::Error;

pub use crate::store::schema::Layout;

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
    pool_config(url, dbname, options)
        .create_pool(Some(Runtime::Tokio1), NoTls)
        .map_err(Error::from)
}

/// The pool's settings: the server's connection settings parsed from `url` (a URL, the
/// Unix-socket form `postgresql://u:pw@%2Fsocket%2Fdir:5432/db` included, or key=value), with
/// only the database name replaced when `dbname` is given: no editing of the URL text.
fn pool_config(
    url: &str,
    dbname: Option<&str>,
    options: &PoolOptions,
) -> deadpool_postgres::Config {
    deadpool_postgres::Config {
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
    }
}

/// Applies the migrations in `migrations/`, idempotently, in the layout the database calls for:
/// the distributed one ([`Layout::Citus`]) when the Citus extension is installed in it. An
/// advisory lock serialises several processes migrating one database at once.
pub async fn migrate(pool: &Pool) -> Result<Layout, Error> {
    let layout = layout(pool).await?;
    migrate_as(pool, layout).await?;
    Ok(layout)
}

/// [`migrate`] for a caller that is about to run saldo's operations: returns the layout, which
/// the caller gives its [`crate::store::handle::Store`] (`Store::with_layout`), so the operations take
/// their locks as the layout requires.
pub async fn migrate_to_serve(pool: &Pool) -> Result<Layout, Error> {
    migrate(pool).await
}

/// The layout of the database behind `pool`: [`Layout::Citus`] when the Citus extension is
/// installed in it (a read; nothing is migrated).
pub async fn layout(pool: &Pool) -> Result<Layout, Error> {
    let client = pool.get().await.map_err(Error::from)?;
    crate::store::schema::detect(&client).await
}

/// The newest migration version applied to the database behind `pool`, as refinery's history
/// table (`refinery_schema_history`) records it; `None` when there is no such table or it is
/// empty (never migrated). A read: nothing is migrated. Compared with the newest version of
/// [`crate::schema::migrations`], it tells a schema older or newer than this binary's.
pub async fn applied_schema_version(pool: &Pool) -> Result<Option<i32>, Error> {
    let client = pool.get().await.map_err(Error::from)?;
    let exists: bool = client
        .query_one(
            "SELECT to_regclass('refinery_schema_history') IS NOT NULL",
            &[],
        )
        .await?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let row = client
        .query_one("SELECT max(version) FROM refinery_schema_history", &[])
        .await?;
    Ok(row.get(0))
}

/// [`migrate`] in an explicit layout (`saldo migrate --citus`): [`Layout::Citus`] on a database
/// without the Citus extension is refused before anything is applied.
pub async fn migrate_as(pool: &Pool, layout: Layout) -> Result<(), Error> {
    let mut client = pool.get().await.map_err(Error::from)?;
    if layout == Layout::Citus && crate::store::schema::detect(&client).await? != Layout::Citus {
        return Err(Error::Migration(
            "--citus: this database has no Citus extension (run `CREATE EXTENSION citus` on \
             a Citus coordinator and add its workers first)"
                .into(),
        ));
    }
    // One line says what migrating did (below): refinery's own info lines and the NOTICE of its
    // `CREATE TABLE IF NOT EXISTS` said it two or three times over (the CLI filters refinery
    // to warnings).
    client
        .batch_execute("SET client_min_messages = warning; SELECT pg_advisory_lock(724101)")
        .await?;
    let result = refinery::Runner::new(&crate::store::schema::migrations(layout))
        .run_async(&mut **client)
        .await
        .map(|report| {
            let applied: Vec<String> = report
                .applied_migrations()
                .iter()
                .map(ToString::to_string)
                .collect();
            if applied.is_empty() {
                tracing::info!("migrations: schema up to date");
            } else {
                tracing::info!(versions = %applied.join(", "), ?layout, "migrations applied");
            }
        })
        .map_err(|e| Error::Migration(crate::error::chain(&e)));
    client
        .batch_execute("SELECT pg_advisory_unlock(724101); RESET client_min_messages")
        .await?;
    result
}

/// Creates database `name` on the server of `server_url` (a URL or key=value string naming any
/// database the user may connect to), cloned from `template` when given. For scratch and test
/// databases: the user needs CREATEDB. Names are identifiers, which cannot be bound parameters:
/// only `[a-z0-9_]` is accepted.
pub async fn create_database(
    server_url: &str,
    name: &str,
    template: Option<&str>,
) -> Result<(), Error> {
    let name = identifier(name)?;
    let sql = match template {
        Some(template) => format!("CREATE DATABASE {name} TEMPLATE {}", identifier(template)?),
        None => format!("CREATE DATABASE {name}"),
    };
    on_server(server_url, &sql).await
}

/// Sets `deadlock_timeout` for every later session on database `name` (needs superuser; the
/// race lab shortens it on its scratch database, where deadlocks are provoked on purpose).
pub async fn set_deadlock_timeout(
    server_url: &str,
    name: &str,
    timeout: Duration,
) -> Result<(), Error> {
    let name = identifier(name)?;
    let ms = timeout.as_millis();
    on_server(
        server_url,
        &format!("ALTER DATABASE {name} SET deadlock_timeout = '{ms}ms'"),
    )
    .await
}

/// Drops database `name` if it exists, terminating any session still on it.
pub async fn drop_database(server_url: &str, name: &str) -> Result<(), Error> {
    let name = identifier(name)?;
    on_server(
        server_url,
        &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
    )
    .await
}

/// `name` if it is a plain lower-case identifier (safe to splice into SQL).
fn identifier(name: &str) -> Result<&str, Error> {
    let plain = !name.is_empty()
        && name.len() < 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if plain {
        Ok(name)
    } else {
        Err(Error::invariant(format!(
            "database name {name:?} is not a plain identifier"
        )))
    }
}

/// Runs one statement outside any transaction on its own connection to `server_url`
/// (CREATE/DROP DATABASE cannot run inside one, nor on a pooled connection to that database).
async fn on_server(server_url: &str, sql: &str) -> Result<(), Error> {
    let (client, conn) = tokio_postgres::connect(server_url, NoTls).await?;
    let conn = tokio::spawn(conn);
    let result = client.batch_execute(sql).await;
    drop(client);
    let _ = conn.await;
    Ok(result?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The database of the pool is replaced, and nothing else (was the bench's URL rewriting).
    #[test]
    fn a_scratch_database_replaces_only_the_name() {
        use tokio_postgres::config::Host;
        let options = PoolOptions::default();
        let config = |url: &str| pool_config(url, Some("x"), &options).get_pg_config();
        let tcp = config("postgres://u@127.0.0.1:5432/postgres").expect("url");
        assert_eq!(tcp.get_dbname(), Some("x"));
        assert_eq!(tcp.get_hosts(), [Host::Tcp("127.0.0.1".into())]);
        assert_eq!(tcp.get_ports(), [5432]);
        assert_eq!(tcp.get_user(), Some("u"));
        let query = config("postgresql://u:p@h/db?sslmode=disable").expect("url");
        assert_eq!(query.get_dbname(), Some("x"));
        assert_eq!(query.get_password(), Some(&b"p"[..]));
        assert_eq!(
            query.get_ssl_mode(),
            tokio_postgres::config::SslMode::Disable
        );
        // The embedded cluster's form: a percent-encoded socket directory as the host.
        let socket =
            config("postgresql://postgres:pw@%2Fvar%2Flib%2Fsaldo%2Fpostgres:5432/postgres")
                .expect("socket url");
        assert_eq!(socket.get_dbname(), Some("x"));
        assert_eq!(
            socket.get_hosts(),
            [Host::Unix("/var/lib/saldo/postgres".into())]
        );
        assert_eq!(socket.get_password(), Some(&b"pw"[..]));
        let no_db = config("postgres://h:1").expect("url");
        assert_eq!(no_db.get_dbname(), Some("x"));
        assert_eq!(no_db.get_ports(), [1]);
        let kv = config("host=/tmp dbname=a user=u").expect("kv");
        assert_eq!(kv.get_dbname(), Some("x"));
        assert_eq!(kv.get_hosts(), [Host::Unix("/tmp".into())]);
        assert_eq!(kv.get_user(), Some("u"));
        assert!(config("nonsense").is_err());
    }

    #[test]
    fn only_plain_identifiers_name_a_database() {
        assert!(identifier("saldo_race_12_0").is_ok());
        assert!(identifier("").is_err());
        assert!(identifier("x; DROP DATABASE y").is_err());
        assert!(identifier("Upper").is_err());
    }
}
