//! Opening an account: the system account (id 0, first in the lock order) locked, the account
//! created with its limits, and its opening balance moved from the system account and
//! journalled as transfer `opening:<id>`, like every other movement.

use crate::domain::{AccountId, Amount, BalanceLimits, TransferId};
use crate::error::Error;
use crate::ledger::apply::NewTransfer;
use crate::ledger::rows::{accounts, journal};
use crate::ledger::types::{checked_balance, Account, Movement, TransferKind};
use crate::operation::Operation;
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::in_transaction;

/// Opens account `id` (the caller checked the id, the amount and that the opening balance is
/// within the limits); [`Error::AccountExists`] if it exists.
pub(crate) async fn open(
    store: &Store,
    id: AccountId,
    opening_balance: i64,
    limits: BalanceLimits,
    opening_id: &TransferId,
) -> Result<Account, Error> {
    let writer = store.writer();
    in_transaction(&store.pool, &store.tx, Operation::OpenAccount, |client| {
        crate::write_tx!(client, writer => |tx| open_one(tx.clone(), id, opening_balance, limits, opening_id))
    })
    .await
}

async fn open_one(
    tx: Tx<'_>,
    id: AccountId,
    opening_balance: i64,
    limits: BalanceLimits,
    opening_id: &TransferId,
) -> Result<Account, Error> {
    let system_balance = accounts::lock_system(&tx).await?;
    // Decided on the locked system balance before the account row exists, so a refusal leaves
    // nothing behind (the UPDATE would otherwise fail with 22003 after the INSERT).
    checked_balance(
        AccountId::SYSTEM,
        system_balance.checked_sub(opening_balance),
    )?;
    if !accounts::create(&tx, id, opening_balance, limits).await? {
        return Err(Error::AccountExists(id));
    }
    if opening_balance > 0 {
        accounts::debit_system(&tx, opening_balance).await?;
        let movement = Movement {
            id: opening_id,
            from: AccountId::SYSTEM,
            to: id,
            amount: Amount::new(opening_balance)?,
            kind: TransferKind::Opening,
        };
        journal::insert_many(&tx, &[NewTransfer::posted(movement)], None).await?;
    }
    Ok(Account {
        id,
        balance: opening_balance,
        held: 0,
        available: opening_balance,
        pending_credits: 0,
        min_balance: Some(limits.min_balance()),
        max_balance: limits.max_balance(),
    })
}
