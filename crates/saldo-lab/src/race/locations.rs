//! The `split-locations` scenario (issue 15): orders allocated across three locations of two
//! products under contention. One run: stock product 1 at locations `a`, `b`, `c` (4, 3, 3)
//! and product 2 (3, 3, 4), then fire `buyers` orders at once: a third take 2 units of
//! product 1 (split across locations as they run dry), the others cross both products, one
//! unit of each, half naming them in the opposite order. Checked after the run: no location
//! handed out more than it held (units conserved per location), each product's row is the sum
//! of its locations, every granted order is allocated in full and every refused one left no
//! row (all or nothing), no error (deadlock included) reached a buyer, and the audit (with its
//! location invariants) is empty.
//!
//! The served strategies all reach the one located path (`saldo::stock::locations`): stock
//! rows locked in product order, then location rows in (product, location) order, decided in
//! memory. The naive variant (`naive-locations`) does what shop platforms did (Medusa #14987):
//! it reads the locations unlocked, allocates in the application, and writes the values it
//! computed from its read, so every buyer that read before the others wrote takes the same
//! units.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use saldo::domain::{AllocationMode, LocationId, OrderId, OrderItems, ProductId, Ttl};
use saldo::error::Error;
use saldo::retry::checkout;
use saldo::stock::allocate::{allocate, Shortfall, Source};
use saldo::stock::locations;
use saldo::stock::{build, ReserveRequest, StrategyConfig};
use tokio::sync::Barrier;

use crate::race::contender::{run_contenders, Contender, RunOutcome, Runs, StockFindings};
use crate::race::types::{bounded, error_kind, join_bounded, LabError, Report, RunDone, Scenario};
use crate::scratch::Scratch;

/// The naive variant's name in `--strategy` and the reports.
pub const NAIVE_LOCATIONS: &str = "naive-locations";
/// Most concurrent orders per run.
pub const MAX_LOCATION_BUYERS: u32 = 2_000;
/// The naive allocator's pause between its read and its write.
pub const NAIVE_THINK: Duration = Duration::from_millis(20);
/// What each run stocks: (product, location, count).
pub const STOCKED: [(i64, &str, i64); 6] = [
    (1, "a", 4),
    (1, "b", 3),
    (1, "c", 3),
    (2, "a", 3),
    (2, "b", 3),
    (2, "c", 4),
];

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

const NAIVE_READ: &str = "SELECT sl.location_id, sl.available, sl.reserved, l.priority \
     FROM stock_locations sl JOIN locations l USING (location_id) WHERE sl.product_id = $1";
const NAIVE_WRITE_LOCATION: &str = "UPDATE stock_locations SET available = $3, reserved = $4 \
     WHERE product_id = $1 AND location_id = $2";
const NAIVE_WRITE_STOCK: &str = saldo::stock_update!(
    "available = available - $2, reserved = reserved + $2",
    "WHERE product_id = $1"
);
/// The reservation row and its allocations, as the engine would write them.
const NAIVE_INSERT_ROW: &str = "WITH r AS ( \
       INSERT INTO reservations (id, order_id, product_id, quantity, expires_at, allocated) \
       VALUES (gen_random_uuid(), $1, $2, $3, now() + interval '15 minutes', true) \
       RETURNING id, product_id) \
     INSERT INTO reservation_allocations (reservation_id, product_id, location_id, quantity) \
     SELECT r.id, r.product_id, g.location_id, g.quantity \
       FROM r, unnest($4::text[], $5::int[]) AS g(location_id, quantity)";

/// One item as the naive allocator decided it: the locations' values it computed from its read.
struct NaiveItem {
    product: i64,
    quantity: i32,
    /// (location, quantity taken, available after, reserved after), all computed from the read.
    parts: Vec<(String, i32, i32, i32)>,
}

