//! The store: the database handle every operation of every aggregate runs on.

use deadpool_postgres::Pool;

use crate::store::dialect::{Dialect, Writer};
use crate::store::retry::TxOptions;
use crate::store::schema::Layout;

/// The database, the per-transaction settings every operation runs with, and the dialect of
/// the schema's layout: on [`Layout::Citus`] the operations take their locks one distribution
/// value at a time and write the routers (ARCHITECTURE.md, "On Citus").
#[derive(Clone)]
pub struct Store {
    pub pool: Pool,
    pub tx: TxOptions,
    dialect: Dialect,
    /// Whether write transactions append their events (on by default; the bench measures
    /// without them too).
    events: bool,
}

impl Store {
    /// A store on a single-node database ([`Layout::Single`]).
    pub fn new(pool: Pool, tx: TxOptions) -> Self {
        Store {
            pool,
            tx,
            dialect: Dialect::of(Layout::Single),
            events: true,
        }
    }

    /// The same store on a database of `layout` (what [`crate::store::db::migrate_to_serve`]
    /// returned): the dialect is resolved here, once.
    pub fn with_layout(mut self, layout: Layout) -> Self {
        self.dialect = Dialect::of(layout);
        self.tx.citus = layout == Layout::Citus;
        self
    }

    /// The schema's layout.
    pub fn layout(&self) -> Layout {
        self.dialect.layout()
    }

    /// How statements are written for this layout.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The same store writing no events (the bench's baseline; a service always writes them).
    pub fn without_events(mut self) -> Self {
        self.events = false;
        self
    }

    /// Whether write transactions append their events.
    pub fn writes_events(&self) -> bool {
        self.events
    }

    /// What a write transaction needs of the store.
    pub fn writer(&self) -> Writer {
        Writer {
            dialect: self.dialect,
            events: self.events,
        }
    }

    /// True on a Citus coordinator.
    pub fn is_citus(&self) -> bool {
        self.layout() == Layout::Citus
    }
}
