//! Taking an order's units, item by item in product order, the one way every reservation and
//! every sale does it: the strategy's fast take for what it can serve from `available`, and the
//! locked path for each item it declines that another path may serve (a product stocked per
//! location, or one that takes backorders). The path is chosen from the product's row
//! ([`decide::take`]), inside the same transaction: nothing is rolled back and run again.
//!
//! Lock order: stock rows in ascending product id, as the items come; a located product's
//! location rows right after its stock row. A location row is only ever locked by a transaction
//! holding its product's stock row, so it can never be where a wait cycle starts.

use crate::domain::{LocationId, ProductId, Quantity};
use crate::error::Error;
use crate::stock::decide::settle::LocationDeltas;
use crate::stock::decide::take::{self, Backorders, Grant, Route, Want};
use crate::stock::model::Placement;
use crate::stock::rows::locations;
use crate::stock::rows::stock::{self, RowDelta};
use crate::stock::taker::{Taken, UnitTaker};
use crate::store::dialect::Tx;

/// Where taken units go: held for a reservation, or sold outright.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Destination {
    Reserved,
    Sold,
}

impl Destination {
    fn backorders(self) -> Backorders {
        match self {
            Destination::Reserved => Backorders::Allowed,
            Destination::Sold => Backorders::Refused,
        }
    }

    /// Units that go into `reserved` (none when sold).
    fn reserved(self, units: i32) -> i32 {
        match self {
            Destination::Reserved => units,
            Destination::Sold => 0,
        }
    }
}

/// How one item was served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ItemTaken {
    /// From `available` (by the strategy, or by the locked path).
    Plain,
    /// What was available, and this many units promised.
    Backordered(i32),
    /// Over the product's locations, in allocation order, and this many units promised (a
    /// product stocked per location that takes backorders; 0 otherwise).
    Located {
        parts: Vec<(LocationId, i32)>,
        backordered: i32,
    },
}

impl ItemTaken {
    pub fn backordered(&self) -> i32 {
        match self {
            ItemTaken::Backordered(b) | ItemTaken::Located { backordered: b, .. } => *b,
            ItemTaken::Plain => 0,
        }
    }

    /// The allocations of an item served by the located path (possibly none: all backordered).
    pub fn locations(&self) -> Option<&[(LocationId, i32)]> {
        match self {
            ItemTaken::Located { parts, .. } => Some(parts),
            _ => None,
        }
    }
}

/// Takes every item (ascending product id) or fails with the first refusal (the transaction
/// then rolls back whatever was taken). One answer per item, in order. A placement that pins a
/// location or asks for single allocation sends every item to the locked path.
pub(crate) async fn take_items(
    tx: &Tx<'_>,
    taker: &dyn UnitTaker,
    items: &[(ProductId, Quantity)],
    placement: &Placement,
    into: Destination,
) -> Result<Vec<ItemTaken>, Error> {
    let mut taken = Vec::with_capacity(items.len());
    if !placement.is_default() {
        for &(product, quantity) in items {
            taken.push(take_locked(tx, want(product, quantity, placement, into), into).await?);
        }
        return Ok(taken);
    }
    let mut rest = items;
    while !rest.is_empty() {
        let (index, seen) = match taker.take(tx, rest).await? {
            Taken::All => {
                taken.extend(rest.iter().map(|_| ItemTaken::Plain));
                break;
            }
            Taken::Declined { index, seen } => (index, seen),
        };
        let Some(&(product, quantity)) = rest.get(index) else {
            return Err(Error::invariant(format!(
                "strategy {} declined item {index} of {}",
                taker.name(),
                rest.len()
            )));
        };
        taken.extend((0..index).map(|_| ItemTaken::Plain));
        match take::route(product, quantity, seen, into.backorders()) {
            Route::Refuse(refusal) => return Err(refusal),
            Route::Locked => {
                let item = want(product, quantity, placement, into);
                taken.push(take_locked(tx, item, into).await?);
            }
        }
        rest = &rest[index + 1..];
    }
    Ok(taken)
}

fn want<'p>(
    product: ProductId,
    quantity: Quantity,
    placement: &'p Placement,
    into: Destination,
) -> Want<'p> {
    Want {
        product,
        quantity,
        pinned: placement.pinned.get(&product),
        mode: placement.allocation,
        backorders: into.backorders(),
    }
}

/// The locked path for one item: its stock row locked (and a located product's location rows
/// after it), the decision made on what is locked, the rows written.
async fn take_locked(tx: &Tx<'_>, want: Want<'_>, into: Destination) -> Result<ItemTaken, Error> {
    let product = want.product;
    let locked = stock::lock(tx, &[product.get()]).await?;
    let row = locked.get(&product.get());
    let sources = match row {
        Some(r) if r.located => locations::lock_sources(tx, &[product.get()])
            .await?
            .remove(&product.get())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    let units = want.quantity.get();
    match take::grant(want, row, &sources)? {
        Grant::Plain => {
            let delta = RowDelta {
                available: -units,
                reserved: into.reserved(units),
                backordered: 0,
            };
            stock::add(tx, product, delta).await?;
            Ok(ItemTaken::Plain)
        }
        Grant::Backordered {
            allocated,
            backordered,
        } => {
            let delta = RowDelta {
                available: -allocated,
                reserved: into.reserved(allocated),
                backordered,
            };
            stock::add(tx, product, delta).await?;
            Ok(ItemTaken::Backordered(backordered))
        }
        Grant::Located(parts) => take_located(tx, product, into, parts, 0).await,
        Grant::LocatedBackordered { parts, backordered } => {
            take_located(tx, product, into, parts, backordered).await
        }
    }
}

/// A located item's writes: the product's row (what was allocated leaves `available`, what is
/// promised joins `backordered`) and the allocated units at their locations.
async fn take_located(
    tx: &Tx<'_>,
    product: ProductId,
    into: Destination,
    parts: Vec<(LocationId, i32)>,
    backordered: i32,
) -> Result<ItemTaken, Error> {
    let allocated: i32 = parts.iter().map(|(_, n)| n).sum();
    let delta = RowDelta {
        available: -allocated,
        reserved: into.reserved(allocated),
        backordered,
    };
    stock::add(tx, product, delta).await?;
    let mut deltas = LocationDeltas::new();
    for (location, n) in &parts {
        deltas.insert((product.get(), location.clone()), (-n, into.reserved(*n)));
    }
    locations::apply_deltas(tx, &deltas).await?;
    Ok(ItemTaken::Located { parts, backordered })
}
