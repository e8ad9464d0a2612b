//! `saldo serve` (the real binary) under a connection flood, with its RLIMIT_NOFILE set to
//! 1024 as a default Linux login gives it: 2,000 idle connections and 100 slow-header clients
//! must not keep a normal client out (before: "accept error: Too many open files" every second
//! and every new client timed out), the server closes them within its timeouts, and the cap on
//! open connections is derived from the descriptor limit. Loopback only, bounded in time.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use saldo_lab::testing::test_db;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ADMIN: &str = "flood-admin-token-0123456789";
const API: &str = "flood-api-token-0123456789";
/// The child's descriptor limit (soft and hard), as `ulimit -n` gives it.
const CHILD_NOFILE: u64 = 1_024;
const IDLE_FLOOD: usize = 2_000;
const SLOW_HEADER_CLIENTS: usize = 100;
/// Descriptors this test process needs (its client ends, the test database's pool, slack).
const TEST_FDS: u64 = IDLE_FLOOD as u64 + SLOW_HEADER_CLIENTS as u64 + 512;
/// Connections opened per batch; the next batch waits until the server accepted this one, or
/// [`BATCH_WAIT`] (the kernel's accept queue is bounded and drops completed connections
/// silently when full: a flood faster than the server accepts would partly vanish instead of
/// being held; a server that stops accepting still gets the whole flood in its queue).
const CONNECT_BATCH: usize = 100;
const BATCH_WAIT: Duration = Duration::from_millis(500);
const POLL_EVERY: Duration = Duration::from_millis(50);
/// How long one look at `/metrics` may take while pacing.
const POLL_TIMEOUT: Duration = Duration::from_millis(250);
const SLOW_BYTE_EVERY: Duration = Duration::from_millis(500);
/// The server's timeouts in this test.
const HEADER_MS: u64 = 2_000;
const IDLE_MS: u64 = 2_000;
/// Allowed on top of a server timeout (busy 2-core machine).
const SLACK: Duration = Duration::from_secs(5);
/// A normal client must be answered within this.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);
/// Longest wait for anything (start-up, a close, the exit).
const HARD_BOUND: Duration = Duration::from_secs(60);
/// Most stderr kept from the child.
const MAX_LOG_BYTES: usize = 1 << 20;

/// The running binary; killed (by its own pid) if the test ends without stopping it.
struct Serve {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<String>>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Serve {
    fn start(url: &str) -> Serve {
        // `ulimit` in a shell that then execs the binary: the limit applies to saldo alone.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!(r#"ulimit -n {CHILD_NOFILE} && exec "$0" "$@""#))
            .arg(env!("CARGO_BIN_EXE_saldo"))
            .args(["--database-url", url, "serve", "--listen", "127.0.0.1:0"])
            .args(["--header-read-timeout-ms", &HEADER_MS.to_string()])
            .args(["--idle-timeout-ms", &IDLE_MS.to_string()])
            .env("SALDO_ADMIN_TOKEN", ADMIN)
            .env("SALDO_API_TOKEN", API)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start saldo serve");
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("stderr");
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stderr);
            let mut line = String::new();
            while matches!(lines.read_line(&mut line), Ok(n) if n > 0) {
                let mut log = sink.lock().unwrap_or_else(|p| p.into_inner());
                if log.len() + line.len() <= MAX_LOG_BYTES {
                    log.push_str(&line);
                }
                line.clear();
            }
        });
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut out = BufReader::new(stdout);
            let mut line = String::new();
            while matches!(out.read_line(&mut line), Ok(n) if n > 0) {
                if let Some(rest) = line.strip_prefix("saldo listening on http://") {
                    let addr = rest.split_whitespace().next().unwrap_or("").to_owned();
                    let _ = tx.send(addr);
                }
                line.clear();
            }
            // Keep draining until the child exits so it never blocks on a full pipe.
            let _ = out.read_to_end(&mut Vec::new());
        });
        let mut serve = Serve {
            child,
            addr: "127.0.0.1:0".parse().expect("addr"),
            log,
        };
        let addr = rx
            .recv_timeout(HARD_BOUND)
            .unwrap_or_else(|_| panic!("saldo serve did not start: {}", serve.log()));
        serve.addr = addr.parse().expect("listen address");
        serve
    }

    fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// SIGTERM, then the exit status within the hard bound.
    fn stop(mut self) -> std::process::ExitStatus {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        let pid = i32::try_from(self.child.id()).expect("pid");
        kill(Pid::from_raw(pid), Signal::SIGTERM).expect("SIGTERM");
        let until = Instant::now() + HARD_BOUND;
        while Instant::now() < until {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            std::thread::sleep(POLL_EVERY);
        }
        panic!("saldo serve did not stop on SIGTERM: {}", self.log());
    }
}

