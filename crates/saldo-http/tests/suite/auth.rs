//! Auth refusals: admin routes need the admin token; with an API token configured the other /v1
//! routes need it (or the admin token); health, readiness, metrics and the document need none.
//! Every refusal is 401 problem+json with `WWW-Authenticate: Bearer`.

use axum::http::{header, Method, StatusCode};
use serde_json::json;

use crate::support::{spawn_app, spawn_app_with, Answer, ADMIN, API};

#[track_caller]
fn assert_401(a: &Answer) {
    a.assert_problem(401, "unauthorized");
    let challenge = a
        .headers
        .get(header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(challenge.starts_with("Bearer"), "{challenge}");
}

/// Every admin route, with a body where it needs one.
fn admin_routes() -> Vec<(Method, &'static str, Option<serde_json::Value>)> {
    vec![
        (
            Method::PUT,
            "/v1/products/1/stock",
            Some(json!({"count": 1})),
        ),
        (
            Method::POST,
            "/v1/products/1/stock/adjustments",
            Some(json!({"delta": 1, "reason": "r"})),
        ),
        (Method::POST, "/v1/accounts", Some(json!({"id": 5}))),
        (
            Method::POST,
            "/v1/accounts/5/deposits",
            Some(json!({"id": "d-1", "amount": 1})),
        ),
        (
            Method::POST,
            "/v1/accounts/5/withdrawals",
            Some(json!({"id": "w-1", "amount": 1})),
        ),
        (Method::POST, "/v1/admin/sweep", None),
        (Method::GET, "/v1/admin/audit", None),
        (Method::GET, "/v1/admin/locks", None),
        (Method::GET, "/v1/admin/refusals", None),
    ]
}

#[tokio::test]
async fn admin_routes_refuse_missing_wrong_and_api_tokens() {
    let app = spawn_app_with(Some(API), 4).await;
    for (method, path, body) in admin_routes() {
        for token in [None, Some("wrong-token-wrong-token"), Some(API)] {
            let a = app.call(method.clone(), path, token, body.clone()).await;
            assert_401(&a);
        }
        let a = app
            .call(method.clone(), path, Some(ADMIN), body.clone())
            .await;
        assert!(a.status.is_success(), "{method} {path}: {}", a.text);
    }
    // The scheme is case-insensitive; another scheme is not a bearer token.
    let a = app
        .send(
            axum::http::Request::builder()
                .uri("/v1/admin/audit")
                .header(header::AUTHORIZATION, format!("bearer {ADMIN}"))
                .body(axum::body::Body::empty())
                .expect("request"),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK);
    let a = app
        .send(
            axum::http::Request::builder()
                .uri("/v1/admin/audit")
                .header(header::AUTHORIZATION, format!("Basic {ADMIN}"))
                .body(axum::body::Body::empty())
                .expect("request"),
        )
        .await;
    assert_401(&a);
}

#[tokio::test]
async fn api_token_guards_the_other_v1_routes_when_set() {
    let app = spawn_app_with(Some(API), 4).await;
    app.stock(1, 5).await;
    for id in [5, 6] {
        let body = json!({"id": id, "opening_balance": 100});
        let a = app
            .call(Method::POST, "/v1/accounts", Some(ADMIN), Some(body))
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    }
    let reserve = json!({"order_id": "o-1", "items": [{"product_id": 1, "quantity": 1}]});
    let transfer = json!({"id": "t-1", "from": 5, "to": 6, "amount": 1});
    let routes = [
        (Method::GET, "/v1/products/1/stock", None),
        (Method::POST, "/v1/reservations", Some(reserve)),
        (Method::GET, "/v1/orders/o-1", None),
        (Method::POST, "/v1/orders/o-1/confirm", None),
        (Method::POST, "/v1/orders/o-1/release", None),
        (Method::GET, "/v1/accounts/5", None),
        (Method::GET, "/v1/accounts/5/transfers", None),
        (Method::POST, "/v1/transfers", Some(transfer)),
    ];
    for (method, path, body) in routes {
        for token in [None, Some("wrong-token-wrong-token")] {
            assert_401(&app.call(method.clone(), path, token, body.clone()).await);
        }
        let a = app
            .call(method.clone(), path, Some(API), body.clone())
            .await;
        assert!(a.status.is_success(), "{method} {path}: {}", a.text);
        let a = app
            .call(method.clone(), path, Some(ADMIN), body.clone())
            .await;
        assert!(
            a.status.is_success(),
            "admin token works too: {method} {path}: {}",
            a.text
        );
    }
    for path in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        assert_eq!(
            app.get(path).await.status,
            StatusCode::OK,
            "{path} needs no token"
        );
    }
}

#[tokio::test]
async fn without_api_token_the_other_routes_are_open() {
    let app = spawn_app().await;
    app.stock(1, 5).await;
    assert_eq!(app.get("/v1/products/1/stock").await.status, StatusCode::OK);
    // Auth runs before the body is read: a refused request learns nothing about its body.
    let a = app
        .call(
            Method::PUT,
            "/v1/products/1/stock",
            None,
            Some(json!({"bogus": 1})),
        )
        .await;
    assert_401(&a);
}
