//! Integration tests against a real PostgreSQL started by `pg-local` (see `saldo_lab::testing`).
//!
//! Suite modules take their database from `crate::harness`, never from `saldo_lab::testing`
//! directly, so that another test binary can run the same modules on a differently configured
//! cluster (e.g. serializable isolation) by declaring its own `harness`.

/// Where this binary's suites get a fresh database.
mod harness {
    #![allow(unused_imports)]
    pub use saldo_lab::testing::{test_db, test_db_with_pool, TestDb};
    /// The transfer strategy of the ledger and model suites (`tests/ledger_batched.rs`
    /// reruns them on `batched`).
    pub const TRANSFER: saldo::ledger::TransferStrategy = saldo::ledger::TransferStrategy::Ordered;
    /// Single-node databases (`tests/citus_stock.rs` reruns these suites on Citus).
    pub const CITUS: bool = false;
    /// Cases of the ledger model property (each case makes a database: few on Citus).
    pub const LEDGER_MODEL_CASES: u32 = 24;
}

#[path = "suite/contract.rs"]
mod contract;
#[path = "suite/events.rs"]
mod events;
#[path = "suite/stock.rs"]
mod stock;

#[path = "suite/batched.rs"]
mod batched;
#[path = "suite/bundles.rs"]
mod bundles;
#[path = "suite/currencies.rs"]
mod currencies;
#[path = "suite/entries.rs"]
mod entries;
#[path = "suite/holds.rs"]
mod holds;
#[path = "suite/ledger.rs"]
mod ledger;
#[path = "suite/ledger_model.rs"]
mod ledger_model;
#[path = "suite/ledger_repair.rs"]
mod ledger_repair;
#[path = "suite/references.rs"]
mod references;
#[path = "suite/reversals.rs"]
mod reversals;

#[path = "suite/listing.rs"]
mod listing;

#[path = "suite/retry.rs"]
mod retry;

#[path = "suite/model.rs"]
mod model;

#[path = "suite/movements.rs"]
mod movements;
#[path = "suite/moves.rs"]
mod moves;
#[path = "suite/returns.rs"]
mod returns;
#[path = "suite/sales.rs"]
mod sales;

#[path = "suite/locations.rs"]
mod locations;

#[path = "suite/repair.rs"]
mod repair;

#[path = "suite/backorders.rs"]
mod backorders;

#[path = "suite/located_backorders.rs"]
mod located_backorders;

#[path = "suite/backorder_model.rs"]
mod backorder_model;
