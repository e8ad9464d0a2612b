//! saldo-lab: the workshop around the `saldo` engine, kept out of the engine crate.
//!
//! - [`race`]: the race lab behind `saldo race`: the races the project's articles describe
//!   (last unit, oversubscribed, multi-item, crossed transfers, late retries, holds, the shop
//!   races) as rerunnable races with per-strategy verdicts and the `--explain` timeline;
//! - [`bench`](mod@bench): the bench's engine behind `saldo bench`: scenarios, closed/open-loop load with
//!   corrected latencies, per-run rows and medians, SVG plots, the HTTP mode;
//! - [`scratch`]: the one scratch-database layer both work in (created, reset, dropped);
//! - [`checks`]: the one set of invariant checks both run after every run;
//! - [`strategy`] and [`naive`]: what can be raced — saldo's served strategies plus the naive
//!   ones ([`LabStrategy`], [`LabTransfer`]), which exist only here;
//! - `testing`: the real-PostgreSQL test harness every crate's tests use (one cluster per test
//!   process, a migrated template, a fresh database per test, a SERIALIZABLE cluster). Behind
//!   the `testing` feature, which only the crates' dev-dependencies turn on: the `saldo`
//!   binary does not ship it.
//! - [`faults`]: the fault lab: a TCP proxy that partitions, delays and blackholes the service's
//!   database connections, and the recorded history of client operations checked afterwards
//!   against the database;
//!
//! `saldo` owns the schema and every statement that writes it: the lab's resets and bulk
//! fixtures are `saldo::fixtures`, scratch databases are created and dropped by `saldo::db`.
//! The naive strategies' few writes are the one, deliberate, exception (see [`naive`]).
//!
//! Racing the last unit against every strategy:
//!
//! ```no_run
//! use saldo_lab::race::{self, stock::StockRace, Scenario, Verdict};
//! use saldo_lab::scratch::Scratch;
//! use saldo_lab::LabStrategy;
//!
//! # async fn example() -> Result<(), saldo_lab::race::LabError> {
//! let scratch = Scratch::for_race("postgres://postgres@127.0.0.1:5432/postgres").await?;
//! let last_unit = StockRace::new(Scenario::LastUnit, 50, 1, 2, 20, 42)?;
//! let reports = race::stock::run(&scratch, &last_unit, LabStrategy::ALL).await;
//! scratch.drop_database().await?;
//! for report in reports? {
//!     // Safe strategies hold; naive-subtract and naive-overwrite fail as expected.
//!     assert_ne!(report.verdict, Verdict::Broken, "{}", report.strategy);
//! }
//! # Ok(())
//! # }
//! ```

pub mod bench;
pub mod checks;
pub mod faults;
pub mod innodb;
pub mod naive;
pub mod race;
pub mod scratch;
pub mod strategy;
#[cfg(feature = "testing")]
pub mod testing;

pub use strategy::{LabStrategy, LabTransfer};
