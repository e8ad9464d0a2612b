//! pg-local: a private PostgreSQL cluster started from the machine's own binaries.
//!
//! It is two things at once: the embedded default of `saldo serve` (a persistent data directory,
//! fsync on) and the harness of every test (a throwaway directory with fast, unsafe-on-crash
//! settings). Both share one life-cycle rule: **no postgres outlives the process that started it**.
//! That holds on drop, on panic (drop runs while unwinding) and when the parent is killed outright,
//! because the postmaster is started with a parent-death signal (see `process.rs`), also when it
//! is started again by [`Cluster::restart`].
//!
//! Nobody else on the machine gets in: by default there is no TCP listener at all, only a Unix
//! socket in a directory of mode 0700 that belongs to the server's user (`dirs.rs`), and every
//! connection must present the superuser's generated password over SCRAM-SHA-256 (`auth.rs`).
//! When the current process is root, initdb and postgres run as the `postgres` system user,
//! because PostgreSQL refuses to run as root; only directories pg-local creates are handed to it.
//!
//! This root only declares the modules and re-exports their public names; no module imports
//! from it, so the modules depend on each other one way: `error` at the bottom; `owner`, `reap`,
//! `log`, `config` and `process` above it; then `binaries`, `dirs` and `auth`; then `cluster`;
//! then `record` and `citus` on top.

mod auth;
mod binaries;
pub mod citus;
mod cluster;
mod config;
mod dirs;
mod error;
mod log;
mod owner;
mod process;
mod reap;
mod record;

pub use auth::{redact, REDACTED};
pub use binaries::Binaries;
pub use citus::{CitusCluster, CitusConfig};
pub use cluster::Cluster;
pub use config::{
    Config, DataDir, LOG_FILE, ORPHAN_WAIT, SHUTDOWN_TIMEOUT, SOCKET_PORT, STARTUP_TIMEOUT,
    SUPERUSER,
};
pub use error::Error;
pub use log::{LogLimit, MAX_LINE_BYTES};
pub use owner::Owner;
pub use process::{kept_env, spawn_guarded, Guarded, Leash, KEPT_ENV};
pub use record::Record;

#[cfg(test)]
mod tests;
