//! The buyers of one run: every order fired at once ([`buy_all`]) and what they were told
//! ([`Tally`]), shared by the stock and late-retry scenarios and by the contract tests.

use std::collections::BTreeMap;

use saldo::domain::{OrderId, OrderItems, ProductId, Ttl};
use saldo::error::Error;
use saldo::stock::{Reservation, ReserveRequest, StockEngine};
use tokio_postgres::error::SqlState;

use crate::race::types::{error_kind, join_bounded, LabError, Report};

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
/// of orders and by [`RUN_TIMEOUT`](crate::race::types::RUN_TIMEOUT).
pub async fn buy_all(
    engine: &StockEngine,
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

/// The last-unit race in its simplest form: `buyers` orders (`buyer-0`, `buyer-1`, …) of one unit
/// of product 1, all at once, and what they were told. The contract suites (safe and naive)
/// run it; the lab's `last-unit` scenario builds its own orders per run.
pub async fn one_unit_each(engine: &StockEngine, buyers: usize) -> Result<Tally, LabError> {
    let mut orders = Vec::with_capacity(buyers);
    for i in 0..buyers {
        orders.push(ReserveRequest {
            order_id: OrderId::new(format!("buyer-{i}")).map_err(Error::from)?,
            items: OrderItems::new([(1, 1)]).map_err(Error::from)?,
            ttl: Ttl::default(),
            tags: saldo::domain::Tags::NONE,
        });
    }
    let results = buy_all(engine, &orders).await?;
    Ok(Tally::of(&orders, &results))
}

impl Tally {
    /// Adds what one run's buyers were told to `report`: refusals, conflicts, errors.
    pub fn add_to(&self, report: &mut Report) {
        report.refused += self.refused;
        report.conflicts += self.conflicts;
        report.add_errors(&self.errors);
    }
}
