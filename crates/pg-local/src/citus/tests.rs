//! The local Citus cluster against real Citus-enabled PostgreSQL: it distributes, it is as
//! locked down as one node, and no node outlives its owner. Without Citus these fail with the
//! "Citus not found" error naming what to install (they are not skipped).

use std::fs;
use std::io::BufRead;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use super::*;
use crate::tests::{mode_of, tcp_sockets_of};

/// Enough connections for these tests; every node reserves as many prepared-transaction slots.
const TEST_CONNECTIONS: u32 = 60;
/// How long a test waits (at most) for stopped postmasters to be gone.
const GONE_LIMIT: Duration = Duration::from_secs(60);
/// The environment variable that turns the ignored holder test into the killed owner.
const HOLDER_ENV: &str = "PG_LOCAL_CITUS_HOLDER";

fn config() -> CitusConfig {
    let mut config = CitusConfig::default();
    config.node.max_connections = TEST_CONNECTIONS;
    config
}

fn start() -> CitusCluster {
    CitusCluster::start(&config()).unwrap_or_else(|e| panic!("{e}"))
}

fn sql(cluster: &CitusCluster, database: &str, sql: &str) -> String {
    cluster
        .run_sql(cluster.coordinator(), database, sql)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

fn wait_until_gone(pids: &[u32]) {
    let started = Instant::now();
    while !pids.iter().all(|p| gone(*p)) {
        assert!(
            started.elapsed() < GONE_LIMIT,
            "postmasters still running: {:?}",
            pids.iter().filter(|p| !gone(**p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A distributed table spread over both workers, a transaction writing on both (2PC), and every
/// node reaching every other one: the inter-node connections authenticate through the .pgpass.
#[test]
fn a_citus_cluster_distributes_over_its_workers() {
    let cluster = start();
    assert_eq!(cluster.workers().len(), DEFAULT_WORKERS);
    assert_eq!(
        sql(
            &cluster,
            DEFAULT_DATABASE,
            "SELECT count(*) FROM pg_dist_node WHERE isactive"
        ),
        (DEFAULT_WORKERS + 1).to_string()
    );
    // Every node connects to every other node (the check runs on each of them).
    assert_eq!(
        sql(
            &cluster,
            DEFAULT_DATABASE,
            "SELECT count(*), bool_and(result) FROM citus_check_cluster_node_health()"
        ),
        format!("{}|t", (DEFAULT_WORKERS + 1).pow(2))
    );
    sql(
        &cluster,
        DEFAULT_DATABASE,
        "CREATE TABLE t (id bigint PRIMARY KEY, n int NOT NULL CHECK (n >= 0)); \
         SELECT create_distributed_table('t', 'id'); \
         INSERT INTO t SELECT g, 1 FROM generate_series(1, 100) g",
    );
    let ports: Vec<String> = cluster
        .workers()
        .iter()
        .map(|w| w.port().to_string())
        .collect();
    let placed = sql(
        &cluster,
        DEFAULT_DATABASE,
        "SELECT string_agg(DISTINCT nodeport::text, ',' ORDER BY nodeport::text) \
         FROM citus_shards WHERE table_name = 't'::regclass",
    );
    let mut expected = ports.clone();
    expected.sort();
    assert_eq!(placed, expected.join(","), "shards on both workers only");
    // Two rows on two different workers in one transaction: committed with 2PC, all or nothing.
    let (a, b) = two_ids_on_different_workers(&cluster);
    sql(
        &cluster,
        DEFAULT_DATABASE,
        &format!("BEGIN; UPDATE t SET n = n - 1 WHERE id = {a}; UPDATE t SET n = n + 1 WHERE id = {b}; COMMIT"),
    );
    let failed = cluster.run_sql(
        cluster.coordinator(),
        DEFAULT_DATABASE,
        &format!("BEGIN; UPDATE t SET n = n + 1 WHERE id = {b}; UPDATE t SET n = n - 1 WHERE id = {a}; COMMIT"),
    );
    assert!(
        failed.is_err(),
        "the CHECK on one worker fails the whole transaction"
    );
    assert_eq!(
        sql(
            &cluster,
            DEFAULT_DATABASE,
            &format!("SELECT string_agg(n::text, ',' ORDER BY id) FROM t WHERE id IN ({a}, {b})")
        ),
        if a < b { "0,2" } else { "2,0" }
    );
}

/// Two ids of table `t` whose shards are on different workers.
fn two_ids_on_different_workers(cluster: &CitusCluster) -> (i64, i64) {
    let row = sql(
        cluster,
        DEFAULT_DATABASE,
        "WITH p AS (SELECT g AS id, (SELECT nodeport FROM citus_shards s \
           WHERE s.shardid = get_shard_id_for_distribution_column('t', g)) AS port \
           FROM generate_series(1, 100) g) \
         SELECT min(id) FILTER (WHERE port = (SELECT min(port) FROM p)), \
                min(id) FILTER (WHERE port = (SELECT max(port) FROM p)) FROM p",
    );
    let (a, b) = row.split_once('|').expect("two ids");
    (a.parse().expect("id"), b.parse().expect("id"))
}

/// The single cluster's rules on every node: our pg_hba (SCRAM for everyone, no trust), the
/// shared password and the .pgpass at 0600, listeners on 127.0.0.1 only, and no way in over
/// TCP without the password.
#[test]
fn every_node_is_locked_down_like_a_single_cluster() {
    let cluster = start();
    assert_eq!(mode_of(cluster.password_file()), 0o600);
    assert_eq!(mode_of(cluster.pgpass_file()), 0o600);
    for node in cluster.nodes() {
        let hba = fs::read_to_string(node.data_dir().join("pg_hba.conf")).expect("pg_hba");
        assert_eq!(hba, auth::HBA, "{}", node.data_dir().display());
        assert!(!hba.contains("trust\n"));
        let sockets = tcp_sockets_of(node.pid().expect("pid"));
        assert!(
            !sockets.is_empty(),
            "every node listens on TCP (inter-node)"
        );
        for line in &sockets {
            let local = line.split_whitespace().nth(1).unwrap_or_default();
            assert!(
                local.starts_with("0100007F:"),
                "a listener beyond 127.0.0.1: {line}"
            );
        }
        let out = Command::new(node.binaries().dir().join("psql"))
            .args(["-h", HOST, "-p", &node.port().to_string(), "-U", SUPERUSER])
            .args(["-d", DEFAULT_DATABASE, "-w", "-Atc", "SELECT 1"])
            .env_remove("PGPASSWORD")
            .env("PGPASSFILE", "/dev/null")
            .output()
            .expect("psql");
        assert!(!out.status.success(), "TCP without the password got in");
        let log = fs::read_to_string(node.log_file()).expect("log");
        let password = fs::read_to_string(cluster.password_file()).expect("password");
        assert!(!log.contains(password.trim()), "the password reached a log");
    }
    let listed = fs::metadata(cluster.pgpass_file()).expect("pgpass");
    assert_eq!(
        listed.permissions().mode() & 0o077,
        0,
        "libpq ignores a readable .pgpass"
    );
}

/// A database made distributed after start-up (what the test harness and `saldo` use): its
/// tables shard over the workers like the default database's; a name that would need quoting
/// is refused before any SQL runs.
#[test]
fn a_created_database_is_distributed_too() {
    let cluster = start();
    cluster.create_database("saldo_x").expect("create");
    assert_eq!(
        sql(
            &cluster,
            "saldo_x",
            "SELECT count(*) FROM pg_dist_node WHERE isactive"
        ),
        (DEFAULT_WORKERS + 1).to_string()
    );
    sql(
        &cluster,
        "saldo_x",
        "CREATE TABLE u (id bigint PRIMARY KEY); SELECT create_distributed_table('u', 'id')",
    );
    assert_eq!(
        sql(
            &cluster,
            "saldo_x",
            "SELECT count(DISTINCT nodeport) FROM citus_shards WHERE table_name = 'u'::regclass"
        ),
        DEFAULT_WORKERS.to_string()
    );
    cluster.drop_database("saldo_x").expect("drop");
    for bad in [
        "Saldo",
        "x; DROP DATABASE postgres",
        "",
        "1x",
        &"a".repeat(64),
    ] {
        let err = cluster.create_database(bad).expect_err("refused");
        assert!(matches!(err, Error::Citus(_)), "{err}");
    }
}

/// Dropping the cluster stops every postmaster and removes every directory it made.
#[test]
fn dropping_the_cluster_stops_every_node() {
    let cluster = start();
    let pids: Vec<u32> = cluster.nodes().map(|n| n.pid().expect("pid")).collect();
    let mut dirs: Vec<PathBuf> = cluster.nodes().map(|n| n.data_dir().to_owned()).collect();
    dirs.push(cluster.pgpass_file().to_owned());
    assert_eq!(pids.len(), DEFAULT_WORKERS + 1);
    drop(cluster);
    assert!(pids.iter().all(|p| gone(*p)), "a node outlived the drop");
    for dir in dirs {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}

/// A panic while the cluster is in scope (a failing test): unwinding drops it, every node stops.
#[test]
fn a_panic_stops_every_node() {
    let (sender, pids) = std::sync::mpsc::channel();
    let panicked = std::thread::spawn(move || {
        let cluster = start();
        let running: Vec<u32> = cluster.nodes().map(|n| n.pid().expect("pid")).collect();
        sender.send(running).expect("send");
        panic!("a test fails while its Citus cluster runs");
    })
    .join();
    assert!(panicked.is_err());
    let pids = pids.recv().expect("the cluster started");
    assert_eq!(pids.len(), DEFAULT_WORKERS + 1);
    assert!(pids.iter().all(|p| gone(*p)), "a node outlived the panic");
}

/// The owner process SIGKILLed (no drop, no unwinding): every node stops anyway, through each
/// postmaster's parent-death signal. The owner is this test binary run again as
/// [`citus_holder_for_the_kill_test`].
#[test]
fn killing_the_owner_stops_every_node() {
    let mut holder = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "citus::tests::citus_holder_for_the_kill_test",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HOLDER_ENV, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("holder");
    let stdout = holder.stdout.take().expect("stdout");
    let pids: Vec<u32> = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| {
            // libtest may print the test's name on the same line first.
            line.split_once("citus pids: ")
                .map(|(_, p)| p.split(' ').map(|p| p.parse().expect("pid")).collect())
        })
        .unwrap_or_else(|| panic!("the holder never started its cluster: {:?}", holder.wait()));
    assert_eq!(pids.len(), DEFAULT_WORKERS + 1);
    assert!(pids.iter().all(|p| !gone(*p)));
    holder.kill().expect("SIGKILL the owner");
    holder.wait().expect("reap the owner");
    wait_until_gone(&pids);
}

/// Not a test on its own: the owner [`killing_the_owner_stops_every_node`] kills.
#[test]
#[ignore = "run by killing_the_owner_stops_every_node"]
fn citus_holder_for_the_kill_test() {
    if std::env::var_os(HOLDER_ENV).is_none() {
        return;
    }
    let cluster = start();
    let pids: Vec<String> = cluster
        .nodes()
        .map(|n| n.pid().expect("pid").to_string())
        .collect();
    println!("citus pids: {}", pids.join(" "));
    // Bounded: if the killer never comes, the holder ends (and drops the cluster) on its own.
    std::thread::sleep(GONE_LIMIT * 2);
}

/// Binaries without citus.so are refused with one line naming what to install.
#[test]
fn binaries_without_citus_say_what_to_install() {
    let plain = tempfile::tempdir().expect("tempdir");
    let err = CitusCluster::start(&CitusConfig::default().bin_dir(plain.path()))
        .expect_err("no citus there");
    let message = err.to_string();
    assert!(matches!(err, Error::CitusNotFound { .. }), "{message}");
    for needle in [
        "citus.so",
        "build-citus",
        CITUS_BIN_ENV,
        "Citus's own packages",
    ] {
        assert!(message.contains(needle), "{needle}: {message}");
    }
    assert!(!message.contains('\n'), "one line: {message}");
    let err = CitusCluster::start(&config().workers(0)).expect_err("no workers");
    assert!(matches!(err, Error::Citus(_)), "{err}");
    let err = CitusCluster::start(&config().workers(MAX_WORKERS + 1)).expect_err("too many");
    assert!(matches!(err, Error::Citus(_)), "{err}");
}
