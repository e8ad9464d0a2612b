//! The naive stock strategies on Citus (issue 13): the oversell checks that saldo's Citus suite
//! passes (`crates/saldo/tests/citus_stock.rs`) fail here too, so on a cluster they can fail.
//! A test binary of its own: its suite takes its database from the Citus cluster.

/// Where this binary's suites get a fresh database: the Citus cluster.
mod harness {
    #![allow(unused_imports)]
    pub use saldo_lab::testing::{
        citus_db as test_db, citus_db_with_pool as test_db_with_pool, TestDb,
    };
    /// Citus runs the default READ COMMITTED isolation on every node.
    pub const SERIALIZABLE: bool = false;
}

#[path = "suite/naive_stock.rs"]
mod naive_stock;
