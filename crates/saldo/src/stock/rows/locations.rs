//! Location rows (`stock_locations`, `locations`) and where a reservation's or a sale's units
//! came from (`reservation_allocations`, `sale_allocations`). A reservation's allocations are
//! written with it and grow only when a fill at a location gives its backorder units there.
//!
//! A location row is only ever locked by a transaction that holds its product's stock row, so
//! location rows never start a wait of their own: they are locked after their product's row,
//! in (product, location) order. Single node only: stock per location is refused on Citus.

use std::collections::{BTreeMap, HashMap};

use uuid::Uuid;

use crate::domain::{LocationId, Priority, ProductId};
use crate::error::Error;
use crate::stock::decide::allocate::Source;
use crate::stock::decide::repair::LocationNow;
use crate::stock::decide::settle::LocationDeltas;
use crate::stock::model::{
    Allocation, Fill, LocatedStock, Location, LocationQuantity, Row, States, StockLocation,
};
use crate::stock::rows::stock::stock_of;
use crate::stock::sql;
use crate::store::dialect::Tx;

/// One location row of a product, locked.
#[derive(Debug, Clone)]
pub(crate) struct LocationRow {
    pub product: i64,
    pub source: Source,
    pub reserved: i32,
}

/// Locks the location rows of `products` ((product, location) order; their stock rows must be
/// locked already) and reads them.
pub(crate) async fn lock(tx: &Tx<'_>, products: &[i64]) -> Result<Vec<LocationRow>, Error> {
    if products.is_empty() {
        return Ok(Vec::new());
    }
    let rows = tx.query(&sql::LOCK_LOCATIONS, &[&products]).await?;
    rows.iter()
        .map(|r| {
            Ok(LocationRow {
                product: r.try_get("product_id")?,
                source: Source {
                    location_id: LocationId::new(r.try_get::<_, String>("location_id")?)?,
                    priority: r.try_get("priority")?,
                    available: r.try_get("available")?,
                },
                reserved: r.try_get("reserved")?,
            })
        })
        .collect()
}

/// [`lock`], as allocation sources per product.
pub(crate) async fn lock_sources(
    tx: &Tx<'_>,
    products: &[i64],
) -> Result<HashMap<i64, Vec<Source>>, Error> {
    let mut sources: HashMap<i64, Vec<Source>> = HashMap::new();
    for row in lock(tx, products).await? {
        sources.entry(row.product).or_default().push(row.source);
    }
    Ok(sources)
}

/// Adds deltas to location rows the transaction holds locked; every row must be there.
pub(crate) async fn apply_deltas(tx: &Tx<'_>, deltas: &LocationDeltas) -> Result<(), Error> {
    if deltas.is_empty() {
        return Ok(());
    }
    let products: Vec<i64> = deltas.keys().map(|k| k.0).collect();
    let locations: Vec<&str> = deltas.keys().map(|k| k.1.as_str()).collect();
    let available: Vec<i32> = deltas.values().map(|d| d.0).collect();
    let reserved: Vec<i32> = deltas.values().map(|d| d.1).collect();
    let updated = tx
        .execute(
            &sql::APPLY_LOCATION_DELTAS,
            &[&products, &locations, &available, &reserved],
        )
        .await?;
    if updated != deltas.len() as u64 {
        return Err(Error::invariant(format!(
            "updated {updated} location rows, expected {}",
            deltas.len()
        )));
    }
    Ok(())
}

/// Locks the location rows `deltas` name (their products' stock rows are held), then applies
/// the deltas.
pub(crate) async fn lock_and_apply(tx: &Tx<'_>, deltas: &LocationDeltas) -> Result<(), Error> {
    if deltas.len() > 1 {
        let products: Vec<i64> = deltas.keys().map(|k| k.0).collect();
        let locations: Vec<&str> = deltas.keys().map(|k| k.1.as_str()).collect();
        tx.query(&sql::LOCK_LOCATION_ROWS, &[&products, &locations])
            .await?;
    }
    apply_deltas(tx, deltas).await
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
    pub async fn insert(&self, tx: &Tx<'_>) -> Result<(), Error> {
        if self.ids.is_empty() {
            return Ok(());
        }
        tx.execute(
            &sql::INSERT_ALLOCATIONS,
            &[&self.ids, &self.products, &self.locations, &self.quantities],
        )
        .await?;
        Ok(())
    }
}

