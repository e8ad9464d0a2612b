//! `saldo bench` through the real binary, briefly (one round of one second: these tests check
//! what the command reports and cleans up, never how fast anything is): both strategies run with
//! their invariants checked, the JSON and SVG outputs carry every strategy, the ledger scenario
//! checks the ledger, bad flags are refused, and the scratch database is gone afterwards.

use std::process::{Command, Output, Stdio};

use saldo_lab::testing::test_db;
use serde_json::Value;

/// Runs `saldo --database-url <fresh test db> bench ARGS…`; returns the output, the URL and
/// the scratch database name the run used (`saldo_bench_<pid>`).
async fn bench(args: &[&str]) -> (Output, String, String) {
    let db = test_db().await;
    let url = db.url.clone();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let run_url = url.clone();
    let (out, pid) = tokio::task::spawn_blocking(move || {
        let child = Command::new(env!("CARGO_BIN_EXE_saldo"))
            .arg("--database-url")
            .arg(&run_url)
            .arg("bench")
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run saldo");
        let pid = child.id();
        (child.wait_with_output().expect("wait for saldo"), pid)
    })
    .await
    .expect("join");
    (out, url, format!("saldo_bench_{pid}"))
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "saldo bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--json prints JSON")
}

const SHORT: &[&str] = &[
    "--duration",
    "1",
    "--warmup",
    "0",
    "--rounds",
    "1",
    "--json",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_runs_both_strategies_checks_invariants_and_plots() {
    let plot = std::env::temp_dir().join(format!("saldo-bench-test-{}.svg", std::process::id()));
    let plot_arg = plot.to_string_lossy().to_string();
    let mut args = vec![
        "--scenario",
        "hot",
        "--concurrency",
        "8",
        "--plot",
        &plot_arg,
    ];
    args.extend_from_slice(SHORT);
    let (out, url, scratch) = bench(&args).await;
    let report = json(&out);
    assert_eq!(report["invariants_ok"], true);
    let summaries = report["summaries"].as_array().expect("summaries");
    let names: Vec<&str> = summaries
        .iter()
        .map(|s| s["strategy"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["atomic", "batched"]);
    for s in summaries {
        assert!(s["ops_per_s"].as_f64().expect("ops") > 0.0, "{s}");
        assert_eq!(s["errors"], 0);
    }
    for run in report["runs"].as_array().expect("runs") {
        let checks = run["invariants"].as_array().expect("checks");
        assert_eq!(checks.len(), 3);
        assert!(checks.iter().all(|c| c["ok"] == true), "{run}");
    }
    let svg = std::fs::read_to_string(&plot).expect("plot written");
    let _ = std::fs::remove_file(&plot);
    assert!(svg.starts_with("<svg") && svg.contains("atomic") && svg.contains("batched"));

    // The scratch database was dropped.
    let pool = saldo::db::connect(&url, &saldo::db::PoolOptions::default()).expect("pool");
    let client = pool.get().await.expect("client");
    let left: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_database WHERE datname = $1",
            &[&scratch],
        )
        .await
        .expect("pg_database")
        .get(0);
    assert_eq!(left, 0);
}

/// `bundle`: each order names one bundle of three components; the check that the units granted
/// are the units live in the database counts the components' (one per bundle order would fail
/// it), and HTTP mode refuses the scenario (its bundles are laid out by the fixtures).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundle_orders_take_their_components_units() {
    let mut args = vec![
        "--scenario",
        "bundle",
        "--products",
        "30",
        "--items",
        "3",
        "--concurrency",
        "4",
    ];
    args.extend_from_slice(SHORT);
    let (out, _, _) = bench(&args).await;
    let report = json(&out);
    assert_eq!(report["invariants_ok"], true, "{report}");
    for run in report["runs"].as_array().expect("runs") {
        let checks = run["invariants"].as_array().expect("checks");
        let live = checks
            .iter()
            .find(|c| c["name"] == "granted = reserved rows")
            .expect("the units check");
        assert_eq!(live["ok"], true, "{run}");
        assert!(run["ok"].as_u64().expect("ok") > 0, "{run}");
        assert_eq!(run["errors"], 0, "{run}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_check_the_ledger() {
    let mut args = vec!["--scenario", "transfers-hot", "--concurrency", "4"];
    args.extend_from_slice(SHORT);
    let (out, _, _) = bench(&args).await;
    let report = json(&out);
    assert_eq!(report["summaries"][0]["strategy"], "ordered");
    let checks = report["runs"][0]["invariants"].as_array().expect("checks");
    let names: Vec<&str> = checks
        .iter()
        .map(|c| c["name"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        [
            "ledger audit clean",
            "balances conserved",
            "granted = journal rows"
        ]
    );
    assert!(checks.iter().all(|c| c["ok"] == true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_flags_are_refused() {
    for args in [
        &["--strategy", "bogus"][..],
        &["--scenario", "transfers-hot", "--strategy", "atomic"],
        &["--concurrency", "0"],
        &["--skew", "9"],
        &["--target", "http://127.0.0.1:1"],
    ] {
        let (out, _, _) = bench(args).await;
        assert!(!out.status.success(), "{args:?} was accepted");
    }
}

/// A bench whose stderr is not a terminal prints `progress:` lines (the
/// current rate and latency) while it runs, like pgbench `-P`; `--progress 0` turns them off.
/// Durations take units.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_lines_while_it_runs_and_none_with_progress_0() {
    let base = [
        "--strategy",
        "atomic",
        "--concurrency",
        "4",
        "--duration",
        "2s",
        "--warmup",
        "0s",
        "--rounds",
        "1",
        "--json",
    ];
    let mut args = base.to_vec();
    args.extend(["--progress", "500ms"]);
    let (out, _, _) = bench(&args).await;
    json(&out);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("progress: round 1 atomic"))
        .collect();
    assert!(!lines.is_empty(), "no progress line: {stderr}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains("ops/s") && l.contains("errors 0")),
        "{stderr}"
    );
    let mut args = base.to_vec();
    args.extend(["--progress", "0"]);
    let (out, _, _) = bench(&args).await;
    json(&out);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("progress:"), "{stderr}");
}

/// `saldo serve` on `url` at the fixed `addr`, with fixed tokens; returns once it listens.
async fn serve_at(url: &str, data: &std::path::Path, addr: &str) -> tokio::process::Child {
    serve_with(url, data, addr, &[]).await
}

/// [`serve_at`] with `extra` flags.
async fn serve_with(
    url: &str,
    data: &std::path::Path,
    addr: &str,
    extra: &[&str],
) -> tokio::process::Child {
    use tokio::io::AsyncBufReadExt;
    let mut child = crate::tokens::saldo(data)
        .args(["--database-url", url, "serve", "--listen", addr])
        .args(["--strategy", "atomic", "--pool-size", "4"])
        .args(["--admin-token", HTTP_ADMIN, "--api-token", HTTP_API])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn saldo serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let listening = async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.starts_with("saldo listening on") {
                return true;
            }
        }
        false
    };
    let up = tokio::time::timeout(std::time::Duration::from_secs(60), listening).await;
    assert!(matches!(up, Ok(true)), "saldo serve did not start");
    // Keep draining stdout so the service never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    child
}

/// A loopback address with a port free a moment ago (the service binds it next).
fn free_loopback_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").to_string()
}

