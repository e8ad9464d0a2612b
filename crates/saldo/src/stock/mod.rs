//! The stock side: reserve, confirm, release, expire, sell, count, repair.
//!
//! Layers, each importing only the ones below it (ARCHITECTURE.md walks one reservation
//! through them):
//!
//! - [`model`]: the vocabulary (requests, outcomes, rows), a leaf; [`movements`]: a product's
//!   movements (V22), what made each and how a statement reads it, a leaf;
//! - `sql`: every statement, in one place, named pairs where Citus needs its own form;
//! - `rows`: data access, the statements run through the store's dialect;
//! - [`decide`]: pure decisions over rows already read: idempotency, where an item's units
//!   come from, what settling does, extension, fills, repairs;
//! - `taker` ([`UnitTaker`]): the contested step's contract;
//! - [`flows`]: each operation as one transaction: read and lock, decide, write;
//! - [`strategy`]: atomic, pessimistic, optimistic (each a [`UnitTaker`]) and batched;
//! - [`engine`]: [`StockEngine`], the façade the service, the lab and the bench hold.
//!
//! Global lock order, for every path: reservation rows of one order, then stock rows in
//! ascending product id, each product's `stock_locations` rows right after its stock row. A
//! location row is only locked under its product's stock row, and nothing takes a reservation
//! row while holding a stock row (but the arrival paths' backorders, see
//! [`flows::backorders`]).

pub mod bundled;
pub mod decide;
pub mod engine;
pub mod flows;
pub mod model;
pub mod movements;
pub(crate) mod rows;
mod sql;
pub mod strategy;
pub mod taker;

// The public names under the paths embedders know (`saldo::stock::admin::set_count`, …).
pub use crate::store::handle::Store;
pub use decide::allocate;
pub use engine::{build, StockEngine, StrategyConfig};
pub use flows::{
    admin, backorders, bundles, extend, locations, moves, repair, returns, sales, sweeper,
};
pub use model::{
    Bundle, BundleComponent, ConfirmOutcome, Counts, ExtendOutcome, LocatedStock, Location,
    LocationQuantity, Move, MoveRequest, PendingItem, Place, Placement, ProductRepair,
    ReleaseOutcome, RepairAction, RepairReport, RereserveRequest, Reservation, ReserveRequest,
    ReservedItem, Return, ReturnItemRequest, ReturnItems, ReturnRequest, ReturnedItem, Sale,
    SaleRequest, SoldItem, States, Status, Stock, StockLocation, StockRow, StrategyName,
};
pub use strategy::{atomic, batched, optimistic, pessimistic, trace, StockStrategy};
pub use taker::{Taken, UnitTaker};
