//! `InnoReport`: what one strategy did over its runs of one InnoDB race, and its verdict.

use std::collections::BTreeMap;
use std::fmt;

use crate::innodb::db::{server_code, InnoDbError, Isolation, Retries};

/// One strategy's runs of one race.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct InnoReport {
    pub scenario: String,
    pub strategy: String,
    pub isolation: String,
    /// A safe strategy must hold every invariant in every run; a naive one is expected to break.
    pub safe: bool,
    pub runs: u32,
    /// Buyers (or transfers) per run, and units stocked (or money) per run.
    pub per_run: u32,
    pub stock: i64,
    /// Units sold (or transfers applied), in all runs, and the fewest and most in one run.
    pub done: u64,
    pub done_min: u64,
    pub done_max: u64,
    pub refused: u64,
    /// Optimistic attempts exhausted.
    pub conflicts: u64,
    /// Units sold beyond the stock, over all runs, and in how many runs.
    pub oversold: u64,
    pub runs_oversold: u32,
    /// Whole-transaction reruns on 1213 and 1205.
    pub deadlock_retries: u64,
    pub lock_timeout_retries: u64,
    /// Errors that reached a caller, by server code (or kind).
    pub errors: BTreeMap<String, u64>,
    /// Runs in which any invariant broke.
    pub violations: u32,
    pub elapsed_ms: u64,
}

impl InnoReport {
    pub fn new(scenario: &str, strategy: &str, isolation: Isolation, safe: bool) -> InnoReport {
        InnoReport {
            scenario: scenario.into(),
            strategy: strategy.into(),
            isolation: isolation.as_str().into(),
            safe,
            done_min: u64::MAX,
            ..InnoReport::default()
        }
    }

    /// Adds one run's count of sold units (or applied transfers).
    pub fn add_done(&mut self, done: u64) {
        self.done += done;
        self.done_min = self.done_min.min(done);
        self.done_max = self.done_max.max(done);
    }

    pub fn add_retries(&mut self, retries: Retries) {
        self.deadlock_retries += retries.deadlocks;
        self.lock_timeout_retries += retries.lock_timeouts;
    }

    pub fn add_error(&mut self, error: &InnoDbError) {
        let key = server_code(error).map_or_else(|| "other".to_owned(), |c| c.to_string());
        *self.errors.entry(key).or_default() += 1;
    }

    /// "held" (no violation), "broken (expected)" for a naive strategy, "BROKEN" for a safe one.
    pub fn verdict(&self) -> &'static str {
        match (self.violations, self.safe) {
            (0, _) => "held",
            (_, false) => "broken (expected)",
            (_, true) => "BROKEN",
        }
    }

    /// Whether a safe strategy broke an invariant.
    pub fn safe_broke(&self) -> bool {
        self.safe && self.violations > 0
    }
}

impl fmt::Display for InnoReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let done_min = if self.runs == 0 { 0 } else { self.done_min };
        write!(
            f,
            "{:<12} {:<16} {} runs × {}: done {} (per run {}..{}), refused {}, conflicts {}, \
             oversold {} in {} runs, retries 1213×{} 1205×{}, errors {:?}, {} ms: {}",
            self.strategy,
            self.isolation,
            self.runs,
            self.per_run,
            self.done,
            done_min,
            self.done_max,
            self.refused,
            self.conflicts,
            self.oversold,
            self.runs_oversold,
            self.deadlock_retries,
            self.lock_timeout_retries,
            self.errors,
            self.elapsed_ms,
            self.verdict()
        )
    }
}
