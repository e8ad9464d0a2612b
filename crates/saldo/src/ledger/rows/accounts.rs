//! Account rows: locking them in the ledger's one order (ascending id, each once), reading one,
//! writing the changed ones back, and the writes of an opening and of a repair.
//!
//! Lock order, for every path: account rows first, in ascending id, by one statement on one
//! node, by one statement per account on Citus (a `FOR UPDATE` may not span shards there),
//! each awaited before the next: the same order, now across workers.

use crate::domain::{AccountId, BalanceLimits, Tags};
use crate::error::Error;
use crate::ledger::apply::{AccountRow, Locked};
use crate::ledger::currency::Denomination;
use crate::ledger::rows::events;
use crate::ledger::sql;
use crate::ledger::types::{account_from_db, denomination_from_db, Account, Counters};
use crate::store::dialect::Tx;

/// `ids` (any order, repeats allowed) as the lock order wants them: ascending, each once.
fn ascending(ids: &[AccountId]) -> Vec<i64> {
    let mut raw: Vec<i64> = ids.iter().map(|a| a.get()).collect();
    raw.sort_unstable();
    raw.dedup();
    raw
}

/// Locks `ids` in ascending id and reads them; an account that does not exist gives no row.
pub(crate) async fn lock(tx: &Tx<'_>, ids: &[AccountId]) -> Result<Locked, Error> {
    let rows = tx
        .query_keys(&sql::LOCK_ACCOUNTS, &ascending(ids), &[])
        .await?;
    locked(&rows)
}

/// [`lock`] without waiting: an account another transaction holds gives no row (the sweeper).
pub(crate) async fn lock_free(tx: &Tx<'_>, ids: &[AccountId]) -> Result<Locked, Error> {
    let rows = tx
        .query_keys(&sql::LOCK_ACCOUNTS_SKIP, &ascending(ids), &[])
        .await?;
    locked(&rows)
}

fn locked(rows: &[tokio_postgres::Row]) -> Result<Locked, Error> {
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(AccountRow {
            id: account_from_db(r.try_get("id")?)?,
            balance: r.try_get("balance")?,
            held: r.try_get("held")?,
            pending_credits: r.try_get("pending_credits")?,
            min_balance: r.try_get("min_balance")?,
            max_balance: r.try_get("max_balance")?,
            denomination: denomination_from_db(r)?,
        });
    }
    Ok(Locked::new(out))
}

/// Writes every changed row once, in one statement.
pub(crate) async fn write(tx: &Tx<'_>, locked: &Locked) -> Result<(), Error> {
    let rows: Vec<&AccountRow> = locked.changed().collect();
    if rows.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = rows.iter().map(|r| r.id.get()).collect();
    let balances: Vec<i64> = rows.iter().map(|r| r.balance).collect();
    let held: Vec<i64> = rows.iter().map(|r| r.held).collect();
    let credits: Vec<i64> = rows.iter().map(|r| r.pending_credits).collect();
    let written = tx
        .query(&sql::WRITE_ACCOUNTS, &[&ids, &balances, &held, &credits])
        .await?;
    events::accounts_changed(tx, &written)
}

/// An account from a row with the account columns and `reference`, `metadata` (the account
/// list reads the same ones).
pub(crate) fn account_from_row(id: AccountId, row: &tokio_postgres::Row) -> Result<Account, Error> {
    let balance: i64 = row.try_get("balance")?;
    let held: i64 = row.try_get("held")?;
    let denomination = denomination_from_db(row)?;
    Ok(Account {
        id,
        currency: denomination.map(|d| d.currency),
        scale: denomination.map(|d| d.scale),
        balance,
        held,
        // In range: the schema keeps `balance - held >= min_balance >= -MAX_LIMIT` for
        // customers, and the system account holds nothing.
        available: balance
            .checked_sub(held)
            .ok_or_else(|| Error::invariant(format!("available of account {id} overflows")))?,
        pending_credits: row.try_get("pending_credits")?,
        min_balance: row.try_get("min_balance")?,
        max_balance: row.try_get("max_balance")?,
        tags: crate::store::tags::from_row(row)?,
    })
}

/// The account, or [`Error::UnknownAccount`].
pub(crate) async fn read(tx: &Tx<'_>, id: AccountId) -> Result<Account, Error> {
    match tx.query_opt(&sql::ACCOUNT, &[&id.get()]).await? {
        Some(row) => account_from_row(id, &row),
        None => Err(Error::UnknownAccount(id)),
    }
}

/// Locks the system account (id 0: first in the lock order) and reads its balance.
pub(crate) async fn lock_system(tx: &Tx<'_>) -> Result<i64, Error> {
    Ok(tx
        .query_one(&sql::LOCK_SYSTEM, &[])
        .await?
        .try_get("balance")?)
}

/// Creates the account in `denomination` with its reference and metadata; false when it
/// exists.
pub(crate) async fn create(
    tx: &Tx<'_>,
    id: AccountId,
    balance: i64,
    limits: BalanceLimits,
    denomination: Denomination,
    tags: &Tags,
) -> Result<bool, Error> {
    let scale = i16::from(denomination.scale.get());
    let reference = tags.reference.as_ref().map(|r| r.as_str());
    let metadata = tags.metadata_json();
    let params: [crate::store::dialect::Param<'_>; 8] = [
        &id.get(),
        &balance,
        &limits.min_balance(),
        &limits.max_balance(),
        &denomination.currency.as_str(),
        &scale,
        &reference,
        &metadata,
    ];
    let Some(created) = tx.query_opt(&sql::CREATE_ACCOUNT, &params).await? else {
        return Ok(false);
    };
    events::accounts_changed(tx, &[created])?;
    Ok(true)
}

/// Takes `amount` from the system account, which the caller holds locked.
pub(crate) async fn debit_system(tx: &Tx<'_>, amount: i64) -> Result<(), Error> {
    let written = tx.query(&sql::DEBIT_SYSTEM, &[&amount]).await?;
    events::accounts_changed(tx, &written)
}

/// Writes a repair's counters to an account the caller holds locked, and its trace.
pub(crate) async fn repair(
    tx: &Tx<'_>,
    id: AccountId,
    before: Counters,
    after: Counters,
    reason: &str,
) -> Result<(), Error> {
    let a = id.get();
    let written = tx
        .query(
            &sql::REPAIR_ACCOUNT,
            &[&a, &after.balance, &after.held, &after.pending_credits],
        )
        .await?;
    events::accounts_changed(tx, &written)?;
    let updated = written.len();
    if updated != 1 {
        return Err(Error::invariant(format!(
            "the repair of account {id} updated {updated} rows"
        )));
    }
    let params: [crate::store::dialect::Param<'_>; 8] = [
        &a,
        &before.balance,
        &before.held,
        &before.pending_credits,
        &after.balance,
        &after.held,
        &after.pending_credits,
        &reason,
    ];
    tx.execute(&sql::RECORD_REPAIR, &params).await?;
    Ok(())
}
