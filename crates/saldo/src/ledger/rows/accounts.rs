//! Account rows: locking them in the ledger's one order (ascending id, each once), reading one,
//! writing the changed ones back, and the writes of an opening and of a repair. Every write of
//! an account's counters writes its entries with it (`rows::entries`), in the same transaction.
//!
//! Lock order, for every path: account rows first, in ascending id, by one statement on one
//! node, by one statement per account on Citus (a `FOR UPDATE` may not span shards there),
//! each awaited before the next: the same order, now across workers.

use crate::domain::{AccountId, BalanceLimits, Tags, TransferId};
use crate::error::Error;
use crate::ledger::apply::{AccountRow, Locked};
use crate::ledger::currency::{Currency, Denomination};
use crate::ledger::entries::{Direction, EntryKind, NewEntry};
use crate::ledger::rows::{entries, events};
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
            entry_seq: r.try_get("entry_seq")?,
        });
    }
    Ok(Locked::new(out))
}

/// Writes every changed row once, in one statement, and the entries of every change, in one
/// more sent with it (pipelined: no extra round trip; per account in the order the changes were
/// made, so a batch's entries carry each account's running counters).
pub(crate) async fn write(tx: &Tx<'_>, locked: &Locked) -> Result<(), Error> {
    let rows: Vec<&AccountRow> = locked.changed().collect();
    if rows.is_empty() {
        return Ok(());
    }
    let (numbered, last) = entries::numbered(locked)?;
    let ids: Vec<i64> = rows.iter().map(|r| r.id.get()).collect();
    let balances: Vec<i64> = rows.iter().map(|r| r.balance).collect();
    let held: Vec<i64> = rows.iter().map(|r| r.held).collect();
    let credits: Vec<i64> = rows.iter().map(|r| r.pending_credits).collect();
    let seqs: Vec<i64> = rows
        .iter()
        .map(|r| last.get(&r.id).copied().unwrap_or(r.entry_seq))
        .collect();
    let params: [crate::store::dialect::Param<'_>; 5] = [&ids, &balances, &held, &credits, &seqs];
    let (written, ()) = futures::try_join!(
        tx.query(&sql::WRITE_ACCOUNTS, &params),
        entries::insert(tx, &numbered)
    )?;
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

/// Creates the account in `denomination` with its reference and metadata, and its opening
/// entry (naming `opening`, its opening transfer, when it has a balance); false when it exists.
pub(crate) async fn create(
    tx: &Tx<'_>,
    id: AccountId,
    opening: &TransferId,
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
    events::accounts_changed(tx, std::slice::from_ref(&created))?;
    // Its first entry, whatever its balance: a balance asked for before it finds none.
    let transfer = (balance > 0).then_some(opening);
    let (seq, entry) = entries::from_written(
        &created,
        transfer,
        EntryKind::Opening,
        Direction::Credit,
        balance,
    )?;
    entries::insert(tx, &[(seq, &entry)]).await?;
    Ok(true)
}

/// Takes `amount` from the system account, which the caller holds locked, for the opening
/// transfer `opening`.
pub(crate) async fn debit_system(
    tx: &Tx<'_>,
    amount: i64,
    opening: &TransferId,
    currency: Currency,
) -> Result<(), Error> {
    let written = tx.query(&sql::DEBIT_SYSTEM, &[&amount]).await?;
    events::accounts_changed(tx, &written)?;
    let mut new = Vec::with_capacity(written.len());
    for row in &written {
        let (seq, mut entry) = entries::from_written(
            row,
            Some(opening),
            EntryKind::Opening,
            Direction::Debit,
            amount,
        )?;
        entry.currency = Some(currency);
        new.push((seq, entry));
    }
    let refs: Vec<(i64, &NewEntry)> = new.iter().map(|(s, e)| (*s, e)).collect();
    entries::insert(tx, &refs).await
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
    let [row] = written.as_slice() else {
        return Err(Error::invariant(format!(
            "the repair of account {id} updated {updated} rows"
        )));
    };
    // Its entry: the balance's change, and the counters it was brought back to.
    let change = i128::from(after.balance) - i128::from(before.balance);
    let direction = if change < 0 {
        Direction::Debit
    } else {
        Direction::Credit
    };
    let amount = i64::try_from(change.unsigned_abs())
        .map_err(|_| Error::invariant(format!("the repair of account {id} moves beyond i64")))?;
    let (seq, entry) = entries::from_written(row, None, EntryKind::Repair, direction, amount)?;
    entries::insert(tx, &[(seq, &entry)]).await?;
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
