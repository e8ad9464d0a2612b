//! The `backorder-fill` scenario: restocks racing new reservations for a preorder. One run:
//! product 1 has no stock and a backorder limit; `buyers / 4` (at least 2) preorders wait in a
//! known arrival order; then `buyers` requests go at once from one starting line, even ones
//! reserving a unit, odd ones restocking one. Checks: units promised never pass stock + limit
//! (nor the limit on the row), no unit is left available while a backorder waits (every
//! arrival filled first), fills in arrival order and the books balance (the audit), and no
//! error reached a caller (e.g. a CHECK violation of available or the limit).
//!
//! The served strategies restock through `saldo::stock::admin::adjust` (the fill under the
//! row lock, oldest first) while their reservations race it. The naive restock
//! (`crate::naive::backorders`) reads, decides newest first in the application, thinks and
//! writes what it computed: it fails the same checks every run.

use std::collections::BTreeMap;

use saldo::domain::{OrderId, OrderItems, ProductId, Reason, Ttl};
use saldo::error::Error;
use saldo::stock::backorders::set_policy;
use saldo::stock::{admin, ReserveRequest, StockEngine, Store};

use crate::naive::backorders as naive;
use crate::race::contender::{Contender, RunOutcome};
use crate::race::fire::{at_once, books, out_of_stock, Answers};
use crate::race::types::{bounded, LabError, Report};

/// Most concurrent requests per run.
pub const MAX_FILL_BUYERS: u32 = 2_000;
/// Fewest: two reservations and two restocks.
pub const MIN_FILL_BUYERS: u32 = 4;
/// The preorder.
const PRODUCT: i64 = 1;

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

/// A request, ready at the starting line.
enum Ready {
    Reserve(ReserveRequest),
    Restock,
    /// The naive restock, its reads done and its fills decided.
    NaiveRestock(naive::Decision),
}

/// One unit of the preorder for order `order_id`.
fn one_unit(order_id: String) -> Result<ReserveRequest, Error> {
    Ok(ReserveRequest {
        order_id: OrderId::new(order_id)?,
        items: OrderItems::new([(PRODUCT, 1)])?,
        ttl: Ttl::default(),
        tags: saldo::domain::Tags::NONE,
    })
}

/// Request `i` of run `run`: a reservation (even `i`) or a restock by `contender` (odd `i`).
async fn ready(
    i: u32,
    run: u32,
    contender: Contender,
    pool: &deadpool_postgres::Pool,
) -> Result<Ready, Error> {
    Ok(match (i % 2, contender) {
        (0, _) => Ready::Reserve(one_unit(format!("br-{run}-{i}"))?),
        (_, Contender::Served(_)) => Ready::Restock,
        (_, Contender::Naive(_)) => Ready::NaiveRestock(naive::decide(pool, PRODUCT, 1).await?),
    })
}

/// Sends a ready request: true when it restocked, false when it reserved.
async fn go(ready: Ready, engine: &StockEngine, store: &Store) -> Result<bool, Error> {
    match ready {
        Ready::Reserve(request) => engine.reserve(&request).await.map(|_| false),
        Ready::Restock => {
            let reason = Reason::new("race restock")?;
            admin::adjust(store, ProductId::new(PRODUCT)?, 1, &reason)
                .await
                .map(|_| true)
        }
        Ready::NaiveRestock(decision) => naive::restock(&store.pool, PRODUCT, 1, decision)
            .await
            .map(|()| true),
    }
}

/// Runs the scenario once with `contender` on `store`'s database, which must hold nothing of
/// product 1 yet (a fresh or reset database).
pub async fn run_on(
    store: &Store,
    buyers: u32,
    contender: Contender,
    run: u32,
) -> Result<FillOutcome, LabError> {
    let (min, max) = (MIN_FILL_BUYERS.into(), MAX_FILL_BUYERS.into());
    bounded("buyers", buyers.into(), min, max)?;
    let waiting = u64::from((buyers / 4).max(2));
    // Room for the waiting preorders and about half the racing reservations: some are refused.
    let limit = waiting as i64 + i64::from(buyers / 4);
    let product = ProductId::new(PRODUCT).map_err(Error::from)?;
    admin::set_count(store, product, 0).await?;
    set_policy(store, product, limit).await?;
    let engine = contender.build(store);
    for i in 0..waiting {
        engine.reserve(&one_unit(format!("bw-{run}-{i}"))?).await?;
    }
    let racing = store.clone();
    let answers = at_once(
        buyers,
        |i| {
            let pool = store.pool.clone();
            async move { ready(i, run, contender, &pool).await }
        },
        move |_, ready| {
            let (engine, store) = (engine.clone(), racing.clone());
            async move { go(ready?, &engine, &store).await }
        },
    )
    .await?;
    let answers = Answers::sort(answers, out_of_stock);
    let books = books(store, &[PRODUCT]).await?;
    let reserved = answers.granted_where(|restocked| !restocked);
    let restocked = answers.granted_where(|restocked| *restocked);
    let promised = waiting + reserved;
    Ok(FillOutcome {
        limit,
        waiting,
        reserved,
        refused: answers.refused(),
        restocked,
        errors: answers.errors,
        final_available: books.available,
        final_reserved: books.reserved,
        final_backordered: books.backordered,
        past_limit: promised.saturating_sub(restocked + limit as u64),
        unfilled: if books.available > 0 && books.backordered > 0 {
            books.available.min(books.backordered).unsigned_abs()
        } else {
            0
        },
        audit_divergences: books.audit_divergences,
    })
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
