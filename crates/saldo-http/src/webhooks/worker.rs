//! The delivery worker `saldo serve` runs: every poll interval it claims due subscriptions
//! (leases, [`saldo::webhooks::lease`]; at most [`MAX_IN_FLIGHT`] at once per service) and, for
//! each, sends the feed after its cursor in batches of at most 500 events and 1 MiB ([`body`]),
//! one batch at a time: the next batch is read only after the previous one was answered 2xx
//! and its cursor moved. A failure gives the lease back with the attempt counted and a
//! full-jitter backoff; at the last attempt the subscription turns `failing`. It stops with the
//! service: no new batch starts after the stop signal, and a request in flight is waited for
//! (bounded).
//!
//! The poll interval bounds how late an idle subscription notices new events, never how fast a
//! busy one drains: a delivery that used up its batches while still behind claims again at
//! once, and one that failed claims again when its backoff ends (if that comes before the next
//! poll). A receiver thus keeps up with a write rate far above one lease's batches per poll.
//!
//! What is logged: the subscription id, the URL without its query, the outcome. Never the
//! secret, the signature or a body.

use std::sync::Arc;
use std::time::Duration;

use saldo::stock::Store;
use saldo::webhooks::lease::{self, AfterFailure, Attempt, Lease};
use saldo::webhooks::target::redacted;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use uuid::Uuid;

use super::body;
use super::client::{Sender, Sent, DELIVERY_ID, SIGNATURE, WEBHOOK_ID};
use super::key::signature;
use super::settings::WebhookSettings;

/// Subscriptions one service delivers at once.
pub const MAX_IN_FLIGHT: usize = 8;
/// A lease's length; renewed before every batch (far above one request's timeout).
pub const LEASE: Duration = Duration::from_secs(60);
/// Batches one lease sends before giving the subscription back (others get a turn).
pub const MAX_BATCHES_PER_LEASE: usize = 50;
/// The gauges are refreshed every this many polls.
const OBSERVE_EVERY_POLLS: u32 = 5;
/// Longest the stop waits for deliveries in flight.
pub const STOP_WAIT: Duration = Duration::from_secs(15);

/// What every delivery task shares.
struct Shared {
    store: Store,
    settings: Arc<WebhookSettings>,
    sender: Sender,
    holder: Uuid,
    stop: watch::Receiver<bool>,
}

/// Starts the worker; it ends when `stop` turns true (or its sender is dropped).
pub fn spawn(
    store: Store,
    settings: Arc<WebhookSettings>,
    stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let sender = match Sender::new(settings.allow_private_targets) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "webhook client could not be built: no deliveries");
                return;
            }
        };
        let shared = Arc::new(Shared {
            store,
            settings,
            sender,
            holder: Uuid::new_v4(),
            stop,
        });
        run(shared).await;
        tracing::info!("webhook worker stopped");
    })
}

