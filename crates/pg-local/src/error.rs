//! The one error type of pg-local, and the helper that wraps an I/O failure with what was being
//! done. It depends on no other module of the crate (every module returns it), so the Citus
//! search variable its message names is defined here too and re-exported by `citus`.

use std::path::PathBuf;
use std::time::Duration;

/// Environment variable naming a Citus-enabled bin directory (checked first, and alone).
pub const CITUS_BIN_ENV: &str = "SALDO_CITUS_PG_BIN";

/// Everything that can go wrong while finding, initialising or running a cluster.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "PostgreSQL server binaries (initdb, postgres) not found: install them (Debian/Ubuntu: \
         `apt-get install -y postgresql`) or point PG_BIN at their directory ({searched})"
    )]
    BinariesNotFound { searched: String },
    #[error(
        "Citus not found: no PostgreSQL bin directory whose lib directory holds citus.so \
         (searched {searched}): install Citus's own packages for this PostgreSQL (e.g. \
         postgresql-15-citus-13.2), or on saldo's machines run `../shared/citus/build-citus \
         /var/cache/saldo-citus` as root; point {env} at another build's bin directory",
        env = CITUS_BIN_ENV
    )]
    CitusNotFound { searched: String },
    #[error("citus: {0}")]
    Citus(String),
    #[error("running as root but there is no `postgres` system user to run PostgreSQL as: create it (`useradd -r postgres`) or run as a normal user")]
    NoPostgresUser,
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("initdb failed ({status}): {output}")]
    InitDb { status: String, output: String },
    /// One line: the log's last FATAL/PANIC/ERROR line says why; the tail is kept for callers.
    #[error("postgres exited during start-up: {cause} (full log: {log})")]
    StartFailed {
        log: PathBuf,
        cause: String,
        tail: String,
    },
    #[error("postgres did not accept connections within {0:?}")]
    StartTimeout(Duration),
    #[error("system call failed: {0}")]
    Sys(#[from] nix::Error),
    #[error(
        "the `postgres` user cannot enter {dir} (mode {mode:04o}, owner uid {owner}), which is \
         on the way to the data directory; pg-local does not change directories it did not \
         create: give it search permission (e.g. `chmod o+x {dir}`) or choose another directory"
    )]
    NotTraversable { dir: PathBuf, mode: u32, owner: u32 },
    #[error(
        "{dir} exists but belongs to uid {owner}, not to the server's user (uid {expected}); \
         pg-local does not take over directories it did not create: point it at a path that \
         does not exist yet, or `chown` that directory yourself"
    )]
    NotOurs {
        dir: PathBuf,
        owner: u32,
        expected: u32,
    },
    #[error(
        "{data_dir} is in use by a running PostgreSQL server (pid {pid}), so a second one cannot \
         start there: connect to that server instead, or stop the program that started it first"
    )]
    AlreadyRunning { data_dir: PathBuf, pid: i32 },
    #[error("{0}")]
    Insecure(String),
    #[error("setting the superuser's password in single-user mode failed:\n{0}")]
    Rekey(String),
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}
