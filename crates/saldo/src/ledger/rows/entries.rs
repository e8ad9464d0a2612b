//! Writing account entries (migration V20): numbering a transaction's entries per account after
//! the `entry_seq` each account was locked with, and inserting them in one statement on one
//! node (multi-row `VALUES` in bounded chunks on Citus, each row routed to its account's shard).
//!
//! Called by `rows::accounts` with the account rows it writes: an entry is never written
//! without its account's counters, nor those without it.

use std::collections::BTreeMap;

use crate::domain::AccountId;
use crate::error::Error;
use crate::ledger::apply::Locked;
use crate::ledger::entries::{Direction, EntryKind, NewEntry};
use crate::ledger::sql;
use crate::ledger::types::currency_from_db;
use crate::store::dialect::{Param, Tx};

/// A transaction's entries with their seqs, and each account's last seq (its new `entry_seq`).
pub(crate) type Numbered<'l> = (Vec<(i64, &'l NewEntry)>, BTreeMap<AccountId, i64>);

/// Each entry of `locked` with its seq, and each changed account's new `entry_seq` (its last),
/// by account: entries are numbered in the order they were made, after the account's seq as
/// locked.
pub(crate) fn numbered(locked: &Locked) -> Result<Numbered<'_>, Error> {
    let mut last: BTreeMap<AccountId, i64> = BTreeMap::new();
    let mut out = Vec::with_capacity(locked.entries().len());
    for e in locked.entries() {
        let seq = match last.get(&e.account) {
            Some(s) => *s,
            None => locked.get(e.account)?.entry_seq,
        }
        .checked_add(1)
        .ok_or_else(|| Error::invariant(format!("account {} ran out of seqs", e.account)))?;
        last.insert(e.account, seq);
        out.push((seq, e));
    }
    Ok((out, last))
}

/// An entry of one account whose write returned its row (`id`, `balance`, `held`,
/// `pending_credits`, `currency`, `entry_seq`: the new seq): an opening or a repair.
pub(crate) fn from_written(
    row: &tokio_postgres::Row,
    transfer: Option<&crate::domain::TransferId>,
    kind: EntryKind,
    direction: Direction,
    amount: i64,
) -> Result<(i64, NewEntry), Error> {
    let currency = row
        .try_get::<_, Option<String>>("currency")?
        .map(|c| currency_from_db(&c))
        .transpose()?;
    let entry = NewEntry {
        account: crate::ledger::types::account_from_db(row.try_get("id")?)?,
        transfer: transfer.cloned(),
        kind,
        direction,
        amount,
        currency,
        balance_after: row.try_get("balance")?,
        held_after: row.try_get("held")?,
        pending_credits_after: row.try_get("pending_credits")?,
    };
    Ok((row.try_get("entry_seq")?, entry))
}

/// The entry columns, one vector each.
struct Columns<'e> {
    accounts: Vec<i64>,
    seqs: Vec<i64>,
    transfers: Vec<Option<&'e str>>,
    kinds: Vec<&'static str>,
    directions: Vec<&'static str>,
    amounts: Vec<i64>,
    currencies: Vec<Option<&'e str>>,
    balances: Vec<i64>,
    held: Vec<i64>,
    credits: Vec<i64>,
}

impl<'e> Columns<'e> {
    fn of(entries: &[(i64, &'e NewEntry)]) -> Self {
        Columns {
            accounts: entries.iter().map(|(_, e)| e.account.get()).collect(),
            seqs: entries.iter().map(|(s, _)| *s).collect(),
            transfers: entries
                .iter()
                .map(|(_, e)| e.transfer.as_ref().map(|t| t.as_str()))
                .collect(),
            kinds: entries.iter().map(|(_, e)| e.kind.as_str()).collect(),
            directions: entries.iter().map(|(_, e)| e.direction.as_str()).collect(),
            amounts: entries.iter().map(|(_, e)| e.amount).collect(),
            currencies: entries
                .iter()
                .map(|(_, e)| e.currency.as_ref().map(|c| c.as_str()))
                .collect(),
            balances: entries.iter().map(|(_, e)| e.balance_after).collect(),
            held: entries.iter().map(|(_, e)| e.held_after).collect(),
            credits: entries
                .iter()
                .map(|(_, e)| e.pending_credits_after)
                .collect(),
        }
    }
}

/// Inserts numbered entries (none: nothing to do).
pub(crate) async fn insert(tx: &Tx<'_>, entries: &[(i64, &NewEntry)]) -> Result<(), Error> {
    if entries.is_empty() {
        return Ok(());
    }
    let c = Columns::of(entries);
    if !tx.dialect().is_citus() {
        let params: [Param<'_>; 10] = [
            &c.accounts,
            &c.seqs,
            &c.transfers,
            &c.kinds,
            &c.directions,
            &c.amounts,
            &c.currencies,
            &c.balances,
            &c.held,
            &c.credits,
        ];
        tx.execute(&sql::INSERT_ENTRIES, &params).await?;
        return Ok(());
    }
    let width = sql::CITUS_INSERT_ENTRIES.width();
    for start in (0..entries.len()).step_by(sql::CITUS_ENTRIES_CHUNK) {
        let end = (start + sql::CITUS_ENTRIES_CHUNK).min(entries.len());
        let mut params: Vec<Param<'_>> = Vec::with_capacity(width * (end - start));
        for i in start..end {
            params.extend_from_slice(&[
                &c.accounts[i],
                &c.seqs[i],
                &c.transfers[i],
                &c.kinds[i],
                &c.directions[i],
                &c.amounts[i],
                &c.currencies[i],
                &c.balances[i],
                &c.held[i],
                &c.credits[i],
            ]);
        }
        // One statement text per chunk size: at most CITUS_ENTRIES_CHUNK of them.
        let text = sql::CITUS_INSERT_ENTRIES.statement(end - start);
        let stmt = tx.client().prepare_cached(&text).await?;
        tx.client().execute(&stmt, &params).await?;
    }
    Ok(())
}

/// Writes the entries of `locked` and their accounts' new `entry_seq`, leaving the counters
/// (and their events) to whoever wrote them: the lab's movements.
pub(crate) async fn write_only(tx: &Tx<'_>, locked: &Locked) -> Result<(), Error> {
    let (numbered, last) = numbered(locked)?;
    let ids: Vec<i64> = last.keys().map(|a| a.get()).collect();
    let seqs: Vec<i64> = last.values().copied().collect();
    futures::try_join!(
        async {
            tx.execute(&sql::WRITE_ENTRY_SEQS, &[&ids, &seqs]).await?;
            Ok::<_, Error>(())
        },
        insert(tx, &numbered)
    )?;
    Ok(())
}
