//! Stock per location (issue 15): the one located path every strategy shares.
//!
//! A product is `located` from its first location count on; its `stock` row stays the total
//! (available = Σ location available, reserved = Σ location reserved: an audit invariant).
//! Products never given a location never come here: the strategies' conditional takes say
//! `AND NOT located`, and only when such a take finds nothing does the existing refusal read
//! see `located` and hand the order over ([`Error::StockedByLocation`] → [`reserve`]). An
//! order that pins a location or asks for `single` allocation comes here directly.
//!
//! Every transaction here locks the order's stock rows in ascending product id, then the
//! located products' `stock_locations` rows in (product, location) order, decides in memory
//! ([`super::allocate::allocate`]), then writes: the stock rows, the location rows, the
//! reservation rows and their `reservation_allocations`. Confirm, release and expiry move the
//! units back through [`settle`], under the same order (stock rows first, then locations).

use std::collections::{BTreeMap, HashMap};

use deadpool_postgres::Client;
use uuid::Uuid;

use crate::domain::{
    LocationId, Priority, ProductId, Quantity, MAX_LOCATIONS_PER_PRODUCT, MAX_STOCK_COUNT,
};
use crate::error::{Error, InputError};
use crate::operation::Operation;
use crate::stock::allocate::{allocate, Shortfall, Source};
use crate::stock::lifecycle::{
    current_items, insert_rows, parse_rows, plan, replay_of_concurrent_copy, Intent, NewRows, Plan,
    Row, LIVE_INDEX,
};
use crate::stock::sql::{APPLY_DELTAS, ORDER_ROWS};
use crate::stock::types::{LocationQuantity, Placement, Reservation, Status, Stock, StockLocation};
use crate::store::handle::Store;
use crate::store::retry::{checkout, in_idempotent_transaction, in_transaction};
use crate::store::schema::Layout;

/// The location that holds a product's stock from before its first location count.
pub const DEFAULT_LOCATION: &str = "default";

const LOCK_PRODUCTS: &str = "SELECT product_id, available, reserved, version, located, \
     backorder_limit, backordered FROM stock WHERE product_id = ANY($1) ORDER BY product_id FOR UPDATE";
const LOCK_LOCATIONS: &str = "SELECT sl.product_id, sl.location_id, sl.available, sl.reserved, \
            l.priority \
       FROM stock_locations sl JOIN locations l USING (location_id) \
      WHERE sl.product_id = ANY($1) \
      ORDER BY sl.product_id, sl.location_id FOR UPDATE OF sl";
/// Locks the given (product, location) rows in the lock order.
const LOCK_LOCATION_ROWS: &str = "SELECT 1 FROM stock_locations \
     WHERE (product_id, location_id) IN \
           (SELECT * FROM unnest($1::bigint[], $2::text[])) \
     ORDER BY product_id, location_id FOR UPDATE";
const APPLY_LOCATION_DELTAS: &str = "UPDATE stock_locations sl \
        SET available = sl.available + d.a, reserved = sl.reserved + d.r, updated_at = now() \
       FROM unnest($1::bigint[], $2::text[], $3::int[], $4::int[]) \
            AS d(product_id, location_id, a, r) \
      WHERE sl.product_id = d.product_id AND sl.location_id = d.location_id";
const INSERT_ALLOCATIONS: &str = "INSERT INTO reservation_allocations \
         (reservation_id, product_id, location_id, quantity) \
     SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::int[])";
const ALLOCATIONS_OF: &str = "SELECT reservation_id, product_id, location_id, quantity \
       FROM reservation_allocations WHERE reservation_id = ANY($1) \
      ORDER BY product_id, location_id";
const ENSURE_PRODUCT: &str = "INSERT INTO stock (product_id, available) VALUES ($1, 0) \
     ON CONFLICT (product_id) DO NOTHING";
const ENSURE_LOCATION: &str =
    "INSERT INTO locations (location_id) VALUES ($1) ON CONFLICT (location_id) DO NOTHING";
const UPSERT_PRIORITY: &str = "INSERT INTO locations (location_id, priority) VALUES ($1, $2) \
     ON CONFLICT (location_id) DO UPDATE SET priority = EXCLUDED.priority \
     RETURNING location_id, priority";
/// A product's first location count: what it held until now becomes the default location's,
/// and its active reservations are allocated there, so every invariant holds from the start.
const ADOPT_DEFAULT: &str = "INSERT INTO stock_locations (product_id, location_id, available, \
     reserved) VALUES ($1, $2, $3, $4)";
