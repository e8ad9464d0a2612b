//! Bad input is a 4xx problem, never a 500 and never a silent write: regression tests for the
//! inputs that reached PostgreSQL (a NUL in a reason, a delta of `i64::MIN`, a balance pushed out
//! of `bigint`), readiness telling "pool busy" from "database down", a 500 whose log names the
//! SQLSTATE and constraint behind it, and a table-driven sweep of hostile values through every
//! field of every write route.

use axum::http::{Method, StatusCode};
use saldo::db::{self, PoolOptions};
use serde_json::{json, Value};

use crate::support::{spawn_app, spawn_app_with, state_with, Answer, TestApp};

/// Rows of `stock_movements`: a refused request must not add one.
async fn movements(app: &TestApp) -> i64 {
    let client = app.db.pool.get().await.expect("connection");
    client
        .query_one("SELECT count(*) FROM stock_movements", &[])
        .await
        .expect("count")
        .get(0)
}

async fn adjust(app: &TestApp, delta: Value, reason: Value) -> Answer {
    app.admin(
        Method::POST,
        "/v1/products/1/stock/adjustments",
        Some(json!({"delta": delta, "reason": reason})),
    )
    .await
}

/// Regression: PostgreSQL refuses `\0` in `text`, so this was a 500 from the INSERT.
#[tokio::test]
async fn nul_and_control_characters_in_a_reason_are_422() {
    let app = spawn_app().await;
    app.stock(1, 5).await;
    let before = movements(&app).await;
    for reason in ["a\0b", "\0", "two\nlines", "\u{1b}[31mred"] {
        let a = adjust(&app, json!(1), json!(reason)).await;
        a.assert_problem(422, "invalid-input");
        assert!(
            a.body["detail"].as_str().unwrap_or("").contains("control"),
            "{}",
            a.text
        );
    }
    assert_eq!(movements(&app).await, before, "nothing written");
    let a = app.get("/v1/products/1/stock").await;
    assert_eq!(a.body["available"], 5, "{}", a.text);
}

