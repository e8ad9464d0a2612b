//! What a benchmark prints: one row per run, the per-strategy medians across rounds (machine
//! noise hits every strategy alike because runs are interleaved), the invariant checks, and the
//! same as JSON.

use serde::Serialize;

pub use crate::checks::Check;

/// One run of one strategy in one round.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub strategy: String,
    pub round: u32,
    pub ops_per_s: f64,
    pub latency_us_p50: u64,
    pub latency_us_p90: u64,
    pub latency_us_p99: u64,
    pub latency_us_p999: u64,
    pub latency_us_max: u64,
    pub ok: u64,
    pub refused: u64,
    pub overloaded: u64,
    pub errors: u64,
    /// Of `errors`: requests that got no answer (HTTP mode: refused, reset, timed out).
    pub connection_errors: u64,
    pub first_error: Option<String>,
    /// Peak resident memory of the bench process during this run (VmHWM, reset per run).
    pub peak_rss_kib: Option<u64>,
    /// Batched only: orders per batch transaction.
    pub mean_batch: Option<f64>,
    pub largest_batch: Option<u64>,
    pub invariants: Vec<Check>,
}

/// Medians of one strategy across rounds.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub strategy: String,
    pub rounds: usize,
    pub ops_per_s: f64,
    pub latency_us_p50: u64,
    pub latency_us_p90: u64,
    pub latency_us_p99: u64,
    pub latency_us_p999: u64,
    pub refused: u64,
    pub overloaded: u64,
    pub errors: u64,
    pub peak_rss_kib: Option<u64>,
    pub mean_batch: Option<f64>,
    pub invariants_ok: bool,
}

fn median_f(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn median_u(v: Vec<u64>) -> u64 {
    median_f(v.into_iter().map(|x| x as f64).collect()).round() as u64
}

/// Per-strategy medians, in the order the strategies were given.
pub fn summarize(strategies: &[String], runs: &[RunResult]) -> Vec<Summary> {
    strategies
        .iter()
        .map(|name| {
            let mine: Vec<&RunResult> = runs.iter().filter(|r| &r.strategy == name).collect();
            let batches: Vec<f64> = mine.iter().filter_map(|r| r.mean_batch).collect();
            Summary {
                strategy: name.clone(),
                rounds: mine.len(),
                ops_per_s: median_f(mine.iter().map(|r| r.ops_per_s).collect()),
                latency_us_p50: median_u(mine.iter().map(|r| r.latency_us_p50).collect()),
                latency_us_p90: median_u(mine.iter().map(|r| r.latency_us_p90).collect()),
                latency_us_p99: median_u(mine.iter().map(|r| r.latency_us_p99).collect()),
                latency_us_p999: median_u(mine.iter().map(|r| r.latency_us_p999).collect()),
                refused: mine.iter().map(|r| r.refused).sum(),
                overloaded: mine.iter().map(|r| r.overloaded).sum(),
                errors: mine.iter().map(|r| r.errors).sum(),
                peak_rss_kib: mine.iter().filter_map(|r| r.peak_rss_kib).max(),
                mean_batch: (!batches.is_empty()).then(|| median_f(batches)),
                invariants_ok: mine.iter().all(|r| r.invariants.iter().all(|c| c.ok)),
            }
        })
        .collect()
}

fn ms(us: u64) -> String {
    format!("{:.2}", us as f64 / 1000.0)
}

/// One line per run, as it finishes.
pub fn run_line(r: &RunResult) -> String {
    let checks: Vec<String> = r
        .invariants
        .iter()
        .map(|c| format!("{} {}", if c.ok { "ok" } else { "BROKEN" }, c.name))
        .collect();
    format!(
        "round {} {:<8} {:>10.0} ops/s  p99 {:>7} ms  refused {} overloaded {} errors {}{}  [{}]{}",
        r.round,
        r.strategy,
        r.ops_per_s,
        ms(r.latency_us_p99),
        r.refused,
        r.overloaded,
        r.errors,
        if r.connection_errors > 0 {
            format!(" ({} connection)", r.connection_errors)
        } else {
            String::new()
        },
        checks.join(", "),
        r.first_error
            .as_ref()
            .map(|e| format!("\n    first error: {e}"))
            .unwrap_or_default()
    )
}

/// The summary table, medians across rounds, plus the throughput ratio to the first strategy.
pub fn table(summaries: &[Summary]) -> String {
    let mut out = String::new();
    // Wide enough for the longest name (`batched@citus×2` in a side-by-side run).
    let w = summaries
        .iter()
        .map(|s| s.strategy.chars().count())
        .chain([9])
        .max()
        .unwrap_or(9);
    out.push_str(&format!(
        "{:<w$} {:>6} {:>12} {:>8} {:>8} {:>8} {:>9} {:>8} {:>10} {:>7} {:>9} {:>9} {:>10}\n",
        "strategy",
        "rounds",
        "ops/s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "p99.9 ms",
        "refused",
        "overloaded",
        "errors",
        "peak RSS",
        "avg batch",
        "invariants"
    ));
    for s in summaries {
        out.push_str(&format!(
            "{:<w$} {:>6} {:>12.0} {:>8} {:>8} {:>8} {:>9} {:>8} {:>10} {:>7} {:>9} {:>9} {:>10}\n",
            s.strategy,
            s.rounds,
            s.ops_per_s,
            ms(s.latency_us_p50),
            ms(s.latency_us_p90),
            ms(s.latency_us_p99),
            ms(s.latency_us_p999),
            s.refused,
            s.overloaded,
            s.errors,
            s.peak_rss_kib
                .map(|k| format!("{} MiB", k / 1024))
                .unwrap_or_else(|| "-".into()),
            s.mean_batch
                .map(|b| format!("{b:.1}"))
                .unwrap_or_else(|| "-".into()),
            if s.invariants_ok { "ok" } else { "BROKEN" }
        ));
    }
    if let Some(base) = summaries.first().filter(|b| b.ops_per_s > 0.0) {
        for s in &summaries[1..] {
            out.push_str(&format!(
                "{} / {}: {:.1}x throughput\n",
                s.strategy,
                base.strategy,
                s.ops_per_s / base.ops_per_s
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median_f(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median_f(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median_f(vec![]), 0.0);
        assert_eq!(median_u(vec![10, 30, 20]), 20);
    }
}
