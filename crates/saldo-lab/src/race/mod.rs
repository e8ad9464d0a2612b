//! The race lab behind `saldo race`: the races the project's articles describe, as rerunnable
//! scenarios.
//!
//! Each run starts from a fresh state in a scratch database the lab creates for itself
//! ([`crate::scratch`]), fires concurrent buyers (or transfers) at one strategy, and then checks every
//! invariant: units sold against units stocked, the divergence audit, CHECK violations that
//! reached a buyer, partially written orders. A safe strategy must hold them run after run; the
//! naive ones are expected to break them — their breakage is the demonstration, and proof that
//! the checks can fail.
//!
//! Layout, imports pointing one way: [`types`] (scenarios, reports, bounds) ← [`buyers`] (firing
//! every order at once and tallying the answers) ← the scenarios ([`stock`], [`transfers`],
//! [`late`], [`holds`], and the shop scenarios [`extend`], [`sales`], [`backorders`] and
//! [`locations`], and the feed reader's [`follow`], which share [`contender`] (who races, the per-contender run loop) and
//! [`fire`] (one run: every request at once from one starting line, the answers sorted, the
//! books read)); their naive variants are in `crate::naive`. Above them, [`catalog`] (each
//! scenario's description, defaults, settings and racers) ← [`plan`] (a request validated
//! into a [`Race`], and the one dispatch that runs it). [`explain`] renders `--explain`
//! timelines. This file only declares and re-exports.
//!
//! The crossed transfers, ordered against naive, without the retry (the naive
//! deadlocks reach the caller):
//!
//! ```no_run
//! use saldo_lab::race::{self, transfers::TransferRace};
//! use saldo_lab::scratch::Scratch;
//! use saldo_lab::LabTransfer;
//!
//! # async fn example() -> Result<(), saldo_lab::race::LabError> {
//! let scratch = Scratch::for_race("postgres://postgres@127.0.0.1:5432/postgres").await?;
//! let crossed = TransferRace::new(200, 1, false)?;
//! let reports = race::transfers::run(&scratch, &crossed, LabTransfer::ALL).await;
//! scratch.drop_database().await?;
//! for report in reports? {
//!     println!("{}: {:?}, errors {:?}", report.strategy, report.verdict, report.errors);
//! }
//! # Ok(())
//! # }
//! ```

pub mod backorders;
pub mod buyers;
pub mod catalog;
pub mod contender;
pub mod explain;
pub mod extend;
pub mod fire;
pub mod follow;
pub mod holds;
pub mod late;
pub mod locations;
pub mod plan;
pub mod sales;
pub mod stock;
pub mod transfers;
pub mod types;

pub use catalog::{Defaults, Knob, Racers};
pub use contender::Contender;
pub use plan::{PlanError, Race, RaceRequest};
pub use types::*;
