//! The ledger, holds and model suites (the stock-and-money model and the ledger model) again on the batched ledger engine (`TransferStrategy::Batched`,
//! deposits and withdrawals included), on the default cluster and on the SERIALIZABLE one, plus
//! the engine's own suite (`suite/ledger_engine.rs`: batch-mates, overload, crossed race) and
//! the reversals (`suite/reversals.rs`: their race beside batched transfers).
//!
//! One binary, two clusters: each inline module brings its own `harness`, which the suites
//! reach as `super::harness`.

// Loading each suite twice, once per cluster, is the point of this binary.
#![allow(clippy::duplicate_mod)]

#[path = "suite"]
mod default_cluster {
    mod harness {
        #![allow(unused_imports)]
        pub use saldo_lab::testing::{test_db, test_db_with_pool, TestDb};
        pub const TRANSFER: saldo::ledger::TransferStrategy =
            saldo::ledger::TransferStrategy::Batched;
        /// Single-node databases.
        pub const CITUS: bool = false;
        /// Cases of the ledger model property (each case makes a database: few on Citus).
        pub const LEDGER_MODEL_CASES: u32 = 24;
    }

    #[path = "entries.rs"]
    mod entries;

    #[path = "holds.rs"]
    mod holds;

    #[path = "ledger.rs"]
    mod ledger;

    #[path = "model.rs"]
    mod model;

    #[path = "ledger_model.rs"]
    mod ledger_model;

    #[path = "ledger_engine.rs"]
    mod ledger_engine;

    #[path = "reversals.rs"]
    mod reversals;
}

#[path = "suite"]
mod serializable {
    mod harness {
        #![allow(unused_imports)]
        pub use saldo_lab::testing::{
            test_db_serializable as test_db, test_db_serializable_with_pool as test_db_with_pool,
            TestDb,
        };
        pub const TRANSFER: saldo::ledger::TransferStrategy =
            saldo::ledger::TransferStrategy::Batched;
        /// Single-node databases.
        pub const CITUS: bool = false;
        /// Cases of the ledger model property (each case makes a database: few on Citus).
        pub const LEDGER_MODEL_CASES: u32 = 24;
    }

    #[path = "holds.rs"]
    mod holds;

    #[path = "ledger.rs"]
    mod ledger;

    #[path = "model.rs"]
    mod model;

    #[path = "ledger_model.rs"]
    mod ledger_model;

    #[path = "ledger_engine.rs"]
    mod ledger_engine;

    #[path = "reversals.rs"]
    mod reversals;
}
