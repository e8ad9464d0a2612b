//! The `ordered` transfer: both account rows are locked by ONE
//! `SELECT … WHERE id = ANY($1) ORDER BY id FOR UPDATE` before any decision, so every transfer
//! takes its locks in ascending id and no two can wait on each other in a cycle (the
//! crossed-transfers deadlock cannot happen; on Citus: one statement per account, in the same
//! order). The decision ([`apply::place`]: limits with what is held, overflow) is made on the
//! locked rows, so it cannot race the debit either. The served transfer, deposit and
//! withdrawal run the same steps through `flows::place`, which also looks the id up under the
//! locks; this [`MoveFunds`] form is what `Ledger::transfer_with` offers the lab.

use deadpool_postgres::Client;

use crate::error::Error;
use crate::ledger::apply::{self, NewTransfer};
use crate::ledger::rows::accounts;
use crate::ledger::types::{MoveFunds, Movement, TransferStrategy};
use crate::store::dialect::{Dialect, Tx};
use crate::store::schema::Layout;

#[async_trait::async_trait]
impl MoveFunds for TransferStrategy {
    async fn move_funds(
        &self,
        client: &Client,
        layout: Layout,
        m: &Movement<'_>,
    ) -> Result<(), Error> {
        // A batch of one is an `ordered` transaction: both strategies move a lone movement so.
        let tx = Tx::new(client, Dialect::of(layout));
        let mut locked = accounts::lock(&tx, &[m.from, m.to]).await?;
        apply::place(&mut locked, &NewTransfer::posted(*m))?;
        // The ledger writes a movement's entries after any strategy (`flows::place`), from the
        // rows as this left them.
        locked.forget_entries();
        accounts::write(&tx, &locked).await
    }
}
