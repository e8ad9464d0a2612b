//! Faults under load, against the REAL `saldo serve` binary on its embedded PostgreSQL (a
//! temporary `SALDO_DATA_DIR`), over 127.0.0.1 only, every wait bounded:
//! - kill -9 of the postmaster mid-load: the service restarts it by itself (same process);
//! - kill -9 of the service mid-load: its postmaster goes with it (parent-death signal), a new
//!   service on the same data directory takes over, and every request is replayed with its id;
//! - `--pool-size N` opens N connections in all.
//!
//! After each fault the books are checked from the database itself: every acknowledged (2xx)
//! reservation and transfer is there exactly once, nothing unacknowledged-and-refused is, no unit
//! or cent was created or lost, and `GET /v1/admin/audit` is clean; and a follower of the event
//! feed, reading through every fault, has every committed event exactly once
//! (`fault_events.rs`).
//!
//! `SALDO_FAULTS_BIN` runs the suite against another build of `saldo` (e.g. an older one, to
//! see these tests fail on it). A longer run by hand: `SALDO_FAULTS_SCALE=10` multiplies the
//! acknowledged requests before and after each fault.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use deadpool_postgres::tokio_postgres::{self, NoTls};
use serde_json::{json, Value};

use super::fault_events::{self, Done, Follower};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const API_TOKEN: &str = "faults-api-token-0123456789";
pub(super) const ADMIN_TOKEN: &str = "faults-admin-token-0123456789";
/// Concurrent clients of the load.
const CLIENTS: usize = 32;
const PRODUCTS: i64 = 8;
/// Enough stock and money that nothing is refused: every request either applies or not.
const UNITS_PER_PRODUCT: i64 = 100_000;
const ACCOUNTS: i64 = 8;
const OPENING_CENTS: i64 = 10_000_000;
/// Acknowledged requests before the fault, and again after recovery (× SALDO_FAULTS_SCALE).
const ACKS_PER_PHASE: usize = 150;
/// Upper bound of requests per client, whatever happens.
const MAX_OPS_PER_CLIENT: usize = 2_000;
/// A client's pause after a request whose outcome is unknown (the service is down).
const PAUSE_AFTER_FAILURE_MS: u64 = 50;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
const START_TIMEOUT: Duration = Duration::from_secs(90);
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(60);
const PHASE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a postmaster may take to go after its parent was killed.
const ORPHAN_TIMEOUT: Duration = Duration::from_secs(30);
/// Replays of one request whose outcome is still unknown, at most.
const SETTLE_ATTEMPTS: usize = 10;

pub(super) fn saldo_bin() -> PathBuf {
    std::env::var_os("SALDO_FAULTS_BIN")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_saldo")), PathBuf::from)
}

pub(super) fn acks_per_phase() -> usize {
    let scale = std::env::var("SALDO_FAULTS_SCALE")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(1)
        .clamp(1, 100);
    ACKS_PER_PHASE * scale
}

/// A temporary root the `postgres` user can traverse (as root, the cluster runs as postgres).
pub(super) fn temp_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

