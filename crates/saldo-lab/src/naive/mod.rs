//! The naive strategies, for the race lab and the bench only (never safe, never served): the
//! bugs of seed 000 (stock: read, decide in the application, write) and seed 002 (transfers
//! locking in arrival order), kept so the lab can show them failing and prove that its checks
//! can fail. They plug into saldo's public extension points (`UnitTaker`, `StockStrategy`,
//! `ledger::MoveFunds`), so saldo itself knows nothing of them.
//!
//! Their few statements write stock and accounts: they are the one exception to "saldo owns
//! every statement that writes the schema", on purpose (the wrong SQL is the demonstration),
//! and they reuse saldo's `stock_update!` tail so the row's version still moves.

pub mod backorders;
pub mod holds;
pub mod ledger;
pub mod stock;
