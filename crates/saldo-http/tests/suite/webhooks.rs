//! Signed webhooks end to end: a loopback receiver (its own axum server in the test) verifies the
//! signature of every request and dedups by event id; the service runs its delivery worker
//! (`server::run`, as `saldo serve` does) with private targets allowed, a short poll and backoff.
//! Every wait is a bounded poll.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use hmac::{KeyInit, Mac};
use saldo::events::{Cursor, Filter};
use saldo_http::webhooks::client::Sender;
use saldo_http::{app, RawSettings};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use crate::harness::test_db_with_pool;
use crate::support::{state_with, Live, TestApp};

/// Longest any wait in these tests polls for.
const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(20);

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Got {
    path: String,
    webhook: String,
    delivery: String,
    signature: String,
    user_agent: String,
    body: Vec<u8>,
    answered: u16,
}

impl Got {
    fn events(&self) -> Vec<Value> {
        let v: Value = serde_json::from_slice(&self.body).expect("JSON body");
        v["events"].as_array().expect("events").clone()
    }
}

/// A scripted receiver: answers the statuses queued in `script`, then `default`.
#[derive(Default)]
struct Receiver {
    script: Mutex<VecDeque<u16>>,
    default: AtomicU16,
    got: Mutex<Vec<Got>>,
    elsewhere: AtomicUsize,
}

impl Receiver {
    fn got(&self) -> Vec<Got> {
        self.got.lock().expect("lock").clone()
    }
}

async fn hook(
    State(r): State<Arc<Receiver>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let status = r
        .script
        .lock()
        .expect("lock")
        .pop_front()
        .unwrap_or_else(|| r.default.load(Ordering::SeqCst));
    let h = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    r.got.lock().expect("lock").push(Got {
        path: uri.path().to_owned(),
        webhook: h("saldo-webhook-id"),
        delivery: h("saldo-delivery-id"),
        signature: h("saldo-signature"),
        user_agent: h("user-agent"),
        body: body.to_vec(),
        answered: status,
    });
    let code = StatusCode::from_u16(status).expect("status");
    if code.is_redirection() {
        return (code, [(header::LOCATION, "/elsewhere")]).into_response();
    }
    code.into_response()
}

async fn elsewhere(State(r): State<Arc<Receiver>>) -> StatusCode {
    r.elsewhere.fetch_add(1, Ordering::SeqCst);
    StatusCode::OK
}

