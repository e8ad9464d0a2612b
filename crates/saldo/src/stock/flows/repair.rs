//! Repair of counters that drifted: bring each divergent product's row back to what its
//! reservations and history say, in two steps.
//!
//! [`plan`] reads the divergent products in the audit's snapshot and says, per product, what
//! it would change: `reserved` ← Σ active reservations (their allocated units), `available` ←
//! the history's on-hand (last count + adjustments − confirmed − sold since) minus that,
//! `backordered` ← Σ live backorders (within the limit, or the product is unrepairable). [`apply`] then takes each
//! product alone: it locks the stock row, and if the row's version moved since the plan (an
//! order, sale, count or sweep touched it meanwhile) it leaves the product alone and reports
//! it; otherwise it recomputes the targets under the lock (every engine write to a product's
//! reservations, sales or history holds this row lock, so they cannot move now), writes them
//! and records a zero-quantity `adjustment` movement whose reason (`repair: …`) carries the old
//! and new values: the history was right and stays as it was, the row is brought back to it,
//! and the movement is the trace. [`repair`] plans, applies when asked, and re-audits.
//!
//! A product stocked per location also gets its location rows set back (see
//! [`crate::stock::decide::repair`] for the two readings of a location's drift it tries); its
//! row stays the sum of its locations, and one that no reading justifies is unrepairable.
//!
//! Bounded: at most [`crate::audit::MAX_DIVERGENCES`] products per repair, one short
//! transaction each. Lock order: one stock row per transaction, then (located) that product's
//! location rows, as every engine path takes them.
//!
//! On Citus the plan reads each product on its own shard group ([`audit::citus`]: no common
//! snapshot across shards, and none is needed, since `apply` re-reads every product under its
//! lock), and the lock, the re-read, the write and the movement all name the product, so each
//! transaction stays on that one shard group.

use crate::audit::{self, Finding, ProductState};
use std::collections::BTreeMap;

use crate::domain::{ProductId, Reason};
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::decide::repair::{located_target, target, LocationNow};
use crate::stock::decide::settle::LocationDeltas;
pub use crate::stock::model::{
    Counts, LocationCounts, LocationRepair, ProductRepair, RepairAction, RepairReport,
};
use crate::stock::movements::MoveKind;
use crate::stock::rows::locations;
use crate::stock::rows::stock::{self, Movement};
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::{checkout, in_transaction};

/// What a repair would change, per divergent product (read-only: the audit's snapshot on one
/// node, each product's own shard on Citus; a located product's rows read right after it, which
/// `apply` checks again under the lock).
pub async fn plan(store: &Store) -> Result<Vec<ProductRepair>, Error> {
    let states = audit::divergent_products_of(&store.pool, store.layout()).await?;
    let located = located_rows(store, &states).await?;
    Ok(states
        .iter()
        .map(|state| {
            let (after, locations, action) = match located.get(&state.product_id.get()) {
                Some(rows) => located_target(state, rows),
                None => {
                    let (after, action) = target(state);
                    (after, Vec::new(), action)
                }
            };
            ProductRepair {
                product_id: state.product_id,
                version: state.version,
                before: Counts {
                    available: state.available,
                    reserved: state.reserved,
                    backordered: state.backordered,
                },
                after,
                locations,
                action,
            }
        })
        .collect())
}

/// The location rows of those of `states` stocked per location (none on Citus, where stock per
/// location is refused).
async fn located_rows(
    store: &Store,
    states: &[ProductState],
) -> Result<BTreeMap<i64, Vec<LocationNow>>, Error> {
    if states.is_empty() || !store.dialect().offers_locations_and_backorders() {
        return Ok(BTreeMap::new());
    }
    let client = checkout(&store.pool, Operation::Repair).await?;
    let tx = Tx::new(&client, store.dialect());
    let ids: Vec<i64> = states.iter().map(|s| s.product_id.get()).collect();
    locations::with_held(&tx, &ids).await
}

/// The movement's reason: `repair: ` and what changed.
fn reason(p: &ProductRepair) -> Result<Reason, Error> {
    Ok(Reason::new(format!("repair: {}", p.describe()))?)
}

