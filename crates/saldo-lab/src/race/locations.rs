//! The `split-locations` scenario: orders allocated across three locations of two products
//! under contention. One run: stock product 1 at locations `a`, `b`, `c` (4, 3, 3) and product
//! 2 (3, 3, 4), then fire `buyers` orders at once: a third take 2 units of product 1 (split
//! across locations as they run dry), the others cross both products, one unit of each, half
//! naming them in the opposite order. Checked after the run: no location handed out more than
//! it held (units conserved per location), each product's row is the sum of its locations,
//! every granted order is allocated in full and every refused one left no row (all or
//! nothing), no error (deadlock included) reached a buyer, and the audit (with its location
//! invariants) is empty.
//!
//! The served strategies all reach the one located path (`saldo::stock::locations`): stock
//! rows locked in product order, then location rows in (product, location) order, decided in
//! memory. The naive variant is `crate::naive::locations`.

use std::collections::{BTreeMap, BTreeSet};

use saldo::domain::{LocationId, OrderId, OrderItems, ProductId, Ttl};
use saldo::error::Error;
use saldo::stock::{locations, ReserveRequest, StockEngine, Store};

use crate::naive::locations as naive;
use crate::race::contender::{Contender, RunOutcome, StockFindings};
use crate::race::fire::{at_once, books, out_of_stock, Answers};
use crate::race::types::{bounded, LabError, Report};

/// Most concurrent orders per run.
pub const MAX_LOCATION_BUYERS: u32 = 2_000;
/// What each run stocks: (product, location, count).
pub const STOCKED: [(i64, &str, i64); 6] = [
    (1, "a", 4),
    (1, "b", 3),
    (1, "c", 3),
    (2, "a", 3),
    (2, "b", 3),
    (2, "c", 4),
];

/// Units each run stocks, over every location.
pub fn stocked_units() -> i64 {
    STOCKED.iter().map(|s| s.2).sum()
}

/// What one run found.
#[derive(Debug, Clone, Default)]
pub struct LocationsOutcome {
    pub granted_orders: u64,
    pub granted_units: u64,
    pub refused: u64,
    pub errors: BTreeMap<String, u64>,
    /// Units handed out beyond what a location held, summed over locations.
    pub location_oversold: u64,
    /// Granted orders whose allocations do not add up, plus refused orders that left rows.
    pub partial_orders: u64,
    pub final_available: i64,
    pub final_reserved: i64,
    pub audit_divergences: u64,
}

impl LocationsOutcome {
    pub fn violated(&self) -> bool {
        self.location_oversold > 0
            || self.partial_orders > 0
            || self.audit_divergences > 0
            || !self.errors.is_empty()
    }
}

/// The order of buyer `i`: (product, quantity) in the order the buyer names them.
fn items_of(i: u32) -> &'static [(i64, i64)] {
    match i % 3 {
        0 => &[(1, 2)],
        1 => &[(1, 1), (2, 1)],
        _ => &[(2, 1), (1, 1)],
    }
}

fn order_of(run: u32, i: u32) -> String {
    format!("sl-{run}-{i}")
}

/// A request, ready at the starting line.
enum Ready {
    Reserve(ReserveRequest),
    /// The naive reservation, its reads done and its allocation decided.
    Naive(String, Vec<naive::Item>),
}

/// Buyer `i`'s order in run `run`, as `contender` makes it.
async fn ready(
    i: u32,
    run: u32,
    contender: Contender,
    pool: &deadpool_postgres::Pool,
) -> Result<Ready, Error> {
    Ok(match contender {
        Contender::Served(_) => Ready::Reserve(ReserveRequest {
            order_id: OrderId::new(order_of(run, i))?,
            items: OrderItems::new(items_of(i).iter().copied())?,
            ttl: Ttl::default(),
            tags: saldo::domain::Tags::NONE,
        }),
        Contender::Naive(_) => {
            Ready::Naive(order_of(run, i), naive::decide(pool, items_of(i)).await?)
        }
    })
}

