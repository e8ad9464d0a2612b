//! The stock scenarios of the lab: `last-unit` (seed 000), `oversubscribed` (seed 004) and
//! `multi-item` (crossing multi-item orders, all or nothing). One run = reset the scratch
//! database, stock the products, fire every buyer at once, then check the invariants.
//! Multi-item orders come from a [`StdRng`] seeded with `seed + run`, so every strategy faces
//! the same order mix in the same run and a seed reproduces it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio_postgres::error::SqlState;

use crate::audit::audit_stock;
use crate::domain::{OrderId, OrderItems, ProductId, Ttl};
use crate::error::{Error, InputError};
use crate::lab::scratch::Scratch;
use crate::lab::{
    bounded, error_kind, join_bounded, LabError, OutOfRange, Report, Scenario, MAX_BUYERS,
    MAX_RUNS, MAX_STOCK, MAX_THINK_MS,
};
use crate::retry::TxOptions;
use crate::stock::optimistic::OptimisticConfig;
use crate::stock::trace::TraceSink;
use crate::stock::{
    admin, build, Reservation, ReserveRequest, StockStrategy, StrategyConfig, StrategyName,
};

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
        bounded("buyers", buyers.into(), 1, MAX_BUYERS.into())?;
        bounded("stock", stock.into(), 1, MAX_STOCK.into())?;
        bounded("runs", runs.into(), 1, MAX_RUNS.into())?;
        bounded("think-ms", think_ms, 0, MAX_THINK_MS)?;
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
                })
            })
            .collect()
    }
}

/// What the buyers of one run were told.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub sold_orders: u64,
    /// Units per product granted to buyers.
    pub sold_units: BTreeMap<ProductId, u64>,
    pub refused: u64,
    /// Which product each refusal named.
    pub refused_products: BTreeMap<ProductId, u64>,
    pub conflicts: u64,
    pub errors: BTreeMap<String, u64>,
}

impl Tally {
    /// Counts each buyer's answer against its request.
    pub fn of(orders: &[ReserveRequest], results: &[Result<Reservation, Error>]) -> Tally {
        let mut t = Tally::default();
        for (order, result) in orders.iter().zip(results) {
            match result {
                Ok(r) if !r.replayed => {
                    t.sold_orders += 1;
                    for (p, q) in order.items.iter() {
                        *t.sold_units.entry(p).or_default() += q.get().unsigned_abs() as u64;
                    }
                }
                Ok(_) => {}
                Err(Error::InsufficientStock { product_id, .. }) => {
                    t.refused += 1;
                    *t.refused_products.entry(*product_id).or_default() += 1;
                }
                Err(Error::VersionConflict { .. }) => t.conflicts += 1,
                Err(e) => *t.errors.entry(error_kind(e)).or_default() += 1,
            }
        }
        t
    }

    pub fn units(&self) -> u64 {
        self.sold_units.values().sum()
    }

    /// CHECK violations (23514) that reached a buyer.
    pub fn check_violations(&self) -> u64 {
        self.errors
            .get(SqlState::CHECK_VIOLATION.code())
            .copied()
            .unwrap_or(0)
    }
}

/// Fires every order at once and returns each buyer's answer, in order. Bounded by the number
/// of orders and by [`RUN_TIMEOUT`](crate::lab::RUN_TIMEOUT).
pub async fn buy_all(
    engine: &Arc<dyn StockStrategy>,
    orders: &[ReserveRequest],
) -> Result<Vec<Result<Reservation, Error>>, LabError> {
    let tasks: Vec<_> = orders
        .iter()
        .cloned()
        .map(|order| {
            let engine = engine.clone();
            tokio::spawn(async move { engine.reserve(&order).await })
        })
        .collect();
    join_bounded(tasks).await
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

const TOTALS: &str = "SELECT coalesce(sum(available), 0)::bigint, \
     coalesce(sum(reserved), 0)::bigint, coalesce(min(available), 0)::bigint FROM stock";
const ROWS_PER_ORDER: &str = "SELECT order_id, count(*) FROM reservations GROUP BY order_id";

/// Runs `race` once against `strategy` on a reset scratch database.
pub async fn run_once(
    scratch: &Scratch,
    race: &StockRace,
    strategy: StrategyName,
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
        think: race.think,
        optimistic: race.optimistic,
        trace,
        ..StrategyConfig::default()
    };
    let engine = build(strategy, store, &config);
    let results = buy_all(&engine, &orders).await?;
    let tally = Tally::of(&orders, &results);

    let client = crate::retry::checkout(scratch.pool(), "race_totals").await?;
    let row = client.query_one(TOTALS, &[]).await.map_err(Error::from)?;
    let (final_available, final_reserved, min_available): (i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2));
    let in_db: BTreeMap<String, i64> = client
        .query(ROWS_PER_ORDER, &[])
        .await
        .map_err(Error::from)?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    drop(client);
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
    let audit_divergences = audit_stock(scratch.pool()).await?.len() as u64;
    Ok(RunOutcome {
        tally,
        final_available,
        final_reserved,
        min_available,
        oversold,
        audit_divergences,
        partial_orders,
    })
}

/// Runs `race.runs` runs of `race` for each strategy, one after the other, on `scratch`.
pub async fn run(
    scratch: &Scratch,
    race: &StockRace,
    strategies: &[StrategyName],
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
            if let Some(sink) = sink {
                let (events, dropped) = sink.events();
                report.trace = Some(events);
                report.trace_dropped = Some(dropped);
            }
            report.add_sold(run, outcome.tally.units());
            report.add_tally(&outcome.tally);
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
