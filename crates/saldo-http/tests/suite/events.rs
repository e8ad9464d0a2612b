//! The event feed over HTTP: `GET /v1/events` pages with its cursor and filters, refuses bad
//! input with 4xx problems and an expired cursor with 410; `GET /v1/events/stream` (through a
//! real listener) resumes after `Last-Event-ID` with exactly the events after it, cuts a client
//! whose buffer is full with a last `cut` event naming the cursor to resume from, and answers
//! 503 `too-many-streams` over its limit.

use std::time::Duration;

use axum::http::{header, Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use saldo_http::RawSettings;
use serde_json::{json, Value};

use crate::harness::test_db;
use crate::support::{client, http, spawn_app, state_with, Live, TestApp, ADMIN};

/// Bounded waits: the feed follows commits once every older transaction on the server ended
/// (other tests' included), and a stream's messages arrive within a poll.
const WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);

/// Sets product `p`'s count (one `stock.changed` event each).
async fn count(app: &TestApp, p: i64, n: i64) {
    let a = app
        .admin(
            Method::PUT,
            &format!("/v1/products/{p}/stock"),
            Some(json!({ "count": n })),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
}

/// The whole feed from the start once it holds at least `n` events (bounded wait).
async fn feed_of_at_least(app: &TestApp, n: usize) -> Vec<Value> {
    let until = tokio::time::Instant::now() + WAIT;
    loop {
        let a = app.get("/v1/events?after=start&limit=1000").await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
        let events = a.body["events"].as_array().expect("events").clone();
        if events.len() >= n || tokio::time::Instant::now() > until {
            assert!(events.len() >= n, "{} events, wanted {n}", events.len());
            return events;
        }
        tokio::time::sleep(POLL).await;
    }
}

fn cursors(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["cursor"].as_str().expect("cursor").to_owned())
        .collect()
}

