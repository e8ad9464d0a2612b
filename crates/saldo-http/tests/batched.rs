//! The HTTP suites about stock, orders, money and errors again, on `batched` (the strategy
//! `saldo serve` runs by default) instead of `atomic`, and the money routes on the batched
//! ledger engine instead of `ordered`: same routes, same answers.

mod harness {
    #![allow(unused_imports)]
    pub use saldo_lab::testing::{test_db, test_db_with_pool, TestDb};
    /// The strategy the suites' apps run.
    pub const STRATEGY: saldo::stock::StrategyName = saldo::stock::StrategyName::Batched;
    /// The transfer strategy the suites' ledgers run.
    pub const TRANSFER: saldo::ledger::TransferStrategy = saldo::ledger::TransferStrategy::Batched;
}

#[path = "suite/support.rs"]
mod support;

#[path = "suite/accounts.rs"]
mod accounts;
#[path = "suite/admin.rs"]
mod admin;
#[path = "suite/errors.rs"]
mod errors;
#[path = "suite/holds.rs"]
mod holds;
#[path = "suite/inputs.rs"]
mod inputs;
#[path = "suite/live.rs"]
mod live;
#[path = "suite/ops.rs"]
mod ops;
#[path = "suite/orders.rs"]
mod orders;
#[path = "suite/stock.rs"]
mod stock;

#[path = "suite/locations.rs"]
mod locations;
#[path = "suite/shop.rs"]
mod shop;

#[path = "suite/backorders.rs"]
mod backorders;
