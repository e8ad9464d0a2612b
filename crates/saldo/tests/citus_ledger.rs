//! The ledger on Citus (issue 13): the ledger, holds and ledger-model suites rerun on a fresh
//! distributed database per test (`saldo_lab::testing::citus_db`), once with the `ordered`
//! transfer and once with the batched engine (whose own suite, `ledger_engine.rs`, runs too),
//! each ending with the Citus audit (per account on its shard, per transfer both sides and the
//! router) clean; and crossed transfers between two accounts proven to live on different
//! workers: every transfer a 2PC, no 40P01 reaching a caller, balances conserved.
//!
//! A test binary of its own (Citus databases take seconds each): the suites reach their
//! databases through each inline module's `harness`, as in `tests/ledger_batched.rs`. The
//! model property runs few cases here (`LEDGER_MODEL_CASES`): each case is a database.

// Loading each suite twice, once per transfer strategy, is the point of this binary.
#![allow(clippy::duplicate_mod)]

#[path = "suite"]
mod ordered {
    mod harness {
        #![allow(unused_imports)]
        pub use saldo_lab::testing::{
            citus_db as test_db, citus_db_with_pool as test_db_with_pool, TestDb,
        };
        pub const TRANSFER: saldo::ledger::TransferStrategy =
            saldo::ledger::TransferStrategy::Ordered;
        /// Each case makes a Citus database (seconds): a few cases, still every operation.
        pub const LEDGER_MODEL_CASES: u32 = 4;
    }

    #[path = "holds.rs"]
    mod holds;

    #[path = "ledger.rs"]
    mod ledger;

    #[path = "ledger_model.rs"]
    mod ledger_model;
}

#[path = "suite"]
mod batched {
    mod harness {
        #![allow(unused_imports)]
        pub use saldo_lab::testing::{
            citus_db as test_db, citus_db_with_pool as test_db_with_pool, TestDb,
        };
        pub const TRANSFER: saldo::ledger::TransferStrategy =
            saldo::ledger::TransferStrategy::Batched;
        pub const LEDGER_MODEL_CASES: u32 = 4;
    }

    #[path = "holds.rs"]
    mod holds;

    #[path = "ledger.rs"]
    mod ledger;

    #[path = "ledger_model.rs"]
    mod ledger_model;

    #[path = "ledger_engine.rs"]
    mod ledger_engine;
}

/// Crossed transfers, holds and their settles between accounts on different workers.
#[path = "citus/ledger.rs"]
mod across_workers;
