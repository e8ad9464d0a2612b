//! Admin rows of the API table: sweep, audit, locks (a session blocked on a row
//! lock shows up with the pid that blocks it), refusals (top N, bounded).

use std::time::Duration;

use axum::http::{Method, StatusCode};

use crate::support::spawn_app;

/// Bounded poll for a blocked session to appear.
const LOCK_POLLS: usize = 200;

#[tokio::test]
async fn sweep_and_audit_answer() {
    let app = spawn_app().await;
    app.stock(1, 5).await;
    let a = app.admin(Method::POST, "/v1/admin/sweep", None).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.body["expired"], 0);
    assert_eq!(
        app.reserve("o-1", &[(1, 2)]).await.status,
        StatusCode::CREATED
    );
    let a = app.admin(Method::GET, "/v1/admin/audit", None).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(a.body["ok"], true);
    assert_eq!(a.body["divergences"], serde_json::json!([]));

    // A write behind the engine's back is what the audit exists to find.
    let client = app.db.pool.get().await.expect("connection");
    client
        .execute(
            "UPDATE stock SET reserved = reserved + 1 WHERE product_id = 1",
            &[],
        )
        .await
        .expect("tamper");
    let a = app.admin(Method::GET, "/v1/admin/audit", None).await;
    assert_eq!(a.body["ok"], false, "{}", a.text);
    assert_eq!(a.body["divergences"][0]["product_id"], 1);
}

#[tokio::test]
async fn locks_show_who_blocks_whom() {
    let app = spawn_app().await;
    app.stock(1, 5).await;
    let a = app.admin(Method::GET, "/v1/admin/locks", None).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.body["sessions"], serde_json::json!([]));

    let mut holder = app.db.pool.get().await.expect("connection");
    let holder_pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    let tx = holder.transaction().await.expect("begin");
    tx.execute("SELECT 1 FROM stock WHERE product_id = 1 FOR UPDATE", &[])
        .await
        .expect("lock");
    let reserve = {
        let app_router = app.router.clone();
        tokio::spawn(async move {
            use tower::ServiceExt;
            let body = serde_json::json!({"order_id": "o-wait", "items": [{"product_id": 1, "quantity": 1}]});
            let req = axum::http::Request::post("/v1/reservations")
                .header("content-type", "application/json")
                .body(axum::body::Body::from(body.to_string()))
                .expect("request");
            app_router.oneshot(req).await.expect("infallible").status()
        })
    };
    let mut seen = None;
    for _ in 0..LOCK_POLLS {
        let a = app.admin(Method::GET, "/v1/admin/locks", None).await;
        if let Some(s) = a.body["sessions"].as_array().and_then(|s| s.first()) {
            seen = Some(s.clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    tx.rollback().await.expect("rollback");
    let session = seen.expect("the blocked reservation shows up");
    assert_eq!(session["blocked_by"], serde_json::json!([holder_pid]));
    assert_eq!(session["wait_event_type"], "Lock");
    assert!(session["transaction_age_ms"].is_i64());
    assert!(session["query"].is_string());
    assert_eq!(
        reserve.await.expect("task"),
        StatusCode::CREATED,
        "it goes on once released"
    );
}

/// Two databases on one server (every test here has its own on a shared cluster): a session
/// blocked in one never shows in the other's locks.
#[tokio::test]
async fn locks_show_only_this_databases_sessions() {
    let busy = spawn_app().await;
    let quiet = spawn_app().await;
    busy.stock(1, 5).await;
    let mut holder = busy.db.pool.get().await.expect("connection");
    let tx = holder.transaction().await.expect("begin");
    tx.execute("SELECT 1 FROM stock WHERE product_id = 1 FOR UPDATE", &[])
        .await
        .expect("lock");
    let waiter = {
        let pool = busy.db.pool.clone();
        tokio::spawn(async move {
            let c = pool.get().await.expect("connection");
            c.execute(
                "UPDATE stock SET available = available WHERE product_id = 1",
                &[],
            )
            .await
            .map(|_| ())
        })
    };
    let mut blocked = false;
    for _ in 0..LOCK_POLLS {
        let a = busy.admin(Method::GET, "/v1/admin/locks", None).await;
        if a.body["sessions"].as_array().is_some_and(|s| !s.is_empty()) {
            blocked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let other = quiet.admin(Method::GET, "/v1/admin/locks", None).await;
    tx.rollback().await.expect("rollback");
    waiter.await.expect("task").expect("the waiter goes on");
    assert!(blocked, "the waiter shows in its own database");
    assert_eq!(other.status, StatusCode::OK);
    assert_eq!(
        other.body["sessions"],
        serde_json::json!([]),
        "another database's waiter is not shown"
    );
}

#[tokio::test]
async fn refusals_rank_products_and_bound_top() {
    let app = spawn_app().await;
    app.stock(1, 0).await;
    app.stock(2, 0).await;
    for i in 0..3 {
        assert_eq!(
            app.reserve(&format!("a{i}"), &[(2, 1)]).await.status,
            StatusCode::CONFLICT
        );
    }
    assert_eq!(
        app.reserve("b", &[(1, 1)]).await.status,
        StatusCode::CONFLICT
    );
    let a = app
        .admin(Method::GET, "/v1/admin/refusals?top=1", None)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(
        a.body["products"],
        serde_json::json!([{"product_id": 2, "refusals": 3}])
    );
    assert_eq!(a.body["tracked_products"], 2);
    let a = app.admin(Method::GET, "/v1/admin/refusals", None).await;
    assert_eq!(a.body["products"].as_array().map(Vec::len), Some(2));
    for q in ["top=0", "top=1001", "top=abc", "top=-1", "other=1"] {
        app.admin(Method::GET, &format!("/v1/admin/refusals?{q}"), None)
            .await
            .assert_problem(422, "invalid-input");
    }
}
