//! The `late-retry` scenario (idempotency for good): a checkout's delayed retry of a reservation
//! whose order was since cancelled or expired must take nothing. One run: stock `buyers` units of
//! product 1, reserve one unit per buyer, release half of the orders and let the other half expire
//! (swept), then replay every original request at once — the late retries. Every unit must still be
//! available afterwards; a retry that took a unit again is a violation.
//!
//! The safe strategies hold (the order id is an idempotency key for good); `naive-replay`, the
//! rule before the fix, takes every unit a second time.

use std::time::{Duration, Instant};

use saldo::domain::{OrderId, OrderItems, ProductId, Ttl};
use saldo::error::Error;
use saldo::retry::TxOptions;
use saldo::stock::{admin, sweeper, ReserveRequest, StrategyConfig};

use crate::race::buyers::{buy_all, Tally};
use crate::race::types::RunDone;
use crate::race::types::{LabError, Report, Scenario};
use crate::scratch::Scratch;
use crate::strategy::LabStrategy;

/// The lifetime of the orders that are left to expire.
const SHORT_TTL: Duration = Duration::from_millis(1);
/// Waited after the first phase so that the short-lived orders are due when the sweeper runs.
const UNTIL_DUE: Duration = Duration::from_millis(20);

/// What one run found.
#[derive(Debug, Clone, Default)]
pub struct LateOutcome {
    /// Units taken by the first requests (one per buyer, all of them granted).
    pub first_units: u64,
    /// Units taken again by the late retries: must be 0.
    pub retaken_units: u64,
    pub tally: Tally,
    pub final_available: i64,
    pub final_reserved: i64,
    pub audit_divergences: u64,
}

impl LateOutcome {
    pub fn violated(&self) -> bool {
        self.retaken_units > 0 || self.audit_divergences > 0 || self.final_reserved != 0
    }
}

fn order(run: u32, buyer: u32, ttl: Ttl) -> Result<ReserveRequest, Error> {
    Ok(ReserveRequest {
        order_id: OrderId::new(format!("late-{run}-{buyer}"))?,
        items: OrderItems::new([(1, 1)])?,
        ttl,
        tags: saldo::domain::Tags::NONE,
    })
}

/// Runs the scenario once against `strategy` on a reset scratch database.
pub async fn run_once(
    scratch: &Scratch,
    buyers: u32,
    strategy: LabStrategy,
    run: u32,
) -> Result<LateOutcome, LabError> {
    scratch.reset().await?;
    let store = scratch.store(TxOptions::default());
    let product = ProductId::new(1).map_err(Error::from)?;
    admin::set_count(&store, product, buyers.into()).await?;
    let engine = strategy.build(store.clone(), &StrategyConfig::default(), Duration::ZERO);

    // Even buyers' orders will expire, odd ones are cancelled.
    let first: Vec<ReserveRequest> = (0..buyers)
        .map(|b| {
            order(
                run,
                b,
                if b % 2 == 0 {
                    Ttl::from_millis(SHORT_TTL.as_millis() as u64)?
                } else {
                    Ttl::default()
                },
            )
        })
        .collect::<Result<_, Error>>()?;
    let granted = Tally::of(&first, &buy_all(&engine, &first).await?);
    tokio::time::sleep(UNTIL_DUE).await;
    sweeper::sweep(&store).await?;
    for request in first.iter().skip(1).step_by(2) {
        engine.release(&request.order_id).await?;
    }

    // The late retries: the same requests, sent again.
    let retries: Vec<ReserveRequest> = (0..buyers)
        .map(|b| order(run, b, Ttl::default()))
        .collect::<Result<_, Error>>()?;
    let tally = Tally::of(&retries, &buy_all(&engine, &retries).await?);
    let after = admin::get(&store, product).await?;
    let audit_divergences = crate::checks::stock_divergences(scratch.pool()).await?;
    Ok(LateOutcome {
        first_units: granted.units(),
        retaken_units: tally.units(),
        tally,
        final_available: after.available.into(),
        final_reserved: after.reserved.into(),
        audit_divergences,
    })
}

/// Runs `runs` runs for each strategy, one after the other, on `scratch`.
pub async fn run(
    scratch: &Scratch,
    buyers: u32,
    runs: u32,
    strategies: &[LabStrategy],
) -> Result<Vec<Report>, LabError> {
    run_with_progress(scratch, buyers, runs, strategies, &|_| {}).await
}

/// [`run`], telling `on_run` after every run.
pub async fn run_with_progress(
    scratch: &Scratch,
    buyers: u32,
    runs: u32,
    strategies: &[LabStrategy],
    on_run: &(dyn Fn(RunDone<'_>) + Sync),
) -> Result<Vec<Report>, LabError> {
    let mut reports = Vec::with_capacity(strategies.len());
    for &strategy in strategies {
        let started = Instant::now();
        let mut report = Report {
            scenario: Scenario::LateRetry.as_str().into(),
            strategy: strategy.as_str().into(),
            safe: strategy.is_safe(),
            runs,
            buyers_per_run: buyers,
            stock_per_run: buyers.into(),
            ..Report::default()
        };
        for run in 0..runs {
            let outcome = run_once(scratch, buyers, strategy, run).await?;
            on_run(RunDone {
                strategy: strategy.as_str(),
                run: run + 1,
                runs,
                elapsed: started.elapsed(),
            });
            // "Sold" here is what the late retries took: the units sold twice.
            report.add_sold(run, outcome.retaken_units);
            report.oversold += outcome.retaken_units;
            report.runs_oversold += u32::from(outcome.retaken_units > 0);
            outcome.tally.add_to(&mut report);
            report.final_available = outcome.final_available;
            report.final_reserved = outcome.final_reserved;
            report.audit_divergences += outcome.audit_divergences;
            report.violations += u32::from(outcome.violated());
        }
        report.finish(started);
        reports.push(report);
    }
    Ok(reports)
}