/// Starts a receiver on 127.0.0.1; the task is aborted when the handle drops (see `Stop`).
async fn receiver(default: u16) -> (Arc<Receiver>, SocketAddr, Stop) {
    let r = Arc::new(Receiver::default());
    r.default.store(default, Ordering::SeqCst);
    let router = axum::Router::new()
        .route("/elsewhere", axum::routing::post(elsewhere))
        .route("/{*rest}", axum::routing::post(hook))
        .with_state(r.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (r, addr, Stop(task))
}

/// Aborts the receiver's task when dropped.
struct Stop(JoinHandle<()>);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Settings for these tests: private targets allowed, fast poll and backoff, `attempts` tries.
fn settings(dir: &std::path::Path, attempts: u32) -> RawSettings {
    RawSettings {
        token_dir: Some(dir.to_owned()),
        webhook_allow_private_targets: true,
        webhook_backoff_base_ms: 20,
        webhook_max_attempts: attempts,
        webhook_poll_ms: 20,
        ..RawSettings::default()
    }
}

async fn app_with(raw: RawSettings) -> TestApp {
    let db = test_db_with_pool(16).await;
    let state = state_with(db.pool.clone(), raw);
    let router = app(state.clone());
    TestApp { db, state, router }
}

/// Creates a subscription; answers (id, secret, cursor).
async fn subscribe(t: &TestApp, url: &str, types: Value) -> (String, String, String) {
    let a = t
        .admin(
            Method::POST,
            "/v1/admin/webhooks",
            Some(json!({ "url": url, "types": types })),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    let secret = a.body["secret"].as_str().expect("secret").to_owned();
    assert_eq!(secret.len(), 64);
    (
        a.body["id"].as_str().expect("id").to_owned(),
        secret,
        a.body["cursor"].as_str().expect("cursor").to_owned(),
    )
}

/// Polls `check` until it is true, at most [`WAIT`].
async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while !check().await {
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// Checks `Saldo-Signature` the way a receiver would.
fn verify(secret: &str, got: &Got) {
    let (t, v1) = got
        .signature
        .split_once(',')
        .and_then(|(t, v)| Some((t.strip_prefix("t=")?, v.strip_prefix("v1=")?)))
        .unwrap_or_else(|| panic!("signature header {:?}", got.signature));
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("key");
    mac.update(format!("{t}.").as_bytes());
    mac.update(&got.body);
    let expected = hex::decode(v1).expect("hex");
    mac.verify_slice(&expected).expect("signature verifies");
    let t: i64 = t.parse().expect("t");
    assert!((chrono::Utc::now().timestamp() - t).abs() < 300, "fresh");
}

/// The feed's `n` event ids after `cursor`, in feed order. Waits for them: the feed holds back
/// events below the oldest running transaction of the cluster (other tests' too).
async fn feed_after(t: &TestApp, cursor: &str, n: usize) -> Vec<i64> {
    let cursor = cursor.parse::<Cursor>().expect("cursor");
    let start = std::time::Instant::now();
    loop {
        let page = saldo::events::read(t.state.store(), Some(cursor), 1_000, &Filter::default())
            .await
            .expect("feed");
        let ids: Vec<i64> = page.events.iter().map(|e| e.id).collect();
        if ids.len() >= n {
            assert_eq!(ids.len(), n, "one event per write");
            return ids;
        }
        assert!(start.elapsed() < WAIT, "timed out waiting for the feed");
        tokio::time::sleep(POLL).await;
    }
}

/// Event ids from the requests answered 2xx, in arrival order, first sighting only.
fn delivered_ids(got: &[Got]) -> (Vec<i64>, usize) {
    let mut seen = HashSet::new();
    let (mut ids, mut total) = (Vec::new(), 0);
    for g in got.iter().filter(|g| (200..300).contains(&g.answered)) {
        for e in g.events() {
            total += 1;
            let id = e["id"].as_i64().expect("id");
            if seen.insert(id) {
                ids.push(id);
            }
        }
    }
    (ids, total)
}

/// Waits until subscription `id`'s cursor is the last event the receiver acknowledged: the
/// cursor moves in the transaction that logs the delivery, so the log is complete then.
async fn caught_up(t: &TestApp, id: &str, r: &Receiver) {
    let last = r
        .got()
        .iter()
        .filter(|g| (200..300).contains(&g.answered))
        .flat_map(|g| g.events())
        .last()
        .and_then(|e| e["cursor"].as_str().map(str::to_owned))
        .expect("an acknowledged event");
    let path = format!("/v1/admin/webhooks/{id}");
    until("the cursor at the last acknowledged event", || async {
        t.admin(Method::GET, &path, None).await.body["cursor"] == last.as_str()
    })
    .await;
}

fn seqs(got: &Got) -> Vec<i64> {
    got.events()
        .iter()
        .map(|e| e["seq"].as_i64().expect("seq"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_arrives_signed_once_and_in_feed_order() {
    let dir = tempfile::tempdir().expect("dir");
    let t = app_with(settings(dir.path(), 12)).await;
    let (r, addr, _stop) = receiver(200).await;
    let (id, secret, cursor) = subscribe(&t, &format!("http://{addr}/hook?k=v"), json!([])).await;
    let live = Live::start(t.state.clone()).await;
    for i in 1..=30 {
        t.stock(1 + i % 3, i).await;
    }
    let expected = feed_after(&t, &cursor, 30).await;
    until("every event delivered", || {
        let r = r.clone();
        let n = expected.len();
        async move { delivered_ids(&r.got()).0.len() >= n }
    })
    .await;
    let got = r.got();
    let (ids, total) = delivered_ids(&got);
    assert_eq!(ids, expected, "every event once, in feed order");
    assert_eq!(total, expected.len(), "nothing delivered twice");
    let mut last = 0;
    for g in &got {
        verify(&secret, g);
        assert_eq!(g.webhook, id);
        assert_eq!(g.path, "/hook");
        assert!(uuid::Uuid::parse_str(&g.delivery).is_ok());
        assert!(g.user_agent.starts_with("saldo-webhooks/"));
        let s = seqs(g);
        assert!(s.len() <= saldo::webhooks::MAX_BATCH && !s.is_empty());
        assert!(s.windows(2).all(|w| w[0] < w[1]) && s[0] > last);
        last = *s.last().expect("last");
    }
    caught_up(&t, &id, &r).await;
    let log = t
        .admin(
            Method::GET,
            &format!("/v1/admin/webhooks/{id}/deliveries?limit=1000"),
            None,
        )
        .await;
    let deliveries = log.body["deliveries"].as_array().expect("deliveries");
    assert_eq!(deliveries.len(), got.len(), "{}", log.text);
    assert!(deliveries
        .iter()
        .all(|d| d["outcome"] == "ok" && d["http_status"] == 200));
    live.stop().await;
}

/// A failed batch is sent again when its backoff ends, not at the next poll: with the poll at
/// its longest (60 s) and a 20 ms backoff, the retry lands within seconds. (Before, a retry
/// waited for the next poll whatever its backoff, so a receiver refusing one request in ten
/// fell ever further behind a busy feed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_comes_when_its_backoff_ends_not_at_the_next_poll() {
    const SOON: Duration = Duration::from_secs(20);
    let dir = tempfile::tempdir().expect("dir");
    let raw = RawSettings {
        webhook_poll_ms: saldo_http::webhooks::settings::MAX_POLL_MS,
        ..settings(dir.path(), 12)
    };
    let t = app_with(raw).await;
    let (r, addr, _stop) = receiver(200).await;
    r.script.lock().expect("lock").push_back(503);
    let (_, _, cursor) = subscribe(&t, &format!("http://{addr}/h"), json!([])).await;
    for i in 1..=5 {
        t.stock(8, i).await;
    }
    let expected = feed_after(&t, &cursor, 5).await;
    // The worker's first poll is at its start: it finds the subscription due and fails once.
    let live = Live::start(t.state.clone()).await;
    let start = std::time::Instant::now();
    while delivered_ids(&r.got()).0.len() < expected.len() {
        assert!(
            start.elapsed() < SOON,
            "the retry waited for the next poll: {:?}",
            r.got().iter().map(|g| g.answered).collect::<Vec<_>>()
        );
        tokio::time::sleep(POLL).await;
    }
    let got = r.got();
    assert_eq!(got[0].answered, 503);
    assert_eq!(delivered_ids(&got).0, expected);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_batch_is_retried_before_any_later_event() {
    let dir = tempfile::tempdir().expect("dir");
    let t = app_with(settings(dir.path(), 12)).await;
    let (r, addr, _stop) = receiver(200).await;
    r.script.lock().expect("lock").extend([500, 503]);
    let (id, secret, cursor) = subscribe(&t, &format!("http://{addr}/h"), json!([])).await;
    for i in 1..=5 {
        t.stock(7, i).await;
    }
    let live = Live::start(t.state.clone()).await;
    for i in 6..=10 {
        t.stock(7, i).await;
    }
    let expected = feed_after(&t, &cursor, 10).await;
    until("every event delivered after two failures", || {
        let r = r.clone();
        let n = expected.len();
        async move { delivered_ids(&r.got()).0.len() >= n }
    })
    .await;
    let got = r.got();
    assert_eq!(got[0].answered, 500);
    assert_eq!(got[1].answered, 503);
    assert_eq!(got[2].answered, 200);
    let first = seqs(&got[0])[0];
    assert_eq!(seqs(&got[1])[0], first, "the failed batch is sent again");
    assert_eq!(seqs(&got[2])[0], first, "and nothing after it first");
    for g in &got {
        verify(&secret, g);
    }
    assert_eq!(delivered_ids(&got).0, expected);
    caught_up(&t, &id, &r).await;
    let log = t
        .admin(
            Method::GET,
            &format!("/v1/admin/webhooks/{id}/deliveries"),
            None,
        )
        .await;
    let d = log.body["deliveries"].as_array().expect("deliveries");
    let oldest: Vec<&Value> = d.iter().rev().take(3).collect();
    assert_eq!(oldest[0]["http_status"], 500);
    assert_eq!(oldest[0]["outcome"], "http_status");
    assert_eq!(oldest[0]["attempt"], 1);
    assert_eq!(oldest[1]["attempt"], 2);
    assert_eq!(
        (oldest[2]["outcome"].as_str(), oldest[2]["attempt"].as_i64()),
        (Some("ok"), Some(3))
    );
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_attempts_turn_failing_and_resume_delivers() {
    let dir = tempfile::tempdir().expect("dir");
    let t = app_with(settings(dir.path(), 3)).await;
    let (r, addr, _stop) = receiver(500).await;
    let (id, secret, cursor) =
        subscribe(&t, &format!("http://{addr}/h"), json!(["stock.changed"])).await;
    let live = Live::start(t.state.clone()).await;
    t.stock(3, 5).await;
    let path = format!("/v1/admin/webhooks/{id}");
    until("failing", || async {
        t.admin(Method::GET, &path, None).await.body["status"] == "failing"
    })
    .await;
    let failing = t.admin(Method::GET, &path, None).await;
    assert_eq!(failing.body["attempts"], 3, "{}", failing.text);
    assert_eq!(
        failing.body["last_error"],
        "answered 500 Internal Server Error"
    );
    assert_eq!(r.got().len(), 3, "no attempt after the last");
    let metrics = t.get("/metrics").await.text;
    for family in [
        "saldo_webhooks_failing",
        "saldo_webhook_oldest_undelivered_seconds",
        "saldo_webhook_deliveries_total{outcome=\"failed\"}",
    ] {
        assert!(metrics.contains(family), "{family} on /metrics");
    }
    r.default.store(200, Ordering::SeqCst);
    let resumed = t.admin(Method::POST, &format!("{path}/resume"), None).await;
    assert_eq!(resumed.status, StatusCode::OK, "{}", resumed.text);
    assert_eq!(resumed.body["status"], "active");
    assert_eq!(resumed.body["attempts"], 0);
    let expected = feed_after(&t, &cursor, 1).await;
    until("delivered after resume", || {
        let r = r.clone();
        let n = expected.len();
        async move { delivered_ids(&r.got()).0.len() >= n }
    })
    .await;
    let got = r.got();
    assert_eq!(delivered_ids(&got).0, expected);
    for g in &got {
        verify(&secret, g);
    }
    until("cursor moved", || async {
        t.admin(Method::GET, &path, None).await.body["cursor"] != cursor
    })
    .await;
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_not_followed_and_counts_as_a_failure() {
    let dir = tempfile::tempdir().expect("dir");
    let t = app_with(settings(dir.path(), 2)).await;
    let (r, addr, _stop) = receiver(307).await;
    let (id, _, _) = subscribe(&t, &format!("http://{addr}/h"), json!([])).await;
    let live = Live::start(t.state.clone()).await;
    t.stock(4, 1).await;
    let path = format!("/v1/admin/webhooks/{id}");
    until("failing after redirects", || async {
        t.admin(Method::GET, &path, None).await.body["status"] == "failing"
    })
    .await;
    assert_eq!(
        r.elsewhere.load(Ordering::SeqCst),
        0,
        "the redirect was followed"
    );
    let log = t
        .admin(Method::GET, &format!("{path}/deliveries"), None)
        .await;
    let d = log.body["deliveries"].as_array().expect("deliveries");
    assert_eq!(d.len(), 2, "{}", log.text);
    assert!(d
        .iter()
        .all(|d| d["outcome"] == "redirect" && d["http_status"] == 307));
    live.stop().await;
}

#[tokio::test]
async fn private_targets_and_bad_subscriptions_are_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let t = app_with(RawSettings {
        token_dir: Some(dir.path().to_owned()),
        ..RawSettings::default()
    })
    .await;
    let create = |body: Value| {
        let t = &t;
        async move {
            t.admin(Method::POST, "/v1/admin/webhooks", Some(body))
                .await
        }
    };
    for url in [
        "http://127.0.0.1:9/h",
        "http://localhost:9/h",
        "http://[::1]:9/h",
        "http://10.0.0.1/h",
        "http://169.254.169.254/latest",
        "http://0.0.0.0/h",
        "http://[::ffff:127.0.0.1]/h",
    ] {
        create(json!({ "url": url }))
            .await
            .assert_problem(422, "webhook-target-refused");
    }
    for body in [
        json!({ "url": "https://user:pw@example.com/h" }),
        json!({ "url": "ftp://example.com/h" }),
        json!({ "url": "not a url" }),
        json!({ "url": format!("https://example.com/{}", "a".repeat(2048)) }),
        json!({ "url": "https://example.com/h", "types": ["no.such.type"] }),
    ] {
        create(body).await.assert_problem(422, "invalid-input");
    }
    create(json!({ "url": "https://example.com/h", "after": "e9.zz" }))
        .await
        .assert_problem(422, "cursor-invalid");
    create(json!({ "url": "https://example.com/h", "extra": 1 }))
        .await
        .assert_problem(422, "invalid-body");
    // Only admins: the API token (or none) cannot register.
    let a = t
        .call(
            Method::POST,
            "/v1/admin/webhooks",
            None,
            Some(json!({ "url": "http://127.0.0.1:9/h" })),
        )
        .await;
    a.assert_problem(401, "unauthorized");
    // Unknown and malformed ids.
    let unknown = uuid::Uuid::new_v4();
    t.admin(Method::GET, &format!("/v1/admin/webhooks/{unknown}"), None)
        .await
        .assert_problem(404, "unknown-webhook");
    t.admin(
        Method::DELETE,
        &format!("/v1/admin/webhooks/{unknown}"),
        None,
    )
    .await
    .assert_problem(404, "unknown-webhook");
    t.admin(Method::GET, "/v1/admin/webhooks/nope", None)
        .await
        .assert_problem(422, "invalid-input");
}

#[tokio::test]
async fn the_connection_is_checked_too() {
    let (r, addr, _stop) = receiver(200).await;
    let sender = Sender::new(false).expect("client");
    for url in [
        format!("http://{addr}/h"),
        format!("http://localhost:{}/h", addr.port()),
    ] {
        let sent = sender.send(&url, &[], b"{}".to_vec()).await;
        assert_eq!(sent.outcome, "target_refused", "{url}: {sent:?}");
    }
    assert!(r.got().is_empty(), "nothing reached the private target");
    let allowed = Sender::new(true).expect("client");
    let sent = allowed
        .send(&format!("http://{addr}/h"), &[], b"{}".to_vec())
        .await;
    assert!(sent.ok(), "{sent:?}");
}

#[tokio::test]
async fn the_secret_is_shown_once_and_subscriptions_are_bounded() {
    let dir = tempfile::tempdir().expect("dir");
    let t = app_with(settings(dir.path(), 12)).await;
    let (id, secret, _) = subscribe(&t, "http://127.0.0.1:9/h", json!(["stock.changed"])).await;
    let one = t
        .admin(Method::GET, &format!("/v1/admin/webhooks/{id}"), None)
        .await;
    assert_eq!(one.status, StatusCode::OK);
    assert!(one.body.get("secret").is_none(), "{}", one.text);
    assert!(!one.text.contains(&secret));
    assert_eq!(one.body["types"], json!(["stock.changed"]));
    let all = t.admin(Method::GET, "/v1/admin/webhooks", None).await;
    assert!(!all.text.contains(&secret) && !all.text.contains("\"secret\""));
    for n in 1..saldo::webhooks::MAX_SUBSCRIPTIONS {
        subscribe(&t, &format!("http://127.0.0.1:9/h{n}"), json!([])).await;
    }
    t.admin(
        Method::POST,
        "/v1/admin/webhooks",
        Some(json!({ "url": "http://127.0.0.1:9/over" })),
    )
    .await
    .assert_problem(409, "too-many-webhooks");
    let deleted = t
        .admin(Method::DELETE, &format!("/v1/admin/webhooks/{id}"), None)
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    subscribe(&t, "http://127.0.0.1:9/again", json!([])).await;
    for limit in ["0", "1001", "x"] {
        t.admin(
            Method::GET,
            &format!("/v1/admin/webhooks/{id}/deliveries?limit={limit}"),
            None,
        )
        .await
        .assert_problem(422, "invalid-input");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_services_on_one_database_deliver_each_event_once() {
    let dir = tempfile::tempdir().expect("dir");
    let t = app_with(settings(dir.path(), 12)).await;
    let other = state_with(t.db.pool.clone(), settings(dir.path(), 12));
    let (r, addr, _stop) = receiver(200).await;
    let mut subs = BTreeMap::new();
    let mut cursor = String::new();
    for n in 0..6 {
        let (id, secret, c) = subscribe(&t, &format!("http://{addr}/s{n}"), json!([])).await;
        subs.insert(id, secret);
        cursor = c;
    }
    let one = Live::start(t.state.clone()).await;
    let two = Live::start(other).await;
    for i in 1..=40 {
        t.stock(10 + i % 4, i).await;
    }
    let expected = feed_after(&t, &cursor, 40).await;
    until("every subscription has every event", || {
        let r = r.clone();
        let (n, subs) = (expected.len(), subs.len());
        async move {
            let got = r.got();
            let mut per: BTreeMap<String, HashSet<i64>> = BTreeMap::new();
            for g in &got {
                for e in g.events() {
                    per.entry(g.webhook.clone())
                        .or_default()
                        .insert(e["id"].as_i64().expect("id"));
                }
            }
            per.len() == subs && per.values().all(|s| s.len() >= n)
        }
    })
    .await;
    one.stop().await;
    two.stop().await;
    let got = r.got();
    for (id, secret) in &subs {
        let mine: Vec<Got> = got.iter().filter(|g| &g.webhook == id).cloned().collect();
        for g in &mine {
            verify(secret, g);
        }
        let (ids, total) = delivered_ids(&mine);
        assert_eq!(ids, expected, "{id}: every event, in feed order");
        assert_eq!(total, expected.len(), "{id}: no event delivered twice");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_with_another_key_neither_subscribes_nor_delivers() {
    let (dir, elsewhere) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let t = app_with(settings(dir.path(), 12)).await;
    let (r, addr, _stop) = receiver(200).await;
    let (id, _, cursor) = subscribe(&t, &format!("http://{addr}/h"), json!([])).await;
    // Another service on the same database, with a key of its own (another token directory).
    let other = state_with(t.db.pool.clone(), settings(elsewhere.path(), 12));
    let other_app = TestApp {
        db: test_db_with_pool(1).await,
        router: app(other.clone()),
        state: other.clone(),
    };
    other_app
        .admin(
            Method::POST,
            "/v1/admin/webhooks",
            Some(json!({ "url": format!("http://{addr}/other") })),
        )
        .await
        .assert_problem(503, "webhook-key-mismatch");
    let live = Live::start(other).await;
    t.stock(21, 1).await;
    feed_after(&t, &cursor, 1).await;
    // Its worker had every chance to claim (many polls); it must have sent nothing.
    for _ in 0..50 {
        tokio::time::sleep(POLL).await;
    }
    assert!(r.got().is_empty(), "the other key's worker delivered");
    live.stop().await;
    // The right service delivers it.
    let live = Live::start(t.state.clone()).await;
    until("delivered by the service with the recorded key", || {
        let r = r.clone();
        async move { !r.got().is_empty() }
    })
    .await;
    assert!(r.got().iter().all(|g| g.webhook == id));
    live.stop().await;
}

/// The leases in the library, without HTTP: one holder at a time, the cursor moved only by the
/// holder, and the log trimmed to the newest `KEEP_DELIVERIES` in the transaction that logs.
#[tokio::test]
async fn a_lease_has_one_holder_and_the_log_is_bounded() {
    use saldo::webhooks::lease::{self, Attempt};
    use saldo::webhooks::{admin, NewSubscription, KEEP_DELIVERIES};
    let dir = tempfile::tempdir().expect("dir");
    let t = app_with(settings(dir.path(), 12)).await;
    let (db, store) = (&t.db, t.state.store());
    // Only a subscription with events after its cursor is claimed.
    t.stock(1, 1).await;
    let start = "e2.0".parse::<Cursor>().expect("cursor");
    feed_after(&t, "e2.0", 1).await;
    let new = NewSubscription {
        url: "http://127.0.0.1:9/h".into(),
        types: vec![],
        after: Some(start),
    };
    let sub = admin::create(store, new, true, &"f".repeat(64))
        .await
        .expect("create");
    let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let held = lease::claim(store, a, Duration::from_secs(60), 8)
        .await
        .expect("claim");
    assert_eq!(held.len(), 1);
    let held = held.into_iter().next().expect("lease");
    assert!(lease::claim(store, b, Duration::from_secs(60), 8)
        .await
        .expect("claim")
        .is_empty());
    let attempt = Attempt {
        delivery_id: uuid::Uuid::new_v4(),
        first: held.cursor,
        last: held.cursor,
        events: 1,
        outcome: "ok",
        http_status: Some(200),
        duration: Duration::from_millis(3),
        error: None,
    };
    let n = usize::try_from(KEEP_DELIVERIES).expect("n") + 5;
    for _ in 0..n {
        assert!(lease::delivered(store, &held, held.cursor, &attempt)
            .await
            .expect("delivered"));
    }
    let kept: i64 = db
        .pool
        .get()
        .await
        .expect("connection")
        .query_one(
            "SELECT count(*) FROM webhook_deliveries WHERE webhook_id = $1",
            &[&sub.id],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(
        kept, KEEP_DELIVERIES,
        "older rows deleted as new ones are logged"
    );
    // Given back, the other holder takes it; the first one's writes no longer count.
    lease::release(store, &held).await.expect("release");
    let taken = lease::claim(store, b, Duration::from_secs(60), 8)
        .await
        .expect("claim");
    assert_eq!(taken.len(), 1);
    assert!(!lease::delivered(store, &held, held.cursor, &attempt)
        .await
        .expect("delivered"));
    assert!(!lease::renew(store, &held, Duration::from_secs(60))
        .await
        .expect("renew"));
}

/// More subscriptions than one service delivers at once: every one gets its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_subscriptions_than_workers_all_receive_everything() {
    let dir = tempfile::tempdir().expect("dir");
    let t = app_with(settings(dir.path(), 12)).await;
    let (r, addr, _stop) = receiver(200).await;
    let n = saldo_http::webhooks::worker::MAX_IN_FLIGHT * 2 + 1;
    let mut cursor = String::new();
    for i in 0..n {
        cursor = subscribe(&t, &format!("http://{addr}/s{i}"), json!([]))
            .await
            .2;
    }
    let live = Live::start(t.state.clone()).await;
    for i in 1..=5 {
        t.stock(30, i).await;
    }
    let expected = feed_after(&t, &cursor, 5).await;
    until("every subscription has every event", || {
        let r = r.clone();
        let m = expected.len();
        async move {
            let mut per: BTreeMap<String, HashSet<i64>> = BTreeMap::new();
            for g in r.got() {
                for e in g.events() {
                    per.entry(g.webhook.clone())
                        .or_default()
                        .insert(e["id"].as_i64().expect("id"));
                }
            }
            per.len() == n && per.values().all(|s| s.len() == m)
        }
    })
    .await;
    live.stop().await;
}
