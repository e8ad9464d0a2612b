//! `--webhook-probe` of the HTTP bench: does a webhook receiver keep up with the load?
//!
//! Before the rounds, the probe starts a receiver on 127.0.0.1 (an ephemeral port) and
//! subscribes it to every event type from the feed's end (admin token; the service must run
//! with `--webhook-allow-private-targets`). The receiver checks each request's signature as a
//! real one would and records each event's lag: the moment it arrived minus the event's `at`
//! (the writing transaction's time; same machine, same clock). After the rounds the probe waits
//! (at most [`CATCH_UP`]) until the receiver has everything the feed held when the load
//! stopped, then deletes the subscription, whatever happened. Duplicates (a redelivered batch)
//! are told apart by feed position: delivery is in feed order, so an event at or below the
//! highest position received is one seen before.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use hmac::{KeyInit, Mac};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;

use super::http::HttpTarget;

/// How long the receiver may take, after the load, to get what the feed held at its end.
pub const CATCH_UP: Duration = Duration::from_secs(60);
/// Largest request body the receiver reads (a batch is far smaller).
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Highest lag recorded (longer lags are clamped to it): an hour, in milliseconds.
const MAX_LAG_MS: u64 = 3_600_000;
/// Connections the receiver serves at once (the service opens a handful).
const MAX_CONNECTIONS: usize = 64;
/// A signature's timestamp may be this far from the receiver's clock.
const SIGNATURE_TOLERANCE_S: i64 = 300;

/// What the receiver saw, and whether it kept up.
#[derive(Debug, Clone, Serialize)]
pub struct WebhookReport {
    /// Events received once (duplicates not counted).
    pub events: u64,
    /// Events received again (a batch redelivered).
    pub duplicates: u64,
    pub requests: u64,
    /// Requests whose signature did not verify (refused with 401): must be 0.
    pub bad_signatures: u64,
    pub lag_p50_ms: u64,
    pub lag_p99_ms: u64,
    pub lag_max_ms: u64,
    /// How long after the load stopped the receiver had every event the feed held then;
    /// `None`: not within [`CATCH_UP`].
    pub caught_up_after_ms: Option<u64>,
    /// Events the feed held at the load's end that had not arrived when the probe stopped.
    pub behind: u64,
}

impl WebhookReport {
    /// One line for the terminal.
    pub fn describe(&self) -> String {
        let caught = match self.caught_up_after_ms {
            Some(ms) => format!("caught up {ms} ms after the load"),
            None => format!(
                "NOT caught up {}s after the load: {} events behind",
                CATCH_UP.as_secs(),
                self.behind
            ),
        };
        format!(
            "webhook receiver: {} events in {} requests ({} redelivered, {} bad signatures); \
             lag p50 {} ms, p99 {} ms, max {} ms; {caught}",
            self.events,
            self.requests,
            self.duplicates,
            self.bad_signatures,
            self.lag_p50_ms,
            self.lag_p99_ms,
            self.lag_max_ms
        )
    }
}

/// The receiver's tally.
struct Tally {
    lags: Histogram<u64>,
    events: u64,
    duplicates: u64,
    requests: u64,
    bad_signatures: u64,
    /// Highest feed position received.
    high_water: i64,
}

struct Shared {
    secret: Mutex<String>,
    tally: Mutex<Tally>,
}

/// A subscribed receiver; [`WebhookProbe::finish`] reports and unsubscribes.
pub struct WebhookProbe {
    shared: Arc<Shared>,
    id: String,
    server: tokio::task::JoinHandle<()>,
}