const HTTP_ADMIN: &str = "bench-admin-token-0123456789";
const HTTP_API: &str = "bench-api-token-0123456789ab";

/// The HTTP bench counts connection errors and keeps going. The service is
/// killed mid-run (requests in flight are cut, new ones refused) and started again on the same
/// port; the bench finishes, reports connection errors, and its checks (audit, units) still
/// pass. Before, one connection error ended the whole bench.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_bench_counts_connection_errors_and_keeps_going() {
    use tokio::io::AsyncBufReadExt;
    let db = test_db().await;
    let data = tempfile::tempdir().expect("tempdir");
    let addr = free_loopback_addr();
    let mut first = serve_at(&db.url, data.path(), &addr).await;
    let target = format!("http://{addr}");
    let mut bench = tokio::process::Command::new(env!("CARGO_BIN_EXE_saldo"))
        .args(["bench", "--target", &target])
        .args(["--admin-token", HTTP_ADMIN, "--api-token", HTTP_API])
        .args(["--concurrency", "4", "--products", "10", "--duration", "6s"])
        .args(["--warmup", "0s", "--rounds", "1", "--json"])
        .args(["--progress", "200ms", "--max-error-pct", "100"])
        .env_remove("SALDO_ADMIN_TOKEN")
        .env_remove("SALDO_API_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn saldo bench");
    let stderr = bench.stderr.take().expect("stderr");
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    // The load is running once the first progress line is out.
    let running = async {
        while let Ok(Some(line)) = lines.next_line().await {
            let progress = line.starts_with("progress:");
            seen.push(line);
            if progress {
                return true;
            }
        }
        false
    };
    let started = tokio::time::timeout(std::time::Duration::from_secs(60), running).await;
    assert!(matches!(started, Ok(true)), "no progress line: {seen:#?}");
    first.kill().await.expect("kill the service");
    let _ = first.wait().await;
    let mut second = serve_at(&db.url, data.path(), &addr).await;
    let rest = tokio::spawn(async move {
        let mut rest = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            rest.push(line);
        }
        rest
    });
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        bench.wait_with_output(),
    )
    .await
    .expect("the bench ended in time")
    .expect("wait for the bench");
    let rest = rest.await.expect("stderr reader");
    let _ = second.kill().await;
    assert!(out.status.success(), "bench failed: {seen:#?} {rest:#?}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    let run = &report["runs"][0];
    assert!(
        run["connection_errors"]
            .as_u64()
            .expect("connection_errors")
            > 0,
        "{run:#}"
    );
    assert!(run["ok"].as_u64().expect("ok") > 0, "{run:#}");
    assert_eq!(report["invariants_ok"], true, "{run:#}");
}

