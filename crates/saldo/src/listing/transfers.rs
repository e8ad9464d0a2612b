//! The transfer search: transfers by ascending id, filtered by reference, by account (either
//! side) and by status, the filters combined.
//!
//! A page is driven by one index, chosen by the filters given, and reads at most a bounded
//! number of journal rows in id order; the other filters are checked on each row read (in the
//! statement: a row that does not match comes back as its id alone, to place the cursor):
//!
//! | filters | driven by (one node) | on Citus |
//! |---|---|---|
//! | `reference` (and any others) | `transfers_reference (reference, id)` | the same, every shard |
//! | `account` (and `status`) | `(from_account, id)` and `(to_account, id)`, merged | its shard's primary key `(account_id, id)` |
//! | `status` alone, or none | the primary key | `transfers_by_id (id)`, every shard |
//!
//! With a filter checked per row (`status`; `account` next to `reference`) a page reads at most
//! `limit × TRANSFERS_READ_PER_ROW` rows ([`MAX_TRANSFERS_READ`] at most), as the order list
//! does, so a selective filter answers a short page with a cursor instead of reading the whole
//! journal: follow `next` until it is `None`. With no filter at all the search pages the whole
//! journal by id, as the other lists page theirs: it is the export and reconciliation read
//! (everything since my last cursor), served by the primary key alone.
//!
//! On Citus a transfer is two journal rows (its debit side on its source's shard, its credit
//! side on its destination's). Filtered by account, the account's own side is read (one row per
//! transfer on its shard); otherwise the debit side is the one kept, the other read only to be
//! passed over (a read across shards may see one side of a transfer committing and not the
//! other: the transfer then appears once, or not yet, never twice). A page whose read stops at
//! its bound leaves its last id to the next page, so a read that stopped between the two sides
//! of an id never skips the one that counts.
//!
//! A hold past its deadline reads `expired` (as `GET /v1/transfers/{id}` answers it, at the
//! database's time read once per page): it matches `status=expired`, not `pending`.

use chrono::{DateTime, Utc};

use super::{paginate, Cursor, ListKind, Page, PageLimit};
use crate::domain::{AccountId, InputError, Reference, TransferStatus};
use crate::error::Error;
use crate::ledger::rows::journal;
use crate::ledger::transitions::as_read;
use crate::ledger::Transfer;
use crate::operation::Operation;
use crate::store::dialect::{Param, Sql, Tx};
use crate::store::handle::Store;
use crate::store::retry::checkout;

/// Journal rows a filtered search page reads per row it may hold (see the module's doc).
pub const TRANSFERS_READ_PER_ROW: usize = 10;
/// Most journal rows one search page reads.
pub const MAX_TRANSFERS_READ: usize = 10_000;

/// What the transfer search keeps: the transfers matching every filter given (none given:
/// every transfer).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransferFilter {
    /// Only transfers with this reference.
    pub reference: Option<Reference>,
    /// Only transfers from or to this account.
    pub account: Option<AccountId>,
    /// Only transfers in this status, as a read answers it (a hold past its deadline is
    /// `expired`).
    pub status: Option<TransferStatus>,
}

impl TransferFilter {
    /// What the search's cursors carry of the filters they were handed out under: a digest
    /// (64-bit FNV-1a of a canonical encoding, the same in every process and version), so a
    /// cursor used with other filters is refused ([`InputError::CursorInvalid`]) instead of
    /// silently starting the other search somewhere in the middle.
    pub fn digest(&self) -> u64 {
        let mut bytes = Vec::with_capacity(64);
        if let Some(r) = &self.reference {
            bytes.push(b'r');
            // Length-prefixed: no reference can run into the next field.
            bytes.extend_from_slice(&(r.as_str().len() as u64).to_le_bytes());
            bytes.extend_from_slice(r.as_str().as_bytes());
        }
        if let Some(a) = self.account {
            bytes.push(b'a');
            bytes.extend_from_slice(&a.get().to_le_bytes());
        }
        if let Some(s) = self.status {
            bytes.push(b's');
            bytes.extend_from_slice(s.as_str().as_bytes());
            bytes.push(0);
        }
        super::fnv1a(&bytes)
    }
}

/// The columns of a search row: a [`Transfer`]'s (`journal::parse` reads them: keep in step
/// with the ledger's `transfer_columns!`), `hit` (the
/// row matches every filter, and on Citus is the side kept), and the metadata only for a hit
/// (a row passed over is read for its id).
macro_rules! search_columns {
    ($hit:expr) => {
        concat!(
            "SELECT id, from_account, to_account, amount, currency, kind, created_at, status, \
             posted_amount, timeout_s, expires_at, settled_at, group_id, reference, reverses, \
             reversed, CASE WHEN ",
            $hit,
            " THEN metadata END AS metadata, ",
            $hit,
            " AS hit FROM transfers "
        )
    };
}

