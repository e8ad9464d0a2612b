//! The `sales-vs-reservations` scenario (issue 15): direct sales (available straight to sold,
//! seed 000's slow-payment path) racing reservations for the last unit. One run: stock one
//! unit of product 1 and fire `buyers` requests at once, even ones reserving a unit, odd ones
//! buying it directly. At most one may get it, the refusals must be clean, and the audit
//! (which counts sold units) must come back empty.
//!
//! The served strategies sell through `saldo::stock::sales` (the condition inside the UPDATE,
//! on the row the reservations lock too). The naive seller reads `available`, decides in the
//! application, thinks and writes the value it computed from its read: every naive sale that
//! read the unit before anyone took it "sells" it, and overwrites what the others took.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use saldo::domain::{OrderId, OrderItems, ProductId, Quantity, SaleId, Ttl};
use saldo::error::Error;
use saldo::retry::checkout;
use saldo::stock::{admin, build, ReserveRequest, SaleRequest, StrategyConfig};
use tokio::sync::Barrier;

use crate::race::contender::{run_contenders, Contender, RunOutcome, Runs, StockFindings};
use crate::race::types::{bounded, error_kind, join_bounded, LabError, Report, RunDone, Scenario};
use crate::scratch::Scratch;

/// The naive seller's pause between its read and its write (a payment provider's callback).
pub const NAIVE_THINK: Duration = Duration::from_millis(50);
/// Most concurrent requests per run.
pub const MAX_SALE_BUYERS: u32 = 2_000;

/// The naive seller's name in `--strategy` and the reports.
pub const NAIVE_SALE: &str = "naive-sale";

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

const NAIVE_READ: &str = "SELECT available FROM stock WHERE product_id = $1";
const NAIVE_WRITE: &str = saldo::stock_update!("available = $2", "WHERE product_id = $1");

/// The naive sale: an unlocked read, the decision in the application, a pause, and a write of
/// the value computed from the read (a lost update). Its sale rows are written as saldo's.
/// `start` is the run's starting line, passed after the read: every naive sale reads before any
/// request of the run writes, so the lost update shows on every run instead of depending on
/// which connection was set up first.
async fn naive_sell(
    pool: &deadpool_postgres::Pool,
    request: &SaleRequest,
    start: &Barrier,
) -> Result<(), Error> {
    let decided = naive_read(pool, request).await;
    start.wait().await;
    let after = decided?;
    tokio::time::sleep(NAIVE_THINK).await;
    let client = checkout(pool, saldo::Operation::Lab).await?;
    client
        .execute(
            "INSERT INTO sales (sale_id) VALUES ($1)",
            &[&request.sale_id.as_str()],
        )
        .await?;
    for (product, quantity, available) in after {
        client
            .execute(NAIVE_WRITE, &[&product.get(), &available])
            .await?;
        client
            .execute(
                "INSERT INTO sale_items (sale_id, product_id, quantity) VALUES ($1, $2, $3)",
                &[&request.sale_id.as_str(), &product.get(), &quantity.get()],
            )
            .await?;
    }
    Ok(())
}

/// The naive seller's read and decision: what each product's `available` becomes, computed in
/// the application. The connection goes back to the pool before the run's starting line, so
/// waiting there holds none.
async fn naive_read(
    pool: &deadpool_postgres::Pool,
    request: &SaleRequest,
) -> Result<Vec<(ProductId, Quantity, i32)>, Error> {
    let client = checkout(pool, saldo::Operation::Lab).await?;
    let mut after = Vec::new();
    for (product, quantity) in request.items.iter() {
        let row = client
            .query_opt(NAIVE_READ, &[&product.get()])
            .await?
            .ok_or(Error::UnknownProduct(product))?;
        let available: i32 = row.try_get("available")?;
        if available < quantity.get() {
            return Err(Error::InsufficientStock {
                product_id: product,
                requested: quantity.get(),
                available,
            });
        }
        after.push((product, quantity, available - quantity.get()));
    }
    Ok(after)
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
    let product = ProductId::new(1).map_err(Error::from)?;
    admin::set_count(store, product, 1).await?;
    let engine = build(seller.engine(), store.clone(), &StrategyConfig::default());
    let one = OrderItems::new([(1, 1)]).map_err(Error::from)?;
    // Every request waits at one starting line (the naive sales after their read), so they go
    // at once however long each took to get a connection.
    let start = Arc::new(Barrier::new(buyers as usize));
    let tasks: Vec<_> = (0..buyers)
        .map(|i| {
            let (engine, pool, one) = (engine.clone(), store.pool.clone(), one.clone());
            let start = start.clone();
            tokio::spawn(async move {
                if i % 2 == 0 {
                    let order_id = OrderId::new(format!("sr-{run}-{i}"));
                    start.wait().await;
                    let request = ReserveRequest {
                        order_id: order_id?,
                        items: one,
                        ttl: Ttl::default(),
                    };
                    engine.reserve(&request).await.map(|_| false)
                } else {
                    let sale_id = match SaleId::new(format!("ss-{run}-{i}")) {
                        Ok(id) => id,
                        Err(e) => {
                            start.wait().await;
                            return Err(e.into());
                        }
                    };
                    let request = SaleRequest {
                        sale_id,
                        items: one,
                    };
                    match seller {
                        Contender::Served(_) => {
                            start.wait().await;
                            engine.sell(&request).await.map(|_| true)
                        }
                        Contender::Naive(_) => {
                            naive_sell(&pool, &request, &start).await.map(|_| true)
                        }
                    }
                }
            })
        })
        .collect();
    let mut outcome = SalesOutcome::default();
    for answer in join_bounded(tasks).await? {
        match answer {
            Ok(true) => outcome.sold += 1,
            Ok(false) => outcome.reserved += 1,
            Err(Error::InsufficientStock { .. }) => outcome.refused += 1,
            Err(e) => *outcome.errors.entry(error_kind(&e)).or_default() += 1,
        }
    }
    let after = admin::get(store, product).await?;
    outcome.final_available = after.available.into();
    outcome.final_reserved = after.reserved.into();
    outcome.audit_divergences = crate::checks::stock_divergences(&store.pool).await?;
    Ok(outcome)
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

/// Runs `runs` runs for each seller on `scratch`, telling `on_run` after every run.
pub async fn run_with_progress(
    scratch: &Scratch,
    buyers: u32,
    runs: u32,
    sellers: &[Contender],
    on_run: &(dyn Fn(RunDone<'_>) + Sync),
) -> Result<Vec<Report>, LabError> {
    let runs = Runs {
        scenario: Scenario::SalesVsReservations,
        buyers,
        stock_per_run: 1,
        runs,
    };
    run_contenders(
        scratch,
        runs,
        sellers,
        on_run,
        |store, seller, run| async move { run_on(&store, buyers, seller, run).await },
    )
    .await
}