/// One HTTP/1.1 request on its own connection (`Connection: close`); the status and body, or
/// None if no complete answer came within `within`.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
    within: Duration,
) -> Option<(u16, String)> {
    let exchange = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: saldo\r\nConnection: close\r\n");
        if let Some(t) = token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        let body = body.unwrap_or("");
        if !body.is_empty() {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        head.push_str(body);
        s.write_all(head.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await.ok()?;
        let text = String::from_utf8_lossy(&answer).into_owned();
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
        Some((status, body))
    };
    tokio::time::timeout(within, exchange).await.ok().flatten()
}

/// The value of the sample line `name` in `/metrics` (None when absent or unreachable).
async fn metric(addr: SocketAddr, name: &str, within: Duration) -> Option<f64> {
    let (_, text) = request(addr, "GET", "/metrics", None, None, within).await?;
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Reads `saldo_http_connections_accepted_total` over one kept-alive connection, opened before
/// the flood: polling on new connections would hand a stuck server the descriptors its own
/// accept loop needs (each poll connection, once served, is closed and frees one), and mask
/// the failure this test is about.
/// A probe that got no answer in time is not asked again (nor closed: closing it would free a
/// descriptor for a stuck server too); pacing then falls back to [`BATCH_WAIT`].
struct AcceptedProbe {
    addr: SocketAddr,
    stream: Option<TcpStream>,
    stuck: bool,
}

impl AcceptedProbe {
    fn new(addr: SocketAddr) -> Self {
        AcceptedProbe {
            addr,
            stream: None,
            stuck: false,
        }
    }

    async fn accepted(&mut self) -> Option<f64> {
        if self.stuck {
            return None;
        }
        match tokio::time::timeout(POLL_TIMEOUT, self.ask()).await {
            Ok(Some(n)) => Some(n),
            Ok(None) => {
                // Closed by the server (idle, reclaimed): it is in no queue; reconnect.
                self.stream = None;
                None
            }
            Err(_) => {
                self.stuck = true;
                None
            }
        }
    }

    async fn ask(&mut self) -> Option<f64> {
        if self.stream.is_none() {
            self.stream = Some(TcpStream::connect(self.addr).await.ok()?);
        }
        let s = self.stream.as_mut()?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: saldo\r\n\r\n")
            .await
            .ok()?;
        let mut answer = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        let (head_len, body_len) = loop {
            let n = s.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            answer.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&answer);
            if let Some((head, _)) = text.split_once("\r\n\r\n") {
                let len = head.lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })?;
                break (head.len() + 4, len);
            }
        };
        while answer.len() < head_len + body_len {
            let n = s.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            answer.extend_from_slice(&buf[..n]);
        }
        let body = String::from_utf8_lossy(&answer[head_len..head_len + body_len]).into_owned();
        let name = "saldo_http_connections_accepted_total ";
        body.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    }
}

/// Reads until the server closes the connection; how long after `from` it did (None: open).
/// The stream is handed back, not dropped: a client closing its end would free a descriptor
/// on a server that cannot free its own, and mask the failure this test is about.
async fn closed_within(
    mut s: TcpStream,
    from: Instant,
    within: Duration,
) -> (Option<Duration>, TcpStream) {
    let mut buf = [0u8; 1024];
    let deadline = from + within;
    loop {
        match tokio::time::timeout_at(deadline.into(), s.read(&mut buf)).await {
            Err(_) => return (None, s),
            Ok(Ok(0)) | Ok(Err(_)) => return (Some(from.elapsed()), s),
            Ok(Ok(_)) => {}
        }
    }
}

