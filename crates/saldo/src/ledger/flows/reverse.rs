//! The reversal of a posted transfer, as its own transaction: the original's two accounts read
//! (unlocked: a transfer's accounts never change) and locked in ascending id, the reversal's
//! id looked up under those locks (a replay or a conflict, as for any transfer id), the
//! original read under them, the amount decided ([`apply::reversal_amount`]: only posted
//! money, never more than is left), the movement placed back from the original's destination
//! to its source ([`apply::reverse`]: the funds and limits of a transfer), then the accounts,
//! the original's counters (`UPDATE … WHERE reversed + n <= posted`, behind it the CHECK) and
//! the reversal's journal row written. Any refusal writes nothing.
//!
//! Every reversal of one transfer takes the same two account locks first, so concurrent ones
//! run one after the other and each reads what the one before it left: together they can never
//! exceed what was posted. Both strategies serve it with this one transaction (the batched
//! engine keeps no balances or transfer states between its batches: every batch locks its
//! accounts and reads them under those locks, in the same ascending order, so a reversal
//! beside it is one more transaction in the lock order).

use crate::error::Error;
use crate::ledger::apply::{self, NewTransfer};
use crate::ledger::rows::{accounts, journal, reversals, settles};
use crate::ledger::sql;
use crate::ledger::types::{Movement, ReversalRequest, Transfer, TransferKind};
use crate::operation::Operation;
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::in_idempotent_transaction;

/// One reversal as its own transaction, rerun as a replay when a concurrent copy of it
/// committed first (the id's key).
pub(crate) async fn reverse_alone(store: &Store, r: &ReversalRequest) -> Result<Transfer, Error> {
    let dialect = store.dialect();
    let writer = store.writer();
    in_idempotent_transaction(
        &store.pool,
        &store.tx,
        Operation::Reverse,
        sql::transfers_key(dialect),
        |client| crate::write_tx!(client, writer => |tx| reverse_one(tx.clone(), r)),
    )
    .await
}

async fn reverse_one(tx: Tx<'_>, r: &ReversalRequest) -> Result<Transfer, Error> {
    // The clock is the transaction's start, the same whenever read: read with the accounts,
    // before the locks.
    let (sides, now) = futures::try_join!(settles::sides(&tx, &r.original), settles::now(&tx))?;
    let Some((from, to)) = sides else {
        return Err(Error::UnknownTransfer(r.original.clone()));
    };
    let mut locked = accounts::lock(&tx, &[from, to]).await?;
    if let Some(existing) = journal::find(&tx, &r.id).await? {
        return apply::replay_reversal(existing, &r.original, r.amount, &r.tags);
    }
    let original = reversals::original(&tx, &r.original, from).await?;
    let amount = apply::reversal_amount(&original, r.amount, now)?;
    let t = NewTransfer {
        movement: Movement {
            id: &r.id,
            from: original.state.to,
            to: original.state.from,
            amount,
            kind: TransferKind::Reversal,
        },
        pending: None,
        tags: &r.tags,
        reverses: Some(&original.state.id),
    };
    let currency = apply::reverse(&mut locked, &original, &t)?;
    accounts::write(&tx, &locked).await?;
    reversals::record(&tx, &original, &r.id, amount.get()).await?;
    journal::insert_many(&tx, &[t], &[currency], None)
        .await?
        .pop()
        .ok_or_else(|| Error::invariant("INSERT … RETURNING gave no row"))
}
