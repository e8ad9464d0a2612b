//! Webhook subscriptions: who gets the event feed pushed to them, how far each has received it,
//! and the log of what was sent. The feed ([`crate::events`]) is the source: a subscription is a
//! URL, an optional set of event types and a cursor in the feed; a delivery worker (the service
//! owns the HTTP side) claims a subscription with a lease, sends the events after its cursor in
//! batches, and moves the cursor only after the receiver answered 2xx and only while it still
//! holds the lease. So delivery is at least once, in feed order, and two services on one database
//! never send one batch at the same time.
//!
//! - [`target`]: who may be sent to: URL rules and the address check (registration and connect);
//! - [`admin`]: create, list, get, delete, resume, and the delivery log;
//! - [`lease`]: the worker's side: claim, renew, read the next batch, record the outcome.
//!
//! No signing secret is stored here: the service derives each subscription's from its own key.

pub mod admin;
pub mod lease;
pub mod target;

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::domain::InputError;
use crate::events::Cursor;

/// Most subscriptions that may exist at once.
pub const MAX_SUBSCRIPTIONS: usize = 100;
/// Longest URL accepted, in bytes.
pub const MAX_URL_BYTES: usize = 2048;
/// Most event types one subscription may name.
pub const MAX_TYPES: usize = 32;
/// Most events in one delivery request: a few hundred KiB of JSON. At 100, a receiver fell
/// seconds behind the HTTP hot bench (BENCHMARKS.md, "What events cost").
pub const MAX_BATCH: usize = 500;
/// Delivery log rows kept per subscription (older ones are deleted when a new one is logged).
pub const KEEP_DELIVERIES: i64 = 1_000;
/// Most delivery log rows one read returns, and how many when the caller names no limit.
pub const MAX_DELIVERIES_PAGE: usize = 1_000;
pub const DEFAULT_DELIVERIES_PAGE: usize = 50;
/// Longest error text kept in the log and on the subscription.
pub const MAX_ERROR_CHARS: usize = 200;

/// The event types the feed carries: what a subscription may filter on (the feed's own list).
pub fn event_types() -> Vec<&'static str> {
    crate::events::known_types()
}

/// Whether deliveries are being attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Delivered as events arrive (retrying with backoff after a failure).
    Active,
    /// Its attempts ran out: nothing is sent until it is resumed.
    Failing,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Failing => "failing",
        }
    }

    fn parse(s: &str) -> Option<Status> {
        match s {
            "active" => Some(Status::Active),
            "failing" => Some(Status::Failing),
            _ => None,
        }
    }
}

/// One subscription as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Subscription {
    pub id: Uuid,
    pub url: String,
    /// Event types delivered; empty: every type.
    pub types: Vec<String>,
    pub status: Status,
    /// The last feed event delivered (or passed over by the type filter).
    pub cursor: Cursor,
    /// Failed attempts of the batch now due (0 after a success).
    pub attempts: i32,
    /// When the next attempt may start.
    pub next_attempt_at: DateTime<Utc>,
    /// The last failure, when the last attempt failed.
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// What a subscription is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSubscription {
    pub url: String,
    pub types: Vec<String>,
    /// Start after this feed position; `None`: at the feed's current end.
    pub after: Option<Cursor>,
}

/// One logged delivery attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub id: Uuid,
    pub at: DateTime<Utc>,
    /// The cursors of the batch's first and last events.
    pub first_cursor: Cursor,
    pub last_cursor: Cursor,
    pub events: i32,
    /// 1 for the first try of this batch, 2 for its first retry, …
    pub attempt: i32,
    /// `ok`, or what went wrong: `http_status`, `timeout`, `connect`, `redirect`,
    /// `target_refused`, `error`.
    pub outcome: String,
    pub http_status: Option<i32>,
    pub duration_ms: i64,
}

/// Checks a subscription's URL and types (not its target's addresses: see [`target`]).
pub fn validate(url: &str, types: &[String]) -> Result<url::Url, InputError> {
    let parsed = target::parse_url(url)?;
    if types.len() > MAX_TYPES {
        return Err(InputError::WebhookTooManyTypes { max: MAX_TYPES });
    }
    let known = event_types();
    if let Some(unknown) = types.iter().find(|t| !known.contains(&t.as_str())) {
        return Err(InputError::WebhookTypeUnknown(
            unknown.chars().take(64).collect(),
        ));
    }
    Ok(parsed)
}

/// Parses a subscription id.
pub fn parse_id(s: &str) -> Result<Uuid, InputError> {
    Uuid::parse_str(s).map_err(|_| InputError::WebhookIdInvalid(s.chars().take(64).collect()))
}

/// Cuts an error text to [`MAX_ERROR_CHARS`].
pub(crate) fn clip(text: &str) -> String {
    text.chars().take(MAX_ERROR_CHARS).collect()
}

fn subscription(row: &tokio_postgres::Row) -> Result<Subscription, crate::Error> {
    let status: String = row.try_get("status")?;
    Ok(Subscription {
        id: row.try_get("id")?,
        url: row.try_get("url")?,
        types: row.try_get("types")?,
        status: Status::parse(&status).ok_or_else(|| {
            crate::Error::invariant(format!(
                "webhook status {status:?} is not one the schema allows"
            ))
        })?,
        cursor: Cursor::at(row.try_get("cursor_seq")?),
        attempts: row.try_get("attempts")?,
        next_attempt_at: row.try_get("next_attempt_at")?,
        last_error: row.try_get("last_error")?,
        created_at: row.try_get("created_at")?,
    })
}

/// The columns [`subscription`] reads.
const COLUMNS: &str =
    "id, url, types, status, cursor_seq, attempts, next_attempt_at, last_error, created_at";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_must_be_known_and_few() {
        let url = "https://example.com/hook";
        assert!(validate(url, &[]).is_ok());
        assert!(validate(url, &["stock.changed".into()]).is_ok());
        assert_eq!(
            validate(url, &["nope".into()]),
            Err(InputError::WebhookTypeUnknown("nope".into()))
        );
        let many = vec!["stock.changed".to_owned(); MAX_TYPES + 1];
        assert!(validate(url, &many).is_err());
    }
}