async fn run(shared: Arc<Shared>) {
    let mut stop = shared.stop.clone();
    let mut tasks: JoinSet<Next> = JoinSet::new();
    let mut tick = tokio::time::interval(shared.settings.poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut polls = 0u32;
    let mut key = KeyState::Unchecked;
    // When a delivery asked to be claimed again before the next tick (behind, or backing off).
    let mut early: Option<tokio::time::Instant> = None;
    loop {
        let wake_early = async {
            match early {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = stop.changed() => if changed.is_err() || *stop.borrow() { break },
            _ = tick.tick() => {}
            () = wake_early => {}
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                note(joined, &mut early);
                continue;
            }
        }
        early = None;
        while let Some(joined) = tasks.try_join_next() {
            note(joined, &mut early);
        }
        if !key_agrees(&shared, &mut key).await {
            continue;
        }
        let room = MAX_IN_FLIGHT.saturating_sub(tasks.len());
        match lease::claim(&shared.store, shared.holder, LEASE, room).await {
            Ok(leases) => {
                for held in leases {
                    tasks.spawn(deliver(shared.clone(), held));
                }
            }
            Err(e) => tracing::warn!(error = %e, "webhook claim failed"),
        }
        if polls % OBSERVE_EVERY_POLLS == 0 {
            if let Err(e) = lease::observe(&shared.store).await {
                tracing::warn!(error = %e, "webhook gauges not refreshed");
            }
        }
        polls = polls.wrapping_add(1);
    }
    let drained = tokio::time::timeout(STOP_WAIT, async {
        while tasks.join_next().await.is_some() {}
    });
    if drained.await.is_err() {
        tasks.abort_all();
    }
}

/// What a finished delivery task asks of the loop: moves `early` forward when it wants to be
/// claimed again before the next tick.
fn note(joined: Result<Next, tokio::task::JoinError>, early: &mut Option<tokio::time::Instant>) {
    let at = match joined {
        Ok(Next::ClaimAgain) => tokio::time::Instant::now(),
        Ok(Next::RetryAfter(wait)) => tokio::time::Instant::now() + wait,
        Ok(Next::Wait) | Err(_) => return,
    };
    *early = Some(early.map_or(at, |e| e.min(at)));
}

/// What a delivery task left to do when it ended.
enum Next {
    /// Caught up, gone, or failed for good: the next tick is soon enough.
    Wait,
    /// Its batches were used up while still behind: claim again now.
    ClaimAgain,
    /// A batch failed and backs off this long: claim again then.
    RetryAfter(Duration),
}

/// Whether this service's webhook key was found to be the database's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyState {
    Unchecked,
    Agrees,
    /// Differs: said once at error level, checked again every poll (nothing is delivered).
    Differs,
}

/// Checks (until it agrees) that this service signs with the database's webhook key: a service
/// with another key would send signatures no receiver can verify, so it delivers nothing.
async fn key_agrees(shared: &Shared, state: &mut KeyState) -> bool {
    if *state == KeyState::Agrees {
        return true;
    }
    let fingerprint = shared.settings.key.fingerprint();
    match lease::key_agrees(&shared.store, &fingerprint).await {
        Ok(true) => {
            *state = KeyState::Agrees;
            true
        }
        Ok(false) => {
            if *state != KeyState::Differs {
                tracing::error!(
                    "{}; no webhook is delivered by this service",
                    saldo::Error::WebhookKeyMismatch
                );
                *state = KeyState::Differs;
            }
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "webhook key not checked");
            false
        }
    }
}

/// Delivers one held subscription until it is caught up, fails, loses its lease or the service
/// stops (at most [`MAX_BATCHES_PER_LEASE`] batches), then gives the lease back.
async fn deliver(shared: Arc<Shared>, mut held: Lease) -> Next {
    let mut next = Next::ClaimAgain;
    for _ in 0..MAX_BATCHES_PER_LEASE {
        if *shared.stop.borrow() {
            next = Next::Wait;
            break;
        }
        match deliver_one(&shared, &mut held).await {
            Ok(Step::More) => continue,
            Ok(Step::Done) => {
                next = Next::Wait;
                break;
            }
            Ok(Step::Gone) => return Next::Wait,
            Ok(Step::BackingOff(wait)) => return Next::RetryAfter(wait),
            Err(e) => {
                tracing::warn!(webhook = %held.id, error = %e, "webhook delivery step failed");
                next = Next::Wait;
                break;
            }
        }
    }
    if let Err(e) = lease::release(&shared.store, &held).await {
        tracing::warn!(webhook = %held.id, error = %e, "webhook lease not released");
    }
    next
}

/// What to do after one batch.
enum Step {
    /// Delivered: look for the next batch.
    More,
    /// Caught up (or nothing to do): give the lease back.
    Done,
    /// The lease is gone or already given back.
    Gone,
    /// A failed attempt gave the lease back; the subscription is due again after this.
    BackingOff(Duration),
}

