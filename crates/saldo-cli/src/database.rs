//! Which database a command talks to: the `--database-url` given, or the embedded cluster
//! (`pg-local`) in saldo's data directory, kept running (and restarted if it dies, see
//! `supervise.rs`) while the returned value lives, or attached to when another saldo runs it.
//! Every subcommand that needs PostgreSQL goes through [`open_with`], which also makes one
//! connection first so that an unreachable server is named in one readable error.
//!
//! saldo's data directory ([`state_dir`]): `--data-dir` / `$SALDO_DATA_DIR`, else `/var/lib/saldo` as root,
//! else `$XDG_DATA_HOME/saldo` or `~/.local/share/saldo`. It holds
//! - `postgres/`: the embedded cluster (its own log is `postgres/server.log`, rotated to
//!   `server.log.1`..`.4` at 8 MiB each, its Unix socket
//!   `postgres/.s.PGSQL.5432` when the path is short enough);
//! - `postgres.password`: the cluster superuser's generated password (0600);
//! - `postgres.run`: while `saldo serve` or `saldo db` runs the cluster, how to reach it (0600,
//!   see [`CLUSTER_RECORD_FILE`]); `locks`, `audit`, `sweep`, `migrate` and the lab attach to
//!   it instead of starting a second server, and start one only when none runs (saying so);
//! - other secrets of saldo's (e.g. `tokens.json`), each 0600.
//!
//! `--citus-workers N` ([`start_citus`]) instead starts a local Citus cluster (a coordinator
//! and N workers on 127.0.0.1, pg-local's, Citus-enabled binaries found as
//! `pg_local::citus::find_binaries` says): ephemeral, its data gone when the command ends, for
//! trying saldo on Citus (`serve`), racing on it (`race`) and measuring it beside one node
//! (`bench`). A production Citus is given with `--database-url`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// The embedded cluster's directory inside [`state_dir`].
pub const CLUSTER_DIR: &str = "postgres";
/// The embedded cluster's password file inside [`state_dir`].
pub const CLUSTER_PASSWORD_FILE: &str = "postgres.password";
/// Mode of a data directory saldo creates: private; as root, searchable by the `postgres` user
/// (it must reach its cluster directory inside) but not listable.
const STATE_DIR_MODE: u32 = 0o700;
const STATE_DIR_MODE_ROOT: u32 = 0o711;

/// The record (`pg_local::Record`, 0600) of the cluster a running `saldo serve` or `saldo db`
/// owns, inside [`state_dir`]: how other commands reach it instead of starting a second one.
pub const CLUSTER_RECORD_FILE: &str = "postgres.run";
/// How long the first connection (the reachability check) may take.
const CONNECT_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// A database to talk to: the given URL, or an embedded cluster kept alive while this lives.
pub struct Database {
    pub url: String,
    /// The URL without its password, for anything a person or a log sees.
    pub shown_url: String,
    embedded: Option<Arc<Mutex<pg_local::Cluster>>>,
    /// The local Citus cluster this process runs (`--citus-workers`), kept running while this
    /// lives and stopped when the last holder drops it.
    _citus: Option<Arc<pg_local::CitusCluster>>,
    /// The record this process wrote (removed again on drop).
    record: Option<PathBuf>,
}

impl Database {
    /// The embedded cluster, when this process runs it (for the supervisor).
    pub fn embedded(&self) -> Option<Arc<Mutex<pg_local::Cluster>>> {
        self.embedded.clone()
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Some(path) = &self.record {
            pg_local::Record::remove_own(path);
        }
    }
}

/// Options of the embedded cluster.
#[derive(Debug, Clone, Default)]
pub struct EmbeddedOptions {
    /// `--data-dir` / `SALDO_DATA_DIR`; `None`: the default place.
    pub data_dir: Option<PathBuf>,
    /// Also listen on 127.0.0.1 (password still required).
    pub tcp: bool,
    /// Listen on 127.0.0.1 at this port (implies `tcp`).
    pub port: Option<u16>,
}

/// Who the embedded cluster is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A long-running owner (`serve`, `db`): starts the cluster, records how to reach it, and
    /// refuses when another saldo already runs it.
    Owner,
    /// A short command (`locks`, `audit`, `sweep`, `migrate`, the lab): uses the running
    /// cluster when there is one; otherwise starts one for itself and says so.
    Tool,
}

