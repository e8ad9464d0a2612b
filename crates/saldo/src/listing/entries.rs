//! An account's entries (migration V20): its statement, one page at a time, and its counters as
//! of a time.
//!
//! A statement page is the account's entries with `from <= at < to`, in (time, seq) order (the
//! same order as seq: an entry's time is taken under its account's lock), keyset-paged on
//! `(at, seq)`: one range scan of the `(account_id, at, seq)` index, whatever the journal's
//! size. Its cursor carries the last entry's time and seq and a digest of the filters (the
//! account and the range): a cursor of another statement, another list or another shape is
//! [`InputError::CursorInvalid`]. A balance at a time is the last entry at or before it: one
//! probe of the same index, backwards. On Citus both are routed to the account's shard.
//!
//! Times are clamped to what PostgreSQL and the ledger keep ([`EARLIEST`]..=[`LATEST`], plus a
//! second for an open end): a time before the first is before every entry, one after the last
//! is after every entry, never a database error. A range whose `to` is not after its `from` is
//! empty.

use chrono::{DateTime, TimeZone, Utc};

use super::{paginate, Cursor, ListKind, Page, PageLimit};
use crate::domain::{AccountId, InputError, TransferId};
use crate::error::Error;
use crate::ledger::entries::{BalanceAt, Direction, Entry, EntryKind};
use crate::ledger::types::currency_from_db;
use crate::operation::Operation;
use crate::store::handle::Store;
use crate::store::retry::checkout;

/// One statement page: `$1` the account, `$2`/`$3` where it starts (time, seq: inclusive), `$4`
/// the end of the range (exclusive), `$5` the rows to read. The account's currency beside each
/// row, and a row with no entry when the page is empty, so one statement also says whether the
/// account exists.
const PAGE: &str = "\
SELECT a.currency AS account_currency, e.seq, e.transfer_id, e.kind, e.direction, e.amount,
       e.currency, e.balance_after, e.held_after, e.pending_credits_after, e.at
  FROM accounts a
  LEFT JOIN LATERAL (
       SELECT seq, transfer_id, kind, direction, amount, currency, balance_after, held_after,
              pending_credits_after, at
         FROM entries
        WHERE account_id = $1 AND (at, seq) >= ($2, $3) AND at < $4
        ORDER BY at, seq LIMIT $5) e ON true
 WHERE a.id = $1
 ORDER BY e.at, e.seq";

/// The account's counters at `$2`: its last entry at or before it (none: opened later).
const AT: &str = "\
SELECT a.currency, e.seq, e.balance_after, e.held_after, e.pending_credits_after, e.at
  FROM accounts a
  LEFT JOIN LATERAL (
       SELECT seq, balance_after, held_after, pending_credits_after, at
         FROM entries
        WHERE account_id = $1 AND at <= $2
        ORDER BY at DESC, seq DESC LIMIT 1) e ON true
 WHERE a.id = $1";

/// The earliest time a statement or a balance may name: no entry is older.
pub fn earliest() -> DateTime<Utc> {
    DateTime::UNIX_EPOCH
}

/// The latest: the end of year 9999 (PostgreSQL keeps far more; a client's typo should not).
pub fn latest() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59)
        .single()
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// [`earliest`] as text, for messages and the API's description.
pub const EARLIEST: &str = "1970-01-01T00:00:00Z";
/// [`latest`] as text.
pub const LATEST: &str = "9999-12-31T23:59:59Z";

/// `t` within what a statement or a balance may name: [`earliest`]..=[`latest`] plus one second
/// (an open end, after every entry).
pub fn clamped(t: DateTime<Utc>) -> DateTime<Utc> {
    t.clamp(earliest(), end())
}

/// Just after [`latest`]: the end of an open range.
fn end() -> DateTime<Utc> {
    latest() + chrono::Duration::seconds(1)
}

/// Which statement: the account, and the time range `from <= at < to` (each optional).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryFilter {
    account: AccountId,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
}

impl EntryFilter {
    /// The statement of `account` from `from` (inclusive) to `to` (exclusive), each
    /// [`clamped`]; `to` at or before `from` is an empty range.
    pub fn new(account: AccountId, from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>) -> Self {
        EntryFilter {
            account,
            from: from.map(clamped),
            to: to.map(clamped),
        }
    }

    pub fn account(&self) -> AccountId {
        self.account
    }

    /// What its cursors carry of it (see [`super::transfers::TransferFilter::digest`]).
    pub fn digest(&self) -> u64 {
        super::range_digest(b'e', self.account.get(), self.from, self.to)
    }
}

/// Where a page starts: after the cursor's entry (its time, its seq + 1, inclusive), or at
/// `from`. A cursor's time outside the bounds is clamped to them: every cursor of the shape is
/// a position (past the end: an empty page).
fn start(filter: &EntryFilter, cursor: Option<&Cursor>) -> Result<(DateTime<Utc>, i64), Error> {
    let from = filter.from.unwrap_or_else(earliest);
    match cursor {
        None => Ok((from, 0)),
        Some(Cursor::Entry { digest, at, seq }) if *digest == filter.digest() => {
            Ok(super::resume_after(*at, *seq, from, end()))
        }
        Some(_) => Err(InputError::CursorInvalid {
            list: ListKind::Entries.as_str(),
        }
        .into()),
    }
}

fn corrupt(what: &str) -> Error {
    Error::invariant(format!("an entry's {what} is not one the schema allows"))
}

