//! The delivery worker's state in the database: a subscription is claimed with a lease
//! (`leased_by`, `leased_until`; `FOR UPDATE SKIP LOCKED`, so two workers never claim the same
//! one), renewed while it is delivered, and every write that moves it (cursor, attempts, status)
//! is conditional on still holding that lease. A worker that stalls past its lease loses it; the
//! next holder starts from the cursor, so a batch is sent again at worst (at least once), never
//! skipped, and never sent by two holders at once while both hold leases.
//!
//! Also the worker's gauges: how many subscriptions are failing and the age of the oldest feed
//! event an active or failing subscription has not received.

use std::time::Duration;

use deadpool_postgres::Client;
use uuid::Uuid;

use crate::error::Error;
use crate::events::{self, Cursor, Event, Filter};
use crate::operation::Operation;
use crate::store::handle::Store;
use crate::store::retry::{checkout, in_transaction};
use crate::telemetry;

use super::{clip, KEEP_DELIVERIES, MAX_BATCH};

/// A subscription this worker holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    pub id: Uuid,
    /// The worker holding it.
    pub holder: Uuid,
    pub url: String,
    pub types: Vec<String>,
    pub cursor: Cursor,
    /// Failed attempts of the batch now due.
    pub attempts: i32,
}

/// The next events a lease has to deliver, and the cursor after them.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    pub events: Vec<Event>,
    /// Where the cursor goes once this batch is delivered (past filtered-out events too).
    pub next: Cursor,
}

/// One delivery attempt, as the log keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub delivery_id: Uuid,
    pub first: Cursor,
    pub last: Cursor,
    pub events: i32,
    /// `ok`, `http_status`, `timeout`, `connect`, `redirect`, `target_refused`, `error`.
    pub outcome: &'static str,
    pub http_status: Option<i32>,
    pub duration: Duration,
    /// The failure, for the subscription's `last_error` (never a secret or a URL's query).
    pub error: Option<String>,
}

/// After a failed attempt: retried later, or out of attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    RetryIn(Duration),
    Failing,
    /// The lease was gone: nothing recorded on the subscription.
    LeaseLost,
}

const CLAIM: &str = "UPDATE webhooks w \
        SET leased_by = $1, leased_until = now() + make_interval(secs => $2) \
      WHERE w.id IN (SELECT id FROM webhooks \
                      WHERE status = 'active' AND leased_until < now() \
                        AND next_attempt_at <= now() \
                        AND cursor_seq < (SELECT last_seq FROM feed_state) \
                      ORDER BY next_attempt_at, id LIMIT $3 FOR UPDATE SKIP LOCKED) \
        AND w.leased_until < now() \
  RETURNING w.id, w.url, w.types, w.cursor_seq, w.attempts";

/// Records `fingerprint` as the database's webhook key fingerprint when none is recorded;
/// answers whether the recorded one is `fingerprint`.
pub async fn agree_on_key(client: &Client, fingerprint: &str) -> Result<bool, Error> {
    client
        .execute(
            "INSERT INTO webhook_key (fingerprint) VALUES ($1) ON CONFLICT (only_row) DO NOTHING",
            &[&fingerprint],
        )
        .await?;
    let recorded: String = client
        .query_one("SELECT fingerprint FROM webhook_key", &[])
        .await?
        .try_get(0)?;
    Ok(recorded == fingerprint)
}

/// [`agree_on_key`] on a connection of its own.
pub async fn key_agrees(store: &Store, fingerprint: &str) -> Result<bool, Error> {
    let client = checkout(&store.pool, Operation::WebhookDelivery).await?;
    agree_on_key(&client, fingerprint).await
}

/// Claims up to `max` due, unleased, active subscriptions that have feed events after their
/// cursor, for `holder`, for `lease`; the longest waiting first (a released subscription goes
/// to the back: [`release`]). Runs a sequencer pass first, so the feed's end is current.
pub async fn claim(
    store: &Store,
    holder: Uuid,
    lease: Duration,
    max: usize,
) -> Result<Vec<Lease>, Error> {
    if max == 0 {
        return Ok(Vec::new());
    }
    events::end(store).await?;
    let client = checkout(&store.pool, Operation::WebhookDelivery).await?;
    let rows = client
        .query(CLAIM, &[&holder, &lease.as_secs_f64(), &(max as i64)])
        .await?;
    rows.iter()
        .map(|row| {
            Ok(Lease {
                id: row.try_get("id")?,
                holder,
                url: row.try_get("url")?,
                types: row.try_get("types")?,
                cursor: Cursor::at(row.try_get("cursor_seq")?),
                attempts: row.try_get("attempts")?,
            })
        })
        .collect()
}

