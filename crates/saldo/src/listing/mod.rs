//! Lists of products, orders, locations, accounts and transfers, one page at a time: keyset pagination by id (never
//! OFFSET), so rows inserted or removed while a client pages through neither shift a page nor
//! repeat or hide an id that was there before the listing started.
//!
//! A page is at most [`MAX_PAGE_LIMIT`] rows; the cursor ([`Cursor`]) names the last key a page
//! covered and is handed back by the client as is. Every string of a cursor's documented shape
//! is a valid position (keyset: "after this key"), so a well-formed cursor is never refused;
//! one of another list or another shape is an [`InputError::CursorInvalid`]. A list with
//! filters (the transfer search) binds its cursors to them too: the cursor carries a digest of
//! the filters it was handed out under ([`Cursor::Filtered`]), and one used with other filters
//! is refused the same way. The queries live next to the data they read: [`stock`] (products,
//! orders, locations), [`ledger`] (accounts), [`transfers`] (the transfer search), [`entries`]
//! (an account's statement, keyset on (time, seq), and its balance at a time), [`movements`]
//! (a product's stock statement, the same way).

pub mod entries;
pub mod ledger;
pub mod movements;
pub mod stock;
pub mod transfers;

use std::fmt;

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::domain::{valid_token, InputError};
use crate::error::Error;
use crate::operation::Operation;
use crate::store::handle::Store;
use crate::store::retry::checkout;

/// Rows per page when the client names no limit.
pub const DEFAULT_PAGE_LIMIT: u32 = 100;
/// Most rows one page may hold.
pub const MAX_PAGE_LIMIT: u32 = 1_000;
/// Hex digits of a numeric cursor's key (a `u64`).
pub const NUMERIC_CURSOR_DIGITS: usize = 16;
/// Hex digits of a filtered cursor's digest of its filters (a `u64`).
pub const FILTER_DIGEST_DIGITS: usize = 16;
/// Hex digits of an entries cursor: its filters' digest, the last entry's time (microseconds
/// since 1970) and its seq, 16 each.
pub const ENTRY_CURSOR_DIGITS: usize = 48;

/// 64-bit FNV-1a: the digest a filtered list's cursors carry of their filters (the same in
/// every process and version).
/// The digest of a statement's filter (an account's entries, a product's movements): its kind
/// tag, its row's id and its time range, so a cursor is refused under another statement.
pub(crate) fn range_digest(
    tag: u8,
    id: i64,
    from: Option<chrono::DateTime<chrono::Utc>>,
    to: Option<chrono::DateTime<chrono::Utc>>,
) -> u64 {
    let mut bytes = Vec::with_capacity(32);
    bytes.push(tag);
    bytes.extend_from_slice(&id.to_le_bytes());
    for t in [from, to] {
        match t {
            Some(t) => {
                bytes.push(1);
                bytes.extend_from_slice(&t.timestamp_micros().to_le_bytes());
            }
            None => bytes.push(0),
        }
    }
    fnv1a(&bytes)
}

/// Where a statement page resumes after a cursor's row (its time in microseconds, its seq):
/// that time, clamped to `[from, end]` (every cursor of the shape is a position; past the end,
/// an empty page), and the next seq. `from` is clamped itself, so never after `end`.
pub(crate) fn resume_after(
    at_micros: i64,
    seq: i64,
    from: chrono::DateTime<chrono::Utc>,
    end: chrono::DateTime<chrono::Utc>,
) -> (chrono::DateTime<chrono::Utc>, i64) {
    let at = chrono::DateTime::from_timestamp_micros(at_micros)
        .unwrap_or(if at_micros < 0 {
            chrono::DateTime::<chrono::Utc>::MIN_UTC
        } else {
            chrono::DateTime::<chrono::Utc>::MAX_UTC
        })
        .clamp(from, end);
    (at, seq.saturating_add(1))
}

pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// How many rows a page may hold: 1..=[`MAX_PAGE_LIMIT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLimit(u32);

impl PageLimit {
    pub fn new(raw: i64) -> Result<Self, InputError> {
        match u32::try_from(raw) {
            Ok(n) if (1..=MAX_PAGE_LIMIT).contains(&n) => Ok(PageLimit(n)),
            _ => Err(InputError::PageLimitOutOfRange {
                limit: raw,
                max: MAX_PAGE_LIMIT,
            }),
        }
    }
    pub fn get(self) -> u32 {
        self.0
    }
}

impl Default for PageLimit {
    fn default() -> Self {
        PageLimit(DEFAULT_PAGE_LIMIT)
    }
}

