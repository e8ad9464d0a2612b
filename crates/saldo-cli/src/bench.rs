//! `saldo bench`: flags and printing. The engine (scenarios, load, checks, reports, plots) is
//! `saldo_lab::bench`; the run happens on a scratch database `saldo_bench_<pid>` created on the
//! server of `--database-url` or the embedded cluster and dropped at the end, or against a
//! running `saldo serve` (`--target`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use saldo::stock::batched::{self as batched_engine, BatchedConfig};
use saldo_lab::bench::http::HttpTarget;
use saldo_lab::bench::load::LoadPlan;
use saldo_lab::bench::report::RunResult;
use saldo_lab::bench::{self, plot, report, Backend, BenchConfig, Contender, Progress, Scenario};
use saldo_lab::scratch::Scratch;

/// Largest `--concurrency` (buyers or in-flight orders).
const MAX_CONCURRENCY: u32 = 4_096;
/// Largest `--pool-size`.
const MAX_POOL_SIZE: usize = 512;
/// Largest `--products`.
const MAX_PRODUCTS: u32 = 1_000_000;
/// Largest `--skew`.
const MAX_SKEW: f64 = 5.0;

/// Flags of `saldo bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(long, value_enum, default_value_t = Scenario::Hot)]
    scenario: Scenario,
    /// Comma-separated strategies to compare (the first is the baseline of the ratios).
    /// Default: atomic,batched; for the transfer scenarios: ordered (or ordered,naive).
    #[arg(long, value_delimiter = ',')]
    strategy: Vec<String>,
    /// Closed loop: this many buyers. Open loop (`--rate`): most orders in flight.
    #[arg(long, default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=MAX_CONCURRENCY as i64))]
    concurrency: u32,
    /// Open loop: orders due per second (latency counted from the due time).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    rate: Option<u32>,
    /// Measured seconds per run.
    #[arg(long = "duration", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3_600))]
    duration_s: u64,
    /// Unmeasured seconds at the start of each run.
    #[arg(long = "warmup", default_value_t = 2,
          value_parser = clap::value_parser!(u64).range(0..=600))]
    warmup_s: u64,
    /// Rounds; each runs every strategy once. Medians are reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    rounds: u32,
    /// Products for `uniform`, `zipf` and `multi-item`; accounts for `transfers-uniform`.
    #[arg(long, default_value_t = 10_000,
          value_parser = clap::value_parser!(u32).range(1..=MAX_PRODUCTS as i64))]
    products: u32,
    /// Zipf exponent for `zipf` (0 = uniform; 0..=5).
    #[arg(long, default_value_t = 1.0)]
    skew: f64,
    /// Distinct products per order for `multi-item`.
    #[arg(long, default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(1..=saldo::domain::MAX_ITEMS_PER_ORDER as i64))]
    items: u32,
    /// Each operation is a sale: reserve, then confirm.
    #[arg(long)]
    with_confirm: bool,
    /// Connections of the pool every strategy runs on (the same for all: a fair comparison).
    #[arg(long, default_value_t = saldo::db::DEFAULT_POOL_SIZE as u64,
          value_parser = clap::value_parser!(u64).range(1..=MAX_POOL_SIZE as u64))]
    pool_size: u64,
    /// Batched: partitions (workers).
    #[arg(long, default_value_t = batched_engine::DEFAULT_PARTITIONS as u64,
          value_parser = clap::value_parser!(u64).range(1..=batched_engine::MAX_PARTITIONS as u64))]
    partitions: u64,
    /// Batched: batch transactions one partition may run at once (on disjoint products).
    #[arg(long, default_value_t = batched_engine::DEFAULT_IN_FLIGHT as u64,
          value_parser = clap::value_parser!(u64).range(1..=batched_engine::MAX_IN_FLIGHT as u64))]
    in_flight: u64,
    /// Batched: most orders per batch transaction.
    #[arg(long, default_value_t = batched_engine::DEFAULT_MAX_BATCH as u64,
          value_parser = clap::value_parser!(u64).range(1..=batched_engine::MAX_BATCH_LIMIT as u64))]
    max_batch: u64,
    /// Batched: queue capacity per partition.
    #[arg(long, default_value_t = batched_engine::DEFAULT_QUEUE_CAPACITY as u64,
          value_parser = clap::value_parser!(u64).range(1..=batched_engine::MAX_QUEUE_CAPACITY as u64))]
    queue_capacity: u64,
    /// Batched: wait this long for more orders before a batch (0 = none).
    #[arg(long, default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=batched_engine::MAX_LINGER.as_millis() as u64))]
    linger_ms: u64,
    /// Print the results as JSON on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
    /// Write throughput and p99 bars per strategy to this SVG file.
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
    /// HTTP mode: drive a running `saldo serve` at this URL (its strategy is the server's).
    #[arg(long)]
    target: Option<String>,
    /// HTTP mode: the server's admin token (to stock products and read the audit).
    #[arg(long, env = "SALDO_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// HTTP mode: the server's API token (required unless it runs with
    /// --insecure-no-api-token); without it the admin token is sent, which every route accepts.
    #[arg(long, env = "SALDO_API_TOKEN", hide_env_values = true)]
    api_token: Option<String>,
}

/// The validated invocation: the engine's configuration and what to print.
struct Config {
    bench: BenchConfig,
    json: bool,
    plot: Option<std::path::PathBuf>,
}

