//! The `extend-vs-sweeper` scenario (issue 15): holds are extended while the sweeper expires
//! them, and every extension's answer must match what became of its hold. One run: stock
//! `orders` units of product 1, reserve one unit per order with a short hold ([`HOLD`]), then
//! extend each order at a staggered moment (some before the hold lapses, some after) while a
//! sweeper loops. Afterwards (and after a last sweep):
//!
//! - an extension answered "extended" must find its reservation still active (the sweeper did
//!   not expire it after all): otherwise the customer was told the units are held when they
//!   are gone — a *lost extension*;
//! - one answered "expired" must find it expired — a *wrong refusal* otherwise;
//! - `reserved` must equal the active units, and the audit must come back empty.
//!
//! The served strategies extend through `saldo::stock::extend` (rows locked, decided on what
//! was locked). The naive extender reads the hold, decides in the application, thinks
//! ([`NAIVE_THINK`], seed 000's slow call) and writes the new expiry without a condition: the
//! sweeper expires the hold in between and the extension "succeeds" on an expired row.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use saldo::domain::{MaxHold, OrderId, OrderItems, ProductId, Ttl};
use saldo::error::Error;
use saldo::retry::checkout;
use saldo::stock::{admin, build, sweeper, ReserveRequest, StrategyConfig};

use crate::race::contender::{run_contenders, Contender, RunOutcome, Runs};
use crate::race::types::{error_kind, join_bounded, LabError, Report, RunDone, Scenario};
use crate::scratch::Scratch;

/// How long each reservation is held before it is due.
pub const HOLD: Duration = Duration::from_millis(400);
/// Extensions start at `(i % STAGGER_SLOTS) × STAGGER_STEP` after the reservations: from well
/// before [`HOLD`] lapses to well after it.
const STAGGER_STEP: Duration = Duration::from_millis(80);
const STAGGER_SLOTS: u32 = 10;
/// The naive extender's pause between its read and its write; longer than [`HOLD`], so a hold
/// read as live is due (and swept) before the write.
pub const NAIVE_THINK: Duration = Duration::from_millis(600);
/// What each extension asks for.
const EXTEND_TTL_S: u64 = 600;
/// Sweeper rounds per run at most, [`SWEEP_EVERY`] apart (bounded: 10 s).
const MAX_SWEEP_ROUNDS: u32 = 500;
const SWEEP_EVERY: Duration = Duration::from_millis(20);
/// Most orders per run.
pub const MAX_EXTEND_ORDERS: u32 = 2_000;

/// The naive extender's name in `--strategy` and the reports.
pub const NAIVE_EXTEND: &str = "naive-extend";

/// What one run found.
#[derive(Debug, Clone, Default)]
pub struct ExtendOutcome {
    pub extended: u64,
    pub refused_expired: u64,
    /// Answered "extended", but the hold ended expired.
    pub lost_extensions: u64,
    /// Answered "expired", but the hold is still active.
    pub wrong_refusals: u64,
    pub errors: BTreeMap<String, u64>,
    pub final_available: i64,
    pub final_reserved: i64,
    pub active_units: i64,
    pub audit_divergences: u64,
}

impl ExtendOutcome {
    pub fn violated(&self) -> bool {
        self.lost_extensions > 0
            || self.wrong_refusals > 0
            || self.audit_divergences > 0
            || self.final_reserved != self.active_units
            || !self.errors.is_empty()
    }
}

/// The naive extension: an unlocked read, the decision in the application, a pause, and a
/// write that does not re-check what it decided on.
async fn naive_extend(
    pool: &deadpool_postgres::Pool,
    order_id: &OrderId,
    ttl_s: f64,
) -> Result<(), Error> {
    let client = checkout(pool, saldo::Operation::Lab).await?;
    let rows = client
        .query(
            "SELECT product_id, status, expires_at > now() AS live FROM reservations \
             WHERE order_id = $1",
            &[&order_id.as_str()],
        )
        .await?;
    if rows.is_empty() {
        return Err(Error::UnknownOrder(order_id.clone()));
    }
    for r in &rows {
        let status: String = r.try_get("status")?;
        let live: bool = r.try_get("live")?;
        if status != "active" || !live {
            return Err(Error::ReservationExpired {
                order_id: order_id.clone(),
                product_id: ProductId::new(r.try_get("product_id")?)?,
            });
        }
    }
    tokio::time::sleep(NAIVE_THINK).await;
    client
        .execute(
            "UPDATE reservations SET expires_at = now() + make_interval(secs => $2) \
             WHERE order_id = $1",
            &[&order_id.as_str(), &ttl_s],
        )
        .await?;
    Ok(())
}

fn order_id(run: u32, i: u32) -> Result<OrderId, Error> {
    Ok(OrderId::new(format!("ext-{run}-{i}"))?)
}