/// Which list a cursor belongs to: its first character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    Products,
    Accounts,
    Orders,
    Locations,
    /// The transfer search: its cursors carry its filters' digest.
    Transfers,
    /// An account's entries (its statement): cursors carry the filters' digest (the account
    /// and the time range) and the last entry's time and seq.
    Entries,
    /// A product's movements (its stock statement): cursors like [`ListKind::Entries`]'s,
    /// bound to the product and the range.
    Movements,
}

impl ListKind {
    fn tag(self) -> char {
        match self {
            ListKind::Products => 'p',
            ListKind::Accounts => 'a',
            ListKind::Orders => 'o',
            ListKind::Locations => 'l',
            ListKind::Transfers => 't',
            ListKind::Entries => 'e',
            ListKind::Movements => 'm',
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            ListKind::Products => "products",
            ListKind::Accounts => "accounts",
            ListKind::Orders => "orders",
            ListKind::Locations => "locations",
            ListKind::Transfers => "transfers",
            ListKind::Entries => "entries",
            ListKind::Movements => "movements",
        }
    }
    /// The regular expression every cursor of this list matches (and every match is valid),
    /// for the OpenAPI document.
    pub fn cursor_pattern(self) -> String {
        match self {
            ListKind::Products | ListKind::Accounts => {
                format!("^{}[0-9a-f]{{{NUMERIC_CURSOR_DIGITS}}}$", self.tag())
            }
            ListKind::Orders | ListKind::Locations => format!(
                "^{}[A-Za-z0-9._:-]{{1,{}}}$",
                self.tag(),
                crate::domain::MAX_ORDER_ID_LEN
            ),
            ListKind::Transfers => format!(
                "^{}[0-9a-f]{{{FILTER_DIGEST_DIGITS}}}[A-Za-z0-9._:-]{{1,{}}}$",
                self.tag(),
                crate::domain::MAX_ORDER_ID_LEN
            ),
            ListKind::Entries | ListKind::Movements => {
                format!("^{}[0-9a-f]{{{ENTRY_CURSOR_DIGITS}}}$", self.tag())
            }
        }
    }
    /// Shortest cursor of this list.
    pub fn cursor_min_len(self) -> usize {
        1 + match self {
            ListKind::Products | ListKind::Accounts => NUMERIC_CURSOR_DIGITS,
            ListKind::Orders | ListKind::Locations => 1,
            ListKind::Transfers => FILTER_DIGEST_DIGITS + 1,
            ListKind::Entries | ListKind::Movements => ENTRY_CURSOR_DIGITS,
        }
    }
    /// Longest cursor of this list.
    pub fn cursor_max_len(self) -> usize {
        1 + match self {
            ListKind::Products | ListKind::Accounts => NUMERIC_CURSOR_DIGITS,
            ListKind::Orders | ListKind::Locations => crate::domain::MAX_ORDER_ID_LEN,
            ListKind::Transfers => FILTER_DIGEST_DIGITS + crate::domain::MAX_ORDER_ID_LEN,
            ListKind::Entries | ListKind::Movements => ENTRY_CURSOR_DIGITS,
        }
    }
}

/// Where the next page starts: after this key. Opaque to clients (they hand back
/// `next_cursor`); its text form is the list's tag and the key (a numeric key as 16 lowercase
/// hex digits, an order id as is), for a filtered list with its filters' digest (16 lowercase
/// hex digits) between the two.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cursor {
    /// After this product id (or account id); 0 is the start.
    Numeric(ListKind, i64),
    /// After this order id.
    Text(ListKind, String),
    /// After this transfer id, in the list filtered as the digest says (see
    /// [`transfers::TransferFilter::digest`]).
    Filtered(ListKind, u64, String),
    /// After this entry (its time in microseconds since 1970, its seq), in the statement the
    /// digest names (see [`entries::EntryFilter::digest`]).
    Entry { digest: u64, at: i64, seq: i64 },
    /// After this movement (its time, its seq), in the product's statement the digest names
    /// (see [`movements::MovementFilter::digest`]).
    Movement { digest: u64, at: i64, seq: i64 },
}

