//! The dialect: how a statement is written for the schema's layout, decided once.
//!
//! Most statements read the same on one PostgreSQL and on a Citus coordinator. Where Citus needs
//! its own form (it refuses a `FOR UPDATE` spanning shards and a VOLATILE function in an UPDATE
//! of a distributed table, and routes a multi-row `VALUES` per shard where it runs an
//! `INSERT … SELECT` through the coordinator), the statement is a named pair ([`Sql::pair`]),
//! or a keyed pair ([`Sql::per_key`]) whose Citus form takes one distribution value per
//! statement, issued in ascending order (the global lock order, across workers). The aggregates
//! declare their statements as [`Sql`] values in their `sql` module; the [`Dialect`] resolved
//! when the store is built picks the text; [`Tx`] runs it. So the layout is looked at here, in
//! one place, and in the few data-access functions whose Citus form takes extra steps (routers),
//! never in a flow or a strategy.

use std::sync::Arc;

use deadpool_postgres::Client;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use crate::error::Error;
use crate::store::journal::{Cause, Journal, NewMovement};
use crate::store::outbox::{NewEvent, Outbox};
use crate::store::schema::Layout;

/// A statement's text for each layout.
#[derive(Debug, Clone, Copy)]
pub struct Sql {
    single: &'static str,
    citus: &'static str,
    /// The Citus form takes one key (`$1`, a scalar) per statement where the single-node form
    /// takes them all (`$1`, an array): see [`Tx::query_keys`].
    citus_per_key: bool,
}

impl Sql {
    /// The same text on both layouts.
    pub const fn same(text: &'static str) -> Sql {
        Sql {
            single: text,
            citus: text,
            citus_per_key: false,
        }
    }

    /// Its own text on Citus, taking the same parameters.
    pub const fn pair(single: &'static str, citus: &'static str) -> Sql {
        Sql {
            single,
            citus,
            citus_per_key: false,
        }
    }

    /// A keyed statement: `single` takes every key as an array in `$1`; `citus` takes one key
    /// in `$1` and is issued once per key, in the order given. The other parameters (`$2`…)
    /// are the same for both.
    pub const fn per_key(single: &'static str, citus: &'static str) -> Sql {
        Sql {
            single,
            citus,
            citus_per_key: true,
        }
    }

    /// A setting only Citus needs (a `SET LOCAL` for its executor): nothing is sent on one node
    /// ([`Tx::batch`] skips an empty text).
    pub const fn citus_only(citus: &'static str) -> Sql {
        Sql {
            single: "",
            citus,
            citus_per_key: false,
        }
    }

    /// The single-node text (tests and documentation).
    pub const fn single(&self) -> &'static str {
        self.single
    }

    /// The Citus text (tests and documentation).
    pub const fn citus(&self) -> &'static str {
        self.citus
    }
}

/// The schema's layout as the statements see it: resolved once, when the store is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialect {
    layout: Layout,
}

impl Dialect {
    pub const fn of(layout: Layout) -> Dialect {
        Dialect { layout }
    }

    pub const fn layout(self) -> Layout {
        self.layout
    }

    /// Whether products may be stocked per location and take backorders in this layout: their
    /// paths lock many products' rows per statement and are built for one node only, so on
    /// Citus their entry points refuse before anything is read or written.
    pub fn offers_locations_and_backorders(self) -> bool {
        self.layout == Layout::Single
    }

    /// True on a Citus coordinator: for the data-access functions whose Citus form takes extra
    /// steps (routers). Flows and strategies never ask.
    pub fn is_citus(self) -> bool {
        self.layout == Layout::Citus
    }

    /// The text of `sql` in this dialect.
    pub const fn text(self, sql: &Sql) -> &'static str {
        match self.layout {
            Layout::Single => sql.single,
            Layout::Citus => sql.citus,
        }
    }

    fn per_key(self, sql: &Sql) -> bool {
        self.layout == Layout::Citus && sql.citus_per_key
    }
}

/// A statement parameter.
pub type Param<'p> = &'p (dyn ToSql + Sync);

/// A connection inside a transaction (or a plain read), with the dialect its statements are
/// written in and, in a write transaction, its outbox. Every statement of the aggregates goes
/// through here, as an [`Sql`].
#[derive(Clone)]
pub struct Tx<'a> {
    client: &'a Client,
    dialect: Dialect,
    /// `None`: a read, or a store whose events are off.
    outbox: Option<Arc<Outbox>>,
    /// The stock journal: every write transaction has one (movements are not optional, unlike
    /// events); `None` for a read.
    journal: Option<Arc<Journal>>,
}

/// What a write transaction needs of its store, captured before the transaction starts (the
/// bodies run on a connection, not the store): the dialect, and whether events are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Writer {
    pub dialect: Dialect,
    pub events: bool,
}

impl<'a> Tx<'a> {
    /// A connection that only reads (or writes nothing that makes an event).
    pub fn new(client: &'a Client, dialect: Dialect) -> Self {
        Tx {
            client,
            dialect,
            outbox: None,
            journal: None,
        }
    }

    /// A write transaction's connection, with an outbox when the store writes events.
    pub fn writing(client: &'a Client, writer: Writer) -> Self {
        Tx {
            client,
            dialect: writer.dialect,
            outbox: writer.events.then(Arc::default),
            journal: Some(Arc::default()),
        }
    }

    /// Whether this transaction records events (a caller may skip building them otherwise).
    pub fn records_events(&self) -> bool {
        self.outbox.is_some()
    }

    /// Records an event of this transaction (appended with its COMMIT: [`Tx::take_events`]).
    pub fn emit(&self, event: NewEvent) {
        if let Some(outbox) = &self.outbox {
            outbox.push(event);
        }
    }

