//! One accepted connection and what the server knows about it. Each connection is served by
//! hyper's HTTP/1.1 state machine inside a small supervisor that owns its timeouts:
//!
//! - **header read**: from the first byte of a request (from the accept, for a new connection)
//!   to the end of its headers; past it the connection is closed (nginx's
//!   `client_header_timeout`). hyper's own header timer is not used: it restarts whenever hyper
//!   waits for a head, so it would also close idle keep-alive connections and make the idle
//!   timeout meaningless.
//! - **idle**: a connection with no request in flight and no byte of a new one is closed after
//!   the idle timeout (nginx's `keepalive_timeout`).
//! - **reclaim**: the accept loop may ask a connection with no request in flight to close so a
//!   new one can be served (see [`Registry::reclaim`]).
//! - **shutdown**: the server asks every connection to finish its request in flight and close.
//! - **stall**: a request in flight with no byte of its response written for longer than the
//!   request and body timeouts together (plus a margin) can only be a response its client does
//!   not read; the connection is dropped. Bytes written restart that clock, so a long response
//!   that keeps moving (an event stream with its heartbeats) is not a stall.
//!
//! The state the accept loop reads is three atomics per connection ([`ConnState`]): requests in
//! flight, whether a request head is being read, and since when (ms on the server's clock). A
//! `Notify` wakes the supervisor when that state moves a deadline earlier or a reclaim is asked.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::Router;
use hyper::body::{Bytes, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{watch, Notify};
use tower::ServiceExt;

/// Metric names of the connection layer.
pub const CONNECTIONS_OPEN: &str = "saldo_http_connections_open";
pub const CONNECTIONS_CAP: &str = "saldo_http_connections_max";
pub const CONNECTIONS_CLOSED: &str = "saldo_http_connections_closed_total";
pub const CONNECTIONS_ACCEPTED: &str = "saldo_http_connections_accepted_total";
pub const ACCEPT_ERRORS: &str = "saldo_http_accept_errors_total";

/// How long an idle connection told to close may take to flush what it still writes before it
/// is dropped.
pub const CLOSE_GRACE: Duration = Duration::from_secs(1);
/// Largest buffer hyper keeps per connection (request head included): a head larger than this
/// is refused (431) instead of growing memory per connection (hyper's default is ~400 KiB).
pub const MAX_CONN_BUF_BYTES: usize = 64 * 1024;

/// Why a connection ended (the `reason` label of [`CONNECTIONS_CLOSED`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The client closed it, or asked for `Connection: close`.
    Client,
    /// No request in flight for the idle timeout.
    Idle,
    /// A request head did not arrive within the header-read timeout.
    HeaderTimeout,
    /// Closed to make room for a new connection at the cap.
    Reclaimed,
    /// Closed by the server's shutdown.
    Shutdown,
    /// A protocol or I/O error (hyper answers malformed requests itself before closing).
    Error,
    /// Accepted at the cap and closed unserved: no connection could be reclaimed in time.
    Refused,
    /// A request stayed in flight past every timeout that should have ended it: its response
    /// is not being read (a slow-read client).
    Stalled,
}

impl CloseReason {
    /// Every reason, for registering the closed-connections counter at zero.
    pub const ALL: [CloseReason; 8] = [
        CloseReason::Client,
        CloseReason::Idle,
        CloseReason::HeaderTimeout,
        CloseReason::Reclaimed,
        CloseReason::Shutdown,
        CloseReason::Error,
        CloseReason::Refused,
        CloseReason::Stalled,
    ];

    pub fn label(self) -> &'static str {
        match self {
            CloseReason::Client => "client",
            CloseReason::Idle => "idle",
            CloseReason::HeaderTimeout => "header_timeout",
            CloseReason::Reclaimed => "reclaimed",
            CloseReason::Shutdown => "shutdown",
            CloseReason::Error => "error",
            CloseReason::Refused => "refused",
            CloseReason::Stalled => "stalled",
        }
    }
}

/// The per-connection timeouts.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub header_read: Duration,
    pub idle: Duration,
    /// Longest a request may stay in flight, response written included; past it the
    /// connection is dropped. Longer than the body and request timeouts together, so it only
    /// ends what they could not: a response its client does not read.
    pub request_max: Duration,
}

/// What the server tells its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Running,
    /// Finish the request in flight, then close.
    Draining,
    /// Close now.
    Abort,
}

/// Milliseconds on one server-wide monotonic clock (fits an atomic).
#[derive(Debug, Clone, Copy)]
pub struct Clock(Instant);