/// Regression: `i64::MIN.abs()` overflowed, the bound check passed and the delta was truncated
/// to a zero-unit movement answered 200 (a 500 in debug builds, where the overflow panics).
#[tokio::test]
async fn extreme_deltas_are_422_and_write_nothing() {
    let app = spawn_app().await;
    app.stock(1, 5).await;
    let before = movements(&app).await;
    for delta in [
        i64::MIN,
        i64::MIN + 1,
        i64::MAX,
        -1_000_000_001,
        1_000_000_001,
        0,
        i64::from(i32::MIN),
        i64::from(u32::MAX),
    ] {
        adjust(&app, json!(delta), json!("recount"))
            .await
            .assert_problem(422, "invalid-input");
    }
    assert_eq!(movements(&app).await, before, "no zero-unit movement");
    let client = app.db.pool.get().await.expect("connection");
    let zero: i64 = client
        .query_one(
            "SELECT count(*) FROM stock_movements WHERE quantity = 0 AND kind = 'adjustment'",
            &[],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(zero, 0);
}

/// Sets a balance behind the ledger's back: reaching `bigint`'s edge honestly would take
/// ~9.2 million maximal deposits.
async fn force_balance(app: &TestApp, account: i64, balance: i64) {
    let client = app.db.pool.get().await.expect("connection");
    client
        .execute(
            "UPDATE accounts SET balance = $2 WHERE id = $1",
            &[&account, &balance],
        )
        .await
        .expect("update");
}

async fn balance_and_journal(app: &TestApp) -> (Vec<(i64, i64)>, i64) {
    let client = app.db.pool.get().await.expect("connection");
    let balances = client
        .query("SELECT id, balance FROM accounts ORDER BY id", &[])
        .await
        .expect("balances")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let journal: i64 = client
        .query_one("SELECT count(*) FROM transfers", &[])
        .await
        .expect("journal")
        .get(0);
    (balances, journal)
}

/// Regression: a deposit or opening that pushed the system account below `i64::MIN` failed in
/// PostgreSQL with 22003 `bigint out of range`, a 500.
#[tokio::test]
async fn movements_that_would_overflow_a_balance_are_409() {
    let app = spawn_app().await;
    for id in [5, 6] {
        let a = app
            .admin(Method::POST, "/v1/accounts", Some(json!({"id": id})))
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    }
    force_balance(&app, 0, i64::MIN + 10).await;
    let before = balance_and_journal(&app).await;

    let a = app
        .admin(
            Method::POST,
            "/v1/accounts/5/deposits",
            Some(json!({"id": "d-1", "amount": 11})),
        )
        .await;
    a.assert_problem(409, "balance-out-of-range");
    assert_eq!(a.body["account"], 0, "{}", a.text);
    let a = app
        .admin(
            Method::POST,
            "/v1/accounts",
            Some(json!({"id": 7, "opening_balance": 11})),
        )
        .await;
    a.assert_problem(409, "balance-out-of-range");
    assert_eq!(
        balance_and_journal(&app).await,
        before,
        "nothing half written"
    );
    app.get("/v1/accounts/7")
        .await
        .assert_problem(404, "unknown-account");
    // At the edge exactly is still fine.
    let a = app
        .admin(
            Method::POST,
            "/v1/accounts/5/deposits",
            Some(json!({"id": "d-2", "amount": 10})),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);

    // The receiving side: a customer account at the top of bigint.
    force_balance(&app, 6, i64::MAX - 1).await;
    force_balance(&app, 0, 0).await;
    let before = balance_and_journal(&app).await;
    let a = app
        .post(
            "/v1/transfers",
            json!({"id": "t-1", "from": 5, "to": 6, "amount": 2}),
        )
        .await;
    a.assert_problem(409, "balance-out-of-range");
    assert_eq!(a.body["account"], 6, "{}", a.text);
    let a = app
        .admin(
            Method::POST,
            "/v1/accounts/6/deposits",
            Some(json!({"id": "d-3", "amount": 2})),
        )
        .await;
    a.assert_problem(409, "balance-out-of-range");
    assert_eq!(
        balance_and_journal(&app).await,
        before,
        "nothing half written"
    );
}

/// `/readyz` tells a busy pool (every connection held) from a database that does not answer.
#[tokio::test]
async fn readiness_tells_pool_busy_from_database_down() {
    let app = spawn_app_with(None, 1).await;
    let a = app.get("/readyz").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    {
        let _held = app.db.pool.get().await.expect("the only connection");
        let a = app.get("/readyz").await;
        a.assert_problem(503, "pool-busy");
        assert!(a.headers.contains_key("retry-after"));
    }
    assert_eq!(app.get("/readyz").await.status, StatusCode::OK);

    // Port 1 on loopback: nothing listens, connections are refused at once.
    let pool = db::connect(
        "postgres://saldo@127.0.0.1:1/saldo",
        &PoolOptions {
            max_size: 1,
            wait_timeout_ms: 1_000,
            create_timeout_ms: 1_000,
            recycle_timeout_ms: 1_000,
        },
    )
    .expect("pool");
    let down = TestApp {
        router: saldo_http::app(state_with(pool, saldo_http::RawSettings::default())),
        state: app.state.clone(),
        db: app.db,
    };
    let a = down.get("/readyz").await;
    a.assert_problem(503, "database-unavailable");
    assert!(!a.text.contains("127.0.0.1"), "{}", a.text);
}

/// Values that must never reach the database as they are.
fn hostile_values() -> Vec<Value> {
    let mut v = vec![
        json!(null),
        json!(true),
        json!(0),
        json!(-1),
        json!(1.5),
        json!(-0.0),
        json!(1e300),
        json!(i64::MIN),
        json!(i64::MAX),
        json!(u64::MAX),
        json!(i64::from(i32::MAX) + 1),
        json!(i64::from(i32::MIN) - 1),
        json!(""),
        json!("1"),
        json!("a\0b"),
        json!("\u{7f}"),
        json!("ç☃𝄞"),
        json!("x".repeat(10_000)),
        json!([]),
        json!([1]),
        json!({}),
        json!({"a": 1}),
    ];
    // Numbers JSON allows and i64 does not hold (serde_json reads them as f64 or refuses).
    v.push(serde_json::from_str("123456789012345678901234567890").expect("big number"));
    v.push(serde_json::from_str("-9223372036854775809").expect("below i64"));
    v
}

/// A valid body for each write route; each field in turn is replaced by every hostile value.
fn write_routes() -> Vec<(Method, &'static str, Value)> {
    vec![
        (Method::PUT, "/v1/products/1/stock", json!({"count": 5})),
        (
            Method::POST,
            "/v1/products/1/stock/adjustments",
            json!({"delta": 1, "reason": "restock"}),
        ),
        (
            Method::POST,
            "/v1/reservations",
            json!({"order_id": "o-1", "items": [{"product_id": 1, "quantity": 1}], "ttl_s": 60}),
        ),
        (
            Method::POST,
            "/v1/orders/o-1/rereserve",
            json!({"rereserve_id": "r-1", "items": [{"product_id": 1, "quantity": 1}], "ttl_s": 60}),
        ),
        (
            Method::POST,
            "/v1/accounts",
            json!({"id": 9, "opening_balance": 10}),
        ),
        (
            Method::POST,
            "/v1/accounts/5/deposits",
            json!({"id": "d-1", "amount": 10}),
        ),
        (
            Method::POST,
            "/v1/accounts/5/withdrawals",
            json!({"id": "w-1", "amount": 1}),
        ),
        (
            Method::POST,
            "/v1/transfers",
            json!({"id": "t-1", "from": 5, "to": 6, "amount": 1}),
        ),
    ]
}

/// Every field of a body as a JSON pointer, including the fields of the first reservation item.
fn field_pointers(body: &Value) -> Vec<String> {
    let mut pointers = Vec::new();
    for key in body.as_object().map(|m| m.keys()).into_iter().flatten() {
        pointers.push(format!("/{key}"));
        if key == "items" {
            pointers.push("/items/0/product_id".into());
            pointers.push("/items/0/quantity".into());
        }
    }
    pointers
}

fn with_value(body: &Value, pointer: &str, value: &Value) -> Value {
    let mut body = body.clone();
    if let Some(slot) = body.pointer_mut(pointer) {
        *slot = value.clone();
    }
    body
}

#[track_caller]
fn assert_not_a_server_error(a: &Answer, what: &str) {
    assert!(
        !a.status.is_server_error(),
        "{what}: {} {}",
        a.status,
        a.text
    );
    if a.status.is_client_error() {
        assert_eq!(
            a.headers.get("content-type").and_then(|v| v.to_str().ok()),
            Some("application/problem+json"),
            "{what}: {}",
            a.text
        );
    }
}

/// Every hostile value in every field of every write route (and every path parameter) answers
/// a 2xx or a 4xx problem, never a 5xx; the audits stay clean afterwards.
#[tokio::test]
async fn hostile_values_in_every_write_route_never_answer_500() {
    let app = spawn_app().await;
    app.stock(1, 100).await;
    for id in [5, 6] {
        let body = json!({"id": id, "opening_balance": 1_000});
        let a = app.admin(Method::POST, "/v1/accounts", Some(body)).await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    }
    let values = hostile_values();
    let mut sent = 0usize;
    for (method, path, base) in write_routes() {
        for field in field_pointers(&base) {
            for value in &values {
                let body = with_value(&base, &field, value);
                let a = app
                    .call(
                        method.clone(),
                        path,
                        Some(crate::support::ADMIN),
                        Some(body),
                    )
                    .await;
                assert_not_a_server_error(&a, &format!("{method} {path} {field} = {value}"));
                sent += 1;
            }
        }
    }
    // Path parameters: ids that do not parse, do not fit, or carry bytes PostgreSQL refuses.
    for segment in [
        "0",
        "-1",
        "abc",
        "1.5",
        "99999999999999999999",
        "%00",
        "a%00b",
        "%E2%98%83",
        "%FF",
    ] {
        for (method, path, body) in [
            (
                Method::PUT,
                format!("/v1/products/{segment}/stock"),
                Some(json!({"count": 1})),
            ),
            (Method::GET, format!("/v1/products/{segment}/stock"), None),
            (Method::POST, format!("/v1/orders/{segment}/confirm"), None),
            (Method::POST, format!("/v1/orders/{segment}/release"), None),
            (
                Method::POST,
                format!("/v1/orders/{segment}/rereserve"),
                Some(json!({"rereserve_id": "r-9"})),
            ),
            (Method::GET, format!("/v1/orders/{segment}"), None),
            (
                Method::POST,
                format!("/v1/accounts/{segment}/deposits"),
                Some(json!({"id": "d-9", "amount": 1})),
            ),
            (
                Method::GET,
                format!("/v1/accounts/{segment}/transfers?limit=1"),
                None,
            ),
        ] {
            let a = app
                .call(method.clone(), &path, Some(crate::support::ADMIN), body)
                .await;
            assert_not_a_server_error(&a, &format!("{method} {path}"));
            sent += 1;
        }
    }
    for limit in ["0", "-1", "1001", "abc", "99999999999999999999", "%00"] {
        let a = app
            .get(&format!("/v1/accounts/5/transfers?limit={limit}"))
            .await;
        assert_not_a_server_error(&a, &format!("limit={limit}"));
        sent += 1;
    }
    eprintln!("{sent} hostile requests, none answered 5xx");
    let audit = app.admin(Method::GET, "/v1/admin/audit", None).await;
    assert_eq!(audit.body["ok"], true, "{}", audit.text);
}

/// Log lines written while a test runs, captured through a `tracing` subscriber.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        match self.0.lock() {
            Ok(mut b) => b.extend_from_slice(bytes),
            Err(poisoned) => poisoned.into_inner().extend_from_slice(bytes),
        }
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

