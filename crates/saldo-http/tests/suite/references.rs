//! References and metadata over HTTP: a transfer, a hold and a group take `reference` and
//! `metadata` and show them in every answer; a replay with other ones is 409 like another
//! amount; past a bound either is a 422 `invalid-input` problem with nothing written.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{spawn_app, TestApp};

async fn two_accounts(app: &TestApp) {
    for (id, opening) in [(1, 1_000), (2, 0)] {
        let a = app
            .admin(
                Method::POST,
                "/v1/accounts",
                Some(json!({"id": id, "opening_balance": opening})),
            )
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    }
}

fn transfer(id: &str, extra: Value) -> Value {
    let mut body = json!({"id": id, "from": 1, "to": 2, "amount": 10});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    body
}

#[tokio::test]
async fn transfers_holds_and_groups_show_their_reference_and_metadata() {
    let app = spawn_app().await;
    two_accounts(&app).await;
    let tags = json!({"reference": "pay_1", "metadata": {"invoice": "INV-1"}});
    let t = app
        .post("/v1/transfers", transfer("t-1", tags.clone()))
        .await;
    assert_eq!(t.status, StatusCode::CREATED, "{}", t.text);
    assert_eq!(
        (&t.body["reference"], &t.body["metadata"]),
        (&tags["reference"], &tags["metadata"])
    );
    let read = app.get("/v1/transfers/t-1").await;
    assert_eq!(read.body["reference"], tags["reference"], "{}", read.text);
    let replay = app
        .post("/v1/transfers", transfer("t-1", tags.clone()))
        .await;
    assert_eq!(replay.status, StatusCode::OK, "{}", replay.text);
    let other = json!({"reference": "pay_2", "metadata": {"invoice": "INV-1"}});
    let conflict = app.post("/v1/transfers", transfer("t-1", other)).await;
    conflict.assert_problem(409, "idempotency-conflict");
    let hold = app
        .post(
            "/v1/transfers",
            transfer("h-1", json!({"pending": true, "reference": "cart-7"})),
        )
        .await;
    assert_eq!(hold.status, StatusCode::CREATED, "{}", hold.text);
    assert_eq!(hold.body["reference"], json!("cart-7"));
    assert_eq!(hold.body["metadata"], Value::Null);
    let group = app
        .post(
            "/v1/transfer-groups",
            json!({"id": "g-1", "reference": "fx-1", "metadata": {"desk": "fx"},
                   "transfers": [transfer("g-1-0", json!({"reference": "leg"}))]}),
        )
        .await;
    assert_eq!(group.status, StatusCode::CREATED, "{}", group.text);
    assert_eq!(
        (&group.body["reference"], &group.body["metadata"]["desk"]),
        (&json!("fx-1"), &json!("fx"))
    );
    assert_eq!(group.body["transfers"][0]["reference"], json!("leg"));
}

#[tokio::test]
async fn a_reference_or_metadata_past_its_bounds_is_422_with_nothing_written() {
    let app = spawn_app().await;
    two_accounts(&app).await;
    let many: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    for (n, bad) in [
        json!({"reference": ""}),
        json!({"reference": "x".repeat(129)}),
        json!({"reference": "a\nb"}),
        json!({"metadata": many}),
        json!({"metadata": {"k": 1}}),
        json!({"metadata": {"k": "v".repeat(257)}}),
        json!({"metadata": {"": "v"}}),
        json!({"metadata": ["a"]}),
    ]
    .into_iter()
    .enumerate()
    {
        let id = format!("bad-{n}");
        let refused = app.post("/v1/transfers", transfer(&id, bad.clone())).await;
        refused.assert_problem(422, "invalid-input");
        let missing = app.get(&format!("/v1/transfers/{id}")).await;
        assert_eq!(
            missing.status,
            StatusCode::NOT_FOUND,
            "{bad}: {}",
            missing.text
        );
    }
}
