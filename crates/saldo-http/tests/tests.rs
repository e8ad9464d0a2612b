//! Integration tests of the HTTP service against a real PostgreSQL (see `saldo_lab::testing`): most
//! drive `app(state)` with `oneshot`, the `live` module goes through a real listener and client.
//!
//! Suites take their database from `crate::harness` (the workspace convention), so another
//! binary can rerun them on a differently configured cluster.

mod harness {
    #![allow(unused_imports)]
    pub use saldo_lab::testing::{test_db, test_db_with_pool, TestDb};
    /// The strategy the suites' apps run (`tests/batched.rs` reruns them on `batched`).
    pub const STRATEGY: saldo::stock::StrategyName = saldo::stock::StrategyName::Atomic;
    /// The transfer strategy of the suites' ledgers (`tests/batched.rs`: `batched`).
    pub const TRANSFER: saldo::ledger::TransferStrategy = saldo::ledger::TransferStrategy::Ordered;
}

#[path = "suite/startup.rs"]
mod startup;

#[path = "suite/support.rs"]
mod support;

#[path = "suite/accounts.rs"]
mod accounts;
#[path = "suite/admin.rs"]
mod admin;
#[path = "suite/auth.rs"]
mod auth;
#[path = "suite/connections.rs"]
mod connections;
#[path = "suite/contract.rs"]
mod contract;
#[path = "suite/currencies.rs"]
mod currencies;
#[path = "suite/errors.rs"]
mod errors;
#[path = "suite/events.rs"]
mod events;
#[path = "suite/holds.rs"]
mod holds;
#[path = "suite/inputs.rs"]
mod inputs;
#[path = "suite/live.rs"]
mod live;
#[path = "suite/movements.rs"]
mod movements;
#[path = "suite/ops.rs"]
mod ops;
#[path = "suite/orders.rs"]
mod orders;
#[path = "suite/references.rs"]
mod references;
#[path = "suite/reversals.rs"]
mod reversals;
#[path = "suite/stock.rs"]
mod stock;
#[path = "suite/telemetry.rs"]
mod telemetry;

#[path = "suite/bundles.rs"]
mod bundles;
#[path = "suite/locations.rs"]
mod locations;
#[path = "suite/moves.rs"]
mod moves;
#[path = "suite/returns.rs"]
mod returns;
#[path = "suite/shop.rs"]
mod shop;

#[path = "suite/backorders.rs"]
mod backorders;

#[path = "suite/webhooks.rs"]
mod webhooks;
