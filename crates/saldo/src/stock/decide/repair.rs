//! What a repair writes to a divergent product: `reserved` ← Σ active reservations (their
//! allocated units), `available` ← the history's on-hand minus that, `backordered` ← Σ live
//! backorders; unrepairable when no row value can satisfy every invariant.
//!
//! A product stocked per location ([`located_target`]) also has location rows, whose sum its
//! row must stay. Each location's `reserved` ← the active allocations at it. For its
//! `available` the history names no location, so two readings of the drift are tried: the
//! locations' `available` was right and only `reserved` drifted (a counter bumped on its own),
//! or each location's on-hand (available + reserved) was right and units only slid between
//! its two counters (a take or a release that wrote one side). A reading is kept when every
//! location stays at or above zero and the locations then sum to the product's target. When
//! neither fits, or both fit and disagree, no write can be justified: unrepairable, count the
//! locations.

use crate::audit::ProductState;
use crate::domain::{LocationId, MAX_STOCK_COUNT};
use crate::stock::model::{Counts, LocationCounts, LocationRepair, RepairAction};

/// The counters `state`'s history says, and whether they can be written.
pub(crate) fn target(state: &ProductState) -> (Counts, RepairAction) {
    let reserved = state.active_reserved;
    let available = state.expected_on_hand - reserved;
    let backordered = state.live_backordered;
    let action = if available < 0
        || state.expected_on_hand > i64::from(MAX_STOCK_COUNT)
        || backordered > state.backorder_limit
    {
        RepairAction::Unrepairable
    } else {
        RepairAction::Planned
    };
    (
        Counts {
            available,
            reserved,
            backordered,
        },
        action,
    )
}

/// One location of a located product as a repair reads it: its row, and the units the active
/// reservations hold allocated at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LocationNow {
    pub location_id: LocationId,
    pub available: i64,
    pub reserved: i64,
    pub held: i64,
}

/// [`target`] for a product stocked per location, with the location rows to change (see the
/// module header); no location rows when unrepairable.
pub(crate) fn located_target(
    state: &ProductState,
    locations: &[LocationNow],
) -> (Counts, Vec<LocationRepair>, RepairAction) {
    let (after, action) = target(state);
    let held: i64 = locations.iter().map(|l| l.held).sum();
    if action == RepairAction::Unrepairable || held != after.reserved {
        return (after, Vec::new(), RepairAction::Unrepairable);
    }
    let fits = |available: &[i64]| {
        available.iter().all(|a| *a >= 0) && available.iter().sum::<i64>() == after.available
    };
    let kept_available: Vec<i64> = locations.iter().map(|l| l.available).collect();
    let kept_on_hand: Vec<i64> = locations
        .iter()
        .map(|l| l.available + l.reserved - l.held)
        .collect();
    let chosen = match (fits(&kept_available), fits(&kept_on_hand)) {
        (true, true) if kept_available != kept_on_hand => None,
        (true, _) => Some(kept_available),
        (false, true) => Some(kept_on_hand),
        (false, false) => None,
    };
    let Some(available) = chosen else {
        return (after, Vec::new(), RepairAction::Unrepairable);
    };
    let changes = locations
        .iter()
        .zip(available)
        .filter(|(l, a)| (l.available, l.reserved) != (*a, l.held))
        .map(|(l, a)| LocationRepair {
            location_id: l.location_id.clone(),
            before: LocationCounts {
                available: l.available,
                reserved: l.reserved,
            },
            after: LocationCounts {
                available: a,
                reserved: l.held,
            },
        })
        .collect();
    (after, changes, RepairAction::Planned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ProductId;

    /// A product whose history says 7 on hand, 4 of them actively reserved.
    fn state() -> ProductState {
        ProductState {
            product_id: ProductId::new(1).expect("id"),
            available: 0,
            reserved: 0,
            version: 1,
            active_reserved: 4,
            backordered: 0,
            backorder_limit: 0,
            live_backordered: 0,
            expected_on_hand: 7,
            damaged: 0,
            expected_damaged: 0,
            safety_stock: 0,
            expected_safety_stock: 0,
            incoming: 0,
            expected_incoming: 0,
        }
    }

    fn at(id: &str, available: i64, reserved: i64, held: i64) -> LocationNow {
        LocationNow {
            location_id: LocationId::new(id).expect("location"),
            available,
            reserved,
            held,
        }
    }

    fn afters(changes: &[LocationRepair]) -> Vec<(&str, i64, i64)> {
        changes
            .iter()
            .map(|c| (c.location_id.as_str(), c.after.available, c.after.reserved))
            .collect()
    }

    #[test]
    fn a_reserved_counter_bumped_alone_is_set_back_to_its_allocations() {
        let (after, changes, action) =
            located_target(&state(), &[at("a", 0, 3, 3), at("b", 3, 2, 1)]);
        assert_eq!(action, RepairAction::Planned);
        assert_eq!((after.available, after.reserved), (3, 4));
        assert_eq!(afters(&changes), vec![("b", 3, 1)]);
    }

    #[test]
    fn units_slid_from_available_to_reserved_slide_back() {
        let (_, changes, action) = located_target(&state(), &[at("a", 0, 3, 3), at("b", 2, 2, 1)]);
        assert_eq!(action, RepairAction::Planned);
        assert_eq!(afters(&changes), vec![("b", 3, 1)]);
    }

    #[test]
    fn locations_that_disagree_with_the_history_are_unrepairable() {
        let (_, changes, action) = located_target(&state(), &[at("a", 1, 3, 3), at("b", 3, 1, 1)]);
        assert_eq!(action, RepairAction::Unrepairable);
        assert!(changes.is_empty());
    }

    #[test]
    fn two_readings_that_both_fit_and_disagree_are_unrepairable() {
        // Reserved moved from a to b: keeping available gives a 1, b 2; keeping on-hand gives
        // a 0, b 3. Both sum to 3; the history cannot say which location is right.
        let (_, _, action) = located_target(&state(), &[at("a", 1, 2, 3), at("b", 2, 2, 1)]);
        assert_eq!(action, RepairAction::Unrepairable);
    }

    #[test]
    fn allocations_that_do_not_add_up_to_the_reservations_are_unrepairable() {
        let (_, _, action) = located_target(&state(), &[at("a", 0, 3, 2), at("b", 3, 1, 1)]);
        assert_eq!(action, RepairAction::Unrepairable);
    }

    #[test]
    fn a_location_that_would_go_negative_is_unrepairable() {
        // Keeping on-hand at b would give it -1; keeping available does not sum to 3.
        let (_, _, action) = located_target(&state(), &[at("a", 4, 3, 3), at("b", 0, 0, 1)]);
        assert_eq!(action, RepairAction::Unrepairable);
    }
}
