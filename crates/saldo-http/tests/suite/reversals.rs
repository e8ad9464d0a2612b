//! Reversals over HTTP: a partial reversal answers 201 with the reversal (its kind and the
//! transfer it reverses), the same request again 200; the original then reads what was
//! reversed and lists its reversals; more than is left is a 409 problem naming posted,
//! reversed and requested, a hold is 409 `transfer-not-posted`, an amount of 0 is 422, and none
//! of those writes anything.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::spawn_app;

#[tokio::test]
async fn a_partial_reversal_then_refusals_that_write_nothing() {
    let app = spawn_app().await;
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
    let t = json!({"id": "pay-1", "from": 1, "to": 2, "amount": 100});
    assert_eq!(
        app.post("/v1/transfers", t).await.status,
        StatusCode::CREATED
    );
    let refund = json!({"id": "refund-1", "amount": 30, "reference": "rma-7"});
    let r = app
        .post("/v1/transfers/pay-1/reverse", refund.clone())
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(
        (
            &r.body["kind"],
            &r.body["reverses"],
            &r.body["from"],
            &r.body["amount"]
        ),
        (&json!("reversal"), &json!("pay-1"), &json!(2), &json!(30))
    );
    let again = app.post("/v1/transfers/pay-1/reverse", refund).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    assert_eq!(again.body["replayed"], json!(true));
    let original = app.get("/v1/transfers/pay-1").await;
    assert_eq!(
        (
            &original.body["reversed_amount"],
            &original.body["reversals"]
        ),
        (&json!(30), &json!(["refund-1"])),
        "{}",
        original.text
    );

    let hold = json!({"id": "h-1", "from": 1, "to": 2, "amount": 5, "pending": true});
    assert_eq!(
        app.post("/v1/transfers", hold).await.status,
        StatusCode::CREATED
    );
    let before = app.get("/v1/accounts/2").await.body;
    let over = app
        .post(
            "/v1/transfers/pay-1/reverse",
            json!({"id": "refund-2", "amount": 71}),
        )
        .await;
    over.assert_problem(409, "reversal-exceeds-posted");
    assert_eq!(
        (
            &over.body["posted_amount"],
            &over.body["reversed_amount"],
            &over.body["requested"]
        ),
        (&json!(100), &json!(30), &json!(71))
    );
    app.post("/v1/transfers/h-1/reverse", json!({"id": "refund-3"}))
        .await
        .assert_problem(409, "transfer-not-posted");
    app.post(
        "/v1/transfers/pay-1/reverse",
        json!({"id": "refund-4", "amount": 0}),
    )
    .await
    .assert_problem(422, "invalid-input");
    app.post("/v1/transfers/nope/reverse", json!({"id": "refund-5"}))
        .await
        .assert_problem(404, "unknown-transfer");
    assert_eq!(
        app.get("/v1/accounts/2").await.body,
        before,
        "a refusal wrote"
    );
    for id in ["refund-2", "refund-3", "refund-4", "refund-5"] {
        let read = app.get(&format!("/v1/transfers/{id}")).await;
        assert_eq!(read.status, StatusCode::NOT_FOUND, "{id} was written");
    }
}
