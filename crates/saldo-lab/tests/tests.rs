//! The naive strategies failing, as the lab shows them: against a real PostgreSQL started by
//! `pg-local` (see `saldo_lab::testing`). Suite modules take their database from
//! `crate::harness`, so `serializable.rs` reruns them on the SERIALIZABLE cluster.

/// Where this binary's suites get a fresh database.
mod harness {
    #![allow(unused_imports)]
    pub use saldo_lab::testing::{test_db, test_db_with_pool, TestDb};
    /// The cluster runs at the default READ COMMITTED isolation.
    pub const SERIALIZABLE: bool = false;
}

#[path = "suite/naive_stock.rs"]
mod naive_stock;

#[path = "suite/naive_ledger.rs"]
mod naive_ledger;

#[path = "suite/events_follow.rs"]
mod events_follow;
#[path = "suite/holds_race.rs"]
mod holds_race;
#[path = "suite/shop_races.rs"]
mod shop_races;
