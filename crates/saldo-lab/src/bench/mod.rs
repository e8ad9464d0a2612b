//! The bench's engine behind `saldo bench`: throughput and latency of strategies side by side,
//! in one invocation.
//!
//! Runs are interleaved (round 1: every strategy, round 2: every strategy, …) so that noise on a
//! shared machine hits all strategies alike, and the summaries report medians across rounds.
//! Every run starts from the same freshly stocked scratch database ([`crate::scratch`]; laid
//! out by `saldo::fixtures`), so the user's data is never touched, and every run ends with the
//! invariant checks ([`crate::checks`], shared with the race lab): a broken one is reported in
//! [`BenchOutcome::all_ok`].
//!
//! Layout: [`scenario`] (what an operation picks), [`load`] (closed/open loop, latencies),
//! [`http`] (the HTTP mode's client), [`report`] (per-run rows, medians, the table), [`plot`]
//! (SVG); this file runs the rounds. The CLI parses flags into a [`BenchConfig`], shows
//! [`Progress`] and prints the [`BenchOutcome`].
//!
//! ```no_run
//! use std::time::Duration;
//! use saldo::stock::batched::BatchedConfig;
//! use saldo_lab::bench::{
//!     self, load::LoadPlan, Backend, BenchConfig, Contender, EventsMode, Scenario, TagsMode,
//! };
//! use saldo_lab::scratch::Scratch;
//!
//! # async fn example() -> anyhow::Result<()> {
//! let scratch = Scratch::for_bench("postgres://postgres@127.0.0.1:5432/postgres", 32).await?;
//! let config = BenchConfig {
//!     scenario: Scenario::Hot,
//!     strategies: vec![
//!         Contender::parse(Scenario::Hot, "atomic")?,
//!         Contender::parse(Scenario::Hot, "batched")?,
//!     ],
//!     plan: LoadPlan {
//!         concurrency: 64,
//!         rate: None,
//!         warmup: Duration::from_secs(1),
//!         duration: Duration::from_secs(5),
//!         with_confirm: false,
//!         tagged: false,
//!     },
//!     rounds: 3,
//!     products: 1,
//!     skew: 1.0,
//!     items: 1,
//!     pool_size: 32,
//!     batched: BatchedConfig::default(),
//!     http: None,
//!     events: EventsMode::Both,
//!     tags: TagsMode::Off,
//!     webhook_probe: false,
//! };
//! let outcome = bench::run(&config, Backend::Scratch(&scratch), &()).await;
//! scratch.drop_database().await?;
//! print!("{}", bench::report::table(&outcome?.summaries));
//! # Ok(())
//! # }
//! ```

pub mod http;
pub mod http_guard;
pub mod load;
pub mod plot;
pub mod report;
pub mod scenario;
pub mod webhook_probe;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use saldo::domain::{OrderItems, ProductId};
use saldo::ledger::{Ledger, TransferStrategy};
use saldo::retry::TxOptions;
use saldo::stock::batched::{Batched, BatchedConfig, BatchedStats};
use saldo::stock::{StockEngine, Store, StrategyConfig};

use crate::checks::{self, Check};
use crate::scratch::Scratch;
use crate::strategy::{LabStrategy, LabTransfer};
use http::HttpTarget;
use load::{LoadPlan, Tally, Target};
use report::{RunResult, Summary};
pub use scenario::Scenario;
use scenario::{Picker, BENCH_LOCATIONS, OPENING_BALANCE, STOCK_PER_PRODUCT};

/// A strategy under test: a stock strategy, or a transfer strategy for the ledger scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    Stock(LabStrategy),
    Transfer(LabTransfer),
    /// Whatever strategy the `--target` server runs.
    Http,
}

