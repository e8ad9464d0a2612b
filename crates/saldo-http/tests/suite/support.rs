//! Shared test helpers: an app over a fresh database, requests through `oneshot`, and a real
//! listener with a hyper client for the tests that need real connections.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::Router;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use saldo::retry::TxOptions;
use saldo::stock::{self, Store, StrategyConfig, StrategyName};
use saldo_http::config::{ApiAuth, Generated};
use saldo_http::{app, AppState, RawSettings};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::ServiceExt;

use crate::harness::{test_db_with_pool, TestDb};

pub const ADMIN: &str = "admin-token-for-tests-0123456789";
pub const API: &str = "api-token-for-tests-0123456789";

pub struct TestApp {
    pub db: TestDb,
    pub state: AppState,
    pub router: Router,
}

/// An answer: status, headers, and the body as JSON (or as a JSON string when it is not JSON).
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
    pub text: String,
}

impl Answer {
    /// The problem `type` without its prefix, e.g. `insufficient-stock`.
    pub fn problem(&self) -> &str {
        self.body["type"]
            .as_str()
            .and_then(|t| t.strip_prefix(saldo_http::error::TYPE_PREFIX))
            .unwrap_or("")
    }

    /// Asserts a problem+json answer with this status and kind.
    #[track_caller]
    pub fn assert_problem(&self, status: u16, kind: &str) {
        assert_eq!(self.status.as_u16(), status, "{}", self.text);
        assert_eq!(
            self.headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
            Some("application/problem+json"),
            "{}",
            self.text
        );
        assert_eq!(self.problem(), kind, "{}", self.text);
        assert_eq!(self.body["status"].as_u64(), Some(u64::from(status)));
        assert!(self.body["title"].is_string() && self.body["detail"].is_string());
    }
}

pub fn state_for(db: &TestDb, api_token: Option<&str>) -> AppState {
    state_with(
        db.pool.clone(),
        RawSettings {
            api_token: api_token.map(Into::into),
            ..RawSettings::default()
        },
    )
}

/// A state over `pool` running this binary's strategy (`crate::harness::STRATEGY`), with the
/// test admin token and `raw` otherwise.
///
/// Settings that name no API token and no token directory run with API authentication
/// DISABLED, as every suite did before the API token became mandatory, so the suites about
/// stock, orders and money need not carry one; [`state_raw`] passes settings untouched.
pub fn state_with(pool: deadpool_postgres::Pool, raw: RawSettings) -> AppState {
    state_with_strategy(pool, raw, crate::harness::STRATEGY, TxOptions::default())
}

/// A state running `strategy` over `pool` with transaction settings `tx`; API authentication as
/// in [`state_with`].
pub fn state_with_strategy(
    pool: deadpool_postgres::Pool,
    raw: RawSettings,
    strategy: StrategyName,
    tx: TxOptions,
) -> AppState {
    let api_auth = if raw.api_token.is_none() && raw.token_dir.is_none() {
        ApiAuth::Disabled
    } else {
        raw.api_auth
    };
    let raw = RawSettings {
        admin_token: Some(raw.admin_token.unwrap_or_else(|| ADMIN.into())),
        api_auth,
        ..raw
    };
    state_built(pool, raw, strategy, tx).0
}

/// A state over `pool` (this binary's strategy) with exactly `raw`, and the tokens it generated.
pub fn state_raw(pool: deadpool_postgres::Pool, raw: RawSettings) -> (AppState, Vec<Generated>) {
    state_built(pool, raw, crate::harness::STRATEGY, TxOptions::default())
}

fn state_built(
    pool: deadpool_postgres::Pool,
    raw: RawSettings,
    strategy: StrategyName,
    tx: TxOptions,
) -> (AppState, Vec<Generated>) {
    let validated = raw.validate().expect("valid settings");
    let store = Store::new(pool, tx);
    let engine = stock::build(strategy, store, &StrategyConfig::default());
    let prometheus = saldo_http::metrics::install().expect("recorder");
    (
        AppState::new(engine, validated.settings, prometheus)
            .with_transfer_strategy(crate::harness::TRANSFER),
        validated.generated,
    )
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(None, 32).await
}

pub async fn spawn_app_with(api_token: Option<&str>, pool_size: usize) -> TestApp {
    let db = test_db_with_pool(pool_size).await;
    let state = state_for(&db, api_token);
    let router = app(state.clone());
    TestApp { db, state, router }
}

async fn into_answer<B>(response: axum::http::Response<B>) -> Answer
where
    B: hyper::body::Body,
    B::Error: std::fmt::Debug,
{
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    answer(status, headers, &bytes)
}