impl Clock {
    pub fn new() -> Self {
        Clock(Instant::now())
    }
    pub fn now_ms(self) -> u64 {
        u64::try_from(self.0.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
    fn instant(self, ms: u64) -> Instant {
        self.0 + Duration::from_millis(ms)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// What the accept loop and the supervisor share about one connection.
#[derive(Debug)]
pub struct ConnState {
    clock: Clock,
    in_flight: AtomicU32,
    /// When the current run of requests in flight began or last wrote a byte, on `clock`.
    busy_since_ms: AtomicU64,
    /// A request head is being read (set at accept and by the first byte of each request).
    reading_head: AtomicBool,
    /// When the current phase (idle or head reading) began, on `clock`.
    since_ms: AtomicU64,
    /// The accept loop chose this connection to be reclaimed.
    reclaim: AtomicBool,
    wake: Notify,
}

impl ConnState {
    fn new(clock: Clock) -> Self {
        ConnState {
            clock,
            in_flight: AtomicU32::new(0),
            busy_since_ms: AtomicU64::new(0),
            reading_head: AtomicBool::new(true),
            since_ms: AtomicU64::new(clock.now_ms()),
            reclaim: AtomicBool::new(false),
            wake: Notify::new(),
        }
    }

    fn idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }

    /// A read returned bytes: if no request is in flight, a new head starts now.
    fn on_bytes(&self) {
        if self.idle() && !self.reading_head.load(Ordering::Relaxed) {
            self.since_ms.store(self.clock.now_ms(), Ordering::Relaxed);
            self.reading_head.store(true, Ordering::Release);
            // The header deadline may be earlier than the idle one the supervisor sleeps on.
            self.wake.notify_one();
        }
    }

    /// A write took bytes: a request in flight is making progress (see the stall above).
    fn on_written(&self) {
        if !self.idle() {
            self.busy_since_ms
                .store(self.clock.now_ms(), Ordering::Release);
        }
    }

    /// When the connection may be closed if nothing changes, and for what reason.
    fn deadline(&self, t: Timeouts) -> (u64, CloseReason) {
        if !self.idle() {
            let busy = self.busy_since_ms.load(Ordering::Acquire);
            return (saturating_add_ms(busy, t.request_max), CloseReason::Stalled);
        }
        let since = self.since_ms.load(Ordering::Acquire);
        if self.reading_head.load(Ordering::Acquire) {
            (
                saturating_add_ms(since, t.header_read),
                CloseReason::HeaderTimeout,
            )
        } else {
            (saturating_add_ms(since, t.idle), CloseReason::Idle)
        }
    }
}

fn saturating_add_ms(ms: u64, d: Duration) -> u64 {
    ms.saturating_add(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Counts one request in flight on its connection from the call of the service until its
/// response body is dropped (written or abandoned).
struct InFlight(Arc<ConnState>);

impl InFlight {
    fn enter(conn: Arc<ConnState>) -> Self {
        if conn.in_flight.load(Ordering::Acquire) == 0 {
            conn.busy_since_ms
                .store(conn.clock.now_ms(), Ordering::Release);
        }
        conn.in_flight.fetch_add(1, Ordering::AcqRel);
        conn.reading_head.store(false, Ordering::Release);
        InFlight(conn)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // `since` first: whoever sees no request in flight also sees when it became idle.
        self.0
            .since_ms
            .store(self.0.clock.now_ms(), Ordering::Release);
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            // The idle deadline may be earlier than the one the supervisor sleeps on (a header
            // timeout longer than the idle one).
            self.0.wake.notify_one();
        }
    }
}

/// A response body that keeps its request counted as in flight until it is dropped.
struct TrackedBody {
    inner: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The socket, noticing the first byte of each request.
struct TrackedIo {
    inner: TcpStream,
    conn: Arc<ConnState>,
}

impl AsyncRead for TrackedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.on_bytes();
        }
        polled
    }
}

impl AsyncWrite for TrackedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.conn.on_written();
        }
        polled
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.conn.on_written();
        }
        polled
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Every open connection, for the accept loop to pick the ones to reclaim.
#[derive(Debug, Default)]
pub struct Registry {
    clock: Clock,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<ConnState>>>,
}

impl Registry {
    pub fn new(clock: Clock) -> Self {
        Registry {
            clock,
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        }
    }

