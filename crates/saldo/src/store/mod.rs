//! The bottom layer: the database and how every operation talks to it.
//!
//! - [`handle`]: the [`handle::Store`] every operation runs on (pool, transaction settings,
//!   dialect);
//! - [`dialect`]: the schema's layout resolved once into a [`dialect::Dialect`], which picks each
//!   statement's single-node or Citus form ([`dialect::Sql`]), and [`dialect::Tx`], the
//!   transaction handle the layers above run their statements through;
//! - [`values`]: the one builder of multi-row `VALUES` statements;
//! - `tags`: the one reader of a row's `reference` and `metadata` columns;
//! - [`outbox`]: the events of a write transaction, appended by it before COMMIT;
//! - [`journal`]: the stock movements of a write transaction (and their cause), appended with
//!   its events;
//! - [`retry`]: the one transaction mechanism (whole-transaction rerun on 40P01/40001);
//! - [`deadline`]: the operation's deadline, carried task-locally;
//! - [`db`] and [`schema`]: the pool, the migrations and the layout they lay out.
//!
//! Nothing here knows stock or money: the aggregates sit above and import from here.

pub mod db;
pub mod deadline;
pub mod dialect;
pub mod handle;
pub mod journal;
pub mod outbox;
pub mod retry;
pub mod schema;
pub(crate) mod tags;
pub mod values;
