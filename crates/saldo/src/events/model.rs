//! What a reader of the feed handles: the [`Cursor`], an [`Event`], a [`Filter`] and a
//! [`Page`], and the parsing of a filter's stream and types. A leaf of `events`: the feed and
//! the sequencer import it, it imports neither.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::InputError;
use crate::store::outbox::StreamType;

/// A position in the feed: the `seq` of the last event read. Opaque to callers (`e2.<seq>` in
/// hexadecimal); `None` where one is taken means the start of what is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cursor {
    seq: i64,
}

impl Cursor {
    pub(crate) fn at(seq: i64) -> Cursor {
        Cursor { seq }
    }

    pub(crate) fn seq(self) -> i64 {
        self.seq
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "e2.{:x}", self.seq)
    }
}

impl FromStr for Cursor {
    type Err = InputError;

    fn from_str(s: &str) -> Result<Cursor, InputError> {
        let invalid = || InputError::CursorInvalid { list: "events" };
        let hex = s.strip_prefix("e2.").ok_or_else(invalid)?;
        if hex.is_empty() || hex.len() > 15 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid());
        }
        let seq = i64::from_str_radix(hex, 16).map_err(|_| invalid())?;
        Ok(Cursor { seq })
    }
}

/// One event as a reader sees it (and as a webhook receiver written in Rust can parse it back).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// This event's own cursor: resume after it.
    pub cursor: String,
    /// Its number in the feed.
    pub seq: i64,
    /// The event's own id (unique; not its place in the feed).
    pub id: i64,
    #[serde(rename = "type")]
    pub kind: String,
    /// `product:42`, `order:o-1`, `sale:s-1`, `account:5`, `transfer:t-1`.
    pub stream: String,
    /// Its position in its stream: 1, 2, … without gaps (a product's follows its stock row's
    /// version).
    pub position: i64,
    pub at: DateTime<Utc>,
    /// The state after the change.
    pub data: Value,
}

/// Which events a read returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Event types (`stock.changed`, …); empty: every type.
    pub types: Vec<String>,
    /// One stream; `None`: every stream.
    pub stream: Option<(StreamType, String)>,
}

impl Filter {
    pub(crate) fn is_empty(&self) -> bool {
        self.types.is_empty() && self.stream.is_none()
    }

    pub(crate) fn matches(&self, kind: &str, stream_type: &str, stream_id: &str) -> bool {
        (self.types.is_empty() || self.types.iter().any(|t| t == kind))
            && self
                .stream
                .as_ref()
                .is_none_or(|(t, id)| t.as_str() == stream_type && id == stream_id)
    }
}

/// Most event types one [`Filter`] names.
pub const MAX_FILTER_TYPES: usize = 16;

/// Every event type the feed holds (the stock side's, then the ledger's): a filter naming
/// another is refused.
pub fn known_types() -> Vec<&'static str> {
    crate::stock::flows::order_events::STOCK_EVENT_TYPES
        .iter()
        .chain(crate::ledger::rows::events::LEDGER_EVENT_TYPES)
        .copied()
        .collect()
}

/// Parses the event types of a filter: each a known type (see [`known_types`]), at most
/// [`MAX_FILTER_TYPES`] of them (duplicates count); duplicates are dropped.
pub fn parse_types<'a>(raw: impl IntoIterator<Item = &'a str>) -> Result<Vec<String>, InputError> {
    let known = known_types();
    let mut types: Vec<String> = Vec::new();
    for (i, t) in raw.into_iter().enumerate() {
        if i == MAX_FILTER_TYPES {
            return Err(InputError::TooManyEventTypes {
                max: MAX_FILTER_TYPES,
            });
        }
        let t = t.trim();
        if !known.contains(&t) {
            return Err(InputError::EventTypeUnknown(
                t.chars().take(64).collect(),
                known.join(", "),
            ));
        }
        if !types.iter().any(|have| have == t) {
            types.push(t.to_owned());
        }
    }
    Ok(types)
}

/// Parses a stream name (`product:42`).
pub fn parse_stream(s: &str) -> Result<(StreamType, String), InputError> {
    let invalid = || InputError::StreamInvalid(s.chars().take(64).collect());
    let (kind, id) = s.split_once(':').ok_or_else(invalid)?;
    let kind = StreamType::parse(kind).ok_or_else(invalid)?;
    // Every stream id is a number or an id of the order/sale/transfer alphabet.
    if !crate::domain::valid_token(id) {
        return Err(invalid());
    }
    Ok((kind, id.to_owned()))
}

/// A page of the feed: the events, and where to read next (the same cursor when nothing new was
/// readable yet).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Page {
    pub events: Vec<Event>,
    pub next: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_what_it_wrote_and_nothing_else() {
        let c = Cursor { seq: 0x2f3 };
        assert_eq!(c.to_string(), "e2.2f3");
        assert_eq!("e2.2f3".parse::<Cursor>(), Ok(c));
        for bad in ["", "e2.", "e1.2f3", "e2.x", "e2.-1", "e2.1111111111111111"] {
            assert!(bad.parse::<Cursor>().is_err(), "{bad}");
        }
    }

    #[test]
    fn streams_are_kind_and_id() {
        assert_eq!(
            parse_stream("product:42"),
            Ok((StreamType::Product, "42".to_owned()))
        );
        assert!(parse_stream("nope:1").is_err());
        assert!(parse_stream("order:").is_err());
        assert!(parse_stream("order:a b").is_err());
        assert!(parse_stream(&format!("order:{}", "x".repeat(65))).is_err());
        assert_eq!(
            parse_stream("order:o-1:2"),
            Ok((StreamType::Order, "o-1:2".to_owned()))
        );
    }

    #[test]
    fn types_are_known_ones_deduplicated_and_bounded() {
        assert_eq!(
            parse_types(["stock.changed", "stock.changed", " sale.created"]),
            Ok(vec!["stock.changed".to_owned(), "sale.created".to_owned()])
        );
        assert!(matches!(
            parse_types(["stock.exploded"]),
            Err(InputError::EventTypeUnknown(..))
        ));
        assert!(parse_types(std::iter::empty()).expect("none").is_empty());
        assert!(matches!(
            parse_types(std::iter::repeat_n("sale.created", MAX_FILTER_TYPES + 1)),
            Err(InputError::TooManyEventTypes { .. })
        ));
    }
}