/// The database of a command: `database_url` as given (checked reachable), else the embedded
/// cluster of the data directory, attached to or started as `role` says.
pub async fn open_with(
    database_url: Option<String>,
    options: EmbeddedOptions,
    role: Role,
) -> Result<Database> {
    if let Some(url) = database_url {
        check_reachable(&url).await?;
        return Ok(Database {
            shown_url: pg_local::redact(&url),
            url,
            embedded: None,
            _citus: None,
            record: None,
        });
    }
    // Read before anything is created: a data directory that does not exist has no record.
    let state = state_dir_path(options.data_dir.as_deref());
    let record_path = state.join(CLUSTER_RECORD_FILE);
    if let Some(running) = pg_local::Record::read_live(&record_path) {
        return attach(&running, &state, &record_path, role).await;
    }
    if let Some(port) = options.port {
        // Checked before the data directory is created or initdb runs.
        std::net::TcpListener::bind(("127.0.0.1", port)).with_context(|| {
            format!(
                "--embedded-port {port}: 127.0.0.1:{port} is not free for the embedded PostgreSQL"
            )
        })?;
    }
    let state = try_state_dir(Some(&state))?;
    if role == Role::Tool {
        tracing::info!(
            "no running saldo serve or saldo db on {}: starting its embedded PostgreSQL for this \
             command (stopped when it ends)",
            state.display()
        );
    }
    let cluster = start_embedded(&state, &options).await?;
    let record = if role == Role::Owner {
        pg_local::Record::of(&cluster)
            .write(&record_path)
            .with_context(|| format!("recording the cluster in {}", record_path.display()))?;
        Some(record_path)
    } else {
        None
    };
    Ok(Database {
        url: cluster.url("postgres"),
        shown_url: cluster.redacted_url("postgres"),
        embedded: Some(Arc::new(Mutex::new(cluster))),
        _citus: None,
        record,
    })
}

/// The cluster another saldo (`running`) owns in `state`: a tool attaches to it, a second
/// owner is refused.
async fn attach(
    running: &pg_local::Record,
    state: &Path,
    record_path: &Path,
    role: Role,
) -> Result<Database> {
    if role == Role::Owner {
        bail!(
            "saldo (pid {}) already runs the embedded PostgreSQL of {}: stop it first, or give \
             this command another --data-dir",
            running.owner_pid,
            state.display()
        );
    }
    let url = running.url("postgres")?;
    check_reachable(&url).await.with_context(|| {
        format!(
            "attaching to the embedded PostgreSQL of saldo pid {} (recorded in {})",
            running.owner_pid,
            record_path.display()
        )
    })?;
    tracing::info!(
        "attached to the embedded PostgreSQL that saldo pid {} runs ({}, data {})",
        running.owner_pid,
        running.redacted_url("postgres"),
        running.data_dir.display()
    );
    Ok(Database {
        shown_url: running.redacted_url("postgres"),
        url,
        embedded: None,
        _citus: None,
        record: None,
    })
}

/// Starts the embedded cluster of the data directory `state` (its password file beside it),
/// as `options` say it listens.
async fn start_embedded(state: &Path, options: &EmbeddedOptions) -> Result<pg_local::Cluster> {
    let mut config = pg_local::Config::persistent(state.join(CLUSTER_DIR))
        .password_file(state.join(CLUSTER_PASSWORD_FILE));
    if let Some(port) = options.port {
        config = config.with_port(port);
    } else if options.tcp {
        config = config.with_tcp();
    }
    let cluster = tokio::task::spawn_blocking(move || pg_local::Cluster::start(&config))
        .await?
        .context("starting the embedded PostgreSQL")?;
    tracing::info!(
        "embedded PostgreSQL: {} (data {}, log {}, password in {}{})",
        cluster.redacted_url("postgres"),
        cluster.data_dir().display(),
        cluster.log_file().display(),
        cluster.password_file().display(),
        if cluster.has_tcp() {
            format!(", also on 127.0.0.1:{}", cluster.port())
        } else {
            String::new()
        }
    );
    Ok(cluster)
}

/// Most workers `--citus-workers` starts (pg-local's bound).
pub const MAX_CITUS_WORKERS: usize = 8;
/// Connections per node of a local Citus cluster: the coordinator opens its own to the workers
/// for every session that runs a distributed statement, so the workers need as many.
const CITUS_NODE_CONNECTIONS: u32 = 300;
/// Shards per distributed table on a local cluster: products and accounts spread over every
/// worker, and a scratch database is distributed in seconds.
const CITUS_SHARD_COUNT: &str = "16";

/// Starts a local Citus cluster of `workers` workers (ephemeral: see the module docs), with
/// `deadlock_timeout` when given (the race lab shortens it: its deadlocks are on purpose).
pub async fn start_citus(
    workers: usize,
    deadlock_timeout: Option<&'static str>,
) -> Result<Arc<pg_local::CitusCluster>> {
    let mut config = pg_local::CitusConfig::default()
        .workers(workers)
        .setting("citus.shard_count", CITUS_SHARD_COUNT);
    if let Some(timeout) = deadlock_timeout {
        config = config.setting("deadlock_timeout", timeout);
    }
    config.node.max_connections = CITUS_NODE_CONNECTIONS;
    let cluster = tokio::task::spawn_blocking(move || pg_local::CitusCluster::start(&config))
        .await?
        .context("starting a local Citus cluster (--citus-workers)")?;
    tracing::info!(
        "local Citus cluster: coordinator {} and {} workers on 127.0.0.1 (ephemeral: its data \
         is gone when this command ends)",
        cluster.redacted_url(pg_local::citus::DEFAULT_DATABASE),
        cluster.workers().len()
    );
    Ok(Arc::new(cluster))
}