/// The status a read answers (`transitions::as_read`) at `$3`: a hold past its deadline is
/// expired.
macro_rules! status_as_read {
    () => {
        "CASE WHEN status = 'pending' AND expires_at <= $3 THEN 'expired' ELSE status END"
    };
}

/// The filters on one node: `$4` status, `$5` account, `$6` reference, each NULL when not
/// given.
macro_rules! single_hit {
    () => {
        concat!(
            "(($4::text IS NULL OR ",
            status_as_read!(),
            " = $4) AND ($5::bigint IS NULL OR $5 IN (from_account, to_account)) \
             AND ($6::text IS NULL OR reference = $6))"
        )
    };
}

/// On Citus: the side kept is the account's (given) or the debit side, then the filters.
macro_rules! citus_hit {
    () => {
        concat!(
            "(account_id = COALESCE($5::bigint, from_account) AND ($4::text IS NULL OR ",
            status_as_read!(),
            " = $4) AND ($6::text IS NULL OR reference = $6))"
        )
    };
}

/// `$1` the id to start after, `$2` the rows to read, `$3` the time a read answers at; the
/// filters `$4`..`$6` as [`single_hit`] says. Every statement names every parameter.
const BY_REFERENCE: Sql = Sql::pair(
    concat!(
        search_columns!(single_hit!()),
        "WHERE reference = $6 AND id > $1 ORDER BY id LIMIT $2"
    ),
    concat!(
        search_columns!(citus_hit!()),
        "WHERE reference = $6 AND id > $1 ORDER BY id LIMIT $2"
    ),
);
/// One ordered scan per side, merged; a transfer's accounts differ, so it is found once.
const BY_ACCOUNT: Sql = Sql::pair(
    concat!(
        "SELECT * FROM ((",
        search_columns!(single_hit!()),
        "WHERE from_account = $5 AND id > $1 ORDER BY id LIMIT $2) UNION ALL (",
        search_columns!(single_hit!()),
        "WHERE to_account = $5 AND id > $1 ORDER BY id LIMIT $2)) AS sides ORDER BY id LIMIT $2"
    ),
    concat!(
        search_columns!(citus_hit!()),
        "WHERE account_id = $5 AND id > $1 ORDER BY id LIMIT $2"
    ),
);
const ALL: Sql = Sql::pair(
    concat!(
        search_columns!(single_hit!()),
        "WHERE id > $1 ORDER BY id LIMIT $2"
    ),
    concat!(
        search_columns!(citus_hit!()),
        "WHERE id > $1 ORDER BY id LIMIT $2"
    ),
);

/// One journal row the search read: its id, and the transfer when it matched.
struct Scanned {
    id: String,
    hit: Option<Transfer>,
}