/// A fill's side at the location the units arrived at: each filled row allocated there (see
/// [`sql::ALLOCATE_FILLS`]). The location's own counters are the caller's
/// ([`apply_deltas`], after the rounds).
pub(crate) async fn allocate_fills(
    tx: &Tx<'_>,
    product: ProductId,
    location: &LocationId,
    fills: &[Fill],
) -> Result<(), Error> {
    if fills.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = fills.iter().map(|f| f.id).collect();
    let units: Vec<i32> = fills.iter().map(|f| f.units).collect();
    tx.execute(
        &sql::ALLOCATE_FILLS,
        &[&ids, &units, &product.get(), &location.as_str()],
    )
    .await?;
    Ok(())
}

/// Allocation parts as answers show them: by location id.
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

/// The allocations of the rows `ids`.
pub(crate) async fn allocations_of(tx: &Tx<'_>, ids: &[Uuid]) -> Result<Vec<Allocation>, Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = tx.query(&sql::ALLOCATIONS_OF, &[&ids]).await?;
    rows.iter()
        .map(|r| {
            Ok(Allocation {
                reservation_id: r.try_get("reservation_id")?,
                product: r.try_get("product_id")?,
                location: LocationId::new(r.try_get::<_, String>("location_id")?)?,
                quantity: r.try_get("quantity")?,
            })
        })
        .collect()
}