/// The naive reserve: an unlocked read of each product's locations, the allocation decided in
/// the application, the run's starting line, a pause, and blind writes of the computed values.
async fn naive_reserve(
    pool: &deadpool_postgres::Pool,
    order_id: &str,
    items: &[(i64, i64)],
    start: &Barrier,
) -> Result<(), Error> {
    let decided = naive_decide(pool, items).await;
    start.wait().await;
    let decided = decided?;
    tokio::time::sleep(NAIVE_THINK).await;
    let client = checkout(pool, saldo::Operation::Lab).await?;
    for item in &decided {
        for (location, _, available, reserved) in &item.parts {
            client
                .execute(
                    NAIVE_WRITE_LOCATION,
                    &[&item.product, &location.as_str(), available, reserved],
                )
                .await?;
        }
        client
            .execute(NAIVE_WRITE_STOCK, &[&item.product, &item.quantity])
            .await?;
        let locations: Vec<&str> = item.parts.iter().map(|p| p.0.as_str()).collect();
        let taken: Vec<i32> = item.parts.iter().map(|p| p.1).collect();
        client
            .execute(
                NAIVE_INSERT_ROW,
                &[&order_id, &item.product, &item.quantity, &locations, &taken],
            )
            .await?;
    }
    Ok(())
}

async fn naive_decide(
    pool: &deadpool_postgres::Pool,
    items: &[(i64, i64)],
) -> Result<Vec<NaiveItem>, Error> {
    let client = checkout(pool, saldo::Operation::Lab).await?;
    let mut out = Vec::with_capacity(items.len());
    for &(product, quantity) in items {
        let product_id = ProductId::new(product)?;
        let quantity = saldo::domain::Quantity::new(quantity)?.get();
        let mut seen: BTreeMap<String, (i32, i32)> = BTreeMap::new();
        let mut sources = Vec::new();
        for r in client.query(NAIVE_READ, &[&product]).await? {
            let id: String = r.try_get("location_id")?;
            let (available, reserved): (i32, i32) =
                (r.try_get("available")?, r.try_get("reserved")?);
            seen.insert(id.clone(), (available, reserved));
            sources.push(Source {
                location_id: LocationId::new(id)?,
                priority: r.try_get("priority")?,
                available,
            });
        }
        let parts = match allocate(quantity, AllocationMode::Split, None, &sources) {
            Ok(parts) => parts,
            Err(Shortfall::Insufficient { available }) => {
                return Err(Error::InsufficientStock {
                    product_id,
                    requested: quantity,
                    available,
                })
            }
            Err(Shortfall::UnknownLocation) => return Err(Error::UnknownProduct(product_id)),
        };
        let parts = parts
            .into_iter()
            .map(|(location, taken)| {
                let (available, reserved) =
                    seen.get(location.as_str()).copied().unwrap_or_default();
                (
                    location.as_str().to_owned(),
                    taken,
                    available - taken,
                    reserved + taken,
                )
            })
            .collect();
        out.push(NaiveItem {
            product,
            quantity,
            parts,
        });
    }
    Ok(out)
}

/// Per (product, location): units on hand now, and units allocated by live reservations.
const LOCATION_CHECK: &str = "SELECT sl.product_id, sl.location_id, \
            (sl.available + sl.reserved)::bigint AS on_hand, \
            coalesce((SELECT sum(a.quantity) FROM reservation_allocations a \
                       JOIN reservations r ON r.id = a.reservation_id \
                      WHERE a.product_id = sl.product_id AND a.location_id = sl.location_id \
                        AND r.status = 'active'), 0)::bigint AS allocated \
       FROM stock_locations sl ORDER BY sl.product_id, sl.location_id";
/// Per order: its rows' quantities and what their allocations add up to.
const ORDER_CHECK: &str = "SELECT r.order_id, r.product_id, r.quantity::bigint AS quantity, \
            coalesce(sum(a.quantity), 0)::bigint AS allocated \
       FROM reservations r LEFT JOIN reservation_allocations a ON a.reservation_id = r.id \
      GROUP BY r.id, r.order_id, r.product_id, r.quantity";

