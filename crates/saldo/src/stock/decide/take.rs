//! Where one item's units come from, decided on its product's row.
//!
//! Every strategy takes an item from `available` in its own way (the conditional UPDATE, the
//! row locked first, the version checked); when it cannot (the row is short, the product is
//! stocked per location, or there is no such product) it declines the item and hands over what
//! it read of the row. [`route`] then says, from that read, whether the item is refused outright
//! or taken by the locked path; on the locked path [`grant`] decides, on the row now locked
//! (and its locations' rows), how: plain, part backordered, allocated over locations, or (a
//! located product with a backorder limit, split placement) allocated over what the locations
//! have and the rest backordered. The path is chosen here, once, from the rows, for every
//! strategy and for sales alike.

use crate::domain::{AllocationMode, LocationId, ProductId, Quantity};
use crate::error::Error;
use crate::stock::decide::allocate::{allocate, Shortfall, Source};
use crate::stock::model::StockRow;

/// Whether a take may promise units it does not have (a reservation of a product with a
/// backorder limit); a sale never does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backorders {
    Allowed,
    Refused,
}

/// What becomes of an item its strategy declined, decided from the row it read (unlocked).
#[derive(Debug)]
pub(crate) enum Route {
    /// Refused: no such product, or short with no other way to serve it.
    Refuse(Error),
    /// Taken (or refused) by the locked path, on the row locked.
    Locked,
}

/// See [`Route`]. A product stocked per location, or one that takes backorders (when the take
/// may), goes to the locked path; any other short product is refused with what was read.
pub(crate) fn route(
    product: ProductId,
    quantity: Quantity,
    seen: Option<StockRow>,
    backorders: Backorders,
) -> Route {
    match seen {
        None => Route::Refuse(Error::UnknownProduct(product)),
        Some(row) if row.located => Route::Locked,
        Some(row) if backorders == Backorders::Allowed && row.backorder_limit > 0 => Route::Locked,
        Some(row) if row.available >= quantity.get() => Route::Locked,
        Some(row) => Route::Refuse(Error::InsufficientStock {
            product_id: product,
            requested: quantity.get(),
            available: row.available,
        }),
    }
}

/// How the locked path serves one item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Grant {
    /// All from the row's `available`.
    Plain,
    /// What is available, the rest promised within the product's backorder room.
    Backordered { allocated: i32, backordered: i32 },
    /// Over the product's locations, in allocation order.
    Located(Vec<(LocationId, i32)>),
    /// What the product's locations have (split, in allocation order), the rest promised
    /// within its backorder room: a fill later allocates it where its units arrive.
    LocatedBackordered {
        parts: Vec<(LocationId, i32)>,
        backordered: i32,
    },
}

/// Where a locked item may come from: a pinned location (only there), else the allocation mode
/// over the product's locations (which only products stocked per location have).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Want<'a> {
    pub product: ProductId,
    pub quantity: Quantity,
    pub pinned: Option<&'a LocationId>,
    pub mode: AllocationMode,
    pub backorders: Backorders,
}

/// Decides one item on its locked row (`None`: no such product) and, for a product stocked per
/// location, its locked location rows. All or nothing for the item; the refusal names it.
pub(crate) fn grant(
    want: Want<'_>,
    row: Option<&StockRow>,
    sources: &[Source],
) -> Result<Grant, Error> {
    let Want {
        product,
        quantity,
        pinned,
        ..
    } = want;
    let row = row.ok_or(Error::UnknownProduct(product))?;
    if row.located {
        return located(want, row, sources);
    }
    if let Some(location_id) = pinned {
        return Err(Error::UnknownLocation {
            product_id: product,
            location_id: location_id.clone(),
        });
    }
    if row.available >= quantity.get() {
        return Ok(Grant::Plain);
    }
    let room = row.backorder_limit - row.backordered;
    if want.backorders == Backorders::Allowed && row.backorder_limit > 0 {
        return match split(quantity.get(), row.available, room) {
            Some((allocated, backordered)) => Ok(Grant::Backordered {
                allocated,
                backordered,
            }),
            None => Err(Error::InsufficientStock {
                product_id: product,
                requested: quantity.get(),
                available: row.available.saturating_add(room.max(0)),
            }),
        };
    }
    Err(Error::InsufficientStock {
        product_id: product,
        requested: quantity.get(),
        available: row.available,
    })
}

