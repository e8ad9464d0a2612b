//! Repair (issue 15, "counters that drift with no way to fix"): bring each divergent product's
//! row back to what its reservations and history say, in two steps.
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
//! Bounded: at most [`crate::audit::MAX_DIVERGENCES`] products per repair, one short
//! transaction each. Lock order: one stock row per transaction, nothing else locked.
//!
//! On Citus the plan reads each product on its own shard group ([`audit::citus`]: no common
//! snapshot across shards, and none is needed, since `apply` re-reads every product under its
//! lock), and the lock, the re-read, the write and the movement all name the product, so each
//! transaction stays on that one shard group.

use serde::Serialize;

use crate::audit::{self, Divergence, ProductState};
use crate::domain::{ProductId, Reason, MAX_STOCK_COUNT};
use crate::error::Error;
use crate::operation::Operation;
use crate::store::handle::Store;
use crate::store::retry::in_transaction;

const LOCK_ROW: &str = "SELECT version, located FROM stock WHERE product_id = $1 FOR UPDATE";
const SET_ROW: &str = crate::stock_update!(
    "available = $2, reserved = $3, backordered = $4",
    "WHERE product_id = $1"
);
const RECORD: &str = "INSERT INTO stock_movements (product_id, kind, quantity, reason) \
     VALUES ($1, 'adjustment', 0, $2)";

/// A product's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub available: i64,
    pub reserved: i64,
    /// Units backordered (Σ live backorders; 0 for a product without backorders).
    pub backordered: i64,
}

/// What became (or would become) of one product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RepairAction {
    /// Dry run: this is what `apply` would write.
    Planned,
    /// Written, with its `repair: …` movement.
    Applied,
    /// Left alone: the row changed between the plan and the lock (its version moved).
    Changed,
    /// Left alone: the history says fewer units on hand than are actively reserved, or more
    /// than a count may hold; no row value can satisfy both invariants. Count the product.
    /// Also a product stocked per location: its row is the sum of its locations, which a
    /// product-wide repair would break; count its locations.
    Unrepairable,
}

/// One divergent product: its row as planned from, and the counters it should have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProductRepair {
    pub product_id: ProductId,
    /// The row's version the plan was made against.
    pub version: i64,
    pub before: Counts,
    pub after: Counts,
    pub action: RepairAction,
}

/// A whole repair: every divergent product, and what the audit says afterwards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RepairReport {
    pub applied: bool,
    pub products: Vec<ProductRepair>,
    /// The audit after the repair (dry run: the audit as it stands).
    pub remaining: Vec<Divergence>,
}

fn target(state: &ProductState) -> (Counts, RepairAction) {
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

/// What a repair would change, per divergent product (read-only: the audit's snapshot on one
/// node, each product's own shard on Citus).
pub async fn plan(store: &Store) -> Result<Vec<ProductRepair>, Error> {
    Ok(audit::divergent_products_of(&store.pool, store.layout())
        .await?
        .iter()
        .map(|state| {
            let (after, action) = target(state);
            ProductRepair {
                product_id: state.product_id,
                version: state.version,
                before: Counts {
                    available: state.available,
                    reserved: state.reserved,
                    backordered: state.backordered,
                },
                after,
                action,
            }
        })
        .collect())
}

impl ProductRepair {
    /// Old and new values (`backordered` only when it moves, so a product without backorders
    /// reads as before) and the version: what the movement's reason and the CLI say.
    pub fn describe(&self) -> String {
        let backordered = if self.before.backordered == self.after.backordered {
            String::new()
        } else {
            format!(
                ", backordered {} -> {}",
                self.before.backordered, self.after.backordered
            )
        };
        format!(
            "available {} -> {}, reserved {} -> {}{backordered} (version {})",
            self.before.available,
            self.after.available,
            self.before.reserved,
            self.after.reserved,
            self.version
        )
    }
}

/// The movement's reason: `repair: ` and what changed.
fn reason(p: &ProductRepair) -> Result<Reason, Error> {
    Ok(Reason::new(format!("repair: {}", p.describe()))?)
}

async fn apply_one(store: &Store, planned: &ProductRepair) -> Result<RepairAction, Error> {
    let planned = planned.clone();
    // The product's state, read on its shard group on Citus (one routed statement).
    let state_sql = audit::product_state_sql_of(store.layout());
    in_transaction(&store.pool, &store.tx, Operation::Repair, move |client| {
        let planned = planned.clone();
        crate::tx_body!(client => async move {
            let id = planned.product_id.get();
            let Some(row) = client.query_opt(LOCK_ROW, &[&id]).await? else {
                return Ok(RepairAction::Changed);
            };
            let version: i64 = row.try_get("version")?;
            if row.try_get::<_, bool>("located")? {
                return Ok(RepairAction::Unrepairable);
            }
            if version != planned.version {
                return Ok(RepairAction::Changed);
            }
            let state = ProductState::from_row(
                &client.query_one(state_sql, &[&Some(id)]).await?,
            )?;
            let (after, action) = target(&state);
            if after != planned.after {
                // Only a write behind the engine's back moves these without the version.
                return Ok(RepairAction::Changed);
            }
            if action == RepairAction::Unrepairable {
                return Ok(action);
            }
            // In range: 0 ≤ reserved, 0 ≤ available, their sum ≤ MAX_STOCK_COUNT (checked).
            let available = i32::try_from(after.available)
                .map_err(|_| Error::invariant("repair target available out of range"))?;
            let reserved = i32::try_from(after.reserved)
                .map_err(|_| Error::invariant("repair target reserved out of range"))?;
            let backordered = i32::try_from(after.backordered)
                .map_err(|_| Error::invariant("repair target backordered out of range"))?;
            client
                .execute(SET_ROW, &[&id, &available, &reserved, &backordered])
                .await?;
            client
                .execute(RECORD, &[&id, &reason(&planned)?.as_str()])
                .await?;
            Ok(RepairAction::Applied)
        })
    })
    .await
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

/// Plans, applies when `apply_it`, and re-audits.
pub async fn repair(store: &Store, apply_it: bool) -> Result<RepairReport, Error> {
    let planned = plan(store).await?;
    let products = if apply_it {
        apply(store, &planned).await?
    } else {
        planned
    };
    let remaining = audit::audit_stock_of(&store.pool, store.layout()).await?;
    Ok(RepairReport {
        applied: apply_it,
        products,
        remaining,
    })
}