async fn apply_one(store: &Store, planned: &ProductRepair) -> Result<RepairAction, Error> {
    let planned = planned.clone();
    let writer = store.writer();
    in_transaction(&store.pool, &store.tx, Operation::Repair, move |client| {
        let planned = planned.clone();
        crate::write_tx!(client, writer => |tx| async {
            tx.cause(MoveKind::Repair.cause());
            let id = planned.product_id.get();
            let Some(row) = stock::lock_one(&tx, planned.product_id).await? else {
                return Ok(RepairAction::Changed);
            };
            if row.stock.version != planned.version {
                return Ok(RepairAction::Changed);
            }
            // On Citus routed whole to the product's shard group (one statement).
            let state = ProductState::from_row(
                &tx.query_one(&audit::sql::PRODUCT_STATE, &[&Some(id)]).await?,
            )?;
            let (after, changes, action) = if row.located {
                locations::lock(&tx, &[id]).await?;
                let now = locations::with_held(&tx, &[id]).await?;
                located_target(&state, now.get(&id).map_or(&[][..], Vec::as_slice))
            } else {
                let (after, action) = target(&state);
                (after, Vec::new(), action)
            };
            if after != planned.after || changes != planned.locations {
                // Only a write behind the engine's back moves these without the version.
                return Ok(RepairAction::Changed);
            }
            if action == RepairAction::Unrepairable {
                return Ok(action);
            }
            write_counts(&tx, planned.product_id, after, &changes).await?;
            let why = reason(&planned)?;
            let movement = Movement {
                product: planned.product_id,
                kind: "adjustment",
                quantity: 0,
                reason: why.as_str(),
                location: None,
            };
            stock::record(&tx, movement).await?;
            Ok(RepairAction::Applied)
        })
    })
    .await
}

/// Writes a repair's targets: the product row, then (located) its location rows, which the
/// transaction holds locked, by their deltas.
async fn write_counts(
    tx: &Tx<'_>,
    product: ProductId,
    after: Counts,
    changes: &[LocationRepair],
) -> Result<(), Error> {
    // In range: 0 ≤ reserved, 0 ≤ available, their sum ≤ MAX_STOCK_COUNT (checked).
    let narrow = |v: i64, what: &str| {
        i32::try_from(v).map_err(|_| Error::invariant(format!("repair target {what} out of range")))
    };
    let available = narrow(after.available, "available")?;
    let reserved = narrow(after.reserved, "reserved")?;
    let backordered = narrow(after.backordered, "backordered")?;
    stock::repair(tx, product, available, reserved, backordered).await?;
    let mut deltas = LocationDeltas::new();
    for c in changes {
        deltas.insert(
            (product.get(), c.location_id.clone()),
            (
                narrow(c.after.available - c.before.available, "location available")?,
                narrow(c.after.reserved - c.before.reserved, "location reserved")?,
            ),
        );
    }
    locations::apply_deltas(tx, &deltas).await
}

/// Applies a plan product by product (see the module header); returns each product's fate.
pub async fn apply(store: &Store, plan: &[ProductRepair]) -> Result<Vec<ProductRepair>, Error> {
    let mut out = Vec::with_capacity(plan.len());
    for planned in plan {
        let action = match planned.action {
            RepairAction::Planned => apply_one(store, planned).await?,
            other => other,
        };
        if action == RepairAction::Changed {
            tracing::warn!(product_id = %planned.product_id, "repair: the product changed during the repair; left alone");
        }
        out.push(ProductRepair {
            action,
            ..planned.clone()
        });
    }
    Ok(out)
}

/// Plans, applies when `apply_it`, repairs the ledger the same way
/// ([`crate::ledger::repair`]), and re-audits both: `remaining` lists every stock and ledger
/// finding, so an empty one means the whole audit is clean.
pub async fn repair(store: &Store, apply_it: bool) -> Result<RepairReport, Error> {
    let planned = plan(store).await?;
    let products = if apply_it {
        apply(store, &planned).await?
    } else {
        planned
    };
    let ledger = crate::ledger::repair::repair(store, apply_it).await?;
    let stock = audit::audit_stock_of(&store.pool, store.layout()).await?;
    let mut remaining: Vec<Finding> = stock.into_iter().map(Finding::Product).collect();
    remaining.extend(ledger.remaining.findings());
    Ok(RepairReport {
        applied: apply_it,
        products,
        ledger,
        remaining,
    })
}