    fn insert(&self) -> (u64, Arc<ConnState>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(ConnState::new(self.clock));
        self.lock().insert(id, conn.clone());
        (id, conn)
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<ConnState>>> {
        // A poisoned lock only means a thread panicked while holding it; the map stays usable.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Asks up to `at_most` connections with no request in flight to close, the longest idle
    /// first (as nginx reclaims keep-alive connections); connections already asked are skipped.
    /// Returns how many were asked. One scan of the map serves a whole batch.
    pub fn reclaim(&self, at_most: usize) -> usize {
        let mut candidates: Vec<(u64, Arc<ConnState>)> = self
            .lock()
            .values()
            .filter(|c| c.idle() && !c.reclaim.load(Ordering::Relaxed))
            .map(|c| (c.since_ms.load(Ordering::Relaxed), c.clone()))
            .collect();
        let n = at_most.min(candidates.len());
        if n == 0 {
            return 0;
        }
        if n < candidates.len() {
            candidates.select_nth_unstable_by_key(n - 1, |(since, _)| *since);
        }
        for (_, conn) in candidates.into_iter().take(n) {
            conn.reclaim.store(true, Ordering::Release);
            conn.wake.notify_one();
        }
        n
    }
}

/// How the server serves connections: the router, the HTTP/1 settings and the timeouts.
#[derive(Clone)]
pub struct Serving {
    pub router: Router,
    pub http: http1::Builder,
    pub timeouts: Timeouts,
    pub registry: Arc<Registry>,
}

impl Serving {
    pub fn new(router: Router, timeouts: Timeouts, registry: Arc<Registry>) -> Self {
        let mut http = http1::Builder::new();
        http.max_buf_size(MAX_CONN_BUF_BYTES).keep_alive(true);
        Serving {
            router,
            http,
            timeouts,
            registry,
        }
    }

    /// Serves one accepted connection until it ends; returns why it ended. The connection is
    /// registered for reclaim while it runs.
    pub async fn serve(&self, stream: TcpStream, stage: watch::Receiver<Stage>) -> CloseReason {
        let (id, conn) = self.registry.insert();
        metrics::gauge!(CONNECTIONS_OPEN).increment(1.0);
        let reason = self.supervise(stream, conn, stage).await;
        self.registry.remove(id);
        metrics::gauge!(CONNECTIONS_OPEN).decrement(1.0);
        metrics::counter!(CONNECTIONS_CLOSED, "reason" => reason.label()).increment(1);
        reason
    }

    /// Serves the connection with hyper and closes it when one of its timeouts, a reclaim or
    /// the server's stage says so.
    async fn supervise(
        &self,
        stream: TcpStream,
        conn: Arc<ConnState>,
        mut stage: watch::Receiver<Stage>,
    ) -> CloseReason {
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(TrackedIo {
            inner: stream,
            conn: conn.clone(),
        });
        let router = self.router.clone();
        let on_conn = conn.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let in_flight = InFlight::enter(on_conn.clone());
            let call = router.clone().oneshot(request);
            async move {
                let response = call.await?;
                Ok::<_, std::convert::Infallible>(response.map(|inner| TrackedBody {
                    inner,
                    _in_flight: in_flight,
                }))
            }
        });
        let http = self.http.serve_connection(io, service);
        tokio::pin!(http);
        if *stage.borrow() != Stage::Running {
            return CloseReason::Shutdown;
        }
        // Set once the server decided to close: why, and when to stop waiting (None: the stage
        // decides, as in a drain).
        let mut closing: Option<(CloseReason, Option<Instant>)> = None;
        loop {
            let wake_at = self.wake_at(&conn, closing);
            let step = tokio::select! {
                ended = http.as_mut() => return ended_by(closing, ended),
                _ = conn.wake.notified() => on_wake(&conn, closing),
                changed = stage.changed() => {
                    let now = if changed.is_err() { Stage::Abort } else { *stage.borrow_and_update() };
                    on_stage(&conn, now)
                }
                _ = tokio::time::sleep_until(wake_at.into()) => self.on_timer(&conn, closing),
            };
            match step {
                Step::Continue => {}
                Step::Drop(reason) => return reason,
                Step::Graceful(reason, until) => {
                    http.as_mut().graceful_shutdown();
                    closing = Some((reason, until));
                }
            }
        }
    }

    /// When the supervisor looks again if nothing wakes it: the close deadline once closing,
    /// after an idle period while draining, else the connection's own deadline.
    fn wake_at(
        &self,
        conn: &ConnState,
        closing: Option<(CloseReason, Option<Instant>)>,
    ) -> Instant {
        let clock = conn.clock;
        match closing {
            Some((_, Some(at))) => at,
            Some((_, None)) => clock.instant(saturating_add_ms(clock.now_ms(), self.timeouts.idle)),
            None => clock.instant(conn.deadline(self.timeouts).0),
        }
    }