/// Runs the scenario once with `contender` on `store`'s database, which must hold nothing yet
/// (a fresh or reset database).
pub async fn run_on(
    store: &saldo::stock::Store,
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
    let engine = build(
        contender.engine(),
        store.clone(),
        &StrategyConfig::default(),
    );
    let start = Arc::new(Barrier::new(buyers as usize));
    let tasks: Vec<_> = (0..buyers)
        .map(|i| {
            let (engine, pool, start) = (engine.clone(), store.pool.clone(), start.clone());
            tokio::spawn(async move {
                let order_id = format!("sl-{run}-{i}");
                let items = items_of(i);
                let answer = match contender {
                    Contender::Served(_) => {
                        let request = match (
                            OrderId::new(order_id),
                            OrderItems::new(items.iter().copied()),
                        ) {
                            (Ok(order_id), Ok(items)) => Ok(ReserveRequest {
                                order_id,
                                items,
                                ttl: Ttl::default(),
                            }),
                            (Err(e), _) | (_, Err(e)) => Err(Error::from(e)),
                        };
                        start.wait().await;
                        match request {
                            Ok(request) => engine.reserve(&request).await.map(|_| ()),
                            Err(e) => Err(e),
                        }
                    }
                    Contender::Naive(_) => naive_reserve(&pool, &order_id, items, &start).await,
                };
                (items, answer)
            })
        })
        .collect();
    let mut outcome = LocationsOutcome::default();
    let mut granted: Vec<String> = Vec::new();
    for (i, (items, answer)) in join_bounded(tasks).await?.into_iter().enumerate() {
        match answer {
            Ok(()) => {
                outcome.granted_orders += 1;
                outcome.granted_units += items.iter().map(|&(_, q)| q as u64).sum::<u64>();
                granted.push(format!("sl-{run}-{i}"));
            }
            Err(Error::InsufficientStock { .. }) => outcome.refused += 1,
            Err(e) => *outcome.errors.entry(error_kind(&e)).or_default() += 1,
        }
    }
    let client = checkout(&store.pool, saldo::Operation::Lab).await?;
    let stocked: BTreeMap<(i64, &str), i64> =
        STOCKED.iter().map(|&(p, l, c)| ((p, l), c)).collect();
    for r in client
        .query(LOCATION_CHECK, &[])
        .await
        .map_err(Error::from)?
    {
        let product: i64 = r.try_get("product_id").map_err(Error::from)?;
        let location: String = r.try_get("location_id").map_err(Error::from)?;
        let allocated: i64 = r.try_get("allocated").map_err(Error::from)?;
        let held = stocked
            .get(&(product, location.as_str()))
            .copied()
            .unwrap_or(0);
        // Units a location handed out beyond what it held (nothing was confirmed in a run).
        outcome.location_oversold += u64::try_from(allocated - held).unwrap_or(0);
    }
    let mut rows_of: BTreeMap<String, u64> = BTreeMap::new();
    for r in client.query(ORDER_CHECK, &[]).await.map_err(Error::from)? {
        let order: String = r.try_get("order_id").map_err(Error::from)?;
        let quantity: i64 = r.try_get("quantity").map_err(Error::from)?;
        let allocated: i64 = r.try_get("allocated").map_err(Error::from)?;
        if quantity != allocated {
            outcome.partial_orders += 1;
        }
        *rows_of.entry(order).or_default() += 1;
    }
    for i in 0..buyers {
        let order = format!("sl-{run}-{i}");
        let rows = rows_of.get(&order).copied().unwrap_or(0);
        let expected = if granted.contains(&order) {
            items_of(i).len() as u64
        } else {
            0
        };
        if rows != expected {
            outcome.partial_orders += 1;
        }
    }
    for product in [1, 2] {
        let s =
            saldo::stock::admin::get(store, ProductId::new(product).map_err(Error::from)?).await?;
        outcome.final_available += i64::from(s.available);
        outcome.final_reserved += i64::from(s.reserved);
    }
    outcome.audit_divergences = crate::checks::stock_divergences(&store.pool).await?;
    Ok(outcome)
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

/// Runs `runs` runs for each contender on `scratch`, telling `on_run` after every run.
pub async fn run_with_progress(
    scratch: &Scratch,
    buyers: u32,
    runs: u32,
    contenders: &[Contender],
    on_run: &(dyn Fn(RunDone<'_>) + Sync),
) -> Result<Vec<Report>, LabError> {
    let stock_per_run = STOCKED.iter().map(|s| s.2).sum();
    let runs = Runs {
        scenario: Scenario::SplitLocations,
        buyers,
        stock_per_run,
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