impl WebhookProbe {
    /// Starts the receiver and subscribes it (see the module header).
    pub async fn start(target: &HttpTarget) -> Result<WebhookProbe> {
        let lags = Histogram::new_with_bounds(1, MAX_LAG_MS, 3).context("lag histogram")?;
        let shared = Arc::new(Shared {
            secret: Mutex::new(String::new()),
            tally: Mutex::new(Tally {
                lags,
                events: 0,
                duplicates: 0,
                requests: 0,
                bad_signatures: 0,
                high_water: 0,
            }),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the webhook receiver on 127.0.0.1")?;
        let at = listener.local_addr()?;
        let server = tokio::spawn(serve(listener, shared.clone()));
        let subscribed = subscribe(target, at).await;
        let (id, secret) = match subscribed {
            Ok(s) => s,
            Err(e) => {
                server.abort();
                return Err(e);
            }
        };
        *lock(&shared.secret) = secret;
        Ok(WebhookProbe { shared, id, server })
    }

    /// Waits (bounded) for the receiver to get what the feed held now, reports, unsubscribes.
    pub async fn finish(self, target: &HttpTarget) -> Result<WebhookReport> {
        let waited = self.catch_up(target).await;
        let deleted = target
            .call_idempotent(
                Method::DELETE,
                &format!("/v1/admin/webhooks/{}", self.id),
                None,
                true,
            )
            .await;
        self.server.abort();
        let (end, caught_up_after) = waited?;
        match deleted {
            Ok((status, _)) if (200..300).contains(&status) || status == 404 => {}
            Ok((status, body)) => bail!(
                "deleting the probe's webhook {}: {status} {}",
                self.id,
                String::from_utf8_lossy(&body)
            ),
            Err(e) => return Err(e.context(format!("deleting the probe's webhook {}", self.id))),
        }
        let t = lock(&self.shared.tally);
        let q = |p: f64| t.lags.value_at_quantile(p);
        Ok(WebhookReport {
            events: t.events,
            duplicates: t.duplicates,
            requests: t.requests,
            bad_signatures: t.bad_signatures,
            lag_p50_ms: q(0.5),
            lag_p99_ms: q(0.99),
            lag_max_ms: t.lags.max(),
            caught_up_after_ms: caught_up_after.map(|d| d.as_millis() as u64),
            behind: u64::try_from(end - t.high_water).unwrap_or(0),
        })
    }

    /// The feed's end now, and how long the receiver took to get there (`None`: not within
    /// [`CATCH_UP`]).
    async fn catch_up(&self, target: &HttpTarget) -> Result<(i64, Option<Duration>)> {
        let end = feed_end(target).await?;
        let start = Instant::now();
        while start.elapsed() < CATCH_UP {
            if lock(&self.shared.tally).high_water >= end {
                return Ok((end, Some(start.elapsed())));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok((end, None))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A receiver handler never panics while holding it; recover the data if one did.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// POST /v1/admin/webhooks for the receiver at `at`: its id and secret.
async fn subscribe(target: &HttpTarget, at: SocketAddr) -> Result<(String, String)> {
    let body = serde_json::json!({ "url": format!("http://{at}/saldo-bench") });
    let (status, answer) = target
        .call(Method::POST, "/v1/admin/webhooks", Some(body), true)
        .await
        .context("subscribing the probe's receiver")?;
    if status == 422 && String::from_utf8_lossy(&answer).contains("private") {
        bail!(
            "the service refuses a loopback webhook target: start it with \
             --webhook-allow-private-targets to use --webhook-probe"
        );
    }
    if status != 201 {
        return Err(super::http::refused(
            "POST /v1/admin/webhooks",
            status,
            &answer,
            true,
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&answer)?;
    match (v["id"].as_str(), v["secret"].as_str()) {
        (Some(id), Some(secret)) => Ok((id.to_owned(), secret.to_owned())),
        _ => bail!("POST /v1/admin/webhooks answered without an id and a secret"),
    }
}

/// The feed position of the newest readable event (`GET /v1/events?after=end`).
async fn feed_end(target: &HttpTarget) -> Result<i64> {
    let (status, body) = target
        .call_idempotent(Method::GET, "/v1/events?after=end&limit=1", None, false)
        .await?;
    if status != 200 {
        return Err(super::http::refused("GET /v1/events", status, &body, false));
    }
    let v: serde_json::Value = serde_json::from_slice(&body)?;
    let next = v["next"].as_str().unwrap_or_default();
    let seq = next
        .strip_prefix("e2.")
        .and_then(|hex| i64::from_str_radix(hex, 16).ok());
    seq.with_context(|| format!("the feed answered an unknown cursor {next:?}"))
}

/// Accepts connections until aborted, [`MAX_CONNECTIONS`] at once.
async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let shared = shared.clone();
                async move { Ok::<_, std::convert::Infallible>(receive(&shared, request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
            drop(permit);
        });
    }
}

/// One delivery: verify, parse, record.
async fn receive(shared: &Shared, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let answer = |status: StatusCode| {
        let mut r = Response::new(Full::new(Bytes::new()));
        *r.status_mut() = status;
        r
    };
    let signature = request
        .headers()
        .get("saldo-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let Ok(body) = Limited::new(request.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
        .map(|c| c.to_bytes())
    else {
        return answer(StatusCode::PAYLOAD_TOO_LARGE);
    };
    let arrived = chrono::Utc::now();
    let secret = lock(&shared.secret).clone();
    let mut t = lock(&shared.tally);
    t.requests += 1;
    if !verifies(&secret, &signature, &body, arrived.timestamp()) {
        t.bad_signatures += 1;
        return answer(StatusCode::UNAUTHORIZED);
    }
    #[derive(serde::Deserialize)]
    struct Delivery {
        events: Vec<Delivered>,
    }
    #[derive(serde::Deserialize)]
    struct Delivered {
        seq: i64,
        at: chrono::DateTime<chrono::Utc>,
    }
    let Ok(delivery) = serde_json::from_slice::<Delivery>(&body) else {
        return answer(StatusCode::BAD_REQUEST);
    };
    for e in delivery.events {
        if e.seq <= t.high_water {
            t.duplicates += 1;
            continue;
        }
        t.high_water = e.seq;
        t.events += 1;
        let lag = (arrived - e.at)
            .num_milliseconds()
            .clamp(1, MAX_LAG_MS as i64);
        t.lags.saturating_record(lag as u64);
    }
    answer(StatusCode::OK)
}

/// `Saldo-Signature: t=<unix s>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`, `t` within
/// 5 minutes of `now` (unix s): true when `header` is that for `body`. What a receiver checks.
pub fn verifies(secret: &str, header: &str, body: &[u8], now: i64) -> bool {
    let Some((t, v1)) = header
        .split_once(',')
        .and_then(|(t, v)| Some((t.strip_prefix("t=")?, v.strip_prefix("v1=")?)))
    else {
        return false;
    };
    let (Ok(t), Ok(expected)) = (t.parse::<i64>(), hex::decode(v1)) else {
        return false;
    };
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()) else {
        return false;
    };
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    (now - t).abs() <= SIGNATURE_TOLERANCE_S && mac.verify_slice(&expected).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign(secret: &str, t: i64, body: &[u8]) -> String {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("key");
        mac.update(format!("{t}.").as_bytes());
        mac.update(body);
        format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
    }

    #[test]
    fn a_signature_verifies_only_with_its_secret_body_and_a_fresh_time() {
        let body = br#"{"events":[]}"#;
        let header = sign("s3cret", 1_000, body);
        assert!(verifies("s3cret", &header, body, 1_000));
        assert!(verifies("s3cret", &header, body, 1_300));
        assert!(!verifies("s3cret", &header, body, 1_301), "stale");
        assert!(!verifies("other", &header, body, 1_000), "another secret");
        assert!(!verifies("s3cret", &header, b"{}", 1_000), "another body");
        assert!(!verifies("s3cret", "t=1000", body, 1_000), "no v1");
        assert!(!verifies("s3cret", "", body, 1_000));
    }
}
