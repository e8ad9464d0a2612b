//! The event feed and a signed webhook receiver through both of the fault suite's kills, in one
//! run: 32 clients reserve and transfer against the real `saldo serve` for three phases
//! (20 s each, × `SALDO_FAULTS_SCALE`); its PostgreSQL is killed -9 after the first, the service
//! itself after the second (a new one takes over the same data directory). A follower reads the
//! feed through the library all along, and a receiver on 127.0.0.1 takes every webhook request,
//! verifies its signature and answers 503 to one request in ten (so batches are redelivered).
//!
//! At the end, after every unknown outcome is settled by replay: the books balance; the
//! follower read every committed event exactly once; the receiver got every committed event at
//! least once and, once duplicates are dropped by event id, exactly once, each stream's events
//! arriving in position order without a gap, and none for a refused operation.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use saldo::events::Event;
use saldo_lab::bench::webhook_probe::verifies;
use serde_json::json;

use super::fault_events::{self, Follower};
use super::faults::{
    acks_per_phase, check_books, check_feed, done_of, http, replay, set_up, temp_root, Load,
    Service, ADMIN_TOKEN,
};

/// Load before the PostgreSQL kill, between the kills, and after the service kill.
const PHASE: Duration = Duration::from_secs(20);
/// How long the receiver may take to catch up once the load has stopped.
const DELIVERY_CATCH_UP: Duration = Duration::from_secs(120);
/// One request in this many is answered 503 (retried by the service).
const REFUSE_ONE_IN: usize = 10;
/// The service's flags: loopback targets allowed, quick retries, attempts enough that the
/// receiver's 503s never turn the subscription `failing`.
const SERVE_FLAGS: [&str; 5] = [
    "--webhook-allow-private-targets",
    "--webhook-backoff-base-ms",
    "50",
    "--webhook-max-attempts",
    "100",
];

/// What the receiver got, in arrival order.
#[derive(Default)]
struct Received {
    /// The events of every accepted (200) request, duplicates included.
    events: Vec<Event>,
    /// Their distinct ids.
    ids: HashSet<i64>,
    requests: usize,
    refused: usize,
    bad_signatures: usize,
}

struct Receiver {
    secret: Mutex<String>,
    got: Mutex<Received>,
    seen_requests: AtomicUsize,
}

