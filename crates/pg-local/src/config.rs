//! What to start ([`Config`], [`DataDir`]) and the fixed rules every start follows: the time
//! limits of a start and a stop, the superuser's name, the socket-only port and the log's name.
//! Everything else in the crate reads these; this module reads only `log` (for [`LogLimit`]).

use std::path::PathBuf;
use std::time::Duration;

use crate::log::LogLimit;

/// How long a freshly started server may take to accept connections before we give up.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a fast shutdown may take before the postmaster is killed.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a start waits for an orphaned postmaster of the same directory to finish its
/// shutdown (longer than [`SHUTDOWN_TIMEOUT`]: nobody SIGKILLs an orphan).
pub const ORPHAN_WAIT: Duration = Duration::from_secs(30);
/// Name of the superuser created by initdb.
pub const SUPERUSER: &str = "postgres";
/// The port of a socket-only cluster: it only names the socket file (`.s.PGSQL.5432`) in a
/// directory of its own, so it cannot clash with another server.
pub const SOCKET_PORT: u16 = 5432;
/// File name of the server log, inside the data directory (each cluster has its own); rotated
/// to `server.log.1`, `.2`, … within [`Config::log_limit`] (see `log.rs`).
pub const LOG_FILE: &str = "server.log";

/// Where the cluster keeps its data.
#[derive(Debug, Clone)]
pub enum DataDir {
    /// A directory that survives restarts; created and initialised on first use. fsync stays on.
    Persistent(PathBuf),
    /// A temporary directory removed when the cluster is dropped. fsync and synchronous commit are
    /// off: fast, and only acceptable because the data is thrown away.
    Ephemeral,
}

/// What to start.
#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: DataDir,
    /// `max_connections` of the server.
    pub max_connections: u32,
    /// Extra `-c name=value` settings, e.g. `default_transaction_isolation=serializable`.
    pub settings: Vec<(String, String)>,
    /// Also listen on 127.0.0.1 (a free port unless `port` is set), password still required.
    /// Off by default: the Unix socket is the only way in.
    pub tcp: bool,
    /// The TCP port on 127.0.0.1 (implies `tcp`); `None`: a free one.
    pub port: Option<u16>,
    /// How much server log is kept.
    pub log_limit: LogLimit,
    /// Where the superuser's password is kept (mode 0600). `None`: next to a persistent data
    /// directory as `<dir>.password`; in the temporary directory of an ephemeral one.
    pub password_file: Option<PathBuf>,
    /// The directory of the server binaries; `None`: found as [`crate::Binaries::find`] says.
    pub bin_dir: Option<PathBuf>,
    /// Environment variables of the postmaster (inherited by its backends), e.g. the
    /// `PGPASSFILE` a Citus node's outbound connections authenticate with. Nothing else of this
    /// process's environment reaches it but the locale, time zone and `PATH`
    /// ([`crate::KEPT_ENV`]).
    pub env: Vec<(String, PathBuf)>,
}

impl Config {
    /// A throwaway cluster for tests.
    pub fn ephemeral() -> Self {
        Config {
            data_dir: DataDir::Ephemeral,
            max_connections: 400,
            settings: Vec::new(),
            tcp: false,
            port: None,
            log_limit: LogLimit::default(),
            password_file: None,
            bin_dir: None,
            env: Vec::new(),
        }
    }

    /// A cluster whose data lives in `dir`.
    pub fn persistent(dir: impl Into<PathBuf>) -> Self {
        Config {
            data_dir: DataDir::Persistent(dir.into()),
            max_connections: 200,
            settings: Vec::new(),
            tcp: false,
            port: None,
            log_limit: LogLimit::default(),
            password_file: None,
            bin_dir: None,
            env: Vec::new(),
        }
    }

    /// Adds one server setting.
    pub fn setting(mut self, name: &str, value: &str) -> Self {
        self.settings.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Keeps the password in `file` instead of the default place.
    pub fn password_file(mut self, file: impl Into<PathBuf>) -> Self {
        self.password_file = Some(file.into());
        self
    }

    /// Also listens on 127.0.0.1 (opt-in; the password is still required).
    pub fn with_tcp(mut self) -> Self {
        self.tcp = true;
        self
    }

    /// Listens on 127.0.0.1:`port` (fixed, so that clients can be configured once).
    pub fn with_port(mut self, port: u16) -> Self {
        self.tcp = true;
        self.port = Some(port);
        self
    }

    /// Uses the server binaries in `dir` (e.g. a Citus-enabled build) instead of searching.
    pub fn bin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.bin_dir = Some(dir.into());
        self
    }

    /// Keeps at most this much server log.
    pub fn log_limit(mut self, limit: LogLimit) -> Self {
        self.log_limit = limit;
        self
    }
}