/// Extends a held lease by `lease` from now; false when it is no longer held.
pub async fn renew(store: &Store, held: &Lease, lease: Duration) -> Result<bool, Error> {
    let client = checkout(&store.pool, Operation::WebhookDelivery).await?;
    let n = client
        .execute(
            "UPDATE webhooks SET leased_until = now() + make_interval(secs => $3) \
              WHERE id = $1 AND leased_by = $2 AND leased_until > now()",
            &[&held.id, &held.holder, &lease.as_secs_f64()],
        )
        .await?;
    Ok(n == 1)
}

/// Gives a lease back (another worker may claim the subscription at once); it goes to the back
/// of the claim order, so every subscription gets its turn.
pub async fn release(store: &Store, held: &Lease) -> Result<(), Error> {
    let client = checkout(&store.pool, Operation::WebhookDelivery).await?;
    client
        .execute(
            "UPDATE webhooks SET leased_until = '-infinity', next_attempt_at = now() \
              WHERE id = $1 AND leased_by = $2 AND leased_until > now()",
            &[&held.id, &held.holder],
        )
        .await?;
    Ok(())
}

/// The next batch after the lease's cursor: at most [`MAX_BATCH`] events of its types.
pub async fn next_batch(store: &Store, held: &Lease) -> Result<Batch, Error> {
    let filter = Filter {
        types: held.types.clone(),
        stream: None,
    };
    let page = events::read(store, Some(held.cursor), MAX_BATCH, &filter).await?;
    let next = page.next.parse().map_err(Error::from)?;
    Ok(Batch {
        events: page.events,
        next,
    })
}

/// Moves the cursor past events the type filter passed over (nothing to deliver); false when
/// the lease is gone or the cursor moved meanwhile.
pub async fn skip(store: &Store, held: &Lease, to: Cursor) -> Result<bool, Error> {
    let client = checkout(&store.pool, Operation::WebhookDelivery).await?;
    let n = client
        .execute(
            "UPDATE webhooks SET cursor_seq = $4 \
              WHERE id = $1 AND leased_by = $2 AND leased_until > now() AND cursor_seq = $3",
            &[&held.id, &held.holder, &held.cursor.seq(), &to.seq()],
        )
        .await?;
    Ok(n == 1)
}

/// Records a delivered batch: the cursor moves to `to` (if the lease is still held and the
/// cursor where it was) and the attempt is logged. True when the cursor moved.
pub async fn delivered(
    store: &Store,
    held: &Lease,
    to: Cursor,
    attempt: &Attempt,
) -> Result<bool, Error> {
    let (held, attempt) = (held.clone(), attempt.clone());
    let moved = in_transaction(
        &store.pool,
        &store.tx,
        Operation::WebhookDelivery,
        move |client| {
            let (held, attempt) = (held.clone(), attempt.clone());
            crate::tx_body!(client => record_delivered(client, held, to, attempt))
        },
    )
    .await?;
    telemetry::webhook_delivery(true);
    Ok(moved)
}

async fn record_delivered(
    client: &Client,
    held: Lease,
    to: Cursor,
    attempt: Attempt,
) -> Result<bool, Error> {
    let n = client
        .execute(
            "UPDATE webhooks SET cursor_seq = $4, attempts = 0, last_error = NULL \
              WHERE id = $1 AND leased_by = $2 AND leased_until > now() AND cursor_seq = $3",
            &[&held.id, &held.holder, &held.cursor.seq(), &to.seq()],
        )
        .await?;
    log(client, &held, held.attempts + 1, &attempt).await?;
    Ok(n == 1)
}

/// Records a failed attempt: attempts + 1, then either due again after `backoff(attempts)` or,
/// at `max_attempts`, `failing`; the lease is given back; the attempt is logged.
pub async fn failed(
    store: &Store,
    held: &Lease,
    attempt: &Attempt,
    max_attempts: i32,
    backoff: Duration,
) -> Result<AfterFailure, Error> {
    let (held, attempt) = (held.clone(), attempt.clone());
    let after = in_transaction(
        &store.pool,
        &store.tx,
        Operation::WebhookDelivery,
        move |client| {
            let (held, attempt) = (held.clone(), attempt.clone());
            crate::tx_body!(client => record_failed(client, held, attempt, max_attempts, backoff))
        },
    )
    .await?;
    telemetry::webhook_delivery(false);
    Ok(after)
}

