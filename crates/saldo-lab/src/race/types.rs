//! The race lab's vocabulary: scenarios, bounds, errors, per-strategy reports and verdicts.
//! A leaf of `race`: every scenario module imports from here; nothing here imports them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use saldo::error::Error;
use saldo::stock::trace::TraceEvent;

/// Most runs per strategy in one invocation.
pub const MAX_RUNS: u32 = 1_000;
/// Most concurrent buyers per run (the oversubscribed sale goes up to 1,000).
pub const MAX_BUYERS: u32 = 10_000;
/// Most units stocked per product per run.
pub const MAX_STOCK: u32 = 1_000_000;
/// Longest "think" between a naive read and its write (the last-unit race's payment call).
pub const MAX_THINK_MS: u64 = 1_000;
/// Most transfers per run (the crossed-transfers race uses 200).
pub const MAX_TRANSFERS: u32 = 10_000;
/// The bounds of a stock race's parameters, one set per lab (the InnoDB lab's are tighter).
#[derive(Debug, Clone, Copy)]
pub struct StockBounds {
    pub buyers: u32,
    pub stock: u32,
    pub runs: u32,
    pub think_ms: u64,
}

/// The PostgreSQL lab's stock bounds.
pub const STOCK_BOUNDS: StockBounds = StockBounds {
    buyers: MAX_BUYERS,
    stock: MAX_STOCK,
    runs: MAX_RUNS,
    think_ms: MAX_THINK_MS,
};

impl StockBounds {
    /// Checks a race's buyers, stock and runs (each at least 1) and think time (0 allowed).
    pub fn check(
        &self,
        buyers: u32,
        stock: u32,
        runs: u32,
        think_ms: u64,
    ) -> Result<(), OutOfRange> {
        bounded("buyers", buyers.into(), 1, self.buyers.into())?;
        bounded("stock", stock.into(), 1, self.stock.into())?;
        bounded("runs", runs.into(), 1, self.runs.into())?;
        bounded("think-ms", think_ms, 0, self.think_ms)?;
        Ok(())
    }
}

/// A run that has not finished after this long is abandoned with an error.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(300);
pub use crate::scratch::{LAB_POOL_SIZE, LAB_POOL_WAIT_MS};

/// The lab's scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Many buyers for the last unit.
    LastUnit,
    /// The oversubscribed sale: 100/500/1,000 buyers for 10 units.
    Oversubscribed,
    /// Multi-item orders with crossing items, all or nothing.
    MultiItem,
    /// The crossed-transfers deadlock: transfers both ways between two accounts.
    CrossedTransfers,
    /// Late retries of cancelled and expired orders take nothing.
    LateRetry,
    /// Post, void and expiry race for each hold; exactly one wins.
    HoldSettle,
    /// Posts racing their holds' deadlines with no sweeper; none may post an expired hold.
    HoldDeadline,
    /// Holds race for the last available funds of one account.
    HoldLastFunds,
    /// Linked groups crossing between two accounts; no deadlock reaches a caller.
    CrossedGroups,
    /// Reversals of one unit each race for one posted transfer; never more than it posted.
    ReversalRace,
    /// Hold extensions racing the sweeper; every answer matches the hold's fate.
    ExtendVsSweeper,
    /// Direct sales racing reservations for the last unit.
    SalesVsReservations,
    /// Restocks filling backorders racing new reservations for a preorder.
    BackorderFill,
    /// Orders split across three locations of two products; no location oversold.
    SplitLocations,
    /// A reader follows the event feed while one writer commits late; it must see every
    /// committed event once, each stream in order.
    EventsFollow,
}