/// A located item: allocated over its locations; short, a reservation of a product with a
/// backorder limit backorders the rest ([`located_backordered`]).
fn located(want: Want<'_>, row: &StockRow, sources: &[Source]) -> Result<Grant, Error> {
    match allocate(want.quantity.get(), want.mode, want.pinned, sources) {
        Ok(parts) => Ok(Grant::Located(parts)),
        Err(Shortfall::Insufficient { .. }) if backorders_here(&want, row) => {
            located_backordered(want, row, sources)
        }
        Err(Shortfall::UnknownLocation) => Err(match want.pinned {
            Some(location_id) => Error::UnknownLocation {
                product_id: want.product,
                location_id: location_id.clone(),
            },
            None => Error::invariant("an allocation without a pinned location named one"),
        }),
        Err(Shortfall::Insufficient { available }) => Err(Error::InsufficientStock {
            product_id: want.product,
            requested: want.quantity.get(),
            available,
        }),
    }
}

/// Whether a short located item may be backordered: a reservation (not a sale) of a product
/// with a limit, placed by the default split. A pinned location or a single allocation is not
/// backordered (the usual refusal): a fill gives units to the oldest backorders wherever they
/// arrive, which would not honour either placement.
fn backorders_here(want: &Want<'_>, row: &StockRow) -> bool {
    want.backorders == Backorders::Allowed
        && row.backorder_limit > 0
        && want.pinned.is_none()
        && want.mode == AllocationMode::Split
}

/// Everything the locations have (split, in allocation order), the rest within the room; past
/// the room the usual refusal, naming what could have been had.
fn located_backordered(want: Want<'_>, row: &StockRow, sources: &[Source]) -> Result<Grant, Error> {
    let quantity = want.quantity.get();
    let on_hand: i64 = sources.iter().map(|s| i64::from(s.available.max(0))).sum();
    let on_hand = i32::try_from(on_hand).unwrap_or(i32::MAX);
    let room = row.backorder_limit - row.backordered;
    let Some((allocated, backordered)) = split(quantity, on_hand, room) else {
        return Err(Error::InsufficientStock {
            product_id: want.product,
            requested: quantity,
            available: on_hand.saturating_add(room.max(0)),
        });
    };
    let parts = match allocated {
        0 => Vec::new(),
        n => allocate(n, AllocationMode::Split, None, sources)
            .map_err(|_| Error::invariant("a split of what the locations have did not fit them"))?,
    };
    Ok(Grant::LocatedBackordered { parts, backordered })
}

