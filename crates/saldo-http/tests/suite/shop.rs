//! The shop routes: `POST /v1/orders/{id}/extend` (200, 409 `reservation-expired` whether or
//! not the sweeper ran, 409 `nothing-to-extend`, 422 `hold-limit` and bad `ttl_s`, 404) and
//! `POST /v1/sales` (201, replay 200, 409 conflict and stock, 404, 422; the audit stays clean)
//! and `POST /v1/admin/repair` (dry run by default, `{"apply": true}` fixes, admin only); an
//! order's and a sale's `reference` and `metadata` (shown, compared on replay, searchable).
//! Run on `atomic` (tests.rs) and `batched` (batched.rs).

use std::time::Duration;

use axum::http::{Method, StatusCode};
use saldo_http::app;
use saldo_http::config::RawSettings;
use serde_json::json;

use crate::harness::test_db_with_pool;
use crate::support::{spawn_app, state_with, Answer, TestApp};

fn extend_path(order: &str) -> String {
    format!("/v1/orders/{order}/extend")
}

#[tokio::test]
async fn extend_moves_the_expiry_of_active_items() {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    app.stock(2, 10).await;
    let r = app.reserve("o-slow", &[(1, 1), (2, 2)]).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let before = r.body["expires_at"].as_str().expect("expiry").to_owned();
    let e = app
        .post(&extend_path("o-slow"), json!({"ttl_s": 3600}))
        .await;
    assert_eq!(e.status, StatusCode::OK, "{}", e.text);
    assert_eq!(e.body["order_id"], "o-slow");
    let extended = e.body["extended"].as_array().expect("items");
    assert_eq!(extended.len(), 2);
    let after = e.body["expires_at"].as_str().expect("expiry");
    // RFC 3339 in UTC from the same serializer: later strings are later instants.
    assert!(after > before.as_str(), "{after} after {before}");
    let order = app.get("/v1/orders/o-slow").await;
    for item in order.body["items"].as_array().expect("items") {
        assert_eq!(item["status"], "active");
        assert_eq!(item["expires_at"].as_str(), Some(after));
    }
    // Units stay reserved: nothing moved in stock.
    let s = app.get("/v1/products/2/stock").await;
    assert_eq!(
        (s.body["available"].as_i64(), s.body["reserved"].as_i64()),
        (Some(8), Some(2))
    );
}

