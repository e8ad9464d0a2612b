//! The stock engine: reserve, confirm, release, expire, and the admin operations.
//!
//! Strategies differ in how the contested step — taking units from `available` — is done
//! ([`UnitTaker`]); the rest (idempotency, reservation rows, confirm, release, the sweeper) is
//! shared in `lifecycle`, which `batched` builds its batch transactions from too, so every
//! strategy keeps the same contract.
//!
//! Layout, imports pointing one way: [`types`] (the shared vocabulary and the
//! [`StockStrategy`] contract) ← `lifecycle` ← the strategies ← [`engine`] (the factory).
//! Everything public is re-exported here, so `saldo::stock::X` names keep working.
//!
//! Global lock order, for every path: reservation rows of one order, then stock rows in
//! ascending product id, then (products stocked per location, [`locations`]) their
//! `stock_locations` rows in (product, location) order. Nothing takes a reservation row while
//! holding a stock row, nor a location row without its product's stock row.

pub mod admin;
pub mod allocate;
pub mod atomic;
pub mod backorders;
pub mod batched;
pub mod engine;
pub mod extend;
mod layout;
mod lifecycle;
pub mod locations;
pub mod optimistic;
pub mod pessimistic;
pub mod repair;
pub mod sales;
mod sql;
pub mod sweeper;
pub mod trace;
pub mod types;

// The store under its old path, for embedders (`saldo::stock::Store`).
pub use crate::store::handle::Store;
pub use engine::{build, StockEngine, StrategyConfig};
pub use extend::ExtendOutcome;
pub use lifecycle::UnitTaker;
pub use sales::{Sale, SaleRequest, SoldItem};
pub use types::{
    ConfirmOutcome, LocationQuantity, PendingItem, Placement, ReleaseOutcome, RereserveRequest,
    Reservation, ReserveRequest, ReservedItem, Status, Stock, StockLocation, StockStrategy,
    StrategyName,
};
