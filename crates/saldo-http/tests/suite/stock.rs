//! Stock rows of the API table: PUT count, POST adjustment, GET stock, with every error status.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::spawn_app;

#[tokio::test]
async fn put_count_creates_sets_and_refuses_below_reserved() {
    let app = spawn_app().await;
    let a = app
        .admin(
            Method::PUT,
            "/v1/products/1/stock",
            Some(json!({"count": 40})),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(a.body["product_id"], 1);
    assert_eq!(a.body["available"], 40);
    assert_eq!(a.body["reserved"], 0);

    assert_eq!(
        app.reserve("o-1", &[(1, 3)]).await.status,
        StatusCode::CREATED
    );
    // On-hand = available + reserved: 10 means 7 available, 3 reserved.
    let a = app
        .admin(
            Method::PUT,
            "/v1/products/1/stock",
            Some(json!({"count": 10})),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(
        (a.body["available"].as_i64(), a.body["reserved"].as_i64()),
        (Some(7), Some(3))
    );

    let a = app
        .admin(
            Method::PUT,
            "/v1/products/1/stock",
            Some(json!({"count": 2})),
        )
        .await;
    a.assert_problem(409, "count-below-reserved");
    assert_eq!(a.body["product_id"], 1);
    assert_eq!(a.body["reserved"], 3);
}

#[tokio::test]
async fn put_count_refuses_invalid_input_with_422() {
    let app = spawn_app().await;
    for (path, body) in [
        ("/v1/products/1/stock", json!({"count": -1})),
        ("/v1/products/1/stock", json!({"count": 1_000_000_001i64})),
        ("/v1/products/0/stock", json!({"count": 1})),
        ("/v1/products/-5/stock", json!({"count": 1})),
    ] {
        app.admin(Method::PUT, path, Some(body))
            .await
            .assert_problem(422, "invalid-input");
    }
    // A path segment that is not a number, a wrong type and an unknown field.
    app.admin(
        Method::PUT,
        "/v1/products/abc/stock",
        Some(json!({"count": 1})),
    )
    .await
    .assert_problem(422, "invalid-input");
    app.admin(
        Method::PUT,
        "/v1/products/1/stock",
        Some(json!({"count": "many"})),
    )
    .await
    .assert_problem(422, "invalid-body");
    app.admin(
        Method::PUT,
        "/v1/products/1/stock",
        Some(json!({"count": 1, "extra": true})),
    )
    .await
    .assert_problem(422, "invalid-body");
}

#[tokio::test]
async fn adjustments_restock_write_off_and_refuse() {
    let app = spawn_app().await;
    app.stock(3, 5).await;
    let a = app
        .admin(
            Method::POST,
            "/v1/products/3/stock/adjustments",
            Some(json!({"delta": 10, "reason": "restock"})),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(a.body["available"], 15);

    let a = app
        .admin(
            Method::POST,
            "/v1/products/3/stock/adjustments",
            Some(json!({"delta": -16, "reason": "write-off"})),
        )
        .await;
    a.assert_problem(409, "would-go-negative");
    assert_eq!(a.body["product_id"], 3);
    assert_eq!(a.body["available"], 15);

    app.admin(
        Method::POST,
        "/v1/products/99/stock/adjustments",
        Some(json!({"delta": 1, "reason": "restock"})),
    )
    .await
    .assert_problem(404, "unknown-product");

    for body in [
        json!({"delta": 0, "reason": "nothing"}),
        json!({"delta": 1, "reason": ""}),
        json!({"delta": 1, "reason": "x".repeat(201)}),
    ] {
        app.admin(Method::POST, "/v1/products/3/stock/adjustments", Some(body))
            .await
            .assert_problem(422, "invalid-input");
    }
    app.admin(
        Method::POST,
        "/v1/products/3/stock/adjustments",
        Some(json!({"delta": 1})),
    )
    .await
    .assert_problem(422, "invalid-body");
}

#[tokio::test]
async fn get_stock_reads_or_answers_404_and_422() {
    let app = spawn_app().await;
    app.stock(8, 12).await;
    let a = app.get("/v1/products/8/stock").await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.body["product_id"], 8);
    assert_eq!(a.body["available"], 12);
    assert_eq!(a.body["reserved"], 0);
    let a = app.get("/v1/products/9/stock").await;
    a.assert_problem(404, "unknown-product");
    assert_eq!(a.body["product_id"], 9);
    app.get("/v1/products/0/stock")
        .await
        .assert_problem(422, "invalid-input");
    app.get("/v1/products/x/stock")
        .await
        .assert_problem(422, "invalid-input");
}
