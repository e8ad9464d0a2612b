//! The naive strategies, for the race lab and the bench only (never safe, never served): the
//! bugs the lab exists to show, kept so it can show them failing and prove that its checks can
//! fail. Stock ([`stock`]: read, decide in the application, write — the last-unit race's bug)
//! and transfers ([`ledger`]: locking in arrival order — the crossed-transfers deadlock) plug
//! into saldo's public extension points (`UnitTaker`, `StockStrategy`, `ledger::MoveFunds`),
//! so saldo itself knows nothing of them; the holds ([`holds`]) and the shop scenarios' naive
//! variants ([`extend`], [`sales`], [`backorders`], [`locations`]) are called by their races
//! directly.
//!
//! Their few statements write stock, reservations, sales and accounts: they are the one
//! exception to "saldo owns every statement that writes the schema", on purpose (the wrong
//! SQL is the demonstration), and they reuse saldo's `stock_update!` tail so the row's version
//! still moves. Every naive statement of the lab is here.

pub mod backorders;
pub mod extend;
pub mod follow;
pub mod holds;
pub mod ledger;
pub mod locations;
pub mod sales;
pub mod stock;