const ALLOCATE_ACTIVE_TO_DEFAULT: &str = "WITH moved AS ( \
       UPDATE reservations SET allocated = true \
        WHERE product_id = $1 AND status = 'active' AND NOT allocated \
        RETURNING id, product_id, quantity) \
     INSERT INTO reservation_allocations (reservation_id, product_id, location_id, quantity) \
     SELECT id, product_id, $2, quantity FROM moved";
const UPSERT_LOCATION_COUNT: &str = "INSERT INTO stock_locations (product_id, location_id, \
     available) VALUES ($1, $2, $3) \
     ON CONFLICT (product_id, location_id) DO UPDATE SET available = EXCLUDED.available, \
     updated_at = now()";
const SET_LOCATED_TOTAL: &str = crate::stock_update!(
    "available = $2, located = true",
    "WHERE product_id = $1 RETURNING available, reserved, version"
);
const RECORD: &str = "INSERT INTO stock_movements (product_id, kind, quantity, reason, \
     location_id) VALUES ($1, 'count', $2, $3, $4)";
const STOCK_WITH_LOCATIONS: &str = "SELECT s.available, s.reserved, s.version, \
            s.backorder_limit, s.backordered, sl.location_id, sl.available AS location_available, \
            sl.reserved AS location_reserved \
       FROM stock s LEFT JOIN stock_locations sl USING (product_id) \
      WHERE s.product_id = $1 ORDER BY sl.location_id";

/// A product's totals and its locations (empty for a product never given a location).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LocatedStock {
    pub stock: Stock,
    pub locations: Vec<StockLocation>,
}

/// A location and its allocation priority.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Location {
    pub location_id: LocationId,
    pub priority: Priority,
}

/// Where taken units go: held for a reservation, or sold outright.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Destination {
    Reserved,
    Sold,
}

/// What a take allocated, per located product, in allocation order.
pub(crate) type Taken = BTreeMap<ProductId, Vec<(LocationId, i32)>>;

/// Reserves (or re-reserves) on the located path: one transaction, all items or none.
pub(crate) async fn reserve(
    store: &Store,
    intent: Intent<'_>,
    placement: &Placement,
) -> Result<Reservation, Error> {
    // See `set_count`: no product is located on Citus, but an order may still name a
    // location (`location_id`, `allocation`), which routes it here; refused before any lock
    // (this path's statements lock many products' rows at once: 0A000 on Citus).
    if store.is_citus() {
        return Err(Error::UnsupportedOnCitus("stock per location"));
    }
    in_idempotent_transaction(
        &store.pool,
        &store.tx,
        Operation::Reserve,
        LIVE_INDEX,
        move |client| crate::tx_body!(client => reserve_tx(client, intent, placement)),
    )
    .await
}

async fn reserve_tx(
    client: &Client,
    intent: Intent<'_>,
    placement: &Placement,
) -> Result<Reservation, Error> {
    let order_id = intent.order_id();
    let stmt = client.prepare_cached(ORDER_ROWS).await?;
    let mut rows = parse_rows(&client.query(&stmt, &[&order_id.as_str()]).await?)?;
    attach(client, &mut rows).await?;
    let take = match plan(intent, &rows)? {
        Plan::Replay => {
            return Ok(Reservation {
                order_id: order_id.clone(),
                items: current_items(&rows),
                replayed: true,
            })
        }
        Plan::Take(take) => take,
    };
    let taken = match take_units(client, &take, placement, Destination::Reserved).await {
        Ok(taken) => taken,
        Err(refusal) => return replay_of_concurrent_copy(client, intent, refusal).await,
    };
    let mut new_rows = NewRows::default();
    for &(product, quantity) in &take {
        new_rows.push(
            Uuid::new_v4(),
            order_id,
            product,
            quantity,
            intent.ttl(),
            intent.request_key(),
        );
        if taken.contains_key(&product) {
            new_rows.mark_allocated();
        }
    }
    // Stock per location runs on one node only (`reserve` refuses Citus before this).
    let mut written = insert_rows(client, Layout::Single, &new_rows).await?;
    let mut allocations = Allocations::default();
    for row in written.iter_mut() {
        let Some(parts) = taken.get(&row.item.product_id) else {
            continue;
        };
        for (location, quantity) in parts {
            allocations.push(row.id, row.item.product_id, location, *quantity);
        }
        row.item.allocations = in_location_order(parts);
    }
    allocations.insert(client).await?;
    rows.extend(written);
    Ok(Reservation {
        order_id: order_id.clone(),
        items: current_items(&rows),
        replayed: false,
    })
}

