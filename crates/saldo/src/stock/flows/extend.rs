//! Hold extension: move the expiry of an order's active reservations to now + `ttl`, never past
//! `max_hold` since each was made, all or nothing. The order's rows are locked and the decision
//! is made on what was locked ([`decide::extend`]), so an extension racing the sweeper has one
//! winner; a lapsed hold (swept or only due) is [`Error::ReservationExpired`]. No stock row
//! moves, so every strategy runs this one transaction.

use std::collections::BTreeMap;

use crate::domain::{MaxHold, OrderId, Ttl};
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::decide::extend::plan;
use crate::stock::flows::order_events;
pub use crate::stock::model::ExtendOutcome;
use crate::stock::model::ReservedItem;
use crate::stock::rows::reservations;
use crate::store::handle::Store;
use crate::store::retry::in_transaction;

/// Extends the order's active reservations to now + `ttl`, all or nothing.
pub async fn extend(
    store: &Store,
    order_id: &OrderId,
    ttl: Ttl,
    max_hold: MaxHold,
) -> Result<ExtendOutcome, Error> {
    let writer = store.writer();
    let result = in_transaction(&store.pool, &store.tx, Operation::Extend, move |client| {
        crate::write_tx!(client, writer => |tx| async {
            let rows = reservations::lock_order(&tx, order_id).await?;
            let now = reservations::now(&tx).await?;
            let ids = plan(order_id, &rows, now, ttl, max_hold)?;
            let position = order_events::last_position(&rows) + 1;
            let new_expiry: BTreeMap<_, _> = reservations::extend(&tx, &ids, ttl, position)
                .await?
                .into_iter()
                .collect();
            let extended = rows
                .iter()
                .filter_map(|r| {
                    new_expiry.get(&r.id).map(|&expires_at| ReservedItem {
                        expires_at,
                        ..r.item.clone()
                    })
                })
                .collect();
            order_events::emit(&tx, order_id.as_str(), position, order_events::EXTENDED, &extended);
            Ok(ExtendOutcome {
                order_id: order_id.clone(),
                extended,
            })
        })
    })
    .await;
    crate::telemetry::extension_outcome(match &result {
        Ok(_) => "extended",
        Err(Error::ReservationExpired { .. }) => "expired",
        Err(Error::HoldLimitExceeded { .. }) => "hold_limit",
        Err(Error::NothingToExtend(_)) => "nothing_to_extend",
        Err(Error::UnknownOrder(_)) => "unknown_order",
        Err(_) => "error",
    });
    result
}
