//! Opening an account: the system account (id 0, first in the lock order) locked, the account
//! created with its limits and its denomination (currency and scale, fixed for good), and its
//! opening balance moved from the system account and journalled as transfer `opening:<id>` in
//! the account's currency, like every other movement.

use crate::domain::{AccountId, Amount, BalanceLimits, Tags, TransferId};
use crate::error::Error;
use crate::ledger::apply::NewTransfer;
use crate::ledger::currency::Denomination;
use crate::ledger::rows::{accounts, journal};
use crate::ledger::types::{checked_balance, Account, Movement, TransferKind};
use crate::operation::Operation;
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::in_transaction;

/// An account to open, checked by the caller (the id, the amount, the opening balance within
/// the limits).
pub(crate) struct Opening<'r> {
    pub id: AccountId,
    pub balance: i64,
    pub limits: BalanceLimits,
    pub denomination: Denomination,
    /// `opening:<id>`.
    pub transfer: &'r TransferId,
    /// The caller's reference and metadata for the account (the opening transfer has none).
    pub tags: &'r Tags,
}

/// Opens the account; [`Error::AccountExists`] if it exists.
pub(crate) async fn open(store: &Store, opening: &Opening<'_>) -> Result<Account, Error> {
    let writer = store.writer();
    in_transaction(
        &store.pool,
        &store.tx,
        Operation::OpenAccount,
        |client| crate::write_tx!(client, writer => |tx| open_one(tx.clone(), opening)),
    )
    .await
}

async fn open_one(tx: Tx<'_>, o: &Opening<'_>) -> Result<Account, Error> {
    let system_balance = accounts::lock_system(&tx).await?;
    // Decided on the locked system balance before the account row exists, so a refusal leaves
    // nothing behind (the UPDATE would otherwise fail with 22003 after the INSERT).
    checked_balance(AccountId::SYSTEM, system_balance.checked_sub(o.balance))?;
    let created = accounts::create(
        &tx,
        o.id,
        o.transfer,
        o.balance,
        o.limits,
        o.denomination,
        o.tags,
    );
    if !created.await? {
        return Err(Error::AccountExists(o.id));
    }
    if o.balance > 0 {
        accounts::debit_system(&tx, o.balance, o.transfer, o.denomination.currency).await?;
        let movement = Movement {
            id: o.transfer,
            from: AccountId::SYSTEM,
            to: o.id,
            amount: Amount::new(o.balance)?,
            kind: TransferKind::Opening,
        };
        let currency = [o.denomination.currency];
        journal::insert_many(&tx, &[NewTransfer::posted(movement)], &currency, None).await?;
    }
    Ok(Account {
        id: o.id,
        currency: Some(o.denomination.currency),
        scale: Some(o.denomination.scale),
        balance: o.balance,
        held: 0,
        available: o.balance,
        pending_credits: 0,
        min_balance: Some(o.limits.min_balance()),
        max_balance: o.limits.max_balance(),
        tags: o.tags.clone(),
    })
}
