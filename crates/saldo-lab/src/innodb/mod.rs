//! The race lab on MySQL/MariaDB (InnoDB): the seeds' InnoDB claims as rerunnable races on a
//! real server, with a schema of its own (`stock`, `reservations`, `accounts`, `transfers`).
//!
//! This is not the engine on another store: saldo's engine and its contract suite run on
//! PostgreSQL only. Here each strategy the articles describe is written out in plain SQL
//! against InnoDB so that what holds and what differs can be run and measured:
//!
//! - [`db`] (the bottom): the connection pool, the scratch database and its schema, the
//!   isolation level, and which server errors are retryable (1213 deadlock, 1205 lock wait
//!   timeout) with the bounded, jittered whole-transaction retry;
//! - [`stock`]: `last-unit` and `oversubscribed` with `naive` (read, then write what was read:
//!   lab only), `atomic` (the conditional UPDATE, decided by rows affected), `pessimistic`
//!   (`SELECT … FOR UPDATE`) and `optimistic` (version check, a fresh transaction per attempt);
//! - [`transfers`]: `crossed-transfers` with `naive` (locks in request order) and `ordered`
//!   (one `SELECT … ORDER BY id FOR UPDATE` first);
//! - [`differences`]: the behaviours that differ from PostgreSQL, each as a small experiment
//!   returning what it saw (snapshot versus current read, gap locks, rows affected, autocommit);
//! - [`report`]: what one strategy did over its runs, and its verdict.
//!
//! Imports point one way: `db` ← `report` ← `stock`, `transfers`, `differences`.

pub mod db;
pub mod differences;
pub mod report;
pub mod stock;
pub mod transfers;

pub use db::{is_retryable, retryable_code, InnoDbError, Isolation, Lab, RETRY_ATTEMPTS};
pub use report::InnoReport;
