//! The history check under faults, against the REAL `saldo serve` binary pointed with
//! `--database-url` (given as `DATABASE_URL`, so the password stays out of argv) at the fault
//! lab's proxy (`saldo_lab::faults::proxy`) in front of a PostgreSQL of the harness (pg-local,
//! listening on 127.0.0.1). Clients reserve, confirm, release, transfer, hold, post and void
//! while the proxy cuts, delays and blackholes the service's database connections (one node),
//! or while Citus nodes are killed -9 and restarted (a local Citus cluster). Every answer is
//! recorded; afterwards every unknown outcome is learned by replaying its request, and the
//! history is checked against the database read directly and the service's audit
//! (`saldo_lab::faults::check`). On Citus, no prepared transaction may be left once Citus's
//! recovery has run.
//!
//! About a minute each on a busy 2-core machine; `SALDO_FAULTS_SCALE=N` runs N rounds of
//! faults instead of one (clamped to 1..=100). `SALDO_FAULTS_BIN` runs another build of `saldo`.
//! The Citus test needs Citus-enabled binaries (`SALDO_CITUS_PG_BIN`, or where
//! `pg_local::citus::find_binaries` looks) and fails without them, as the other Citus suites do.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use deadpool_postgres::tokio_postgres::{self, NoTls};
use saldo_lab::faults::check::{self, Check, Opening, Violation};
use saldo_lab::faults::history::{self, Record, Settle, Verdict};
use saldo_lab::faults::http::{self, Answer, Request};
use saldo_lab::faults::load::{Load, LoadConfig};
use saldo_lab::faults::proxy::{Cut, Limits, Mode, Proxy};
use serde_json::json;

use super::faults::{saldo_bin, sigkill, temp_root};

const API_TOKEN: &str = "partitions-api-token-0123456789";
const ADMIN_TOKEN: &str = "partitions-admin-token-0123456789";
const CLIENTS: usize = 16;
const PRODUCTS: i64 = 8;
/// Units counted, then restocked, per product: far more than a run reserves, fewer than a
/// reservation may ask for (the load's refused reservations ask for more).
const COUNTED: i64 = 5_000;
const RESTOCKED: i64 = 1_000;
const ACCOUNTS: i64 = 8;
const OPENING_CENTS: i64 = 1_000_000;
/// Acknowledged operations before the first fault and after each one: on one node, and on
/// Citus (each 2PC commit is far slower there).
const ACKS_PER_PHASE: usize = 100;
const CITUS_ACKS_PER_PHASE: usize = 40;
/// Sessions per client at most, whatever happens (a session is 3 to 7 requests).
const MAX_SESSIONS: usize = 400;
/// A phase's acknowledgements come within this, or the test fails.
const PHASE_TIMEOUT: Duration = Duration::from_secs(90);
/// The clients' own bound per request: longer than the service's request timeout.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
const PAUSE_AFTER_UNKNOWN: Duration = Duration::from_millis(200);
/// Start-up, migrations included (a Citus schema takes the longest on a busy machine).
const START_TIMEOUT: Duration = Duration::from_secs(180);
/// The one-node service gives a request this long: a blackhole longer than it makes the
/// requests caught in it answer by their deadline.
const ONE_NODE_REQUEST_TIMEOUT_MS: &str = "3000";
/// Citus commits by 2PC across nodes, far slower on 2 busy cores.
const CITUS_REQUEST_TIMEOUT_MS: &str = "10000";
/// The one-node faults, in order, each held this long before the proxy passes again.
const FAULTS: [(&str, Mode, Duration); 4] = [
    (
        "every packet delayed 250 ms",
        Mode::Delay(Duration::from_millis(250)),
        Duration::from_secs(4),
    ),
    (
        "every connection reset",
        Mode::Drop(Cut::Reset),
        Duration::from_secs(2),
    ),
    (
        "a blackhole longer than the request timeout",
        Mode::Blackhole,
        Duration::from_secs(5),
    ),
    (
        "every connection closed",
        Mode::Drop(Cut::Close),
        Duration::from_secs(2),
    ),
];
/// Restarts of a killed node: its orphaned backends may hold its shared memory a moment.
const RESTART_ATTEMPTS: u32 = 10;
const RESTART_PAUSE: Duration = Duration::from_millis(500);
/// Rounds of Citus's 2PC recovery before prepared transactions left behind fail the test.
const RECOVERY_ROUNDS: usize = 20;