async fn go(
    ready: Ready,
    engine: &StockEngine,
    pool: &deadpool_postgres::Pool,
) -> Result<(), Error> {
    match ready {
        Ready::Reserve(request) => engine.reserve(&request).await.map(|_| ()),
        Ready::Naive(order_id, decided) => naive::reserve(pool, &order_id, decided).await,
    }
}

/// Runs the scenario once with `contender` on `store`'s database, which must hold nothing yet
/// (a fresh or reset database).
pub async fn run_on(
    store: &Store,
    buyers: u32,
    contender: Contender,
    run: u32,
) -> Result<LocationsOutcome, LabError> {
    bounded("buyers", buyers.into(), 2, MAX_LOCATION_BUYERS.into())?;
    for (product, location, count) in STOCKED {
        let location = LocationId::new(location).map_err(Error::from)?;
        let product = ProductId::new(product).map_err(Error::from)?;
        locations::set_count(store, product, &location, count).await?;
    }
    let (engine, pool) = (contender.build(store), store.pool.clone());
    let answers = at_once(
        buyers,
        |i| {
            let pool = store.pool.clone();
            async move { ready(i, run, contender, &pool).await }
        },
        move |_, ready| {
            let (engine, pool) = (engine.clone(), pool.clone());
            async move { go(ready?, &engine, &pool).await }
        },
    )
    .await?;
    let answers = Answers::sort(answers, out_of_stock);
    let granted: BTreeSet<u32> = answers.granted.iter().map(|&(i, ())| i).collect();
    let books = books(store, &[1, 2]).await?;
    Ok(LocationsOutcome {
        granted_orders: granted.len() as u64,
        granted_units: granted
            .iter()
            .flat_map(|&i| items_of(i))
            .map(|&(_, q)| q as u64)
            .sum(),
        refused: answers.refused(),
        errors: answers.errors,
        location_oversold: location_oversold(store).await?,
        partial_orders: partial_orders(store, run, buyers, &granted).await?,
        final_available: books.available,
        final_reserved: books.reserved,
        audit_divergences: books.audit_divergences,
    })
}

/// Units the locations handed out beyond what they held (nothing is confirmed in a run).
async fn location_oversold(store: &Store) -> Result<u64, LabError> {
    let stocked: BTreeMap<(i64, &str), i64> =
        STOCKED.iter().map(|&(p, l, c)| ((p, l), c)).collect();
    let mut oversold = 0;
    for at in crate::checks::location_allocations(&store.pool).await? {
        let held = stocked
            .get(&(at.product_id, at.location_id.as_str()))
            .copied()
            .unwrap_or(0);
        oversold += u64::try_from(at.allocated - held).unwrap_or(0);
    }
    Ok(oversold)
}

/// All or nothing, counted: reservation rows whose allocations do not add up to their
/// quantity, plus orders of the run with another number of rows than they should have (one
/// per item when granted, none when refused).
async fn partial_orders(
    store: &Store,
    run: u32,
    buyers: u32,
    granted: &BTreeSet<u32>,
) -> Result<u64, LabError> {
    let mut partial = 0;
    let mut rows_of: BTreeMap<String, u64> = BTreeMap::new();
    for row in crate::checks::row_allocations(&store.pool).await? {
        partial += u64::from(row.quantity != row.allocated);
        *rows_of.entry(row.order_id).or_default() += 1;
    }
    for i in 0..buyers {
        let rows = rows_of.get(&order_of(run, i)).copied().unwrap_or(0);
        let expected = if granted.contains(&i) {
            items_of(i).len() as u64
        } else {
            0
        };
        partial += u64::from(rows != expected);
    }
    Ok(partial)
}

impl RunOutcome for LocationsOutcome {
    fn add_to(&self, report: &mut Report, run: u32) {
        StockFindings {
            sold: self.granted_units,
            refused: self.refused,
            oversold: self.location_oversold,
            errors: &self.errors,
            final_available: self.final_available,
            final_reserved: self.final_reserved,
            // Partial orders count with the audit's findings: both are broken books.
            audit_divergences: self.audit_divergences + self.partial_orders,
            violated: self.violated(),
        }
        .add_to(report, run);
    }
}
