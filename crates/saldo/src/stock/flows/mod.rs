//! The stock side's flows: each operation as one transaction (or a few), reading and locking
//! rows through [`super::rows`], deciding through [`super::decide`], writing back. The path an
//! item takes (plain, backordered, allocated over locations) is chosen once, from its rows,
//! inside the transaction ([`taking`]).
//!
//! - [`reserve`]: reserve and re-reserve; [`taking`]: the per-item take they and sales share;
//! - [`settle`]: confirm, release, the shared settle, an order's read; [`sweeper`]: expiry;
//! - [`extend`]: hold extension; [`sales`]: direct sales;
//! - [`admin`]: counts, adjustments, reads; [`backorders`]: the policy and the fill of
//!   arrivals; [`locations`]: location counts and priorities; [`repair`]: counters brought back
//!   to their history; [`returns`]: confirmed units brought back; [`bundles`]: bundles
//!   declared, read, and rewritten onto their components.

pub mod admin;
pub mod backorders;
pub mod bundles;
pub mod extend;
pub mod locations;
pub mod moves;
pub mod order_events;
pub mod repair;
pub(crate) mod reserve;
pub mod returns;
pub mod sales;
pub(crate) mod settle;
pub mod sweeper;
pub(crate) mod taking;
