//! The stock scenarios of the lab: `last-unit` (many buyers for one unit), `oversubscribed`
//! (far more buyers than units) and `multi-item` (crossing multi-item orders, all or nothing).
//! One run = reset the scratch database, stock the products, fire every buyer at once, then
//! check the invariants. Multi-item orders come from a [`StdRng`] seeded with `seed + run`, so
//! every strategy faces the same order mix in the same run and a seed reproduces it.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use saldo::domain::{OrderId, OrderItems, ProductId, Ttl};
use saldo::error::{Error, InputError};
use saldo::retry::TxOptions;
use saldo::stock::optimistic::OptimisticConfig;
use saldo::stock::trace::TraceSink;
use saldo::stock::{admin, ReserveRequest, StrategyConfig};

use crate::checks;
pub use crate::race::buyers::{buy_all, Tally};
use crate::race::types::RunDone;
use crate::race::types::{LabError, OutOfRange, Report, Scenario, STOCK_BOUNDS};
use crate::scratch::Scratch;
use crate::strategy::LabStrategy;

/// Products a multi-item run stocks (ids 1..=N), each with `stock` units.
pub const MULTI_ITEM_PRODUCTS: i64 = 4;
/// Most distinct products in one multi-item order; quantities are 1..=[`MULTI_ITEM_MAX_QUANTITY`].
pub const MULTI_ITEM_MAX_ITEMS: usize = 3;
pub const MULTI_ITEM_MAX_QUANTITY: i64 = 2;

/// A validated stock race.
#[derive(Debug, Clone)]
pub struct StockRace {
    pub scenario: Scenario,
    pub buyers: u32,
    /// Units per product.
    pub stock: u32,
    pub runs: u32,
    pub think: Duration,
    pub seed: u64,
    /// Record the reads and writes of the first run of each strategy.
    pub explain: bool,
    pub optimistic: OptimisticConfig,
}

impl StockRace {
    /// Checks every bound; `scenario` must be a stock scenario.
    pub fn new(
        scenario: Scenario,
        buyers: u32,
        stock: u32,
        runs: u32,
        think_ms: u64,
        seed: u64,
    ) -> Result<StockRace, OutOfRange> {
        STOCK_BOUNDS.check(buyers, stock, runs, think_ms)?;
        Ok(StockRace {
            scenario,
            buyers,
            stock,
            runs,
            think: Duration::from_millis(think_ms),
            seed,
            explain: false,
            optimistic: OptimisticConfig::default(),
        })
    }

    fn products(&self) -> Vec<ProductId> {
        let n = match self.scenario {
            Scenario::MultiItem => MULTI_ITEM_PRODUCTS,
            _ => 1,
        };
        (1..=n).filter_map(|p| ProductId::new(p).ok()).collect()
    }

    /// The orders of run `run`: one unit of product 1 each, or a seeded multi-item mix.
    pub fn orders(&self, run: u32) -> Result<Vec<ReserveRequest>, InputError> {
        let mut rng = StdRng::seed_from_u64(self.seed.wrapping_add(run.into()));
        let products: Vec<i64> = self.products().iter().map(|p| p.get()).collect();
        (0..self.buyers)
            .map(|i| {
                let items: Vec<(i64, i64)> = if self.scenario == Scenario::MultiItem {
                    let mut chosen = products.clone();
                    chosen.shuffle(&mut rng);
                    let k = rng.random_range(1..=MULTI_ITEM_MAX_ITEMS.min(chosen.len()));
                    // Listed in random order: the engine sorts, so locks never cross.
                    chosen
                        .into_iter()
                        .take(k)
                        .map(|p| (p, rng.random_range(1..=MULTI_ITEM_MAX_QUANTITY)))
                        .collect()
                } else {
                    vec![(1, 1)]
                };
                Ok(ReserveRequest {
                    order_id: OrderId::new(format!("race-{run}-{i}"))?,
                    items: OrderItems::new(items)?,
                    ttl: Ttl::default(),
                    tags: saldo::domain::Tags::NONE,
                })
            })
            .collect()
    }
}

/// What one run found.
#[derive(Debug, Clone, Default)]
pub struct RunOutcome {
    pub tally: Tally,
    pub final_available: i64,
    pub final_reserved: i64,
    /// Lowest `available` of any product afterwards (the CHECK keeps it ≥ 0).
    pub min_available: i64,
    pub oversold: u64,
    pub audit_divergences: u64,
    pub partial_orders: u64,
}