/// `reservation_allocations` rows to write, as the parallel arrays of one INSERT.
#[derive(Debug, Default)]
pub(crate) struct Allocations<'a> {
    ids: Vec<Uuid>,
    products: Vec<i64>,
    locations: Vec<&'a str>,
    quantities: Vec<i32>,
}

impl<'a> Allocations<'a> {
    pub fn push(&mut self, id: Uuid, product: ProductId, location: &'a LocationId, quantity: i32) {
        self.ids.push(id);
        self.products.push(product.get());
        self.locations.push(location.as_str());
        self.quantities.push(quantity);
    }

    /// Writes them (after their reservation rows: the reference is checked).
    pub async fn insert(&self, client: &Client) -> Result<(), Error> {
        if self.ids.is_empty() {
            return Ok(());
        }
        let stmt = client.prepare_cached(INSERT_ALLOCATIONS).await?;
        client
            .execute(
                &stmt,
                &[&self.ids, &self.products, &self.locations, &self.quantities],
            )
            .await?;
        Ok(())
    }
}

/// Locks the location rows of `located` products ((product, location) order; their stock
/// rows must be locked already) and reads them as allocation sources.
pub(crate) async fn lock_sources(
    client: &Client,
    located: &[i64],
) -> Result<HashMap<i64, Vec<Source>>, Error> {
    let mut sources: HashMap<i64, Vec<Source>> = HashMap::new();
    if located.is_empty() {
        return Ok(sources);
    }
    let stmt = client.prepare_cached(LOCK_LOCATIONS).await?;
    for r in client.query(&stmt, &[&located]).await? {
        sources
            .entry(r.try_get("product_id")?)
            .or_default()
            .push(Source {
                location_id: LocationId::new(r.try_get::<_, String>("location_id")?)?,
                priority: r.try_get("priority")?,
                available: r.try_get("available")?,
            });
    }
    Ok(sources)
}

/// Adds (available, reserved) deltas to location rows the transaction holds locked; every
/// row must be there.
pub(crate) async fn apply_location_deltas(
    client: &Client,
    deltas: &BTreeMap<(i64, LocationId), (i32, i32)>,
) -> Result<(), Error> {
    if deltas.is_empty() {
        return Ok(());
    }
    let products: Vec<i64> = deltas.keys().map(|k| k.0).collect();
    let locations: Vec<&str> = deltas.keys().map(|k| k.1.as_str()).collect();
    let available: Vec<i32> = deltas.values().map(|d| d.0).collect();
    let reserved: Vec<i32> = deltas.values().map(|d| d.1).collect();
    let stmt = client.prepare_cached(APPLY_LOCATION_DELTAS).await?;
    let updated = client
        .execute(&stmt, &[&products, &locations, &available, &reserved])
        .await?;
    if updated != deltas.len() as u64 {
        return Err(Error::invariant(format!(
            "updated {updated} location rows, expected {}",
            deltas.len()
        )));
    }
    Ok(())
}

pub(crate) fn in_location_order(parts: &[(LocationId, i32)]) -> Vec<LocationQuantity> {
    let mut out: Vec<LocationQuantity> = parts
        .iter()
        .map(|(location_id, quantity)| LocationQuantity {
            location_id: location_id.clone(),
            quantity: *quantity,
        })
        .collect();
    out.sort_by(|a, b| a.location_id.cmp(&b.location_id));
    out
}

