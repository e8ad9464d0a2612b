//! The stock journal of one write transaction (migration V22): the cause its flow named, the
//! movements its stock-row writes made, and their append, sent with the COMMIT.
//!
//! Every write of a product's stock row returns the row (its counters after the write and its
//! new `version`); the data-access function that ran it records one movement per row here,
//! numbered by that version (gap-free per product, under the row lock), with the cause the
//! flow set on the transaction before writing ([`Journal::cause`], or per product for a batch:
//! [`Journal::cause_orders`]). The movements leave with the events' INSERT and the COMMIT, in the
//! same round trip ([`crate::store::outbox::append_and_commit`]): the journal costs the hot path
//! no round trip. Nothing here knows stock: the kinds are the stock side's words, passed as
//! text.

use std::collections::HashMap;
use std::sync::Mutex;

use deadpool_postgres::Client;
use tokio_postgres::types::ToSql;
use tokio_postgres::Statement;

use crate::store::values::{Col, Values};

/// What made a stock write: its kind and the order, sale or return it belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cause {
    /// `reserve`, `confirm`, … (the stock side's vocabulary); empty: none named.
    pub kind: &'static str,
    pub order_id: Option<String>,
    pub sale_id: Option<String>,
    pub return_id: Option<String>,
    pub move_id: Option<String>,
}

impl Cause {
    pub fn new(kind: &'static str) -> Cause {
        Cause {
            kind,
            ..Cause::default()
        }
    }

    pub fn order(mut self, order: &str) -> Cause {
        self.order_id = Some(order.to_owned());
        self
    }

    pub fn sale(mut self, sale: &str) -> Cause {
        self.sale_id = Some(sale.to_owned());
        self
    }

    pub fn return_id(mut self, id: &str) -> Cause {
        self.return_id = Some(id.to_owned());
        self
    }

    pub fn move_id(mut self, id: &str) -> Cause {
        self.move_id = Some(id.to_owned());
        self
    }
}

/// A write's movement, to append: the product's row as the write left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMovement {
    pub product: i64,
    /// The row's version after the write.
    pub seq: i64,
    pub cause: Cause,
    pub available: i32,
    pub reserved: i32,
    pub backordered: i32,
}

/// The fallback kind of a write whose flow named no cause (a bug the tests look for).
pub const UNNAMED: &str = "other";

/// One transaction's cause and movements.
#[derive(Debug, Default)]
pub struct Journal {
    cause: Mutex<Cause>,
    per_product: Mutex<HashMap<i64, Cause>>,
    moves: Mutex<Vec<NewMovement>>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Journal {
    /// The cause of this transaction's next writes (until another is set).
    pub fn cause(&self, cause: Cause) {
        *locked(&self.cause) = cause;
    }

    /// A batch's causes: each product's writes are of `kind`, naming the order of `pairs`
    /// (product, order) that wrote it, or no order when several did.
    pub fn cause_orders<'o>(
        &self,
        kind: &'static str,
        pairs: impl IntoIterator<Item = (i64, &'o str)>,
    ) {
        let mut per_product = locked(&self.per_product);
        for (product, order) in pairs {
            let cause = per_product
                .entry(product)
                .or_insert_with(|| Cause::new(kind).order(order));
            if cause.order_id.as_deref() != Some(order) {
                cause.order_id = None;
            }
        }
    }

    /// Records the movement of a write of `product` that left these counters at `seq`.
    pub fn record(&self, product: i64, seq: i64, counters: (i32, i32, i32)) {
        let cause = locked(&self.per_product)
            .get(&product)
            .cloned()
            .unwrap_or_else(|| locked(&self.cause).clone());
        let cause = if cause.kind.is_empty() {
            Cause {
                kind: UNNAMED,
                ..cause
            }
        } else {
            cause
        };
        locked(&self.moves).push(NewMovement {
            product,
            seq,
            cause,
            available: counters.0,
            reserved: counters.1,
            backordered: counters.2,
        });
    }

    /// The movements recorded so far, handed to the COMMIT.
    pub(crate) fn take(&self) -> Vec<NewMovement> {
        std::mem::take(&mut *locked(&self.moves))
    }
}

/// One node: every movement in one statement.
const INSERT: &str = "INSERT INTO product_movements (product_id, seq, kind, order_id, sale_id, \
     return_id, move_id, available_after, reserved_after, backordered_after, at) \
     SELECT m.*, clock_timestamp() \
       FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], \
                   $7::text[], $8::int[], $9::int[], $10::int[]) \
            AS m(product_id, seq, kind, order_id, sale_id, return_id, move_id, available_after, \
                 reserved_after, backordered_after)";

/// Movement rows per Citus statement at most (10 parameters each).
const CITUS_CHUNK: usize = 100;

/// Citus: multi-row `VALUES`, each row routed to its product's shard (an `INSERT … SELECT`
/// would go through the coordinator); `clock_timestamp()` is the coordinator's.
static CITUS_INSERT: Values = Values::new(
    "INSERT INTO product_movements (product_id, seq, kind, order_id, sale_id, return_id, \
     move_id, available_after, reserved_after, backordered_after, at)",
    &[
        Col::cast("::bigint"),
        Col::cast("::bigint"),
        Col::cast("::text"),
        Col::cast("::text"),
        Col::cast("::text"),
        Col::cast("::text"),
        Col::cast("::text"),
        Col::cast("::int"),
        Col::cast("::int"),
        Col::wrapped("", "::int, clock_timestamp()"),
    ],
    "",
);

/// The movements' columns, one vector each.
pub(crate) struct Columns<'m> {
    products: Vec<i64>,
    seqs: Vec<i64>,
    kinds: Vec<&'static str>,
    orders: Vec<Option<&'m str>>,
    sales: Vec<Option<&'m str>>,
    returns: Vec<Option<&'m str>>,
    moves: Vec<Option<&'m str>>,
    available: Vec<i32>,
    reserved: Vec<i32>,
    backordered: Vec<i32>,
}

