//! Through a real listener and real connections (hyper client): seed 000's 50 buyers for the
//! last unit, and graceful shutdown finishing an in-flight request.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use futures_util::future::join_all;
use serde_json::json;

use crate::support::{client, http, spawn_app_with, Live, ADMIN};

/// Buyers racing for the last unit (seed 000).
const BUYERS: usize = 50;
/// Bounded poll for the in-flight request to be blocked.
const LOCK_POLLS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_buyers_one_unit_exactly_one_wins() {
    let app = spawn_app_with(None, 32).await;
    let live = Live::start(app.state.clone()).await;
    let admin = client();
    let a = http(
        &admin,
        live.addr,
        Method::PUT,
        "/v1/products/1/stock",
        Some(ADMIN),
        Some(json!({"count": 1})),
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);

    let buyers = (0..BUYERS).map(|i| {
        let addr = live.addr;
        async move {
            // One client (and connection) per buyer, all at once.
            let c = client();
            let body = json!({"order_id": format!("buyer-{i}"),
                              "items": [{"product_id": 1, "quantity": 1}]});
            tokio::spawn(async move {
                http(&c, addr, Method::POST, "/v1/reservations", None, Some(body)).await
            })
            .await
            .expect("buyer task")
        }
    });
    let answers = join_all(buyers).await;
    let won = answers
        .iter()
        .filter(|a| a.status == StatusCode::CREATED)
        .count();
    let refused: Vec<_> = answers
        .iter()
        .filter(|a| a.status == StatusCode::CONFLICT)
        .collect();
    assert_eq!(won, 1, "exactly one buyer gets the last unit");
    assert_eq!(
        refused.len(),
        BUYERS - 1,
        "everyone else is refused, nobody errors"
    );
    for a in refused {
        a.assert_problem(409, "insufficient-stock");
        assert_eq!(a.body["product_id"], 1);
    }
    let s = http(
        &admin,
        live.addr,
        Method::GET,
        "/v1/products/1/stock",
        None,
        None,
    )
    .await;
    assert_eq!(
        (s.body["available"].as_i64(), s.body["reserved"].as_i64()),
        (Some(0), Some(1))
    );
    let audit = http(
        &admin,
        live.addr,
        Method::GET,
        "/v1/admin/audit",
        Some(ADMIN),
        None,
    )
    .await;
    assert_eq!(audit.body["ok"], true, "{}", audit.text);
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_in_flight_requests() {
    let app = spawn_app_with(None, 8).await;
    app.stock(1, 5).await;
    let live = Live::start(app.state.clone()).await;

    // Hold the stock row so the reservation is in flight when shutdown starts.
    let mut holder = app.db.pool.get().await.expect("connection");
    let tx = holder.transaction().await.expect("begin");
    tx.execute("SELECT 1 FROM stock WHERE product_id = 1 FOR UPDATE", &[])
        .await
        .expect("lock");
    let addr = live.addr;
    let in_flight = tokio::spawn(async move {
        let c = client();
        let body = json!({"order_id": "late", "items": [{"product_id": 1, "quantity": 1}]});
        http(&c, addr, Method::POST, "/v1/reservations", None, Some(body)).await
    });
    let mut blocked = false;
    for _ in 0..LOCK_POLLS {
        if !saldo::ops::locks(&app.db.pool)
            .await
            .expect("locks")
            .is_empty()
        {
            blocked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(blocked, "the reservation is waiting on the row lock");
    let stopping = tokio::spawn(live.stop());
    // New connections are refused once shutdown began; the in-flight one still finishes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !stopping.is_finished(),
        "shutdown waits for the in-flight request"
    );
    tx.rollback().await.expect("rollback");
    let a = in_flight.await.expect("request task");
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    stopping.await.expect("server stopped");
}

/// Crossed transfers (seed 002): half 1→2, half 2→1, all at once.
const TRANSFERS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_crossed_transfers_all_succeed_and_keep_the_total() {
    let app = spawn_app_with(None, 32).await;
    let live = Live::start(app.state.clone()).await;
    let admin = client();
    for id in [1, 2] {
        let a = http(
            &admin,
            live.addr,
            Method::POST,
            "/v1/accounts",
            Some(ADMIN),
            Some(json!({"id": id, "opening_balance": 100_000})),
        )
        .await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    }
    let transfers = (0..TRANSFERS).map(|i| {
        let addr = live.addr;
        let (from, to) = if i % 2 == 0 { (1, 2) } else { (2, 1) };
        async move {
            let c = client();
            let body = json!({"id": format!("x-{i}"), "from": from, "to": to, "amount": 10});
            tokio::spawn(async move {
                http(&c, addr, Method::POST, "/v1/transfers", None, Some(body)).await
            })
            .await
            .expect("transfer task")
        }
    });
    let answers = join_all(transfers).await;
    let failures: Vec<String> = answers
        .iter()
        .filter(|a| a.status != StatusCode::CREATED)
        .map(|a| format!("{} {}", a.status, a.text))
        .collect();
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        failures.first()
    );
    let mut total = 0;
    for id in [1, 2] {
        let a = http(
            &admin,
            live.addr,
            Method::GET,
            &format!("/v1/accounts/{id}"),
            None,
            None,
        )
        .await;
        assert_eq!(a.body["balance"], 100_000, "as many went each way");
        total += a.body["balance"].as_i64().unwrap_or(0);
    }
    assert_eq!(total, 200_000, "no money created or lost");
    let audit = http(
        &admin,
        live.addr,
        Method::GET,
        "/v1/admin/audit",
        Some(ADMIN),
        None,
    )
    .await;
    assert_eq!(audit.body["ok"], true, "{}", audit.text);
    live.stop().await;
}
