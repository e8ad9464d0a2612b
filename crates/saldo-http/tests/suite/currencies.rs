//! Currencies over HTTP: `POST /v1/accounts` takes `currency` and `scale` (422 for a bad one),
//! every account and transfer answer shows its currency, a movement between two currencies is a
//! 409 `currency-mismatch` problem naming both accounts, currencies and scales (nothing
//! written), and an exchange is a group with one leg per currency.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{spawn_app, Answer, TestApp};

async fn open(app: &TestApp, body: Value) -> Answer {
    app.admin(Method::POST, "/v1/accounts", Some(body)).await
}

async fn balance(app: &TestApp, id: i64) -> (i64, i64, i64) {
    let a = app.get(&format!("/v1/accounts/{id}")).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let n = |k: &str| a.body[k].as_i64().expect("number");
    (n("balance"), n("held"), n("pending_credits"))
}

#[tokio::test]
async fn accounts_take_a_currency_and_scale_and_refuse_bad_ones() {
    let app = spawn_app().await;
    let a = open(&app, json!({"id": 1, "opening_balance": 10})).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    assert_eq!(
        (&a.body["currency"], &a.body["scale"]),
        (&json!("EUR"), &json!(2))
    );
    let a = open(&app, json!({"id": 2, "currency": "JPY"})).await;
    assert_eq!(
        (&a.body["currency"], &a.body["scale"]),
        (&json!("JPY"), &json!(0))
    );
    let a = open(&app, json!({"id": 3, "currency": "USDC", "scale": 6})).await;
    assert_eq!(
        (&a.body["currency"], &a.body["scale"]),
        (&json!("USDC"), &json!(6))
    );
    let read = app.get("/v1/accounts/3").await;
    assert_eq!(
        (&read.body["currency"], &read.body["scale"]),
        (&json!("USDC"), &json!(6))
    );
    let listed = app.get("/v1/accounts").await;
    assert_eq!(
        listed.body["accounts"][1]["currency"], "JPY",
        "{}",
        listed.text
    );
    for bad in [
        json!({"id": 4, "currency": "usd"}),
        json!({"id": 4, "currency": "US"}),
        json!({"id": 4, "currency": "ABCDEFGHIJKLM"}),
        json!({"id": 4, "currency": "USD", "scale": 19}),
        json!({"id": 4, "scale": -1}),
    ] {
        let refused = open(&app, bad.clone()).await;
        refused.assert_problem(422, "invalid-input");
        assert!(
            refused.body["detail"]
                .as_str()
                .is_some_and(|d| d.contains("currency") || d.contains("scale")),
            "{bad}: {}",
            refused.text
        );
    }
    open(&app, json!({"id": 4, "currency": 978}))
        .await
        .assert_problem(422, "invalid-body");
    assert_eq!(
        app.get("/v1/accounts/4").await.status,
        StatusCode::NOT_FOUND
    );
    // The opening is journalled in the account's currency.
    let listed = app.get("/v1/accounts/1/transfers").await;
    assert_eq!(
        listed.body["transfers"][0]["currency"], "EUR",
        "{}",
        listed.text
    );
}

#[tokio::test]
async fn a_movement_between_two_currencies_is_a_409_naming_both_and_writes_nothing() {
    let app = spawn_app().await;
    open(&app, json!({"id": 1, "opening_balance": 100})).await;
    open(&app, json!({"id": 2, "currency": "USD"})).await;
    for body in [
        json!({"id": "t", "from": 1, "to": 2, "amount": 10}),
        json!({"id": "h", "from": 1, "to": 2, "amount": 10, "pending": true}),
    ] {
        let refused = app.post("/v1/transfers", body).await;
        refused.assert_problem(409, "currency-mismatch");
        assert_eq!(
            refused.body["type"], "urn:saldo:problem:currency-mismatch",
            "{}",
            refused.text
        );
        for (key, value) in [
            ("from", json!(1)),
            ("to", json!(2)),
            ("from_currency", json!("EUR")),
            ("to_currency", json!("USD")),
            ("from_scale", json!(2)),
            ("to_scale", json!(2)),
        ] {
            assert_eq!(refused.body[key], value, "{key}: {}", refused.text);
        }
    }
    let group = json!({"id": "g", "transfers": [
        {"id": "g1", "from": 1, "to": 2, "amount": 10},
    ]});
    let refused = app.post("/v1/transfer-groups", group).await;
    refused.assert_problem(409, "currency-mismatch");
    assert_eq!(
        (&refused.body["failed_index"], &refused.body["to_currency"]),
        (&json!(0), &json!("USD"))
    );
    assert_eq!(balance(&app, 1).await, (100, 0, 0));
    assert_eq!(balance(&app, 2).await, (0, 0, 0));
    assert_eq!(
        app.get("/v1/transfers/t").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        app.get("/v1/transfers/h").await.status,
        StatusCode::NOT_FOUND
    );
}

/// An exchange: one leg per currency through the operator's exchange accounts, all or none;
/// each transfer answer shows its currency.
#[tokio::test]
async fn an_exchange_is_a_group_with_one_leg_per_currency() {
    let app = spawn_app().await;
    open(&app, json!({"id": 1, "opening_balance": 10_000})).await;
    open(&app, json!({"id": 2, "currency": "USD"})).await;
    open(&app, json!({"id": 901})).await;
    open(
        &app,
        json!({"id": 902, "currency": "USD", "opening_balance": 50_000}),
    )
    .await;
    let exchange = json!({"id": "fx-1", "transfers": [
        {"id": "fx-1-eur", "from": 1, "to": 901, "amount": 10_000},
        {"id": "fx-1-usd", "from": 902, "to": 2, "amount": 10_850},
    ]});
    let a = app.post("/v1/transfer-groups", exchange).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    assert_eq!(a.body["transfers"][0]["currency"], "EUR");
    assert_eq!(a.body["transfers"][1]["currency"], "USD");
    assert_eq!(balance(&app, 1).await, (0, 0, 0));
    assert_eq!(balance(&app, 2).await, (10_850, 0, 0));
    let read = app.get("/v1/transfers/fx-1-usd").await;
    assert_eq!(read.body["currency"], "USD", "{}", read.text);
    let audit = app.admin(Method::GET, "/v1/admin/audit", None).await;
    assert_eq!(audit.body["ok"], true, "{}", audit.text);
}