/// How `quantity` splits into (allocated, backordered) given what is available and the
/// backorder room left; `None` when it does not fit. Available units always go first.
pub(crate) fn split(quantity: i32, available: i32, room: i32) -> Option<(i32, i32)> {
    let allocated = quantity.min(available.max(0));
    let backordered = quantity - allocated;
    (backordered <= room.max(0)).then_some((allocated, backordered))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(id: i64) -> ProductId {
        ProductId::new(id).expect("id")
    }

    fn q(n: i64) -> Quantity {
        Quantity::new(n).expect("q")
    }

    fn row(available: i32, limit: i32, backordered: i32, located: bool) -> StockRow {
        StockRow {
            available,
            backorder_limit: limit,
            backordered,
            located,
        }
    }

    fn want(quantity: i64, backorders: Backorders) -> Want<'static> {
        Want {
            product: p(1),
            quantity: q(quantity),
            pinned: None,
            mode: AllocationMode::Split,
            backorders,
        }
    }

    #[test]
    fn available_units_go_first_and_the_rest_within_the_room() {
        assert_eq!(split(3, 5, 0), Some((3, 0)));
        assert_eq!(split(3, 1, 2), Some((1, 2)));
        assert_eq!(split(3, 1, 1), None);
        assert_eq!(split(3, 0, 3), Some((0, 3)), "a preorder");
        assert_eq!(split(1, 0, 0), None);
        assert_eq!(split(2, -1, -4), None, "nonsense never grants");
    }

    #[test]
    fn a_declined_item_is_refused_unless_another_path_can_serve_it() {
        use Backorders::*;
        assert!(matches!(
            route(p(1), q(1), None, Allowed),
            Route::Refuse(Error::UnknownProduct(_))
        ));
        assert!(matches!(
            route(p(1), q(2), Some(row(1, 0, 0, false)), Allowed),
            Route::Refuse(Error::InsufficientStock { available: 1, .. })
        ));
        assert!(matches!(
            route(p(1), q(2), Some(row(1, 0, 0, true)), Refused),
            Route::Locked
        ));
        assert!(matches!(
            route(p(1), q(2), Some(row(1, 5, 0, false)), Allowed),
            Route::Locked
        ));
        assert!(matches!(
            route(p(1), q(2), Some(row(1, 5, 0, false)), Refused),
            Route::Refuse(Error::InsufficientStock { .. })
        ));
        // Units arrived between the strategy's take and its read: the locked path takes them.
        assert!(matches!(
            route(p(1), q(2), Some(row(3, 0, 0, false)), Allowed),
            Route::Locked
        ));
    }

    #[test]
    fn the_locked_path_decides_plain_backordered_or_refused() {
        use Backorders::*;
        assert_eq!(
            grant(want(2, Allowed), Some(&row(2, 0, 0, false)), &[]).ok(),
            Some(Grant::Plain)
        );
        assert_eq!(
            grant(want(3, Allowed), Some(&row(1, 5, 2, false)), &[]).ok(),
            Some(Grant::Backordered {
                allocated: 1,
                backordered: 2
            })
        );
        assert!(matches!(
            grant(want(5, Allowed), Some(&row(1, 5, 2, false)), &[]),
            Err(Error::InsufficientStock { available: 4, .. })
        ));
        assert!(matches!(
            grant(want(3, Refused), Some(&row(1, 5, 0, false)), &[]),
            Err(Error::InsufficientStock { available: 1, .. })
        ));
        assert!(matches!(
            grant(want(1, Allowed), None, &[]),
            Err(Error::UnknownProduct(_))
        ));
        let pinned = LocationId::new("north").expect("id");
        let mut pinned_want = want(1, Allowed);
        pinned_want.pinned = Some(&pinned);
        assert!(matches!(
            grant(pinned_want, Some(&row(5, 0, 0, false)), &[]),
            Err(Error::UnknownLocation { .. })
        ));
    }

    #[test]
    fn a_located_product_is_allocated_over_its_locations() {
        let north = LocationId::new("north").expect("id");
        let sources = [Source {
            location_id: north.clone(),
            priority: 0,
            available: 4,
        }];
        assert_eq!(
            grant(
                want(3, Backorders::Allowed),
                Some(&row(4, 0, 0, true)),
                &sources
            )
            .ok(),
            Some(Grant::Located(vec![(north, 3)]))
        );
        assert!(matches!(
            grant(
                want(5, Backorders::Allowed),
                Some(&row(4, 0, 0, true)),
                &sources
            ),
            Err(Error::InsufficientStock { available: 4, .. })
        ));
    }

    #[test]
    fn a_located_product_with_a_limit_backorders_what_its_locations_lack() {
        let (north, south) = (
            LocationId::new("north").expect("id"),
            LocationId::new("south").expect("id"),
        );
        let sources = [
            Source {
                location_id: south.clone(),
                priority: 1,
                available: 1,
            },
            Source {
                location_id: north.clone(),
                priority: 0,
                available: 2,
            },
        ];
        let limited = row(3, 4, 1, true);
        assert_eq!(
            grant(want(5, Backorders::Allowed), Some(&limited), &sources).ok(),
            Some(Grant::LocatedBackordered {
                parts: vec![(north.clone(), 2), (south.clone(), 1)],
                backordered: 2
            })
        );
        assert!(matches!(
            grant(want(7, Backorders::Allowed), Some(&limited), &sources),
            Err(Error::InsufficientStock { available: 6, .. })
        ));
        assert!(matches!(
            grant(want(5, Backorders::Refused), Some(&limited), &sources),
            Err(Error::InsufficientStock { available: 3, .. })
        ));
        let mut single = want(5, Backorders::Allowed);
        single.mode = AllocationMode::Single;
        assert!(matches!(
            grant(single, Some(&limited), &sources),
            Err(Error::InsufficientStock { .. })
        ));
        let mut pinned = want(2, Backorders::Allowed);
        pinned.pinned = Some(&south);
        assert!(matches!(
            grant(pinned, Some(&limited), &sources),
            Err(Error::InsufficientStock { available: 1, .. })
        ));
        assert_eq!(
            grant(want(1, Backorders::Allowed), Some(&row(0, 4, 0, true)), &[]).ok(),
            Some(Grant::LocatedBackordered {
                parts: Vec::new(),
                backordered: 1
            })
        );
    }
}
