//! The connection layer under abuse, through a real listener on 127.0.0.1 and raw TCP clients:
//! a flood of idle connections and slow-header clients does not keep a normal client out, and
//! the server closes them within its timeouts; a body that does not arrive answers 408; headers
//! that never finish and idle keep-alive connections are closed; at the cap, idle connections
//! make room and a connection with a request in flight is left alone.
//!
//! Timeouts here are short (about a second) and every bound on the test side is generous
//! ("within a couple of seconds" of the configured timeout): the machine may be busy.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use saldo_http::RawSettings;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{test_db_with_pool, TestDb};
use crate::support::{client, http, metric_value, state_with, Live, ADMIN};

/// Idle TCP connections of the flood.
const IDLE_FLOOD: usize = 2_000;
/// Clients sending their headers a byte at a time.
const SLOW_HEADER_CLIENTS: usize = 100;
/// The connection cap of the flood test (below the flood, so reclaim runs).
const FLOOD_CAP: u64 = 500;
/// Descriptors the flood test needs in this process (client and server ends, pool, slack).
const FLOOD_FDS: u64 = 2 * (IDLE_FLOOD as u64 + SLOW_HEADER_CLIENTS as u64) + 512;
/// Connections opened at once while building the flood, and the pause between batches (the
/// kernel's accept queue is bounded; see [`live`]).
const CONNECT_BATCH: usize = 200;
const BATCH_PAUSE: Duration = Duration::from_millis(20);
/// Listen backlog of the test server (the kernel caps it at net.core.somaxconn).
const LISTEN_BACKLOG: u32 = 4_096;
/// Time between the bytes of a slow-header client.
const SLOW_BYTE_EVERY: Duration = Duration::from_millis(500);
/// Short server timeouts for these tests.
const HEADER_MS: u64 = 1_500;
const IDLE_MS: u64 = 1_000;
const BODY_MS: u64 = 1_000;
/// What the test allows on top of a server timeout before calling a connection "not closed":
/// generous, so a busy 2-core machine does not make the test flaky.
const SLACK: Duration = Duration::from_secs(5);
/// A normal client must be answered within this while the flood is held.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// Longest wait for anything in these tests (a hung server fails instead of hanging).
const HARD_BOUND: Duration = Duration::from_secs(60);

fn raw(max_connections: Option<u64>) -> RawSettings {
    RawSettings {
        header_read_timeout_ms: HEADER_MS,
        idle_timeout_ms: IDLE_MS,
        body_read_timeout_ms: BODY_MS,
        // Long enough that only the body timeout can explain a fast answer.
        request_timeout_ms: 20_000,
        max_connections,
        ..RawSettings::default()
    }
}

async fn live(raw: RawSettings) -> (TestDb, Live) {
    let db = test_db_with_pool(8).await;
    // A backlog that holds the whole flood: a connection the kernel completes while the accept
    // queue is full can be dropped by it (SYN cookies) without the client ever knowing, and the
    // test would wait for a close the server never had a chance to make.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind loopback");
    let listener = socket.listen(LISTEN_BACKLOG).expect("listen");
    let live = Live::start_on(listener, state_with(db.pool.clone(), raw));
    (db, live)
}