/// Raises this process's RLIMIT_NOFILE to `need` descriptors: the soft limit, and the hard
/// limit too when it is lower and the process may raise it (root). Panics saying what to change
/// when it cannot: the flood cannot be sent with fewer descriptors, and a test that returned
/// early would pass without testing anything.
fn raise_own_fd_limit(need: u64) {
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

async fn reserve(addr: SocketAddr, order: &str) -> Option<(u16, String)> {
    let body =
        format!(r#"{{"order_id": "{order}", "items": [{{"product_id": 1, "quantity": 1}}]}}"#);
    request(
        addr,
        "POST",
        "/v1/reservations",
        Some(API),
        Some(&body),
        ANSWER_WITHIN,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_1024_descriptors_survives_2000_idle_and_100_slow_header_connections() {
    raise_own_fd_limit(TEST_FDS);
    let db = test_db().await;
    let serve = Serve::start(&db.url);
    let addr = serve.addr;
    let stocked = request(
        addr,
        "PUT",
        "/v1/products/1/stock",
        Some(ADMIN),
        Some(r#"{"count": 100}"#),
        ANSWER_WITHIN,
    )
    .await;
    assert_eq!(stocked.map(|a| a.0), Some(200), "{}", serve.log());

    // The cap comes from the child's descriptor limit.
    let expected_cap =
        CHILD_NOFILE - saldo_http::listener::FD_RESERVE - saldo::db::DEFAULT_POOL_SIZE as u64;
    assert_eq!(
        metric(addr, "saldo_http_connections_max", ANSWER_WITHIN).await,
        Some(expected_cap as f64),
        "{}",
        serve.log()
    );

    let mut probe = AcceptedProbe::new(addr);
    assert!(probe.accepted().await.is_some(), "{}", serve.log());
    let head = b"GET /healthz HTTP/1.1\r\nHost: flood\r\nX-Slow: ".to_vec();
    let slow: Vec<_> = (0..SLOW_HEADER_CLIENTS)
        .map(|_| {
            let head = head.clone();
            tokio::spawn(async move {
                let mut s = tokio::time::timeout(HARD_BOUND, TcpStream::connect(addr))
                    .await
                    .ok()?
                    .ok()?;
                let at = Instant::now();
                let mut buf = [0u8; 256];
                for i in 0..(HARD_BOUND.as_millis() / SLOW_BYTE_EVERY.as_millis()) as usize {
                    let byte = head.get(i).copied().unwrap_or(b'a');
                    if s.write_all(&[byte]).await.is_err() {
                        return Some(at.elapsed());
                    }
                    match tokio::time::timeout(SLOW_BYTE_EVERY, s.read(&mut buf)).await {
                        Err(_) => {}
                        Ok(Ok(0)) | Ok(Err(_)) => return Some(at.elapsed()),
                        Ok(Ok(_)) => return None,
                    }
                }
                None
            })
        })
        .collect();

    let flood_started = Instant::now();
    let mut watchers = Vec::with_capacity(IDLE_FLOOD);
    for _ in 0..IDLE_FLOOD / CONNECT_BATCH {
        let batch: Vec<_> = (0..CONNECT_BATCH)
            .map(|_| {
                tokio::spawn(async move {
                    let s = tokio::time::timeout(HARD_BOUND, TcpStream::connect(addr))
                        .await
                        .expect("connect in time (else the accept queue is full: the server stopped accepting)")
                        .expect("connect");
                    (s, Instant::now())
                })
            })
            .collect();
        for connecting in batch {
            let (s, at) = connecting.await.expect("connect task");
            watchers.push(tokio::spawn(closed_within(
                s,
                at,
                Duration::from_millis(HEADER_MS) + SLACK,
            )));
        }
        let opened = watchers.len() as f64;
        let batch_until = Instant::now() + BATCH_WAIT;
        while Instant::now() < batch_until {
            if probe.accepted().await.is_some_and(|n| n >= opened) {
                break;
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    eprintln!(
        "flood of {IDLE_FLOOD} idle connections opened in {} ms (accept probe {})",
        flood_started.elapsed().as_millis(),
        if probe.stuck { "stuck" } else { "answering" }
    );
    // Normal clients are answered while the flood is held.
    for n in 0..3 {
        let started = Instant::now();
        let answer = reserve(addr, &format!("normal-{n}")).await;
        assert_eq!(
            answer.as_ref().map(|a| a.0),
            Some(201),
            "a normal client is answered within {ANSWER_WITHIN:?}: {answer:?}\n{}",
            serve.log()
        );
        eprintln!(
            "normal reservation {n}: {} ms",
            started.elapsed().as_millis()
        );
    }

    let (mut slowest, mut open) = (Duration::ZERO, 0);
    let mut held = Vec::with_capacity(IDLE_FLOOD);
    for w in watchers {
        let (closed, stream) = w.await.expect("watcher");
        held.push(stream);
        match closed {
            Some(took) => slowest = slowest.max(took),
            None => open += 1,
        }
    }
    eprintln!(
        "slowest idle connection closed after {} ms",
        slowest.as_millis()
    );
    assert_eq!(
        open, 0,
        "idle connections the server did not close within its header timeout + {SLACK:?}"
    );
    let mut open = 0;
    for s in slow {
        if s.await.expect("slow client").is_none() {
            open += 1;
        }
    }
    assert_eq!(open, 0, "slow-header connections not closed (or answered)");

    let audit = request(
        addr,
        "GET",
        "/v1/admin/audit",
        Some(ADMIN),
        None,
        ANSWER_WITHIN,
    )
    .await
    .expect("audit answered");
    assert!(audit.1.contains(r#""ok":true"#), "{}", audit.1);
    let log = serve.log();
    assert!(
        !log.contains("Too many open files"),
        "the server never ran out of descriptors:\n{log}"
    );
    let stopping = Instant::now();
    let status = serve.stop();
    eprintln!("stopped in {} ms", stopping.elapsed().as_millis());
    assert!(status.success(), "saldo serve exits 0 on SIGTERM: {status}");
    assert_eq!(
        held.len(),
        IDLE_FLOOD,
        "every idle connection was held to the end"
    );
}