#[tokio::test]
async fn extending_a_lapsed_hold_is_409_before_and_after_the_sweep() {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    let r = app
        .post(
            "/v1/reservations",
            json!({"order_id": "o-lapsed", "items": [{"product_id": 1, "quantity": 1}], "ttl_s": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // Due but not swept yet: already expired for an extension.
    let due = app
        .post(&extend_path("o-lapsed"), json!({"ttl_s": 600}))
        .await;
    due.assert_problem(409, "reservation-expired");
    assert_eq!(due.body["product_id"], 1);
    let swept = app.admin(Method::POST, "/v1/admin/sweep", None).await;
    assert_eq!(swept.status, StatusCode::OK, "{}", swept.text);
    app.post(&extend_path("o-lapsed"), json!({"ttl_s": 600}))
        .await
        .assert_problem(409, "reservation-expired");
    let order = app.get("/v1/orders/o-lapsed").await;
    assert_eq!(order.body["items"][0]["status"], "expired");
}

#[tokio::test]
async fn extend_refusals() {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    app.reserve("o-paid", &[(1, 1)]).await;
    let c = app.post("/v1/orders/o-paid/confirm", json!({})).await;
    assert_eq!(c.status, StatusCode::OK, "{}", c.text);
    app.post(&extend_path("o-paid"), json!({"ttl_s": 60}))
        .await
        .assert_problem(409, "nothing-to-extend");
    app.post(&extend_path("nobody"), json!({"ttl_s": 60}))
        .await
        .assert_problem(404, "unknown-order");
    app.reserve("o-held", &[(1, 1)]).await;
    for bad in [
        json!({"ttl_s": 0}),
        json!({"ttl_s": -5}),
        json!({"ttl_s": 86_401}),
        json!({"ttl_s": 1.5}),
        json!({"ttl_s": "60"}),
        json!({}),
        json!({"ttl_s": 60, "extra": 1}),
    ] {
        let a = app.post(&extend_path("o-held"), bad.clone()).await;
        assert_eq!(
            a.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{bad}: {}",
            a.text
        );
    }
}

#[tokio::test]
async fn extend_past_the_maximum_hold_is_422() {
    let db = test_db_with_pool(8).await;
    let state = state_with(
        db.pool.clone(),
        RawSettings {
            max_hold_s: 600,
            ..RawSettings::default()
        },
    );
    let app = TestApp {
        router: app(state.clone()),
        state,
        db,
    };
    app.stock(1, 10).await;
    app.reserve("o-long", &[(1, 1)]).await;
    let ok = app
        .post(&extend_path("o-long"), json!({"ttl_s": 590}))
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.text);
    let past = app
        .post(&extend_path("o-long"), json!({"ttl_s": 610}))
        .await;
    past.assert_problem(422, "hold-limit");
    assert_eq!(past.body["max_hold_s"], 600);
}

#[tokio::test]
async fn a_direct_sale_sells_once_and_replays() {
    let app = spawn_app().await;
    app.stock(1, 3).await;
    app.stock(2, 1).await;
    let body = json!({"sale_id": "sale-1", "items": [
        {"product_id": 2, "quantity": 1}, {"product_id": 1, "quantity": 1}, {"product_id": 1, "quantity": 1}
    ], "reference": "pay_9x2", "metadata": {"channel": "pos"}});
    let first = app.post("/v1/sales", body.clone()).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text);
    assert_eq!(first.body["sale_id"], "sale-1");
    assert_eq!(first.body["reference"], "pay_9x2");
    assert_eq!(first.body["metadata"], json!({"channel": "pos"}));
    assert_eq!(first.body["replayed"], false);
    assert_eq!(
        first.body["items"],
        json!([{"product_id": 1, "quantity": 2}, {"product_id": 2, "quantity": 1}])
    );
    let replay = app.post("/v1/sales", body).await;
    assert_eq!(replay.status, StatusCode::OK, "{}", replay.text);
    let mut same = replay.body.clone();
    same["replayed"] = json!(false);
    assert_eq!(same, first.body, "a replay answers the original result");
    app.post(
        "/v1/sales",
        json!({"sale_id": "sale-1", "items": [{"product_id": 1, "quantity": 1}]}),
    )
    .await
    .assert_problem(409, "idempotency-conflict");
    // The same items under another reference are another request.
    let mut other_reference = first.body.clone();
    other_reference["reference"] = json!("pay_other");
    for key in ["sold_at", "replayed"] {
        other_reference.as_object_mut().expect("object").remove(key);
    }
    other_reference["items"] = json!([
        {"product_id": 2, "quantity": 1}, {"product_id": 1, "quantity": 2}
    ]);
    app.post("/v1/sales", other_reference)
        .await
        .assert_problem(409, "idempotency-conflict");
    // Sold units left available, never passed through reserved.
    let s = app.get("/v1/products/1/stock").await;
    assert_eq!(
        (s.body["available"].as_i64(), s.body["reserved"].as_i64()),
        (Some(1), Some(0))
    );
    let audit = app.admin(Method::GET, "/v1/admin/audit", None).await;
    assert_eq!(audit.status, StatusCode::OK, "{}", audit.text);
    assert_eq!(audit.body["ok"], true, "{}", audit.text);
}

#[tokio::test]
async fn an_order_keeps_its_reference_and_is_found_by_it() {
    let app = spawn_app().await;
    app.stock(1, 5).await;
    let body = json!({"order_id": "o-ref-1", "items": [{"product_id": 1, "quantity": 1}],
        "reference": "cart-42", "metadata": {"channel": "web"}});
    let first = app.post("/v1/reservations", body.clone()).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text);
    assert_eq!(
        (&first.body["reference"], &first.body["metadata"]),
        (&json!("cart-42"), &json!({"channel": "web"}))
    );
    let replay = app.post("/v1/reservations", body).await;
    assert_eq!(replay.status, StatusCode::OK, "{}", replay.text);
    assert_eq!(replay.body["reference"], "cart-42");
    app.post(
        "/v1/reservations",
        json!({"order_id": "o-ref-1", "items": [{"product_id": 1, "quantity": 1}],
            "reference": "cart-43"}),
    )
    .await
    .assert_problem(409, "idempotency-conflict");
    app.post(
        "/v1/reservations",
        json!({"order_id": "o-ref-2", "items": [{"product_id": 1, "quantity": 1}]}),
    )
    .await;
    let order = app.get("/v1/orders/o-ref-1").await;
    assert_eq!(order.status, StatusCode::OK, "{}", order.text);
    assert_eq!(order.body["metadata"], json!({"channel": "web"}));
    let found = app.get("/v1/orders?reference=cart-42").await;
    assert_eq!(found.status, StatusCode::OK, "{}", found.text);
    let ids: Vec<&str> = found.body["orders"]
        .as_array()
        .expect("orders")
        .iter()
        .filter_map(|o| o["order_id"].as_str())
        .collect();
    assert_eq!(ids, ["o-ref-1"], "{}", found.text);
    assert_eq!(found.body["next_cursor"], json!(null));
    let long = "r".repeat(129);
    app.get(&format!("/v1/orders?reference={long}"))
        .await
        .assert_problem(422, "invalid-input");
    let bad = app
        .post(
            "/v1/reservations",
            json!({"order_id": "o-ref-3", "items": [{"product_id": 1, "quantity": 1}],
                "metadata": {"k": ["not a string"]}}),
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.text);
    // Two orders took a unit each; the refused requests took nothing.
    let s = app.get("/v1/products/1/stock").await;
    assert_eq!(s.body["available"].as_i64(), Some(3), "{}", s.text);
}

