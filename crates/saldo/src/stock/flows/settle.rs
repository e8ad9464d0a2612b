//! Settling an order's reservations: confirm (active → confirmed, units leave `reserved`),
//! release (active → released, units back to `available`), and the read of an order. The
//! sweeper's expiry ([`super::sweeper`]) and the batched confirm settle through [`settle`] too.
//!
//! Lock order: the order's reservation rows first, then its stock rows in ascending product
//! id, then the location rows of what was allocated at locations.

use crate::domain::OrderId;
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::decide::settle as decide;
use crate::stock::model::{ConfirmOutcome, ReleaseOutcome, ReservedItem, Row, Status};
use crate::stock::rows::{backorders, locations, reservations, stock};
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::{checkout, in_transaction};
use crate::telemetry;

/// Moves `rows` (locked, active) to `status`: their stock rows (locked here, in product order),
/// the backorders they drop (release, expiry), their location rows, then the rows themselves.
pub(crate) async fn settle(tx: &Tx<'_>, rows: &[&Row], status: Status) -> Result<(), Error> {
    if rows.is_empty() {
        return Ok(());
    }
    stock::apply_deltas(tx, &decide::stock_deltas(rows, status)).await?;
    if status != Status::Confirmed {
        backorders::drop(tx, rows).await?;
    }
    let allocated: Vec<uuid::Uuid> = rows.iter().filter(|r| r.allocated).map(|r| r.id).collect();
    if !allocated.is_empty() {
        let allocations = locations::allocations_of(tx, &allocated).await?;
        if allocations.is_empty() {
            return Err(Error::invariant(format!(
                "{} allocated reservation rows have no allocations",
                allocated.len()
            )));
        }
        let deltas = decide::location_deltas(&allocations, status);
        locations::lock_and_apply(tx, &deltas).await?;
    }
    // settled_at is taken after the stock rows are locked, so it orders consistently with the
    // physical counts the audit compares against.
    reservations::settle(tx, rows, status).await
}

/// The order's rows, locked, with their allocations; an order without rows is unknown.
pub(crate) async fn lock_order(tx: &Tx<'_>, order_id: &OrderId) -> Result<Vec<Row>, Error> {
    let mut rows = reservations::lock_order(tx, order_id).await?;
    if rows.is_empty() {
        return Err(Error::UnknownOrder(order_id.clone()));
    }
    locations::attach(tx, &mut rows).await?;
    Ok(rows)
}

pub(crate) async fn confirm(store: &Store, order_id: &OrderId) -> Result<ConfirmOutcome, Error> {
    let dialect = store.dialect();
    let (outcome, newly) =
        in_transaction(&store.pool, &store.tx, Operation::Confirm, move |client| {
            crate::tx_body!(client => async {
                let tx = Tx::new(client, dialect);
                let mut rows = lock_order(&tx, order_id).await?;
                let active: Vec<&Row> = rows
                    .iter()
                    .filter(|r| r.item.status == Status::Active)
                    .collect();
                settle(&tx, &active, Status::Confirmed).await?;
                Ok(decide::confirmed(order_id, &mut rows))
            })
        })
        .await?;
    note_confirmed(&outcome, newly);
    Ok(outcome)
}

/// Counts what a committed confirm moved, and a confirm that moved rows while part of the
/// order was already lost (the customer paid for items it no longer holds: re-reserve or
/// refund).
pub(crate) fn note_confirmed(outcome: &ConfirmOutcome, newly: u64) {
    telemetry::settled("confirmed", newly);
    if !outcome.missing.is_empty() && newly > 0 {
        metrics::counter!(telemetry::CONFIRMED_WITH_MISSING).increment(1);
    }
}

pub(crate) async fn release(store: &Store, order_id: &OrderId) -> Result<ReleaseOutcome, Error> {
    let dialect = store.dialect();
    let (outcome, newly) =
        in_transaction(&store.pool, &store.tx, Operation::Release, move |client| {
            crate::tx_body!(client => async {
                let tx = Tx::new(client, dialect);
                let rows = lock_order(&tx, order_id).await?;
                let active: Vec<&Row> = rows
                    .iter()
                    .filter(|r| r.item.status == Status::Active)
                    .collect();
                settle(&tx, &active, Status::Released).await?;
                let newly = active.len() as u64;
                Ok((decide::released(order_id, &rows), newly))
            })
        })
        .await?;
    telemetry::settled("released", newly);
    Ok(outcome)
}

/// Every reservation row of an order (with its allocations).
pub(crate) async fn order(store: &Store, order_id: &OrderId) -> Result<Vec<ReservedItem>, Error> {
    let client = checkout(&store.pool, Operation::Order).await?;
    let tx = Tx::new(&client, store.dialect());
    let mut rows = reservations::of_order(&tx, order_id).await?;
    if rows.is_empty() {
        return Err(Error::UnknownOrder(order_id.clone()));
    }
    locations::attach(&tx, &mut rows).await?;
    Ok(rows.into_iter().map(|r| r.item).collect())
}
