//! The service's startup as `saldo serve` runs it (`Application::build`), with its default
//! strategy (`batched`): settings validated, database migrated, listener bound, tokens
//! generated; a real client reserves and confirms through it; a shutdown ends it.

use std::time::Duration;

use saldo::db::PoolOptions;
use saldo::retry::TxOptions;
use saldo::stock::StrategyName;
use saldo_http::startup::{Application, ServiceConfig};
use saldo_http::tokens::TokenKind;
use saldo_http::RawSettings;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::test_db;

fn config(url: &str, strategy: StrategyName) -> ServiceConfig {
    ServiceConfig {
        database_url: url.to_owned(),
        listen: "127.0.0.1:0".parse().expect("address"),
        strategy,
        transfer_strategy: crate::harness::TRANSFER,
        pool: PoolOptions {
            max_size: 4,
            ..PoolOptions::default()
        },
        tx: TxOptions::default(),
        settings: RawSettings::default(),
        sweep_every: Duration::from_secs(30),
    }
}

/// One HTTP/1.1 exchange with `Connection: close`: the status and the body.
async fn call(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    body: &str,
) -> (u16, String) {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: saldo\r\nConnection: close\r\n\
             Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("read");
        answer
    };
    let answer = tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .expect("answer in time");
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {answer}"));
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_default_starts_serves_and_stops() {
    let db = test_db().await;
    let app = Application::build(config(&db.url, StrategyName::Batched))
        .await
        .expect("start");
    assert_eq!(app.strategy(), StrategyName::Batched);
    assert!(
        app.api_auth_required(),
        "API tokens are required by default"
    );
    let token = |kind| {
        app.generated_tokens()
            .iter()
            .find(|g| g.kind == kind)
            .map(|g| g.token.expose().to_owned())
            .expect("generated token")
    };
    let (admin, api) = (token(TokenKind::Admin), token(TokenKind::Api));
    let addr = app.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));

    let (status, body) = call(
        addr,
        "PUT",
        "/v1/products/5/stock",
        &admin,
        r#"{"count": 2}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let reserve = r#"{"order_id": "start-1", "items": [{"product_id": 5, "quantity": 2}]}"#;
    let (status, body) = call(
        addr,
        "POST",
        "/v1/reservations",
        "wrong-token-0123456789",
        reserve,
    )
    .await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = call(addr, "POST", "/v1/reservations", &api, reserve).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = call(addr, "POST", "/v1/orders/start-1/confirm", &api, "").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = call(addr, "GET", "/v1/products/5/stock", &api, "").await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(r#""available":0"#) && body.contains(r#""reserved":0"#),
        "{body}"
    );

    stop.send(()).expect("still serving");
    tokio::time::timeout(Duration::from_secs(60), serving)
        .await
        .expect("stops in time")
        .expect("join")
        .expect("served");
}

/// The lab-only strategies cannot reach `Application::build`: `StrategyName` names only the
/// served strategies (the naive ones live in `saldo-lab`), and the flag parser refuses the rest.
#[test]
fn a_lab_only_strategy_is_refused_before_anything_starts() {
    match saldo_http::config::serving_strategy("naive-overwrite") {
        Err(saldo_http::config::ConfigError::UnknownStrategy(name)) => {
            assert_eq!(name, "naive-overwrite")
        }
        other => panic!("expected the lab-only strategy refused, got {other:?}"),
    }
}

/// A request that arrives while the service migrates its database is refused at once (503
/// `starting`, Retry-After, nothing applied) instead of waiting in the listener's backlog until
/// the migrations end; `/healthz` says the process is alive. Once built, the service answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_while_migrating_are_refused_at_once() {
    let db = test_db().await;
    // Migrating reads refinery's history table: while this transaction holds it, the service's
    // start waits in its migrations, for as long as the test wants.
    let mut holder = db.pool.get().await.expect("connection");
    let tx = holder.transaction().await.expect("begin");
    tx.batch_execute("LOCK TABLE refinery_schema_history IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock");
    let listener =
        saldo_http::listener::bind("127.0.0.1:0".parse().expect("address")).expect("bind");
    let addr = listener.local_addr().expect("address");
    let building = tokio::spawn(Application::build_on(
        config(&db.url, StrategyName::Batched),
        listener,
    ));

    let reserve = r#"{"order_id": "early-1", "items": [{"product_id": 5, "quantity": 1}]}"#;
    let (status, body) = call(
        addr,
        "POST",
        "/v1/reservations",
        "any-token-0123456789",
        reserve,
    )
    .await;
    assert_eq!(status, 503, "{body}");
    let problem: serde_json::Value = serde_json::from_str(&body).expect("problem+json");
    assert_eq!(problem["type"], "urn:saldo:problem:starting", "{body}");
    assert_eq!(problem["applied"], false, "{body}");
    let (status, body) = call(addr, "GET", "/healthz", "", "").await;
    assert_eq!(status, 200, "alive while starting: {body}");
    let (status, _) = call(addr, "GET", "/readyz", "", "").await;
    assert_eq!(status, 503, "not ready while starting");
    assert!(!building.is_finished(), "still migrating");

    tx.rollback().await.expect("release the history table");
    let app = tokio::time::timeout(Duration::from_secs(60), building)
        .await
        .expect("built in time")
        .expect("join")
        .expect("start");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(app.run_until(async {
        let _ = stopped.await;
    }));
    let (status, body) = call(addr, "GET", "/readyz", "", "").await;
    assert_eq!(
        status, 200,
        "the running service answers on the same listener: {body}"
    );
    stop.send(()).expect("still serving");
    tokio::time::timeout(Duration::from_secs(60), serving)
        .await
        .expect("stops in time")
        .expect("join")
        .expect("served");
}