    /// The timer fired: past the close deadline, drop the connection; past the connection's
    /// own deadline (header read, idle, stall), close it.
    fn on_timer(&self, conn: &ConnState, closing: Option<(CloseReason, Option<Instant>)>) -> Step {
        if let Some((reason, Some(_))) = closing {
            return Step::Drop(reason);
        }
        let (ms, reason) = conn.deadline(self.timeouts);
        if closing.is_none() && conn.clock.now_ms() >= ms {
            plan_close(conn, reason)
        } else {
            Step::Continue
        }
    }
}

/// What the supervisor does next.
enum Step {
    Continue,
    /// Drop the connection now.
    Drop(CloseReason),
    /// Tell hyper to close (after the response in flight); drop it at this instant if it has
    /// not (None: when the server's stage says).
    Graceful(CloseReason, Option<Instant>),
}

/// Why a connection hyper finished serving ended.
fn ended_by(
    closing: Option<(CloseReason, Option<Instant>)>,
    ended: Result<(), hyper::Error>,
) -> CloseReason {
    match (closing, ended) {
        (Some((reason, _)), _) => reason,
        (None, Ok(())) => CloseReason::Client,
        (None, Err(e)) => {
            tracing::debug!(error = %e, "connection ended with an error");
            CloseReason::Error
        }
    }
}

/// Woken: close the connection if the accept loop asked to reclaim it and it is still idle.
fn on_wake(conn: &ConnState, closing: Option<(CloseReason, Option<Instant>)>) -> Step {
    if closing.is_none() && conn.reclaim.swap(false, Ordering::AcqRel) && conn.idle() {
        plan_close(conn, CloseReason::Reclaimed)
    } else {
        Step::Continue
    }
}

/// The server's stage changed: abort drops the connection; a drain drops it if it is between
/// requests with no byte of a new one, else lets hyper close it after its response (the abort
/// stage bounds the wait).
fn on_stage(conn: &ConnState, now: Stage) -> Step {
    match now {
        Stage::Running => Step::Continue,
        Stage::Abort => Step::Drop(CloseReason::Shutdown),
        Stage::Draining if conn.idle() && conn.reading_head.load(Ordering::Acquire) => {
            Step::Drop(CloseReason::Shutdown)
        }
        Stage::Draining => Step::Graceful(CloseReason::Shutdown, None),
    }
}

/// How to close a connection with no request in flight. While a head is being read there is
/// nothing to lose and it is dropped at once; between requests hyper closes it itself (after
/// flushing the last response), within [`CLOSE_GRACE`].
fn plan_close(conn: &ConnState, reason: CloseReason) -> Step {
    if conn.reading_head.load(Ordering::Acquire) {
        Step::Drop(reason)
    } else {
        Step::Graceful(reason, Some(Instant::now() + CLOSE_GRACE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timeouts = Timeouts {
        header_read: Duration::from_millis(100),
        idle: Duration::from_millis(1_000),
        request_max: Duration::from_millis(10_000),
    };

    #[test]
    fn a_new_connection_is_reading_its_head_then_idle_after_its_request() {
        let c = Arc::new(ConnState::new(Clock::new()));
        assert_eq!(c.deadline(T).1, CloseReason::HeaderTimeout);
        let req = InFlight::enter(c.clone());
        let (until, reason) = c.deadline(T);
        assert_eq!(
            reason,
            CloseReason::Stalled,
            "in flight: only a stall ends it"
        );
        assert!(until >= T.request_max.as_millis() as u64);
        c.on_bytes();
        assert!(
            !c.reading_head.load(Ordering::Relaxed),
            "body bytes are not a new head"
        );
        drop(req);
        assert_eq!(c.deadline(T).1, CloseReason::Idle);
        c.on_bytes();
        assert_eq!(c.deadline(T).1, CloseReason::HeaderTimeout);
    }

    #[test]
    fn reclaim_picks_the_longest_idle_without_a_request_in_flight() {
        let r = Registry::new(Clock::new());
        let conns: Vec<_> = (0..5).map(|_| r.insert()).collect();
        for (i, (_, c)) in conns.iter().enumerate() {
            c.since_ms.store(100 - i as u64 * 10, Ordering::Relaxed);
        }
        let _busy = InFlight::enter(conns[4].1.clone()); // the oldest, but busy
        assert_eq!(r.reclaim(2), 2);
        let picked: Vec<bool> = conns
            .iter()
            .map(|(_, c)| c.reclaim.load(Ordering::Relaxed))
            .collect();
        assert_eq!(picked, vec![false, false, true, true, false]);
        assert_eq!(r.reclaim(10), 2, "those already asked are skipped");
        assert_eq!(r.reclaim(10), 0);
    }
}