impl Config {
    fn from_args(args: Args) -> Result<Config> {
        let scenario = args.scenario;
        let mut strategies = Vec::new();
        let defaults = if scenario.is_transfers() {
            vec!["ordered".to_owned(), "batched".to_owned()]
        } else {
            vec!["atomic".to_owned(), "batched".to_owned()]
        };
        let given = if args.strategy.is_empty() {
            &defaults
        } else {
            &args.strategy
        };
        for s in given {
            let name = Contender::parse(scenario, s.trim())?;
            if !strategies.contains(&name) {
                strategies.push(name);
            }
        }
        if strategies.is_empty() {
            bail!("--strategy needs at least one strategy");
        }
        let http = match &args.target {
            Some(url) => {
                if scenario.is_transfers() {
                    bail!("HTTP mode runs the stock scenarios only");
                }
                if args.admin_token.is_none() {
                    bail!("HTTP mode needs --admin-token (or SALDO_ADMIN_TOKEN) to stock products");
                }
                strategies = vec![Contender::Http];
                Some(Arc::new(HttpTarget::new(
                    url,
                    args.admin_token.clone(),
                    args.api_token.clone().or_else(|| args.admin_token.clone()),
                    args.concurrency as usize,
                )?))
            }
            None => None,
        };
        if !(0.0..=MAX_SKEW).contains(&args.skew) {
            bail!("--skew must be within 0..={MAX_SKEW}");
        }
        Ok(Config {
            bench: BenchConfig {
                scenario,
                strategies,
                plan: LoadPlan {
                    concurrency: args.concurrency,
                    rate: args.rate,
                    warmup: Duration::from_secs(args.warmup_s),
                    duration: Duration::from_secs(args.duration_s),
                    with_confirm: args.with_confirm,
                },
                rounds: args.rounds,
                products: scenario.products(args.products),
                skew: args.skew,
                items: args.items,
                pool_size: args.pool_size as usize,
                batched: BatchedConfig {
                    partitions: args.partitions as usize,
                    queue_capacity: args.queue_capacity as usize,
                    max_batch: args.max_batch as usize,
                    linger: Duration::from_millis(args.linger_ms),
                    in_flight: args.in_flight as usize,
                },
                http,
            },
            json: args.json,
            plot: args.plot,
        })
    }
}

impl Args {
    /// True when the bench drives a running `saldo serve` (`--target`) instead of the library.
    pub fn is_http(&self) -> bool {
        self.target.is_some()
    }
}

/// The progress bar on stderr, and one line per finished run above it.
struct Bar {
    bar: ProgressBar,
    per_run_ms: u64,
}

impl Bar {
    fn new(config: &BenchConfig) -> Bar {
        let per_run_ms = config.per_run().as_millis() as u64;
        let bar = ProgressBar::new(config.runs_total() * per_run_ms);
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Bar { bar, per_run_ms }
    }
}

impl Progress for Bar {
    fn tick(&self, index: u64, round: u32, name: Contender, answered: u64, elapsed: Duration) {
        let base = index * self.per_run_ms;
        self.bar
            .set_position(base + (elapsed.as_millis() as u64).min(self.per_run_ms));
        self.bar.set_message(format!(
            "round {round} {}: {answered} answered",
            name.as_str()
        ));
    }

    fn run_done(&self, result: &RunResult) {
        self.bar
            .suspend(|| eprintln!("{}", report::run_line(result)));
    }
}

/// Runs the benchmark; `Ok(false)` when an invariant broke.
pub async fn run(args: Args, server_url: &str) -> Result<bool> {
    let config = Config::from_args(args)?;
    if let Some(target) = config.bench.http.clone() {
        return bench_and_print(&config, Backend::Http(target)).await;
    }
    let scratch = Scratch::for_bench(server_url, config.bench.pool_size)
        .await
        .context("creating the scratch database")?;
    let result = bench_and_print(&config, Backend::Scratch(&scratch)).await;
    // Dropped whatever happened, with FORCE so a straggling connection cannot keep it alive.
    let name = scratch.name().to_owned();
    if let Err(e) = scratch.drop_database().await {
        eprintln!("warning: could not drop scratch database {name}: {e}");
    }
    result
}

async fn bench_and_print(config: &Config, backend: Backend<'_>) -> Result<bool> {
    let bench = &config.bench;
    let bar = Bar::new(bench);
    eprintln!("{}", bench.title());
    let outcome = bench::run(bench, backend, &bar).await?;
    bar.bar.finish_and_clear();
    let table = report::table(&outcome.summaries);
    if config.json {
        eprint!("{table}");
        let doc = serde_json::json!({
            "title": bench.title(),
            "scenario": bench.scenario,
            "concurrency": bench.plan.concurrency,
            "rate": bench.plan.rate,
            "duration_s": bench.plan.duration.as_secs(),
            "warmup_s": bench.plan.warmup.as_secs(),
            "rounds": bench.rounds,
            "pool_size": bench.pool_size,
            "summaries": outcome.summaries,
            "runs": outcome.results,
            "invariants_ok": outcome.all_ok,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("{}", bench.title());
        print!("{table}");
        let names: Vec<&str> = outcome
            .results
            .first()
            .map(|r| r.invariants.iter().map(|c| c.name).collect())
            .unwrap_or_default();
        println!(
            "invariants ({}) after every run: {}",
            names.join(", "),
            if outcome.all_ok { "ok" } else { "BROKEN" }
        );
    }
    if let Some(path) = &config.plot {
        std::fs::write(path, plot::svg(&bench.title(), &outcome.summaries))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("plot written to {}", path.display());
    }
    Ok(outcome.all_ok)
}