#[tokio::test]
async fn direct_sale_refusals_are_a_reservations() {
    let app = spawn_app().await;
    app.stock(1, 1).await;
    let short = app
        .post(
            "/v1/sales",
            json!({"sale_id": "s-short", "items": [{"product_id": 1, "quantity": 2}]}),
        )
        .await;
    short.assert_problem(409, "insufficient-stock");
    assert_eq!(short.body["product_id"], 1);
    app.post(
        "/v1/sales",
        json!({"sale_id": "s-none", "items": [{"product_id": 1, "quantity": 1}, {"product_id": 7, "quantity": 1}]}),
    )
    .await
    .assert_problem(404, "unknown-product");
    for bad in [
        json!({"sale_id": "bad id", "items": [{"product_id": 1, "quantity": 1}]}),
        json!({"sale_id": "s", "items": []}),
        json!({"sale_id": "s", "items": [{"product_id": 1, "quantity": 0}]}),
        json!({"sale_id": "s", "items": [{"product_id": 1, "quantity": 1}], "ttl_s": 5}),
        json!({"items": [{"product_id": 1, "quantity": 1}]}),
        json!({"sale_id": "s", "items": [{"product_id": 1, "quantity": 1}], "reference": ""}),
        json!({"sale_id": "s", "items": [{"product_id": 1, "quantity": 1}], "metadata": {"k": 1}}),
    ] {
        let a = app.post("/v1/sales", bad.clone()).await;
        assert_eq!(
            a.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{bad}: {}",
            a.text
        );
    }
    // Nothing was taken by the refusals.
    let s = app.get("/v1/products/1/stock").await;
    assert_eq!(s.body["available"].as_i64(), Some(1));
}