/// `saldo bench --target` against `addr` with these tokens and extra flags; the output.
async fn http_bench(addr: &str, admin: &str, api: &str, extra: &[&str]) -> Output {
    let target = format!("http://{addr}");
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_saldo"))
        .args(["bench", "--target", &target])
        .args(["--admin-token", admin, "--api-token", api])
        .args([
            "--scenario",
            "uniform",
            "--concurrency",
            "4",
            "--products",
            "10",
        ])
        .args(["--duration", "1s"])
        .args([
            "--warmup",
            "0s",
            "--rounds",
            "1",
            "--json",
            "--progress",
            "0",
        ])
        .args(extra)
        .env_remove("SALDO_ADMIN_TOKEN")
        .env_remove("SALDO_API_TOKEN")
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(std::time::Duration::from_secs(120), run)
        .await
        .expect("the bench ended in time")
        .expect("run saldo bench")
}

/// Rows of the bench's product range, and its active reservations.
async fn bench_rows(pool: &deadpool_postgres::Pool) -> (i64, i64) {
    let client = pool.get().await.expect("client");
    let products: i64 = client
        .query_one(
            "SELECT count(*) FROM stock WHERE product_id > $1",
            &[&saldo_lab::bench::http::PRODUCT_OFFSET],
        )
        .await
        .expect("stock")
        .get(0);
    let active: i64 = client
        .query_one(
            "SELECT count(*) FROM reservations WHERE status = 'active'",
            &[],
        )
        .await
        .expect("reservations")
        .get(0);
    (products, active)
}

