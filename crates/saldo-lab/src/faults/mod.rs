//! The fault lab: what it takes to run the real service against a misbehaving network and a
//! crashing database, and to tell afterwards whether every answer it gave was the truth.
//!
//! - [`proxy`]: a TCP proxy of our own on 127.0.0.1 between the service and PostgreSQL that,
//!   on command, passes traffic, cuts every connection (RST or FIN) and refuses new ones,
//!   delays every chunk, or holds everything (a blackhole);
//! - [`http`]: the one-request-per-connection HTTP client the clients and the replays use,
//!   whose answer is a status and a body or "no answer";
//! - [`history`]: the operations (reserve, confirm, release, transfer, hold, post, void), each
//!   with every answer it got, what an answer says about whether it applied, and the replays
//!   that settle the unknown ones;
//! - [`load`]: concurrent clients that record such a history while faults are injected;
//! - [`check`]: the history against the database read directly (every acknowledged operation
//!   applied exactly once, nothing refused applied, units and money conserved, one fate per
//!   hold and per reservation) and the service's own audit.
//!
//! The suites that use it are `crates/saldo-cli/tests/suite/partitions.rs` (one node behind the
//! proxy; a Citus cluster whose nodes are killed and restarted).

pub mod check;
pub mod history;
pub mod http;
pub mod load;
pub mod proxy;
