//! What settling reservation rows does to the counters, and what confirm and release answer.
//!
//! Only allocated units (quantity − backordered) were reserved: a confirm sells them (they
//! leave `reserved`) and leaves the backorder pending; a release or an expiry gives them back
//! to `available` and drops the backorder. Units allocated at locations move the same way at
//! their locations. Pure: the flows read and lock the rows, these say what to write.

use std::collections::BTreeMap;

use crate::domain::{LocationId, OrderId, ProductId};
use crate::stock::decide::plan::missing_items;
use crate::stock::model::{
    Allocation, ConfirmOutcome, PendingItem, ReleaseOutcome, ReservedItem, Row, Status,
};

/// Units per (product, location): (available, reserved) deltas.
pub(crate) type LocationDeltas = BTreeMap<(i64, LocationId), (i32, i32)>;

/// (available, reserved) deltas per product of settling `rows` to `status`.
pub(crate) fn stock_deltas(rows: &[&Row], status: Status) -> BTreeMap<ProductId, (i32, i32)> {
    let mut deltas: BTreeMap<ProductId, (i32, i32)> = BTreeMap::new();
    for r in rows {
        let d = deltas.entry(r.item.product_id).or_default();
        let allocated = r.item.quantity - r.item.backordered;
        if status != Status::Confirmed {
            d.0 += allocated;
        }
        d.1 -= allocated;
    }
    deltas
}

/// Units of `allocations` to move at their locations when their rows settle to `status`.
pub(crate) fn location_deltas(allocations: &[Allocation], status: Status) -> LocationDeltas {
    let mut deltas = LocationDeltas::new();
    for a in allocations {
        let d = deltas.entry((a.product, a.location.clone())).or_default();
        if status != Status::Confirmed {
            d.0 += a.quantity;
        }
        d.1 -= a.quantity;
    }
    deltas
}

/// What a confirm answers for one order whose active rows it has just settled: those rows
/// become confirmed in `rows`; every confirmed row is what it holds as sold, every product whose
/// latest row is dead is missing. Also how many rows this confirm moved. Shared by the confirm
/// of one order and the batched confirm, so both answer alike.
pub(crate) fn confirmed(order_id: &OrderId, rows: &mut [Row]) -> (ConfirmOutcome, u64) {
    let mut newly = 0u64;
    for r in rows.iter_mut() {
        if r.item.status == Status::Active {
            r.item.status = Status::Confirmed;
            newly += 1;
        }
    }
    let confirmed = rows
        .iter()
        .filter(|r| r.item.status == Status::Confirmed)
        .map(|r| r.item.clone())
        .collect();
    let pending = rows
        .iter()
        .filter(|r| r.item.status == Status::Confirmed && r.item.backordered > 0)
        .map(|r| PendingItem {
            product_id: r.item.product_id,
            quantity: r.item.backordered,
        })
        .collect();
    let outcome = ConfirmOutcome {
        order_id: order_id.clone(),
        confirmed,
        missing: missing_items(rows),
        pending,
    };
    (outcome, newly)
}

/// What a release answers: the rows it released and those released before.
pub(crate) fn released(order_id: &OrderId, rows: &[Row]) -> ReleaseOutcome {
    let released = rows
        .iter()
        .filter(|r| matches!(r.item.status, Status::Active | Status::Released))
        .map(|r| ReservedItem {
            status: Status::Released,
            ..r.item.clone()
        })
        .collect();
    ReleaseOutcome {
        order_id: order_id.clone(),
        released,
    }
}
