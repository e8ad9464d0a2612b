//! `saldo bench`: throughput and latency of stock strategies side by side, in one invocation.
//!
//! Runs are interleaved (round 1: every strategy, round 2: every strategy, …) so that noise on a
//! shared machine hits all strategies alike, and the table reports medians across rounds. Every
//! run starts from the same freshly stocked scratch database (`saldo_bench_<pid>`, created on
//! the server of `--database-url` or the embedded cluster, dropped at the end), so the user's
//! data is never touched, and every run ends with the invariant checks: a broken one makes the
//! command exit non-zero.

mod http;
mod load;
mod plot;
mod report;
mod scenario;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use saldo::db::{self, PoolOptions};
use saldo::ledger::{Ledger, TransferStrategy};
use saldo::retry::TxOptions;
use saldo::stock::batched::{self as batched_engine, Batched, BatchedConfig};
use saldo::stock::{build, Store, StrategyConfig, StrategyName};

use load::{LoadPlan, Tally, Target};
use report::{Check, RunResult};
use scenario::{Picker, Scenario, OPENING_BALANCE, STOCK_PER_PRODUCT};

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

/// A strategy under test: a stock strategy, or a transfer strategy for the ledger scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    Stock(StrategyName),
    Transfer(TransferStrategy),
    /// Whatever strategy the `--target` server runs.
    Http,
}

impl Contender {
    fn as_str(self) -> &'static str {
        match self {
            Contender::Stock(n) => n.as_str(),
            Contender::Transfer(t) => t.as_str(),
            Contender::Http => "http",
        }
    }

    fn parse(scenario: Scenario, s: &str) -> Result<Contender> {
        if scenario.is_transfers() {
            return TransferStrategy::parse(s)
                .map(Contender::Transfer)
                .with_context(|| {
                    let known: Vec<&str> =
                        TransferStrategy::ALL.iter().map(|n| n.as_str()).collect();
                    format!(
                        "unknown transfer strategy {s:?}; known: {}",
                        known.join(", ")
                    )
                });
        }
        StrategyName::parse(s)
            .map(Contender::Stock)
            .with_context(|| {
                let known: Vec<&str> = StrategyName::ALL.iter().map(|n| n.as_str()).collect();
                format!("unknown stock strategy {s:?}; known: {}", known.join(", "))
            })
    }
}

/// Validated configuration of one invocation.
struct Config {
    scenario: Scenario,
    strategies: Vec<Contender>,
    plan: LoadPlan,
    rounds: u32,
    products: u32,
    skew: f64,
    items: u32,
    pool_size: usize,
    batched: BatchedConfig,
    json: bool,
    plot: Option<std::path::PathBuf>,
    http: Option<Arc<http::HttpTarget>>,
}

