//! The post or void of one hold, as its own transaction: its accounts read (unlocked: a
//! transfer's accounts never change) and locked, its state read under the locks, the state
//! machine's step taken ([`apply::settle`]), the status moved by the single-winner `UPDATE …
//! WHERE status = 'pending'` and the accounts written.
//!
//! A hold past its deadline is expired here, whether or not the sweeper has run: the
//! transaction moves it to `expired` and releases it exactly as the sweeper would, commits, and
//! only then answers the refusal (`TransferNotPending`, `expired`). So the caller is told the
//! truth, and the books move once.

use crate::domain::TransferId;
use crate::error::Error;
use crate::ledger::apply::{self, Settled};
use crate::ledger::rows::{accounts, journal, settles};
use crate::ledger::transitions::Settle;
use crate::ledger::types::Transfer;
use crate::operation::Operation;
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::in_transaction;

/// One post or void as its own transaction; a refusal that moved the books (the expiry of a
/// hold found due) is answered after the commit.
pub(crate) async fn settle_alone(
    store: &Store,
    operation: Operation,
    id: &TransferId,
    how: Settle,
) -> Result<Transfer, Error> {
    let writer = store.writer();
    in_transaction(
        &store.pool,
        &store.tx,
        operation,
        |client| crate::write_tx!(client, writer => |tx| settle_one(tx.clone(), id, how)),
    )
    .await?
}

/// The transaction's body: its own failure (rolled back) outside, the answer inside.
async fn settle_one(
    tx: Tx<'_>,
    id: &TransferId,
    how: Settle,
) -> Result<Result<Transfer, Error>, Error> {
    // The clock is the transaction's start, the same whenever read: read with the accounts,
    // before the locks, not while they are held.
    let (sides, now) = futures::try_join!(settles::sides(&tx, id), settles::now(&tx))?;
    let Some((from, to)) = sides else {
        return Ok(Err(Error::UnknownTransfer(id.clone())));
    };
    let mut locked = accounts::lock(&tx, &[from, to]).await?;
    let mut state = settles::state(&tx, id, from).await?;
    let settled = match apply::settle(&mut locked, &mut state, how, now) {
        Ok(settled) => settled,
        Err(refusal) => return Ok(Err(refusal)),
    };
    if settled != Settled::Replayed {
        settles::settle(&tx, &state, now).await?;
        accounts::write(&tx, &locked).await?;
    }
    if settled == Settled::Expired {
        return Ok(Err(state.not_pending()));
    }
    let transfer = journal::find(&tx, id)
        .await?
        .ok_or_else(|| Error::invariant(format!("transfer {id} vanished")))?;
    Ok(Ok(Transfer {
        replayed: settled == Settled::Replayed,
        ..transfer
    }))
}
