//! The `sales-vs-reservations` scenario: direct sales (available straight to sold, the
//! last-unit race's slow-payment path) racing reservations for the last unit. One run: stock
//! one unit of product 1 and fire `buyers` requests at once, even ones reserving a unit, odd
//! ones buying it directly. At most one may get it, the refusals must be clean, and the audit
//! (which counts sold units) must come back empty.
//!
//! The served strategies sell through `saldo::stock::sales` (the condition inside the UPDATE,
//! on the row the reservations lock too); the naive seller is `crate::naive::sales`.

use std::collections::BTreeMap;

use saldo::domain::{OrderId, OrderItems, ProductId, SaleId, Ttl};
use saldo::error::Error;
use saldo::stock::{admin, ReserveRequest, SaleRequest, StockEngine};

use crate::naive::sales as naive;
use crate::race::contender::{Contender, RunOutcome, StockFindings};
use crate::race::fire::{at_once, books, out_of_stock, Answers};
use crate::race::types::{bounded, LabError, Report};

/// Most concurrent requests per run.
pub const MAX_SALE_BUYERS: u32 = 2_000;

/// What one run found.
#[derive(Debug, Clone, Default)]
pub struct SalesOutcome {
    pub reserved: u64,
    pub sold: u64,
    pub refused: u64,
    pub errors: BTreeMap<String, u64>,
    pub final_available: i64,
    pub final_reserved: i64,
    pub audit_divergences: u64,
}

impl SalesOutcome {
    /// Units granted beyond the one in stock.
    pub fn oversold(&self) -> u64 {
        (self.reserved + self.sold).saturating_sub(1)
    }

    pub fn violated(&self) -> bool {
        self.oversold() > 0 || self.audit_divergences > 0 || !self.errors.is_empty()
    }
}

/// A request, ready at the starting line.
enum Ready {
    Reserve(ReserveRequest),
    Sell(SaleRequest),
    /// The naive sale, its read done and its decision taken.
    NaiveSell(SaleRequest, naive::Decision),
}

/// Request `i` of run `run`: a reservation (even `i`) or a sale by `seller` (odd `i`).
async fn ready(
    i: u32,
    run: u32,
    seller: Contender,
    pool: &deadpool_postgres::Pool,
) -> Result<Ready, Error> {
    let one = OrderItems::new([(1, 1)])?;
    if i % 2 == 0 {
        return Ok(Ready::Reserve(ReserveRequest {
            order_id: OrderId::new(format!("sr-{run}-{i}"))?,
            items: one,
            ttl: Ttl::default(),
            tags: saldo::domain::Tags::NONE,
        }));
    }
    let request = SaleRequest {
        sale_id: SaleId::new(format!("ss-{run}-{i}"))?,
        items: one,
        tags: saldo::domain::Tags::NONE,
    };
    Ok(match seller {
        Contender::Served(_) => Ready::Sell(request),
        Contender::Naive(_) => {
            let decision = naive::decide(pool, &request).await?;
            Ready::NaiveSell(request, decision)
        }
    })
}

/// Sends a ready request: true when it sold, false when it reserved.
async fn go(
    ready: Ready,
    engine: &StockEngine,
    pool: &deadpool_postgres::Pool,
) -> Result<bool, Error> {
    match ready {
        Ready::Reserve(request) => engine.reserve(&request).await.map(|_| false),
        Ready::Sell(request) => engine.sell(&request).await.map(|_| true),
        Ready::NaiveSell(request, decision) => {
            naive::sell(pool, &request, decision).await.map(|()| true)
        }
    }
}

/// Runs the scenario once with `seller` on `store`'s database, which must hold nothing of
/// product 1 yet (a fresh or reset database).
pub async fn run_on(
    store: &saldo::stock::Store,
    buyers: u32,
    seller: Contender,
    run: u32,
) -> Result<SalesOutcome, LabError> {
    bounded("buyers", buyers.into(), 2, MAX_SALE_BUYERS.into())?;
    admin::set_count(store, ProductId::new(1).map_err(Error::from)?, 1).await?;
    let (engine, pool) = (seller.build(store), store.pool.clone());
    let answers = at_once(
        buyers,
        |i| {
            let pool = store.pool.clone();
            async move { ready(i, run, seller, &pool).await }
        },
        move |_, ready| {
            let (engine, pool) = (engine.clone(), pool.clone());
            async move { go(ready?, &engine, &pool).await }
        },
    )
    .await?;
    let answers = Answers::sort(answers, out_of_stock);
    let books = books(store, &[1]).await?;
    Ok(SalesOutcome {
        reserved: answers.granted_where(|sold| !sold),
        sold: answers.granted_where(|sold| *sold),
        refused: answers.refused(),
        errors: answers.errors,
        final_available: books.available,
        final_reserved: books.reserved,
        audit_divergences: books.audit_divergences,
    })
}

impl RunOutcome for SalesOutcome {
    fn add_to(&self, report: &mut Report, run: u32) {
        StockFindings {
            sold: self.reserved + self.sold,
            refused: self.refused,
            oversold: self.oversold(),
            errors: &self.errors,
            final_available: self.final_available,
            final_reserved: self.final_reserved,
            audit_divergences: self.audit_divergences,
            violated: self.violated(),
        }
        .add_to(report, run);
    }
}