/// The HTTP bench writes into the service it measures, so: a wrong token is named (API or
/// admin) before anything is written; a service that holds data is refused unless
/// `--target-allow-writes`; with it, the bench writes only its own range and `bench-` orders,
/// releases its reservations and counts its products to 0 afterwards, and says what it left.
/// Before, it stocked its products first and then failed on the token, or wrote into any
/// service and left a billion units per product there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_bench_writes_only_where_allowed_and_cleans_up() {
    let db = test_db().await;
    let data = tempfile::tempdir().expect("tempdir");
    let addr = free_loopback_addr();
    let mut serve = serve_at(&db.url, data.path(), &addr).await;
    let wrong = "not-the-token-0123456789";
    for (admin, api, named) in [
        (HTTP_ADMIN, wrong, "refused the API token"),
        (wrong, HTTP_API, "refused the admin token"),
    ] {
        let out = http_bench(&addr, admin, api, &[]).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "a wrong token was accepted");
        assert!(stderr.contains(named), "{stderr}");
        assert!(!stderr.contains(wrong), "the token was printed: {stderr}");
        assert_eq!(
            bench_rows(&db.pool).await,
            (0, 0),
            "written before the check"
        );
    }

    // A service with someone's product: refused, nothing written.
    saldo::fixtures::stock_products(&db.pool, 1, 5)
        .await
        .expect("a real product");
    let out = http_bench(&addr, HTTP_ADMIN, HTTP_API, &[]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("already holds data (product 1)")
            && stderr.contains("--target-allow-writes"),
        "{stderr}"
    );
    assert_eq!(bench_rows(&db.pool).await, (0, 0));

    // Allowed: its own range only, and cleaned up.
    let out = http_bench(&addr, HTTP_ADMIN, HTTP_API, &["--target-allow-writes"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let _ = serve.kill().await;
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(report["invariants_ok"], true, "{report:#}");
    let ok = report["runs"][0]["ok"].as_u64().expect("ok");
    assert!(ok > 0, "{report:#}");
    assert!(
        stderr.contains("cleanup: released ")
            && stderr.contains("set 10 bench products to count 0"),
        "{stderr}"
    );
    let client = db.pool.get().await.expect("client");
    let real = client
        .query_one(
            "SELECT available, reserved FROM stock WHERE product_id = 1",
            &[],
        )
        .await
        .expect("product 1");
    assert_eq!(
        (real.get::<_, i32>(0), real.get::<_, i32>(1)),
        (5, 0),
        "touched"
    );
    let left: i64 = client
        .query_one(
            "SELECT count(*) FROM stock WHERE product_id > $1 \
             AND (available <> 0 OR reserved <> 0)",
            &[&saldo_lab::bench::http::PRODUCT_OFFSET],
        )
        .await
        .expect("stock")
        .get(0);
    assert_eq!(left, 0, "bench products left with units");
    let foreign: i64 = client
        .query_one(
            "SELECT count(*) FROM reservations WHERE order_id NOT LIKE 'bench-%'",
            &[],
        )
        .await
        .expect("reservations")
        .get(0);
    assert_eq!(foreign, 0, "orders outside the bench's namespace");
    assert_eq!(
        bench_rows(&db.pool).await,
        (10, 0),
        "reservations left active"
    );
}

/// `--webhook-probe`: a loopback receiver, subscribed for the bench, follows the HTTP load; the
/// report says how many events it got (signatures checked), their lag, and that it caught up,
/// and the subscription is deleted afterwards. A service that refuses loopback targets gets a
/// message naming the flag it needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_probe_reports_whether_a_receiver_keeps_up() {
    let db = test_db().await;
    let data = tempfile::tempdir().expect("tempdir");
    let addr = free_loopback_addr();
    let mut serve = serve_at(&db.url, data.path(), &addr).await;
    let out = http_bench(&addr, HTTP_ADMIN, HTTP_API, &["--webhook-probe"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a refused target was not reported");
    assert!(
        stderr.contains("--webhook-allow-private-targets"),
        "{stderr}"
    );
    let _ = serve.kill().await;
    let _ = serve.wait().await;

    let flags = ["--webhook-allow-private-targets"];
    let mut serve = serve_with(&db.url, data.path(), &addr, &flags).await;
    let out = http_bench(&addr, HTTP_ADMIN, HTTP_API, &["--webhook-probe"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let _ = serve.kill().await;
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    let hook = &report["webhook"];
    let ok = report["runs"][0]["ok"].as_u64().expect("ok");
    // Every acknowledged reservation wrote at least its reservation.created.
    assert!(hook["events"].as_u64().expect("events") >= ok, "{hook:#}");
    assert_eq!(hook["bad_signatures"], 0, "{hook:#}");
    assert_eq!(hook["behind"], 0, "{hook:#}");
    assert!(hook["caught_up_after_ms"].is_u64(), "{hook:#}");
    assert!(hook["lag_p99_ms"].as_u64().expect("p99") >= hook["lag_p50_ms"].as_u64().expect("p50"));
    let client = db.pool.get().await.expect("client");
    let left: i64 = client
        .query_one("SELECT count(*) FROM webhooks", &[])
        .await
        .expect("webhooks")
        .get(0);
    assert_eq!(left, 0, "the probe's subscription was left behind");
}
