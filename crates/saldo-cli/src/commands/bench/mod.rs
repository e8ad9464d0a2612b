//! `saldo bench`: flags and printing. The engine (scenarios, load, checks, reports, plots) is
//! `saldo_lab::bench`; the run happens on a scratch database `saldo_bench_<pid>` created on the
//! server of `--database-url` or the embedded cluster and dropped at the end, or against a
//! running `saldo serve` (`--target`).
//!
//! While it runs it shows the current rate and latency every `--progress` interval (1 s)
//! ([`progress`]), so a log of a long run shows how it went. A run whose failed operations
//! pass `--max-error-pct` fails the bench; fewer errors (e.g. a server restart in HTTP mode)
//! are counted and reported. With `--citus-workers N` it measures the single node and a local
//! Citus cluster side by side.

mod progress;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use saldo::stock::batched::{self as batched_engine, BatchedConfig};
use saldo_lab::bench::http::HttpTarget;
use saldo_lab::bench::load::LoadPlan;
use saldo_lab::bench::report::RunResult;
use saldo_lab::bench::{
    self, plot, report, Backend, BenchConfig, Contender, EventsMode, Scenario, TagsMode,
};
use saldo_lab::scratch::{Scratch, Server};

use crate::commands::shared::Global;
use crate::database::{self, Database, Role};
use crate::duration;
use progress::Display;

/// Largest `--concurrency` (buyers or in-flight orders).
const MAX_CONCURRENCY: u32 = 4_096;
/// Largest `--pool-size`.
const MAX_POOL_SIZE: usize = 512;
/// Largest `--products`: the HTTP mode's reserved id range holds this many.
const MAX_PRODUCTS: u32 = saldo_lab::bench::http::MAX_BENCH_PRODUCTS as u32;
/// Largest `--skew`.
const MAX_SKEW: f64 = 5.0;
/// Largest `--progress` interval.
const MAX_PROGRESS_MS: u64 = 3_600_000;
/// Default `--max-error-pct`.
const DEFAULT_MAX_ERROR_PCT: f64 = 1.0;

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
    /// Measured time per run (seconds, or 30s, 2m), 1 s ..= 1 h.
    #[arg(long = "duration", default_value_t = 10, value_parser = duration::secs(1, 3_600))]
    duration_s: u64,
    /// Unmeasured time at the start of each run (seconds, or 5s, 1m), 0 ..= 10 min.
    #[arg(long = "warmup", default_value_t = 2, value_parser = duration::secs(0, 600))]
    warmup_s: u64,
    /// Rounds; each runs every strategy once. Medians are reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    rounds: u32,
    /// Products for `uniform`, `zipf`, `multi-item` and `bundle` (its components); accounts for
    /// `transfers-uniform`.
    #[arg(long, default_value_t = 10_000,
          value_parser = clap::value_parser!(u32).range(1..=MAX_PRODUCTS as i64))]
    products: u32,
    /// Zipf exponent for `zipf` (0 = uniform; 0..=5).
    #[arg(long, default_value_t = 1.0)]
    skew: f64,
    /// Distinct products per order for `multi-item`; components per bundle for `bundle`.
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
    /// Batched: wait this long for more orders before a batch (ms, or 2ms; 0 = none).
    #[arg(long, default_value_t = 0,
          value_parser = duration::millis(0, batched_engine::MAX_LINGER.as_millis() as u64))]
    linger_ms: u64,
    /// The event outbox: on (as the service runs), off, or both in turn within every round
    /// (the runs without are named `strategy@no-events`), to measure what events cost.
    #[arg(long, value_enum, default_value_t = EventsMode::On)]
    events: EventsMode,
    /// Operations without a reference and metadata (off), with them (on: a provider's
    /// reference and four metadata pairs), or both in turn within every round (the tagged runs
    /// are named `strategy@tagged`), to measure what tags cost.
    #[arg(long, value_enum, default_value_t = TagsMode::Off)]
    tags: TagsMode,
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
    /// HTTP mode: write into the service even when it already holds data (products outside the
    /// bench's id range, accounts). The bench stocks its own products (ids from
    /// 7,000,000,000,001) and reserves them, and afterwards releases its reservations and sets
    /// its products to count 0; the products and their history stay (the API deletes neither).
    #[arg(long, requires = "target")]
    target_allow_writes: bool,
    /// HTTP mode: a webhook receiver on 127.0.0.1, subscribed for the bench, follows the load;
    /// its delivery lag and whether it caught up are reported (the service must run with
    /// --webhook-allow-private-targets; the subscription is deleted afterwards).
    #[arg(long, requires = "target")]
    webhook_probe: bool,
    /// Show the current rate and latency this often (ms, or 1s, 10s; 0 = only the bar): in the
    /// bar on a terminal, one line on stderr per interval otherwise.
    #[arg(long, default_value = "1s", value_parser = duration::millis(0, MAX_PROGRESS_MS))]
    progress: u64,
    /// Fail the bench when more than this percentage of a run's operations fail (connection
    /// errors included); below it errors are counted and reported and the run goes on.
    #[arg(long, default_value_t = DEFAULT_MAX_ERROR_PCT)]
    max_error_pct: f64,
    /// HTTP mode: the server's API token (required unless it runs with
    /// --insecure-no-api-token); without it the admin token is sent, which every route accepts.
    #[arg(long, env = "SALDO_API_TOKEN", hide_env_values = true)]
    api_token: Option<String>,
}