/// The service's database on a local Citus cluster: the coordinator's default database,
/// distributed over the workers when the cluster started.
pub fn citus_database(cluster: Arc<pg_local::CitusCluster>) -> Database {
    let name = pg_local::citus::DEFAULT_DATABASE;
    Database {
        url: cluster.url(name),
        shown_url: cluster.redacted_url(name),
        embedded: None,
        _citus: Some(cluster),
        record: None,
    }
}

/// One connection to `url` and back, so that an unreachable server is reported once, naming
/// where we tried (host or socket directory, port) and the operating system's reason.
pub async fn check_reachable(url: &str) -> Result<()> {
    use deadpool_postgres::tokio_postgres::{self, config::Host};
    let config: tokio_postgres::Config = url.parse().with_context(|| {
        format!(
            "--database-url {}: not a PostgreSQL URL",
            pg_local::redact(url)
        )
    })?;
    let ports = config.get_ports();
    let place: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match host {
                Host::Tcp(h) => format!("host {h} port {port}"),
                Host::Unix(dir) => format!("socket directory {} port {port}", dir.display()),
            }
        })
        .collect();
    let place = if place.is_empty() {
        "the default socket (no host given)".to_owned()
    } else {
        place.join(", ")
    };
    let connect = config.connect(tokio_postgres::NoTls);
    let (client, connection) = tokio::time::timeout(CONNECT_CHECK_TIMEOUT, connect)
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {CONNECT_CHECK_TIMEOUT:?}"))
        .and_then(|r| r.map_err(anyhow::Error::from))
        .with_context(|| format!("connecting to PostgreSQL at {place}"))?;
    let task = tokio::spawn(connection);
    drop(client);
    let _ = task.await;
    Ok(())
}

/// saldo's data directory (see the module docs), created (0700, or 0711 as root) if it does
/// not exist yet; an existing directory is used as it is. A failure to create it is logged
/// here and surfaces again, with its cause, when a file inside is used.
#[allow(dead_code)] // every caller uses try_state_dir; kept for callers that cannot fail
pub fn state_dir(explicit: Option<&Path>) -> PathBuf {
    match try_state_dir(explicit) {
        Ok(dir) => dir,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "saldo's data directory");
            state_dir_path(explicit)
        }
    }
}

/// [`state_dir`], with its errors: it cannot be created, or it is an old-style cluster directory.
pub fn try_state_dir(explicit: Option<&Path>) -> Result<PathBuf> {
    let dir = state_dir_path(explicit);
    if dir.join("PG_VERSION").exists() {
        bail!(
            "{} is a PostgreSQL data directory, but SALDO_DATA_DIR now names saldo's own directory: \
             the embedded cluster lives in <SALDO_DATA_DIR>/{CLUSTER_DIR}. Point SALDO_DATA_DIR at \
             {} (and move the cluster to {}), or at a new directory",
            dir.display(),
            dir.parent().unwrap_or(Path::new("/")).display(),
            dir.parent()
                .unwrap_or(Path::new("/"))
                .join(CLUSTER_DIR)
                .display(),
        );
    }
    if !dir.exists() {
        create_private_dir(&dir)?;
    } else if !dir.is_dir() {
        bail!(
            "{} is not a directory: give --data-dir (SALDO_DATA_DIR) a directory, or a path \
             that does not exist yet",
            dir.display()
        );
    }
    // Secrets live here: a directory others may write to would let them plant or swap files.
    let mode = std::fs::metadata(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .permissions()
        .mode();
    if mode & 0o022 != 0 {
        bail!(
            "{} (mode {:04o}) is writable by other users, and saldo keeps its secrets there: \
             `chmod go-w {}` or choose another --data-dir (SALDO_DATA_DIR)",
            dir.display(),
            mode & 0o7777,
            dir.display()
        );
    }
    Ok(dir)
}

/// `explicit` (`--data-dir`, which clap also fills from `SALDO_DATA_DIR`), else the default.
pub fn state_dir_path(explicit: Option<&Path>) -> PathBuf {
    if let Some(dir) = explicit {
        return dir.to_owned();
    }
    if let Some(dir) = std::env::var_os("SALDO_DATA_DIR") {
        return PathBuf::from(dir);
    }
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/lib/saldo");
    }
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME") {
        return PathBuf::from(xdg).join("saldo");
    }
    let home = std::env::var_os("HOME").map_or_else(std::env::temp_dir, PathBuf::from);
    home.join(".local/share/saldo")
}

/// Creates `dir` (missing ancestors with the default mode) and gives `dir` itself its private
/// mode. Only ever called for a directory that does not exist: we never re-mode another's.
fn create_private_dir(dir: &Path) -> Result<()> {
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::create_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mode = if nix::unistd::geteuid().is_root() {
        STATE_DIR_MODE_ROOT
    } else {
        STATE_DIR_MODE
    };
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {mode:o} {}", dir.display()))?;
    Ok(())
}