impl RunOutcome {
    /// True when any invariant broke in this run.
    pub fn violated(&self) -> bool {
        self.oversold > 0
            || self.audit_divergences > 0
            || self.partial_orders > 0
            || self.tally.check_violations() > 0
            || self.min_available < 0
    }
}

/// Runs `race` once against `strategy` on a reset scratch database.
pub async fn run_once(
    scratch: &Scratch,
    race: &StockRace,
    strategy: LabStrategy,
    run: u32,
    trace: Option<TraceSink>,
) -> Result<RunOutcome, LabError> {
    scratch.reset().await?;
    let store = scratch.store(TxOptions::default());
    for product in race.products() {
        admin::set_count(&store, product, race.stock.into()).await?;
    }
    let orders = race.orders(run).map_err(Error::from)?;
    // Fields other strategies add later keep their defaults.
    #[allow(clippy::needless_update)]
    let config = StrategyConfig {
        optimistic: race.optimistic,
        trace,
        ..StrategyConfig::default()
    };
    let engine = strategy.build(store, &config, race.think);
    let results = buy_all(&engine, &orders).await?;
    let tally = Tally::of(&orders, &results);

    let totals = checks::stock_totals(scratch.pool()).await?;
    let in_db = checks::rows_per_order(scratch.pool()).await?;
    // All or nothing: a sold order has one row per item, any other order none.
    let partial_orders = orders
        .iter()
        .zip(&results)
        .filter(|(order, result)| {
            let expected = if result.is_ok() { order.items.len() } else { 0 };
            let actual = in_db.get(order.order_id.as_str()).copied().unwrap_or(0);
            usize::try_from(actual).ok() != Some(expected)
        })
        .count() as u64;
    let oversold = tally
        .sold_units
        .values()
        .map(|&units| units.saturating_sub(race.stock.into()))
        .sum();
    let audit_divergences = crate::checks::stock_divergences(scratch.pool()).await?;
    Ok(RunOutcome {
        tally,
        final_available: totals.available,
        final_reserved: totals.reserved,
        min_available: totals.min_available,
        oversold,
        audit_divergences,
        partial_orders,
    })
}

/// Runs `race.runs` runs of `race` for each strategy, one after the other, on `scratch`.
pub async fn run(
    scratch: &Scratch,
    race: &StockRace,
    strategies: &[LabStrategy],
) -> Result<Vec<Report>, LabError> {
    run_with_progress(scratch, race, strategies, &|_| {}).await
}

/// [`run`], telling `on_run` after every run.
pub async fn run_with_progress(
    scratch: &Scratch,
    race: &StockRace,
    strategies: &[LabStrategy],
    on_run: &(dyn Fn(RunDone<'_>) + Sync),
) -> Result<Vec<Report>, LabError> {
    let mut reports = Vec::with_capacity(strategies.len());
    for &strategy in strategies {
        let started = Instant::now();
        let mut report = Report {
            scenario: race.scenario.as_str().into(),
            strategy: strategy.as_str().into(),
            safe: strategy.is_safe(),
            runs: race.runs,
            buyers_per_run: race.buyers,
            stock_per_run: i64::from(race.stock) * race.products().len() as i64,
            ..Report::default()
        };
        for run in 0..race.runs {
            let sink = (race.explain && run == 0).then(TraceSink::new);
            let outcome = run_once(scratch, race, strategy, run, sink.clone()).await?;
            on_run(RunDone {
                strategy: strategy.as_str(),
                run: run + 1,
                runs: race.runs,
                elapsed: started.elapsed(),
            });
            if let Some(sink) = sink {
                let (events, dropped) = sink.events();
                report.trace = Some(events);
                report.trace_dropped = Some(dropped);
            }
            report.add_sold(run, outcome.tally.units());
            outcome.tally.add_to(&mut report);
            report.final_available = outcome.final_available;
            report.final_reserved = outcome.final_reserved;
            report.oversold += outcome.oversold;
            report.runs_oversold += u32::from(outcome.oversold > 0);
            report.check_violations += outcome.tally.check_violations();
            report.audit_divergences += outcome.audit_divergences;
            report.partial_orders += outcome.partial_orders;
            report.violations += u32::from(outcome.violated());
        }
        report.finish(started);
        reports.push(report);
    }
    Ok(reports)
}
