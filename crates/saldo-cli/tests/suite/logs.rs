//! Logs through the real binary: with `--log-format json` every log line is a JSON object and
//! each request leaves one access-log object (method, route template, status, latency, the
//! order or transfer id from the path or noted by the handler, never a body); no token appears
//! anywhere but the one line that prints a generated token; text logs carry no colour codes
//! when stderr is not a terminal.
//! Logs run at debug level here (`Serve::start`): nothing may leak at any level.

use serde_json::Value;

use crate::tokens::{tempfile_dir, Serve};
use saldo_lab::testing::test_db;

const RESERVE: &str = r#"{"order_id": "o-9", "items": [{"product_id": 1, "quantity": 1}]}"#;
const TRANSFER: &str = r#"{"id": "pay-9", "from": 91, "to": 92, "amount": 5}"#;
/// Lines `saldo serve` prints on stdout (the test reads both streams as one).
const STDOUT_LINES: &[&str] = &[
    "saldo listening on ",
    "admin token (generated",
    "api token (generated",
    "stopped",
];

#[tokio::test]
async fn json_logs_are_one_object_per_line_with_an_access_log_and_no_token() {
    let db = test_db().await;
    let data = tempfile_dir("logs-json");
    let serve = Serve::start(&db.url, &data, &["--log-format", "json"]).await;
    let admin = serve.generated("admin").expect("admin token printed");
    let api = serve.generated("api").expect("api token printed");
    let wrong = "not-the-token-but-secret-too-0123456789";

    // A fresh service already shows the counters an alert divides or differentiates.
    let metrics = serve.request("GET", "/metrics", None, "").await;
    for line in [
        r#"saldo_tx_retries_total{operation="reserve",sqlstate="40P01"} 0"#,
        r#"saldo_tx_giveups_total{operation="reserve",sqlstate="40001"} 0"#,
        r#"saldo_check_violations_total{operation="confirm"} 0"#,
        "# HELP saldo_tx_retries_total ",
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }

    let put = serve
        .status(
            "PUT",
            "/v1/products/1/stock",
            Some(&admin),
            r#"{"count": 5}"#,
        )
        .await;
    assert_eq!(put, 200);
    let reserve = serve
        .status("POST", "/v1/reservations", Some(&api), RESERVE)
        .await;
    assert_eq!(reserve, 201);
    let refused = serve.status("GET", "/v1/orders/o-9", Some(wrong), "").await;
    assert_eq!(refused, 401);
    let order = serve.status("GET", "/v1/orders/o-9", Some(&api), "").await;
    assert_eq!(order, 200);
    for account in [r#"{"id": 91, "opening_balance": 10}"#, r#"{"id": 92}"#] {
        let open = serve
            .status("POST", "/v1/accounts", Some(&admin), account)
            .await;
        assert_eq!(open, 201);
    }
    let transfer = serve
        .status("POST", "/v1/transfers", Some(&api), TRANSFER)
        .await;
    assert_eq!(transfer, 201);
    let output = serve.stop().await;

    assert!(!output.contains('\u{1b}'), "escape codes in:\n{output}");
    let mut access = Vec::new();
    for line in output.lines() {
        if STDOUT_LINES.iter().any(|p| line.starts_with(p)) {
            continue;
        }
        let event: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}\n{output}"));
        if event["target"] == "saldo_http::access" {
            access.push(event);
        }
    }
    let find = |route: &str, status: u16| {
        access
            .iter()
            .find(|e| e["route"] == route && e["status"] == status)
            .unwrap_or_else(|| panic!("no access line for {route} {status}: {access:#?}"))
    };
    let get = find("/v1/orders/{order_id}", 200);
    assert_eq!(get["level"], "INFO");
    assert_eq!(get["method"], "GET");
    assert_eq!(get["order_id"], "o-9");
    assert!(get["latency_us"].is_u64(), "{get}");
    assert_eq!(find("/v1/orders/{order_id}", 401)["order_id"], "o-9");
    let post = find("/v1/reservations", 201);
    assert_eq!(post["method"], "POST");
    assert_eq!(post["order_id"], "o-9", "noted by the handler");
    assert!(post.get("items").is_none(), "no body: {post}");
    assert_eq!(find("/v1/transfers", 201)["transfer_id"], "pay-9");
    assert_eq!(
        find("/v1/products/{product_id}/stock", 200)["product_id"],
        "1"
    );
    assert_eq!(find("/metrics", 200)["method"], "GET");

    for token in [&admin, &api] {
        assert_eq!(
            output.matches(token.as_str()).count(),
            1,
            "printed once, never logged:\n{output}"
        );
    }
    assert!(
        !output.contains(wrong),
        "a sent token was logged:\n{output}"
    );
    std::fs::remove_dir_all(&data).expect("clean up");
}

#[tokio::test]
async fn text_logs_have_no_colour_off_a_terminal() {
    let db = test_db().await;
    let data = tempfile_dir("logs-text");
    let serve = Serve::start(&db.url, &data, &[]).await;
    assert_eq!(serve.status("GET", "/healthz", None, "").await, 200);
    let output = serve.stop().await;
    assert!(!output.contains('\u{1b}'), "escape codes in:\n{output}");
    assert!(
        output
            .lines()
            .any(|l| l.contains("saldo_http::access") && l.contains("status=200")),
        "no access line:\n{output}"
    );
    std::fs::remove_dir_all(&data).expect("clean up");
}

/// The order id and amounts the probe sends: they may reach the log only on the access line.
const PROBE: &str = r#"{"order_id": "o-probe-4711", "items": [{"product_id": 1, "quantity": 3}]}"#;

/// tokio-postgres logs every statement with its parameters at debug (order ids, amounts,
/// account ids): `RUST_LOG=debug` (`Serve::start` runs at debug) must not bring those lines.
/// Naming tokio_postgres in RUST_LOG is the documented way to get them, with a warning.
#[tokio::test]
async fn debug_logs_carry_no_statement_parameters_unless_the_driver_is_named() {
    let db = test_db().await;
    let data = tempfile_dir("logs-params");
    let serve = Serve::start(&db.url, &data, &[]).await;
    let admin = serve.generated("admin").expect("admin token printed");
    let api = serve.generated("api").expect("api token printed");
    let stock = r#"{"count": 5}"#;
    let put = serve
        .status("PUT", "/v1/products/1/stock", Some(&admin), stock)
        .await;
    assert_eq!(put, 200);
    let reserve = serve
        .status("POST", "/v1/reservations", Some(&api), PROBE)
        .await;
    assert_eq!(reserve, 201);
    let output = serve.stop().await;
    for line in output.lines().filter(|l| l.contains("o-probe-4711")) {
        assert!(line.contains("saldo_http::access"), "{line}\n{output}");
    }
    assert!(!output.contains("tokio_postgres"), "{output}");
    assert!(!output.contains("with parameters"), "{output}");

    // The explicit opt-in: the driver's lines, and a warning that they carry parameters.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_saldo"))
        .args(["--database-url", &db.url, "sweep"])
        .env("RUST_LOG", "debug,tokio_postgres=debug")
        .output()
        .await
        .expect("run saldo sweep");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("with parameters"), "{stderr}");
    assert!(stderr.contains("RUST_LOG names tokio_postgres"), "{stderr}");
    std::fs::remove_dir_all(&data).expect("clean up");
}