/// Locks the items' stock rows (product order) and their locations' rows ((product, location)
/// order), allocates every item in memory, and writes the stock and location rows: all items
/// or none (a refusal writes nothing). Products not stocked per location are taken from their
/// row as `atomic` would (a pinned location for one is [`Error::UnknownLocation`]).
pub(crate) async fn take_units(
    client: &Client,
    take: &[(ProductId, Quantity)],
    placement: &Placement,
    into: Destination,
) -> Result<Taken, Error> {
    let mut take: Vec<(ProductId, Quantity)> = take.to_vec();
    take.sort_by_key(|(p, _)| *p);
    let products: Vec<i64> = take.iter().map(|(p, _)| p.get()).collect();
    let stmt = client.prepare_cached(LOCK_PRODUCTS).await?;
    let mut rows: HashMap<i64, (i32, bool)> = HashMap::with_capacity(products.len());
    for r in client.query(&stmt, &[&products]).await? {
        rows.insert(
            r.try_get("product_id")?,
            (r.try_get("available")?, r.try_get("located")?),
        );
    }
    let located: Vec<i64> = products
        .iter()
        .copied()
        .filter(|p| rows.get(p).is_some_and(|r| r.1))
        .collect();
    let sources = lock_sources(client, &located).await?;

    let to_reserved = |q: i32| if into == Destination::Reserved { q } else { 0 };
    let mut taken = Taken::new();
    let mut location_deltas: BTreeMap<(i64, LocationId), (i32, i32)> = BTreeMap::new();
    for &(product, quantity) in &take {
        let Some(&(available, is_located)) = rows.get(&product.get()) else {
            return Err(Error::UnknownProduct(product));
        };
        let pinned = placement.pinned.get(&product);
        if !is_located {
            if let Some(location_id) = pinned {
                return Err(Error::UnknownLocation {
                    product_id: product,
                    location_id: location_id.clone(),
                });
            }
            if available < quantity.get() {
                return Err(Error::InsufficientStock {
                    product_id: product,
                    requested: quantity.get(),
                    available,
                });
            }
            continue;
        }
        let from = sources.get(&product.get()).map_or(&[][..], |s| &s[..]);
        match allocate(quantity.get(), placement.allocation, pinned, from) {
            Ok(parts) => {
                for (location, q) in &parts {
                    location_deltas
                        .insert((product.get(), location.clone()), (-q, to_reserved(*q)));
                }
                taken.insert(product, parts);
            }
            Err(Shortfall::UnknownLocation) => {
                return Err(match pinned {
                    Some(location_id) => Error::UnknownLocation {
                        product_id: product,
                        location_id: location_id.clone(),
                    },
                    None => Error::invariant("an allocation without a pinned location named one"),
                })
            }
            Err(Shortfall::Insufficient { available }) => {
                return Err(Error::InsufficientStock {
                    product_id: product,
                    requested: quantity.get(),
                    available,
                })
            }
        }
    }

    let stmt = client.prepare_cached(APPLY_DELTAS).await?;
    let available: Vec<i32> = take.iter().map(|(_, q)| -q.get()).collect();
    let reserved: Vec<i32> = take.iter().map(|(_, q)| to_reserved(q.get())).collect();
    client
        .execute(&stmt, &[&products, &available, &reserved])
        .await?;
    apply_location_deltas(client, &location_deltas).await?;
    Ok(taken)
}

const INSERT_SALE_ALLOCATIONS: &str = "INSERT INTO sale_allocations \
         (sale_id, product_id, location_id, quantity) \
     SELECT $1, g.product_id, g.location_id, g.quantity \
       FROM unnest($2::bigint[], $3::text[], $4::int[]) AS g(product_id, location_id, quantity)";

/// Records where a direct sale's units came from (after its `sale_items` rows).
pub(crate) async fn record_sale(
    client: &Client,
    sale_id: &str,
    taken: &Taken,
) -> Result<(), Error> {
    let (mut products, mut locations, mut quantities) = (vec![], vec![], vec![]);
    for (product, parts) in taken {
        for (location, quantity) in parts {
            products.push(product.get());
            locations.push(location.as_str());
            quantities.push(*quantity);
        }
    }
    let stmt = client.prepare_cached(INSERT_SALE_ALLOCATIONS).await?;
    client
        .execute(&stmt, &[&sale_id, &products, &locations, &quantities])
        .await?;
    Ok(())
}

/// Fills in `allocations` of the rows that have them (one read, none when no row has any).
pub(crate) async fn attach(client: &Client, rows: &mut [Row]) -> Result<(), Error> {
    let ids: Vec<Uuid> = rows.iter().filter(|r| r.allocated).map(|r| r.id).collect();
    if ids.is_empty() {
        return Ok(());
    }
    let stmt = client.prepare_cached(ALLOCATIONS_OF).await?;
    let mut by_row: HashMap<Uuid, Vec<LocationQuantity>> = HashMap::new();
    for r in client.query(&stmt, &[&ids]).await? {
        by_row
            .entry(r.try_get("reservation_id")?)
            .or_default()
            .push(LocationQuantity {
                location_id: LocationId::new(r.try_get::<_, String>("location_id")?)?,
                quantity: r.try_get("quantity")?,
            });
    }
    for row in rows.iter_mut() {
        if let Some(mut parts) = by_row.remove(&row.id) {
            parts.sort_by(|a, b| a.location_id.cmp(&b.location_id));
            row.item.allocations = parts;
        }
    }
    Ok(())
}

