//! Health, readiness, metrics and the OpenAPI document: counters move after traffic (the
//! recorder is process-wide and tests run in parallel, so each check is "grew by at least"),
//! and the document lists every route of the API table.

use axum::http::{Method, StatusCode};

use crate::support::{metric_value, spawn_app};

#[tokio::test]
async fn health_and_readiness() {
    let app = spawn_app().await;
    let a = app.get("/healthz").await;
    assert_eq!(
        (a.status, a.body["status"].as_str()),
        (StatusCode::OK, Some("ok"))
    );
    let a = app.get("/readyz").await;
    assert_eq!(
        (a.status, a.body["status"].as_str()),
        (StatusCode::OK, Some("ready"))
    );
}

#[tokio::test]
async fn metrics_move_after_traffic() {
    let app = spawn_app().await;
    app.stock(1, 1).await;
    let reserved = r#"saldo_reservations_total{outcome="reserved"}"#;
    let refused = r#"saldo_reservations_total{outcome="insufficient_stock"}"#;
    let settled = r#"saldo_reservations_settled_total{status="confirmed"}"#;
    let route = r#"saldo_http_request_duration_seconds_count{method="POST",route="/v1/reservations",status="409"}"#;
    let before = app.get("/metrics").await.text;

    assert_eq!(
        app.reserve("o-1", &[(1, 1)]).await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        app.reserve("o-2", &[(1, 1)]).await.status,
        StatusCode::CONFLICT
    );
    let a = app
        .call(Method::POST, "/v1/orders/o-1/confirm", None, None)
        .await;
    assert_eq!(a.status, StatusCode::OK);

    let m = app.get("/metrics").await;
    assert_eq!(m.status, StatusCode::OK);
    assert!(m
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/plain")));
    let after = m.text;
    for (name, at_least) in [
        (reserved, 1.0),
        (refused, 1.0),
        (settled, 1.0),
        (route, 1.0),
    ] {
        let grew = metric_value(&after, name) - metric_value(&before, name);
        assert!(grew >= at_least, "{name} grew by {grew}\n{after}");
    }
    // Histograms have buckets (p99 is computable), routes are templates, never raw ids.
    assert!(after.contains("saldo_http_request_duration_seconds_bucket{"));
    assert!(
        after.contains(r#"route="/v1/orders/{order_id}/confirm""#),
        "{after}"
    );
    assert!(!after.contains("o-1"), "no order id in any label");
    for gauge in [
        "saldo_pool_connections_in_use",
        "saldo_pool_waiting_requests",
        "saldo_pool_max_connections",
        "saldo_pg_deadlocks_total",
    ] {
        assert!(
            after.lines().any(|l| l.starts_with(gauge)),
            "{gauge} missing\n{after}"
        );
    }
}

#[tokio::test]
async fn openapi_lists_every_route() {
    let app = spawn_app().await;
    let a = app.get("/openapi.json").await;
    assert_eq!(a.status, StatusCode::OK);
    assert!(
        a.body["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        a.body["openapi"]
    );
    let paths = &a.body["paths"];
    for (method, path) in [
        ("put", "/v1/products/{product_id}/stock"),
        ("get", "/v1/products/{product_id}/stock"),
        ("post", "/v1/products/{product_id}/stock/adjustments"),
        ("post", "/v1/reservations"),
        ("post", "/v1/orders/{order_id}/confirm"),
        ("post", "/v1/orders/{order_id}/release"),
        ("get", "/v1/orders/{order_id}"),
        ("post", "/v1/accounts"),
        ("get", "/v1/accounts/{id}"),
        ("get", "/v1/accounts/{id}/transfers"),
        ("post", "/v1/accounts/{id}/deposits"),
        ("post", "/v1/accounts/{id}/withdrawals"),
        ("post", "/v1/transfers"),
        ("get", "/v1/transfers/{id}"),
        ("post", "/v1/transfers/{id}/post"),
        ("post", "/v1/transfers/{id}/void"),
        ("post", "/v1/transfer-groups"),
        ("post", "/v1/admin/sweep"),
        ("get", "/v1/admin/audit"),
        ("get", "/v1/admin/locks"),
        ("get", "/v1/admin/refusals"),
        ("get", "/metrics"),
        ("get", "/healthz"),
        ("get", "/readyz"),
        ("get", "/openapi.json"),
    ] {
        assert!(paths[path][method].is_object(), "{method} {path} missing");
    }
    assert!(a.body["components"]["schemas"]["Problem"].is_object());
    assert!(a.body["components"]["securitySchemes"]["admin_token"].is_object());
}
