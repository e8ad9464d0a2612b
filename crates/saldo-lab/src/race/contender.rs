//! What the scenarios that race one shop operation (`extend-vs-sweeper`,
//! `sales-vs-reservations`, `backorder-fill`, `split-locations`) share around their runs: who
//! runs the raced operation ([`Contender`]: a served strategy, or the scenario's naive variant
//! from `crate::naive`), what a run's findings add to a report ([`RunOutcome`],
//! [`StockFindings`]), and the loop that runs each contender `runs` times on a reset scratch
//! database and sums what every run found into its [`Report`] ([`run_contenders`]). Inside a
//! run they share [`crate::race::fire`].

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Instant;

use saldo::retry::TxOptions;
use saldo::stock::{build, StockEngine, Store, StrategyConfig, StrategyName};
use tokio_postgres::error::SqlState;

use crate::race::types::{LabError, Report, RunDone, Scenario};
use crate::scratch::Scratch;

/// Who runs the operation a shop scenario races: a served strategy, through the library, or
/// the scenario's naive variant (named by the scenario: `naive-extend`, `naive-sale`,
/// `naive-fill`, `naive-locations`), which reads, decides in the application and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    Served(StrategyName),
    Naive(&'static str),
}

impl Contender {
    /// Every served strategy, then the naive variant called `naive`.
    pub fn all(naive: &'static str) -> Vec<Contender> {
        StrategyName::ALL
            .iter()
            .map(|&n| Contender::Served(n))
            .chain([Contender::Naive(naive)])
            .collect()
    }

    pub fn parse(s: &str, naive: &'static str) -> Option<Contender> {
        if s == naive {
            return Some(Contender::Naive(naive));
        }
        StrategyName::parse(s).map(Contender::Served)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Contender::Served(n) => n.as_str(),
            Contender::Naive(name) => name,
        }
    }

    pub fn is_safe(self) -> bool {
        matches!(self, Contender::Served(_))
    }

    /// The strategy whose engine makes the scenario's reservations (`atomic` for the naive).
    pub fn engine(self) -> StrategyName {
        match self {
            Contender::Served(n) => n,
            Contender::Naive(_) => StrategyName::Atomic,
        }
    }

    /// [`Contender::engine`], built on `store` with the default settings.
    pub fn build(self, store: &Store) -> StockEngine {
        build(self.engine(), store.clone(), &StrategyConfig::default())
    }
}

/// One run's findings, added to its contender's report.
pub trait RunOutcome {
    fn add_to(&self, report: &mut Report, run: u32);
}

/// What a stock scenario's run (`sales-vs-reservations`, `split-locations`) adds to its report,
/// in the report's terms: one way to count it for both.
pub struct StockFindings<'a> {
    pub sold: u64,
    pub refused: u64,
    pub oversold: u64,
    pub errors: &'a BTreeMap<String, u64>,
    pub final_available: i64,
    pub final_reserved: i64,
    pub audit_divergences: u64,
    pub violated: bool,
}

impl StockFindings<'_> {
    pub fn add_to(&self, report: &mut Report, run: u32) {
        report.add_sold(run, self.sold);
        report.refused += self.refused;
        report.oversold += self.oversold;
        report.runs_oversold += u32::from(self.oversold > 0);
        report.check_violations += self
            .errors
            .get(SqlState::CHECK_VIOLATION.code())
            .copied()
            .unwrap_or(0);
        report.add_errors(self.errors);
        report.final_available = self.final_available;
        report.final_reserved = self.final_reserved;
        report.audit_divergences += self.audit_divergences;
        report.violations += u32::from(self.violated);
    }
}

/// What a scenario's runs share.
#[derive(Debug, Clone, Copy)]
pub struct Runs {
    pub scenario: Scenario,
    /// Concurrent requests per run, and units stocked per run (for the report).
    pub buyers: u32,
    pub stock_per_run: i64,
    pub runs: u32,
}

/// Runs `runs.runs` runs of `run_on` for each contender, one after the other, each on a reset
/// `scratch`, telling `on_run` after every run.
pub async fn run_contenders<O, F, Fut>(
    scratch: &Scratch,
    runs: Runs,
    contenders: &[Contender],
    on_run: &(dyn Fn(RunDone<'_>) + Sync),
    run_on: F,
) -> Result<Vec<Report>, LabError>
where
    O: RunOutcome,
    F: Fn(Store, Contender, u32) -> Fut,
    Fut: Future<Output = Result<O, LabError>>,
{
    let mut reports = Vec::with_capacity(contenders.len());
    for &contender in contenders {
        let started = Instant::now();
        let mut report = Report {
            scenario: runs.scenario.as_str().into(),
            strategy: contender.as_str().into(),
            safe: contender.is_safe(),
            runs: runs.runs,
            buyers_per_run: runs.buyers,
            stock_per_run: runs.stock_per_run,
            ..Report::default()
        };
        for run in 0..runs.runs {
            scratch.reset().await?;
            let outcome = run_on(scratch.store(TxOptions::default()), contender, run).await?;
            on_run(RunDone {
                strategy: contender.as_str(),
                run: run + 1,
                runs: runs.runs,
                elapsed: started.elapsed(),
            });
            outcome.add_to(&mut report, run);
        }
        report.finish(started);
        reports.push(report);
    }
    Ok(reports)
}