/// Moves the units of `rows` (locked, active, being settled to `status`) at their locations:
/// confirmed units leave `reserved`, released and expired ones go back to `available`. Called
/// after the stock rows are locked; locks the location rows in (product, location) order.
pub(crate) async fn settle(client: &Client, rows: &[&Row], status: Status) -> Result<(), Error> {
    let ids: Vec<Uuid> = rows.iter().filter(|r| r.allocated).map(|r| r.id).collect();
    if ids.is_empty() {
        return Ok(());
    }
    let stmt = client.prepare_cached(ALLOCATIONS_OF).await?;
    let mut deltas: BTreeMap<(i64, LocationId), (i32, i32)> = BTreeMap::new();
    for r in client.query(&stmt, &[&ids]).await? {
        let quantity: i32 = r.try_get("quantity")?;
        let location = LocationId::new(r.try_get::<_, String>("location_id")?)?;
        let d = deltas
            .entry((r.try_get("product_id")?, location))
            .or_default();
        if status != Status::Confirmed {
            d.0 += quantity;
        }
        d.1 -= quantity;
    }
    if deltas.is_empty() {
        return Err(Error::invariant(format!(
            "{} allocated reservation rows have no allocations",
            ids.len()
        )));
    }
    let products: Vec<i64> = deltas.keys().map(|k| k.0).collect();
    let locations: Vec<&str> = deltas.keys().map(|k| k.1.as_str()).collect();
    if deltas.len() > 1 {
        let stmt = client.prepare_cached(LOCK_LOCATION_ROWS).await?;
        client.query(&stmt, &[&products, &locations]).await?;
    }
    apply_location_deltas(client, &deltas).await
}

/// Sets the physical count at one location: its on-hand (available + reserved) becomes `count`,
/// and the product's row the sum of its locations. Creates the product and the location when
/// new. The product's first location count makes it `located`: what it held until then moves
/// to the [`DEFAULT_LOCATION`], with its active reservations allocated there. Records the
/// location's count (with its location) and the product's new total (as the product's count,
/// so the product's history stays provable). Refused below what the location holds reserved.
pub async fn set_count(
    store: &Store,
    product_id: ProductId,
    location_id: &LocationId,
    count: i64,
) -> Result<LocatedStock, Error> {
    if !(0..=i64::from(MAX_STOCK_COUNT)).contains(&count) {
        return Err(InputError::CountOutOfRange(count).into());
    }
    let count = i32::try_from(count).map_err(|_| InputError::CountOutOfRange(count))?;
    // The located path locks many products' (and locations') rows per statement: not built
    // for Citus yet. Refusing the first location count keeps every product there unlocated,
    // so no order ever takes that path.
    if store.is_citus() {
        return Err(Error::UnsupportedOnCitus("stock per location"));
    }
    in_transaction(&store.pool, &store.tx, Operation::SetLocationCount, move |client| {
        crate::tx_body!(client => set_count_tx(client, product_id, location_id, count))
    })
    .await
}

