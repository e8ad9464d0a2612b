//! The events of an order's stream: `reservation.created`, `.confirmed`, `.released`,
//! `.expired`, `.extended`, and `backorder.filled`, each with the order's lines it is about, at
//! the order's next position. That position is counted on the order's reservation rows: the
//! transaction that writes an event writes the rows it is about with the new position, so the
//! greatest over an order's rows is always the position of its latest event. Two transactions
//! that take the same position (each holding only some of an order's rows) meet on the events'
//! unique index; the later reruns and takes the next one (`Error::is_retryable`).

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::domain::Tags;
use crate::stock::model::{Fill, ReservedItem, Row};
use crate::store::dialect::Tx;
use crate::store::outbox::{NewEvent, StreamType};

pub(crate) const CREATED: &str = "reservation.created";
pub(crate) const CONFIRMED: &str = "reservation.confirmed";
pub(crate) const RELEASED: &str = "reservation.released";
pub(crate) const EXPIRED: &str = "reservation.expired";
pub(crate) const EXTENDED: &str = "reservation.extended";
pub(crate) const BACKORDER_FILLED: &str = "backorder.filled";
pub(crate) const SALE_CREATED: &str = "sale.created";
pub(crate) const RETURNED: &str = "order.returned";
/// A stock move's event (`stock::flows::moves`), the only one of its stream.
pub const STOCK_MOVED: &str = "stock.moved";

/// Every event type the engine's stock side writes (the product's `stock.changed` included).
pub const STOCK_EVENT_TYPES: &[&str] = &[
    crate::stock::rows::stock::STOCK_CHANGED,
    CREATED,
    CONFIRMED,
    RELEASED,
    EXPIRED,
    EXTENDED,
    BACKORDER_FILLED,
    SALE_CREATED,
    RETURNED,
    STOCK_MOVED,
];

/// The position of an order's latest event, from all its rows (0: none yet).
pub(crate) fn last_position(rows: &[Row]) -> i64 {
    rows.iter().map(|r| r.order_position).max().unwrap_or(0)
}

/// The last positions of the orders of `rows`, from rows that hold all of each order's rows.
pub(crate) fn last_positions<'a>(rows: impl IntoIterator<Item = &'a Row>) -> HashMap<String, i64> {
    let mut last: HashMap<String, i64> = HashMap::new();
    for r in rows {
        let p = last.entry(r.order_id.clone()).or_default();
        *p = (*p).max(r.order_position);
    }
    last
}

fn line(item: &ReservedItem) -> Value {
    json!({
        "product_id": item.product_id,
        "quantity": item.quantity,
        "backordered": item.backordered,
        "status": item.status,
        "expires_at": item.expires_at,
    })
}

/// Records one event of `order_id`'s stream about `items`.
pub(crate) fn emit<'a>(
    tx: &Tx<'_>,
    order_id: &str,
    position: i64,
    kind: &'static str,
    items: impl IntoIterator<Item = &'a ReservedItem>,
) {
    emit_with(tx, order_id, position, kind, items, |_| {});
}

/// Records `reservation.created` for new lines of `order_id`, with the order's reference and
/// metadata (its first request's), so a follower can tie the order to its cart or payment.
pub(crate) fn emit_created<'a>(
    tx: &Tx<'_>,
    order_id: &str,
    position: i64,
    items: impl IntoIterator<Item = &'a ReservedItem>,
    tags: &Tags,
) {
    emit_with(tx, order_id, position, CREATED, items, |data| {
        data["reference"] = json!(tags.reference);
        data["metadata"] = json!(tags.metadata);
    });
}

fn emit_with<'a>(
    tx: &Tx<'_>,
    order_id: &str,
    position: i64,
    kind: &'static str,
    items: impl IntoIterator<Item = &'a ReservedItem>,
    more: impl FnOnce(&mut Value),
) {
    if !tx.records_events() {
        return;
    }
    let lines: Vec<Value> = items.into_iter().map(line).collect();
    let mut data = json!({ "order_id": order_id, "items": lines });
    more(&mut data);
    tx.emit(NewEvent {
        stream_type: StreamType::Order,
        stream_id: order_id.to_owned(),
        position,
        kind,
        data,
    });
}

/// One `backorder.filled` event per filled backorder, at its order's position.
pub(crate) fn emit_fills(tx: &Tx<'_>, fills: &[Fill]) {
    if !tx.records_events() {
        return;
    }
    for f in fills {
        tx.emit(NewEvent {
            stream_type: StreamType::Order,
            stream_id: f.order_id.clone(),
            position: f.position,
            kind: BACKORDER_FILLED,
            data: json!({
                "order_id": f.order_id,
                "items": [{"product_id": f.product_id, "quantity": f.units, "sold": f.sold}],
            }),
        });
    }
}

/// The `order.returned` event of a return, at its order's next position.
pub(crate) fn emit_return(tx: &Tx<'_>, position: i64, ret: &crate::stock::model::Return) {
    if !tx.records_events() {
        return;
    }
    tx.emit(NewEvent {
        stream_type: StreamType::Order,
        stream_id: ret.order_id.as_str().to_owned(),
        position,
        kind: RETURNED,
        data: json!({
            "order_id": ret.order_id,
            "return_id": ret.return_id,
            "items": ret.items,
            "reason": ret.reason,
            "returned_at": ret.returned_at,
        }),
    });
}

/// The `sale.created` event of a sale (its stream's only event).
pub(crate) fn emit_sale(tx: &Tx<'_>, sale: &crate::stock::model::Sale) {
    if !tx.records_events() {
        return;
    }
    tx.emit(NewEvent {
        stream_type: StreamType::Sale,
        stream_id: sale.sale_id.as_str().to_owned(),
        position: 1,
        kind: SALE_CREATED,
        data: json!({
            "sale_id": sale.sale_id,
            "items": sale.items,
            "sold_at": sale.sold_at,
            "reference": sale.tags.reference,
            "metadata": sale.tags.metadata,
        }),
    });
}
