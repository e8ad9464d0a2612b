//! Money rows of the API table: open an account (201, 409, 422), read it (200, 404, 422), list
//! its transfers, and transfer (201, replay 200, 409 funds, 409 idempotency, 404, 422).

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{spawn_app, TestApp};

async fn open(app: &TestApp, id: i64, opening_balance: i64) -> crate::support::Answer {
    app.admin(
        Method::POST,
        "/v1/accounts",
        Some(json!({"id": id, "opening_balance": opening_balance})),
    )
    .await
}

/// An account with nothing pending, the default limits and the default currency (EUR, 2),
/// opened without a reference or metadata.
fn account_body(id: i64, balance: i64) -> Value {
    json!({"id": id, "currency": "EUR", "scale": 2, "balance": balance, "held": 0,
           "available": balance, "pending_credits": 0, "min_balance": 0, "max_balance": null,
           "reference": null, "metadata": null})
}

fn transfer(id: &str, from: i64, to: i64, amount: i64) -> Value {
    json!({"id": id, "from": from, "to": to, "amount": amount})
}

#[tokio::test]
async fn open_and_read_accounts() {
    let app = spawn_app().await;
    let a = open(&app, 1, 100_000).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    assert_eq!(a.body, account_body(1, 100_000));
    let a = open(&app, 1, 5).await;
    a.assert_problem(409, "account-exists");
    assert_eq!(a.body["account"], 1);
    for body in [
        json!({"id": 0, "opening_balance": 1}),
        json!({"id": -3, "opening_balance": 1}),
        json!({"id": 2, "opening_balance": -1}),
        json!({"id": 2, "opening_balance": 1_000_000_000_001i64}),
    ] {
        app.admin(Method::POST, "/v1/accounts", Some(body))
            .await
            .assert_problem(422, "invalid-input");
    }
    app.admin(
        Method::POST,
        "/v1/accounts",
        Some(json!({"id": 2, "balance": 1})),
    )
    .await
    .assert_problem(422, "invalid-body");
    // The opening balance defaults to zero.
    assert_eq!(
        app.admin(Method::POST, "/v1/accounts", Some(json!({"id": 2})))
            .await
            .body["balance"],
        0
    );

    let a = app.get("/v1/accounts/1").await;
    assert_eq!(
        (a.status, a.body.clone()),
        (StatusCode::OK, account_body(1, 100_000))
    );
    let a = app.get("/v1/accounts/9").await;
    a.assert_problem(404, "unknown-account");
    assert_eq!(a.body["account"], 9);
    app.get("/v1/accounts/0")
        .await
        .assert_problem(422, "invalid-input");
    app.get("/v1/accounts/x")
        .await
        .assert_problem(422, "invalid-input");
}