impl Config {
    fn from_args(args: Args) -> Result<Config> {
        let mut strategies = Vec::new();
        let defaults = if args.scenario.is_transfers() {
            vec!["ordered".to_owned()]
        } else {
            vec!["atomic".to_owned(), "batched".to_owned()]
        };
        let given = if args.strategy.is_empty() {
            &defaults
        } else {
            &args.strategy
        };
        for s in given {
            let name = Contender::parse(args.scenario, s.trim())?;
            if !strategies.contains(&name) {
                strategies.push(name);
            }
        }
        if strategies.is_empty() {
            bail!("--strategy needs at least one strategy");
        }
        let http = match &args.target {
            Some(url) => {
                if args.scenario.is_transfers() {
                    bail!("HTTP mode runs the stock scenarios only");
                }
                if args.admin_token.is_none() {
                    bail!("HTTP mode needs --admin-token (or SALDO_ADMIN_TOKEN) to stock products");
                }
                strategies = vec![Contender::Http];
                Some(Arc::new(http::HttpTarget::new(
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
            scenario: args.scenario,
            strategies,
            plan: LoadPlan {
                concurrency: args.concurrency,
                rate: args.rate,
                warmup: Duration::from_secs(args.warmup_s),
                duration: Duration::from_secs(args.duration_s),
                with_confirm: args.with_confirm,
            },
            rounds: args.rounds,
            products: args.scenario.products(args.products),
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
            json: args.json,
            plot: args.plot,
            http,
        })
    }

    fn title(&self) -> String {
        let load = match self.plan.rate {
            Some(rate) => format!("open loop {rate}/s, ≤{} in flight", self.plan.concurrency),
            None => format!("{} buyers", self.plan.concurrency),
        };
        let products = match self.scenario {
            Scenario::Hot | Scenario::TransfersHot => String::new(),
            Scenario::TransfersUniform => format!(", {} accounts", self.products),
            _ => format!(", {} products", self.products),
        };
        let sale = if self.plan.with_confirm {
            ", reserve+confirm"
        } else {
            ""
        };
        format!(
            "saldo bench {}: {load}{products}{sale}",
            self.scenario.as_str()
        )
    }
}

impl Args {
    /// True when the bench drives a running `saldo serve` (`--target`) instead of the library.
    pub fn is_http(&self) -> bool {
        self.target.is_some()
    }
}

/// Runs the benchmark; `Ok(false)` when an invariant broke.
pub async fn run(args: Args, server_url: &str) -> Result<bool> {
    let config = Config::from_args(args)?;
    if let Some(target) = config.http.clone() {
        return bench(&config, Backend::Http(target)).await;
    }
    let scratch = scratch_name();
    let admin = db::connect(
        server_url,
        &PoolOptions {
            max_size: 1,
            ..PoolOptions::default()
        },
    )?;
    {
        let client = admin
            .get()
            .await
            .context("connecting to create the scratch database")?;
        client
            .batch_execute(&format!("CREATE DATABASE {scratch}"))
            .await
            .with_context(|| format!("creating {scratch}"))?;
    }
    let url = with_database(server_url, &scratch)?;
    let result = bench(&config, Backend::Scratch(url)).await;
    // Dropped whatever happened, with FORCE so a straggling connection cannot keep it alive.
    let dropped = match admin.get().await {
        Ok(client) => client
            .batch_execute(&format!("DROP DATABASE IF EXISTS {scratch} WITH (FORCE)"))
            .await
            .map_err(anyhow::Error::from),
        Err(e) => Err(e.into()),
    };
    if let Err(e) = dropped {
        eprintln!("warning: could not drop scratch database {scratch}: {e}");
    }
    admin.close();
    result
}

fn scratch_name() -> String {
    format!("saldo_bench_{}", std::process::id())
}

/// `url` with its database replaced by `name` (URL or key=value connection strings).
fn with_database(url: &str, name: &str) -> Result<String> {
    if let Some(scheme_end) = url.find("://") {
        let rest = &url[scheme_end + 3..];
        let query_at = rest.find('?').unwrap_or(rest.len());
        let (authority_path, query) = rest.split_at(query_at);
        let authority = authority_path.split('/').next().unwrap_or(authority_path);
        Ok(format!(
            "{}{authority}/{name}{query}",
            &url[..scheme_end + 3]
        ))
    } else if url.contains('=') {
        let kept: Vec<&str> = url
            .split_whitespace()
            .filter(|kv| !kv.starts_with("dbname="))
            .collect();
        Ok(format!("{} dbname={name}", kept.join(" ")))
    } else {
        bail!("cannot read the database URL {:?}", pg_local::redact(url))
    }
}

/// Where the runs go: the scratch database in-process, or a server over HTTP.
enum Backend {
    Scratch(String),
    Http(Arc<http::HttpTarget>),
}

async fn bench(config: &Config, backend: Backend) -> Result<bool> {
    let pool = match &backend {
        Backend::Scratch(url) => {
            let pool = db::connect(
                url,
                &PoolOptions {
                    max_size: config.pool_size,
                    ..PoolOptions::default()
                },
            )?;
            db::migrate(&pool)
                .await
                .context("migrating the scratch database")?;
            Some(pool)
        }
        Backend::Http(_) => None,
    };
    let picker = Arc::new(Picker::new(
        config.scenario,
        config.products,
        config.skew,
        config.items,
    ));
    let per_run = config.plan.warmup + config.plan.duration;
    let runs_total = config.rounds as u64 * config.strategies.len() as u64;
    let progress = ProgressBar::new(runs_total * per_run.as_millis() as u64);
    progress.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    eprintln!("{}", config.title());
    let mut results = Vec::new();
    for round in 1..=config.rounds {
        for (i, &name) in config.strategies.iter().enumerate() {
            let index = (round as u64 - 1) * config.strategies.len() as u64 + i as u64;
            let on_tick = |answered: u64, elapsed: Duration| {
                let base = index * per_run.as_millis() as u64;
                progress.set_position(
                    base + (elapsed.as_millis() as u64).min(per_run.as_millis() as u64),
                );
                progress.set_message(format!(
                    "round {round} {}: {answered} answered",
                    name.as_str()
                ));
            };
            let result = match (&backend, &pool) {
                (Backend::Http(target), _) => {
                    http_run(config, target, &picker, round, on_tick).await?
                }
                (Backend::Scratch(_), Some(pool)) => {
                    one_run(config, pool, &picker, name, round, on_tick).await?
                }
                (Backend::Scratch(_), None) => bail!("no pool for the scratch database"),
            };
            progress.suspend(|| eprintln!("{}", report::run_line(&result)));
            results.push(result);
        }
    }
    progress.finish_and_clear();
    if let Some(pool) = pool {
        pool.close();
    }

    let names: Vec<String> = config
        .strategies
        .iter()
        .map(|n| n.as_str().to_owned())
        .collect();
    let summaries = report::summarize(&names, &results);
    let table = report::table(&summaries);
    let all_ok = summaries.iter().all(|s| s.invariants_ok);
    if config.json {
        eprint!("{table}");
        let doc = serde_json::json!({
            "title": config.title(),
            "scenario": config.scenario,
            "concurrency": config.plan.concurrency,
            "rate": config.plan.rate,
            "duration_s": config.plan.duration.as_secs(),
            "warmup_s": config.plan.warmup.as_secs(),
            "rounds": config.rounds,
            "pool_size": config.pool_size,
            "summaries": summaries,
            "runs": results,
            "invariants_ok": all_ok,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("{}", config.title());
        print!("{table}");
        let names: Vec<&str> = results
            .first()
            .map(|r| r.invariants.iter().map(|c| c.name).collect())
            .unwrap_or_default();
        println!(
            "invariants ({}) after every run: {}",
            names.join(", "),
            if all_ok { "ok" } else { "BROKEN" }
        );
    }
    if let Some(path) = &config.plot {
        std::fs::write(path, plot::svg(&config.title(), &summaries))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("plot written to {}", path.display());
    }
    Ok(all_ok)
}

/// One strategy, one round: fresh stock, the load, the checks.
async fn one_run(
    config: &Config,
    pool: &deadpool_postgres::Pool,
    picker: &Arc<Picker>,
    name: Contender,
    round: u32,
    on_tick: impl Fn(u64, Duration),
) -> Result<RunResult> {
    let store = Store::new(pool.clone(), TxOptions::default());
    let mut batched = None;
    let target = match name {
        Contender::Http => bail!("HTTP runs go through http_run"),
        Contender::Transfer(strategy) => {
            reset_ledger(pool, config.products).await?;
            Target::Ledger(Ledger::new(store), strategy)
        }
        Contender::Stock(StrategyName::Batched) => {
            reset_stock(pool, config.products).await?;
            let b = Batched::new(store, &config.batched);
            batched = Some(b.clone());
            Target::Stock(Arc::new(b))
        }
        Contender::Stock(other) => {
            reset_stock(pool, config.products).await?;
            let strategy_config = StrategyConfig {
                batched: config.batched.clone(),
                ..StrategyConfig::default()
            };
            Target::Stock(build(other, store, &strategy_config))
        }
    };
    reset_peak_rss();
    let tag = format!("r{round}{}", name.as_str());
    let tally = load::drive(target, picker.clone(), &config.plan, tag, on_tick).await?;
    let peak_rss_kib = peak_rss_kib();
    let stats = batched.as_ref().map(Batched::stats);
    drop(batched);
    let invariants = if config.scenario.is_transfers() {
        check_ledger(pool, config.products, &tally).await?
    } else {
        check_invariants(pool, &tally).await?
    };
    Ok(result_of(
        name,
        round,
        &tally,
        peak_rss_kib,
        stats,
        invariants,
    ))
}

/// Most products whose stock the HTTP mode reads before and after a run.
const HTTP_CHECKED_PRODUCTS: u32 = 100;
/// Stock-setting requests in flight while preparing an HTTP run.
const HTTP_SETUP_CONCURRENCY: usize = 32;

/// One HTTP run: stock the bench's products, drive the server, check its audit and (for up to
/// `HTTP_CHECKED_PRODUCTS` products) that the units taken match the units granted.
async fn http_run(
    config: &Config,
    target: &Arc<http::HttpTarget>,
    picker: &Arc<Picker>,
    round: u32,
    on_tick: impl Fn(u64, Duration),
) -> Result<RunResult> {
    let products: Vec<i64> = (1..=i64::from(config.products))
        .map(|p| http::PRODUCT_OFFSET + p)
        .collect();
    for chunk in products.chunks(HTTP_SETUP_CONCURRENCY) {
        let mut set = tokio::task::JoinSet::new();
        for &p in chunk {
            let target = target.clone();
            set.spawn(async move { target.set_count(p, STOCK_PER_PRODUCT).await });
        }
        while let Some(done) = set.join_next().await {
            done??;
        }
    }
    let checked = config.products <= HTTP_CHECKED_PRODUCTS;
    let mut before = 0i64;
    if checked {
        for &p in &products {
            before += target.stock(p).await?.0;
        }
    }
    reset_peak_rss();
    let tag = format!("b{}r{round}", std::process::id());
    let tally = load::drive(
        Target::Http(target.clone()),
        picker.clone(),
        &config.plan,
        tag,
        on_tick,
    )
    .await?;
    let peak_rss_kib = peak_rss_kib();
    let mut invariants = vec![Check {
        name: "audit clean",
        ok: target.audit().await?,
        detail: "GET /v1/admin/audit".into(),
    }];
    if checked {
        let mut after = 0i64;
        for &p in &products {
            after += target.stock(p).await?.0;
        }
        let taken = before - after;
        let granted = tally.units_granted as i64;
        invariants.push(Check {
            name: "granted = units taken",
            ok: if tally.errors == 0 {
                taken == granted
            } else {
                taken >= granted
            },
            detail: format!("{granted} units granted, available fell by {taken}"),
        });
    }
    Ok(result_of(
        Contender::Http,
        round,
        &tally,
        peak_rss_kib,
        None,
        invariants,
    ))
}

fn result_of(
    name: Contender,
    round: u32,
    tally: &Tally,
    peak_rss_kib: Option<u64>,
    stats: Option<batched_engine::BatchedStats>,
    invariants: Vec<Check>,
) -> RunResult {
    let h = &tally.latency_us;
    RunResult {
        strategy: name.as_str().to_owned(),
        round,
        ops_per_s: tally.measured_ok as f64 / tally.measured_span.as_secs_f64(),
        latency_us_p50: h.value_at_quantile(0.50),
        latency_us_p90: h.value_at_quantile(0.90),
        latency_us_p99: h.value_at_quantile(0.99),
        latency_us_p999: h.value_at_quantile(0.999),
        latency_us_max: h.max(),
        ok: tally.measured_ok,
        refused: tally.refused,
        overloaded: tally.overloaded,
        errors: tally.errors,
        first_error: tally.first_error.clone(),
        peak_rss_kib,
        mean_batch: stats
            .filter(|s| s.batches > 0)
            .map(|s| s.orders as f64 / s.batches as f64),
        largest_batch: stats.map(|s| s.largest_batch),
        invariants,
    }
}

async fn reset_ledger(pool: &deadpool_postgres::Pool, accounts: u32) -> Result<()> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    tx.batch_execute(scenario::LEDGER_RESET).await?;
    let n = i64::from(accounts);
    tx.execute(scenario::OPEN_ACCOUNTS, &[&OPENING_BALANCE, &n])
        .await?;
    tx.execute(scenario::OPENING_ROWS, &[&OPENING_BALANCE, &n])
        .await?;
    tx.execute(scenario::SYSTEM_DEBIT, &[&OPENING_BALANCE, &n])
        .await?;
    tx.commit().await?;
    client.batch_execute("ANALYZE accounts").await?;
    Ok(())
}

const USER_BALANCES: &str = "SELECT coalesce(sum(balance), 0)::bigint FROM accounts WHERE id <> 0";
const TRANSFERS_MADE: &str = "SELECT count(*) FROM transfers WHERE kind = 'transfer'";

/// After a transfer run: the ledger audit, the users' total unchanged (transfers move money, they
/// never create it), and one journal row per transfer a client was told succeeded.
async fn check_ledger(
    pool: &deadpool_postgres::Pool,
    accounts: u32,
    tally: &Tally,
) -> Result<Vec<Check>> {
    let divergences = saldo::audit::audit_ledger(pool).await?;
    let client = pool.get().await?;
    let total: i64 = client.query_one(USER_BALANCES, &[]).await?.get(0);
    let made: i64 = client.query_one(TRANSFERS_MADE, &[]).await?.get(0);
    let expected_total = OPENING_BALANCE * i64::from(accounts);
    let granted = tally.units_granted as i64;
    Ok(vec![
        Check {
            name: "ledger audit clean",
            ok: divergences.is_empty(),
            detail: format!("{} divergences", divergences.len()),
        },
        Check {
            name: "balances conserved",
            ok: total == expected_total,
            detail: format!("users hold {total}, opened with {expected_total}"),
        },
        Check {
            name: "granted = journal rows",
            ok: if tally.errors == 0 {
                made == granted
            } else {
                made >= granted
            },
            detail: format!("{granted} transfers acknowledged, {made} in the journal"),
        },
    ])
}

async fn reset_stock(pool: &deadpool_postgres::Pool, products: u32) -> Result<()> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    tx.batch_execute(scenario::RESET).await?;
    let n = i64::from(products);
    tx.execute(scenario::STOCK_PRODUCTS, &[&STOCK_PER_PRODUCT, &n])
        .await?;
    tx.execute(scenario::COUNT_PRODUCTS, &[&STOCK_PER_PRODUCT, &n])
        .await?;
    tx.commit().await?;
    client.batch_execute("ANALYZE stock").await?;
    Ok(())
}

const OVERSOLD: &str = "SELECT count(*) FROM (SELECT product_id FROM reservations \
     WHERE status IN ('active', 'confirmed') GROUP BY product_id HAVING sum(quantity) > $1) t";
const LIVE_UNITS: &str = "SELECT coalesce(sum(quantity), 0)::bigint FROM reservations \
     WHERE status IN ('active', 'confirmed')";

/// The checks every run must pass: the audit, no product sold past its count, and every unit a
/// buyer was told it got is in the database (no more, unless some answers were lost to errors).
async fn check_invariants(pool: &deadpool_postgres::Pool, tally: &Tally) -> Result<Vec<Check>> {
    let divergences = saldo::audit::audit_stock(pool).await?;
    let client = pool.get().await?;
    let oversold: i64 = client
        .query_one(OVERSOLD, &[&i64::from(STOCK_PER_PRODUCT)])
        .await?
        .get(0);
    let live: i64 = client.query_one(LIVE_UNITS, &[]).await?.get(0);
    let granted = tally.units_granted as i64;
    let granted_ok = if tally.errors == 0 {
        live == granted
    } else {
        live >= granted
    };
    Ok(vec![
        Check {
            name: "audit clean",
            ok: divergences.is_empty(),
            detail: format!("{} divergences", divergences.len()),
        },
        Check {
            name: "sold <= stock",
            ok: oversold == 0,
            detail: format!("{oversold} products oversold"),
        },
        Check {
            name: "granted = reserved rows",
            ok: granted_ok,
            detail: format!("{granted} units granted to buyers, {live} live in the database"),
        },
    ])
}

/// Resets the kernel's peak-RSS mark so each run reports its own (Linux; ignored elsewhere).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Peak resident memory (VmHWM) in KiB, if the platform says.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_database_replaces_only_the_name() {
        assert_eq!(
            with_database("postgres://u@127.0.0.1:5432/postgres", "x").expect("url"),
            "postgres://u@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgresql://u:p@h/db?sslmode=disable", "x").expect("url"),
            "postgresql://u:p@h/x?sslmode=disable"
        );
        // The embedded cluster's form: a percent-encoded socket directory as the host.
        assert_eq!(
            with_database(
                "postgresql://postgres:pw@%2Fvar%2Flib%2Fsaldo%2Fpostgres:5432/postgres",
                "x"
            )
            .expect("socket url"),
            "postgresql://postgres:pw@%2Fvar%2Flib%2Fsaldo%2Fpostgres:5432/x"
        );
        assert_eq!(
            with_database("postgres://h:1", "x").expect("url"),
            "postgres://h:1/x"
        );
        assert_eq!(
            with_database("host=/tmp dbname=a user=u", "x").expect("kv"),
            "host=/tmp user=u dbname=x"
        );
        assert!(with_database("nonsense", "x").is_err());
    }
}
