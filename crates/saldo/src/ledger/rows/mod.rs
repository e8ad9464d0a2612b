//! The ledger's data access: each function runs the statements of [`super::sql`] through a
//! [`crate::store::dialect::Tx`] and turns rows into the ledger's types. This is where a Citus
//! form that takes other steps than the single-node one (a router read first, one row per
//! statement, both sides of a transfer) is chosen; the flows above never ask which layout they
//! run on.
//!
//! - [`accounts`]: account locks (ascending id), reads and writes, opening and repair writes;
//! - [`entries`]: numbering a transaction's account entries and writing them (with the
//!   accounts, never alone);
//! - [`journal`]: new transfers and groups, finding them, an account's history;
//! - [`events`]: the events of those writes (`account.changed`, `transfer.*`), into the
//!   transaction's outbox;
//! - [`settles`]: the clock, what a post, void or expiry reads of a hold, and its writes;
//! - [`reversals`]: what a reversal reads and counts of its original, and its reversals' ids.

pub(crate) mod accounts;
pub(crate) mod entries;
pub(crate) mod events;
pub(crate) mod journal;
pub(crate) mod reversals;
pub(crate) mod settles;