async fn deliver_one(shared: &Shared, held: &mut Lease) -> Result<Step, saldo::Error> {
    let store = &shared.store;
    let batch = match lease::next_batch(store, held).await {
        Ok(b) => b,
        Err(e @ saldo::Error::CursorExpired { .. }) => {
            let attempt = failure(held, "cursor_expired", e.to_string());
            return record_failure(shared, held, &attempt, None).await;
        }
        Err(e) => return Err(e),
    };
    if batch.events.is_empty() {
        if batch.next != held.cursor {
            lease::skip(store, held, batch.next).await?;
        }
        return Ok(Step::Done);
    }
    if !lease::renew(store, held, LEASE).await? {
        return Ok(Step::Gone);
    }
    let (body, count) = body::within_limit(&batch.events)
        .map_err(|e| saldo::Error::Invariant(format!("a webhook body did not serialise: {e}")))?;
    let sent_events = &batch.events[..count];
    let (Some(first), Some(last)) = (sent_events.first(), sent_events.last()) else {
        return Err(saldo::Error::Invariant(
            "a webhook body carried no event".to_owned(),
        ));
    };
    // Cut by the byte bound: the cursor moves past what was sent, not past the whole read.
    let next = if count < batch.events.len() {
        last.cursor.parse()?
    } else {
        batch.next
    };
    let delivery_id = Uuid::new_v4();
    let secret = shared.settings.key.secret(&held.id);
    let t = chrono::Utc::now().timestamp();
    let headers = [
        (WEBHOOK_ID, held.id.to_string()),
        (DELIVERY_ID, delivery_id.to_string()),
        (SIGNATURE, signature(&secret, t, &body)),
    ];
    let sent = shared.sender.send(&held.url, &headers, body).await;
    let attempt = Attempt {
        delivery_id,
        first: first.cursor.parse()?,
        last: last.cursor.parse()?,
        events: i32::try_from(count).unwrap_or(i32::MAX),
        outcome: sent.outcome,
        http_status: sent.status.map(i32::from),
        duration: sent.duration,
        error: sent.error.clone(),
    };
    if !sent.ok() {
        return record_failure(shared, held, &attempt, Some(&sent)).await;
    }
    if !lease::delivered(store, held, next, &attempt).await? {
        return Ok(Step::Gone);
    }
    held.cursor = next;
    held.attempts = 0;
    Ok(Step::More)
}

/// An attempt that sent nothing.
fn failure(held: &Lease, outcome: &'static str, error: String) -> Attempt {
    Attempt {
        delivery_id: Uuid::new_v4(),
        first: held.cursor,
        last: held.cursor,
        events: 0,
        outcome,
        http_status: None,
        duration: Duration::ZERO,
        error: Some(error),
    }
}

async fn record_failure(
    shared: &Shared,
    held: &Lease,
    attempt: &Attempt,
    sent: Option<&Sent>,
) -> Result<Step, saldo::Error> {
    let settings = &shared.settings;
    let number = u32::try_from(held.attempts).unwrap_or(0).saturating_add(1);
    let max = i32::try_from(settings.max_attempts).unwrap_or(i32::MAX);
    let backoff = settings.backoff(number);
    let after = lease::failed(&shared.store, held, attempt, max, backoff).await?;
    tracing::warn!(
        webhook = %held.id,
        url = %redacted(&held.url),
        outcome = attempt.outcome,
        status = sent.and_then(|s| s.status),
        attempt = number,
        after = ?after,
        "webhook delivery failed"
    );
    match after {
        AfterFailure::RetryIn(wait) => Ok(Step::BackingOff(wait)),
        AfterFailure::Failing => {
            tracing::error!(webhook = %held.id, url = %redacted(&held.url),
                "webhook attempts exhausted: failing until resumed");
            Ok(Step::Gone)
        }
        AfterFailure::LeaseLost => Ok(Step::Gone),
    }
}
