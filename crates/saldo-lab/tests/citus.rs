//! The lab on Citus, one test binary so the Citus test cluster starts once:
//! - the naive stock strategies' oversell checks, which saldo's Citus suite passes
//!   (`crates/saldo/tests/citus_stock.rs`), failing here too (`suite/naive_stock.rs`);
//! - the naive transfer deadlocking across workers (`citus/naive_ledger.rs`);
//! - the race lab's scenarios on Citus, served strategies holding, naive failing
//!   (`citus/race.rs`);
//! - the event feed followed exactly while a writer commits late, and the naive id reader
//!   missing it (`suite/events_follow.rs`);

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

#[path = "citus/naive_ledger.rs"]
mod naive_ledger;

#[path = "citus/race.rs"]
mod race;

#[path = "suite/events_follow.rs"]
mod events_follow;
