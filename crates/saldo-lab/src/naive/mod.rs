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
//! still moves, and each write appends the product's movement as saldo's writes do
//! ([`record_movement`]): the audit then finds the naive bug itself, not a missing statement
//! line. Every naive statement of the lab is here.

pub mod backorders;
pub mod extend;
pub mod follow;
pub mod holds;
pub mod ledger;
pub mod locations;
pub mod sales;
pub mod stock;

use saldo::error::Error;

/// The product's movement (V22) for the version its row holds now, as an unnamed (`other`)
/// write. Run right after a naive write of the row: inside that write's transaction it is the
/// write's own version (the row is locked); on an autocommit client a racing naive writer may
/// have moved the row on already, and then whichever of the two reads a version first writes
/// its movement and the other's is skipped (`ON CONFLICT DO NOTHING`): every write's own
/// movement follows it, so the latest movement still says the row's counters.
const RECORD_MOVEMENT: &str = "INSERT INTO product_movements (product_id, seq, kind, \
     available_after, reserved_after, backordered_after, at) \
     SELECT product_id, version, 'other', available, reserved, backordered, clock_timestamp() \
       FROM stock WHERE product_id = $1 \
     ON CONFLICT (product_id, seq) DO NOTHING";

/// Appends the movement of a naive write of `product`'s stock row (see [`RECORD_MOVEMENT`]).
pub async fn record_movement(client: &tokio_postgres::Client, product: i64) -> Result<(), Error> {
    client.execute(RECORD_MOVEMENT, &[&product]).await?;
    Ok(())
}
