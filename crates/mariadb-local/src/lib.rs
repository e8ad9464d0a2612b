//! mariadb-local: a private, throwaway MariaDB server started from the machine's own binaries,
//! the way `pg-local` starts PostgreSQL. The race lab's InnoDB scenarios and their tests run on it.
//!
//! The same life-cycle rule as pg-local: **no mariadbd outlives the process that started it** —
//! stopped on drop (and so on panic, while unwinding), and by the kernel when the owner is
//! killed outright (a parent-death signal, `process.rs`). Nobody else gets in: `--no-defaults`
//! (the system's `my.cnf` is never read, the package's own server and `/var/lib/mysql` are never
//! touched), `--skip-networking` unless a loopback port is asked for, a Unix socket inside the
//! server's own 0700 directory, and one user (`saldo`) whose generated password is kept in a
//! 0600 file and never logged. As root, both programs run as the `mysql` system user (MariaDB
//! refuses root) and only directories we create are handed to it.
//!
//! Modules, one way: `error` ← `binaries`, `process` ← `server`. This root only re-exports.

mod binaries;
mod error;
mod process;
mod server;

pub use binaries::{Binaries, BIN_ENV};
pub use error::Error;
pub use process::SHUTDOWN_TIMEOUT;
pub use server::{Config, MariaDb, STARTUP_TIMEOUT, USER};
