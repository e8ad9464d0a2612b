//! What `saldo race` prints for people: one table per race (a row per strategy, its columns
//! following the scenario: stock, late retries, extensions, or the ledger's) and one plain
//! sentence per strategy saying what held, or what broke and why that was expected.

use saldo_lab::race::extend::HOLD;
use saldo_lab::race::{Knob, Racers, Report, Scenario, Verdict};

/// How a scenario's table reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// Buyers for stocked units (the stock and shop scenarios).
    Stock,
    LateRetry,
    ExtendVsSweeper,
    /// Transfers, holds or linked groups: money instead of units.
    Ledger,
}

impl Layout {
    fn of(scenario: Option<Scenario>) -> Layout {
        match scenario {
            Some(Scenario::LateRetry) => Layout::LateRetry,
            Some(Scenario::ExtendVsSweeper) => Layout::ExtendVsSweeper,
            Some(s) if matches!(s.racers(), Racers::Transfers | Racers::Holds) => Layout::Ledger,
            _ => Layout::Stock,
        }
    }
}

/// The readable table: a title, a header, one row per strategy.
pub fn table(reports: &[Report]) -> String {
    let Some(first) = reports.first() else {
        return String::new();
    };
    let scenario = Scenario::parse(&first.scenario);
    let layout = Layout::of(scenario);
    let mut out = title(first, scenario, layout);
    out.push('\n');
    out.push_str(&header(layout));
    for r in reports {
        out.push_str(&row(layout, r));
    }
    out
}

fn title(first: &Report, scenario: Option<Scenario>, layout: Layout) -> String {
    let (name, n, stock, runs) = (
        &first.scenario,
        first.buyers_per_run,
        first.stock_per_run,
        first.runs,
    );
    match layout {
        Layout::ExtendVsSweeper => format!(
            "{name} — {n} orders hold one unit each for {} ms and are extended while the \
             sweeper runs; {runs} run(s)",
            HOLD.as_millis()
        ),
        Layout::LateRetry => format!(
            "{name} — {n} buyers reserve {stock} unit(s), cancel or let expire, then retry late; \
             {runs} run(s)"
        ),
        Layout::Ledger => {
            let what = match scenario {
                Some(Scenario::CrossedGroups) => "linked groups",
                Some(Scenario::CrossedTransfers) => "transfers",
                Some(Scenario::ReversalRace) => "reversals of 1",
                _ => "holds",
            };
            format!("{name} — {n} {what} per run, {runs} run(s)")
        }
        Layout::Stock => {
            format!("{name} — {n} buyers for {stock} unit(s) in stock per run, {runs} run(s)")
        }
    }
}

fn header(layout: Layout) -> String {
    let (who, sold, refused, oversold) = match layout {
        Layout::Ledger => {
            return ledger_line(
                [
                    "strategy",
                    "runs",
                    "done/run",
                    "refused",
                    "errors",
                    "retries",
                    "drift",
                    "violations",
                    "verdict",
                    "time",
                ]
                .map(String::from),
            )
        }
        Layout::ExtendVsSweeper => ("extender", "ext/run", "expired", "wrong"),
        Layout::LateRetry => ("strategy", "retaken", "refused", "oversold"),
        Layout::Stock => ("strategy", "sold/run", "refused", "oversold"),
    };
    stock_line(
        [
            who,
            "runs",
            sold,
            refused,
            "conflicts",
            "errors",
            "final a/r",
            oversold,
            "violations",
            "verdict",
            "time",
        ]
        .map(String::from),
    )
}

fn row(layout: Layout, r: &Report) -> String {
    let time = format!("{:.1}s", r.elapsed_ms as f64 / 1000.0);
    let violations = format!("{}/{}", r.violations, r.runs);
    if layout == Layout::Ledger {
        return ledger_line([
            r.strategy.clone(),
            r.runs.to_string(),
            sold_per_run(r),
            r.refused.to_string(),
            errors(r),
            r.deadlock_retries.unwrap_or(0).to_string(),
            r.money_drift.unwrap_or(0).to_string(),
            violations,
            verdict(r).to_owned(),
            time,
        ]);
    }
    stock_line([
        r.strategy.clone(),
        r.runs.to_string(),
        sold_per_run(r),
        r.refused.to_string(),
        r.conflicts.to_string(),
        errors(r),
        format!("{}/{}", r.final_available, r.final_reserved),
        r.wrong_answers.unwrap_or(r.oversold).to_string(),
        violations,
        verdict(r).to_owned(),
        time,
    ])
}