impl Scenario {
    pub const ALL: &'static [Scenario] = &[
        Scenario::LastUnit,
        Scenario::Oversubscribed,
        Scenario::MultiItem,
        Scenario::CrossedTransfers,
        Scenario::LateRetry,
        Scenario::HoldSettle,
        Scenario::HoldDeadline,
        Scenario::HoldLastFunds,
        Scenario::CrossedGroups,
        Scenario::ReversalRace,
        Scenario::ExtendVsSweeper,
        Scenario::SalesVsReservations,
        Scenario::BackorderFill,
        Scenario::SplitLocations,
        Scenario::EventsFollow,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::LastUnit => "last-unit",
            Scenario::Oversubscribed => "oversubscribed",
            Scenario::MultiItem => "multi-item",
            Scenario::CrossedTransfers => "crossed-transfers",
            Scenario::LateRetry => "late-retry",
            Scenario::HoldSettle => "hold-settle",
            Scenario::HoldDeadline => "hold-deadline",
            Scenario::HoldLastFunds => "hold-last-funds",
            Scenario::CrossedGroups => "crossed-groups",
            Scenario::ReversalRace => "reversal-race",
            Scenario::ExtendVsSweeper => "extend-vs-sweeper",
            Scenario::SalesVsReservations => "sales-vs-reservations",
            Scenario::BackorderFill => "backorder-fill",
            Scenario::SplitLocations => "split-locations",
            Scenario::EventsFollow => "events-follow",
        }
    }

    pub fn parse(s: &str) -> Option<Scenario> {
        Scenario::ALL.iter().copied().find(|n| n.as_str() == s)
    }
}

/// A lab parameter outside its bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name} = {value} is outside {min}..={max}")]
pub struct OutOfRange {
    pub name: &'static str,
    pub value: u64,
    pub min: u64,
    pub max: u64,
}

/// `value` if it lies in `min..=max`.
pub fn bounded(name: &'static str, value: u64, min: u64, max: u64) -> Result<u64, OutOfRange> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(OutOfRange {
            name,
            value,
            min,
            max,
        })
    }
}

/// Why a lab run could not be carried out (as opposed to an invariant it observed breaking).
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error(transparent)]
    Saldo(#[from] Error),
    #[error(transparent)]
    OutOfRange(#[from] OutOfRange),
    #[error("a run did not finish within {0:?}")]
    Timeout(Duration),
    #[error("a buyer task failed: {0}")]
    Join(String),
}

/// Awaits every task, bounded by [`RUN_TIMEOUT`]; on timeout the tasks are aborted.
pub async fn join_bounded<T: Send + 'static>(
    tasks: Vec<tokio::task::JoinHandle<T>>,
) -> Result<Vec<T>, LabError> {
    let aborts: Vec<_> = tasks.iter().map(|t| t.abort_handle()).collect();
    match tokio::time::timeout(RUN_TIMEOUT, futures::future::join_all(tasks)).await {
        Ok(joined) => joined
            .into_iter()
            .map(|j| j.map_err(|e| LabError::Join(e.to_string())))
            .collect(),
        Err(_) => {
            aborts.iter().for_each(|a| a.abort());
            Err(LabError::Timeout(RUN_TIMEOUT))
        }
    }
}

/// The short name of an error for the per-SQLSTATE tally: the SQLSTATE when there is one.
pub fn error_kind(e: &Error) -> String {
    if let Some(state) = e.sqlstate() {
        return state.code().to_owned();
    }
    match e {
        Error::Pool(_) => "pool".into(),
        Error::Overloaded(_) => "overloaded".into(),
        Error::UnknownProduct(_) => "unknown_product".into(),
        Error::IdempotencyConflict(_) => "idempotency_conflict".into(),
        Error::Input(_) => "invalid_input".into(),
        _ => "other".into(),
    }
}

/// How a strategy fared over all runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every invariant held in every run.
    #[default]
    Held,
    /// A safe strategy broke an invariant: a bug.
    Broken,
    /// A naive strategy broke an invariant: the expected demonstration.
    FailedAsExpected,
    /// A naive strategy happened not to break anything (widen the window with --think-ms).
    NotCaught,
}

