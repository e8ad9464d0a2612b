//! Which database a command talks to: the `--database-url` given, or the embedded cluster
//! (`pg-local`) in saldo's data directory, kept running (and restarted if it dies, see
//! `supervise.rs`) while the returned value lives. Every subcommand that needs PostgreSQL goes
//! through [`open`].
//!
//! saldo's data directory ([`state_dir`]): `$SALDO_DATA_DIR`, else `/var/lib/saldo` as root,
//! else `$XDG_DATA_HOME/saldo` or `~/.local/share/saldo`. It holds
//! - `postgres/`: the embedded cluster (its own log is `postgres/server.log`, its Unix socket
//!   `postgres/.s.PGSQL.5432` when the path is short enough);
//! - `postgres.password`: the cluster superuser's generated password (0600);
//! - other secrets of saldo's (e.g. `tokens.json`), each 0600.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};

/// The embedded cluster's directory inside [`state_dir`].
pub const CLUSTER_DIR: &str = "postgres";
/// The embedded cluster's password file inside [`state_dir`].
pub const CLUSTER_PASSWORD_FILE: &str = "postgres.password";
/// Mode of a data directory saldo creates: private; as root, searchable by the `postgres` user
/// (it must reach its cluster directory inside) but not listable.
const STATE_DIR_MODE: u32 = 0o700;
const STATE_DIR_MODE_ROOT: u32 = 0o711;

/// A database to talk to: the given URL, or an embedded cluster kept alive while this lives.
pub struct Database {
    pub url: String,
    /// The URL without its password, for anything a person or a log sees.
    pub shown_url: String,
    embedded: Option<Arc<Mutex<pg_local::Cluster>>>,
}

impl Database {
    /// The embedded cluster, when there is one (for the supervisor).
    pub fn embedded(&self) -> Option<Arc<Mutex<pg_local::Cluster>>> {
        self.embedded.clone()
    }
}

/// Options of the embedded cluster.
#[derive(Debug, Clone, Copy, Default)]
pub struct EmbeddedOptions {
    /// Also listen on 127.0.0.1 (password still required).
    pub tcp: bool,
}

pub async fn open(database_url: Option<String>) -> Result<Database> {
    open_with(database_url, EmbeddedOptions::default()).await
}

pub async fn open_with(database_url: Option<String>, options: EmbeddedOptions) -> Result<Database> {
    if let Some(url) = database_url {
        return Ok(Database {
            shown_url: pg_local::redact(&url),
            url,
            embedded: None,
        });
    }
    let state = try_state_dir()?;
    let mut config = pg_local::Config::persistent(state.join(CLUSTER_DIR))
        .password_file(state.join(CLUSTER_PASSWORD_FILE));
    if options.tcp {
        config = config.with_tcp();
    }
    let cluster = tokio::task::spawn_blocking(move || pg_local::Cluster::start(&config)).await??;
    let url = cluster.url("postgres");
    let shown_url = cluster.redacted_url("postgres");
    eprintln!(
        "embedded PostgreSQL: {shown_url} (data {}, log {}, password in {}{})",
        cluster.data_dir().display(),
        cluster.log_file().display(),
        cluster.password_file().display(),
        if cluster.has_tcp() {
            format!(", also on 127.0.0.1:{}", cluster.port())
        } else {
            String::new()
        }
    );
    Ok(Database {
        url,
        shown_url,
        embedded: Some(Arc::new(Mutex::new(cluster))),
    })
}

/// saldo's data directory (see the module docs), created (0700, or 0711 as root) if it does
/// not exist yet; an existing directory is used as it is. A failure to create it is logged
/// here and surfaces again, with its cause, when a file inside is used.
#[allow(dead_code)] // every caller uses try_state_dir; kept for callers that cannot fail
pub fn state_dir() -> PathBuf {
    match try_state_dir() {
        Ok(dir) => dir,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "saldo's data directory");
            state_dir_path()
        }
    }
}

/// [`state_dir`], with its errors: it cannot be created, or it is an old-style cluster directory.
pub fn try_state_dir() -> Result<PathBuf> {
    let dir = state_dir_path();
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
    }
    // Secrets live here: a directory others may write to would let them plant or swap files.
    let mode = std::fs::metadata(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .permissions()
        .mode();
    if mode & 0o022 != 0 {
        bail!(
            "{} (mode {:04o}) is writable by other users, and saldo keeps its secrets there: \
             `chmod go-w {}` or choose another SALDO_DATA_DIR",
            dir.display(),
            mode & 0o7777,
            dir.display()
        );
    }
    Ok(dir)
}

fn state_dir_path() -> PathBuf {
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
