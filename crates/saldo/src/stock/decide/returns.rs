//! A return's decisions on the order's rows already locked: whether the request replays the
//! return stored under its id, which line each item comes back to (the product's latest row),
//! and where the units go when the request names no location (where the line was allocated).
//! "Never more than was confirmed" is not decided here: the conditional UPDATE of the line's
//! `returned` count decides it (`rows::returns::raise`), on the row this transaction holds.

use crate::domain::{LocationId, OrderId, ProductId};
use crate::error::Error;
use crate::stock::model::{Return, ReturnRequest, Row};

/// Whether `request` asks for what `done` did: the same order, reason and items (a location
/// the request left to the default matches whatever the default was).
pub(crate) fn same_request(done: &Return, request: &ReturnRequest) -> bool {
    done.order_id == request.order_id
        && done.reason == request.reason.as_str()
        && done.items.len() == request.items.iter().count()
        && done.items.iter().zip(request.items.iter()).all(|(d, r)| {
            d.product_id == r.product_id
                && d.quantity == r.quantity.get()
                && d.state == r.state
                && r.location_id
                    .as_ref()
                    .is_none_or(|l| d.location_id.as_ref() == Some(l))
        })
}

/// The line `product` comes back to: the order's latest row of it ([`Error::NotInOrder`] when
/// the order has none). The rows come per product, oldest first.
pub(crate) fn line_of<'a>(
    order_id: &OrderId,
    rows: &'a [Row],
    product: ProductId,
) -> Result<&'a Row, Error> {
    rows.iter()
        .rev()
        .find(|r| r.item.product_id == product)
        .ok_or_else(|| Error::NotInOrder {
            order_id: order_id.clone(),
            product_id: product,
        })
}

/// Where units of `line` go when the request names no location: the first location (by id) it
/// was allocated at; `None` when it has no allocations (a product not stocked per location).
pub(crate) fn default_location(line: &Row) -> Option<LocationId> {
    line.item
        .allocations
        .iter()
        .map(|a| &a.location_id)
        .min()
        .cloned()
}