fn stock_line(c: [String; 11]) -> String {
    format!(
        "{:<16} {:>5} {:>9} {:>8} {:>9} {:>12} {:>9} {:>8} {:>11}  {:<18} {:>8}\n",
        c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10]
    )
}

fn ledger_line(c: [String; 10]) -> String {
    format!(
        "{:<18} {:>5} {:>9} {:>8} {:>16} {:>10} {:>8} {:>11}  {:<18} {:>8}\n",
        c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9]
    )
}

fn sold_per_run(r: &Report) -> String {
    if r.sold_per_run_min == r.sold_per_run_max {
        r.sold_per_run_min.to_string()
    } else {
        format!("{}..{}", r.sold_per_run_min, r.sold_per_run_max)
    }
}

fn errors(r: &Report) -> String {
    if r.errors.is_empty() {
        return "-".into();
    }
    r.errors
        .iter()
        .map(|(k, v)| format!("{k}:{v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn verdict(r: &Report) -> &'static str {
    match r.verdict {
        Verdict::Held => "held",
        Verdict::Broken => "BROKEN",
        Verdict::FailedAsExpected => "failed (expected)",
        Verdict::NotCaught => "not caught",
    }
}

/// One plain sentence per strategy: what held, or what broke and why that was expected.
pub fn conclusion(r: &Report) -> String {
    let what = what_broke(r).join("; ");
    match r.verdict {
        Verdict::Held => format!(
            "{}: every invariant held in all {} run(s).",
            r.strategy, r.runs
        ),
        Verdict::Broken => format!("BROKEN: {} (a safe strategy): {what}.", r.strategy),
        Verdict::FailedAsExpected => format!(
            "{} failed as expected in {} of {} runs: {what}.",
            r.strategy, r.violations, r.runs
        ),
        Verdict::NotCaught => {
            let takes_think = Scenario::parse(&r.scenario).is_none_or(|s| s.takes(Knob::ThinkMs));
            let widen = if takes_think {
                "widen the window with --think-ms or add --runs"
            } else {
                "add --runs"
            };
            format!("{}: no failure caught this time; {widen}.", r.strategy)
        }
    }
}

/// Each invariant the strategy broke, in the scenario's words.
fn what_broke(r: &Report) -> Vec<String> {
    let mut broke = Vec::new();
    if r.oversold > 0 {
        broke.push(oversold(r));
    }
    if let Some(wrong) = r.wrong_answers.filter(|w| *w > 0) {
        broke.push(format!(
            "{wrong} extensions answered against the hold's fate (granted on a hold the sweeper \
             expired, or refused on one still active)"
        ));
    }
    if let Some(missed) = r.missed_events.filter(|m| *m > 0) {
        broke.push(format!(
            "the reader never saw {missed} committed events (it had read past their ids before \
             they committed)"
        ));
    }
    if let Some(twice) = r.duplicate_events.filter(|d| *d > 0) {
        broke.push(format!("the reader saw {twice} events twice"));
    }
    if let Some(inverted) = r.out_of_order_events.filter(|o| *o > 0) {
        broke.push(format!(
            "{inverted} events came before an earlier position of their stream"
        ));
    }
    if r.check_violations > 0 {
        broke.push(format!(
            "{} CHECK violations (23514) reached buyers — the constraint was the last line of \
             defence",
            r.check_violations
        ));
    }
    if r.audit_divergences > 0 {
        broke.push(format!(
            "the audit found {} divergences",
            r.audit_divergences
        ));
    }
    if r.partial_orders > 0 {
        broke.push(format!("{} orders were written in part", r.partial_orders));
    }
    if let Some(drift) = r.money_drift.filter(|d| *d != 0) {
        broke.push(format!("money drifted by {drift}"));
    }
    let failed: u64 = r.errors.values().sum();
    if failed > 0 && r.check_violations == 0 {
        broke.push(format!("{failed} operations failed ({})", errors(r)));
    }
    broke
}

/// What `oversold` counts in the report's scenario.
fn oversold(r: &Report) -> String {
    let (n, runs, of) = (r.oversold, r.runs_oversold, r.runs);
    match Scenario::parse(&r.scenario) {
        Some(Scenario::LateRetry) => format!(
            "late retries of cancelled or expired orders took {n} units again in {runs} of {of} \
             runs"
        ),
        Some(Scenario::HoldSettle) => format!(
            "{n} holds had more than one winner (post, void and expiry all \"won\") in {runs} of \
             {of} runs"
        ),
        Some(Scenario::HoldDeadline) => format!(
            "{n} holds were posted after their deadline (the status checked, never the time) in \
             {runs} of {of} runs"
        ),
        Some(Scenario::HoldLastFunds) => format!(
            "{n} holds were placed beyond the funds (below min_balance) in {runs} of {of} runs"
        ),
        Some(Scenario::ReversalRace) => format!(
            "{n} units were reversed beyond what the transfer posted in {runs} of {of} runs"
        ),
        _ => format!("oversold {n} units in {runs} of {of} runs"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report with every column filled: `safe` ones held, the others broke (`violations`
    /// runs) or were not caught.
    fn report(scenario: Scenario, strategy: &str, safe: bool, violations: u32) -> Report {
        let broke = !safe;
        let mut r = Report {
            scenario: scenario.as_str().into(),
            strategy: strategy.into(),
            safe,
            runs: 3,
            buyers_per_run: 50,
            stock_per_run: 10,
            sold: 30,
            sold_per_run_min: 9,
            sold_per_run_max: if broke { 12 } else { 9 },
            refused: 120,
            conflicts: 4,
            final_available: 1,
            final_reserved: 9,
            oversold: if broke { 6 } else { 0 },
            runs_oversold: if broke { 2 } else { 0 },
            check_violations: if broke { 2 } else { 0 },
            audit_divergences: if broke { 5 } else { 0 },
            partial_orders: u64::from(broke),
            violations,
            elapsed_ms: 1234,
            ..Report::default()
        };
        if broke {
            r.errors = [("40P01".to_owned(), 3), ("23514".to_owned(), 2)].into();
        }
        let ledger = [
            Scenario::CrossedTransfers,
            Scenario::HoldSettle,
            Scenario::HoldDeadline,
            Scenario::HoldLastFunds,
            Scenario::CrossedGroups,
            Scenario::ReversalRace,
        ];
        if ledger.contains(&scenario) {
            r.money_drift = Some(if broke { -20 } else { 0 });
            r.deadlock_retries = Some(7);
        }
        if scenario == Scenario::ExtendVsSweeper {
            r.wrong_answers = Some(if broke { 11 } else { 0 });
        }
        r.judge();
        r
    }

    /// Every scenario's table and conclusions, for one safe strategy that held, one naive
    /// strategy that failed and one that was not caught.
    fn every_table() -> String {
        let mut out = String::new();
        for &scenario in Scenario::ALL {
            let reports = [
                report(scenario, "atomic", true, 0),
                report(scenario, "naive-x", false, 2),
                report(scenario, "naive-y", false, 0),
            ];
            out.push_str(&format!("#### {}\n{}", scenario.as_str(), table(&reports)));
            for r in &reports {
                out.push_str(&conclusion(r));
                out.push('\n');
            }
        }
        out
    }

    /// `saldo race` prints the same table and sentences for the same reports: the layout is
    /// pinned in `testdata/race_tables.txt` (regenerate it only on purpose).
    #[test]
    fn tables_and_conclusions_keep_their_layout() {
        let expected = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/race_tables.txt"
        ));
        let actual = every_table();
        if actual != expected {
            let path = std::env::temp_dir().join("saldo-race_tables.txt");
            let _ = std::fs::write(&path, &actual);
            panic!(
                "the race tables changed (now written to {}):\n{actual}",
                path.display()
            );
        }
    }
}
