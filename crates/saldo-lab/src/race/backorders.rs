//! The `backorder-fill` scenario (issue 15): restocks racing new reservations for a preorder.
//! One run: product 1 has no stock and a backorder limit; `buyers / 4` (at least 2) preorders
//! wait in a known arrival order; then `buyers` requests go at once from one starting line,
//! even ones reserving a unit, odd ones restocking one. Checks: units promised never pass
//! stock + limit (nor the limit on the row), no unit is left available while a backorder waits
//! (every arrival filled first), fills in arrival order and the books balance (the audit), and
//! no error reached a caller (e.g. a CHECK violation of available or the limit).
//!
//! The served strategies restock through `saldo::stock::admin::adjust` (the fill under the
//! row lock, oldest first) while their reservations race it. The naive restock
//! (`saldo_lab::naive::backorders`) reads, decides newest first in the application, thinks and
//! writes what it computed: it fails the same checks every run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use saldo::domain::{OrderId, OrderItems, ProductId, Reason, Ttl};
use saldo::error::Error;
use saldo::stock::backorders::set_policy;
use saldo::stock::{admin, build, ReserveRequest, StrategyConfig};
use tokio::sync::Barrier;

use crate::naive::backorders::naive_restock;
use crate::race::contender::{run_contenders, Contender, RunOutcome, Runs};
use crate::race::types::{bounded, error_kind, join_bounded, LabError, Report, RunDone, Scenario};
use crate::scratch::Scratch;

/// The naive restock's name in `--strategy` and the reports.
pub const NAIVE_FILL: &str = "naive-fill";
/// The naive restock's pause between its decision and its write.
pub const NAIVE_THINK: Duration = Duration::from_millis(50);
/// Most concurrent requests per run.
pub const MAX_FILL_BUYERS: u32 = 2_000;
/// Fewest: two reservations and two restocks.
pub const MIN_FILL_BUYERS: u32 = 4;

/// What one run found.
#[derive(Debug, Clone, Default)]
pub struct FillOutcome {
    /// The limit and the preorders that waited before the race.
    pub limit: i64,
    pub waiting: u64,
    pub reserved: u64,
    pub refused: u64,
    pub restocked: u64,
    pub errors: BTreeMap<String, u64>,
    pub final_available: i64,
    pub final_reserved: i64,
    pub final_backordered: i64,
    /// Units promised beyond what arrived plus the limit.
    pub past_limit: u64,
    /// Available units left while a backorder waits (an arrival that did not fill).
    pub unfilled: u64,
    pub audit_divergences: u64,
}

impl FillOutcome {
    pub fn violated(&self) -> bool {
        self.past_limit > 0
            || self.unfilled > 0
            || self.audit_divergences > 0
            || !self.errors.is_empty()
            || self.final_backordered > self.limit
    }
}

/// Runs the scenario once with `contender` on `store`'s database, which must hold nothing of
/// product 1 yet (a fresh or reset database).
pub async fn run_on(
    store: &saldo::stock::Store,
    buyers: u32,
    contender: Contender,
    run: u32,
) -> Result<FillOutcome, LabError> {
    bounded(
        "buyers",
        buyers.into(),
        MIN_FILL_BUYERS.into(),
        MAX_FILL_BUYERS.into(),
    )?;
    let product = ProductId::new(1).map_err(Error::from)?;
    let waiting = u64::from((buyers / 4).max(2));
    // Room for the waiting preorders and about half the racing reservations: some are refused.
    let limit = waiting as i64 + i64::from(buyers / 4);
    admin::set_count(store, product, 0).await?;
    set_policy(store, product, limit).await?;
    let engine = build(
        contender.engine(),
        store.clone(),
        &StrategyConfig::default(),
    );
    let one = OrderItems::new([(1, 1)]).map_err(Error::from)?;
    for i in 0..waiting {
        let request = ReserveRequest {
            order_id: OrderId::new(format!("bw-{run}-{i}")).map_err(Error::from)?,
            items: one.clone(),
            ttl: Ttl::default(),
        };
        engine.reserve(&request).await?;
    }
    let reason = Reason::new("race restock").map_err(Error::from)?;
    let start = Arc::new(Barrier::new(buyers as usize));
    let tasks: Vec<_> = (0..buyers)
        .map(|i| {
            let (engine, store, one) = (engine.clone(), store.clone(), one.clone());
            let (start, reason) = (start.clone(), reason.clone());
            tokio::spawn(async move {
                if i % 2 == 0 {
                    let order_id = OrderId::new(format!("br-{run}-{i}"));
                    start.wait().await;
                    let request = ReserveRequest {
                        order_id: order_id?,
                        items: one,
                        ttl: Ttl::default(),
                    };
                    engine.reserve(&request).await.map(|_| false)
                } else {
                    match contender {
                        Contender::Served(_) => {
                            start.wait().await;
                            admin::adjust(&store, product, 1, &reason)
                                .await
                                .map(|_| true)
                        }
                        Contender::Naive(_) => {
                            naive_restock(&store.pool, product.get(), 1, &start, NAIVE_THINK)
                                .await
                                .map(|()| true)
                        }
                    }
                }
            })
        })
        .collect();
    let mut outcome = FillOutcome {
        limit,
        waiting,
        ..FillOutcome::default()
    };
    for answer in join_bounded(tasks).await? {
        match answer {
            Ok(true) => outcome.restocked += 1,
            Ok(false) => outcome.reserved += 1,
            Err(Error::InsufficientStock { .. }) => outcome.refused += 1,
            Err(e) => *outcome.errors.entry(error_kind(&e)).or_default() += 1,
        }
    }
    let after = admin::get(store, product).await?;
    outcome.final_available = after.available.into();
    outcome.final_reserved = after.reserved.into();
    outcome.final_backordered = after.backordered.into();
    let promised = outcome.waiting + outcome.reserved;
    outcome.past_limit = promised.saturating_sub(outcome.restocked + limit as u64);
    if after.available > 0 && after.backordered > 0 {
        outcome.unfilled = u64::from(after.available.min(after.backordered).unsigned_abs());
    }
    outcome.audit_divergences = crate::checks::stock_divergences(&store.pool).await?;
    Ok(outcome)
}

impl RunOutcome for FillOutcome {
    fn add_to(&self, report: &mut Report, run: u32) {
        report.add_sold(run, self.waiting + self.reserved);
        report.refused += self.refused;
        report.oversold += self.past_limit;
        report.runs_oversold += u32::from(self.past_limit > 0);
        report.add_errors(&self.errors);
        report.final_available = self.final_available;
        report.final_reserved = self.final_reserved;
        report.audit_divergences += self.audit_divergences;
        report.violations += u32::from(self.violated());
    }
}

/// Runs `runs` runs for each contender on `scratch`, telling `on_run` after every run.
pub async fn run_with_progress(
    scratch: &Scratch,
    buyers: u32,
    runs: u32,
    contenders: &[Contender],
    on_run: &(dyn Fn(RunDone<'_>) + Sync),
) -> Result<Vec<Report>, LabError> {
    let runs = Runs {
        scenario: Scenario::BackorderFill,
        buyers,
        stock_per_run: 0,
        runs,
    };
    run_contenders(
        scratch,
        runs,
        contenders,
        on_run,
        |store, contender, run| async move { run_on(&store, buyers, contender, run).await },
    )
    .await
}