impl Captured {
    fn text(&self) -> String {
        let bytes = match self.0.lock() {
            Ok(b) => b.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// An app whose next stock adjustment with reason `secret-row-value` violates a constraint the
/// code knows nothing about: no mapping, so a 500.
async fn app_with_an_unmapped_constraint() -> TestApp {
    let app = spawn_app().await;
    app.stock(1, 5).await;
    let client = app.db.pool.get().await.expect("connection");
    client
        .batch_execute(
            "ALTER TABLE stock_movements ADD CONSTRAINT test_only_refuses_this \
             CHECK (reason <> 'secret-row-value')",
        )
        .await
        .expect("constraint");
    app
}

/// A 500 logs the SQLSTATE, constraint, table and column of the database error behind it
/// (before: only the error's text, so an operator grepping for a SQLSTATE found nothing), and
/// never PostgreSQL's DETAIL, which quotes the failing row's values.
#[tokio::test]
async fn a_500_logs_sqlstate_constraint_and_table_but_not_row_values() {
    let app = app_with_an_unmapped_constraint().await;
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let a = {
        // The test runtime is single-threaded: the handler logs on this thread.
        let _guard = tracing::subscriber::set_default(subscriber);
        adjust(&app, json!(1), json!("secret-row-value")).await
    };
    a.assert_problem(500, "internal");
    assert!(
        !a.text.contains("test_only_refuses_this"),
        "internals stay in the log"
    );
    let log = captured.text();
    for expected in [
        "sqlstate=\"23514\"",
        "constraint=\"test_only_refuses_this\"",
        "table=\"stock_movements\"",
    ] {
        assert!(
            log.contains(expected),
            "{expected} missing from the log:\n{log}"
        );
    }
    assert!(
        !log.contains("secret-row-value"),
        "no row values in the log:\n{log}"
    );
}

/// The keys of a JSON object, in order, duplicates kept (serde_json's `Value` keeps the last).
struct Keys(Vec<String>);

impl<'de> serde::Deserialize<'de> for Keys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Keys, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Keys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<Keys, M::Error> {
                let mut keys = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    keys.push(key);
                }
                Ok(Keys(keys))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// The JSON log line of a failed request (as `saldo --log-format json` writes it: the event's
/// fields at the top level) is one JSON object with each key once. The database error's own
/// message was a second `message` key beside the event's, which many parsers refuse or read
/// as the last one only.
#[tokio::test]
async fn the_json_log_of_a_database_error_has_each_key_once() {
    let app = app_with_an_unmapped_constraint().await;
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_writer(captured.clone())
        .with_max_level(tracing::Level::INFO)
        .finish();
    let a = {
        let _guard = tracing::subscriber::set_default(subscriber);
        adjust(&app, json!(1), json!("secret-row-value")).await
    };
    a.assert_problem(500, "internal");
    let log = captured.text();
    let failed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("request failed: database error"))
        .collect();
    assert_eq!(failed.len(), 1, "one line for the failure:\n{log}");
    let Keys(keys) = serde_json::from_str(failed[0]).expect("a JSON object");
    let mut seen = std::collections::BTreeSet::new();
    let repeated: Vec<&String> = keys.iter().filter(|k| !seen.insert(k.as_str())).collect();
    assert!(
        repeated.is_empty(),
        "keys {repeated:?} twice in {}",
        failed[0]
    );
    let line: serde_json::Value = serde_json::from_str(failed[0]).expect("JSON");
    assert_eq!(line["message"], "request failed: database error", "{line}");
    assert!(
        line["db_message"]
            .as_str()
            .is_some_and(|m| m.contains("test_only_refuses_this")),
        "PostgreSQL's primary message is kept, under its own key: {line}"
    );
}
