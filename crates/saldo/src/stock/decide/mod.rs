//! The stock side's decisions, pure: functions over rows already read (and locked) that say
//! what to write and what to answer. No database here, so every rule is tested alone:
//!
//! - [`plan`]: the idempotency decision (replay, conflict, or units to take);
//! - [`take`]: where a declined item goes, and how the locked path serves an item (plain,
//!   backordered, allocated over locations);
//! - [`allocate`]: an item's units over a product's locations;
//! - [`settle`]: what confirm, release and expiry do to the counters, and what they answer;
//! - [`extend`]: which rows an extension moves;
//! - [`backorders`]: how arriving units fill waiting backorders;
//! - [`repair`]: what a repair writes to a divergent product;
//! - [`returns`]: a return's replay, the line each item comes back to, and where;
//! - [`bundles`]: a bundle's declaration, requests rewritten onto components, its
//!   availability.

pub mod allocate;
pub mod backorders;
pub mod bundles;
pub(crate) mod extend;
pub(crate) mod moves;
pub(crate) mod plan;
pub(crate) mod repair;
pub(crate) mod returns;
pub(crate) mod settle;
pub(crate) mod take;
