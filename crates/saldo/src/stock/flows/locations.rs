//! Stock per location, its admin side: counting a product at one location, setting a
//! location's allocation priority, reading a product with its locations. (Taking units from
//! locations is the locked path's, [`super::taking`]; settling them is [`super::settle`]'s.)
//!
//! A product is `located` from its first location count on; its `stock` row stays the total
//! (available = Σ location available, reserved = Σ location reserved: an audit invariant). The
//! first location count adopts what the product held into the [`DEFAULT_LOCATION`], with its
//! active reservations allocated there, so every invariant holds from the start. A count that
//! raises a location's available is an arrival there: it fills the product's oldest backorders
//! first ([`fill_backorders`]), allocated at that location.

use crate::domain::{LocationId, Priority, ProductId, MAX_LOCATIONS_PER_PRODUCT, MAX_STOCK_COUNT};
use crate::error::{Error, InputError};
use crate::operation::Operation;
use crate::stock::flows::backorders::fill_backorders;
pub use crate::stock::model::{LocatedStock, Location};
use crate::stock::movements::MoveKind;
use crate::stock::rows::backorders as backorder_rows;
use crate::stock::rows::locations;
use crate::stock::rows::stock::{self, Movement};
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::{checkout, in_transaction};

/// The location that holds a product's stock from before its first location count.
pub const DEFAULT_LOCATION: &str = "default";

fn refuse_on_this_layout(store: &Store) -> Result<(), Error> {
    // The located path locks many products' (and locations') rows per statement: refusing the
    // first location count keeps every product of such a layout unlocated.
    if store.dialect().offers_locations_and_backorders() {
        Ok(())
    } else {
        Err(Error::UnsupportedOnCitus("stock per location"))
    }
}

/// Sets the physical count at one location: its on-hand (available + reserved) becomes `count`,
/// and the product's row the sum of its locations. Creates the product and the location when
/// new. Records the location's count (with its location) and the product's new total (as the
/// product's count, so the product's history stays provable). Refused below what the location
/// holds reserved.
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
    refuse_on_this_layout(store)?;
    let writer = store.writer();
    in_transaction(
        &store.pool,
        &store.tx,
        Operation::SetLocationCount,
        move |client| {
            crate::write_tx!(client, writer => |tx| set_count_tx(&tx, product_id, location_id, count))
        },
    )
    .await
}

/// What a location count found under its locks: the product's reserved total and backordered
/// units, the location's (available, reserved), the other locations' available, and whether
/// the location is new.
struct Counted {
    product_reserved: i32,
    backordered: i32,
    here: (i32, i32),
    elsewhere_available: i64,
    known: bool,
    locations: usize,
}

async fn set_count_tx(
    tx: &Tx<'_>,
    product_id: ProductId,
    location_id: &LocationId,
    count: i32,
) -> Result<LocatedStock, Error> {
    tx.cause(MoveKind::Count.cause());
    let counted = lock_for_count(tx, product_id, location_id).await?;
    if !counted.known && counted.locations >= MAX_LOCATIONS_PER_PRODUCT {
        return Err(InputError::TooManyLocations {
            max: MAX_LOCATIONS_PER_PRODUCT,
        }
        .into());
    }
    let (here_available, here_reserved) = counted.here;
    if count < here_reserved {
        return Err(Error::CountBelowReserved {
            product_id,
            count,
            reserved: here_reserved,
        });
    }
    let location_available = count - here_reserved;
    let total_available = counted.elsewhere_available + i64::from(location_available);
    let on_hand = total_available + i64::from(counted.product_reserved);
    if on_hand > i64::from(MAX_STOCK_COUNT) {
        return Err(Error::StockWouldExceedLimit {
            product_id,
            delta: location_available - here_available,
            on_hand_after: on_hand,
            max: MAX_STOCK_COUNT,
        });
    }
    // Within MAX_STOCK_COUNT, checked above.
    let (total_available, on_hand) = (total_available as i32, on_hand as i32);
    locations::set_counts(
        tx,
        product_id,
        location_id,
        location_available,
        total_available,
    )
    .await?;
    let movement_id = record_count(tx, product_id, location_id, count, on_hand).await?;
    let arrived = location_available - here_available;
    if arrived > 0 && counted.backordered > 0 {
        // An arrival at this location: the oldest backorders first, allocated here.
        fill_backorders(tx, product_id, arrived, movement_id, Some(location_id)).await?;
    }
    locations::read_located(tx, product_id).await
}