fn alive(pid: i32) -> bool {
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

pub(super) fn sigkill(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

async fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One `saldo serve` child; SIGKILLed (and its postmaster awaited) when dropped.
pub(super) struct Service {
    child: Child,
    pub(super) addr: String,
    stderr: PathBuf,
    /// The embedded cluster's data directory, as the service printed it.
    cluster_dir: PathBuf,
    /// Its connection URL, password filled in from the password file when redacted.
    pub(super) db_url: String,
}

static NEXT_SERVICE: AtomicUsize = AtomicUsize::new(0);

impl Service {
    pub(super) fn start(root: &Path, extra: &[&str]) -> Service {
        let n = NEXT_SERVICE.fetch_add(1, Ordering::Relaxed);
        let stdout = root.join(format!("serve-{n}.out"));
        let stderr = root.join(format!("serve-{n}.err"));
        let child = Command::new(saldo_bin())
            // Its own process group, like a shell job: the Ctrl-C test signals the group.
            .process_group(0)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .env("SALDO_DATA_DIR", root.join("saldo"))
            .env("SALDO_API_TOKEN", API_TOKEN)
            .env("SALDO_ADMIN_TOKEN", ADMIN_TOKEN)
            .env_remove("DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).expect("stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("start saldo serve");
        let mut service = Service {
            child,
            addr: String::new(),
            stderr: stderr.clone(),
            cluster_dir: PathBuf::new(),
            db_url: String::new(),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let out = std::fs::read_to_string(&stdout).unwrap_or_default();
            if let Some(rest) = out.split("saldo listening on http://").nth(1) {
                service.addr = rest.split_whitespace().next().expect("address").to_owned();
                break;
            }
            if let Ok(Some(status)) = service.child.try_wait() {
                panic!("saldo serve exited ({status}): {}", service.log());
            }
            assert!(
                Instant::now() < deadline,
                "saldo serve did not listen within {START_TIMEOUT:?}: {}",
                service.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let log = service.log();
        let line = log
            .lines()
            .find_map(|l| l.split("embedded PostgreSQL: ").nth(1))
            .expect("the embedded PostgreSQL line");
        let url = line.split_whitespace().next().expect("url").to_owned();
        let data = line
            .split("(data ")
            .nth(1)
            .and_then(|s| s.split(',').next())
            .expect("data dir");
        service.cluster_dir = PathBuf::from(data);
        service.db_url = if url.contains(":***@") {
            let mut name = service.cluster_dir.file_name().expect("name").to_owned();
            name.push(".password");
            let password = std::fs::read_to_string(service.cluster_dir.with_file_name(name))
                .expect("password file");
            url.replace(":***@", &format!(":{}@", password.trim()))
        } else {
            url
        };
        service
    }

    pub(super) fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn postmaster_pid(&self) -> Option<i32> {
        let text = std::fs::read_to_string(self.cluster_dir.join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub(super) async fn db(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.db_url, NoTls)
            .await
            .expect("connect to the embedded cluster");
        tokio::spawn(conn);
        client
    }

    /// SIGKILL, then wait (bounded) for its postmaster to go: the parent-death signal.
    async fn kill9(&mut self) -> Option<i32> {
        let postmaster = self.postmaster_pid();
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(pid) = postmaster {
            wait_for(
                "the postmaster to exit after its service was killed",
                ORPHAN_TIMEOUT,
                || !alive(pid),
            )
            .await;
        }
        postmaster
    }
}

impl Service {
    /// kill -9 of the embedded postmaster; waits (bounded) until the service has started a new
    /// one and answers ready again. Answers the killed postmaster's pid.
    pub(super) async fn kill_postmaster_and_recover(&self) -> i32 {
        let killed = self.postmaster_pid().expect("postmaster pid");
        sigkill(killed);
        let cluster_dir = self.cluster_dir.clone();
        wait_for(
            "the service to restart its PostgreSQL",
            RECOVERY_TIMEOUT,
            || {
                std::fs::read_to_string(cluster_dir.join("postmaster.pid"))
                    .ok()
                    .and_then(|t| t.lines().next()?.trim().parse::<i32>().ok())
                    .is_some_and(|pid| pid != killed && alive(pid))
            },
        )
        .await;
        let deadline = Instant::now() + RECOVERY_TIMEOUT;
        while !ready(&self.addr).await {
            assert!(Instant::now() < deadline, "not ready again: {}", self.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        killed
    }

    /// kill -9 of the service, started again at once on the same root as a process supervisor
    /// would: the new service waits for the orphaned postmaster, which shuts down on its
    /// parent-death signal.
    pub(super) async fn kill9_and_restart(&mut self, root: &Path, extra: &[&str]) -> Service {
        let orphan = self.postmaster_pid().expect("a postmaster ran");
        let _ = self.child.kill();
        let _ = self.child.wait();
        let second = Service::start(root, extra);
        // (It removed its postmaster.pid before exiting; init reaps it a moment later.)
        wait_for(
            "the killed service's postmaster to be gone",
            ORPHAN_TIMEOUT,
            || !alive(orphan),
        )
        .await;
        second
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let postmaster = self.postmaster_pid();
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Let the postmaster finish its shutdown before the directory is removed.
        let deadline = Instant::now() + ORPHAN_TIMEOUT;
        while postmaster.is_some_and(alive) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// One HTTP/1.1 request with `Connection: close`; the status and the JSON body (Null if none).
pub(super) async fn http(
    addr: &str,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        let body = body.map(Value::to_string).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
             Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        stream
            .read_to_end(&mut raw)
            .await
            .map_err(|e| e.to_string())?;
        parse_response(&raw)
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| "timed out".to_owned())?
}

fn parse_response(raw: &[u8]) -> Result<(u16, Value), String> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no header end")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("no status")?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    let value = if body.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?
    };
    Ok((status, value))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Outcome {
    /// 2xx: the service said it is done.
    Applied,
    /// 409: refused, nothing written.
    Refused,
    /// No answer, or an error: applied or not, we cannot tell yet.
    Unknown,
}

#[derive(Debug, Clone)]
pub(super) enum Op {
    Reserve {
        order: String,
        product: i64,
        quantity: i64,
    },
    Transfer {
        id: String,
        from: i64,
        to: i64,
        amount: i64,
    },
}

impl Op {
    /// Client `c`'s `k`-th request: alternately a reservation and a transfer, spread over
    /// products and accounts so that clients meet on rows.
    fn nth(c: usize, k: usize) -> Op {
        let (c64, k64) = (c as i64, k as i64);
        if k % 2 == 0 {
            Op::Reserve {
                order: format!("c{c}-r{k}"),
                product: (c64 * 7 + k64) % PRODUCTS + 1,
                quantity: k64 % 3 + 1,
            }
        } else {
            let from = (c64 + k64) % ACCOUNTS + 1;
            Op::Transfer {
                id: format!("c{c}-t{k}"),
                from,
                to: from % ACCOUNTS + 1,
                amount: (c64 + k64) % 5 + 1,
            }
        }
    }

    async fn send(&self, addr: &str) -> Result<(u16, Value), String> {
        match self {
            Op::Reserve {
                order,
                product,
                quantity,
            } => {
                let body = json!({"order_id": order,
                    "items": [{"product_id": product, "quantity": quantity}]});
                http(addr, "POST", "/v1/reservations", API_TOKEN, Some(&body)).await
            }
            Op::Transfer {
                id,
                from,
                to,
                amount,
            } => {
                let body = json!({"id": id, "from": from, "to": to, "amount": amount});
                http(addr, "POST", "/v1/transfers", API_TOKEN, Some(&body)).await
            }
        }
    }
}

fn outcome(answer: &Result<(u16, Value), String>) -> Outcome {
    match answer {
        Ok((200..=299, _)) => Outcome::Applied,
        Ok((409, _)) => Outcome::Refused,
        _ => Outcome::Unknown,
    }
}

/// The load: [`CLIENTS`] clients, each sending its own requests to the current address until
/// told to stop (or [`MAX_OPS_PER_CLIENT`]).
pub(super) struct Load {
    pub(super) addr: Arc<RwLock<String>>,
    acks: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    clients: Vec<tokio::task::JoinHandle<Vec<(Op, Outcome)>>>,
}

impl Load {
    pub(super) fn start(addr: &str) -> Load {
        let addr = Arc::new(RwLock::new(addr.to_owned()));
        let acks = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let clients = (0..CLIENTS)
            .map(|c| {
                let (addr, acks, stop) = (addr.clone(), acks.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut done = Vec::new();
                    for k in 0..MAX_OPS_PER_CLIENT {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let op = Op::nth(c, k);
                        let target = addr.read().expect("addr").clone();
                        let result = outcome(&op.send(&target).await);
                        match result {
                            Outcome::Applied => {
                                acks.fetch_add(1, Ordering::Relaxed);
                            }
                            Outcome::Unknown => {
                                tokio::time::sleep(Duration::from_millis(PAUSE_AFTER_FAILURE_MS))
                                    .await
                            }
                            Outcome::Refused => {}
                        }
                        done.push((op, result));
                    }
                    done
                })
            })
            .collect();
        Load {
            addr,
            acks,
            stop,
            clients,
        }
    }

    fn acks(&self) -> usize {
        self.acks.load(Ordering::Relaxed)
    }

    /// Waits until `more` further requests were acknowledged.
    pub(super) async fn wait_acks(&self, more: usize, what: &str) {
        let target = self.acks() + more;
        let acks = self.acks.clone();
        wait_for(what, PHASE_TIMEOUT, || {
            acks.load(Ordering::Relaxed) >= target
        })
        .await;
    }

    pub(super) async fn finish(self) -> Vec<(Op, Outcome)> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for client in self.clients {
            all.extend(client.await.expect("client"));
        }
        all
    }
}

/// Counts the products and opens the accounts (admin routes).
pub(super) async fn set_up(addr: &str) {
    for p in 1..=PRODUCTS {
        let (status, body) = http(
            addr,
            "PUT",
            &format!("/v1/products/{p}/stock"),
            ADMIN_TOKEN,
            Some(&json!({"count": UNITS_PER_PRODUCT})),
        )
        .await
        .expect("count stock");
        assert!((200..300).contains(&status), "{status} {body}");
    }
    for a in 1..=ACCOUNTS {
        let (status, body) = http(
            addr,
            "POST",
            "/v1/accounts",
            ADMIN_TOKEN,
            Some(&json!({"id": a, "opening_balance": OPENING_CENTS})),
        )
        .await
        .expect("open account");
        assert!((200..300).contains(&status), "{status} {body}");
    }
}

/// Replays every request whose outcome is unknown (same id, same body) until it is known; with
/// `all`, replays the acknowledged ones too and requires each to answer as a replay.
pub(super) async fn replay(addr: &str, ops: &mut [(Op, Outcome)], all: bool) {
    for (op, outcome_seen) in ops.iter_mut() {
        if *outcome_seen == Outcome::Applied && all {
            let (status, body) = op.send(addr).await.expect("replay");
            assert_eq!(status, 200, "replay of acknowledged {op:?}: {body}");
            assert_eq!(
                body["replayed"], true,
                "replay of acknowledged {op:?}: {body}"
            );
            continue;
        }
        for _ in 0..SETTLE_ATTEMPTS {
            if *outcome_seen != Outcome::Unknown {
                break;
            }
            let answer = op.send(addr).await;
            *outcome_seen = outcome(&answer);
            if *outcome_seen == Outcome::Unknown {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        assert_ne!(*outcome_seen, Outcome::Unknown, "{op:?} never settled");
    }
}

/// Checks the database against what the clients were told (every outcome settled).
pub(super) async fn check_books(service: &Service, ops: &[(Op, Outcome)]) {
    let db = service.db().await;
    let mut reservations: HashMap<String, Vec<(i64, i32, String)>> = HashMap::new();
    for row in db
        .query(
            "SELECT order_id, product_id, quantity, status FROM reservations",
            &[],
        )
        .await
        .expect("reservations")
    {
        reservations
            .entry(row.get(0))
            .or_default()
            .push((row.get(1), row.get(2), row.get(3)));
    }
    let mut transfers: HashMap<String, (i64, i64, i64)> = HashMap::new();
    for row in db
        .query(
            "SELECT id, from_account, to_account, amount FROM transfers WHERE kind = 'transfer'",
            &[],
        )
        .await
        .expect("transfers")
    {
        transfers.insert(row.get(0), (row.get(1), row.get(2), row.get(3)));
    }

    let mut reserved = vec![0i64; PRODUCTS as usize + 1];
    let mut balance = vec![OPENING_CENTS; ACCOUNTS as usize + 1];
    let (mut applied_reservations, mut applied_transfers) = (0, 0);
    for (op, seen) in ops {
        match op {
            Op::Reserve {
                order,
                product,
                quantity,
            } => {
                let rows = reservations.get(order).cloned().unwrap_or_default();
                if *seen == Outcome::Applied {
                    assert_eq!(
                        rows,
                        [(*product, *quantity as i32, "active".to_owned())],
                        "acknowledged reservation {order}: missing or duplicated"
                    );
                    reserved[*product as usize] += quantity;
                    applied_reservations += 1;
                } else {
                    assert!(rows.is_empty(), "refused reservation {order} was written");
                }
            }
            Op::Transfer {
                id,
                from,
                to,
                amount,
            } => {
                let row = transfers.get(id);
                if *seen == Outcome::Applied {
                    assert_eq!(
                        row,
                        Some(&(*from, *to, *amount)),
                        "acknowledged transfer {id}"
                    );
                    balance[*from as usize] -= amount;
                    balance[*to as usize] += amount;
                    applied_transfers += 1;
                } else {
                    assert!(row.is_none(), "refused transfer {id} was written");
                }
            }
        }
    }
    assert_eq!(
        reservations.values().map(Vec::len).sum::<usize>(),
        applied_reservations,
        "reservations nobody was told about"
    );
    assert_eq!(
        transfers.len(),
        applied_transfers,
        "transfers nobody was told about"
    );

    for row in db
        .query("SELECT product_id, available, reserved FROM stock", &[])
        .await
        .expect("stock")
    {
        let (product, available, held): (i64, i32, i32) = (row.get(0), row.get(1), row.get(2));
        assert_eq!(
            i64::from(held),
            reserved[product as usize],
            "product {product}: reserved"
        );
        // Nothing is confirmed here: available + reserved is the count.
        assert_eq!(
            i64::from(available) + i64::from(held),
            UNITS_PER_PRODUCT,
            "product {product}: units created or lost"
        );
    }
    let mut total = 0i64;
    for row in db
        .query("SELECT id, balance FROM accounts", &[])
        .await
        .expect("accounts")
    {
        let (id, cents): (i64, i64) = (row.get(0), row.get(1));
        total += cents;
        if id > 0 {
            assert_eq!(
                cents, balance[id as usize],
                "account {id}: cents created or lost"
            );
        }
    }
    assert_eq!(total, 0, "the ledger does not sum to zero");

    let (status, audit) = http(&service.addr, "GET", "/v1/admin/audit", ADMIN_TOKEN, None)
        .await
        .expect("audit");
    assert_eq!(status, 200, "{audit}");
    assert_eq!(audit["ok"], true, "audit: {audit}");
    eprintln!(
        "books balanced: {applied_reservations} reservations, {applied_transfers} transfers, \
         {} requests in all",
        ops.len()
    );
}

/// The follower's events against the books: every operation's outcome is known (replayed).
pub(super) async fn check_feed(service: &Service, follower: Follower, ops: &[(Op, Outcome)]) {
    let db = service.db().await;
    let committed: i64 = db
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .expect("count")
        .get(0);
    let seen = follower
        .finish(usize::try_from(committed).expect("count"))
        .await;
    fault_events::check(&db, &seen, &done_of(ops)).await;
}

/// What each operation became, for the feed's checks (every outcome settled).
pub(super) fn done_of(ops: &[(Op, Outcome)]) -> Vec<Done<'_>> {
    ops.iter()
        .map(|(op, outcome)| {
            let applied = *outcome == Outcome::Applied;
            match op {
                Op::Reserve { order, .. } => Done::Reservation { order, applied },
                Op::Transfer { id, .. } => Done::Transfer { id, applied },
            }
        })
        .collect()
}

async fn ready(addr: &str) -> bool {
    matches!(
        http(addr, "GET", "/readyz", API_TOKEN, None).await,
        Ok((200, _))
    )
}

/// kill -9 of the embedded postmaster mid-load: the same service process restarts it and
/// serves again; nothing acknowledged is lost or doubled. Afterwards the restarted postmaster
/// still dies with its service (parent-death signal after a supervised restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_mid_load_is_restarted_by_the_service() {
    let root = temp_root();
    let mut service = Service::start(root.path(), &[]);
    set_up(&service.addr).await;
    let follower = Follower::start(&service.db_url);
    let load = Load::start(&service.addr);
    load.wait_acks(acks_per_phase(), "load before the fault")
        .await;

    let killed = service.kill_postmaster_and_recover().await;
    load.wait_acks(acks_per_phase(), "load after recovery")
        .await;
    let mut ops = load.finish().await;
    assert!(
        service.running(),
        "the service itself must not have restarted"
    );
    assert!(service.log().contains("embedded PostgreSQL restarted"));

    let unknown = ops.iter().filter(|(_, o)| *o == Outcome::Unknown).count();
    eprintln!("{unknown} requests had no clear answer during the outage");
    replay(&service.addr, &mut ops, false).await;
    check_books(&service, &ops).await;
    check_feed(&service, follower, &ops).await;

    // saldo's own directory and the cluster's password: private; the password never shown.
    let state = root.path().join("saldo");
    let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    let private = if nix::unistd::geteuid().is_root() {
        0o711
    } else {
        0o700
    };
    assert_eq!(mode(&state), private, "{state:?}");
    let password_file = state.join("postgres.password");
    assert_eq!(mode(&password_file), 0o600);
    let password = std::fs::read_to_string(&password_file).expect("password");
    let stdout = std::fs::read_to_string(service.stderr.with_extension("out")).expect("stdout");
    assert!(
        !service.log().contains(password.trim()) && !stdout.contains(password.trim()),
        "the cluster's password was printed or logged"
    );

    // The restarted postmaster is still on its parent's leash.
    let restarted = service.kill9().await;
    assert!(restarted.is_some_and(|pid| pid != killed));
}

/// kill -9 of the service mid-load: its postmaster exits too, a new service on the same data
/// directory takes over, and replaying every request with its id changes nothing acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_killed_mid_load_loses_nothing_on_replay() {
    let root = temp_root();
    let mut first = Service::start(root.path(), &[]);
    set_up(&first.addr).await;
    // The follower's pool reconnects to the new service's PostgreSQL: same data directory,
    // same password and socket.
    let follower = Follower::start(&first.db_url);
    let load = Load::start(&first.addr);
    load.wait_acks(acks_per_phase(), "load before the fault")
        .await;

    let second = first.kill9_and_restart(root.path(), &[]).await;
    *load.addr.write().expect("addr") = second.addr.clone();
    load.wait_acks(acks_per_phase(), "load on the new service")
        .await;
    let mut ops = load.finish().await;

    let unknown = ops.iter().filter(|(_, o)| *o == Outcome::Unknown).count();
    eprintln!("{unknown} requests had no clear answer around the kill");
    replay(&second.addr, &mut ops, true).await;
    check_books(&second, &ops).await;
    check_feed(&second, follower, &ops).await;
}

/// `--pool-size 2` means two connections to PostgreSQL in all, under load and after it (the
/// old code kept its migration connection open beside the pool: N+1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_size_is_the_number_of_connections() {
    const POOL: i64 = 2;
    const ROUNDS: usize = 50;
    const CONCURRENT: usize = 16;
    let root = temp_root();
    let service = Service::start(root.path(), &["--pool-size", &POOL.to_string()]);
    let db = service.db().await;
    let mut most = 0i64;
    let mut rounds_at_most = 0;
    for _ in 0..ROUNDS {
        let requests: Vec<_> = (0..CONCURRENT)
            .map(|_| {
                let addr = service.addr.clone();
                tokio::spawn(async move { ready(&addr).await })
            })
            .collect();
        for r in requests {
            r.await.expect("request");
        }
        let row = db
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .expect("count backends");
        let open: i64 = row.get(0);
        most = most.max(open);
        if open >= POOL {
            rounds_at_most += 1;
            if rounds_at_most >= 3 {
                break;
            }
        }
    }
    assert_eq!(
        most, POOL,
        "the service's connections to PostgreSQL with --pool-size {POOL}"
    );
}

/// A PostgreSQL that cannot be brought back (here: its configuration was broken after it
/// started) ends the service with a non-zero status after the bounded restarts, instead of a
/// service that stays "alive" while every route fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_that_cannot_be_kept_up_ends_the_service() {
    const GIVE_UP_TIMEOUT: Duration = Duration::from_secs(90);
    let root = temp_root();
    let mut service = Service::start(root.path(), &[]);
    // Read at the next start only: the running server is unaffected.
    let auto_conf = service.cluster_dir.join("postgresql.auto.conf");
    let mut conf = std::fs::read_to_string(&auto_conf).expect("auto.conf");
    conf.push_str("\nmax_connections = 'not a number'\n");
    std::fs::write(&auto_conf, conf).expect("break the configuration");
    sigkill(service.postmaster_pid().expect("postmaster pid"));

    let deadline = Instant::now() + GIVE_UP_TIMEOUT;
    let status = loop {
        if let Some(status) = service.child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running after {GIVE_UP_TIMEOUT:?} without its database: {}",
            service.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!status.success(), "exit status {status}");
    let log = service.log();
    assert_eq!(
        log.matches("restarting it").count(),
        5,
        "each bounded attempt is logged: {log}"
    );
    assert!(log.contains("giving up"), "{log}");
}

/// Runs `saldo migrate` with `SALDO_DATA_DIR=data_dir` (bounded); returns status and stderr.
fn migrate_with_data_dir(data_dir: &Path) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(saldo_bin())
        .arg("migrate")
        .env("SALDO_DATA_DIR", data_dir)
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run saldo migrate");
    let deadline = Instant::now() + START_TIMEOUT;
    while matches!(child.try_wait(), Ok(None)) {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("saldo migrate did not finish within {START_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("saldo migrate output");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The reproduction: `SALDO_DATA_DIR=/tmp/x/pg` must leave `/tmp/x` as it was (the old
/// code made it `postgres:postgres 0700` as root, 0700 otherwise).
#[test]
fn the_data_directory_parent_keeps_its_owner_and_mode() {
    use std::os::unix::fs::MetadataExt;
    let root = temp_root();
    let parent = root.path().join("x");
    std::fs::create_dir(&parent).expect("mkdir");
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let before = std::fs::metadata(&parent).expect("meta");
    let (status, stderr) = migrate_with_data_dir(&parent.join("pg"));
    assert!(status.success(), "{stderr}");
    let after = std::fs::metadata(&parent).expect("meta");
    assert_eq!(
        after.permissions().mode() & 0o7777,
        0o755,
        "mode of {parent:?}"
    );
    assert_eq!(
        (after.uid(), after.gid()),
        (before.uid(), before.gid()),
        "owner of {parent:?}"
    );
}

/// `SALDO_DATA_DIR` naming a cluster directory (the old meaning) is refused, saying where the
/// cluster lives now; nothing is started or changed.
#[test]
fn an_old_style_data_directory_is_refused_with_directions() {
    let root = temp_root();
    let old = root.path().join("pg");
    std::fs::create_dir(&old).expect("mkdir");
    std::fs::write(old.join("PG_VERSION"), "15\n").expect("PG_VERSION");
    let (status, stderr) = migrate_with_data_dir(&old);
    assert!(!status.success());
    assert!(
        stderr.contains("now names saldo's own directory"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&root.path().join("postgres").display().to_string()),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(&old).expect("read").count(),
        1,
        "nothing written"
    );
}

/// saldo keeps secrets in its data directory: one that other users may write to is refused
/// (and left as it is).
#[test]
fn a_data_directory_others_can_write_to_is_refused() {
    let root = temp_root();
    let open = root.path().join("open");
    std::fs::create_dir(&open).expect("mkdir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let (status, stderr) = migrate_with_data_dir(&open);
    assert!(!status.success());
    assert!(stderr.contains("writable by other users"), "{stderr}");
    let mode = std::fs::metadata(&open).expect("meta").permissions().mode() & 0o7777;
    assert_eq!(mode, 0o777);
    assert_eq!(std::fs::read_dir(&open).expect("read").count(), 0);
}

/// Ctrl-C in a terminal (SIGINT to the whole process group): the service finishes, stops its
/// PostgreSQL itself and exits 0; PostgreSQL, in a group of its own, is not signalled behind
/// its back (so the supervisor has nothing to restart during the shutdown).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_the_service_and_then_its_postgres() {
    let root = temp_root();
    let mut service = Service::start(root.path(), &[]);
    let postmaster = service.postmaster_pid().expect("postmaster pid");
    // Once a request was served, the server has polled its shutdown future, which installs
    // the SIGINT handler (before that, SIGINT still has its default, fatal disposition).
    let deadline = Instant::now() + START_TIMEOUT;
    while !ready(&service.addr).await {
        assert!(Instant::now() < deadline, "never ready: {}", service.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let group = nix::unistd::Pid::from_raw(-(service.child.id() as i32));
    nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGINT).expect("SIGINT the group");
    let deadline = Instant::now() + ORPHAN_TIMEOUT;
    let status = loop {
        if let Some(status) = service.child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running: {}",
            service.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "exit status {status}: {}", service.log());
    wait_for("the postmaster to stop", ORPHAN_TIMEOUT, || {
        !alive(postmaster)
    })
    .await;
    let log = service.log();
    assert!(!log.contains("restarting it"), "{log}");
    let stdout = std::fs::read_to_string(service.stderr.with_extension("out")).expect("stdout");
    assert!(stdout.contains("stopped"), "{stdout}");
}

/// Stock of `product` as the database has it: (available, reserved).
async fn stock_in_db(service: &Service, product: i64) -> (i32, i32) {
    let row = service
        .db()
        .await
        .query_one(
            "SELECT available, reserved FROM stock WHERE product_id = $1",
            &[&product],
        )
        .await
        .expect("stock row");
    (row.get(0), row.get(1))
}

async fn audit_clean(addr: &str) {
    let (status, body) = http(addr, "GET", "/v1/admin/audit", ADMIN_TOKEN, None)
        .await
        .expect("audit");
    assert_eq!((status, &body["ok"]), (200, &json!(true)), "{body}");
}

/// Idempotency for good, through the binary (its default strategy, `batched`): a checkout's late
/// retry of a cancelled or an expired order takes nothing and answers the order's real state;
/// taking it again is the explicit re-reserve, itself idempotent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_retries_of_settled_orders_take_nothing() {
    let root = temp_root();
    let service = Service::start(root.path(), &[]);
    set_up(&service.addr).await;
    let addr = service.addr.as_str();
    let reserve = |order: &str, ttl_s: u64| json!({"order_id": order, "items": [{"product_id": 1, "quantity": 2}], "ttl_s": ttl_s});
    let post = |path: String, body: Value| async move {
        http(addr, "POST", &path, API_TOKEN, Some(&body))
            .await
            .expect("answer")
    };
    let before = stock_in_db(&service, 1).await;

    let (status, body) = post("/v1/reservations".into(), reserve("late-cancel", 900)).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = post("/v1/orders/late-cancel/release".into(), json!({})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post("/v1/reservations".into(), reserve("late-expire", 1)).await;
    assert_eq!(status, 201, "{body}");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (status, body) = http(addr, "POST", "/v1/admin/sweep", ADMIN_TOKEN, None)
        .await
        .expect("sweep");
    assert_eq!(status, 200, "{body}");

    for (order, ttl_s, settled) in [
        ("late-cancel", 900, "released"),
        ("late-expire", 1, "expired"),
    ] {
        for _ in 0..3 {
            let (status, body) = post("/v1/reservations".into(), reserve(order, ttl_s)).await;
            assert_eq!(status, 200, "late retry of {order}: {body}");
            assert_eq!(body["replayed"], true, "{body}");
            assert_eq!(body["items"][0]["status"], settled, "{body}");
        }
    }
    assert_eq!(
        stock_in_db(&service, 1).await,
        before,
        "late retries took stock"
    );

    let again = json!({"rereserve_id": "late-expire-again"});
    let (status, body) = post("/v1/orders/late-expire/rereserve".into(), again.clone()).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = post("/v1/orders/late-expire/rereserve".into(), again).await;
    assert_eq!((status, &body["replayed"]), (200, &json!(true)), "{body}");
    assert_eq!(
        stock_in_db(&service, 1).await,
        (before.0 - 2, before.1 + 2),
        "the re-reserve takes once"
    );
    audit_clean(addr).await;
}

/// A timeout answer is the truth, through the binary: reservations queued behind a locked product
/// answer "not applied" by their deadline, and that is true — nothing of them commits later. On the
/// old binary they answered a bare 503 `timeout` and most committed once the lock went away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_answer_is_the_truth() {
    const BUYERS: usize = 16;
    let root = temp_root();
    let service = Service::start(
        root.path(),
        &["--request-timeout-ms", "500", "--lock-timeout-ms", "5000"],
    );
    set_up(&service.addr).await;
    let before = stock_in_db(&service, 2).await;
    let holder = service.db().await;
    holder.batch_execute("BEGIN").await.expect("begin");
    holder
        .execute("SELECT 1 FROM stock WHERE product_id = 2 FOR UPDATE", &[])
        .await
        .expect("lock");
    let started = Instant::now();
    let buyers: Vec<_> = (0..BUYERS)
        .map(|i| {
            let addr = service.addr.clone();
            tokio::spawn(async move {
                let body = json!({"order_id": format!("held-{i}"),
                                  "items": [{"product_id": 2, "quantity": 1}]});
                http(&addr, "POST", "/v1/reservations", API_TOKEN, Some(&body)).await
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(BUYERS);
    for buyer in buyers {
        answers.push(buyer.await.expect("join"));
    }
    let answered_in = started.elapsed();
    for answer in &answers {
        let (status, body) = answer.as_ref().expect("an answer");
        assert_eq!(*status, 503, "{body}");
        assert_eq!(body["applied"], false, "not applied: {body}");
    }
    holder.batch_execute("ROLLBACK").await.expect("rollback");
    // Everything in flight has had time to commit, were it going to.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rows: i64 = service
        .db()
        .await
        .query_one(
            "SELECT count(*) FROM reservations WHERE order_id LIKE 'held-%'",
            &[],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(
        rows, 0,
        "a reservation answered 'not applied' was committed"
    );
    assert_eq!(stock_in_db(&service, 2).await, before);
    assert!(
        answered_in < Duration::from_secs(10),
        "answers took {answered_in:?}"
    );
    audit_clean(&service.addr).await;
}
