//! The event feed: every change saldo decided, in an order a reader can follow with a cursor
//! without ever missing an event or seeing one twice, each stream's events in position order.
//!
//! Events are written by the transactions that make the changes
//! ([`crate::store::outbox`]); they commit in an order that is not the order their ids were
//! taken in, so "ids above the last one I saw" skips events for good (the classic outbox bug;
//! `saldo race events-follow` shows it). Here a sequencer ([`sequencer`]) puts events in the
//! feed only once every transaction that could still write below them has ended (the oldest
//! transaction still running bounds them: its snapshot's `xmin`), numbering them `seq` 1, 2, …
//! in one serialized pass at a time, and holds back an event until its stream's previous one is
//! in the feed (a transaction can take its id before another that then commits first). A reader
//! ([`feed::read`]) follows `seq`: it only ever grows at the end.
//!
//! - [`feed`]: reading the feed (a page after a [`Cursor`], filtered), its end, retention;
//! - [`sequencer`]: one pass of the sequencer (a pure decision, and the transaction around it);
//! - [`model`]: the cursor, events, filters and pages a reader handles.

pub mod feed;
pub mod model;
pub mod sequencer;

pub use feed::{end, lag, prune, read, DEFAULT_RETENTION, MAX_PAGE};
pub use model::{
    known_types, parse_stream, parse_types, Cursor, Event, Filter, Page, MAX_FILTER_TYPES,
};
