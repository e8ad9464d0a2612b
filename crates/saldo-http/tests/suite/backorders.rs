//! Backorders over HTTP: `PUT /v1/products/{id}/policy` (admin; 200, 409
//! `backorder-limit-below-backordered`, 404, 422, 401), the reservation item's
//! `"backordered"`, confirm's `"pending"`, a restock filling the oldest backorder first, and
//! the stock read's `backorder_limit`/`backordered` (absent for a product without a policy, so
//! existing clients read the same answers). Run on `atomic` (tests.rs) and `batched`.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::spawn_app;

fn policy_path(product: i64) -> String {
    format!("/v1/products/{product}/policy")
}

#[tokio::test]
async fn a_preorder_over_http() {
    let app = spawn_app().await;
    app.stock(5, 0).await;
    let plain = app.get("/v1/products/5/stock").await;
    assert_eq!(plain.body.get("backorder_limit"), None, "{}", plain.text);
    let p = app
        .admin(
            Method::PUT,
            &policy_path(5),
            Some(json!({"backorder_limit": 3})),
        )
        .await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.text);
    assert_eq!(
        (
            p.body["backorder_limit"].as_i64(),
            p.body["backordered"].as_i64()
        ),
        (Some(3), Some(0))
    );

    let first = app.reserve("pre-1", &[(5, 2)]).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text);
    assert_eq!(first.body["items"][0]["backordered"], 2);
    let second = app.reserve("pre-2", &[(5, 1)]).await;
    assert_eq!(second.status, StatusCode::CREATED, "{}", second.text);
    let replay = app.reserve("pre-2", &[(5, 1)]).await;
    assert_eq!(replay.status, StatusCode::OK, "{}", replay.text);
    assert_eq!(replay.body["items"], second.body["items"]);
    let past = app.reserve("pre-3", &[(5, 1)]).await;
    past.assert_problem(409, "insufficient-stock");

    let lowered = app
        .admin(
            Method::PUT,
            &policy_path(5),
            Some(json!({"backorder_limit": 2})),
        )
        .await;
    lowered.assert_problem(409, "backorder-limit-below-backordered");
    assert_eq!(lowered.body["backordered"], 3);

    let paid = app.post("/v1/orders/pre-1/confirm", json!({})).await;
    assert_eq!(paid.status, StatusCode::OK, "{}", paid.text);
    assert_eq!(
        paid.body["pending"],
        json!([{"product_id": 5, "quantity": 2}])
    );
    assert_eq!(paid.body["missing"], json!([]));

    let restock = app
        .admin(
            Method::POST,
            "/v1/products/5/stock/adjustments",
            Some(json!({"delta": 2, "reason": "delivery"})),
        )
        .await;
    assert_eq!(restock.status, StatusCode::OK, "{}", restock.text);
    // Both units went to the oldest backorder (pre-1, paid: straight to sold).
    assert_eq!(
        (
            restock.body["available"].as_i64(),
            restock.body["reserved"].as_i64(),
            restock.body["backordered"].as_i64()
        ),
        (Some(0), Some(0), Some(1))
    );
    let order = app.get("/v1/orders/pre-2").await;
    assert_eq!(order.body["items"][0]["backordered"], 1, "{}", order.text);
    let audit = app.admin(Method::GET, "/v1/admin/audit", None).await;
    assert_eq!(audit.body["ok"], true, "{}", audit.text);
}

#[tokio::test]
async fn policy_refusals() {
    let app = spawn_app().await;
    app.stock(6, 1).await;
    for (body, kind) in [
        (json!({"backorder_limit": -1}), "invalid-input"),
        (
            json!({"backorder_limit": i64::from(saldo::domain::MAX_BACKORDER_LIMIT) + 1}),
            "invalid-input",
        ),
        (json!({"backorder_limit": 1.5}), "invalid-body"),
        (json!({}), "invalid-body"),
        (json!({"backorder_limit": 1, "other": 2}), "invalid-body"),
    ] {
        app.admin(Method::PUT, &policy_path(6), Some(body.clone()))
            .await
            .assert_problem(422, kind);
    }
    app.admin(
        Method::PUT,
        &policy_path(7),
        Some(json!({"backorder_limit": 1})),
    )
    .await
    .assert_problem(404, "unknown-product");
    let as_client = app
        .call(
            Method::PUT,
            &policy_path(6),
            None,
            Some(json!({"backorder_limit": 1})),
        )
        .await;
    assert_eq!(
        as_client.status,
        StatusCode::UNAUTHORIZED,
        "{}",
        as_client.text
    );
    // A product without a policy answers exactly as before: no backorder fields anywhere.
    let r = app.reserve("plain-1", &[(6, 1)]).await;
    assert_eq!(r.body["items"][0].get("backordered"), None, "{}", r.text);
    let c = app.post("/v1/orders/plain-1/confirm", json!({})).await;
    assert_eq!(c.body.get("pending"), None, "{}", c.text);
}
