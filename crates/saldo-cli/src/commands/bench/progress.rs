//! `saldo bench`'s progress on stderr while it runs: a bar on a terminal and, every
//! `--progress` interval, the current rate and latency (in the bar's message on a terminal,
//! as plain lines otherwise, as pgbench `-P` does); one line per finished run.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use saldo_lab::bench::load::{Live, Window};
use saldo_lab::bench::report::{self, RunResult};
use saldo_lab::bench::{BenchConfig, Contender, Progress};

/// The progress display on stderr: a bar (on a terminal) and, every `interval`, the current
/// rate and latency; one line per finished run.
pub struct Display {
    /// `None` when stderr is not a terminal: plain lines only.
    bar: Option<ProgressBar>,
    per_run_ms: u64,
    interval: Option<Duration>,
    last: Mutex<Sample>,
}

/// Where the previous periodic line left off.
#[derive(Default)]
struct Sample {
    index: Option<u64>,
    answered: u64,
    errors: u64,
    elapsed: Duration,
}

impl Display {
    pub fn new(config: &BenchConfig, interval: Option<Duration>) -> Display {
        let per_run_ms = config.per_run().as_millis() as u64;
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(config.runs_total() * per_run_ms);
            bar.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        });
        Display {
            bar,
            per_run_ms,
            interval,
            last: Mutex::new(Sample::default()),
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// One periodic line: the rate and latencies since the previous one.
pub fn progress_line(
    round: u32,
    name: &str,
    elapsed: Duration,
    ops_per_s: f64,
    window: Window,
    errors: (u64, u64),
) -> String {
    let ms = |us: u64| us as f64 / 1000.0;
    let (errors, connection) = errors;
    let connection = if connection > 0 {
        format!(" ({connection} connection)")
    } else {
        String::new()
    };
    if window.answered == 0 {
        return format!(
            "progress: round {round} {name} {:.0}s: {ops_per_s:.0} ops/s, no answers, errors {errors}{connection}",
            elapsed.as_secs_f64()
        );
    }
    format!(
        "progress: round {round} {name} {:.0}s: {ops_per_s:.0} ops/s, p50 {:.1} ms, p99 {:.1} ms, errors {errors}{connection}",
        elapsed.as_secs_f64(),
        ms(window.p50_us),
        ms(window.p99_us),
    )
}

impl Progress for Display {
    fn tick(&self, index: u64, round: u32, name: Contender, live: &Live<'_>) {
        if let Some(bar) = &self.bar {
            let base = index * self.per_run_ms;
            bar.set_position(base + (live.elapsed.as_millis() as u64).min(self.per_run_ms));
        }
        let Some(interval) = self.interval else {
            if let Some(bar) = &self.bar {
                bar.set_message(format!(
                    "round {round} {}: {} answered",
                    name.as_str(),
                    live.answered()
                ));
            }
            return;
        };
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        if last.index != Some(index) {
            // A new run: its first line comes one interval after its start.
            *last = Sample {
                index: Some(index),
                ..Sample::default()
            };
            let _ = live.take_window();
        }
        let span = live.elapsed.saturating_sub(last.elapsed);
        if span < interval {
            return;
        }
        let answered = live.answered();
        let errors = live.errors();
        let rate = answered.saturating_sub(last.answered) as f64 / span.as_secs_f64();
        let line = progress_line(
            round,
            name.as_str(),
            live.elapsed,
            rate,
            live.take_window(),
            (errors.0.saturating_sub(last.errors), errors.1),
        );
        *last = Sample {
            index: Some(index),
            answered,
            errors: errors.0,
            elapsed: live.elapsed,
        };
        match &self.bar {
            Some(bar) => bar.set_message(line),
            None => eprintln!("{line}"),
        }
    }

    fn run_done(&self, result: &RunResult) {
        self.note(&report::run_line(result));
    }

    fn note(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }
}