impl Cursor {
    /// Parses a cursor of list `kind`.
    pub fn parse(kind: ListKind, raw: &str) -> Result<Cursor, InputError> {
        let invalid = || InputError::CursorInvalid {
            list: kind.as_str(),
        };
        let rest = raw.strip_prefix(kind.tag()).ok_or_else(invalid)?;
        match kind {
            ListKind::Products | ListKind::Accounts => {
                let well_formed = rest.len() == NUMERIC_CURSOR_DIGITS
                    && rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
                if !well_formed {
                    return Err(invalid());
                }
                let key = u64::from_str_radix(rest, 16).map_err(|_| invalid())?;
                // Past every possible id: a valid position, whose page is empty.
                Ok(Cursor::Numeric(
                    kind,
                    i64::try_from(key).unwrap_or(i64::MAX),
                ))
            }
            // Order ids and location ids are both tokens of at most 64 characters.
            ListKind::Orders | ListKind::Locations => {
                if valid_token(rest) {
                    Ok(Cursor::Text(kind, rest.to_owned()))
                } else {
                    Err(invalid())
                }
            }
            ListKind::Transfers => {
                // `get` is None past the end or inside a character: both malformed.
                let digest = rest.get(..FILTER_DIGEST_DIGITS).ok_or_else(invalid)?;
                let key = &rest[FILTER_DIGEST_DIGITS..];
                if !digest
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
                    || !valid_token(key)
                {
                    return Err(invalid());
                }
                let digest = u64::from_str_radix(digest, 16).map_err(|_| invalid())?;
                Ok(Cursor::Filtered(kind, digest, key.to_owned()))
            }
            ListKind::Entries | ListKind::Movements => {
                let well_formed = rest.len() == ENTRY_CURSOR_DIGITS
                    && rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
                if !well_formed {
                    return Err(invalid());
                }
                // Every 16 hex digits are a u64; the time and seq are their i64 bits.
                let part = |i: usize| {
                    u64::from_str_radix(&rest[16 * i..16 * (i + 1)], 16).map_err(|_| invalid())
                };
                let (digest, at, seq) = (part(0)?, part(1)? as i64, part(2)? as i64);
                Ok(if kind == ListKind::Entries {
                    Cursor::Entry { digest, at, seq }
                } else {
                    Cursor::Movement { digest, at, seq }
                })
            }
        }
    }

    /// The list this cursor belongs to.
    pub fn kind(&self) -> ListKind {
        match self {
            Cursor::Numeric(kind, _) | Cursor::Text(kind, _) | Cursor::Filtered(kind, _, _) => {
                *kind
            }
            Cursor::Entry { .. } => ListKind::Entries,
            Cursor::Movement { .. } => ListKind::Movements,
        }
    }

    fn numeric_key(cursor: Option<&Cursor>) -> i64 {
        match cursor {
            Some(Cursor::Numeric(_, key)) => *key,
            _ => 0,
        }
    }

    fn text_key(cursor: Option<&Cursor>) -> &str {
        match cursor {
            Some(Cursor::Text(_, key)) => key,
            // Every order id is longer than the empty string, so this is the start.
            _ => "",
        }
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cursor::Numeric(kind, key) => write!(f, "{}{:016x}", kind.tag(), key),
            Cursor::Text(kind, key) => write!(f, "{}{}", kind.tag(), key),
            Cursor::Filtered(kind, digest, key) => {
                write!(f, "{}{:016x}{}", kind.tag(), digest, key)
            }
            Cursor::Entry { digest, at, seq } => write!(
                f,
                "{}{:016x}{:016x}{:016x}",
                ListKind::Entries.tag(),
                digest,
                *at as u64,
                *seq as u64
            ),
            Cursor::Movement { digest, at, seq } => write!(
                f,
                "{}{:016x}{:016x}{:016x}",
                ListKind::Movements.tag(),
                digest,
                *at as u64,
                *seq as u64
            ),
        }
    }
}

/// One page of a list, in ascending key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Where the next page starts; `None` when this page reached the end.
    pub next: Option<Cursor>,
}

/// Runs one list query (`$1` the key to start after, `$2` how many rows to read) and maps its
/// rows; a row the schema should never hold is an invariant error, not a panic.
async fn read<K, T>(
    store: &Store,
    operation: Operation,
    sql: &str,
    after: K,
    rows: usize,
    map: impl Fn(&Row) -> Result<T, Error>,
) -> Result<Vec<T>, Error>
where
    K: ToSql + Sync,
{
    let client = checkout(&store.pool, operation).await?;
    let rows = i64::try_from(rows).unwrap_or(i64::MAX);
    let read = client.query(sql, &[&after, &rows]).await?;
    read.iter().map(map).collect()
}

/// A key read back from the table that its own newtype refuses: the schema's CHECKs and the
/// code disagree.
fn corrupt(table: &str, e: InputError) -> Error {
    Error::invariant(format!("{table} row: {e}"))
}

