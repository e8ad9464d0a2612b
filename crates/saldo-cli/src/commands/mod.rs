//! One module per `saldo` subcommand, each owning its flags (a clap `Args`), their
//! validation into typed options, and its `run`, which answers the process's exit status.
//! What several of them share is [`shared`]: the global flags and opening the database a
//! command works on.

pub mod audit;
pub mod bench;
pub mod db;
pub mod events;
pub mod locks;
pub mod migrate;
pub mod race;
pub mod serve;
pub mod shared;
pub mod sweep;
pub mod token;

pub use shared::Global;
