//! The money-holds rows of the API table: holds (`"pending": true` → post whole or partial / void /
//! expiry), `GET /v1/transfers/{id}`, the account's held / available / pending credits, limits
//! when opening (refusals naming account, limit and amounts), linked groups, and overflow as a
//! 409, never a 500. Every test ends with a clean audit.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{spawn_app, Answer, TestApp};

async fn open(app: &TestApp, body: Value) {
    let a = app.admin(Method::POST, "/v1/accounts", Some(body)).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
}

fn hold(id: &str, from: i64, to: i64, amount: i64) -> Value {
    json!({"id": id, "from": from, "to": to, "amount": amount, "pending": true, "timeout_s": 60})
}

/// (balance, held, available, pending_credits)
async fn money(app: &TestApp, id: i64) -> (i64, i64, i64, i64) {
    let a = app.get(&format!("/v1/accounts/{id}")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let n = |k: &str| a.body[k].as_i64().expect(k);
    (
        n("balance"),
        n("held"),
        n("available"),
        n("pending_credits"),
    )
}

async fn audit_clean(app: &TestApp) {
    let a = app.admin(Method::GET, "/v1/admin/audit", None).await;
    assert_eq!(a.body["ok"], true, "{}", a.text);
}

async fn post_hold(app: &TestApp, id: &str, body: Option<Value>) -> Answer {
    app.call(
        Method::POST,
        &format!("/v1/transfers/{id}/post"),
        None,
        body,
    )
    .await
}

#[tokio::test]
async fn hold_then_partial_post_then_the_losers_get_409_naming_the_state() {
    let app = spawn_app().await;
    open(&app, json!({"id": 1, "opening_balance": 100})).await;
    open(&app, json!({"id": 2})).await;
    let h = app.post("/v1/transfers", hold("h-1", 1, 2, 60)).await;
    assert_eq!(h.status, StatusCode::CREATED, "{}", h.text);
    assert_eq!(
        (
            &h.body["status"],
            &h.body["timeout_s"],
            &h.body["posted_amount"]
        ),
        (&json!("pending"), &json!(60), &Value::Null)
    );
    assert!(h.body["expires_at"].is_string());
    assert_eq!(money(&app, 1).await, (100, 60, 40, 0));
    assert_eq!(money(&app, 2).await, (0, 0, 0, 60));
    let again = app.post("/v1/transfers", hold("h-1", 1, 2, 60)).await;
    assert_eq!(
        (again.status, &again.body["replayed"]),
        (StatusCode::OK, &json!(true))
    );
    // The hold counts against min_balance 0: 41 more is refused, naming the amounts.
    let refused = app
        .post(
            "/v1/transfers",
            json!({"id": "t", "from": 1, "to": 2, "amount": 41}),
        )
        .await;
    refused.assert_problem(409, "insufficient-funds");
    for (k, v) in [
        ("account", json!(1)),
        ("limit", json!("min_balance")),
        ("min_balance", json!(0)),
        ("requested", json!(41)),
        ("balance", json!(100)),
        ("held", json!(60)),
    ] {
        assert_eq!(refused.body[k], v, "{k}: {}", refused.text);
    }
    let posted = post_hold(&app, "h-1", Some(json!({"amount": 25}))).await;
    assert_eq!(posted.status, StatusCode::OK, "{}", posted.text);
    assert_eq!(
        (
            &posted.body["status"],
            &posted.body["posted_amount"],
            &posted.body["replayed"]
        ),
        (&json!("posted"), &json!(25), &json!(false))
    );
    assert_eq!(money(&app, 1).await, (75, 0, 75, 0));
    assert_eq!(money(&app, 2).await, (25, 0, 25, 0));
    let replay = post_hold(&app, "h-1", Some(json!({"amount": 25}))).await;
    assert_eq!(
        (replay.status, &replay.body["replayed"]),
        (StatusCode::OK, &json!(true))
    );
    let void = app
        .call(Method::POST, "/v1/transfers/h-1/void", None, None)
        .await;
    void.assert_problem(409, "transfer-not-pending");
    assert_eq!(
        (
            &void.body["transfer_status"],
            &void.body["posted_amount"],
            &void.body["transfer_id"]
        ),
        (&json!("posted"), &json!(25), &json!("h-1"))
    );
    let got = app.get("/v1/transfers/h-1").await;
    assert_eq!(
        (got.status, &got.body["status"]),
        (StatusCode::OK, &json!("posted"))
    );
    audit_clean(&app).await;
}

#[tokio::test]
async fn void_and_expiry_release_and_a_post_without_body_posts_everything() {
    let app = spawn_app().await;
    open(&app, json!({"id": 1, "opening_balance": 100})).await;
    open(&app, json!({"id": 2})).await;
    for id in ["v", "e", "p"] {
        let a = app.post("/v1/transfers", hold(id, 1, 2, 20)).await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    }
    let v = app
        .call(Method::POST, "/v1/transfers/v/void", None, None)
        .await;
    assert_eq!(
        (v.status, &v.body["status"]),
        (StatusCode::OK, &json!("voided"))
    );
    let p = post_hold(&app, "p", None).await;
    assert_eq!(
        (p.status, &p.body["status"], &p.body["posted_amount"]),
        (StatusCode::OK, &json!("posted"), &json!(20))
    );
    saldo::fixtures::make_holds_due(&app.db.pool, &["e"])
        .await
        .expect("due");
    let sweep = app.admin(Method::POST, "/v1/admin/sweep", None).await;
    assert_eq!(sweep.body["expired_transfers"], 1, "{}", sweep.text);
    let e = app.get("/v1/transfers/e").await;
    assert_eq!(e.body["status"], "expired");
    let late = post_hold(&app, "e", None).await;
    late.assert_problem(409, "transfer-not-pending");
    assert_eq!(late.body["transfer_status"], "expired");
    post_hold(&app, "v", Some(json!({})))
        .await
        .assert_problem(409, "transfer-not-pending");
    post_hold(&app, "v", Some(Value::Null))
        .await
        .assert_problem(409, "transfer-not-pending");
    assert_eq!(money(&app, 1).await, (80, 0, 80, 0));
    audit_clean(&app).await;
}

#[tokio::test]
async fn bad_holds_posts_and_ids_answer_4xx() {
    let app = spawn_app().await;
    open(&app, json!({"id": 1, "opening_balance": 100})).await;
    open(&app, json!({"id": 2})).await;
    let base = json!({"id": "x", "from": 1, "to": 2, "amount": 5});
    for (patch, kind) in [
        (json!({"pending": true, "timeout_s": 0}), "invalid-input"),
        (
            json!({"pending": true, "timeout_s": 2_592_001}),
            "invalid-input",
        ),
        (json!({"timeout_s": 60}), "invalid-body"),
        (json!({"pending": "yes"}), "invalid-body"),
    ] {
        let mut body = base.clone();
        for (k, v) in patch.as_object().expect("object") {
            body[k] = v.clone();
        }
        app.post("/v1/transfers", body)
            .await
            .assert_problem(422, kind);
    }
    app.post("/v1/transfers", hold("h", 1, 2, 30)).await;
    post_hold(&app, "h", Some(json!({"amount": 0})))
        .await
        .assert_problem(422, "invalid-input");
    let over = post_hold(&app, "h", Some(json!({"amount": 31}))).await;
    over.assert_problem(422, "post-exceeds-hold");
    assert_eq!(
        (&over.body["requested"], &over.body["held"]),
        (&json!(31), &json!(30))
    );
    post_hold(&app, "h", Some(json!({"amount": 1, "extra": 1})))
        .await
        .assert_problem(422, "invalid-body");
    let malformed = app
        .send(
            axum::http::Request::builder()
                .method(Method::POST)
                .uri("/v1/transfers/h/post")
                .header("content-type", "application/json")
                .body(axum::body::Body::from("{"))
                .expect("request"),
        )
        .await;
    assert_eq!(
        malformed.status,
        StatusCode::BAD_REQUEST,
        "{}",
        malformed.text
    );
    post_hold(&app, "nope", None)
        .await
        .assert_problem(404, "unknown-transfer");
    app.get("/v1/transfers/nope")
        .await
        .assert_problem(404, "unknown-transfer");
    app.get("/v1/transfers/bad%20id")
        .await
        .assert_problem(422, "invalid-input");
    app.call(Method::POST, "/v1/transfers/bad%20id/void", None, None)
        .await
        .assert_problem(422, "invalid-input");
    assert_eq!(money(&app, 1).await, (100, 30, 70, 0));
    audit_clean(&app).await;
}

#[tokio::test]
async fn limits_are_set_when_opening_and_refusals_name_them() {
    let app = spawn_app().await;
    open(&app, json!({"id": 1, "min_balance": -50})).await;
    open(
        &app,
        json!({"id": 2, "opening_balance": 60, "max_balance": 100}),
    )
    .await;
    let a = app.get("/v1/accounts/1").await;
    assert_eq!(
        (&a.body["min_balance"], &a.body["max_balance"]),
        (&json!(-50), &Value::Null)
    );
    for body in [
        json!({"id": 3, "min_balance": 10, "max_balance": 5}),
        json!({"id": 3, "opening_balance": 101, "max_balance": 100}),
        json!({"id": 3, "min_balance": 1, "opening_balance": 0}),
        json!({"id": 3, "min_balance": -1_000_000_000_000_001i64}),
        json!({"id": 3, "max_balance": i64::MAX}),
    ] {
        app.admin(Method::POST, "/v1/accounts", Some(body))
            .await
            .assert_problem(422, "invalid-input");
    }
    let held = app.post("/v1/transfers", hold("h", 1, 2, 30)).await;
    assert_eq!(
        held.status,
        StatusCode::CREATED,
        "credit line: {}",
        held.text
    );
    let over = app
        .post(
            "/v1/transfers",
            json!({"id": "t", "from": 1, "to": 2, "amount": 11}),
        )
        .await;
    over.assert_problem(409, "max-balance-exceeded");
    for (k, v) in [
        ("account", json!(2)),
        ("limit", json!("max_balance")),
        ("max_balance", json!(100)),
        ("requested", json!(11)),
        ("balance", json!(60)),
        ("pending_credits", json!(30)),
    ] {
        assert_eq!(over.body[k], v, "{k}: {}", over.text);
    }
    assert_eq!(money(&app, 1).await, (0, 30, -30, 0));
    let sys = app.get("/v1/accounts/0").await;
    assert!(
        sys.status == StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        sys.text
    );
    audit_clean(&app).await;
}

#[tokio::test]
async fn overflow_of_any_balance_is_a_409_never_a_500() {
    let app = spawn_app().await;
    open(
        &app,
        json!({"id": 1, "opening_balance": 100, "min_balance": -1_000_000_000_000_000i64}),
    )
    .await;
    open(&app, json!({"id": 2})).await;
    // Planted near the top of bigint: the next credit would overflow.
    let client = app.db.pool.get().await.expect("client");
    client
        .execute(
            "UPDATE accounts SET balance = 9223372036854775000 WHERE id = 2",
            &[],
        )
        .await
        .expect("plant");
    let a = app
        .post(
            "/v1/transfers",
            json!({"id": "big", "from": 1, "to": 2, "amount": 1000}),
        )
        .await;
    a.assert_problem(409, "balance-out-of-range");
    assert_eq!(a.body["account"], 2);
    client
        .execute(
            "UPDATE accounts SET balance = 0, pending_credits = 9223372036854775000 WHERE id = 2",
            &[],
        )
        .await
        .expect("plant");
    let a = app.post("/v1/transfers", hold("bigh", 1, 2, 1000)).await;
    a.assert_problem(409, "balance-out-of-range");
    assert_eq!(money(&app, 1).await.0, 100);
}

fn linked(id: &str, from: i64, to: i64, amount: i64, pending: bool) -> Value {
    json!({"id": id, "from": from, "to": to, "amount": amount, "pending": pending})
}

#[tokio::test]
async fn a_group_applies_all_or_none_and_replays_by_id() {
    let app = spawn_app().await;
    open(&app, json!({"id": 1, "opening_balance": 100})).await;
    open(&app, json!({"id": 2})).await;
    open(&app, json!({"id": 3})).await;
    let bad = json!({"id": "g-bad", "transfers": [
        linked("b1", 1, 2, 70, false),
        linked("b2", 2, 3, 10, true),
        linked("b3", 1, 3, 40, false),
    ]});
    let refused = app.post("/v1/transfer-groups", bad).await;
    refused.assert_problem(409, "insufficient-funds");
    assert_eq!(
        (
            &refused.body["failed_index"],
            &refused.body["failed_transfer_id"],
            &refused.body["group_id"]
        ),
        (&json!(2), &json!("b3"), &json!("g-bad"))
    );
    assert_eq!(money(&app, 1).await, (100, 0, 100, 0));
    let good = json!({"id": "g", "transfers": [
        linked("g1", 1, 2, 70, false),
        linked("g2", 2, 3, 50, true),
        linked("g3", 1, 3, 30, false),
    ]});
    let a = app.post("/v1/transfer-groups", good.clone()).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    assert_eq!(a.body["transfers"][1]["status"], "pending");
    assert_eq!(a.body["transfers"][1]["group_id"], "g");
    let again = app.post("/v1/transfer-groups", good).await;
    assert_eq!(
        (again.status, &again.body["replayed"]),
        (StatusCode::OK, &json!(true))
    );
    let other = json!({"id": "g", "transfers": [linked("g1", 1, 2, 70, false)]});
    let c = app.post("/v1/transfer-groups", other).await;
    c.assert_problem(409, "idempotency-conflict");
    assert_eq!(c.body["group_id"], "g");
    let many: Vec<Value> = (0..101)
        .map(|i| linked(&format!("m{i}"), 2, 1, 1, false))
        .collect();
    app.post(
        "/v1/transfer-groups",
        json!({"id": "many", "transfers": many}),
    )
    .await
    .assert_problem(422, "invalid-input");
    app.post(
        "/v1/transfer-groups",
        json!({"id": "none", "transfers": []}),
    )
    .await
    .assert_problem(422, "invalid-input");
    let unknown = app
        .post(
            "/v1/transfer-groups",
            json!({"id": "u", "transfers": [linked("u1", 2, 9, 1, false)]}),
        )
        .await;
    unknown.assert_problem(404, "unknown-account");
    assert_eq!(
        (&unknown.body["account"], &unknown.body["failed_index"]),
        (&json!(9), &json!(0))
    );
    let bad_amount = app
        .post(
            "/v1/transfer-groups",
            json!({"id": "z", "transfers": [linked("z1", 2, 1, 0, false)]}),
        )
        .await;
    bad_amount.assert_problem(422, "invalid-input");
    assert_eq!(bad_amount.body["failed_transfer_id"], "z1");
    assert_eq!(money(&app, 2).await, (70, 50, 20, 0));
    audit_clean(&app).await;
}

#[tokio::test]
async fn the_openapi_document_states_the_libraries_limits() {
    use saldo::domain::{
        MAX_AMOUNT, MAX_GROUP_TRANSFERS, MAX_LIMIT, MAX_TRANSFER_TIMEOUT_S, MIN_TRANSFER_TIMEOUT_S,
    };
    let app = spawn_app().await;
    let doc = app.get("/openapi.json").await.body;
    let schema =
        |name: &str, field: &str| doc["components"]["schemas"][name]["properties"][field].clone();
    let amount = schema("TransferBody", "amount");
    assert_eq!(
        (&amount["minimum"], &amount["maximum"]),
        (&json!(1), &json!(MAX_AMOUNT))
    );
    let timeout = schema("TransferBody", "timeout_s");
    assert_eq!(
        (&timeout["minimum"], &timeout["maximum"]),
        (
            &json!(MIN_TRANSFER_TIMEOUT_S),
            &json!(MAX_TRANSFER_TIMEOUT_S)
        )
    );
    assert_eq!(
        schema("GroupBody", "transfers")["maxItems"],
        json!(MAX_GROUP_TRANSFERS)
    );
    let min = schema("OpenAccount", "min_balance");
    assert_eq!(
        (&min["minimum"], &min["maximum"]),
        (&json!(-MAX_LIMIT), &json!(MAX_LIMIT))
    );
    assert_eq!(schema("PostBody", "amount")["maximum"], json!(MAX_AMOUNT));
    assert_eq!(
        schema("TransferBody", "id")["pattern"],
        json!("^(?!opening:)[A-Za-z0-9._:-]{1,64}$")
    );
    let post = &doc["paths"]["/v1/transfers/{id}/post"]["post"];
    assert_eq!(post["parameters"][0]["schema"]["maxLength"], json!(64));
    assert!(post["responses"]["409"]["content"]["application/problem+json"].is_object());
}
