//! The operator's side of webhooks: create (bounded count, URL and types checked, the target's
//! addresses checked, starting at the feed's end unless told otherwise), list, get, delete,
//! resume a failing one, and read a subscription's delivery log (newest first).

use deadpool_postgres::Client;
use uuid::Uuid;

use crate::domain::InputError;
use crate::error::Error;
use crate::events::{self, Cursor};
use crate::operation::Operation;
use crate::store::handle::Store;
use crate::store::retry::{checkout, in_transaction};

use super::{
    subscription, target, Delivery, NewSubscription, Subscription, COLUMNS, MAX_DELIVERIES_PAGE,
    MAX_SUBSCRIPTIONS,
};

/// Creates a subscription (see the module header). `allow_private` lets the target resolve to
/// loopback and private addresses; `key_fingerprint` is the service's webhook key's, which must
/// be the database's ([`super::lease::agree_on_key`]).
pub async fn create(
    store: &Store,
    new: NewSubscription,
    allow_private: bool,
    key_fingerprint: &str,
) -> Result<Subscription, Error> {
    let url = super::validate(&new.url, &new.types)?;
    target::check_url(&url, allow_private).await?;
    let end = events::end(store).await?;
    let start = match new.after {
        Some(after) if after > end => {
            return Err(InputError::CursorInvalid { list: "events" }.into())
        }
        Some(after) => after,
        None => end,
    };
    let id = Uuid::new_v4();
    let url = new.url;
    let mut types = new.types;
    types.sort_unstable();
    types.dedup();
    let fingerprint = key_fingerprint.to_owned();
    in_transaction(&store.pool, &store.tx, Operation::Webhooks, move |client| {
        let (url, types, fingerprint) = (url.clone(), types.clone(), fingerprint.clone());
        crate::tx_body!(client => insert(client, id, url, types, start, fingerprint))
    })
    .await
}

async fn insert(
    client: &Client,
    id: Uuid,
    url: String,
    types: Vec<String>,
    start: Cursor,
    fingerprint: String,
) -> Result<Subscription, Error> {
    if !super::lease::agree_on_key(client, &fingerprint).await? {
        return Err(Error::WebhookKeyMismatch);
    }
    // Two creations at once must not both see 99: the count and the insert are serialised.
    client
        .batch_execute("LOCK TABLE webhooks IN SHARE ROW EXCLUSIVE MODE")
        .await?;
    let pruned: i64 = client
        .query_one("SELECT pruned_seq FROM feed_state", &[])
        .await?
        .try_get(0)?;
    if start < Cursor::at(pruned) {
        return Err(Error::CursorExpired {
            cursor: start.to_string(),
        });
    }
    let count: i64 = client
        .query_one("SELECT count(*) FROM webhooks", &[])
        .await?
        .try_get(0)?;
    if count >= MAX_SUBSCRIPTIONS as i64 {
        return Err(Error::TooManyWebhooks {
            max: MAX_SUBSCRIPTIONS,
        });
    }
    let sql = format!(
        "INSERT INTO webhooks (id, url, types, cursor_seq) VALUES ($1, $2, $3, $4) \
         RETURNING {COLUMNS}"
    );
    let row = client
        .query_one(&sql, &[&id, &url, &types, &start.seq()])
        .await?;
    subscription(&row)
}

/// Every subscription, oldest first (at most [`MAX_SUBSCRIPTIONS`]).
pub async fn list(store: &Store) -> Result<Vec<Subscription>, Error> {
    let client = checkout(&store.pool, Operation::Webhooks).await?;
    let sql = format!("SELECT {COLUMNS} FROM webhooks ORDER BY created_at, id LIMIT $1");
    let rows = client.query(&sql, &[&(MAX_SUBSCRIPTIONS as i64)]).await?;
    rows.iter().map(subscription).collect()
}

/// One subscription.
pub async fn get(store: &Store, id: Uuid) -> Result<Subscription, Error> {
    let client = checkout(&store.pool, Operation::Webhooks).await?;
    let sql = format!("SELECT {COLUMNS} FROM webhooks WHERE id = $1");
    match client.query_opt(&sql, &[&id]).await? {
        Some(row) => subscription(&row),
        None => Err(Error::UnknownWebhook(id)),
    }
}

/// Deletes a subscription and its log. A batch in flight may still arrive once.
pub async fn delete(store: &Store, id: Uuid) -> Result<(), Error> {
    let client = checkout(&store.pool, Operation::Webhooks).await?;
    let deleted = client
        .execute("DELETE FROM webhooks WHERE id = $1", &[&id])
        .await?;
    if deleted == 0 {
        return Err(Error::UnknownWebhook(id));
    }
    Ok(())
}

/// Puts a subscription back to `active` with its attempts reset, due now (a no-op on an active
/// one, apart from making it due now).
pub async fn resume(store: &Store, id: Uuid) -> Result<Subscription, Error> {
    let client = checkout(&store.pool, Operation::Webhooks).await?;
    let sql = format!(
        "UPDATE webhooks SET status = 'active', attempts = 0, next_attempt_at = now() \
          WHERE id = $1 RETURNING {COLUMNS}"
    );
    match client.query_opt(&sql, &[&id]).await? {
        Some(row) => subscription(&row),
        None => Err(Error::UnknownWebhook(id)),
    }
}

/// A subscription's delivery log, newest first; `limit` clamped to 1..=[`MAX_DELIVERIES_PAGE`].
pub async fn deliveries(store: &Store, id: Uuid, limit: usize) -> Result<Vec<Delivery>, Error> {
    let client = checkout(&store.pool, Operation::Webhooks).await?;
    if client
        .query_opt("SELECT 1 FROM webhooks WHERE id = $1", &[&id])
        .await?
        .is_none()
    {
        return Err(Error::UnknownWebhook(id));
    }
    let limit = limit.clamp(1, MAX_DELIVERIES_PAGE) as i64;
    let rows = client
        .query(
            "SELECT id, at, first_seq, last_seq, events, attempt, outcome, http_status, \
                    duration_ms \
               FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY n DESC LIMIT $2",
            &[&id, &limit],
        )
        .await?;
    rows.iter()
        .map(|row| {
            Ok(Delivery {
                id: row.try_get("id")?,
                at: row.try_get("at")?,
                first_cursor: Cursor::at(row.try_get("first_seq")?),
                last_cursor: Cursor::at(row.try_get("last_seq")?),
                events: row.try_get("events")?,
                attempt: row.try_get("attempt")?,
                outcome: row.try_get("outcome")?,
                http_status: row.try_get("http_status")?,
                duration_ms: row.try_get("duration_ms")?,
            })
        })
        .collect()
}