/// Builds a page from rows read in key order: up to `limit` rows that `keep`, and a cursor
/// when more may follow: either one more kept row was read, or the read stopped at its bound
/// (`read_bound`) before the end, in which case the cursor is the last key read, so the next
/// page goes on from there without reading those rows again.
fn paginate<T>(
    rows: Vec<T>,
    limit: PageLimit,
    read_bound: usize,
    keep: impl Fn(&T) -> bool,
    cursor_of: impl Fn(&T) -> Cursor,
) -> Page<T> {
    let limit = limit.get() as usize;
    let full = rows.len() >= read_bound;
    let last_read = rows.last().map(&cursor_of);
    let mut items = Vec::with_capacity(limit.min(rows.len()));
    let mut next = None;
    for row in rows {
        if !keep(&row) {
            continue;
        }
        if items.len() == limit {
            next = items.last().map(&cursor_of);
            break;
        }
        items.push(row);
    }
    if next.is_none() && full {
        next = last_read;
    }
    Page { items, next }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_other_lists_and_shapes() {
        for c in [
            Cursor::Numeric(ListKind::Products, 42),
            Cursor::Numeric(ListKind::Accounts, i64::MAX),
            Cursor::Text(ListKind::Orders, "order-1".into()),
            Cursor::Filtered(ListKind::Transfers, u64::MAX, "t-1".into()),
            Cursor::Filtered(ListKind::Transfers, 7, "x".repeat(64)),
            Cursor::Entry {
                digest: u64::MAX,
                at: -1,
                seq: 42,
            },
            Cursor::Movement {
                digest: 7,
                at: 1,
                seq: 0,
            },
        ] {
            let kind = c.kind();
            let text = c.to_string();
            assert!(text.len() <= kind.cursor_max_len());
            assert!(text.len() >= kind.cursor_min_len());
            assert_eq!(Cursor::parse(kind, &text), Ok(c));
        }
        let bad = |kind, raw: &str| Cursor::parse(kind, raw).is_err();
        assert!(bad(ListKind::Accounts, "p000000000000002a"));
        assert!(bad(ListKind::Products, "p2a"));
        assert!(bad(ListKind::Products, "p000000000000002A"));
        assert!(bad(ListKind::Products, "p+00000000000002a"));
        assert!(bad(ListKind::Orders, "o"));
        assert!(bad(ListKind::Orders, "oa b"));
        assert!(bad(ListKind::Orders, ""));
        assert!(bad(ListKind::Transfers, "t0000000000000007"));
        assert!(bad(ListKind::Transfers, "t000000000000000Ft-1"));
        assert!(bad(ListKind::Transfers, "t00000000000000é7t-1"));
        assert!(bad(ListKind::Transfers, "t0000000000000007t 1"));
        assert!(bad(ListKind::Transfers, "o0000000000000007t-1"));
        assert!(bad(ListKind::Orders, "t0000000000000007t-1"));
        assert!(bad(ListKind::Entries, "t0000000000000007t-1"));
        assert!(bad(ListKind::Entries, &format!("e{}", "0".repeat(47))));
        assert!(bad(ListKind::Entries, &format!("e{}", "A".repeat(48))));
        assert!(bad(ListKind::Movements, &format!("e{}", "0".repeat(48))));
        assert!(bad(ListKind::Entries, &format!("m{}", "0".repeat(48))));
        // Past every id: valid, an empty page.
        assert_eq!(
            Cursor::parse(ListKind::Products, "pffffffffffffffff"),
            Ok(Cursor::Numeric(ListKind::Products, i64::MAX))
        );
    }

    #[test]
    fn limits_are_bounded() {
        assert!(PageLimit::new(0).is_err());
        assert!(PageLimit::new(-1).is_err());
        assert!(PageLimit::new(i64::from(MAX_PAGE_LIMIT) + 1).is_err());
        assert_eq!(PageLimit::new(1).map(PageLimit::get), Ok(1));
        assert_eq!(PageLimit::default().get(), DEFAULT_PAGE_LIMIT);
    }

    #[test]
    fn a_page_stops_at_its_limit_or_its_read_bound() {
        let cursor = |n: &i64| Cursor::Numeric(ListKind::Products, *n);
        let limit = PageLimit::new(2).expect("limit");
        // One more row than the limit was read: a cursor after the second.
        let page = paginate(vec![1, 2, 3], limit, 3, |_| true, cursor);
        assert_eq!(page.items, [1, 2]);
        assert_eq!(page.next, Some(cursor(&2)));
        // The end.
        let page = paginate(vec![1, 2], limit, 3, |_| true, cursor);
        assert_eq!(page.next, None);
        // Filtered, read bound reached with one match: go on after the last row read.
        let page = paginate(vec![1, 2, 3, 4], limit, 4, |n| *n == 2, cursor);
        assert_eq!(page.items, [2]);
        assert_eq!(page.next, Some(cursor(&4)));
    }
}