/// What one strategy did over all runs of a scenario. Counts are totals over the runs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub scenario: String,
    pub strategy: String,
    pub safe: bool,
    pub runs: u32,
    /// Per run: concurrent buyers (or transfers) and units stocked (or total money).
    pub buyers_per_run: u32,
    pub stock_per_run: i64,
    /// Units sold (stock) or transfers completed (ledger).
    pub sold: u64,
    pub sold_per_run_min: u64,
    pub sold_per_run_max: u64,
    /// Refused for lack of stock (or funds).
    pub refused: u64,
    /// Refused for a version conflict (optimistic, attempts exhausted).
    pub conflicts: u64,
    /// Errors that reached a caller, by SQLSTATE (or kind).
    pub errors: BTreeMap<String, u64>,
    /// State after the last run (summed over products).
    pub final_available: i64,
    pub final_reserved: i64,
    /// Units sold beyond the units stocked, over all runs.
    pub oversold: u64,
    pub runs_oversold: u32,
    /// CHECK violations (23514) that reached a buyer: a write that would have gone negative.
    pub check_violations: u64,
    /// Divergences the audit found after the runs.
    pub audit_divergences: u64,
    /// Orders written only in part (all-or-nothing broken).
    pub partial_orders: u64,
    /// Ledger: money created or destroyed (sum of balances before − after), over all runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub money_drift: Option<i64>,
    /// Ledger: deadlock victims rerun from BEGIN (40P01 retries), over all runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadlock_retries: Option<u64>,
    /// extend-vs-sweeper: answers that disagree with what became of the hold (an extension
    /// "granted" on a hold that expired, or refused on one still active), over all runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wrong_answers: Option<u64>,
    /// events-follow: committed events the reader never saw, over all runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missed_events: Option<u64>,
    /// events-follow: events the reader saw more than once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate_events: Option<u64>,
    /// events-follow: events seen before an earlier position of their stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out_of_order_events: Option<u64>,
    /// Runs in which at least one invariant broke.
    pub violations: u32,
    pub verdict: Verdict,
    pub elapsed_ms: u64,
    /// `--explain`: the reads and writes of the first run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<Vec<TraceEvent>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_dropped: Option<u64>,
}

impl Report {
    /// Sets the verdict from `safe` and `violations`.
    pub fn judge(&mut self) {
        self.verdict = match (self.safe, self.violations > 0) {
            (true, false) => Verdict::Held,
            (true, true) => Verdict::Broken,
            (false, true) => Verdict::FailedAsExpected,
            (false, false) => Verdict::NotCaught,
        };
    }

    /// Records the elapsed time since `started` and judges the runs.
    pub fn finish(&mut self, started: std::time::Instant) {
        self.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.judge();
    }

    pub fn add_errors(&mut self, errors: &BTreeMap<String, u64>) {
        for (k, v) in errors {
            *self.errors.entry(k.clone()).or_default() += v;
        }
    }

    pub fn add_sold(&mut self, run: u32, sold: u64) {
        self.sold += sold;
        if run == 0 {
            self.sold_per_run_min = sold;
            self.sold_per_run_max = sold;
        } else {
            self.sold_per_run_min = self.sold_per_run_min.min(sold);
            self.sold_per_run_max = self.sold_per_run_max.max(sold);
        }
    }
}

/// True when a safe strategy broke an invariant: the lab's failure (non-zero exit).
pub fn safe_strategy_broke(reports: &[Report]) -> bool {
    reports.iter().any(|r| r.verdict == Verdict::Broken)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(safe: bool, violations: u32) -> Report {
        let mut r = Report {
            safe,
            violations,
            runs: 3,
            ..Report::default()
        };
        r.judge();
        r
    }

    #[test]
    fn only_a_safe_strategy_breaking_fails_the_lab() {
        assert_eq!(report(true, 0).verdict, Verdict::Held);
        assert_eq!(report(true, 1).verdict, Verdict::Broken);
        assert_eq!(report(false, 2).verdict, Verdict::FailedAsExpected);
        assert_eq!(report(false, 0).verdict, Verdict::NotCaught);
        assert!(!safe_strategy_broke(&[report(true, 0), report(false, 3)]));
        assert!(safe_strategy_broke(&[report(true, 1), report(false, 3)]));
    }

    #[test]
    fn bounds_and_names() {
        assert!(bounded("runs", 0, 1, 10).is_err());
        assert_eq!(bounded("runs", 10, 1, 10), Ok(10));
        for s in Scenario::ALL {
            assert_eq!(Scenario::parse(s.as_str()), Some(*s));
        }
    }
}

/// One finished run, for a progress display (`saldo race` on long runs).
#[derive(Debug, Clone, Copy)]
pub struct RunDone<'a> {
    pub strategy: &'a str,
    /// 1-based.
    pub run: u32,
    pub runs: u32,
    /// Since this strategy's first run started.
    pub elapsed: std::time::Duration,
}
