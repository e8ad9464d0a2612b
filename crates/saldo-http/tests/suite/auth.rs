//! Auth refusals: admin routes need the admin token; the other /v1 routes need the API token (or
//! the admin token) unless API authentication is explicitly disabled; health, readiness, metrics
//! and the document need none. Every refusal is 401 problem+json with `WWW-Authenticate: Bearer`.
//! Tokens persist hashed in a token store (0600) and a rotation reaches a running app.

use axum::http::{header, Method, StatusCode};
use serde_json::json;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use saldo_http::config::{ApiAuth, ConfigError};
use saldo_http::tokens::{StoreError, TokenKind, TokenStore, TOKENS_FILE};
use saldo_http::RawSettings;

use crate::support::{spawn_app, spawn_app_with, state_raw, Answer, TestApp, ADMIN, API};

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
    let reserve_2 = json!({"order_id": "o-2", "items": [{"product_id": 1, "quantity": 1}]});
    let transfer = json!({"id": "t-1", "from": 5, "to": 6, "amount": 1});
    let routes = [
        (Method::GET, "/v1/products/1/stock", None),
        (Method::POST, "/v1/reservations", Some(reserve)),
        (Method::GET, "/v1/orders/o-1", None),
        (Method::POST, "/v1/orders/o-1/confirm", None),
        // A sold order cannot be released: the release is of another, reserved, order.
        (Method::POST, "/v1/reservations", Some(reserve_2)),
        (Method::POST, "/v1/orders/o-2/release", None),
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
async fn with_api_auth_disabled_the_other_routes_are_open() {
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

fn reserve_body(order: &str) -> serde_json::Value {
    json!({"order_id": order, "items": [{"product_id": 1, "quantity": 1}]})
}

async fn app_with(raw: RawSettings) -> (TestApp, Vec<saldo_http::config::Generated>) {
    let db = crate::harness::test_db_with_pool(4).await;
    let (state, generated) = state_raw(db.pool.clone(), raw);
    let router = saldo_http::app(state.clone());
    (TestApp { db, state, router }, generated)
}

/// Regression, secure by default: with no API token configured, money and stock writes were open to
/// anyone who reached the port. Now the default settings require one.
#[tokio::test]
async fn writes_need_a_token_by_default() {
    let db = crate::harness::test_db_with_pool(4).await;
    let raw = RawSettings {
        admin_token: Some(ADMIN.into()),
        ..RawSettings::default()
    };
    let settings = raw.validate().expect("valid").settings;
    let store = saldo::stock::Store::new(db.pool.clone(), saldo::retry::TxOptions::default());
    let engine = saldo::stock::build(
        saldo::stock::StrategyName::Atomic,
        store,
        &saldo::stock::StrategyConfig::default(),
    );
    let prometheus = saldo_http::metrics::install().expect("recorder");
    let state = saldo_http::AppState::new(engine, settings, prometheus);
    let app = TestApp {
        router: saldo_http::app(state.clone()),
        state,
        db,
    };
    app.stock(1, 5).await;
    for id in [5, 6] {
        let body = json!({"id": id, "opening_balance": 100});
        let a = app
            .call(Method::POST, "/v1/accounts", Some(ADMIN), Some(body))
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    }
    assert_401(&app.reserve("o-1", &[(1, 1)]).await);
    assert_401(
        &app.post(
            "/v1/transfers",
            json!({"id": "t-1", "from": 5, "to": 6, "amount": 1}),
        )
        .await,
    );
    assert_401(&app.get("/v1/products/1/stock").await);
    // Nothing was taken.
    let a = app
        .call(Method::GET, "/v1/products/1/stock", Some(ADMIN), None)
        .await;
    assert_eq!(a.body["available"], 5, "{}", a.text);
}

#[tokio::test]
async fn generated_api_token_opens_the_api_routes_and_insecure_mode_needs_none() {
    let (app, generated) = app_with(RawSettings {
        admin_token: Some(ADMIN.into()),
        ..RawSettings::default()
    })
    .await;
    assert_eq!(generated.len(), 1, "only the API token was generated");
    assert_eq!(generated[0].kind, TokenKind::Api);
    assert!(
        !generated[0].stored,
        "no token directory: this process only"
    );
    let api = generated[0].token.expose().to_owned();
    app.stock(1, 5).await;
    let a = app
        .call(
            Method::POST,
            "/v1/reservations",
            Some(&api),
            Some(reserve_body("o-1")),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    // The API token is not an admin token.
    assert_401(
        &app.call(Method::GET, "/v1/admin/audit", Some(&api), None)
            .await,
    );

    let (open, generated) = app_with(RawSettings {
        admin_token: Some(ADMIN.into()),
        api_auth: ApiAuth::Disabled,
        ..RawSettings::default()
    })
    .await;
    assert!(generated.is_empty());
    open.stock(1, 5).await;
    let a = open.reserve("o-1", &[(1, 1)]).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    // Disabling API auth never opens the admin routes.
    assert_401(&open.get("/v1/admin/audit").await);
}

fn mode_of(path: &std::path::Path) -> u32 {
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test]
async fn tokens_persist_hashed_0600_across_two_starts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("saldo");
    let raw = RawSettings {
        token_dir: Some(dir.clone()),
        ..RawSettings::default()
    };
    let first = raw.clone().validate().expect("first start");
    let kinds: Vec<(TokenKind, bool)> =
        first.generated.iter().map(|g| (g.kind, g.stored)).collect();
    assert_eq!(kinds, [(TokenKind::Admin, true), (TokenKind::Api, true)]);
    let file = dir.join(TOKENS_FILE);
    assert_eq!(mode_of(&file), 0o600, "token file");
    assert_eq!(mode_of(&dir), 0o700, "a directory the store created");
    let text = std::fs::read_to_string(&file).expect("read");
    for g in &first.generated {
        assert!(
            !text.contains(g.token.expose()),
            "only digests on disk: {text}"
        );
    }

    let second = raw.validate().expect("second start");
    assert!(second.generated.is_empty(), "nothing new on a restart");
    let creds = &second.settings.credentials;
    let (admin, api) = (&first.generated[0].token, &first.generated[1].token);
    assert!(creds.is_admin(admin.expose().as_bytes()));
    assert!(creds.is_client(Some(api.expose().as_bytes())));
    assert!(!creds.is_admin(api.expose().as_bytes()));

    // Environment tokens override the stored ones and are not persisted.
    let env_admin = "env-admin-token-0123456789";
    let third = RawSettings {
        token_dir: Some(dir.clone()),
        admin_token: Some(env_admin.into()),
        ..RawSettings::default()
    }
    .validate()
    .expect("third start");
    assert!(third.settings.credentials.is_admin(env_admin.as_bytes()));
    assert!(!third
        .settings
        .credentials
        .is_admin(admin.expose().as_bytes()));
    assert!(!std::fs::read_to_string(&file)
        .expect("read")
        .contains(env_admin));
}

#[tokio::test]
async fn a_token_file_others_can_read_or_a_foreign_format_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let raw = RawSettings {
        token_dir: Some(tmp.path().to_owned()),
        ..RawSettings::default()
    };
    raw.clone().validate().expect("first start");
    let file = tmp.path().join(TOKENS_FILE);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    assert!(matches!(
        raw.clone().validate(),
        Err(ConfigError::TokenStore(StoreError::Insecure {
            mode: 0o644,
            ..
        }))
    ));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::write(&file, "{\"version\": 9, \"tokens\": {}}").expect("write");
    assert!(matches!(
        raw.validate(),
        Err(ConfigError::TokenStore(StoreError::Corrupt { .. }))
    ));
}

/// Polls until `check` holds, bounded: a running app re-reads the token file at most once per
/// `RELOAD_CHECK_INTERVAL_MS`, so this needs about a second, allowed ten.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within 10 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn rotation_reaches_a_running_app_without_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (app, generated) = app_with(RawSettings {
        token_dir: Some(tmp.path().to_owned()),
        ..RawSettings::default()
    })
    .await;
    let old_admin = generated[0].token.expose().to_owned();
    let old_api = generated[1].token.expose().to_owned();
    let a = app
        .call(Method::GET, "/v1/admin/audit", Some(&old_admin), None)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);

    let store = TokenStore::new(tmp.path());
    let new_api = store.rotate(TokenKind::Api).expect("rotate api");
    let new_admin = store.rotate(TokenKind::Admin).expect("rotate admin");
    let path = "/v1/admin/audit";
    eventually("the old admin token is refused", async || {
        app.call(Method::GET, path, Some(&old_admin), None)
            .await
            .status
            == StatusCode::UNAUTHORIZED
    })
    .await;
    let a = app
        .call(Method::GET, path, Some(new_admin.expose()), None)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    app.call(
        Method::PUT,
        "/v1/products/1/stock",
        Some(new_admin.expose()),
        Some(json!({"count": 5})),
    )
    .await;
    assert_401(
        &app.call(
            Method::POST,
            "/v1/reservations",
            Some(&old_api),
            Some(reserve_body("o-1")),
        )
        .await,
    );
    let a = app
        .call(
            Method::POST,
            "/v1/reservations",
            Some(new_api.expose()),
            Some(reserve_body("o-1")),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);

    // A token file made readable by others is not trusted: the stored tokens stop working.
    let file = tmp.path().join(TOKENS_FILE);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    eventually("an insecure file fails closed", async || {
        app.call(Method::GET, path, Some(new_admin.expose()), None)
            .await
            .status
            == StatusCode::UNAUTHORIZED
    })
    .await;
}