/// The validated invocation: the engine's configuration and what to print.
pub struct Options {
    bench: BenchConfig,
    json: bool,
    plot: Option<std::path::PathBuf>,
    /// `None`: no periodic lines.
    progress: Option<Duration>,
    max_error_pct: f64,
}

impl Options {
    pub fn from_args(args: Args) -> Result<Options> {
        let scenario = args.scenario;
        let mut strategies = contenders(scenario, &args.strategy)?;
        let http = http_target(&args)?;
        if http.is_some() {
            strategies = vec![Contender::Http];
            if args.events != EventsMode::On {
                bail!("--events applies to library runs: with --target the server decides");
            }
            if args.tags != TagsMode::Off {
                bail!("--tags applies to library runs");
            }
        }
        if !(0.0..=MAX_SKEW).contains(&args.skew) {
            bail!("--skew must be within 0..={MAX_SKEW}");
        }
        if !(0.0..=100.0).contains(&args.max_error_pct) {
            bail!("--max-error-pct must be within 0..=100");
        }
        Ok(Options {
            bench: BenchConfig {
                scenario,
                strategies,
                plan: LoadPlan {
                    concurrency: args.concurrency,
                    rate: args.rate,
                    warmup: Duration::from_secs(args.warmup_s),
                    duration: Duration::from_secs(args.duration_s),
                    with_confirm: args.with_confirm,
                    tagged: false,
                },
                rounds: args.rounds,
                products: scenario.products(args.products),
                skew: args.skew,
                items: args.items,
                pool_size: args.pool_size as usize,
                batched: batched(&args),
                http,
                events: args.events,
                tags: args.tags,
                webhook_probe: args.webhook_probe,
            },
            json: args.json,
            plot: args.plot,
            progress: (args.progress > 0).then(|| Duration::from_millis(args.progress)),
            max_error_pct: args.max_error_pct,
        })
    }

    /// True when the bench drives a running `saldo serve` (`--target`) instead of the library.
    pub fn is_http(&self) -> bool {
        self.bench.http.is_some()
    }
}

/// `--strategy`, or the scenario's default pair: without repeats, in the order given.
fn contenders(scenario: Scenario, given: &[String]) -> Result<Vec<Contender>> {
    let defaults = if scenario.is_transfers() {
        ["ordered", "batched"]
    } else {
        ["atomic", "batched"]
    };
    let given: Vec<&str> = if given.is_empty() {
        defaults.to_vec()
    } else {
        given.iter().map(String::as_str).collect()
    };
    let mut strategies = Vec::new();
    for s in given {
        let name =
            Contender::parse(scenario, s.trim()).map_err(|e| anyhow::anyhow!("--strategy: {e}"))?;
        if !strategies.contains(&name) {
            strategies.push(name);
        }
    }
    if strategies.is_empty() {
        bail!("--strategy needs at least one strategy");
    }
    Ok(strategies)
}

/// `--target`'s service, checked: the stock scenarios only, with the admin token.
fn http_target(args: &Args) -> Result<Option<Arc<HttpTarget>>> {
    let Some(url) = &args.target else {
        return Ok(None);
    };
    if args.scenario.is_transfers() {
        bail!("HTTP mode runs the stock scenarios only");
    }
    if args.admin_token.is_none() {
        bail!("HTTP mode needs --admin-token (or SALDO_ADMIN_TOKEN) to stock products");
    }
    let api_token = args.api_token.clone().or_else(|| args.admin_token.clone());
    Ok(Some(Arc::new(HttpTarget::new(
        url,
        args.admin_token.clone(),
        api_token,
        args.concurrency as usize,
        args.target_allow_writes,
    )?)))
}

/// The batched engine's settings.
fn batched(args: &Args) -> BatchedConfig {
    BatchedConfig {
        partitions: args.partitions as usize,
        queue_capacity: args.queue_capacity as usize,
        max_batch: args.max_batch as usize,
        linger: Duration::from_millis(args.linger_ms),
        in_flight: args.in_flight as usize,
    }
}