#[tokio::test]
async fn transfers_move_money_replay_and_refuse() {
    let app = spawn_app().await;
    open(&app, 1, 1_000).await;
    open(&app, 2, 0).await;
    let first = app.post("/v1/transfers", transfer("t-1", 1, 2, 300)).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text);
    assert_eq!(first.body["id"], "t-1");
    assert_eq!(
        (first.body["from"].as_i64(), first.body["to"].as_i64()),
        (Some(1), Some(2))
    );
    assert_eq!(first.body["amount"], 300);
    assert_eq!(first.body["kind"], "transfer");
    assert_eq!(first.body["replayed"], false);

    let replay = app.post("/v1/transfers", transfer("t-1", 1, 2, 300)).await;
    assert_eq!(replay.status, StatusCode::OK, "{}", replay.text);
    assert_eq!(replay.body["replayed"], true);
    assert_eq!(replay.body["created_at"], first.body["created_at"]);
    assert_eq!(
        app.get("/v1/accounts/1").await.body["balance"],
        700,
        "the replay moved nothing"
    );

    let a = app.post("/v1/transfers", transfer("t-1", 1, 2, 301)).await;
    a.assert_problem(409, "idempotency-conflict");
    assert_eq!(a.body["transfer_id"], "t-1");

    let a = app.post("/v1/transfers", transfer("t-2", 1, 2, 701)).await;
    a.assert_problem(409, "insufficient-funds");
    assert_eq!(
        (a.body["account"].as_i64(), a.body["balance"].as_i64()),
        (Some(1), Some(700))
    );
    assert_eq!(a.body["requested"], 701);

    let a = app.post("/v1/transfers", transfer("t-3", 1, 9, 1)).await;
    a.assert_problem(404, "unknown-account");
    assert_eq!(a.body["account"], 9);

    for body in [
        transfer("t-4", 1, 1, 1),
        transfer("t-4", 1, 2, 0),
        transfer("t-4", 1, 2, -5),
        transfer("t-4", 1, 2, 1_000_000_000_001),
        transfer("t-4", 0, 2, 1),
        transfer("bad id", 1, 2, 1),
        transfer("opening:2", 1, 2, 1),
    ] {
        app.post("/v1/transfers", body)
            .await
            .assert_problem(422, "invalid-input");
    }
    app.post("/v1/transfers", json!({"id": "t-5", "from": 1, "to": 2}))
        .await
        .assert_problem(422, "invalid-body");

    let a = app.get("/v1/accounts/1/transfers?limit=10").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let kinds: Vec<&str> = a.body["transfers"]
        .as_array()
        .expect("transfers")
        .iter()
        .filter_map(|t| t["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["transfer", "opening"], "newest first");
    app.get("/v1/accounts/2/transfers?limit=0")
        .await
        .assert_problem(422, "invalid-input");
    app.get("/v1/accounts/9/transfers")
        .await
        .assert_problem(404, "unknown-account");

    let audit = app.admin(Method::GET, "/v1/admin/audit", None).await;
    assert_eq!(audit.body["ok"], true, "{}", audit.text);
    assert_eq!(audit.body["ledger_divergences"], json!([]));
}

#[tokio::test]
async fn deposits_and_withdrawals_go_through_the_system_account() {
    let app = spawn_app().await;
    open(&app, 1, 100).await;
    let deposit = |id: &str, amount: i64| json!({"id": id, "amount": amount});
    let a = app
        .admin(
            Method::POST,
            "/v1/accounts/1/deposits",
            Some(deposit("d-1", 50)),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    assert_eq!(
        (a.body["from"].as_i64(), a.body["kind"].as_str()),
        (Some(0), Some("deposit"))
    );
    let a = app
        .admin(
            Method::POST,
            "/v1/accounts/1/deposits",
            Some(deposit("d-1", 50)),
        )
        .await;
    assert_eq!(
        (a.status, a.body["replayed"].as_bool()),
        (StatusCode::OK, Some(true))
    );
    app.admin(
        Method::POST,
        "/v1/accounts/1/deposits",
        Some(deposit("d-1", 51)),
    )
    .await
    .assert_problem(409, "idempotency-conflict");
    app.admin(
        Method::POST,
        "/v1/accounts/9/deposits",
        Some(deposit("d-2", 1)),
    )
    .await
    .assert_problem(404, "unknown-account");
    app.admin(
        Method::POST,
        "/v1/accounts/1/deposits",
        Some(deposit("d-3", 0)),
    )
    .await
    .assert_problem(422, "invalid-input");

    let a = app
        .admin(
            Method::POST,
            "/v1/accounts/1/withdrawals",
            Some(deposit("w-1", 150)),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    assert_eq!(
        (a.body["to"].as_i64(), a.body["kind"].as_str()),
        (Some(0), Some("withdrawal"))
    );
    let a = app
        .admin(
            Method::POST,
            "/v1/accounts/1/withdrawals",
            Some(deposit("w-2", 1)),
        )
        .await;
    a.assert_problem(409, "insufficient-funds");
    assert_eq!(a.body["balance"], 0);
    let audit = app.admin(Method::GET, "/v1/admin/audit", None).await;
    assert_eq!(audit.body["ok"], true, "{}", audit.text);
}

/// An account's statement and its balance at a time: entries a page at a time, each with its
/// transfer, amount, direction, currency and the counters after it; the cursor belongs to its
/// statement (another account's or another list's is 422 `cursor-invalid`); a past balance is
/// what the account held then, before it existed 404 `no-balance-at`, an unknown account 404.
#[tokio::test]
async fn a_statement_pages_its_entries_and_a_past_balance_is_as_it_was() {
    use chrono::{SecondsFormat, Utc};
    let app = spawn_app().await;
    for (id, opening) in [(1, 1_000), (2, 0)] {
        let a = open(&app, id, opening).await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    }
    let pay = |id: &str, amount: i64| json!({"id": id, "from": 1, "to": 2, "amount": amount});
    let t = app.post("/v1/transfers", pay("st-1", 100)).await;
    assert_eq!(t.status, StatusCode::CREATED, "{}", t.text);
    // Taken after the first transfer answered, before the second was sent.
    let between = Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true);
    let t = app.post("/v1/transfers", pay("st-2", 50)).await;
    assert_eq!(t.status, StatusCode::CREATED, "{}", t.text);

    let mut seen = Vec::new();
    let mut next = "/v1/accounts/1/entries?limit=1".to_owned();
    let mut first_cursor = None;
    loop {
        let page = app.get(&next).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.text);
        let entry = &page.body["entries"][0];
        seen.push((
            entry["kind"].as_str().unwrap_or_default().to_owned(),
            entry["transfer_id"].clone(),
            entry["direction"].clone(),
            entry["amount"].clone(),
            entry["balance_after"].clone(),
            entry["currency"].clone(),
        ));
        let Some(cursor) = page.body["next_cursor"].as_str() else {
            break;
        };
        first_cursor.get_or_insert_with(|| cursor.to_owned());
        next = format!("/v1/accounts/1/entries?limit=1&cursor={cursor}");
    }
    let eur = json!("EUR");
    assert_eq!(
        seen,
        [
            (
                "opening".into(),
                json!("opening:1"),
                json!("credit"),
                json!(1000),
                json!(1000),
                eur.clone()
            ),
            (
                "transfer".into(),
                json!("st-1"),
                json!("debit"),
                json!(100),
                json!(900),
                eur.clone()
            ),
            (
                "transfer".into(),
                json!("st-2"),
                json!("debit"),
                json!(50),
                json!(850),
                eur.clone()
            ),
        ]
    );
    let cursor = first_cursor.expect("a second page");
    for refused in [
        format!("/v1/accounts/2/entries?cursor={cursor}"),
        format!("/v1/accounts/1/entries?from={between}&cursor={cursor}"),
        "/v1/accounts/1/entries?cursor=a0000000000000005".to_owned(),
        format!("/v1/accounts?cursor={cursor}"),
    ] {
        app.get(&refused)
            .await
            .assert_problem(422, "cursor-invalid");
    }
    for bad in [
        "/v1/accounts/1/entries?from=yesterday",
        "/v1/accounts/1/entries?limit=0",
        "/v1/accounts/1/balance",
        "/v1/accounts/1/balance?at=10000-01-01T00:00:00Z",
    ] {
        app.get(bad).await.assert_problem(422, "invalid-input");
    }
    // Times past what the ledger keeps are clamped; a range running backwards is empty.
    let all = app
        .get("/v1/accounts/1/entries?from=1969-12-31T23:59:59Z&to=9999-12-31T23:59:59-23:00")
        .await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.text);
    assert_eq!(all.body["entries"].as_array().map(Vec::len), Some(3));
    let none = app
        .get("/v1/accounts/1/entries?from=2030-01-01T00:00:00Z&to=2020-01-01T00:00:00Z")
        .await;
    assert_eq!(none.body["entries"], json!([]), "{}", none.text);
    let later = app
        .get(&format!("/v1/accounts/2/entries?from={between}"))
        .await;
    assert_eq!(
        later.body["entries"][0]["transfer_id"],
        json!("st-2"),
        "{}",
        later.text
    );
    assert_eq!(later.body["entries"][0]["balance_after"], json!(150));

    let then = app
        .get(&format!("/v1/accounts/1/balance?at={between}"))
        .await;
    assert_eq!(then.status, StatusCode::OK, "{}", then.text);
    assert_eq!(
        (
            &then.body["balance"],
            &then.body["available"],
            &then.body["currency"]
        ),
        (&json!(900), &json!(900), &eur)
    );
    let now = app
        .get("/v1/accounts/1/balance?at=9999-12-31T23:59:59-23:00")
        .await;
    assert_eq!(now.body["balance"], json!(850), "{}", now.text);
    app.get("/v1/accounts/1/balance?at=2000-01-01T00:00:00Z")
        .await
        .assert_problem(404, "no-balance-at");
    app.get(&format!("/v1/accounts/9/balance?at={between}"))
        .await
        .assert_problem(404, "unknown-account");
    app.get("/v1/accounts/9/entries")
        .await
        .assert_problem(404, "unknown-account");
}
