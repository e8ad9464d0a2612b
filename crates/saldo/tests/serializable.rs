//! The stock, ledger, retry, model, batched, backorder, locations and returns suites again, on a second test cluster whose
//! transactions are all SERIALIZABLE (`default_transaction_isolation = serializable`): the behaviour a
//! distributed SQL engine shows. Every 40001 must be absorbed by the one retry mechanism, and
//! the paths that never retry (the audits' snapshots, the sweeper) must still do their job.

/// Where this binary's suites get a fresh database: the serializable cluster.
mod harness {
    #![allow(unused_imports)]
    pub use saldo_lab::testing::{
        test_db_serializable as test_db, test_db_serializable_with_pool as test_db_with_pool,
        TestDb,
    };
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
#[path = "suite/stock.rs"]
mod stock;

#[path = "suite/entries.rs"]
mod entries;
#[path = "suite/holds.rs"]
mod holds;
#[path = "suite/ledger.rs"]
mod ledger;
#[path = "suite/ledger_model.rs"]
mod ledger_model;

#[path = "suite/retry.rs"]
mod retry;

#[path = "suite/model.rs"]
mod model;

#[path = "suite/batched.rs"]
mod batched;

#[path = "suite/backorders.rs"]
mod backorders;
#[path = "suite/locations.rs"]
mod locations;
#[path = "suite/returns.rs"]
mod returns;