async fn set_count_tx(
    client: &Client,
    product_id: ProductId,
    location_id: &LocationId,
    count: i32,
) -> Result<LocatedStock, Error> {
    let p = product_id.get();
    client.execute(ENSURE_PRODUCT, &[&p]).await?;
    client
        .execute(ENSURE_LOCATION, &[&location_id.as_str()])
        .await?;
    let row = client.query_one(LOCK_PRODUCTS, &[&vec![p]]).await?;
    let (available, reserved, located): (i32, i32, bool) = (
        row.try_get("available")?,
        row.try_get("reserved")?,
        row.try_get("located")?,
    );
    // A product takes backorders or is stocked per location, not both (yet): a fill would have
    // to choose a location for units that arrive as a product count.
    if row.try_get::<_, i32>("backorder_limit")? > 0 || row.try_get::<_, i32>("backordered")? > 0 {
        return Err(Error::BackordersAndLocations(product_id));
    }
    if !located && (available > 0 || reserved > 0) {
        let default = LocationId::new(DEFAULT_LOCATION)?;
        client
            .execute(ENSURE_LOCATION, &[&default.as_str()])
            .await?;
        client
            .execute(
                ADOPT_DEFAULT,
                &[&p, &default.as_str(), &available, &reserved],
            )
            .await?;
        client
            .execute(ALLOCATE_ACTIVE_TO_DEFAULT, &[&p, &default.as_str()])
            .await?;
    }
    let rows = client.query(LOCK_LOCATIONS, &[&vec![p]]).await?;
    let mut here = (0i32, 0i32);
    let mut total_available = 0i64;
    let mut known = false;
    for r in &rows {
        let id: String = r.try_get("location_id")?;
        let (a, res): (i32, i32) = (r.try_get("available")?, r.try_get("reserved")?);
        if id == location_id.as_str() {
            here = (a, res);
            known = true;
        } else {
            total_available += i64::from(a);
        }
    }
    if !known && rows.len() >= MAX_LOCATIONS_PER_PRODUCT {
        return Err(InputError::TooManyLocations {
            max: MAX_LOCATIONS_PER_PRODUCT,
        }
        .into());
    }
    if count < here.1 {
        return Err(Error::CountBelowReserved {
            product_id,
            count,
            reserved: here.1,
        });
    }
    let location_available = count - here.1;
    total_available += i64::from(location_available);
    let on_hand = total_available + i64::from(reserved);
    if on_hand > i64::from(MAX_STOCK_COUNT) {
        return Err(Error::StockWouldExceedLimit {
            product_id,
            delta: location_available - here.0,
            on_hand_after: on_hand,
            max: MAX_STOCK_COUNT,
        });
    }
    client
        .execute(
            UPSERT_LOCATION_COUNT,
            &[&p, &location_id.as_str(), &location_available],
        )
        .await?;
    // Within MAX_STOCK_COUNT, checked above.
    let total_available = total_available as i32;
    client
        .execute(SET_LOCATED_TOTAL, &[&p, &total_available])
        .await?;
    let location_text = Some(location_id.as_str());
    client
        .execute(RECORD, &[&p, &count, &"", &location_text])
        .await?;
    let none: Option<&str> = None;
    let why = format!("count at location {location_id}");
    client
        .execute(RECORD, &[&p, &(on_hand as i32), &why, &none])
        .await?;
    read_located(client, product_id).await
}

/// Sets a location's allocation priority (lower first, then by id), creating it when new.
pub async fn set_priority(
    store: &Store,
    location_id: &LocationId,
    priority: Priority,
) -> Result<Location, Error> {
    // See `set_count`: locations are not built for Citus yet.
    if store.is_citus() {
        return Err(Error::UnsupportedOnCitus("stock per location"));
    }
    in_transaction(
        &store.pool,
        &store.tx,
        Operation::SetLocationPriority,
        move |client| {
            crate::tx_body!(client => async {
                let row = client
                    .query_one(UPSERT_PRIORITY, &[&location_id.as_str(), &priority.get()])
                    .await?;
                Ok(Location {
                    location_id: LocationId::new(row.try_get::<_, String>("location_id")?)?,
                    priority: Priority::new(i64::from(row.try_get::<_, i32>("priority")?))?,
                })
            })
        },
    )
    .await
}

/// A product's totals and its locations, read in one statement (one snapshot).
pub async fn get(store: &Store, product_id: ProductId) -> Result<LocatedStock, Error> {
    let client = checkout(&store.pool, Operation::StockRead).await?;
    read_located(&client, product_id).await
}

async fn read_located(client: &Client, product_id: ProductId) -> Result<LocatedStock, Error> {
    let rows = client
        .query(STOCK_WITH_LOCATIONS, &[&product_id.get()])
        .await?;
    let first = rows.first().ok_or(Error::UnknownProduct(product_id))?;
    let stock = crate::stock::admin::stock_of(product_id, first)?;
    let mut locations = Vec::new();
    for r in &rows {
        let Some(id) = r.try_get::<_, Option<String>>("location_id")? else {
            continue;
        };
        locations.push(StockLocation {
            location_id: LocationId::new(id)?,
            available: r.try_get("location_available")?,
            reserved: r.try_get("location_reserved")?,
        });
    }
    Ok(LocatedStock { stock, locations })
}
