//! What settling reservation rows does to the counters, and what confirm and release answer.
//!
//! Only allocated units (quantity − backordered) were reserved: a confirm sells them (they
//! leave `reserved`) and leaves the backorder pending; a release or an expiry gives them back
//! to `available` and drops the backorder. Units allocated at locations move the same way at
//! their locations. A row past its expiry is expired by whichever operation holds it
//! ([`transition`], the one table of what may happen to a reservation). Pure: the flows read
//! and lock the rows, these say what to write and what to answer.

use std::collections::{BTreeMap, HashMap};

use uuid::Uuid;

use crate::domain::{Lines, LocationId, OrderId, ProductId};
use crate::error::Error;
use crate::stock::decide::plan::{current_items, missing_items};
use crate::stock::model::{
    Allocation, ConfirmOutcome, PendingItem, ReleaseOutcome, ReservedItem, Row, Status,
};

/// Units per (product, location): (available, reserved) deltas.
pub(crate) type LocationDeltas = BTreeMap<(i64, LocationId), (i32, i32)>;

/// One row to settle and the status it settles to.
pub(crate) type Move<'a> = (&'a Row, Status);

/// (available, reserved) deltas per product of `moves`.
pub(crate) fn stock_deltas(moves: &[Move<'_>]) -> BTreeMap<ProductId, (i32, i32)> {
    let mut deltas: BTreeMap<ProductId, (i32, i32)> = BTreeMap::new();
    for (r, status) in moves {
        let d = deltas.entry(r.item.product_id).or_default();
        let allocated = r.item.quantity - r.item.backordered;
        if *status != Status::Confirmed {
            d.0 += allocated;
        }
        d.1 -= allocated;
    }
    deltas
}

/// Units of `allocations` to move at their locations when their rows settle as `moves` say.
pub(crate) fn location_deltas(allocations: &[Allocation], moves: &[Move<'_>]) -> LocationDeltas {
    let to: HashMap<Uuid, Status> = moves.iter().map(|(r, s)| (r.id, *s)).collect();
    let mut deltas = LocationDeltas::new();
    for a in allocations {
        let d = deltas.entry((a.product, a.location.clone())).or_default();
        if to.get(&a.reservation_id) != Some(&Status::Confirmed) {
            d.0 += a.quantity;
        }
        d.1 -= a.quantity;
    }
    deltas
}

/// The settling operations on an order's reservations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settling {
    Confirm,
    Release,
    /// The sweeper's, and every operation's on a row past its expiry.
    Expire,
}

/// What a settling operation does to one reservation row: the one table of allowed
/// transitions. A row past its expiry (stored active, `lapsed`) is expired by whatever
/// operation holds it. `None`: the row stays as it is (a replay, or nothing to do: a confirm
/// reports a dead line missing); `Some(Err(status))`: the operation cannot apply to a line in
/// that status (a release of a sold or expired line).
pub(crate) fn transition(row: &Row, op: Settling) -> Option<Result<Status, Status>> {
    use Settling::*;
    use Status::*;
    if row.lapsed {
        return Some(Ok(Expired));
    }
    match (row.item.status, op) {
        (Active, Confirm) => Some(Ok(Confirmed)),
        (Active, Release) => Some(Ok(Released)),
        (Active, Expire) => None,
        (Confirmed, Release) => Some(Err(Confirmed)),
        (Expired, Release) => Some(Err(Expired)),
        (Confirmed | Released | Expired, _) => None,
    }
}

/// The rows `op` moves, with their new status (a lapsed row expires whatever `op` is).
pub(crate) fn moves(rows: &[Row], op: Settling) -> Vec<Move<'_>> {
    rows.iter()
        .filter_map(|r| match transition(r, op) {
            Some(Ok(to)) => Some((r, to)),
            _ => None,
        })
        .collect()
}

/// Keeps the rows of the named lines (every row when `lines` is `None`: the whole order), after
/// checking that the order has a line of each named product ([`Error::NotInOrder`], before
/// anything is written). The order's last event position is read from all its rows first.
pub(crate) fn select(
    order_id: &OrderId,
    rows: &mut Vec<Row>,
    lines: Option<&Lines>,
) -> Result<(), Error> {
    let Some(lines) = lines else {
        return Ok(());
    };
    if let Some(product_id) = lines
        .iter()
        .find(|p| !rows.iter().any(|r| r.item.product_id == *p))
    {
        return Err(Error::NotInOrder {
            order_id: order_id.clone(),
            product_id,
        });
    }
    rows.retain(|r| lines.contains(r.item.product_id));
    Ok(())
}

/// A release that names its lines refuses, before anything is written, a named line that is
/// sold (confirmed) or expired (a line past its expiry included): the client named it, so
/// skipping it would answer as if it had been given back. The refusal names the line's state.
pub(crate) fn refuse_unreleasable(order_id: &OrderId, selected: &[Row]) -> Result<(), Error> {
    match current_items(selected)
        .into_iter()
        .find(|i| matches!(i.status, Status::Confirmed | Status::Expired))
    {
        Some(line) => Err(Error::NotReleasable {
            order_id: order_id.clone(),
            product_id: line.product_id,
            status: line.status,
        }),
        None => Ok(()),
    }
}

/// A row moved: its id, the status it reached, its order's event position of that move.
pub(crate) type Moved = (Uuid, Status, i64);