/// Fills in `allocations` of the rows that have them (one read, none when no row has any).
pub(crate) async fn attach(tx: &Tx<'_>, rows: &mut [Row]) -> Result<(), Error> {
    let ids: Vec<Uuid> = rows.iter().filter(|r| r.allocated).map(|r| r.id).collect();
    let mut by_row: HashMap<Uuid, Vec<LocationQuantity>> = HashMap::new();
    for a in allocations_of(tx, &ids).await? {
        by_row
            .entry(a.reservation_id)
            .or_default()
            .push(LocationQuantity {
                location_id: a.location,
                quantity: a.quantity,
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

/// Records where a direct sale's units came from (after its `sale_items` rows).
pub(crate) async fn record_sale(
    tx: &Tx<'_>,
    sale_id: &str,
    taken: &BTreeMap<ProductId, Vec<(LocationId, i32)>>,
) -> Result<(), Error> {
    let (mut products, mut locations, mut quantities) = (vec![], vec![], vec![]);
    for (product, parts) in taken {
        for (location, quantity) in parts {
            products.push(product.get());
            locations.push(location.as_str());
            quantities.push(*quantity);
        }
    }
    tx.execute(
        &sql::INSERT_SALE_ALLOCATIONS,
        &[&sale_id, &products, &locations, &quantities],
    )
    .await?;
    Ok(())
}

/// Creates the location when it is new.
pub(crate) async fn ensure_location(tx: &Tx<'_>, location: &LocationId) -> Result<(), Error> {
    tx.execute(&sql::ENSURE_LOCATION, &[&location.as_str()])
        .await?;
    Ok(())
}

/// A product's first location count: what it held (`available`, `reserved`) moves to
/// `location`, its active reservations allocated there.
pub(crate) async fn adopt(
    tx: &Tx<'_>,
    product: ProductId,
    location: &LocationId,
    available: i32,
    reserved: i32,
) -> Result<(), Error> {
    let p = product.get();
    tx.execute(
        &sql::ADOPT_DEFAULT,
        &[&p, &location.as_str(), &available, &reserved],
    )
    .await?;
    tx.execute(&sql::ALLOCATE_ACTIVE_TO_DEFAULT, &[&p, &location.as_str()])
        .await?;
    Ok(())
}

/// The location rows of `products` with the units active reservations hold at each, by
/// product (a product without location rows is absent). Under [`lock`] when called to write.
pub(crate) async fn with_held(
    tx: &Tx<'_>,
    products: &[i64],
) -> Result<BTreeMap<i64, Vec<LocationNow>>, Error> {
    let mut out: BTreeMap<i64, Vec<LocationNow>> = BTreeMap::new();
    if products.is_empty() {
        return Ok(out);
    }
    for r in tx.query(&sql::LOCATIONS_WITH_HELD, &[&products]).await? {
        out.entry(r.try_get("product_id")?)
            .or_default()
            .push(LocationNow {
                location_id: LocationId::new(r.try_get::<_, String>("location_id")?)?,
                available: r.try_get("available")?,
                reserved: r.try_get("reserved")?,
                held: r.try_get("held")?,
            });
    }
    Ok(out)
}

/// Sets a location row's `available` (creating it), and the product row's total.
pub(crate) async fn set_counts(
    tx: &Tx<'_>,
    product: ProductId,
    location: &LocationId,
    location_available: i32,
    total_available: i32,
) -> Result<(), Error> {
    let p = product.get();
    tx.execute(
        &sql::UPSERT_LOCATION_COUNT,
        &[&p, &location.as_str(), &location_available],
    )
    .await?;
    crate::stock::rows::stock::write(tx, &sql::SET_LOCATED_TOTAL, &[&p, &total_available]).await?;
    Ok(())
}

/// A product's totals and its locations, read in one statement (one snapshot).
pub(crate) async fn read_located(tx: &Tx<'_>, product: ProductId) -> Result<LocatedStock, Error> {
    let rows = tx
        .query(&sql::STOCK_WITH_LOCATIONS, &[&product.get()])
        .await?;
    let first = rows.first().ok_or(Error::UnknownProduct(product))?;
    let stock = stock_of(product, first)?;
    let mut locations = Vec::new();
    for r in &rows {
        let Some(id) = r.try_get::<_, Option<String>>("location_id")? else {
            continue;
        };
        locations.push(StockLocation {
            location_id: LocationId::new(id)?,
            available: r.try_get("location_available")?,
            reserved: r.try_get("location_reserved")?,
            states: States::of_row(r, "location_")?,
        });
    }
    let states = States::of_row(first, "")?;
    Ok(LocatedStock {
        stock,
        states,
        locations,
        bundle: None,
    })
}

/// Sets a location's priority (creating it) and answers it.
pub(crate) async fn set_priority(
    tx: &Tx<'_>,
    location: &LocationId,
    priority: Priority,
) -> Result<Location, Error> {
    refuse_retired(tx, location).await?;
    let row = tx
        .query_one(
            &sql::UPSERT_PRIORITY,
            &[&location.as_str(), &priority.get()],
        )
        .await?;
    location_of(&row)
}

/// Refuses a retired location ([`Error::LocationRetired`]), holding a share lock on its row
/// until the transaction ends (a retirement waits for it). A location not created yet passes.
pub(crate) async fn refuse_retired(tx: &Tx<'_>, location: &LocationId) -> Result<(), Error> {
    let row = tx
        .query_opt(&sql::LOCATION_FOR_SHARE, &[&location.as_str()])
        .await?;
    match row {
        Some(r)
            if r.try_get::<_, Option<chrono::DateTime<chrono::Utc>>>("retired_at")?
                .is_some() =>
        {
            Err(Error::LocationRetired(location.clone()))
        }
        _ => Ok(()),
    }
}

/// Retires `location` if it holds nothing: its row locked, then every product's row at it (see
/// [`sql::LOCATION_HOLDINGS`]). Retiring a retired location answers it as it is.
pub(crate) async fn retire(tx: &Tx<'_>, location: &LocationId) -> Result<Location, Error> {
    let id = location.as_str();
    let row = tx
        .query_opt(&sql::LOCATION_FOR_UPDATE, &[&id])
        .await?
        .ok_or_else(|| Error::NoSuchLocation(location.clone()))?;
    let current = location_of(&row)?;
    if current.retired_at.is_some() {
        return Ok(current);
    }
    let held = tx.query_one(&sql::LOCATION_HOLDINGS, &[&id]).await?;
    let (available, reserved): (i64, i64) = (held.try_get("available")?, held.try_get("reserved")?);
    let in_states: i64 = held.try_get("in_states")?;
    if available != 0 || reserved != 0 || in_states != 0 {
        return Err(Error::LocationNotEmpty {
            location_id: location.clone(),
            available,
            reserved,
            in_states,
        });
    }
    location_of(&tx.query_one(&sql::RETIRE_LOCATION, &[&id]).await?)
}

/// A `locations` row (`location_id`, `priority`, `retired_at`).
pub(crate) fn location_of(row: &tokio_postgres::Row) -> Result<Location, Error> {
    Ok(Location {
        location_id: LocationId::new(row.try_get::<_, String>("location_id")?)?,
        priority: Priority::new(i64::from(row.try_get::<_, i32>("priority")?))?,
        retired_at: row.try_get("retired_at")?,
    })
}
