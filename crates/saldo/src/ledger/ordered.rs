//! The `ordered` transfer (seed 002): both account rows are locked by ONE
//! `SELECT … WHERE id = ANY($1) ORDER BY id FOR UPDATE` before any decision, so every transfer
//! takes its locks in ascending id and no two can wait on each other in a cycle (on Citus: one
//! statement per account, in the same order; see `holds::lock`). The decision
//! ([`apply::place`]: limits with what is held, overflow) is made on the locked rows, so it
//! cannot race the debit either. The served transfer, deposit and withdrawal run the same
//! steps through `holds::place_one`, which also looks the id up under the locks; this
//! [`MoveFunds`](crate::ledger::MoveFunds) form is what `Ledger::transfer_with` offers the lab.

use deadpool_postgres::Client;

use crate::error::Error;
use crate::ledger::apply::{self, NewTransfer};
use crate::ledger::holds;
use crate::ledger::types::Movement;
use crate::store::schema::Layout;

pub(super) async fn move_funds(
    client: &Client,
    layout: Layout,
    m: &Movement<'_>,
) -> Result<(), Error> {
    let mut locked = holds::lock(client, layout, &[m.from, m.to]).await?;
    let t = NewTransfer {
        movement: *m,
        pending: None,
    };
    apply::place(&mut locked, &t)?;
    holds::write(client, &locked).await
}
