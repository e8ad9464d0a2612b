//! What a repair writes to a divergent product: `reserved` ← Σ active reservations (their
//! allocated units), `available` ← the history's on-hand minus that, `backordered` ← Σ live
//! backorders; unrepairable when no row value can satisfy every invariant.

use crate::audit::ProductState;
use crate::domain::MAX_STOCK_COUNT;
use crate::stock::model::{Counts, RepairAction};

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