fn answer(status: StatusCode, headers: HeaderMap, bytes: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(bytes).into_owned();
    let body = serde_json::from_slice(bytes).unwrap_or_else(|_| Value::String(text.clone()));
    Answer {
        status,
        headers,
        body,
        text,
    }
}

impl TestApp {
    /// Sends a request with an optional bearer token and JSON body.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Answer {
        let mut builder = Request::builder().method(method).uri(path);
        if let Some(t) = token {
            builder = builder.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let request = match body {
            Some(b) => builder
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(b.to_string())),
            None => builder.body(Body::empty()),
        }
        .expect("request");
        self.send(request).await
    }

    pub async fn send(&self, request: Request<Body>) -> Answer {
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .expect("infallible");
        into_answer(response).await
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.call(Method::GET, path, None, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Answer {
        self.call(Method::POST, path, None, Some(body)).await
    }

    pub async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> Answer {
        self.call(method, path, Some(ADMIN), body).await
    }

    /// Sets a product's physical count through the API.
    pub async fn stock(&self, product: i64, count: i64) {
        let a = self
            .admin(
                Method::PUT,
                &format!("/v1/products/{product}/stock"),
                Some(serde_json::json!({ "count": count })),
            )
            .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    }

    pub async fn reserve(&self, order: &str, items: &[(i64, i64)]) -> Answer {
        let items: Vec<Value> = items
            .iter()
            .map(|(p, q)| serde_json::json!({ "product_id": p, "quantity": q }))
            .collect();
        self.post(
            "/v1/reservations",
            serde_json::json!({ "order_id": order, "items": items }),
        )
        .await
    }

    /// The value of one sample line of `/metrics` (0 when absent).
    pub async fn metric(&self, line_prefix: &str) -> f64 {
        let text = self.get("/metrics").await.text;
        metric_value(&text, line_prefix)
    }
}

/// Sum of every sample whose line starts with `line_prefix` (0 when none).
pub fn metric_value(text: &str, line_prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(line_prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A server on 127.0.0.1:0 running `saldo_http::server::run`, stopped by [`Live::stop`].
pub struct Live {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    handle: JoinHandle<std::io::Result<()>>,
}

/// Requests through a real listener are bounded in time so a hung server fails the test.
pub const LIVE_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

impl Live {
    pub async fn start(state: AppState) -> Live {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        Live::start_on(listener, state)
    }

    /// Serves `state` on a listener the test bound itself (e.g. with a longer backlog).
    pub fn start_on(listener: tokio::net::TcpListener, state: AppState) -> Live {
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(saldo_http::server::run(
            listener,
            state,
            Duration::from_secs(1),
            async move {
                let _ = rx.await;
            },
        ));
        Live {
            addr,
            stop: Some(tx),
            handle,
        }
    }

    /// Asserts the stock and ledger audits are clean, then stops the server.
    pub async fn audit_clean_then_stop(self) {
        let audit = http(
            &client(),
            self.addr,
            Method::GET,
            "/v1/admin/audit",
            Some(ADMIN),
            None,
        )
        .await;
        assert_eq!(audit.body["ok"], true, "{}", audit.text);
        self.stop().await;
    }

    /// POSTs every body to `path` at once, each from its own client (and connection).
    pub async fn post_concurrently(&self, path: &str, bodies: Vec<Value>) -> Vec<Answer> {
        let tasks = bodies.into_iter().map(|body| {
            let (addr, path) = (self.addr, path.to_owned());
            tokio::spawn(async move {
                http(&client(), addr, Method::POST, &path, None, Some(body)).await
            })
        });
        let started = std::time::Instant::now();
        let answers: Vec<Answer> = futures_util::future::join_all(tasks)
            .await
            .into_iter()
            .map(|r| r.expect("client task"))
            .collect();
        // A measurement for the record (`--nocapture`), never an assertion.
        eprintln!(
            "{} concurrent POST {path}: {} ms",
            answers.len(),
            started.elapsed().as_millis()
        );
        answers
    }

    /// Signals shutdown and waits for the server (and its sweeper) to finish.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(LIVE_REQUEST_TIMEOUT, &mut self.handle)
            .await
            .expect("server stops in time")
            .expect("server task")
            .expect("server ran");
    }
}

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A new client with its own connection pool (one per simulated buyer).
pub fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// One request through a real connection.
pub async fn http(
    client: &HttpClient,
    addr: SocketAddr,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Answer {
    let mut builder = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    if let Some(t) = token {
        builder = builder.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let body = match body {
        Some(b) => {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
            Full::new(Bytes::from(b.to_string()))
        }
        None => Full::new(Bytes::new()),
    };
    let request = builder.body(body).expect("request");
    let response = tokio::time::timeout(LIVE_REQUEST_TIMEOUT, client.request(request))
        .await
        .expect("answer in time")
        .expect("http");
    into_answer(response).await
}
