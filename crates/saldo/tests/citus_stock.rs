//! The stock operations on Citus (issue 13): the contract, stock, model, batched and listing
//! suites again, each test on a fresh distributed database of the local Citus cluster
//! (`saldo_lab::testing::citus_db`: a coordinator and two workers, 8 shards per table), plus
//! what only a cluster can show: multi-item orders whose products live on different workers.
//!
//! A test binary of its own so that its suites take their database from this `harness`.
//! Without Citus binaries it fails saying what to install (`SALDO_CITUS_PG_BIN`).

/// Where this binary's suites get a fresh database: the Citus cluster.
mod harness {
    #![allow(unused_imports)]
    pub use saldo_lab::testing::{
        citus_db as test_db, citus_db_with_pool as test_db_with_pool, TestDb,
    };
    /// The transfer strategy of the model suite.
    pub const TRANSFER: saldo::ledger::TransferStrategy = saldo::ledger::TransferStrategy::Ordered;
    /// The suites run on a Citus database: the few tests that are single-node by nature say so.
    pub const CITUS: bool = true;
}

#[path = "suite/contract.rs"]
mod contract;
#[path = "suite/stock.rs"]
mod stock;

#[path = "suite/model.rs"]
mod model;

#[path = "suite/batched.rs"]
mod batched;

#[path = "suite/listing.rs"]
mod listing;

/// Products on different workers, crossing orders, the refusals of what Citus does not run.
#[path = "citus/stock.rs"]
mod citus_only;
