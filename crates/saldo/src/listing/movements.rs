//! A product's movements (migration V22): its stock statement, one page at a time.
//!
//! A page is the product's movements with `from <= at < to`, in (time, seq) order (the same
//! order as seq: a movement's time is taken under its stock row's lock), keyset-paged on
//! `(at, seq)`: one range scan of the `(product_id, at, seq)` index, whatever the journal's
//! size. Each movement's change is read beside it: the movement before it is seq - 1 (seqs are
//! the row's versions, gap-free), one primary-key probe per row; none before (the first movement
//! of a product, or its `opening`) is a change from zero. The cursor carries the last
//! movement's time and seq and a digest of the filters (the product and the range), like an
//! account's statement's ([`super::entries`]): a cursor of another statement, another list or
//! another shape is [`InputError::CursorInvalid`]. On Citus the page is routed to the product's
//! shard. Times are clamped like the entries' ([`entries::clamped`]).

use chrono::{DateTime, Utc};

use super::entries::{self, clamped, earliest};
use super::{paginate, Cursor, ListKind, Page, PageLimit};
use crate::domain::{InputError, ProductId};
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::movements::{MoveKind, Movement};
use crate::store::handle::Store;
use crate::store::retry::checkout;

/// One page: `$1` the product, `$2`/`$3` where it starts (time, seq: inclusive), `$4` the end
/// of the range (exclusive), `$5` the rows to read; the movement before each beside it, and a
/// row with no movement when the page is empty, so one statement also says whether the
/// product exists.
const PAGE: &str = "\
SELECT m.seq, m.kind, m.order_id, m.sale_id, m.return_id, m.move_id, m.available_after,
       m.reserved_after, m.backordered_after, m.at, p.available_after AS available_before,
       p.reserved_after AS reserved_before, p.backordered_after AS backordered_before
  FROM stock s
  LEFT JOIN LATERAL (
       SELECT seq, kind, order_id, sale_id, return_id, move_id, available_after, reserved_after,
              backordered_after, at
         FROM product_movements
        WHERE product_id = $1 AND (at, seq) >= ($2, $3) AND at < $4
        ORDER BY at, seq LIMIT $5) m ON true
  LEFT JOIN product_movements p ON p.product_id = $1 AND p.seq = m.seq - 1
 WHERE s.product_id = $1
 ORDER BY m.at, m.seq";

/// Which statement: the product, and the time range `from <= at < to` (each optional).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MovementFilter {
    product: ProductId,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
}

impl MovementFilter {
    /// The statement of `product` from `from` (inclusive) to `to` (exclusive), each
    /// [`clamped`]; `to` at or before `from` is an empty range.
    pub fn new(product: ProductId, from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>) -> Self {
        MovementFilter {
            product,
            from: from.map(clamped),
            to: to.map(clamped),
        }
    }

    pub fn product(&self) -> ProductId {
        self.product
    }

    /// What its cursors carry of it (see [`super::transfers::TransferFilter::digest`]).
    pub fn digest(&self) -> u64 {
        super::range_digest(b'm', self.product.get(), self.from, self.to)
    }
}

/// Just after [`entries::latest`]: the end of an open range.
fn end() -> DateTime<Utc> {
    entries::latest() + chrono::Duration::seconds(1)
}

/// Where a page starts: after the cursor's movement (its time, its seq + 1, inclusive), or at
/// `from`. A cursor's time outside the bounds is clamped to them.
fn start(filter: &MovementFilter, cursor: Option<&Cursor>) -> Result<(DateTime<Utc>, i64), Error> {
    let from = filter.from.unwrap_or_else(earliest);
    match cursor {
        // Seqs start at 0 (an opening at version 0).
        None => Ok((from, i64::MIN)),
        Some(Cursor::Movement { digest, at, seq }) if *digest == filter.digest() => {
            Ok(super::resume_after(*at, *seq, from, end()))
        }
        Some(_) => Err(InputError::CursorInvalid {
            list: ListKind::Movements.as_str(),
        }
        .into()),
    }
}

fn corrupt(what: &str) -> Error {
    Error::invariant(format!("a movement's {what} is not one the schema allows"))
}

/// A page of `filter`'s statement after `cursor`, oldest first; [`Error::UnknownProduct`] when
/// the product does not exist.
pub async fn movements(
    store: &Store,
    filter: &MovementFilter,
    limit: PageLimit,
    cursor: Option<&Cursor>,
) -> Result<Page<Movement>, Error> {
    let (from, seq) = start(filter, cursor)?;
    let to = filter.to.unwrap_or_else(end);
    let read_rows = limit.get() as usize + 1;
    let rows_i64 = i64::try_from(read_rows).unwrap_or(i64::MAX);
    let product = filter.product;
    let client = checkout(&store.pool, Operation::ListMovements).await?;
    let rows = client
        .query(PAGE, &[&product.get(), &from, &seq, &to, &rows_i64])
        .await?;
    if rows.is_empty() {
        return Err(Error::UnknownProduct(product));
    }
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let Some(seq) = row.try_get::<_, Option<i64>>("seq")? else {
            continue;
        };
        let after = |c: &str| row.try_get::<_, i32>(c);
        let before = |c: &str| row.try_get::<_, Option<i32>>(c).map(|v| v.unwrap_or(0));
        let (available, reserved, backordered) = (
            after("available_after")?,
            after("reserved_after")?,
            after("backordered_after")?,
        );
        let delta = |a: i32, b: i32| a.checked_sub(b).ok_or_else(|| corrupt("counters"));
        out.push(Movement {
            product,
            seq,
            kind: MoveKind::parse(&row.try_get::<_, String>("kind")?)
                .ok_or_else(|| corrupt("kind"))?,
            order_id: row.try_get("order_id")?,
            sale_id: row.try_get("sale_id")?,
            return_id: row.try_get("return_id")?,
            move_id: row.try_get("move_id")?,
            available_delta: delta(available, before("available_before")?)?,
            reserved_delta: delta(reserved, before("reserved_before")?)?,
            backordered_delta: delta(backordered, before("backordered_before")?)?,
            available_after: available,
            reserved_after: reserved,
            backordered_after: backordered,
            at: row.try_get("at")?,
        });
    }
    let digest = filter.digest();
    Ok(paginate(
        out,
        limit,
        read_rows,
        |_| true,
        |m| Cursor::Movement {
            digest,
            at: m.at.timestamp_micros(),
            seq: m.seq,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn product(n: i64) -> ProductId {
        ProductId::new(n).expect("product")
    }

    #[test]
    fn a_cursor_belongs_to_its_statement_only() {
        let mine = MovementFilter::new(product(1), None, None);
        let other = MovementFilter::new(product(2), None, None);
        let cursor = Cursor::Movement {
            digest: mine.digest(),
            at: 1_000_000,
            seq: 7,
        };
        let (at, seq) = start(&mine, Some(&cursor)).expect("mine");
        assert_eq!((at.timestamp_micros(), seq), (1_000_000, 8));
        assert!(start(&other, Some(&cursor)).is_err());
        // An account's statement cursor with the same digest is still another list's.
        let entry = Cursor::Entry {
            digest: mine.digest(),
            at: 1_000_000,
            seq: 7,
        };
        assert!(start(&mine, Some(&entry)).is_err());
        let far = Cursor::Movement {
            digest: mine.digest(),
            at: i64::MAX,
            seq: i64::MAX,
        };
        assert_eq!(start(&mine, Some(&far)).expect("far").0, end());
    }
}