/// Records the location's count (with its location) and the product's new total (its count,
/// so the product's history stays provable); answers the total's movement id.
async fn record_count(
    tx: &Tx<'_>,
    product_id: ProductId,
    location_id: &LocationId,
    count: i32,
    on_hand: i32,
) -> Result<i64, Error> {
    let at_location = Movement {
        product: product_id,
        kind: "count",
        quantity: count,
        reason: "",
        location: Some(location_id.as_str()),
    };
    stock::record(tx, at_location).await?;
    let why = format!("count at location {location_id}");
    let product_total = Movement {
        product: product_id,
        kind: "count",
        quantity: on_hand,
        reason: &why,
        location: None,
    };
    stock::record(tx, product_total).await
}

/// Creates what is new, locks the product's row (adopting what it held into the default
/// location on its first location count), then its location rows, and reads them.
async fn lock_for_count(
    tx: &Tx<'_>,
    product_id: ProductId,
    location_id: &LocationId,
) -> Result<Counted, Error> {
    stock::ensure(tx, product_id).await?;
    // An arrival path: the product's live backorders before its stock row (the lock order).
    backorder_rows::prelock(tx, product_id).await?;
    locations::ensure_location(tx, location_id).await?;
    // Before the stock row: the order a retirement locks in (location, then its stock rows).
    locations::refuse_retired(tx, location_id).await?;
    let row = stock::lock_one(tx, product_id)
        .await?
        .ok_or(Error::UnknownProduct(product_id))?;
    row.refuse_bundle()?;
    let held = row.stock.available > 0 || row.stock.reserved > 0 || row.stock.backordered > 0;
    if !row.located && held {
        let default = LocationId::new(DEFAULT_LOCATION)?;
        locations::ensure_location(tx, &default).await?;
        // After the stock row, unlike the counted location: a retirement holding the default's
        // row waits for no stock row, so this wait closes no cycle.
        locations::refuse_retired(tx, &default).await?;
        locations::adopt(
            tx,
            product_id,
            &default,
            row.stock.available,
            row.stock.reserved,
        )
        .await?;
    }
    let rows = locations::lock(tx, &[product_id.get()]).await?;
    let mut counted = Counted {
        product_reserved: row.stock.reserved,
        backordered: row.stock.backordered,
        here: (0, 0),
        elsewhere_available: 0,
        known: false,
        locations: rows.len(),
    };
    for r in &rows {
        if &r.source.location_id == location_id {
            counted.here = (r.source.available, r.reserved);
            counted.known = true;
        } else {
            counted.elsewhere_available += i64::from(r.source.available);
        }
    }
    Ok(counted)
}

/// Sets a location's allocation priority (lower first, then by id), creating it when new.
pub async fn set_priority(
    store: &Store,
    location_id: &LocationId,
    priority: Priority,
) -> Result<Location, Error> {
    refuse_on_this_layout(store)?;
    let writer = store.writer();
    in_transaction(
        &store.pool,
        &store.tx,
        Operation::SetLocationPriority,
        move |client| {
            crate::write_tx!(client, writer => |tx| async {
                locations::set_priority(&tx, location_id, priority).await
            })
        },
    )
    .await
}

/// Retires a location that holds nothing (see [`locations::retire`]): it then takes no count,
/// priority or stock; its history stays. [`Error::LocationNotEmpty`] names what it still holds,
/// [`Error::NoSuchLocation`] an id never used.
pub async fn retire(store: &Store, location_id: &LocationId) -> Result<Location, Error> {
    refuse_on_this_layout(store)?;
    let writer = store.writer();
    in_transaction(
        &store.pool,
        &store.tx,
        Operation::RetireLocation,
        move |client| {
            crate::write_tx!(client, writer => |tx| async {
                locations::retire(&tx, location_id).await
            })
        },
    )
    .await
}

/// A product's totals and its locations, read in one statement (one snapshot). A bundle (its
/// own row holds nothing) answers its components and its `available` derived from theirs.
pub async fn get(store: &Store, product_id: ProductId) -> Result<LocatedStock, Error> {
    let client = checkout(&store.pool, Operation::StockRead).await?;
    let tx = Tx::new(&client, store.dialect());
    let mut located = locations::read_located(&tx, product_id).await?;
    if located.stock.available == 0 && located.stock.reserved == 0 {
        if let Some(bundle) = super::bundles::read_on(&tx, product_id).await? {
            located.stock.available = bundle.available;
            located.bundle = Some(bundle);
        }
    }
    Ok(located)
}