/// Reads until the server closes the connection (EOF or reset); returns what was read and how
/// long after `from` it closed, or None if it stayed open for `within`.
async fn closed_within(
    stream: &mut TcpStream,
    from: Instant,
    within: Duration,
) -> Option<(Vec<u8>, Duration)> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = from + within;
    loop {
        match tokio::time::timeout_at(deadline.into(), stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some((seen, from.elapsed())),
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// Raises this process's RLIMIT_NOFILE to `need` descriptors: the soft limit, and the hard
/// limit too when it is lower and the process may raise it (root). Panics saying what to change
/// when it cannot: the flood cannot be held with fewer descriptors, and a test that returned
/// early would pass without testing anything.
fn raise_fd_limit(need: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit(RLIMIT_NOFILE)");
    if soft >= need {
        return;
    }
    if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, need, hard.max(need)) {
        panic!(
            "the flood needs RLIMIT_NOFILE >= {need} in the test process, which has {soft} \
             (hard limit {hard}) and cannot raise it ({e}): raise the hard limit (e.g. \
             `ulimit -Hn {need}` as root before cargo test) and run again"
        );
    }
}

async fn connect(addr: SocketAddr) -> (TcpStream, Instant) {
    let s = tokio::time::timeout(HARD_BOUND, TcpStream::connect(addr))
        .await
        .expect("connect in time")
        .expect("connect");
    (s, Instant::now())
}

/// A request a normal client makes during the flood, timed.
async fn normal_request(addr: SocketAddr, n: usize) -> Duration {
    let started = Instant::now();
    let order = format!("normal-{n}");
    let a = tokio::time::timeout(
        ANSWER_WITHIN,
        http(
            &client(),
            addr,
            Method::POST,
            "/v1/reservations",
            None,
            Some(json!({"order_id": order, "items": [{"product_id": 1, "quantity": 1}]})),
        ),
    )
    .await
    .unwrap_or_else(|_| panic!("a normal client is answered within {ANSWER_WITHIN:?}"));
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_idle_and_slow_header_connections_keeps_no_client_out_and_is_closed() {
    raise_fd_limit(FLOOD_FDS);
    let (_db, live) = live(raw(Some(FLOOD_CAP))).await;
    let addr = live.addr;
    let admin = http(
        &client(),
        addr,
        Method::PUT,
        "/v1/products/1/stock",
        Some(ADMIN),
        Some(json!({"count": 100})),
    )
    .await;
    assert_eq!(admin.status, StatusCode::OK, "{}", admin.text);

    // 100 clients sending a request head one byte every SLOW_BYTE_EVERY, never finishing it
    // within the header timeout; each reports how long after its connect it was closed.
    let head = b"GET /healthz HTTP/1.1\r\nHost: flood\r\nX-Slow: ".to_vec();
    let slow: Vec<_> = (0..SLOW_HEADER_CLIENTS)
        .map(|_| {
            let head = head.clone();
            tokio::spawn(async move {
                let (mut s, at) = connect(addr).await;
                let mut buf = [0u8; 256];
                // Bounded: the hard bound divided by the pace.
                for i in 0..(HARD_BOUND.as_millis() / SLOW_BYTE_EVERY.as_millis()) as usize {
                    let byte = head.get(i).copied().unwrap_or(b'a');
                    if s.write_all(&[byte]).await.is_err() {
                        return Some(at.elapsed());
                    }
                    match tokio::time::timeout(SLOW_BYTE_EVERY, s.read(&mut buf)).await {
                        Err(_) => {}
                        Ok(Ok(0)) | Ok(Err(_)) => return Some(at.elapsed()),
                        Ok(Ok(_)) => return None, // an answer to an unfinished head: wrong
                    }
                }
                None
            })
        })
        .collect();

    // 2,000 idle connections that never send a byte, opened in batches.
    let building = Instant::now();
    let mut idle = Vec::with_capacity(IDLE_FLOOD);
    for _ in 0..IDLE_FLOOD / CONNECT_BATCH {
        let batch = (0..CONNECT_BATCH).map(|_| connect(addr));
        idle.extend(futures_util::future::join_all(batch).await);
        tokio::time::sleep(BATCH_PAUSE).await;
    }
    let built_in = building.elapsed();
    let watchers: Vec<_> = idle
        .into_iter()
        .map(|(mut s, at)| {
            tokio::spawn(async move {
                closed_within(&mut s, at, HARD_BOUND)
                    .await
                    .map(|(_, took)| took)
            })
        })
        .collect();

    // While the flood is held, normal clients are answered within a couple of seconds.
    let mut took = Vec::new();
    for n in 0..3 {
        took.push(normal_request(addr, n).await);
    }
    eprintln!(
        "flood of {IDLE_FLOOD} idle + {SLOW_HEADER_CLIENTS} slow-header connections opened in {} ms; normal requests took {:?}",
        built_in.as_millis(),
        took
    );

    // Every idle connection is closed by the server, each within the header timeout of its
    // accept (or earlier, reclaimed at the cap), plus slack.
    let bound = Duration::from_millis(HEADER_MS) + SLACK;
    let (mut slowest, mut open) = (Duration::ZERO, 0);
    for w in watchers {
        match w.await.expect("watcher") {
            Some(took) => slowest = slowest.max(took),
            None => open += 1,
        }
    }
    assert_eq!(open, 0, "idle connections the server never closed");
    eprintln!(
        "slowest idle connection closed {} ms after its connect",
        slowest.as_millis()
    );
    assert!(
        slowest <= bound,
        "idle connections closed within {bound:?} of their connect (slowest {slowest:?})"
    );
    let (mut slowest, mut open) = (Duration::ZERO, 0);
    for s in slow {
        match s.await.expect("slow client") {
            Some(took) => slowest = slowest.max(took),
            None => open += 1,
        }
    }
    assert_eq!(
        open, 0,
        "slow-header connections the server never closed (or answered)"
    );
    eprintln!(
        "slowest slow-header connection closed {} ms after its connect",
        slowest.as_millis()
    );
    assert!(
        slowest <= bound,
        "slow-header connections closed within {bound:?} (slowest {slowest:?})"
    );

    // Still serving, and the metrics tell why connections closed.
    normal_request(addr, 99).await;
    let metrics = http(&client(), addr, Method::GET, "/metrics", None, None).await;
    let closed = |reason: &str| {
        metric_value(
            &metrics.text,
            &format!("saldo_http_connections_closed_total{{reason=\"{reason}\"}}"),
        )
    };
    assert!(
        closed("reclaimed") > 0.0,
        "the cap was reached and idle connections were reclaimed"
    );
    assert!(
        closed("reclaimed") + closed("header_timeout") + closed("idle") + closed("refused")
            >= (IDLE_FLOOD + SLOW_HEADER_CLIENTS) as f64,
        "{}",
        metrics.text
    );
    live.audit_clean_then_stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_does_not_arrive_in_time_answers_408_problem_and_closes() {
    let (_db, live) = live(raw(None)).await;
    let (mut s, _) = connect(live.addr).await;
    s.write_all(
        b"POST /v1/reservations HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"order_id\"",
    )
    .await
    .expect("write");
    let sent = Instant::now();
    let (bytes, took) = closed_within(&mut s, sent, Duration::from_millis(BODY_MS) + SLACK)
        .await
        .expect("answered and closed within the body timeout");
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    let lower = text.to_ascii_lowercase();
    assert!(
        lower.contains("content-type: application/problem+json"),
        "{text}"
    );
    assert!(lower.contains("connection: close"), "{text}");
    assert!(text.contains("urn:saldo:problem:request-timeout"), "{text}");
    eprintln!("408 after {} ms", took.as_millis());
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_that_never_finish_are_closed_within_the_header_timeout() {
    let (_db, live) = live(raw(None)).await;
    let (mut s, at) = connect(live.addr).await;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n")
        .await
        .expect("write");
    let (bytes, took) = closed_within(&mut s, at, Duration::from_millis(HEADER_MS) + SLACK)
        .await
        .expect("closed within the header timeout");
    assert!(
        bytes.is_empty(),
        "no answer to a head that never ended: {bytes:?}"
    );
    eprintln!("unfinished head closed after {} ms", took.as_millis());
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    // A header timeout far above the idle one: only the idle timeout can close it in time.
    let (_db, live) = live(RawSettings {
        header_read_timeout_ms: 60_000,
        ..raw(None)
    })
    .await;
    let (mut s, _) = connect(live.addr).await;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .expect("write");
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(HARD_BOUND, s.read(&mut buf))
        .await
        .expect("answer in time")
        .expect("read");
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
        "answered, connection kept alive"
    );
    let answered = Instant::now();
    let (_, took) = closed_within(&mut s, answered, Duration::from_millis(IDLE_MS) + SLACK)
        .await
        .expect("closed within the idle timeout");
    eprintln!(
        "idle keep-alive connection closed after {} ms",
        took.as_millis()
    );
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_an_idle_connection_makes_room_and_a_busy_one_is_left_alone() {
    // Timeouts long enough that only the cap can close anything during the test.
    let (_db, live) = live(RawSettings {
        header_read_timeout_ms: 30_000,
        idle_timeout_ms: 30_000,
        body_read_timeout_ms: 30_000,
        ..raw(Some(2))
    })
    .await;
    let addr = live.addr;
    // Busy: headers sent, body still coming (a request in flight).
    let (mut busy, _) = connect(addr).await;
    busy.write_all(
        b"POST /v1/reservations HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 80\r\n\r\n{",
    )
    .await
    .expect("write");
    // Idle: one request answered, then nothing.
    let (mut idle, _) = connect(addr).await;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .expect("write");
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(HARD_BOUND, idle.read(&mut buf))
        .await
        .expect("answer in time")
        .expect("read");
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));

    // A third client at the cap of two: answered, because the idle connection made room.
    let started = Instant::now();
    let a = tokio::time::timeout(
        ANSWER_WITHIN,
        http(&client(), addr, Method::GET, "/healthz", None, None),
    )
    .await
    .expect("the new client is answered in time");
    assert_eq!(a.status, StatusCode::OK);
    eprintln!(
        "new client at the cap answered in {} ms",
        started.elapsed().as_millis()
    );
    assert!(
        closed_within(&mut idle, Instant::now(), SLACK)
            .await
            .is_some(),
        "the idle connection was reclaimed"
    );
    // The busy connection is still open: its request completes when the body arrives.
    let rest = format!(
        "{:<79}",
        r#""order_id": "busy", "items": [{"product_id": 1, "quantity": 1}]}"#
    );
    busy.write_all(rest.as_bytes()).await.expect("write rest");
    let n = tokio::time::timeout(HARD_BOUND, busy.read(&mut buf))
        .await
        .expect("answer in time")
        .expect("read");
    let text = String::from_utf8_lossy(&buf[..n]);
    // Product 1 does not exist: a 404 problem, which proves the request ran to its end.
    assert!(text.starts_with("HTTP/1.1 404"), "{text}");
    live.stop().await;
}

/// Pipelined requests whose answers are never read fill both socket buffers and leave hyper
/// blocked writing a response: a request in flight forever, unless the server bounds it.
const PIPELINED: usize = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_its_answers_is_dropped_after_the_longest_request_time() {
    let (_db, live) = live(RawSettings {
        request_timeout_ms: 1_000,
        body_read_timeout_ms: 1_000,
        ..raw(None)
    })
    .await;
    // request timeout + body timeout + the server's margin
    let request_max = Duration::from_millis(2_000) + saldo_http::server::DRAIN_MARGIN;
    let (mut s, _) = connect(live.addr).await;
    let one = b"GET /openapi.json HTTP/1.1\r\nHost: t\r\n\r\n";
    let all: Vec<u8> = one
        .iter()
        .copied()
        .cycle()
        .take(one.len() * PIPELINED)
        .collect();
    s.write_all(&all).await.expect("write the pipeline");
    let sent = Instant::now();
    // Not reading: the server is stuck writing an answer.
    tokio::time::sleep(request_max).await;
    let (bytes, took) = closed_within(&mut s, sent, request_max + SLACK)
        .await
        .expect("the stalled connection was dropped by the server");
    let answered = String::from_utf8_lossy(&bytes)
        .matches("HTTP/1.1 200")
        .count();
    eprintln!(
        "stalled connection closed {} ms after the pipeline; {answered} of {PIPELINED} answers read",
        took.as_millis()
    );
    assert!(answered < PIPELINED, "the pipeline was cut short");
    live.stop().await;
}
