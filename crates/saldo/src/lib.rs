//! saldo: sell the last unit exactly once on PostgreSQL, under real concurrency.
//!
//! - [`domain`]: validated ids, quantities and orders;
//! - [`stock`]: the reservation lifecycle and its strategies, the sweeper, admin;
//! - [`ledger`]: accounts and idempotent double-entry transfers locked in id order;
//! - [`retry`]: the one transaction-retry mechanism every write path uses;
//! - [`audit`]: the divergence audit that must come back empty;
//! - [`listing`]: products, orders and accounts, a page at a time (keyset, never OFFSET);
//! - [`db`]: pool, migrations, scratch databases; [`fixtures`]: bulk resets and fixtures for
//!   the lab and the bench (the only writes outside the strategies, still written here, where
//!   the schema lives).
//!
//! The race lab, the bench's engine, the naive (lab-only) strategies and the test harness live
//! in the `saldo-lab` crate, which builds on this one.
//!
//! Embedding it: connect, migrate, pick a strategy, reserve, confirm.
//!
//! ```no_run
//! use saldo::db::{self, PoolOptions};
//! use saldo::domain::{OrderId, OrderItems, ProductId, Tags, Ttl};
//! use saldo::retry::TxOptions;
//! use saldo::stock::{admin, build, ReserveRequest, StrategyConfig, StrategyName, Store};
//!
//! # async fn example() -> Result<(), saldo::Error> {
//! let pool = db::connect("postgres://postgres@127.0.0.1:5432/shop", &PoolOptions::default())?;
//! db::migrate(&pool).await?;
//! let store = Store::new(pool, TxOptions::default());
//! let stock = build(StrategyName::Atomic, store.clone(), &StrategyConfig::default());
//!
//! admin::set_count(&store, ProductId::new(42)?, 1).await?;
//! let request = ReserveRequest {
//!     order_id: OrderId::new("order-1")?,
//!     items: OrderItems::new([(42, 1)])?,
//!     ttl: Ttl::default(),
//!     tags: Tags::NONE,
//! };
//! match stock.reserve(&request).await {
//!     Ok(reservation) => println!("reserved until {}", reservation.items[0].expires_at),
//!     Err(saldo::Error::InsufficientStock { product_id, .. }) => println!("{product_id} sold out"),
//!     Err(other) => return Err(other),
//! }
//! stock.confirm(&request.order_id).await?; // payment arrived
//! # Ok(())
//! # }
//! ```

pub mod audit;
pub mod batch;
pub mod domain;
pub mod error;
pub mod events;
pub mod fixtures;
pub mod ledger;
pub mod listing;
pub mod operation;
pub mod ops;
pub mod stock;
pub mod store;
pub mod telemetry;
pub mod webhooks;

// The store's modules under their long-standing paths (`saldo::retry::TxOptions`, …), for
// embedders; the crate itself names them by their home.
pub use store::{db, deadline, retry, schema};

pub use error::{Error, InputError};
pub use operation::Operation;
pub use store::handle::Store;