#[tokio::test]
async fn admin_repair_is_a_dry_run_unless_applied() {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    app.reserve("o-r", &[(1, 2)]).await;
    let client = app.db.pool.get().await.expect("client");
    client
        .batch_execute("UPDATE stock SET available = available - 1, reserved = reserved + 1")
        .await
        .expect("plant");
    // The API token is not enough.
    let denied = app.post("/v1/admin/repair", json!({})).await;
    assert_eq!(denied.status, StatusCode::UNAUTHORIZED, "{}", denied.text);

    let dry = repair(&app, json!({})).await;
    assert_eq!(dry.status, StatusCode::OK, "{}", dry.text);
    assert_eq!(dry.body["applied"], false);
    let product = &dry.body["products"][0];
    assert_eq!(product["action"], "planned");
    assert_eq!(product["before"], json!({"available": 7, "reserved": 3}));
    assert_eq!(product["after"], json!({"available": 8, "reserved": 2}));
    assert_eq!(dry.body["remaining"].as_array().map(Vec::len), Some(1));

    let applied = repair(&app, json!({"apply": true})).await;
    assert_eq!(applied.status, StatusCode::OK, "{}", applied.text);
    assert_eq!(applied.body["products"][0]["action"], "applied");
    assert_eq!(applied.body["remaining"], json!([]));
    let s = app.get("/v1/products/1/stock").await;
    assert_eq!(
        (s.body["available"].as_i64(), s.body["reserved"].as_i64()),
        (Some(8), Some(2))
    );
    let bad = app
        .admin(
            Method::POST,
            "/v1/admin/repair",
            Some(json!({"apply": "yes"})),
        )
        .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.text);
}

/// `POST /v1/admin/repair` with `body`, as the admin.
async fn repair(app: &TestApp, body: serde_json::Value) -> Answer {
    app.admin(Method::POST, "/v1/admin/repair", Some(body))
        .await
}

/// The repair answers for the ledger too: an account whose counters drifted from its journal
/// is planned on a dry run (and keeps `remaining` non-empty), repaired from the journal when
/// applied, and then the whole audit is clean.
#[tokio::test]
async fn admin_repair_repairs_a_drifted_account_from_its_journal() {
    let app = spawn_app().await;
    for (id, opening) in [(1, 100), (2, 0)] {
        let opened = app
            .admin(
                Method::POST,
                "/v1/accounts",
                Some(json!({"id": id, "opening_balance": opening})),
            )
            .await;
        assert_eq!(opened.status, StatusCode::CREATED, "{}", opened.text);
    }
    let moved = app
        .post(
            "/v1/transfers",
            json!({"id": "t-1", "from": 1, "to": 2, "amount": 30}),
        )
        .await;
    assert!(moved.status.is_success(), "{}", moved.text);
    let client = app.db.pool.get().await.expect("client");
    client
        .batch_execute("UPDATE accounts SET balance = balance + 7 WHERE id = 2")
        .await
        .expect("plant");

    let dry = repair(&app, json!({})).await;
    assert_eq!(dry.status, StatusCode::OK, "{}", dry.text);
    let planned = &dry.body["ledger"]["accounts"][0];
    assert_eq!(planned["account"], 2, "{}", dry.text);
    assert_eq!(planned["action"], "planned");
    assert_eq!(planned["before"]["balance"], 37);
    assert_eq!(planned["after"]["balance"], 30);
    assert_ne!(dry.body["remaining"], json!([]), "{}", dry.text);

    let applied = repair(&app, json!({"apply": true})).await;
    assert_eq!(applied.status, StatusCode::OK, "{}", applied.text);
    assert_eq!(applied.body["ledger"]["accounts"][0]["action"], "applied");
    assert_eq!(applied.body["ledger"]["unrepairable"], json!([]));
    assert_eq!(applied.body["remaining"], json!([]), "{}", applied.text);
    let account = app.get("/v1/accounts/2").await;
    assert_eq!(account.body["balance"], 30, "{}", account.text);
}
