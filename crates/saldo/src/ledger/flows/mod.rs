//! The ledger's operations, each one transaction: lock the accounts (ascending id, each once),
//! read what the decision needs under the locks, decide in memory ([`super::apply`],
//! [`super::transitions`]), write once. They run their statements through
//! [`super::rows`] and never ask which layout the store has.
//!
//! - [`place`]: one new transfer, deposit, withdrawal or hold (the `ordered` way), and a
//!   movement through any [`crate::ledger::types::MoveFunds`] (the lab's naive strategy);
//! - [`group`]: a linked group, all or none;
//! - [`settle`]: the post or void of a hold (expiring it first when it is past its deadline);
//! - [`reverse`]: a posted transfer moved back, all or part (both strategies);
//! - [`expire`]: the sweeper's bounded rounds;
//! - [`open`]: an account and its opening balance;
//! - [`repair`]: accounts brought back to their journal.
//!
//! Post, void and expiry of one hold all lock its two accounts first, so they run one after
//! the other; each then moves the row with `UPDATE … WHERE status = 'pending'`, and whoever
//! comes later reads the state the winner reached. The sweeper locks with `SKIP LOCKED` and
//! never waits, so it never joins a cycle either.

pub(crate) mod expire;
pub(crate) mod group;
pub(crate) mod open;
pub(crate) mod place;
pub mod repair;
pub(crate) mod reverse;
pub(crate) mod settle;