/// Runs whose failed operations passed `max_pct` percent of their answers.
fn over_error_budget(results: &[RunResult], max_pct: f64) -> Vec<String> {
    results
        .iter()
        .filter_map(|r| {
            let total = r.ok + r.refused + r.overloaded + r.errors;
            let pct = if total == 0 {
                0.0
            } else {
                r.errors as f64 * 100.0 / total as f64
            };
            (pct > max_pct).then(|| {
                format!(
                    "round {} {}: {} of {total} operations failed ({pct:.1}% > {max_pct}%; {} \
                     connection errors)",
                    r.round, r.strategy, r.errors, r.connection_errors
                )
            })
        })
        .collect()
}

/// Validates, finds the servers, benches and prints; exit status 1 (an error) when an
/// invariant broke.
pub async fn run(args: Args, global: Global) -> Result<ExitCode> {
    let options = Options::from_args(args)?;
    // Kept until the bench is over: an embedded cluster lives as long as its `Database`.
    let (servers, _database) = servers(&options, global).await?;
    anyhow::ensure!(
        bench_on(options, &servers).await?,
        "bench: an invariant broke (see above)"
    );
    Ok(ExitCode::SUCCESS)
}

/// Where the scratch databases are made. HTTP mode talks only to a running service: none.
/// Otherwise the server of `--database-url` or of the embedded cluster (the database the URL
/// names is never migrated or written), and with `--citus-workers` a local Citus cluster
/// beside it.
async fn servers(options: &Options, global: Global) -> Result<(Vec<Server>, Option<Database>)> {
    anyhow::ensure!(
        !(options.is_http() && global.citus_workers.is_some()),
        "--citus-workers with --target: the HTTP bench measures the service it is pointed at \
         (start that one with `saldo serve --citus-workers N`)"
    );
    let database = if options.is_http() {
        None
    } else {
        Some(database::open_with(global.database_url, global.embedded, Role::Tool).await?)
    };
    let mut servers: Vec<Server> = database
        .as_ref()
        .map(|d| Server::from(d.url.as_str()))
        .into_iter()
        .collect();
    if let Some(workers) = global.citus_workers {
        servers.push(Server::Citus(database::start_citus(workers, None).await?));
    }
    Ok((servers, database))
}

/// Runs the benchmark; `Ok(false)` when an invariant broke. `servers`: one (the usual run) or
/// several side by side (the single node and the local Citus cluster), a scratch database on
/// each.
async fn bench_on(config: Options, servers: &[Server]) -> Result<bool> {
    if let Some(target) = config.bench.http.clone() {
        return bench_and_print(&config, Backend::Http(target)).await;
    }
    let mut scratches = Vec::with_capacity(servers.len());
    let mut created = Ok(());
    for server in servers {
        match Scratch::for_bench(server.clone(), config.bench.pool_size).await {
            Ok(scratch) => scratches.push((server.label(), scratch)),
            Err(e) => {
                created = Err(anyhow::Error::from(e).context(format!(
                    "creating the scratch database ({})",
                    server.label()
                )));
                break;
            }
        }
    }
    let result = match created {
        Ok(()) if scratches.len() == 1 => {
            bench_and_print(&config, Backend::Scratch(&scratches[0].1)).await
        }
        Ok(()) => {
            let sides = scratches.iter().map(|(l, s)| (l.clone(), s)).collect();
            bench_and_print(&config, Backend::Compare(sides)).await
        }
        Err(e) => Err(e),
    };
    // Dropped whatever happened, with FORCE so a straggling connection cannot keep it alive.
    for (_, scratch) in scratches {
        let name = scratch.name().to_owned();
        if let Err(e) = scratch.drop_database().await {
            eprintln!("warning: could not drop scratch database {name}: {e}");
        }
    }
    result
}

async fn bench_and_print(config: &Options, backend: Backend<'_>) -> Result<bool> {
    let bench = &config.bench;
    let display = Display::new(bench, config.progress);
    eprintln!("{}", bench.title());
    let outcome = bench::run(bench, backend, &display).await?;
    display.finish();
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
            "webhook": outcome.webhook,
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
        if let Some(webhook) = &outcome.webhook {
            println!("{}", webhook.describe());
        }
    }
    if let Some(path) = &config.plot {
        std::fs::write(path, plot::svg(&bench.title(), &outcome.summaries))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("plot written to {}", path.display());
    }
    let over = over_error_budget(&outcome.results, config.max_error_pct);
    if !over.is_empty() {
        bail!(
            "bench: too many failed operations (--max-error-pct {}):\n{}",
            config.max_error_pct,
            over.join("\n")
        );
    }
    Ok(outcome.all_ok)
}