    /// The events recorded so far, for `write_tx!` to hand to the COMMIT (which appends them in
    /// the same round trip).
    pub fn take_events(&self) -> Vec<NewEvent> {
        self.outbox.as_ref().map(|o| o.take()).unwrap_or_default()
    }

    /// The cause of this transaction's next stock writes (see [`crate::store::journal`]).
    pub fn cause(&self, cause: Cause) {
        if let Some(j) = &self.journal {
            j.cause(cause);
        }
    }

    /// A batch's causes, per product (see [`Journal::cause_orders`]).
    pub fn cause_orders<'o>(
        &self,
        kind: &'static str,
        pairs: impl IntoIterator<Item = (i64, &'o str)>,
    ) {
        if let Some(j) = &self.journal {
            j.cause_orders(kind, pairs);
        }
    }

    /// The journal of a write transaction (`None`: a read, which writes no stock).
    pub fn journal(&self) -> Option<&Journal> {
        self.journal.as_deref()
    }

    /// What `write_tx!` hands to the COMMIT: the events, the stock movements and the layout.
    pub fn take_appended(&self) -> (Vec<NewEvent>, Vec<NewMovement>, bool) {
        let moves = self.journal.as_ref().map(|j| j.take()).unwrap_or_default();
        (self.take_events(), moves, self.dialect.is_citus())
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The connection itself, for the few statements built at run time (multi-row `VALUES`
    /// from [`crate::store::values`]) and for the lab's exhibits.
    pub fn client(&self) -> &'a Client {
        self.client
    }

    /// The prepared statement of `sql` in this dialect (cached per connection).
    pub async fn prepare(&self, sql: &Sql) -> Result<Statement, Error> {
        Ok(self.client.prepare_cached(self.dialect.text(sql)).await?)
    }

    pub async fn query(&self, sql: &Sql, params: &[Param<'_>]) -> Result<Vec<Row>, Error> {
        let stmt = self.prepare(sql).await?;
        Ok(self.client.query(&stmt, params).await?)
    }

    pub async fn query_opt(&self, sql: &Sql, params: &[Param<'_>]) -> Result<Option<Row>, Error> {
        let stmt = self.prepare(sql).await?;
        Ok(self.client.query_opt(&stmt, params).await?)
    }

    pub async fn query_one(&self, sql: &Sql, params: &[Param<'_>]) -> Result<Row, Error> {
        let stmt = self.prepare(sql).await?;
        Ok(self.client.query_one(&stmt, params).await?)
    }

    pub async fn execute(&self, sql: &Sql, params: &[Param<'_>]) -> Result<u64, Error> {
        let stmt = self.prepare(sql).await?;
        Ok(self.client.execute(&stmt, params).await?)
    }

    /// A statement without parameters, sent as a simple query (settings such as `SET LOCAL`);
    /// nothing at all when this dialect's text is empty ([`Sql::citus_only`]).
    pub async fn batch(&self, sql: &Sql) -> Result<(), Error> {
        let text = self.dialect.text(sql);
        if text.is_empty() {
            return Ok(());
        }
        Ok(self.client.batch_execute(text).await?)
    }

    /// A keyed statement ([`Sql::per_key`]) over `keys` (ascending, distinct: the lock order):
    /// one statement with the keys as an array, or on Citus one statement per key, each
    /// awaited before the next, so each locks one shard's rows in the global order. `rest` are
    /// the parameters after the key. The rows come back in key order.
    pub async fn query_keys<K: ToSql + Sync>(
        &self,
        sql: &Sql,
        keys: &[K],
        rest: &[Param<'_>],
    ) -> Result<Vec<Row>, Error> {
        let stmt = self.prepare(sql).await?;
        if !self.dialect.per_key(sql) {
            let params = with_first(&keys, rest);
            return Ok(self.client.query(&stmt, &params).await?);
        }
        let mut rows = Vec::with_capacity(keys.len());
        for key in keys {
            let params = with_first(key, rest);
            rows.extend(self.client.query(&stmt, &params).await?);
        }
        Ok(rows)
    }

    /// [`Tx::query_keys`] for a write: the rows it changed in all.
    pub async fn execute_keys<K: ToSql + Sync>(
        &self,
        sql: &Sql,
        keys: &[K],
        rest: &[Param<'_>],
    ) -> Result<u64, Error> {
        let stmt = self.prepare(sql).await?;
        if !self.dialect.per_key(sql) {
            let params = with_first(&keys, rest);
            return Ok(self.client.execute(&stmt, &params).await?);
        }
        let mut changed = 0;
        for key in keys {
            let params = with_first(key, rest);
            changed += self.client.execute(&stmt, &params).await?;
        }
        Ok(changed)
    }
}

fn with_first<'p>(first: Param<'p>, rest: &[Param<'p>]) -> Vec<Param<'p>> {
    let mut params = Vec::with_capacity(rest.len() + 1);
    params.push(first);
    params.extend_from_slice(rest);
    params
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYED: Sql = Sql::per_key(
        "SELECT 1 FROM t WHERE k = ANY($1) ORDER BY k FOR UPDATE",
        "SELECT 1 FROM t WHERE k = $1 FOR UPDATE",
    );

    #[test]
    fn the_dialect_picks_each_form() {
        let single = Dialect::of(Layout::Single);
        let citus = Dialect::of(Layout::Citus);
        assert_eq!(single.text(&KEYED), KEYED.single());
        assert_eq!(citus.text(&KEYED), KEYED.citus());
        assert!(!single.per_key(&KEYED) && citus.per_key(&KEYED));
        let same = Sql::same("SELECT 1");
        assert_eq!(single.text(&same), citus.text(&same));
        assert!(!citus.per_key(&same));
    }
}