/// Answers one webhook request: checks `Saldo-Signature` as a receiver would (HMAC-SHA256 of
/// `"<t>.<body>"` with the subscription's secret, `t` within 5 minutes), refuses one in ten.
async fn hook(State(r): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let n = r.seen_requests.fetch_add(1, Ordering::SeqCst);
    let signature = headers
        .get("saldo-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let secret = r.secret.lock().expect("lock").clone();
    let mut got = r.got.lock().expect("lock");
    got.requests += 1;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    if !verifies(&secret, signature, &body, now) {
        got.bad_signatures += 1;
        return StatusCode::UNAUTHORIZED;
    }
    if n % REFUSE_ONE_IN == REFUSE_ONE_IN - 1 {
        got.refused += 1;
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    #[derive(serde::Deserialize)]
    struct Body {
        events: Vec<Event>,
    }
    match serde_json::from_slice::<Body>(&body) {
        Ok(b) => {
            got.ids.extend(b.events.iter().map(|e| e.id));
            got.events.extend(b.events);
            StatusCode::OK
        }
        Err(_) => StatusCode::BAD_REQUEST,
    }
}

/// Starts the receiver on 127.0.0.1; its task ends with the test's runtime.
async fn start_receiver() -> (Arc<Receiver>, SocketAddr) {
    let r = Arc::new(Receiver {
        secret: Mutex::new(String::new()),
        got: Mutex::new(Received::default()),
        seen_requests: AtomicUsize::new(0),
    });
    let router = axum::Router::new()
        .route("/hooks/saldo", axum::routing::post(hook))
        .with_state(r.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (r, addr)
}

/// Subscribes the receiver to every type from the feed's start; keeps the secret it is shown.
async fn subscribe(service: &Service, receiver: &Receiver, at: SocketAddr) {
    let body = json!({ "url": format!("http://{at}/hooks/saldo"), "after": "e2.0" });
    let (status, answer) = http(
        &service.addr,
        "POST",
        "/v1/admin/webhooks",
        ADMIN_TOKEN,
        Some(&body),
    )
    .await
    .expect("subscribe");
    assert_eq!(status, 201, "{answer}");
    let secret = answer["secret"].as_str().expect("secret").to_owned();
    *receiver.secret.lock().expect("lock") = secret;
}

/// Lets the load run for [`PHASE`], then until `acks_per_phase()` more were acknowledged.
async fn run_phase(load: &Load, what: &str) {
    tokio::time::sleep(PHASE * scale()).await;
    load.wait_acks(acks_per_phase(), what).await;
}

fn scale() -> u32 {
    std::env::var("SALDO_FAULTS_SCALE")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(1)
        .clamp(1, 100)
}

/// Waits (bounded) until the receiver has every one of the `committed` events at least once;
/// answers them deduplicated by id, in first-arrival order, and how many arrived in all.
async fn delivered(receiver: &Receiver, committed: usize) -> (Vec<Event>, usize) {
    let deadline = Instant::now() + DELIVERY_CATCH_UP;
    loop {
        let distinct = receiver.got.lock().expect("lock").ids.len();
        if distinct >= committed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the receiver has {distinct} of {committed} events after {DELIVERY_CATCH_UP:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let got = receiver.got.lock().expect("lock");
    let mut ids = HashSet::new();
    let unique: Vec<Event> = got
        .events
        .iter()
        .filter(|e| ids.insert(e.id))
        .cloned()
        .collect();
    (unique, got.events.len())
}

/// Each stream's events arrived (first arrivals) in position order, one after the other.
fn check_arrival_order(first_arrivals: &[Event]) {
    let mut last: HashMap<&str, i64> = HashMap::new();
    for e in first_arrivals {
        if let Some(previous) = last.insert(e.stream.as_str(), e.position) {
            assert_eq!(
                e.position,
                previous + 1,
                "{}: position {} arrived after {previous}",
                e.stream,
                e.position
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_and_a_webhook_receiver_get_every_change_through_both_kills() {
    let started = Instant::now();
    let step = |what: &str| eprintln!("{:>6.1}s {what}", started.elapsed().as_secs_f64());
    let root = temp_root();
    let (receiver, at) = start_receiver().await;
    let mut first = Service::start(root.path(), &SERVE_FLAGS);
    subscribe(&first, &receiver, at).await;
    set_up(&first.addr).await;
    let follower = Follower::start(&first.db_url);
    let load = Load::start(&first.addr);
    run_phase(&load, "load before PostgreSQL is killed").await;

    first.kill_postmaster_and_recover().await;
    run_phase(&load, "load after PostgreSQL came back").await;

    let second = first.kill9_and_restart(root.path(), &SERVE_FLAGS).await;
    *load.addr.write().expect("addr") = second.addr.clone();
    run_phase(&load, "load on the new service").await;
    let mut ops = load.finish().await;
    step(&format!("load done: {} requests", ops.len()));

    replay(&second.addr, &mut ops, false).await;
    check_books(&second, &ops).await;
    step("books checked");
    check_feed(&second, follower, &ops).await;
    step("feed checked");

    let db = second.db().await;
    let committed: i64 = db
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .expect("count")
        .get(0);
    let (first_arrivals, arrived) =
        delivered(&receiver, usize::try_from(committed).expect("count")).await;
    step("the receiver has every event");
    check_arrival_order(&first_arrivals);
    let mut by_feed_order = first_arrivals;
    by_feed_order.sort_by_key(|e| e.seq);
    // Exactly once after dropping duplicates, gap-free streams, none for a refused operation,
    // the last states as the rows say.
    fault_events::check(&db, &by_feed_order, &done_of(&ops)).await;
    let got = receiver.got.lock().expect("lock");
    assert_eq!(
        got.bad_signatures, 0,
        "requests whose signature did not verify"
    );
    assert!(
        got.refused > 0,
        "the receiver refused nothing: no redelivery was tried"
    );
    eprintln!(
        "the receiver got {} events in {} requests ({} refused), {} once deduplicated",
        arrived,
        got.requests,
        got.refused,
        by_feed_order.len()
    );
}
