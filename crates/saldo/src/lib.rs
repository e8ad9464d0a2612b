//! saldo: sell the last unit exactly once on PostgreSQL, under real concurrency.
//!
//! - [`domain`]: validated ids, quantities and orders;
//! - [`stock`]: the reservation lifecycle and its strategies, the sweeper, admin;
//! - [`ledger`]: accounts and idempotent double-entry transfers locked in id order;
//! - [`retry`]: the one transaction-retry mechanism every write path uses;
//! - [`audit`]: the divergence audit that must come back empty;
//! - [`lab`]: the race lab behind `saldo race`: the seeds' experiments, rerunnable;
//! - [`db`]: pool and migrations; [`testing`]: the real-PostgreSQL test harness.

pub mod audit;
pub mod db;
pub mod domain;
pub mod error;
pub mod lab;
pub mod ledger;
pub mod ops;
pub mod retry;
pub mod stock;
pub mod telemetry;
pub mod testing;

pub use error::{Error, InputError};
