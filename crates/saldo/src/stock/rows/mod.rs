//! The stock side's data access: each function runs the statements of [`super::sql`] through a
//! [`crate::store::dialect::Tx`] and turns rows into the engine's types. This is where a Citus
//! form that takes other steps than the single-node one (a router read first, one statement per
//! product, a clock read first) is chosen; the flows above never ask which layout they run on.

pub(crate) mod backorders;
pub(crate) mod bundles;
pub(crate) mod locations;
pub(crate) mod moves;
pub(crate) mod reservations;
pub(crate) mod returns;
pub(crate) mod sales;
pub(crate) mod stock;
