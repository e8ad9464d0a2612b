//! The naive suites again on the SERIALIZABLE test cluster: the database itself detects the
//! read-decide-write race there, so the naive stock code never sells a unit twice.

/// Where this binary's suites get a fresh database: the serializable cluster.
mod harness {
    #![allow(unused_imports)]
    pub use saldo_lab::testing::{
        test_db_serializable as test_db, test_db_serializable_with_pool as test_db_with_pool,
        TestDb,
    };
    /// The cluster runs every transaction SERIALIZABLE.
    pub const SERIALIZABLE: bool = true;
}

#[path = "suite/naive_stock.rs"]
mod naive_stock;

#[path = "suite/naive_ledger.rs"]
mod naive_ledger;