impl Contender {
    pub fn as_str(self) -> &'static str {
        match self {
            Contender::Stock(n) => n.as_str(),
            Contender::Transfer(t) => t.as_str(),
            Contender::Http => "http",
        }
    }

    /// A strategy name of `scenario`'s kind (transfer strategies for the ledger scenarios).
    pub fn parse(scenario: Scenario, s: &str) -> Result<Contender> {
        if scenario == Scenario::HoldsHot && LabTransfer::parse(s) == Some(LabTransfer::Naive) {
            bail!("holds-hot runs the served transfer strategies only (ordered, batched)");
        }
        if scenario.is_transfers() {
            return LabTransfer::parse(s)
                .map(Contender::Transfer)
                .with_context(|| {
                    let known: Vec<&str> = LabTransfer::ALL.iter().map(|n| n.as_str()).collect();
                    format!(
                        "unknown transfer strategy {s:?}; known: {}",
                        known.join(", ")
                    )
                });
        }
        LabStrategy::parse(s)
            .map(Contender::Stock)
            .with_context(|| {
                let known: Vec<&str> = LabStrategy::ALL.iter().map(|n| n.as_str()).collect();
                format!("unknown stock strategy {s:?}; known: {}", known.join(", "))
            })
    }
}

/// Validated configuration of one invocation.
pub struct BenchConfig {
    pub scenario: Scenario,
    pub strategies: Vec<Contender>,
    pub plan: LoadPlan,
    pub rounds: u32,
    /// Products (or accounts) the scenario creates: [`Scenario::products`] of the request.
    pub products: u32,
    pub skew: f64,
    pub items: u32,
    pub pool_size: usize,
    pub batched: BatchedConfig,
    /// HTTP mode: the running service to drive (its strategy is the server's).
    pub http: Option<Arc<HttpTarget>>,
    /// Whether the writes append their events (the outbox), or both in turn, side by side.
    pub events: EventsMode,
    /// Whether every operation carries a reference and metadata, or both in turn.
    pub tags: TagsMode,
    /// HTTP mode: a loopback webhook receiver follows the load ([`webhook_probe`]).
    pub webhook_probe: bool,
}

/// `--events`: the outbox on (what the service runs), off, or each in turn within every round
/// (so a slow stretch of the machine hits both; the runs without are named `…@no-events`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum EventsMode {
    #[default]
    On,
    Off,
    Both,
}

impl EventsMode {
    /// The settings a round runs, in order: true for events on.
    fn settings(self) -> &'static [bool] {
        match self {
            EventsMode::On => &[true],
            EventsMode::Off => &[false],
            EventsMode::Both => &[true, false],
        }
    }
}

/// `--tags`: operations without a reference and metadata (the default), with them, or each in
/// turn within every round (the tagged runs are named `…@tagged`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum TagsMode {
    #[default]
    Off,
    On,
    Both,
}

impl TagsMode {
    /// The settings a round runs, in order: true for tagged.
    fn settings(self) -> &'static [bool] {
        match self {
            TagsMode::Off => &[false],
            TagsMode::On => &[true],
            TagsMode::Both => &[false, true],
        }
    }
}

/// What a run varies besides its strategy and server: events on or off, tagged or not.
#[derive(Debug, Clone, Copy)]
struct Setting {
    events: bool,
    tagged: bool,
}

/// Every combination of `config`'s events and tags settings, in run order.
fn settings_of(config: &BenchConfig) -> Vec<Setting> {
    let mut settings = Vec::new();
    for &events in config.events.settings() {
        for &tagged in config.tags.settings() {
            settings.push(Setting { events, tagged });
        }
    }
    settings
}

/// A result's name: the strategy, the compared server's label, `no-events` when the outbox is
/// off and `tagged` when operations carry tags.
fn run_name(strategy: &str, label: Option<&str>, setting: Setting) -> String {
    let mut tags: Vec<&str> = label.into_iter().collect();
    if !setting.events {
        tags.push("no-events");
    }
    if setting.tagged {
        tags.push("tagged");
    }
    if tags.is_empty() {
        strategy.to_owned()
    } else {
        format!("{strategy}@{}", tags.join("+"))
    }
}