/// The order of the events one settling transaction writes per order: what expired first (a
/// confirm or release finds it so before it acts), then what was released or confirmed.
const EVENT_ORDER: [Status; 3] = [Status::Expired, Status::Released, Status::Confirmed];

/// The event position of each move: per order, one event per status its rows move to, in
/// [`EVENT_ORDER`], after the order's `last` position.
pub(crate) fn number(moves: &[Move<'_>], last: &HashMap<String, i64>) -> Vec<i64> {
    let mut next: HashMap<(&str, Status), i64> = HashMap::new();
    let mut orders: Vec<&str> = moves.iter().map(|(r, _)| r.order_id.as_str()).collect();
    orders.sort_unstable();
    orders.dedup();
    for order in orders {
        let mut position = last.get(order).copied().unwrap_or(0);
        for status in EVENT_ORDER {
            if moves
                .iter()
                .any(|(r, to)| r.order_id == order && *to == status)
            {
                position += 1;
                next.insert((order, status), position);
            }
        }
    }
    moves
        .iter()
        .map(|(r, to)| next.get(&(r.order_id.as_str(), *to)).copied().unwrap_or(0))
        .collect()
}

/// Applies what moved to the in-memory rows (after they were written).
pub(crate) fn apply(rows: &mut [Row], moved: &[Moved]) {
    let to: HashMap<Uuid, (Status, i64)> = moved.iter().map(|(id, s, p)| (*id, (*s, *p))).collect();
    for r in rows.iter_mut() {
        if let Some(&(status, position)) = to.get(&r.id) {
            r.item.status = status;
            r.lapsed = false;
            r.order_position = position;
        }
    }
}

/// What a confirm answers for one order whose rows it has just settled (`rows` as they are
/// now): every confirmed row is what it holds as sold, every product whose latest row is dead
/// (released, expired: now too, when it was past its expiry) is missing. Shared by the confirm
/// of one order and the batched confirm, so both answer alike.
pub(crate) fn confirmed(order_id: &OrderId, rows: &[Row]) -> ConfirmOutcome {
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
    ConfirmOutcome {
        order_id: order_id.clone(),
        confirmed,
        missing: missing_items(rows),
        pending,
    }
}

/// What a release answers for one order whose rows it has just settled (`rows` as they are now):
/// its lines released (now or before). An order with no released line was not released: a sold
/// line cannot be given back by a release, and an expired one has nothing left to give; the
/// refusal names the first such line and its status.
pub(crate) fn released(order_id: &OrderId, rows: &[Row]) -> Result<ReleaseOutcome, Error> {
    let lines = current_items(rows);
    let released: Vec<ReservedItem> = lines
        .iter()
        .filter(|i| i.status == Status::Released)
        .cloned()
        .collect();
    if released.is_empty() {
        if let Some(line) = lines.iter().find(|i| i.status != Status::Released) {
            return Err(Error::NotReleasable {
                order_id: order_id.clone(),
                product_id: line.product_id,
                status: line.status,
            });
        }
    }
    Ok(ReleaseOutcome {
        order_id: order_id.clone(),
        released,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ProductId;
    use chrono::Utc;

    fn row(status: Status, lapsed: bool) -> Row {
        Row {
            id: Uuid::new_v4(),
            order_id: "o1".into(),
            request_key: None,
            created_at: Utc::now(),
            allocated: false,
            lapsed,
            order_position: 0,
            tags: crate::domain::Tags::NONE,
            item: ReservedItem {
                product_id: ProductId::new(1).expect("id"),
                quantity: 1,
                status: if lapsed { Status::Expired } else { status },
                expires_at: Utc::now(),
                backordered: 0,
                allocations: Vec::new(),
                returned: 0,
            },
        }
    }

    /// Every status, lapsed or not, under every settling operation: the whole table.
    #[test]
    fn the_table_of_what_may_happen_to_a_reservation() {
        use Settling::*;
        use Status::*;
        let table = [
            (Active, false, Confirm, Some(Ok(Confirmed))),
            (Active, false, Release, Some(Ok(Released))),
            (Active, false, Expire, None),
            (Active, true, Confirm, Some(Ok(Expired))),
            (Active, true, Release, Some(Ok(Expired))),
            (Active, true, Expire, Some(Ok(Expired))),
            (Confirmed, false, Confirm, None),
            (Confirmed, false, Release, Some(Err(Confirmed))),
            (Confirmed, false, Expire, None),
            (Released, false, Confirm, None),
            (Released, false, Release, None),
            (Released, false, Expire, None),
            (Expired, false, Confirm, None),
            (Expired, false, Release, Some(Err(Expired))),
            (Expired, false, Expire, None),
        ];
        for (status, lapsed, op, expected) in table {
            assert_eq!(
                transition(&row(status, lapsed), op),
                expected,
                "{status:?} lapsed={lapsed} {op:?}"
            );
        }
        // Only an active row is ever stored lapsed; the table covers every other row.
        assert_eq!(table.len(), Status::ALL.len() * 3 + 3);
    }

    #[test]
    fn a_release_with_nothing_released_names_the_line_that_stops_it() {
        let order = OrderId::new("o1").expect("id");
        let sold = [row(Status::Confirmed, false)];
        assert!(matches!(
            released(&order, &sold),
            Err(Error::NotReleasable {
                status: Status::Confirmed,
                ..
            })
        ));
        let gone = [row(Status::Released, false)];
        assert_eq!(released(&order, &gone).expect("replay").released.len(), 1);
    }
}