/// A page of `filter`'s statement after `cursor`, oldest first; [`Error::UnknownAccount`] when
/// the account does not exist.
pub async fn entries(
    store: &Store,
    filter: &EntryFilter,
    limit: PageLimit,
    cursor: Option<&Cursor>,
) -> Result<Page<Entry>, Error> {
    let (from, seq) = start(filter, cursor)?;
    // Exclusive; a range past the latest time ends just after it.
    let to = filter
        .to
        .unwrap_or_else(|| latest() + chrono::Duration::seconds(1));
    let read_rows = limit.get() as usize + 1;
    let rows_i64 = i64::try_from(read_rows).unwrap_or(i64::MAX);
    let account = filter.account;
    let client = checkout(&store.pool, Operation::ListEntries).await?;
    let rows = client
        .query(PAGE, &[&account.get(), &from, &seq, &to, &rows_i64])
        .await?;
    if rows.is_empty() {
        return Err(Error::UnknownAccount(account));
    }
    let mut entries = Vec::with_capacity(rows.len());
    for row in &rows {
        let Some(seq) = row.try_get::<_, Option<i64>>("seq")? else {
            continue;
        };
        let currency = match row.try_get::<_, Option<String>>("currency")? {
            Some(c) => Some(c),
            None => row.try_get("account_currency")?,
        };
        let balance: i64 = row.try_get("balance_after")?;
        let held: i64 = row.try_get("held_after")?;
        entries.push(Entry {
            account,
            seq,
            transfer_id: row
                .try_get::<_, Option<String>>("transfer_id")?
                .map(TransferId::new)
                .transpose()?,
            kind: EntryKind::parse(&row.try_get::<_, String>("kind")?)
                .ok_or_else(|| corrupt("kind"))?,
            direction: Direction::parse(&row.try_get::<_, String>("direction")?)
                .ok_or_else(|| corrupt("direction"))?,
            amount: row.try_get("amount")?,
            currency: currency.map(|c| currency_from_db(&c)).transpose()?,
            balance_after: balance,
            held_after: held,
            available_after: balance.checked_sub(held).ok_or_else(|| corrupt("held"))?,
            pending_credits_after: row.try_get("pending_credits_after")?,
            at: row.try_get("at")?,
        });
    }
    let digest = filter.digest();
    Ok(paginate(
        entries,
        limit,
        read_rows,
        |_| true,
        |e| Cursor::Entry {
            digest,
            at: e.at.timestamp_micros(),
            seq: e.seq,
        },
    ))
}

/// The account's balance, held and pending credits as of `at` ([`clamped`]): those its
/// last entry at or before `at` left. [`Error::UnknownAccount`] when it does not exist,
/// [`Error::NoBalanceAt`] when it has no entry by then (it was opened later).
pub async fn balance_at(
    store: &Store,
    account: AccountId,
    at: DateTime<Utc>,
) -> Result<BalanceAt, Error> {
    let at = clamped(at);
    let client = checkout(&store.pool, Operation::LedgerRead).await?;
    let row = client
        .query_opt(AT, &[&account.get(), &at])
        .await?
        .ok_or(Error::UnknownAccount(account))?;
    let Some(seq) = row.try_get::<_, Option<i64>>("seq")? else {
        return Err(Error::NoBalanceAt { account, at });
    };
    let balance: i64 = row.try_get("balance_after")?;
    let held: i64 = row.try_get("held_after")?;
    Ok(BalanceAt {
        account,
        at,
        currency: row
            .try_get::<_, Option<String>>("currency")?
            .map(|c| currency_from_db(&c))
            .transpose()?,
        balance,
        held,
        available: balance.checked_sub(held).ok_or_else(|| corrupt("held"))?,
        pending_credits: row.try_get("pending_credits_after")?,
        entry_seq: seq,
        entry_at: row.try_get("at")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(n: i64) -> AccountId {
        AccountId::new(n).expect("account")
    }

    #[test]
    fn times_are_clamped_to_what_the_database_keeps() {
        let year = |y| {
            Utc.with_ymd_and_hms(y, 1, 1, 0, 0, 0)
                .single()
                .expect("time")
        };
        assert_eq!(clamped(year(1969)), earliest());
        assert_eq!(clamped(year(100_000)), end());
        assert_eq!(clamped(year(2026)), year(2026));
        let far = EntryFilter::new(account(1), Some(year(-5)), Some(year(20_000)));
        assert_eq!(
            far,
            EntryFilter::new(account(1), Some(earliest()), Some(end()))
        );
        assert_eq!(latest().to_rfc3339(), "9999-12-31T23:59:59+00:00");
    }

    #[test]
    fn a_cursor_belongs_to_its_statement_only() {
        let mine = EntryFilter::new(account(1), None, None);
        let other = EntryFilter::new(account(2), None, None);
        let cursor = Cursor::Entry {
            digest: mine.digest(),
            at: 1_000_000,
            seq: 7,
        };
        let (at, seq) = start(&mine, Some(&cursor)).expect("mine");
        assert_eq!((at.timestamp_micros(), seq), (1_000_000, 8));
        assert!(start(&other, Some(&cursor)).is_err());
        let transfers = Cursor::Filtered(ListKind::Transfers, mine.digest(), "t".into());
        assert!(start(&mine, Some(&transfers)).is_err());
        // A position past every time is the end, not a database error.
        let far = Cursor::Entry {
            digest: mine.digest(),
            at: i64::MAX,
            seq: 1,
        };
        assert_eq!(start(&mine, Some(&far)).expect("far").0, end());
        // From the open end on, with any cursor: no panic, an empty range.
        let past = EntryFilter::new(account(1), Some(end()), None);
        let far = Cursor::Entry {
            digest: past.digest(),
            at: 0,
            seq: 1,
        };
        assert_eq!(start(&past, Some(&far)).expect("past").0, end());
    }
}
