//! The `extend-vs-sweeper` scenario: holds are extended while the sweeper expires them, and
//! every extension's answer must match what became of its hold. One run: stock `orders` units
//! of product 1, reserve one unit per order with a short hold ([`HOLD`]), then extend each
//! order at a staggered moment (some before the hold lapses, some after) while a sweeper
//! loops. Afterwards (and after a last sweep):
//!
//! - an extension answered "extended" must find its reservation still active (the sweeper did
//!   not expire it after all): otherwise the customer was told the units are held when they
//!   are gone — a *lost extension*;
//! - one answered "expired" must find it expired — a *wrong refusal* otherwise;
//! - `reserved` must equal the active units, and the audit must come back empty.
//!
//! The served strategies extend through `saldo::stock::extend` (rows locked, decided on what
//! was locked); the naive extender is `crate::naive::extend`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use saldo::domain::{MaxHold, OrderId, OrderItems, ProductId, Ttl};
use saldo::error::Error;
use saldo::stock::{admin, sweeper, ReserveRequest, StockEngine, Store};
use tokio::task::JoinHandle;

use crate::naive::extend as naive;
use crate::race::contender::{Contender, RunOutcome};
use crate::race::fire::{at_once, books, Answers};
use crate::race::types::{bounded, join_bounded, LabError, Report};

/// How long each reservation is held before it is due.
pub const HOLD: Duration = Duration::from_millis(400);
/// Extensions start at `(i % STAGGER_SLOTS) × STAGGER_STEP` after the starting line: from
/// well before [`HOLD`] lapses to well after it.
const STAGGER_STEP: Duration = Duration::from_millis(80);
const STAGGER_SLOTS: u32 = 10;
/// What each extension asks for.
const EXTEND_TTL_S: u64 = 600;
/// Sweeper rounds per run at most, [`SWEEP_EVERY`] apart (bounded: 10 s).
const MAX_SWEEP_ROUNDS: u32 = 500;
const SWEEP_EVERY: Duration = Duration::from_millis(20);
/// Most orders per run.
pub const MAX_EXTEND_ORDERS: u32 = 2_000;

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

fn order_id(run: u32, i: u32) -> Result<OrderId, Error> {
    Ok(OrderId::new(format!("ext-{run}-{i}"))?)
}

/// Holds one unit for each of `orders` orders, one after the other: each hold starts when it
/// is granted (no wait on the row lock inside its transaction), so the last ones are fresh
/// when the first extensions start.
async fn hold_each(engine: &StockEngine, orders: u32, run: u32) -> Result<(), Error> {
    let hold = Ttl::from_millis(HOLD.as_millis() as u64)?;
    for i in 0..orders {
        let request = ReserveRequest {
            order_id: order_id(run, i)?,
            items: OrderItems::new([(1, 1)])?,
            ttl: hold,
            tags: saldo::domain::Tags::NONE,
        };
        engine.reserve(&request).await?;
    }
    Ok(())
}

/// The sweeper, looping until `done` (at most [`MAX_SWEEP_ROUNDS`] rounds).
fn sweep_until(store: Store, done: Arc<AtomicBool>) -> JoinHandle<Result<(), Error>> {
    tokio::spawn(async move {
        for _ in 0..MAX_SWEEP_ROUNDS {
            if done.load(Ordering::Relaxed) {
                break;
            }
            sweeper::sweep(&store).await?;
            tokio::time::sleep(SWEEP_EVERY).await;
        }
        Ok(())
    })
}

/// Extends order `i` at its staggered moment, the served way or the naive one.
async fn extend(
    i: u32,
    run: u32,
    extender: Contender,
    engine: &StockEngine,
    pool: &deadpool_postgres::Pool,
) -> Result<(), Error> {
    tokio::time::sleep(STAGGER_STEP * (i % STAGGER_SLOTS)).await;
    let id = order_id(run, i)?;
    match extender {
        Contender::Served(_) => {
            let ttl = Ttl::from_secs(EXTEND_TTL_S)?;
            engine
                .extend(&id, ttl, MaxHold::default())
                .await
                .map(|_| ())
        }
        Contender::Naive(_) => naive::extend(pool, &id, EXTEND_TTL_S as f64).await,
    }
}

/// Runs the scenario once with `extender` on `store`'s database, which must hold nothing of
/// product 1 yet (a fresh or reset database).
pub async fn run_on(
    store: &Store,
    orders: u32,
    extender: Contender,
    run: u32,
) -> Result<ExtendOutcome, LabError> {
    bounded("orders", orders.into(), 1, MAX_EXTEND_ORDERS.into())?;
    let product = ProductId::new(1).map_err(Error::from)?;
    admin::set_count(store, product, orders.into()).await?;
    let engine = extender.build(store);
    hold_each(&engine, orders, run).await?;
    let done = Arc::new(AtomicBool::new(false));
    let sweeping = sweep_until(store.clone(), done.clone());
    let pool = store.pool.clone();
    let answers = at_once(
        orders,
        |_| async {},
        move |i, ()| {
            let (engine, pool) = (engine.clone(), pool.clone());
            async move { extend(i, run, extender, &engine, &pool).await }
        },
    )
    .await;
    done.store(true, Ordering::Relaxed);
    let swept = join_bounded(vec![sweeping]).await;
    let answers = answers?;
    for s in swept? {
        s?;
    }
    sweeper::sweep(store).await?;
    judge(store, run, answers).await
}

/// What became of each hold against what its extension was told.
async fn judge(
    store: &Store,
    run: u32,
    answers: Vec<Result<(), Error>>,
) -> Result<ExtendOutcome, LabError> {
    let status = crate::checks::reservation_statuses(&store.pool, &format!("ext-{run}-")).await?;
    let ended = |i: u32| -> Result<Option<&str>, Error> {
        Ok(status.get(order_id(run, i)?.as_str()).map(String::as_str))
    };
    let expired = |e: &Error| matches!(e, Error::ReservationExpired { .. });
    let answers = Answers::sort(answers, expired);
    let mut outcome = ExtendOutcome::default();
    for &(i, ()) in &answers.granted {
        outcome.extended += 1;
        outcome.lost_extensions += u64::from(ended(i)? != Some("active"));
    }
    for &i in &answers.refused {
        outcome.refused_expired += 1;
        outcome.wrong_refusals += u64::from(ended(i)? != Some("expired"));
    }
    let books = books(store, &[1]).await?;
    outcome.errors = answers.errors;
    outcome.final_available = books.available;
    outcome.final_reserved = books.reserved;
    outcome.active_units = status.values().filter(|s| *s == "active").count() as i64;
    outcome.audit_divergences = books.audit_divergences;
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