/// Runs the scenario once with `extender` on `store`'s database, which must hold nothing of
/// product 1 yet (a fresh or reset database).
pub async fn run_on(
    store: &saldo::stock::Store,
    orders: u32,
    extender: Contender,
    run: u32,
) -> Result<ExtendOutcome, LabError> {
    crate::race::types::bounded("orders", orders.into(), 1, MAX_EXTEND_ORDERS.into())?;
    let product = ProductId::new(1).map_err(Error::from)?;
    admin::set_count(store, product, orders.into()).await?;
    let engine = build(extender.engine(), store.clone(), &StrategyConfig::default());
    let hold = Ttl::from_millis(HOLD.as_millis() as u64).map_err(Error::from)?;
    // One after the other: each hold starts when it is granted (no wait on the row lock inside
    // its transaction), so the last ones are fresh when the first extensions start.
    for i in 0..orders {
        engine
            .reserve(&ReserveRequest {
                order_id: order_id(run, i)?,
                items: OrderItems::new([(1, 1)]).map_err(Error::from)?,
                ttl: hold,
            })
            .await?;
    }

    let done = Arc::new(AtomicBool::new(false));
    let sweeper_task = {
        let (store, done) = (store.clone(), done.clone());
        tokio::spawn(async move {
            for _ in 0..MAX_SWEEP_ROUNDS {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                sweeper::sweep(&store).await?;
                tokio::time::sleep(SWEEP_EVERY).await;
            }
            Ok::<(), Error>(())
        })
    };
    let ttl = Ttl::from_secs(EXTEND_TTL_S).map_err(Error::from)?;
    let tasks: Vec<_> = (0..orders)
        .map(|i| {
            let (engine, pool) = (engine.clone(), store.pool.clone());
            tokio::spawn(async move {
                tokio::time::sleep(STAGGER_STEP * (i % STAGGER_SLOTS)).await;
                let id = order_id(run, i)?;
                match extender {
                    Contender::Served(_) => engine
                        .extend(&id, ttl, MaxHold::default())
                        .await
                        .map(|_| ()),
                    Contender::Naive(_) => naive_extend(&pool, &id, EXTEND_TTL_S as f64).await,
                }
            })
        })
        .collect();
    let answers = join_bounded(tasks).await;
    done.store(true, Ordering::Relaxed);
    let swept = join_bounded(vec![sweeper_task]).await;
    let answers = answers?;
    for s in swept? {
        s?;
    }
    sweeper::sweep(store).await?;

    let client = checkout(&store.pool, saldo::Operation::Lab).await?;
    let rows = client
        .query(
            "SELECT order_id, status FROM reservations WHERE order_id LIKE $1",
            &[&format!("ext-{run}-%")],
        )
        .await
        .map_err(Error::from)?;
    let mut status: BTreeMap<String, String> = BTreeMap::new();
    for r in rows {
        status.insert(r.get("order_id"), r.get("status"));
    }
    let mut outcome = ExtendOutcome::default();
    for (i, answer) in answers.iter().enumerate() {
        let id = order_id(run, i as u32)?;
        let ended = status.get(id.as_str()).map(String::as_str);
        match answer {
            Ok(()) => {
                outcome.extended += 1;
                outcome.lost_extensions += u64::from(ended != Some("active"));
            }
            Err(Error::ReservationExpired { .. }) => {
                outcome.refused_expired += 1;
                outcome.wrong_refusals += u64::from(ended != Some("expired"));
            }
            Err(e) => *outcome.errors.entry(error_kind(e)).or_default() += 1,
        }
    }
    let after = admin::get(store, product).await?;
    outcome.final_available = after.available.into();
    outcome.final_reserved = after.reserved.into();
    outcome.active_units = status.values().filter(|s| *s == "active").count() as i64;
    outcome.audit_divergences = crate::checks::stock_divergences(&store.pool).await?;
    Ok(outcome)
}

impl RunOutcome for ExtendOutcome {
    /// "Sold" is extensions granted, "refused" those refused as expired.
    fn add_to(&self, report: &mut Report, run: u32) {
        report.add_sold(run, self.extended);
        report.refused += self.refused_expired;
        *report.wrong_answers.get_or_insert(0) += self.lost_extensions + self.wrong_refusals;
        report.add_errors(&self.errors);
        report.final_available = self.final_available;
        report.final_reserved = self.final_reserved;
        report.audit_divergences += self.audit_divergences;
        report.violations += u32::from(self.violated());
    }
}

/// Runs `runs` runs for each extender on `scratch`, telling `on_run` after every run.
pub async fn run_with_progress(
    scratch: &Scratch,
    orders: u32,
    runs: u32,
    extenders: &[Contender],
    on_run: &(dyn Fn(RunDone<'_>) + Sync),
) -> Result<Vec<Report>, LabError> {
    let runs = Runs {
        scenario: Scenario::ExtendVsSweeper,
        buyers: orders,
        stock_per_run: orders.into(),
        runs,
    };
    run_contenders(
        scratch,
        runs,
        extenders,
        on_run,
        |store, extender, run| async move { run_on(&store, orders, extender, run).await },
    )
    .await
}