async fn record_failed(
    client: &Client,
    held: Lease,
    attempt: Attempt,
    max_attempts: i32,
    backoff: Duration,
) -> Result<AfterFailure, Error> {
    let error = attempt.error.as_deref().map(clip);
    let row = client
        .query_opt(
            "UPDATE webhooks \
                SET attempts = attempts + 1, last_error = $3, leased_until = '-infinity', \
                    status = CASE WHEN attempts + 1 >= $4 THEN 'failing' ELSE status END, \
                    next_attempt_at = now() + make_interval(secs => $5) \
              WHERE id = $1 AND leased_by = $2 AND leased_until > now() \
          RETURNING attempts, status",
            &[
                &held.id,
                &held.holder,
                &error,
                &max_attempts,
                &backoff.as_secs_f64(),
            ],
        )
        .await?;
    log(client, &held, held.attempts + 1, &attempt).await?;
    let Some(row) = row else {
        return Ok(AfterFailure::LeaseLost);
    };
    let status: String = row.try_get("status")?;
    Ok(if status == "failing" {
        AfterFailure::Failing
    } else {
        AfterFailure::RetryIn(backoff)
    })
}

/// Logs one attempt and keeps only the newest [`KEEP_DELIVERIES`] of the subscription (a
/// deleted subscription logs nothing).
async fn log(client: &Client, held: &Lease, number: i32, a: &Attempt) -> Result<(), Error> {
    let ms = i64::try_from(a.duration.as_millis()).unwrap_or(i64::MAX);
    client
        .execute(
            "INSERT INTO webhook_deliveries \
                 (webhook_id, id, first_seq, last_seq, events, attempt, outcome, http_status, \
                  duration_ms) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9 WHERE EXISTS \
                 (SELECT 1 FROM webhooks WHERE id = $1)",
            &[
                &held.id,
                &a.delivery_id,
                &a.first.seq(),
                &a.last.seq(),
                &a.events,
                &number,
                &a.outcome,
                &a.http_status,
                &ms,
            ],
        )
        .await?;
    client
        .execute(
            "DELETE FROM webhook_deliveries WHERE webhook_id = $1 AND n <= \
                 (SELECT n FROM webhook_deliveries WHERE webhook_id = $1 \
                   ORDER BY n DESC OFFSET $2 LIMIT 1)",
            &[&held.id, &KEEP_DELIVERIES],
        )
        .await?;
    Ok(())
}

/// Feed rows the oldest-undelivered gauge looks at per subscription, at most: a subscription
/// to a rare type whose next event is further away is counted as caught up (the worker moves
/// its cursor past what its filter passes over anyway).
pub const OBSERVE_SCAN: i64 = 5_000;

/// Sets the gauges: subscriptions failing, and the age in seconds of the oldest feed event of
/// its types that an active or failing subscription has not received (0 when none waits).
pub async fn observe(store: &Store) -> Result<(i64, f64), Error> {
    let client = checkout(&store.pool, Operation::WebhookDelivery).await?;
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM webhooks WHERE status = 'failing') AS failing, \
                    COALESCE((SELECT extract(epoch FROM now() - min(oldest.at))::float8 \
                       FROM webhooks w CROSS JOIN LATERAL \
                            (SELECT e.at FROM (SELECT seq, xid, id FROM feed \
                                                 WHERE seq > w.cursor_seq \
                                                 ORDER BY seq LIMIT $1) f \
                                JOIN events e ON e.xid = f.xid AND e.id = f.id \
                              WHERE cardinality(w.types) = 0 OR e.type = ANY (w.types) \
                              ORDER BY f.seq LIMIT 1) oldest), 0) AS oldest_s",
            &[&OBSERVE_SCAN],
        )
        .await?;
    let failing: i64 = row.try_get("failing")?;
    let oldest: f64 = row.try_get("oldest_s")?;
    telemetry::webhook_gauges(failing, oldest.max(0.0));
    Ok((failing, oldest))
}