/// Four events: `stock.changed` of product 1 (count), of product 1 and `reservation.created`
/// of order o-1 (the reservation), `stock.changed` of product 2; the whole feed once in it.
async fn four_events(app: &TestApp) -> Vec<Value> {
    count(app, 1, 5).await;
    let r = app.reserve("o-1", &[(1, 2)]).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    count(app, 2, 3).await;
    // stock.changed ×3 (1, 1 by the reservation, 2) and reservation.created.
    let all = feed_of_at_least(app, 4).await;
    assert_eq!(all.len(), 4, "{all:?}");
    let types: Vec<&str> = all
        .iter()
        .map(|e| e["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(types.iter().filter(|t| **t == "stock.changed").count(), 3);
    assert!(types.contains(&"reservation.created"), "{types:?}");
    all
}

#[tokio::test]
async fn the_feed_pages_after_its_cursor() {
    let app = spawn_app().await;
    let all = four_events(&app).await;
    // Pages of two, following `next`, give the same events in the same order.
    let mut paged = Vec::new();
    let mut after = "start".to_owned();
    for _ in 0..10 {
        let a = app.get(&format!("/v1/events?after={after}&limit=2")).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
        let page = a.body["events"].as_array().expect("events").clone();
        after = a.body["next"].as_str().expect("next").to_owned();
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 2);
        paged.extend(page);
    }
    assert_eq!(cursors(&paged), cursors(&all));
    assert_eq!(after, all[3]["cursor"], "next ends at the last event");
}

#[tokio::test]
async fn the_feed_filters_by_type_and_stream_and_starts_at_its_end() {
    let app = spawn_app().await;
    four_events(&app).await;
    // Filters: one type, types repeated and comma-separated, one stream.
    let only = |q: &str| {
        let q = q.to_owned();
        let app = &app;
        async move {
            let a = app.get(&format!("/v1/events?{q}")).await;
            assert_eq!(a.status, StatusCode::OK, "{q}: {}", a.text);
            a.body["events"].as_array().expect("events").len()
        }
    };
    assert_eq!(only("type=reservation.created").await, 1);
    assert_eq!(only("type=reservation.created&type=stock.changed").await, 4);
    assert_eq!(only("type=reservation.created,stock.changed").await, 4);
    assert_eq!(only("stream=product:1").await, 2);
    assert_eq!(only("stream=order:o-1&type=reservation.created").await, 1);
    assert_eq!(only("stream=product:99").await, 0);

    // The end: nothing after it until something new commits.
    let end = app.get("/v1/events?after=end").await;
    assert_eq!(end.status, StatusCode::OK, "{}", end.text);
    assert_eq!(end.body["events"], json!([]));
    let next = end.body["next"].as_str().expect("next").to_owned();
    count(&app, 3, 1).await;
    let until = tokio::time::Instant::now() + WAIT;
    let fresh = loop {
        let a = app.get(&format!("/v1/events?after={next}")).await;
        let page = a.body["events"].as_array().expect("events").clone();
        if !page.is_empty() || tokio::time::Instant::now() > until {
            break page;
        }
        tokio::time::sleep(POLL).await;
    };
    assert_eq!(fresh.len(), 1, "{fresh:?}");
    assert_eq!(fresh[0]["stream"], "product:3");
}

#[tokio::test]
async fn bad_feed_requests_are_problems_and_an_expired_cursor_is_gone() {
    let app = spawn_app().await;
    for q in [
        "limit=0",
        "limit=1001",
        "limit=ten",
        "type=stock.exploded",
        "type=stock.changed,nope",
        "stream=planet:1",
        "stream=product:",
        "cursor=e2.1",
        "after=start&after=end",
    ] {
        let a = app.get(&format!("/v1/events?{q}")).await;
        a.assert_problem(422, "invalid-input");
    }
    // A cursor the feed never handed out has its own type: start again without one.
    for q in ["after=e1.2", "after=nonsense"] {
        let a = app.get(&format!("/v1/events?{q}")).await;
        a.assert_problem(422, "cursor-invalid");
    }
    let many = vec!["type=stock.changed"; saldo::events::MAX_FILTER_TYPES + 1].join("&");
    app.get(&format!("/v1/events?{many}"))
        .await
        .assert_problem(422, "invalid-input");

    count(&app, 1, 1).await;
    count(&app, 1, 2).await;
    let all = feed_of_at_least(&app, 2).await;
    let first = all[0]["cursor"].as_str().expect("cursor").to_owned();
    let store = app.state.store().clone();
    let pruned = saldo::events::prune(&store, Duration::ZERO)
        .await
        .expect("prune");
    assert_eq!(pruned, 2);
    let gone = app.get(&format!("/v1/events?after={first}")).await;
    gone.assert_problem(410, "cursor-expired");
    let detail = gone.body["detail"].as_str().expect("detail");
    assert!(
        detail.contains("after=end") && detail.contains("/v1/products"),
        "{detail}"
    );
    assert_eq!(gone.body["cursor"], first.as_str());
    // From the start of what is kept: nothing, and a `next` that still works.
    let kept = app.get("/v1/events").await;
    assert_eq!(kept.status, StatusCode::OK, "{}", kept.text);
    assert_eq!(kept.body["events"], json!([]));
}

/// One Server-Sent Events message.
#[derive(Debug, Clone, Default, PartialEq)]
struct Message {
    id: Option<String>,
    event: Option<String>,
    data: String,
}

/// Reads the messages of an event stream (comments counted, not returned).
struct SseReader {
    body: Incoming,
    buf: String,
    /// Comment-only blocks seen (heartbeats).
    comments: usize,
}

impl SseReader {
    /// The next message, or `None` when the server ended the stream.
    async fn next(&mut self) -> Option<Message> {
        loop {
            if let Some(at) = self.buf.find("\n\n") {
                let raw: String = self.buf.drain(..at + 2).collect();
                let mut m = Message::default();
                let mut any = false;
                for line in raw.lines() {
                    let (field, value) = line.split_once(':').unwrap_or((line, ""));
                    let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
                    match field {
                        "" => continue,
                        "id" => m.id = Some(value),
                        "event" => m.event = Some(value),
                        "data" => m.data.push_str(&value),
                        _ => {}
                    }
                    any = true;
                }
                if any {
                    return Some(m);
                }
                self.comments += 1;
                continue;
            }
            let frame = tokio::time::timeout(WAIT, self.body.frame())
                .await
                .expect("a message in time")?
                .expect("stream body");
            if let Ok(data) = frame.into_data() {
                self.buf
                    .push_str(std::str::from_utf8(&data).expect("utf-8"));
            }
        }
    }
}

/// Opens `GET path` as an event stream; a non-200 answer comes back as its status and body.
async fn open(
    addr: std::net::SocketAddr,
    path: &str,
    last_event_id: Option<&str>,
) -> Result<SseReader, (StatusCode, axum::http::HeaderMap, Value)> {
    let mut request = hyper::Request::get(format!("http://{addr}{path}"));
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    let request = request.body(Full::new(Bytes::new())).expect("request");
    let response = tokio::time::timeout(WAIT, client().request(request))
        .await
        .expect("answer in time")
        .expect("http");
    let status = response.status();
    if status != StatusCode::OK {
        let headers = response.headers().clone();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        return Err((
            status,
            headers,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ));
    }
    assert_eq!(
        response.headers().get(header::CONTENT_TYPE).expect("type"),
        "text/event-stream"
    );
    Ok(SseReader {
        body: response.into_body(),
        buf: String::new(),
        comments: 0,
    })
}

/// A live service over a fresh database with `raw` settings.
async fn live(raw: RawSettings) -> (Live, crate::harness::TestDb) {
    let db = test_db().await;
    let state = state_with(db.pool.clone(), raw);
    (Live::start(state).await, db)
}

async fn live_count(live: &Live, p: i64, n: i64) {
    let a = http(
        &client(),
        live.addr,
        Method::PUT,
        &format!("/v1/products/{p}/stock"),
        Some(ADMIN),
        Some(json!({ "count": n })),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
}

/// The feed through the live service once it holds at least `n` events.
async fn live_feed(live: &Live, n: usize) -> Vec<Value> {
    let until = tokio::time::Instant::now() + WAIT;
    loop {
        let a = http(
            &client(),
            live.addr,
            Method::GET,
            "/v1/events?limit=1000",
            None,
            None,
        )
        .await;
        let events = a.body["events"].as_array().expect("events").clone();
        if events.len() >= n || tokio::time::Instant::now() > until {
            assert!(events.len() >= n, "{} events, wanted {n}", events.len());
            return events;
        }
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test]
async fn a_stream_resumes_after_last_event_id_with_exactly_what_follows() {
    let (live, _db) = live(RawSettings::default()).await;
    for n in 1..=5 {
        live_count(&live, 1, n).await;
    }
    let feed = live_feed(&live, 5).await;
    let second = feed[1]["cursor"].as_str().expect("cursor");
    // The header wins over `after`.
    let mut s = open(live.addr, "/v1/events/stream?after=end", Some(second))
        .await
        .expect("stream");
    let mut got = Vec::new();
    for _ in 0..3 {
        let m = s.next().await.expect("an event");
        assert_eq!(m.event.as_deref(), Some("stock.changed"), "{m:?}");
        let data: Value = serde_json::from_str(&m.data).expect("json");
        assert_eq!(m.id.as_deref(), data["cursor"].as_str());
        got.push(data);
    }
    assert_eq!(cursors(&got), cursors(&feed[2..]));
    // What commits now arrives live, in order.
    live_count(&live, 1, 6).await;
    live_count(&live, 2, 1).await;
    let a = s.next().await.expect("live event");
    let b = s.next().await.expect("live event");
    let a: Value = serde_json::from_str(&a.data).expect("json");
    let b: Value = serde_json::from_str(&b.data).expect("json");
    assert_eq!(
        (a["stream"].as_str(), a["position"].as_i64()),
        (Some("product:1"), Some(6))
    );
    assert_eq!(b["stream"], "product:2");
    drop(s);

    // Neither `after` nor the header: from the end, so only what commits after it opened.
    let mut s = open(live.addr, "/v1/events/stream", None)
        .await
        .expect("stream");
    live_count(&live, 9, 1).await;
    let m = s.next().await.expect("an event");
    let data: Value = serde_json::from_str(&m.data).expect("json");
    assert_eq!(data["stream"], "product:9", "{m:?}");
    drop(s);

    // Bad starts are problems before any stream.
    for (path, id, kind) in [
        ("/v1/events/stream", Some("e9.1"), "cursor-invalid"),
        ("/v1/events/stream?after=bogus", None, "cursor-invalid"),
        ("/v1/events/stream?type=nope", None, "invalid-input"),
        ("/v1/events/stream?limit=5", None, "invalid-input"),
    ] {
        let (status, _, body) = open(live.addr, path, id).await.err().expect("refused");
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{path}: {body}");
        assert_eq!(body["type"], format!("urn:saldo:problem:{kind}"), "{path}");
    }
    live.stop().await;
}

#[tokio::test]
async fn a_client_whose_buffer_fills_is_cut_with_the_cursor_to_resume_from() {
    const EVENTS: usize = 10;
    let (live, _db) = live(RawSettings {
        event_stream_buffer: 2,
        ..RawSettings::default()
    })
    .await;
    for n in 1..=EVENTS as i64 {
        live_count(&live, 1, n).await;
    }
    let feed = live_feed(&live, EVENTS).await;
    // Each stream reads the rest in one page: two fit, then the cut. Resuming from each cut's
    // cursor reads every event exactly once.
    let mut got: Vec<Value> = Vec::new();
    let mut resume = "start".to_owned();
    for _ in 0..EVENTS {
        if got.len() == EVENTS {
            break;
        }
        let mut s = open(live.addr, "/v1/events/stream", Some(&resume))
            .await
            .expect("stream");
        for _ in 0..2 {
            let m = s.next().await.expect("an event");
            assert_eq!(m.event.as_deref(), Some("stock.changed"), "{m:?}");
            got.push(serde_json::from_str(&m.data).expect("json"));
        }
        if got.len() == EVENTS {
            break;
        }
        let cut = s.next().await.expect("the cut");
        assert_eq!(cut.event.as_deref(), Some("cut"), "{cut:?}");
        let data: Value = serde_json::from_str(&cut.data).expect("json");
        assert_eq!(data["reason"], "buffer-full");
        assert_eq!(data["resume_after"], got.last().expect("one")["cursor"]);
        assert_eq!(cut.id.as_deref(), data["resume_after"].as_str());
        assert_eq!(s.next().await, None, "the stream ends after the cut");
        resume = data["resume_after"].as_str().expect("cursor").to_owned();
    }
    assert_eq!(cursors(&got), cursors(&feed[..EVENTS]));
    live.stop().await;
}

#[tokio::test]
async fn streams_over_the_limit_are_refused_until_one_closes() {
    let (live, _db) = live(RawSettings {
        max_event_streams: 1,
        ..RawSettings::default()
    })
    .await;
    let first = open(live.addr, "/v1/events/stream", None)
        .await
        .expect("stream");
    let (status, headers, body) = open(live.addr, "/v1/events/stream", None)
        .await
        .err()
        .expect("refused");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["type"], "urn:saldo:problem:too-many-streams");
    assert_eq!(body["limit"], 1);
    assert!(headers.contains_key(header::RETRY_AFTER));
    // The page reads are not streams: still served.
    let page = http(&client(), live.addr, Method::GET, "/v1/events", None, None).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    // Closing the first frees its slot once its poller sees it gone.
    drop(first);
    let until = tokio::time::Instant::now() + WAIT;
    let second = loop {
        match open(live.addr, "/v1/events/stream", None).await {
            Ok(s) => break s,
            Err((status, ..)) => {
                assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
                assert!(
                    tokio::time::Instant::now() < until,
                    "the slot was never freed"
                );
                tokio::time::sleep(POLL).await;
            }
        }
    };
    drop(second);
    live.stop().await;
}

#[tokio::test]
async fn a_stream_ends_at_its_lifetime_and_at_shutdown_with_its_resume_cursor() {
    let (live, _db) = live(RawSettings {
        event_stream_lifetime_s: 1,
        ..RawSettings::default()
    })
    .await;
    let mut s = open(live.addr, "/v1/events/stream?after=start", None)
        .await
        .expect("stream");
    let cut = s.next().await.expect("the cut");
    assert_eq!(cut.event.as_deref(), Some("cut"), "{cut:?}");
    let data: Value = serde_json::from_str(&cut.data).expect("json");
    assert_eq!(data["reason"], "lifetime");
    // Nothing was read: the cursor of where it started (the start of an empty feed).
    let resume = data["resume_after"].as_str().expect("cursor");
    assert!(resume.parse::<saldo::events::Cursor>().is_ok(), "{resume}");
    assert_eq!(s.next().await, None);
    live.stop().await;

    // Shutdown: the stream is told, and the drain does not wait for it.
    let (live, _db) = live_with_default().await;
    let mut s = open(live.addr, "/v1/events/stream", None)
        .await
        .expect("stream");
    let stopping = tokio::spawn(live.stop());
    let cut = s.next().await.expect("the cut");
    let data: Value = serde_json::from_str(&cut.data).expect("json");
    assert_eq!(data["reason"], "shutdown", "{cut:?}");
    assert_eq!(s.next().await, None);
    stopping.await.expect("stopped");
}

async fn live_with_default() -> (Live, crate::harness::TestDb) {
    live(RawSettings::default()).await
}

/// A quiet stream outlives the stall limit of the connection layer (request + body timeouts +
/// the margin: 10.1 s here; the request timeout stays long enough for a loaded machine's
/// requests): its heartbeats (comment lines, sent often enough for that limit)
/// are progress, so the connection is kept and an event committed after that limit still
/// arrives.
#[tokio::test]
async fn a_quiet_stream_is_not_taken_for_a_stalled_response() {
    let (live, _db) = live(RawSettings {
        request_timeout_ms: 5_000,
        body_read_timeout_ms: 100,
        idle_timeout_ms: 1_000,
        // The connection looks at its deadlines again after these: well before the stall limit.
        header_read_timeout_ms: 1_000,
        ..RawSettings::default()
    })
    .await;
    let mut s = open(live.addr, "/v1/events/stream", None)
        .await
        .expect("stream");
    let stall = Duration::from_millis(5_100) + saldo_http::server::DRAIN_MARGIN;
    tokio::time::sleep(stall + Duration::from_secs(2)).await;
    live_count(&live, 1, 1).await;
    let m = s.next().await.expect("the event, on the same connection");
    assert_eq!(m.event.as_deref(), Some("stock.changed"), "{m:?}");
    // Heartbeats every half of the stall limit (5.05 s here): some came in the 12.1 s of quiet.
    assert!(s.comments >= 1, "{} heartbeats", s.comments);
    drop(s);
    live.stop().await;
}

/// The service sequences the feed in the background: with no reader at all, a committed
/// change reaches the feed (its `last_seq` moves) within a bounded wait.
#[tokio::test]
async fn the_service_sequences_the_feed_without_readers() {
    let (live, db) = live(RawSettings::default()).await;
    live_count(&live, 1, 1).await;
    let client = db.pool.get().await.expect("client");
    let until = tokio::time::Instant::now() + WAIT;
    loop {
        let last: i64 = client
            .query_one("SELECT last_seq FROM feed_state", &[])
            .await
            .expect("feed state")
            .get(0);
        if last >= 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "nothing sequenced the feed"
        );
        tokio::time::sleep(POLL).await;
    }
    live.stop().await;
}

/// The service prunes the feed past `--event-retention` (its first round runs at start): events
/// older than the retention go, a fresh one stays.
#[tokio::test]
async fn the_service_prunes_events_past_the_retention() {
    let db = test_db().await;
    let state = state_with(db.pool.clone(), RawSettings::default());
    let store = state.store().clone();
    for n in 1..=3 {
        saldo::stock::admin::set_count(&store, saldo::domain::ProductId::new(1).expect("id"), n)
            .await
            .expect("count");
    }
    let until = tokio::time::Instant::now() + WAIT;
    let all = loop {
        let page = saldo::events::read(&store, None, 10, &saldo::events::Filter::default())
            .await
            .expect("read");
        if page.events.len() == 3 || tokio::time::Instant::now() > until {
            break page.events;
        }
        tokio::time::sleep(POLL).await;
    };
    assert_eq!(all.len(), 3);
    let client = db.pool.get().await.expect("client");
    // The first two are older than the default retention (7 days).
    client
        .execute(
            "UPDATE events SET at = at - interval '8 days' WHERE position <= 2",
            &[],
        )
        .await
        .expect("age them");
    let live = Live::start(state).await;
    let until = tokio::time::Instant::now() + WAIT;
    loop {
        let pruned: i64 = client
            .query_one("SELECT pruned_seq FROM feed_state", &[])
            .await
            .expect("feed state")
            .get(0);
        if pruned >= all[1].seq {
            assert_eq!(pruned, all[1].seq, "the fresh event stays");
            break;
        }
        assert!(tokio::time::Instant::now() < until, "nothing pruned");
        tokio::time::sleep(POLL).await;
    }
    let kept: i64 = client
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(kept, 1);
    live.stop().await;
}