/// Transfers by ascending id matching every filter of `filter`, after `cursor` (a
/// [`ListKind::Transfers`] cursor handed out under the same filters: any other is
/// [`InputError::CursorInvalid`]). A page reads a bounded number of journal rows, so it may
/// hold fewer than `limit` (even none) and still carry a cursor: follow `next` until it is
/// `None`. Each transfer is answered as a read answers it (a hold past its deadline is
/// `expired`).
pub async fn transfers(
    store: &Store,
    filter: &TransferFilter,
    limit: PageLimit,
    cursor: Option<&Cursor>,
) -> Result<Page<Transfer>, Error> {
    let digest = filter.digest();
    let after = match cursor {
        None => "",
        Some(Cursor::Filtered(ListKind::Transfers, d, key)) if *d == digest => key.as_str(),
        Some(_) => {
            return Err(InputError::CursorInvalid {
                list: ListKind::Transfers.as_str(),
            }
            .into())
        }
    };
    let (sql, checked_per_row) = match (&filter.reference, filter.account) {
        (Some(_), account) => (BY_REFERENCE, account.is_some()),
        (None, Some(_)) => (BY_ACCOUNT, false),
        (None, None) => (ALL, false),
    };
    let checked_per_row = checked_per_row || filter.status.is_some();
    // On Citus, unless one account's shard is read, both sides of each transfer are read and
    // one is kept. (The read is by id alone, the index's order: ordering the sides too would
    // sort every row of a shard before its limit.)
    let by_account = filter.reference.is_none() && filter.account.is_some();
    let sides = if store.is_citus() && !by_account {
        2
    } else {
        1
    };
    let wanted = limit.get() as usize + 1;
    let read_rows = if checked_per_row {
        (wanted * TRANSFERS_READ_PER_ROW).clamp(wanted, MAX_TRANSFERS_READ)
    } else {
        sides * wanted
    };

    let client = checkout(&store.pool, Operation::ListTransfers).await?;
    let tx = Tx::new(&client, store.dialect());
    // The time every row is answered at, the hold-past-its-deadline rule included.
    let now: DateTime<Utc> = crate::ledger::rows::settles::now(&tx).await?;
    let rows_i64 = i64::try_from(read_rows).unwrap_or(i64::MAX);
    let status = filter.status.map(TransferStatus::as_str);
    let account = filter.account.map(AccountId::get);
    let reference = filter.reference.as_ref().map(Reference::as_str);
    let params: [Param<'_>; 6] = [&after, &rows_i64, &now, &status, &account, &reference];
    let rows = tx.query(&sql, &params).await?;
    let mut scanned = rows
        .iter()
        .map(|row| {
            let id: String = row.try_get("id")?;
            let hit = if row.try_get::<_, bool>("hit")? {
                Some(as_read(journal::parse(row, false)?, now))
            } else {
                None
            };
            Ok(Scanned { id, hit })
        })
        .collect::<Result<Vec<Scanned>, Error>>()?;
    let read_bound = if sides == 2 {
        leave_last_id(&mut scanned, read_rows)
    } else {
        read_rows
    };
    let page = paginate(
        scanned,
        limit,
        read_bound,
        |s| s.hit.is_some(),
        |s| Cursor::Filtered(ListKind::Transfers, digest, s.id.clone()),
    );
    Ok(Page {
        items: page.items.into_iter().filter_map(|s| s.hit).collect(),
        next: page.next,
    })
}

/// A read of both sides of each id (by id alone) that stopped at its bound (`read_rows`) may
/// have stopped between the two sides of its last id, the kept one unread: that id's rows are
/// dropped, left to the next page. Returns the bound to paginate with: still a full read when
/// it was one, so the cursor goes after the rows left. At most two rows share an id and at
/// least four were read, so a page still moves on.
fn leave_last_id(scanned: &mut Vec<Scanned>, read_rows: usize) -> usize {
    if scanned.len() < read_rows {
        return read_rows;
    }
    let last = scanned.last().map(|s| s.id.clone());
    while scanned.len() > 1 && scanned.last().map(|s| &s.id) == last.as_ref() {
        scanned.pop();
    }
    scanned.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_read_of_both_sides_leaves_its_last_id_to_the_next_page() {
        let rows = |ids: &[&str]| -> Vec<Scanned> {
            ids.iter()
                .map(|id| Scanned {
                    id: (*id).to_owned(),
                    hit: None,
                })
                .collect()
        };
        let ids = |s: &[Scanned]| s.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
        // Stopped after one side of `c`: `c` is read again next page.
        let mut read = rows(&["a", "a", "b", "c"]);
        assert_eq!(leave_last_id(&mut read, 4), 3);
        assert_eq!(ids(&read), ["a", "a", "b"]);
        let mut read = rows(&["a", "b", "b", "c", "c"]);
        assert_eq!(leave_last_id(&mut read, 5), 3);
        assert_eq!(ids(&read), ["a", "b", "b"]);
        // Not a full read: the end, nothing left out.
        let mut read = rows(&["a", "a", "b"]);
        assert_eq!(leave_last_id(&mut read, 4), 4);
        assert_eq!(read.len(), 3);
    }

    #[test]
    fn a_digest_tells_every_filter_apart() {
        let reference = |s: &str| Some(Reference::new(s).expect("reference"));
        let account = |n: i64| Some(AccountId::new(n).expect("account"));
        let filters = [
            TransferFilter::default(),
            TransferFilter {
                reference: reference("a"),
                ..TransferFilter::default()
            },
            TransferFilter {
                reference: reference("b"),
                ..TransferFilter::default()
            },
            TransferFilter {
                account: account(1),
                ..TransferFilter::default()
            },
            TransferFilter {
                account: account(2),
                ..TransferFilter::default()
            },
            TransferFilter {
                status: Some(TransferStatus::Pending),
                ..TransferFilter::default()
            },
            TransferFilter {
                reference: reference("a"),
                account: account(1),
                status: Some(TransferStatus::Posted),
            },
        ];
        for (i, a) in filters.iter().enumerate() {
            assert_eq!(a.digest(), a.clone().digest(), "stable");
            for b in &filters[i + 1..] {
                assert_ne!(a.digest(), b.digest(), "{a:?} and {b:?}");
            }
        }
        // The same in every process and version: cursors outlive both.
        assert_eq!(TransferFilter::default().digest(), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn every_statement_reads_every_column_a_transfer_is_read_from() {
        for sql in [BY_REFERENCE, BY_ACCOUNT, ALL] {
            for text in [sql.single(), sql.citus()] {
                for column in crate::ledger::sql::TRANSFER_COLUMNS.split(',') {
                    let column = column.trim();
                    assert!(text.contains(column), "{column} missing: {text}");
                }
            }
        }
    }

    #[test]
    fn every_statement_names_every_parameter() {
        for sql in [BY_REFERENCE, BY_ACCOUNT, ALL] {
            for text in [sql.single(), sql.citus()] {
                for p in 1..=6 {
                    assert!(text.contains(&format!("${p}")), "${p} missing: {text}");
                }
                assert!(!text.contains("$7"), "{text}");
            }
        }
    }
}
