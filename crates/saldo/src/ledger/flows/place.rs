//! A new transfer (posted at once or held) as its own transaction, the `ordered` way: its two
//! accounts locked in ascending id by one statement, the id looked up under those locks (a
//! concurrent copy of the same request that committed while we waited is found and answered as
//! a replay, never refused for the funds it took itself), decided by [`apply::place`], the
//! changed accounts and the journal row written. Idempotent and retried as a whole.

use crate::error::Error;
use crate::ledger::apply::{self, NewTransfer};
use crate::ledger::rows::{accounts, entries, journal};
use crate::ledger::sql;
use crate::ledger::types::{MoveFunds, Transfer};
use crate::operation::Operation;
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::in_idempotent_transaction;

/// One validated new transfer as its own transaction.
pub(crate) async fn place_alone(
    store: &Store,
    operation: Operation,
    t: NewTransfer<'_>,
) -> Result<Transfer, Error> {
    let dialect = store.dialect();
    let writer = store.writer();
    in_idempotent_transaction(
        &store.pool,
        &store.tx,
        operation,
        sql::transfers_key(dialect),
        |client| crate::write_tx!(client, writer => |tx| place_one(tx.clone(), t)),
    )
    .await
}

async fn place_one(tx: Tx<'_>, t: NewTransfer<'_>) -> Result<Transfer, Error> {
    let mut locked = accounts::lock(&tx, &[t.movement.from, t.movement.to]).await?;
    if let Some(existing) = journal::find(&tx, t.movement.id).await? {
        return apply::replay(existing, &t);
    }
    let currency = apply::place(&mut locked, &t)?;
    accounts::write(&tx, &locked).await?;
    journal::insert_many(&tx, &[t], &[currency], None)
        .await?
        .pop()
        .ok_or_else(|| Error::invariant("INSERT … RETURNING gave no row"))
}

/// A validated movement through any [`MoveFunds`] (the race lab's naive strategy), as its own
/// transaction: the idempotency and the journal row are the ledger's, the locks and the
/// balances the strategy's.
pub(crate) async fn move_alone(
    store: &Store,
    strategy: &dyn MoveFunds,
    operation: Operation,
    t: NewTransfer<'_>,
) -> Result<Transfer, Error> {
    let dialect = store.dialect();
    let writer = store.writer();
    in_idempotent_transaction(
        &store.pool,
        &store.tx,
        operation,
        sql::transfers_key(dialect),
        |client| crate::write_tx!(client, writer => |tx| move_one(tx.clone(), strategy, t)),
    )
    .await
}

async fn move_one(
    tx: Tx<'_>,
    strategy: &dyn MoveFunds,
    t: NewTransfer<'_>,
) -> Result<Transfer, Error> {
    let m = t.movement;
    if let Some(existing) = journal::find(&tx, m.id).await? {
        return apply::replay(existing, &t);
    }
    strategy
        .move_funds(tx.client(), tx.dialect().layout(), &m)
        .await?;
    // The strategy wrote both rows in this transaction, so it holds them: locking them again
    // waits for nobody. Their currencies are checked whatever the strategy did, and their
    // entries say what the rows are now.
    let mut locked = accounts::lock(&tx, &[m.from, m.to]).await?;
    let currency = apply::currency_of(&locked, &m)?;
    locked.record_as_is(&t, currency)?;
    entries::write_only(&tx, &locked).await?;
    journal::insert_many(&tx, &[t], &[currency], None)
        .await?
        .pop()
        .ok_or_else(|| Error::invariant("INSERT … RETURNING gave no row"))
}