fn rounds() -> usize {
    std::env::var("SALDO_FAULTS_SCALE")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(1)
        .clamp(1, 100)
}

/// A `saldo serve` child on `--database-url`; killed when dropped.
struct Served {
    child: Child,
    addr: String,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Served {
    async fn start(root: &Path, database_url: &str, extra: &[&str]) -> Served {
        let (stdout, stderr) = (root.join("serve.out"), root.join("serve.err"));
        let child = Command::new(saldo_bin())
            .args(["serve", "--listen", "127.0.0.1:0"])
            // No reservation lapses during a run: every fate is the clients'.
            .args(["--reservation-ttl-s", "86400"])
            .args(extra)
            .env("DATABASE_URL", database_url)
            .env("SALDO_DATA_DIR", root.join("saldo"))
            .env("SALDO_API_TOKEN", API_TOKEN)
            .env("SALDO_ADMIN_TOKEN", ADMIN_TOKEN)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).expect("stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("start saldo serve");
        let mut served = Served {
            child,
            addr: String::new(),
            stdout,
            stderr,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let out = std::fs::read_to_string(&served.stdout).unwrap_or_default();
            if let Some(rest) = out.split("saldo listening on http://").nth(1) {
                served.addr = rest.split_whitespace().next().expect("address").to_owned();
                return served;
            }
            if let Ok(Some(status)) = served.child.try_wait() {
                panic!("saldo serve exited ({status}): {}", tail(&served.log()));
            }
            assert!(
                Instant::now() < deadline,
                "saldo serve did not listen within {START_TIMEOUT:?}: {}",
                tail(&served.log())
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Log lines shown when a test fails, at most.
const LOG_TAIL_LINES: usize = 50;

/// The last [`LOG_TAIL_LINES`] lines of `log`.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

/// The superuser's URL over TCP to 127.0.0.1:`port` (the proxy's), with the password of
/// `password_file`.
fn tcp_url(password_file: &Path, port: u16) -> String {
    let password = std::fs::read_to_string(password_file).expect("the cluster's password");
    format!(
        "postgresql://{}:{}@127.0.0.1:{port}/postgres",
        pg_local::SUPERUSER,
        password.trim()
    )
}

async fn admin(addr: &str, method: &'static str, path: String, body: serde_json::Value) {
    let request = Request {
        method,
        path,
        body: Some(body),
    };
    let answer = http::send(addr, ADMIN_TOKEN, &request, CLIENT_TIMEOUT).await;
    assert!(
        matches!(answer, Answer::Status(200..=299, _)),
        "{method} {}: {answer:?}",
        request.path
    );
}

/// Counts and restocks every product, opens every account; returns what that made.
async fn set_up(addr: &str) -> Opening {
    let mut opening = Opening::default();
    for p in 1..=PRODUCTS {
        let count = json!({ "count": COUNTED });
        admin(addr, "PUT", format!("/v1/products/{p}/stock"), count).await;
        let restock = json!({"delta": RESTOCKED, "reason": "restock"});
        let path = format!("/v1/products/{p}/stock/adjustments");
        admin(addr, "POST", path, restock).await;
        opening.units.insert(p, COUNTED + RESTOCKED);
    }
    for a in 1..=ACCOUNTS {
        let account = json!({"id": a, "opening_balance": OPENING_CENTS});
        admin(addr, "POST", "/v1/accounts".into(), account).await;
        opening.cents.insert(a, OPENING_CENTS);
    }
    opening
}

fn load(addr: &str) -> Load {
    let seed = std::env::var("SALDO_FAULTS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_260_101);
    eprintln!("load seed {seed} (SALDO_FAULTS_SEED)");
    let config = LoadConfig {
        clients: CLIENTS,
        products: PRODUCTS,
        accounts: ACCOUNTS,
        total_cents: ACCOUNTS * OPENING_CENTS,
        max_sessions: MAX_SESSIONS,
        request_timeout: CLIENT_TIMEOUT,
        pause_after_unknown: PAUSE_AFTER_UNKNOWN,
        seed,
    };
    Load::start(addr, API_TOKEN, config)
}

async fn phase(load: &Load, acks: usize, what: &str) {
    if let Err(e) = load.wait_acks(acks, PHASE_TIMEOUT).await {
        panic!("{what}: {e}");
    }
}

/// How often each kind of first answer came: status and problem type, `applied` when said.
fn kinds(history: &[Record]) -> std::collections::BTreeMap<String, usize> {
    let mut kinds = std::collections::BTreeMap::new();
    for record in history {
        let kind = match &record.answer {
            Answer::Status(status, body) => {
                let problem = body["type"]
                    .as_str()
                    .unwrap_or("")
                    .replace("urn:saldo:problem:", "");
                match body.get("applied") {
                    Some(applied) => format!("{status} {problem} applied={applied}"),
                    None => format!("{status} {problem}"),
                }
            }
            Answer::None(_) => "no answer".to_owned(),
        };
        *kinds.entry(kind).or_insert(0) += 1;
    }
    kinds
}

/// What the faults did to the first answers: (applied, not applied, unknown, 5xx or none).
fn first_answers(history: &[Record]) -> (usize, usize, usize, usize) {
    let mut counts = (0, 0, 0, 0);
    for record in history {
        match history::verdict(&record.answer) {
            Verdict::Applied => counts.0 += 1,
            Verdict::NotApplied => counts.1 += 1,
            Verdict::Unknown => counts.2 += 1,
        }
        if !matches!(record.answer, Answer::Status(200..=499, _)) {
            counts.3 += 1;
        }
    }
    counts
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("connect to the database directly");
    tokio::spawn(connection);
    client
}

/// The history against the database (read directly at `direct_url`) and the audit.
async fn violations(
    addr: &str,
    direct_url: &str,
    opening: &Opening,
    history: &[Record],
) -> Vec<Violation> {
    let books = check::read_books(&connect(direct_url).await)
        .await
        .expect("read the books");
    let mut found = check::check(history, opening, &books);
    found.extend(check::audit(addr, ADMIN_TOKEN).await);
    found
}

/// At most this many of the service's 500 log lines go into a failure message.
const LOGGED_FAILURES: usize = 20;

fn assert_clean(found: &[Violation], history: &[Record], log: &str) {
    let (applied, refused, unknown) = history::tally(history);
    eprintln!(
        "history: {} operations, {applied} applied, {refused} not applied, {unknown} unknown \
         after replays; first answers (applied, not applied, unknown, 5xx or none): {:?}; \
         by kind: {:?}",
        history.len(),
        first_answers(history),
        kinds(history)
    );
    let listed: Vec<String> = found.iter().map(ToString::to_string).collect();
    let failures: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("request failed") && l.contains("status=500"))
        .take(LOGGED_FAILURES)
        .collect();
    assert!(
        found.is_empty(),
        "{} violations:\n{}\nthe service's failures:\n{}",
        found.len(),
        listed.join("\n"),
        failures.join("\n")
    );
}

/// One node behind the proxy: the service's database connections delayed, reset, blackholed
/// and closed mid-load; the history holds, and the same check fails on a unit created behind
/// the service's back afterwards (so it checks something).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_keeps_its_history_through_a_misbehaving_network() {
    let started = Instant::now();
    let root = temp_root();
    let cluster = tokio::task::spawn_blocking(|| {
        pg_local::Cluster::start(&pg_local::Config::ephemeral().with_tcp())
    })
    .await
    .expect("join")
    .expect("PostgreSQL on 127.0.0.1");
    let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, cluster.port()));
    let proxy = Proxy::start(upstream, Limits::default())
        .await
        .expect("the proxy");
    let url = tcp_url(cluster.password_file(), proxy.addr().port());
    let timeout = ["--request-timeout-ms", ONE_NODE_REQUEST_TIMEOUT_MS];
    let service = Served::start(root.path(), &url, &timeout).await;
    let opening = set_up(&service.addr).await;

    let load = load(&service.addr);
    phase(&load, ACKS_PER_PHASE, "before the faults").await;
    for round in 1..=rounds() {
        for (what, mode, held) in FAULTS {
            let before = proxy.stats();
            proxy.set(mode).expect("fault");
            tokio::time::sleep(held).await;
            proxy.set(Mode::Pass).expect("pass");
            let cut = proxy.stats().cut - before.cut;
            if matches!(mode, Mode::Drop(_)) {
                assert!(cut > 0, "{what}: no connection was cut");
            }
            eprintln!("round {round}: {what} for {held:?} ({cut} connections cut)");
            phase(
                &load,
                ACKS_PER_PHASE,
                &format!("round {round}, after {what}"),
            )
            .await;
        }
    }
    let mut history = load.finish().await;
    let (_, _, _, failed) = first_answers(&history);
    assert!(
        failed > 0,
        "the faults made no request fail: {:?}",
        proxy.stats()
    );
    let unsettled =
        history::settle(&service.addr, API_TOKEN, &mut history, Settle::default()).await;
    assert!(
        unsettled.is_empty(),
        "never settled: {unsettled:?}\n{}",
        tail(&service.log())
    );

    let direct = cluster.url("postgres");
    let found = violations(&service.addr, &direct, &opening, &history).await;
    assert_clean(&found, &history, &service.log());

    // The same check on the same data, with one unit created behind the service's back.
    connect(&direct)
        .await
        .execute(
            "UPDATE stock SET available = available + 1 WHERE product_id = 1",
            &[],
        )
        .await
        .expect("tamper");
    let found = violations(&service.addr, &direct, &opening, &history).await;
    let checks: Vec<Check> = found.iter().map(|v| v.check).collect();
    assert!(checks.contains(&Check::UnitsConserved), "{found:?}");
    assert!(checks.contains(&Check::Audit), "{found:?}");
    eprintln!("one node under network faults: {:?}", started.elapsed());
}

/// Kills `node` (-9) and starts it again on the same directory and port, a bounded number of
/// attempts (its orphaned backends may hold its shared memory a moment).
fn kill_and_restart(node: &mut pg_local::Cluster, what: &str) {
    let pid = node
        .pid()
        .unwrap_or_else(|| panic!("{what} is not running"));
    sigkill(i32::try_from(pid).expect("pid"));
    let deadline = Instant::now() + START_TIMEOUT;
    while !node.has_exited() {
        assert!(Instant::now() < deadline, "{what} did not die");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut last = None;
    for _ in 0..RESTART_ATTEMPTS {
        match node.restart() {
            Ok(()) => return,
            Err(e) => last = Some(e),
        }
        std::thread::sleep(RESTART_PAUSE);
    }
    panic!("{what} did not restart: {last:?}");
}

/// Runs Citus's 2PC recovery until no node holds a prepared transaction (bounded); returns
/// what each node still holds when the rounds run out (empty: clean).
fn recover_prepared(cluster: &pg_local::CitusCluster) -> Vec<String> {
    let mut left = Vec::new();
    for _ in 0..RECOVERY_ROUNDS {
        // Fails while a node is still starting: the next round tries again.
        let _ = cluster.run_sql(
            cluster.coordinator(),
            "postgres",
            "SELECT recover_prepared_transactions()",
        );
        left = cluster
            .nodes()
            .map(|node| {
                cluster
                    .run_sql(node, "postgres", "SELECT gid FROM pg_prepared_xacts")
                    .unwrap_or_else(|e| format!("unreadable: {e}"))
            })
            .filter(|gids| !gids.is_empty())
            .collect();
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    left
}

fn citus_config() -> pg_local::CitusConfig {
    pg_local::CitusConfig::default()
        .workers(2)
        .setting("citus.shard_count", "8")
        .setting("citus.max_adaptive_executor_pool_size", "4")
}

/// A local Citus cluster (coordinator and two workers) with the service on the coordinator
/// through the proxy: a worker and then the coordinator are killed -9 and restarted mid-load,
/// then the network to the coordinator is cut. The history holds, no answer is a 500, and no
/// prepared transaction is left once Citus's recovery has run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn citus_keeps_its_history_when_nodes_are_killed() {
    let started = Instant::now();
    let root = temp_root();
    let mut cluster =
        tokio::task::spawn_blocking(|| pg_local::CitusCluster::start(&citus_config()))
            .await
            .expect("join")
            .unwrap_or_else(|e| panic!("a local Citus cluster: {e}"));
    let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, cluster.coordinator().port()));
    let proxy = Proxy::start(upstream, Limits::default())
        .await
        .expect("the proxy");
    let url = tcp_url(cluster.password_file(), proxy.addr().port());
    let timeout = ["--request-timeout-ms", CITUS_REQUEST_TIMEOUT_MS];
    let service = Served::start(root.path(), &url, &timeout).await;
    let opening = set_up(&service.addr).await;

    let load = load(&service.addr);
    phase(&load, CITUS_ACKS_PER_PHASE, "before the faults").await;
    for round in 1..=rounds() {
        tokio::task::block_in_place(|| kill_and_restart(&mut cluster.workers_mut()[0], "worker 1"));
        eprintln!("round {round}: worker 1 killed and restarted");
        phase(
            &load,
            CITUS_ACKS_PER_PHASE,
            &format!("round {round}, after the worker's restart"),
        )
        .await;
        tokio::task::block_in_place(|| {
            kill_and_restart(cluster.coordinator_mut(), "the coordinator")
        });
        eprintln!("round {round}: the coordinator killed and restarted");
        phase(
            &load,
            CITUS_ACKS_PER_PHASE,
            &format!("round {round}, after the coordinator's restart"),
        )
        .await;
        proxy.set(Mode::Drop(Cut::Reset)).expect("drop");
        tokio::time::sleep(Duration::from_secs(2)).await;
        proxy.set(Mode::Pass).expect("pass");
        eprintln!("round {round}: the network to the coordinator reset for 2 s");
        phase(
            &load,
            CITUS_ACKS_PER_PHASE,
            &format!("round {round}, after the reset"),
        )
        .await;
    }
    let mut history = load.finish().await;

    // Nothing in flight any more (a 2PC a killed coordinator left prepared would otherwise
    // commit after a replay was refused for it), then the replays, then nothing left again.
    let left = tokio::task::block_in_place(|| recover_prepared(&cluster));
    assert!(left.is_empty(), "prepared transactions left: {left:?}");
    let unsettled =
        history::settle(&service.addr, API_TOKEN, &mut history, Settle::default()).await;
    assert!(
        unsettled.is_empty(),
        "never settled: {unsettled:?}\n{}",
        tail(&service.log())
    );
    let left = tokio::task::block_in_place(|| recover_prepared(&cluster));
    assert!(left.is_empty(), "prepared transactions left: {left:?}");

    let direct = cluster.url("postgres");
    let found = violations(&service.addr, &direct, &opening, &history).await;
    assert_clean(&found, &history, &service.log());
    eprintln!("Citus with nodes killed: {:?}", started.elapsed());
}
