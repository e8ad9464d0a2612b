//! `Error`: everything starting or stopping a private MariaDB can fail with, one line each.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "MariaDB server binaries not found (mariadbd and mariadb-install-db; {searched}): \
         install them with `apt-get install -y mariadb-server`, or set MARIADB_BIN to their directory"
    )]
    BinariesNotFound { searched: String },
    #[error("running as root, but there is no `mysql` system user to run mariadbd as")]
    NoMysqlUser,
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("looking up the mysql user: {0}")]
    User(#[from] nix::Error),
    #[error("mariadb-install-db failed ({status}): {tail}")]
    InstallDb { status: String, tail: String },
    #[error(
        "mariadbd did not accept connections on {socket} within {seconds} s; its log ends: {tail}"
    )]
    NotReady {
        socket: PathBuf,
        seconds: u64,
        tail: String,
    },
    #[error("mariadbd exited during start-up; its log ends: {tail}")]
    Exited { tail: String },
}

/// Wraps an I/O error with what was being done.
pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}