impl BenchConfig {
    /// The title line of the output.
    pub fn title(&self) -> String {
        let load = match self.plan.rate {
            Some(rate) => format!("open loop {rate}/s, ≤{} in flight", self.plan.concurrency),
            None => format!("{} buyers", self.plan.concurrency),
        };
        let products = match self.scenario {
            Scenario::Hot
            | Scenario::MultiLocation
            | Scenario::TransfersHot
            | Scenario::HoldsHot => String::new(),
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

    /// Runs in all: rounds × strategies.
    pub fn runs_total(&self) -> u64 {
        u64::from(self.rounds) * self.strategies.len() as u64
    }

    /// Wall time of one run: warm-up plus the measured window.
    pub fn per_run(&self) -> Duration {
        self.plan.warmup + self.plan.duration
    }
}

/// Where the runs go: a scratch database in-process, or a server over HTTP.
pub enum Backend<'a> {
    Scratch(&'a Scratch),
    /// Scratch databases on several servers, side by side (single node and Citus): every
    /// round runs every strategy on each, and rows are named `<strategy>@<label>`.
    Compare(Vec<(String, &'a Scratch)>),
    Http(Arc<HttpTarget>),
}

/// What the caller sees while the bench runs (a progress bar, a log). Both default to nothing;
/// `&()` shows nothing.
pub trait Progress: Sync {
    /// Every 100 ms of run number `index` (0-based over all runs): the running load (answers
    /// and errors so far, latencies since the last look, time since the run started).
    fn tick(&self, _index: u64, _round: u32, _name: Contender, _live: &load::Live<'_>) {}
    /// A run finished.
    fn run_done(&self, _result: &RunResult) {}
    /// Something the operator should read (what the clean-up of a service left).
    fn note(&self, _line: &str) {}
}

impl Progress for () {}

/// Every run, the medians per strategy, and whether every invariant held after every run.
pub struct BenchOutcome {
    pub results: Vec<RunResult>,
    pub summaries: Vec<Summary>,
    pub all_ok: bool,
    /// What the webhook probe's receiver saw (HTTP mode with the probe).
    pub webhook: Option<webhook_probe::WebhookReport>,
}

/// Runs every round of every strategy of `config` against `backend`. Against a service
/// (`Backend::Http`) it first checks both tokens and that it may write there, and cleans up
/// afterwards whatever happened (`http_guard.rs`), telling `progress` what it left.
pub async fn run(
    config: &BenchConfig,
    backend: Backend<'_>,
    progress: &dyn Progress,
) -> Result<BenchOutcome> {
    let Backend::Http(target) = &backend else {
        return rounds(config, backend, progress).await;
    };
    let target = target.clone();
    target.preflight().await?;
    let probe = match config.webhook_probe {
        true => Some(webhook_probe::WebhookProbe::start(&target).await?),
        false => None,
    };
    let outcome = rounds(config, backend, progress).await;
    let webhook = match probe {
        Some(probe) => Some(probe.finish(&target).await),
        None => None,
    };
    progress.note(&target.clean_up(&http_products(config)).await.describe());
    let mut outcome = outcome?;
    outcome.webhook = webhook.transpose()?;
    Ok(outcome)
}

/// The bench's products on a service: its reserved range.
fn http_products(config: &BenchConfig) -> Vec<i64> {
    (1..=i64::from(config.products))
        .map(|p| http::PRODUCT_OFFSET + p)
        .collect()
}

/// Every round of every strategy.
async fn rounds(
    config: &BenchConfig,
    backend: Backend<'_>,
    progress: &dyn Progress,
) -> Result<BenchOutcome> {
    let picker = Arc::new(Picker::new(
        config.scenario,
        config.products,
        config.skew,
        config.items,
    ));
    let mut results = Vec::new();
    // Each server in turn within a round, so a slow stretch of the machine hits both sides.
    let sides: Vec<(Option<&str>, Option<&Scratch>)> = match &backend {
        Backend::Http(_) => vec![(None, None)],
        Backend::Scratch(scratch) => vec![(None, Some(*scratch))],
        Backend::Compare(sides) => sides
            .iter()
            .map(|(label, scratch)| (Some(label.as_str()), Some(*scratch)))
            .collect(),
    };
    let settings = settings_of(config);
    let per_round = (config.strategies.len() * sides.len() * settings.len()) as u64;
    for round in 1..=config.rounds {
        let mut i = 0_u64;
        for &(label, scratch) in &sides {
            for &setting in &settings {
                for &name in &config.strategies {
                    let index = u64::from(round - 1) * per_round + i;
                    i += 1;
                    let on_tick = |live: &load::Live<'_>| {
                        progress.tick(index, round, name, live);
                    };
                    let mut result = match (&backend, scratch) {
                        (Backend::Http(target), _) => {
                            http_run(config, target, &picker, round, on_tick).await?
                        }
                        (_, Some(scratch)) => {
                            let run = Run {
                                name,
                                round,
                                setting,
                            };
                            one_run(config, scratch, &picker, run, on_tick).await?
                        }
                        (_, None) => bail!("a scratch backend without its scratch database"),
                    };
                    result.strategy = run_name(&result.strategy, label, setting);
                    progress.run_done(&result);
                    results.push(result);
                }
            }
        }
    }
    let names = names_of(config, &sides, &settings);
    let summaries = report::summarize(&names, &results);
    let all_ok = summaries.iter().all(|s| s.invariants_ok);
    Ok(BenchOutcome {
        results,
        summaries,
        all_ok,
        webhook: None,
    })
}

/// The results' names in table order: per compared server, per setting, per strategy.
fn names_of(
    config: &BenchConfig,
    sides: &[(Option<&str>, Option<&Scratch>)],
    settings: &[Setting],
) -> Vec<String> {
    let mut names = Vec::new();
    for &(label, _) in sides {
        for &setting in settings {
            for n in &config.strategies {
                names.push(run_name(n.as_str(), label, setting));
            }
        }
    }
    names
}

/// Which run [`one_run`] makes.
#[derive(Debug, Clone, Copy)]
struct Run {
    name: Contender,
    round: u32,
    /// The outbox on (the service's setting) or off; operations tagged or not.
    setting: Setting,
}

/// One strategy, one round: fresh stock, the load, the checks.
async fn one_run(
    config: &BenchConfig,
    scratch: &Scratch,
    picker: &Arc<Picker>,
    run: Run,
    on_tick: impl Fn(&load::Live<'_>),
) -> Result<RunResult> {
    let Run { name, round, .. } = run;
    let pool = scratch.pool();
    let store = store_for(scratch, run);
    let mut batched = None;
    let mut ledger_engine = None;
    let target = match name {
        Contender::Http => bail!("HTTP runs go through http_run"),
        Contender::Transfer(strategy) => {
            saldo::fixtures::open_accounts(pool, config.products, OPENING_BALANCE).await?;
            // The naive strategy moves money through `transfer_with`; the ledger serves
            // `ordered` for everything else it does.
            let served = strategy.served().unwrap_or(TransferStrategy::Ordered);
            let ledger = Ledger::serving(store, served, &config.batched);
            if served == TransferStrategy::Batched {
                ledger_engine = Some(ledger.clone());
            }
            if config.scenario == Scenario::HoldsHot {
                Target::Holds(ledger)
            } else {
                Target::Ledger(ledger, strategy)
            }
        }
        Contender::Stock(LabStrategy::Batched) => {
            stock_fixture(config, &store).await?;
            let b = Batched::new(store.clone(), &config.batched);
            batched = Some(b.clone());
            Target::Stock(StockEngine::new(store, b))
        }
        Contender::Stock(other) => {
            stock_fixture(config, &store).await?;
            let strategy_config = StrategyConfig {
                batched: config.batched.clone(),
                ..StrategyConfig::default()
            };
            Target::Stock(other.build(store, &strategy_config, Duration::ZERO))
        }
    };
    reset_peak_rss();
    let tag = format!("r{round}{}", name.as_str());
    let plan = LoadPlan {
        tagged: run.setting.tagged,
        ..config.plan.clone()
    };
    let tally = load::drive(target, picker.clone(), &plan, tag, on_tick).await?;
    let peak_rss_kib = peak_rss_kib();
    let stats = batched
        .as_ref()
        .map(Batched::stats)
        .or_else(|| ledger_engine.as_ref().map(|l| l.engine().stats()));
    drop(batched);
    drop(ledger_engine);
    let invariants = invariants_after(config, pool, &tally).await?;
    Ok(result_of(
        name,
        round,
        &tally,
        peak_rss_kib,
        stats,
        invariants,
    ))
}

/// The run's store: the default transaction options, events as the run says.
fn store_for(scratch: &Scratch, run: Run) -> saldo::Store {
    let store = scratch.store(TxOptions::default());
    if run.setting.events {
        store
    } else {
        store.without_events()
    }
}

/// The checks after a run: the ledger's or the stock's, against what the load was granted.
async fn invariants_after(
    config: &BenchConfig,
    pool: &deadpool_postgres::Pool,
    tally: &load::Tally,
) -> Result<Vec<checks::Check>> {
    Ok(if config.scenario.is_transfers() {
        let expected_total = OPENING_BALANCE * i64::from(config.products);
        checks::ledger_checks(pool, expected_total, tally.units_granted, tally.errors).await?
    } else {
        let stock = i64::from(STOCK_PER_PRODUCT);
        checks::stock_checks(pool, stock, tally.units_granted, tally.errors).await?
    })
}

/// The stock a run starts with: every product at one pool, or at [`BENCH_LOCATIONS`]; for
/// `bundle`, the bundles declared over them ([`scenario::bundle_layout`]).
async fn stock_fixture(config: &BenchConfig, store: &Store) -> Result<()> {
    let pool = &store.pool;
    if config.scenario == Scenario::MultiLocation {
        saldo::fixtures::stock_products_at(
            pool,
            config.products,
            STOCK_PER_PRODUCT,
            &BENCH_LOCATIONS,
        )
        .await?;
    } else {
        saldo::fixtures::stock_products(pool, config.products, STOCK_PER_PRODUCT).await?;
    }
    if config.scenario == Scenario::Bundle {
        let (first, count, per) = scenario::bundle_layout(config.products, config.items);
        for k in 0..count {
            let from = i64::from(k) * i64::from(per);
            let components = OrderItems::new((1..=i64::from(per)).map(|c| (from + c, 1)))?;
            let bundle = ProductId::new(first + i64::from(k))?;
            saldo::stock::bundles::declare(store, bundle, &components).await?;
        }
    }
    Ok(())
}

/// Most products whose stock the HTTP mode reads before and after a run.
const HTTP_CHECKED_PRODUCTS: u32 = 100;
/// Stock-setting requests in flight while preparing an HTTP run.
const HTTP_SETUP_CONCURRENCY: usize = 32;

/// One HTTP run: stock the bench's products, drive the server, check its audit and (for up to
/// `HTTP_CHECKED_PRODUCTS` products) that the units taken match the units granted.
async fn http_run(
    config: &BenchConfig,
    target: &Arc<http::HttpTarget>,
    picker: &Arc<Picker>,
    round: u32,
    on_tick: impl Fn(&load::Live<'_>),
) -> Result<RunResult> {
    if matches!(config.scenario, Scenario::MultiLocation | Scenario::Bundle) {
        bail!(
            "{} runs in process only: its stock is laid out by the bench's fixtures",
            config.scenario.as_str()
        );
    }
    let products = http_products(config);
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
    let tag = target.order_tag(round);
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
        let granted = tally.units_granted;
        invariants.push(Check {
            name: "granted = units taken",
            ok: checks::granted_matches(taken, granted, tally.errors),
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
    stats: Option<BatchedStats>,
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
        connection_errors: tally.connection_errors,
        first_error: tally.first_error.clone(),
        peak_rss_kib,
        mean_batch: stats
            .filter(|s| s.batches > 0)
            .map(|s| s.orders as f64 / s.batches as f64),
        largest_batch: stats.map(|s| s.largest_batch),
        invariants,
    }
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