impl<'m> Columns<'m> {
    pub(crate) fn of(moves: &'m [NewMovement]) -> Self {
        Columns {
            products: moves.iter().map(|m| m.product).collect(),
            seqs: moves.iter().map(|m| m.seq).collect(),
            kinds: moves.iter().map(|m| m.cause.kind).collect(),
            orders: moves.iter().map(|m| m.cause.order_id.as_deref()).collect(),
            sales: moves.iter().map(|m| m.cause.sale_id.as_deref()).collect(),
            returns: moves.iter().map(|m| m.cause.return_id.as_deref()).collect(),
            moves: moves.iter().map(|m| m.cause.move_id.as_deref()).collect(),
            available: moves.iter().map(|m| m.available).collect(),
            reserved: moves.iter().map(|m| m.reserved).collect(),
            backordered: moves.iter().map(|m| m.backordered).collect(),
        }
    }

    fn row(&self, i: usize) -> [&(dyn ToSql + Sync); 10] {
        [
            &self.products[i],
            &self.seqs[i],
            &self.kinds[i],
            &self.orders[i],
            &self.sales[i],
            &self.returns[i],
            &self.moves[i],
            &self.available[i],
            &self.reserved[i],
            &self.backordered[i],
        ]
    }
}

/// The statements that append `moves` and their parameters, prepared before anything is sent:
/// the caller sends them in one pipeline with the COMMIT (a statement still being prepared when
/// the COMMIT leaves would run after it).
pub(crate) async fn prepare<'c>(
    client: &Client,
    citus: bool,
    columns: &'c Columns<'c>,
) -> Result<Vec<(Statement, Vec<&'c (dyn ToSql + Sync)>)>, tokio_postgres::Error> {
    let n = columns.products.len();
    if n == 0 {
        return Ok(Vec::new());
    }
    if !citus {
        let stmt = client.prepare_cached(INSERT).await?;
        let c = columns;
        let params: Vec<&(dyn ToSql + Sync)> = vec![
            &c.products,
            &c.seqs,
            &c.kinds,
            &c.orders,
            &c.sales,
            &c.returns,
            &c.moves,
            &c.available,
            &c.reserved,
            &c.backordered,
        ];
        return Ok(vec![(stmt, params)]);
    }
    let mut out = Vec::new();
    for start in (0..n).step_by(CITUS_CHUNK) {
        let end = (start + CITUS_CHUNK).min(n);
        // One statement text per chunk size: at most CITUS_CHUNK of them.
        let stmt = client
            .prepare_cached(&CITUS_INSERT.statement(end - start))
            .await?;
        let mut params = Vec::with_capacity(CITUS_INSERT.width() * (end - start));
        for i in start..end {
            params.extend_from_slice(&columns.row(i));
        }
        out.push((stmt, params));
    }
    Ok(out)
}
