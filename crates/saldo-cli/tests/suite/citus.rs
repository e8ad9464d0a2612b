//! `saldo serve --citus-workers 2` and `saldo race --citus-workers 2` through the real binary
//! (saldo on Citus): the service runs on a local Citus cluster it starts, and every answer of one
//! script of requests (successes, replays, refusals, bad input) has the same status and problem
//! type as on one node, with the same stock and balances at the end; and the tools pointed at
//! an existing coordinator with `--database-url` (serve, audit, repair).

use std::process::Stdio;

use saldo_lab::testing::{citus_db, test_db, until_caught};
use serde_json::Value;

use super::tokens::Serve;

/// (method, path, admin?, body): the quick start's requests and the refusals around them.
/// Products 1, 2 and 3 and accounts 1, 2 and 3 spread over both workers (16 shards).
const SCRIPT: &[(&str, &str, bool, &str)] = &[
    ("PUT", "/v1/products/1/stock", true, r#"{"count": 3}"#),
    ("PUT", "/v1/products/3/stock", true, r#"{"count": 1}"#),
    ("PUT", "/v1/products/2/stock", true, r#"{"count": -1}"#),
    (
        "POST",
        "/v1/reservations",
        false,
        r#"{"order_id": "o-1", "items": [{"product_id": 3, "quantity": 1}, {"product_id": 1, "quantity": 2}]}"#,
    ),
    (
        "POST",
        "/v1/reservations",
        false,
        r#"{"order_id": "o-1", "items": [{"product_id": 3, "quantity": 1}, {"product_id": 1, "quantity": 2}]}"#,
    ),
    (
        "POST",
        "/v1/reservations",
        false,
        r#"{"order_id": "o-1", "items": [{"product_id": 1, "quantity": 1}]}"#,
    ),
    (
        "POST",
        "/v1/reservations",
        false,
        r#"{"order_id": "o-2", "items": [{"product_id": 1, "quantity": 2}]}"#,
    ),
    (
        "POST",
        "/v1/reservations",
        false,
        r#"{"order_id": "o-3", "items": [{"product_id": 99, "quantity": 1}]}"#,
    ),
    ("POST", "/v1/orders/o-1/confirm", false, ""),
    ("POST", "/v1/orders/o-1/confirm", false, ""),
    ("POST", "/v1/orders/nope/confirm", false, ""),
    (
        "POST",
        "/v1/reservations",
        false,
        r#"{"order_id": "o-4", "items": [{"product_id": 1, "quantity": 1}]}"#,
    ),
    ("PUT", "/v1/products/1/stock", true, r#"{"count": 0}"#),
    ("POST", "/v1/orders/o-4/release", false, ""),
    ("POST", "/v1/orders/o-4/release", false, ""),
    (
        "POST",
        "/v1/products/1/stock/adjustments",
        true,
        r#"{"delta": 4, "reason": "found"}"#,
    ),
    ("GET", "/v1/products/1/stock", false, ""),
    ("GET", "/v1/products/3/stock", false, ""),
    (
        "POST",
        "/v1/accounts",
        true,
        r#"{"id": 1, "opening_balance": 100000}"#,
    ),
    ("POST", "/v1/accounts", true, r#"{"id": 3}"#),
    ("POST", "/v1/accounts", true, r#"{"id": 3}"#),
    (
        "POST",
        "/v1/transfers",
        false,
        r#"{"id": "pay-1", "from": 1, "to": 3, "amount": 2500}"#,
    ),
    (
        "POST",
        "/v1/transfers",
        false,
        r#"{"id": "pay-1", "from": 1, "to": 3, "amount": 2500}"#,
    ),
    (
        "POST",
        "/v1/transfers",
        false,
        r#"{"id": "pay-1", "from": 1, "to": 3, "amount": 2501}"#,
    ),
    (
        "POST",
        "/v1/transfers",
        false,
        r#"{"id": "pay-2", "from": 3, "to": 1, "amount": 9999}"#,
    ),
    (
        "POST",
        "/v1/transfers",
        false,
        r#"{"id": "pay-3", "from": 3, "to": 42, "amount": 1}"#,
    ),
    (
        "POST",
        "/v1/transfers",
        false,
        r#"{"id": "pay-4", "from": 3, "to": 3, "amount": 1}"#,
    ),
    (
        "POST",
        "/v1/transfers",
        false,
        r#"{"id": "auth-1", "from": 1, "to": 3, "amount": 3000, "pending": true, "timeout_s": 600}"#,
    ),
    (
        "POST",
        "/v1/transfers/auth-1/post",
        false,
        r#"{"amount": 2000}"#,
    ),
    (
        "POST",
        "/v1/transfers/auth-1/post",
        false,
        r#"{"amount": 2000}"#,
    ),
    ("POST", "/v1/transfers/auth-1/void", false, ""),
    ("POST", "/v1/transfers/nope/void", false, ""),
    ("GET", "/v1/transfers/pay-1", false, ""),
    (
        "POST",
        "/v1/transfer-groups",
        false,
        r#"{"id": "g-1", "transfers": [{"id": "g-1-a", "from": 1, "to": 3, "amount": 10}, {"id": "g-1-b", "from": 3, "to": 1, "amount": 5}]}"#,
    ),
    (
        "POST",
        "/v1/transfer-groups",
        false,
        r#"{"id": "g-2", "transfers": [{"id": "g-2-a", "from": 1, "to": 3, "amount": 10}, {"id": "g-2-b", "from": 3, "to": 1, "amount": 999999}]}"#,
    ),
    ("GET", "/v1/accounts/1", false, ""),
    ("GET", "/v1/accounts/3", false, ""),
    (
        "POST",
        "/v1/reservations",
        false,
        r#"{"order_id": "bad id!", "items": []}"#,
    ),
    // The audit after all of it: clean on both, in the same shape; so nothing to repair.
    ("GET", "/v1/admin/audit", true, ""),
    ("POST", "/v1/admin/repair", true, r#"{"apply": true}"#),
];

/// Of one answer: the status, the problem type (if any) and the body with every timestamp
/// removed (they differ between runs; everything else must not).
fn essence(answer: &str) -> (u16, Option<String>, Value) {
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {answer}"));
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    let mut json: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let problem = json.get("type").and_then(Value::as_str).map(str::to_owned);
    strip_times(&mut json);
    (status, problem, json)
}

fn strip_times(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, _| !k.ends_with("_at"));
            map.values_mut().for_each(strip_times);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_times),
        _ => {}
    }
}

async fn run_script(serve: &Serve) -> Vec<(u16, Option<String>, Value)> {
    let admin = serve.generated("admin").expect("admin token printed");
    let api = serve.generated("api").expect("api token printed");
    let mut out = Vec::with_capacity(SCRIPT.len());
    for (method, path, as_admin, body) in SCRIPT {
        let token = if *as_admin { &admin } else { &api };
        out.push(essence(
            &serve.request(method, path, Some(token), body).await,
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_a_local_citus_cluster_answers_as_one_node_does() {
    let db = test_db().await;
    let single_dir = tempfile::tempdir().expect("tempdir");
    let single = Serve::start(&db.url, single_dir.path(), &[]).await;
    let expected = run_script(&single).await;
    single.stop().await;

    let citus_dir = tempfile::tempdir().expect("tempdir");
    let citus = Serve::start_citus(citus_dir.path(), 2, &[]).await;
    let got = run_script(&citus).await;
    let output = citus.stop().await;
    assert!(
        output.contains("local Citus cluster"),
        "says where it runs: {output}"
    );
    for (i, ((method, path, _, body), (want, have))) in
        SCRIPT.iter().zip(expected.iter().zip(&got)).enumerate()
    {
        assert_eq!(
            want, have,
            "request {i}: {method} {path} {body}\n one node: {want:?}\n Citus:    {have:?}"
        );
    }
    // The script's refusals really happened (so the comparison compares something).
    let refusals = expected.iter().filter(|(s, _, _)| *s >= 400).count();
    assert!(refusals >= 10, "{expected:#?}");
}

/// One `saldo --citus-workers 2 race crossed-transfers` (ordered and naive, no retry): its
/// reports, the ordered strategy checked (it must hold in every invocation).
async fn crossed_transfers_on_citus() -> Value {
    let data = tempfile::tempdir().expect("tempdir");
    let out = super::tokens::saldo(data.path())
        .args(["--citus-workers", "2", "race", "crossed-transfers"])
        .args(["--strategy", "ordered,naive", "--no-retry", "--runs", "1"])
        .args(["--transfers", "60", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .await
        .expect("run saldo race");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "saldo race: {stderr}");
    let reports: Value = serde_json::from_slice(&out.stdout).expect("--json");
    let ordered = report_of(&reports, "ordered/no-retry");
    assert_eq!(ordered["verdict"], "held", "{ordered}");
    assert_eq!(ordered["errors"], serde_json::json!({}), "{ordered}");
    reports
}

fn report_of<'a>(reports: &'a Value, name: &str) -> &'a Value {
    reports
        .as_array()
        .and_then(|a| a.iter().find(|r| r["strategy"] == name))
        .unwrap_or_else(|| panic!("no {name}: {reports}"))
}

/// The naive transfer's deadlock is a race: it must show in one of a few invocations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_on_a_local_citus_cluster_shows_the_naive_transfer_deadlocking() {
    until_caught(
        "the naive transfer deadlocking on Citus",
        |_| crossed_transfers_on_citus(),
        |reports| {
            let naive = report_of(reports, "naive/no-retry");
            naive["verdict"] == "failed_as_expected"
                && naive["errors"]["40P01"].as_u64().unwrap_or(0) > 0
        },
    )
    .await;
}

/// `saldo <tool>` with `--database-url url`: (exit success, stdout + stderr).
async fn tool(data_dir: &std::path::Path, url: &str, args: &[&str]) -> (bool, String) {
    let out = super::tokens::saldo(data_dir)
        .args(["--database-url", url])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .await
        .expect("run saldo");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Production's setup: saldo pointed at an existing Citus coordinator by URL (here a database
/// of the test cluster, laid out distributed). `serve` serves it; `saldo audit` audits it the
/// Citus way and fails on divergences planted behind saldo's back (a product's stock, an
/// account's balance); `saldo audit --repair --apply` repairs both (one product's shard group,
/// one account, per transaction) and audits clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_work_on_an_existing_coordinator_by_url() {
    let db = citus_db().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let serve = Serve::start(&db.url, dir.path(), &[]).await;
    let admin = serve.generated("admin").expect("admin token printed");
    let api = serve.generated("api").expect("api token printed");
    for (method, path, token, body) in [
        ("PUT", "/v1/products/1/stock", &admin, r#"{"count": 5}"#),
        ("PUT", "/v1/products/2/stock", &admin, r#"{"count": 5}"#),
        (
            "POST",
            "/v1/reservations",
            &api,
            r#"{"order_id": "o-1", "items": [{"product_id": 1, "quantity": 2}, {"product_id": 2, "quantity": 1}]}"#,
        ),
        (
            "POST",
            "/v1/accounts",
            &admin,
            r#"{"id": 1, "opening_balance": 100}"#,
        ),
        (
            "POST",
            "/v1/accounts",
            &admin,
            r#"{"id": 2, "opening_balance": 0}"#,
        ),
        (
            "POST",
            "/v1/transfers",
            &api,
            r#"{"id": "t-1", "from": 1, "to": 2, "amount": 30}"#,
        ),
    ] {
        let (status, _, body) = essence(&serve.request(method, path, Some(token), body).await);
        assert!(status < 300, "{method} {path}: {status} {body}");
    }
    serve.stop().await;

    let (clean, said) = tool(dir.path(), &db.url, &["audit"]).await;
    assert!(clean, "{said}");
    assert!(said.contains("audit clean (Citus)"), "{said}");

    let client = db.pool.get().await.expect("client");
    client
        .batch_execute(
            "UPDATE stock SET available = available - 1 WHERE product_id = 2; \
             UPDATE accounts SET balance = balance + 7 WHERE id = 2",
        )
        .await
        .expect("writes behind saldo's back");
    let (clean, said) = tool(dir.path(), &db.url, &["audit"]).await;
    assert!(!clean, "the planted divergences: {said}");
    assert!(said.contains("product 2"), "{said}");
    assert!(said.contains("account 2"), "{said}");

    let (done, said) = tool(dir.path(), &db.url, &["audit", "--repair", "--apply"]).await;
    assert!(done, "{said}");
    assert!(said.contains("repaired:"), "{said}");
    assert!(
        said.contains("account 2 repaired: balance 37 -> 30"),
        "the ledger's part: {said}"
    );
    assert!(said.contains("audit clean (Citus)"), "{said}");
    let available: i32 = client
        .query_one("SELECT available FROM stock WHERE product_id = 2", &[])
        .await
        .expect("stock")
        .get(0);
    assert_eq!(available, 4, "5 counted, 1 reserved");
    let balance: i64 = client
        .query_one("SELECT balance FROM accounts WHERE id = 2", &[])
        .await
        .expect("account")
        .get(0);
    assert_eq!(balance, 30, "what its journal says");
}
