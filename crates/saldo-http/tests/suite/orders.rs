//! Reservation and order rows of the API table: reserve (201, replay 200, 409 stock, 409
//! idempotency, 404, 422), confirm, release and read, each with its errors.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::spawn_app;

#[tokio::test]
async fn reserve_answers_201_then_replays_with_200() {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    app.stock(2, 10).await;
    let first = app.reserve("order-1", &[(2, 1), (1, 2), (2, 1)]).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text);
    assert_eq!(first.body["order_id"], "order-1");
    assert_eq!(first.body["status"], "active");
    assert_eq!(first.body["replayed"], false);
    let items = first.body["items"].as_array().expect("items");
    // Summed per product and sorted by product id.
    assert_eq!(items.len(), 2);
    assert_eq!(
        (
            items[0]["product_id"].as_i64(),
            items[0]["quantity"].as_i64()
        ),
        (Some(1), Some(2))
    );
    assert_eq!(
        (
            items[1]["product_id"].as_i64(),
            items[1]["quantity"].as_i64()
        ),
        (Some(2), Some(2))
    );
    assert!(first.body["expires_at"].is_string());

    let replay = app.reserve("order-1", &[(1, 2), (2, 2)]).await;
    assert_eq!(replay.status, StatusCode::OK, "{}", replay.text);
    assert_eq!(replay.body["replayed"], true);
    let mut same = replay.body.clone();
    same["replayed"] = json!(false);
    assert_eq!(same, first.body, "a replay answers the original body");
    // The replay changed nothing.
    let s = app.get("/v1/products/1/stock").await;
    assert_eq!(
        (s.body["available"].as_i64(), s.body["reserved"].as_i64()),
        (Some(8), Some(2))
    );
}

#[tokio::test]
async fn reserve_refusals_name_their_subject() {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    app.stock(2, 1).await;
    let a = app.reserve("o-short", &[(1, 1), (2, 2)]).await;
    a.assert_problem(409, "insufficient-stock");
    assert_eq!(a.body["product_id"], 2);
    assert_eq!(a.body["requested"], 2);
    assert_eq!(a.body["available"], 1);
    // All or nothing: product 1 was not taken either.
    assert_eq!(app.get("/v1/products/1/stock").await.body["available"], 10);

    assert_eq!(
        app.reserve("o-1", &[(1, 1)]).await.status,
        StatusCode::CREATED
    );
    let a = app.reserve("o-1", &[(1, 2)]).await;
    a.assert_problem(409, "idempotency-conflict");
    assert_eq!(a.body["order_id"], "o-1");

    let a = app.reserve("o-unknown", &[(1, 1), (77, 1)]).await;
    a.assert_problem(404, "unknown-product");
    assert_eq!(a.body["product_id"], 77);
}

#[tokio::test]
async fn reserve_refuses_invalid_input_with_422() {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    let too_many: Vec<_> = (1..=101)
        .map(|p| json!({"product_id": p, "quantity": 1}))
        .collect();
    let cases = [
        json!({"order_id": "o", "items": [{"product_id": 1, "quantity": 0}]}),
        json!({"order_id": "o", "items": [{"product_id": 1, "quantity": -1}]}),
        json!({"order_id": "o", "items": [{"product_id": 1, "quantity": 10_001}]}),
        json!({"order_id": "o", "items": [{"product_id": 0, "quantity": 1}]}),
        json!({"order_id": "o", "items": []}),
        json!({"order_id": "o", "items": too_many}),
        json!({"order_id": "has space", "items": [{"product_id": 1, "quantity": 1}]}),
        json!({"order_id": "", "items": [{"product_id": 1, "quantity": 1}]}),
        json!({"order_id": "o", "items": [{"product_id": 1, "quantity": 1}], "ttl_s": 0}),
        json!({"order_id": "o", "items": [{"product_id": 1, "quantity": 1}], "ttl_s": 86_401}),
    ];
    for body in cases {
        app.post("/v1/reservations", body)
            .await
            .assert_problem(422, "invalid-input");
    }
    let shape = [
        json!({"items": [{"product_id": 1, "quantity": 1}]}),
        json!({"order_id": "o", "items": [{"product_id": "one", "quantity": 1}]}),
        json!({"order_id": "o", "items": [{"product_id": 1, "quantity": 1, "color": "red"}]}),
        json!({"order_id": "o", "items": [{"product_id": 1, "quantity": 1}], "coupon": "x"}),
        json!({"order_id": "o", "items": [{"product_id": 1, "quantity": 1.5}]}),
    ];
    for body in shape {
        app.post("/v1/reservations", body)
            .await
            .assert_problem(422, "invalid-body");
    }
    // Nothing was reserved by any of them.
    assert_eq!(app.get("/v1/products/1/stock").await.body["available"], 10);
}

#[tokio::test]
async fn confirm_release_and_read_an_order() {
    let app = spawn_app().await;
    app.stock(1, 5).await;
    assert_eq!(
        app.reserve("o-pay", &[(1, 2)]).await.status,
        StatusCode::CREATED
    );
    let a = app
        .call(Method::POST, "/v1/orders/o-pay/confirm", None, None)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(a.body["order_id"], "o-pay");
    assert_eq!(a.body["confirmed"][0]["product_id"], 1);
    assert_eq!(a.body["confirmed"][0]["status"], "confirmed");
    assert_eq!(a.body["missing"], json!([]));
    // Idempotent.
    let again = app
        .call(Method::POST, "/v1/orders/o-pay/confirm", None, None)
        .await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.body["confirmed"], a.body["confirmed"]);

    assert_eq!(
        app.reserve("o-cancel", &[(1, 1)]).await.status,
        StatusCode::CREATED
    );
    let a = app
        .call(Method::POST, "/v1/orders/o-cancel/release", None, None)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(a.body["released"][0]["status"], "released");
    assert_eq!(app.get("/v1/products/1/stock").await.body["available"], 3);

    let a = app.get("/v1/orders/o-pay").await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.body["order_id"], "o-pay");
    assert_eq!(a.body["items"][0]["status"], "confirmed");
    assert!(a.body["items"][0]["expires_at"].is_string());

    for (method, path) in [
        (Method::POST, "/v1/orders/nope/confirm"),
        (Method::POST, "/v1/orders/nope/release"),
        (Method::GET, "/v1/orders/nope"),
    ] {
        let a = app.call(method, path, None, None).await;
        a.assert_problem(404, "unknown-order");
        assert_eq!(a.body["order_id"], "nope");
    }
    app.call(Method::POST, "/v1/orders/bad%20id/confirm", None, None)
        .await
        .assert_problem(422, "invalid-input");
    app.get(&format!("/v1/orders/{}", "x".repeat(65)))
        .await
        .assert_problem(422, "invalid-input");
}

/// Partial confirm and release (issue 27): the named lines only, each refusal with nothing
/// written, and a release of a sold line a 409 naming its state.
#[tokio::test]
async fn partial_confirm_and_release_act_on_the_named_lines() {
    let app = spawn_app().await;
    for p in 1..=3 {
        app.stock(p, 5).await;
    }
    let r = app.reserve("o-part", &[(1, 1), (2, 1), (3, 1)]).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let available = |p: i64| {
        let app = &app;
        async move { app.get(&format!("/v1/products/{p}/stock")).await.body["available"].clone() }
    };
    let a = app
        .post("/v1/orders/o-part/confirm", json!({"product_ids": [1]}))
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(
        a.body["confirmed"].as_array().map(Vec::len),
        Some(1),
        "{}",
        a.text
    );
    assert_eq!(a.body["confirmed"][0]["product_id"], 1);
    assert_eq!(a.body["missing"], json!([]));
    // A sold line cannot be released: 409 naming its state, and the other named line stays held.
    let a = app
        .post("/v1/orders/o-part/release", json!({"product_ids": [2, 1]}))
        .await;
    a.assert_problem(409, "order-not-releasable");
    assert_eq!(a.body["product_id"], 1);
    assert_eq!(a.body["reservation_status"], "confirmed");
    assert_eq!(available(2).await, 4);
    // A product the order has no line of: 404, nothing released.
    let a = app
        .post("/v1/orders/o-part/release", json!({"product_ids": [2, 9]}))
        .await;
    a.assert_problem(404, "not-in-order");
    assert_eq!(a.body["product_id"], 9);
    assert_eq!(available(2).await, 4);
    for bad in [
        json!({"product_ids": [2, 2]}),
        json!({"product_ids": []}),
        json!({"product_ids": [0]}),
    ] {
        app.post("/v1/orders/o-part/release", bad)
            .await
            .assert_problem(422, "invalid-input");
    }
    let a = app
        .post("/v1/orders/o-part/release", json!({"product_ids": [2]}))
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(a.body["released"][0]["product_id"], 2);
    assert_eq!(a.body["released"].as_array().map(Vec::len), Some(1));
    assert_eq!(available(2).await, 5);
    assert_eq!(available(3).await, 4, "line 3 still held");
    // A confirm naming a released line says its state; the whole order's confirm takes the rest.
    let a = app
        .post("/v1/orders/o-part/confirm", json!({"product_ids": [2]}))
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(a.body["confirmed"], json!([]));
    assert_eq!(a.body["missing"][0]["status"], "released");
    let a = app.post("/v1/orders/o-part/confirm", json!({})).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let confirmed: Vec<i64> = a.body["confirmed"]
        .as_array()
        .map(|v| v.iter().filter_map(|i| i["product_id"].as_i64()).collect())
        .unwrap_or_default();
    assert_eq!(confirmed, vec![1, 3]);
    assert_eq!(available(3).await, 4);
    assert_eq!(available(1).await, 4);
}

#[tokio::test]
async fn confirm_after_expiry_reports_missing_items() {
    let app = spawn_app().await;
    app.stock(1, 5).await;
    let a = app
        .post(
            "/v1/reservations",
            json!({"order_id": "o-late", "items": [{"product_id": 1, "quantity": 2}], "ttl_s": 1}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    // The shortest TTL is one second: wait it out, then expire it through the admin route.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let swept = app.admin(Method::POST, "/v1/admin/sweep", None).await;
    assert_eq!(swept.status, StatusCode::OK, "{}", swept.text);
    assert_eq!(swept.body["expired"], 1);
    let a = app
        .call(Method::POST, "/v1/orders/o-late/confirm", None, None)
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(a.body["confirmed"], json!([]));
    assert_eq!(a.body["missing"][0]["product_id"], 1);
    assert_eq!(a.body["missing"][0]["status"], "expired");
    assert_eq!(app.get("/v1/products/1/stock").await.body["available"], 5);
}

#[tokio::test]
async fn ttl_s_sets_the_expiry_and_defaults_to_the_server_setting() {
    let app = spawn_app().await;
    app.stock(1, 5).await;
    let expiry = |a: &crate::support::Answer| {
        a.body["expires_at"]
            .as_str()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
            .expect("expires_at")
    };
    let short = app
        .post(
            "/v1/reservations",
            json!({"order_id": "o-short", "items": [{"product_id": 1, "quantity": 1}], "ttl_s": 60}),
        )
        .await;
    let default = app.reserve("o-default", &[(1, 1)]).await;
    // Both were created within the same few seconds: the default (900 s) ends ~840 s later.
    let gap = (expiry(&default) - expiry(&short)).num_seconds();
    assert!((800..=900).contains(&gap), "gap {gap}s");
}

/// Idempotency per request, for good: before it, reserve `rr-1` → 201, release, the same POST again →
/// 201 with a brand-new active reservation (the cancelled units sold again). Now: 200, replayed,
/// the real status, nothing taken; re-reserving is `POST /v1/orders/{id}/rereserve`.
#[tokio::test]
async fn a_late_retry_after_release_takes_nothing_and_rereserve_is_explicit() {
    let app = spawn_app().await;
    app.stock(7, 3).await;
    let first = app.reserve("rr-1", &[(7, 2)]).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text);
    let released = app.post("/v1/orders/rr-1/release", json!({})).await;
    assert_eq!(released.status, StatusCode::OK, "{}", released.text);
    let late = app.reserve("rr-1", &[(7, 2)]).await;
    assert_eq!(late.status, StatusCode::OK, "{}", late.text);
    assert_eq!(late.body["replayed"], true, "{}", late.text);
    assert_eq!(late.body["status"], "released", "{}", late.text);
    assert_eq!(late.body["items"][0]["status"], "released", "{}", late.text);
    let stock = app.get("/v1/products/7/stock").await;
    assert_eq!(
        (
            stock.body["available"].as_i64(),
            stock.body["reserved"].as_i64()
        ),
        (Some(3), Some(0)),
        "a late retry took stock: {}",
        stock.text
    );
    // Other items under the same order id: still a conflict.
    app.reserve("rr-1", &[(7, 1)])
        .await
        .assert_problem(409, "idempotency-conflict");

    // The explicit re-reserve: 201, then its own replay 200, then a conflict for other items.
    let body = json!({ "rereserve_id": "rr-1-again" });
    let again = app.post("/v1/orders/rr-1/rereserve", body.clone()).await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.text);
    assert_eq!(again.body["status"], "active", "{}", again.text);
    assert_eq!(again.body["replayed"], false);
    let replay = app.post("/v1/orders/rr-1/rereserve", body).await;
    assert_eq!(replay.status, StatusCode::OK, "{}", replay.text);
    assert_eq!(replay.body["replayed"], true);
    app.post(
        "/v1/orders/rr-1/rereserve",
        json!({ "rereserve_id": "rr-1-again", "items": [{ "product_id": 7, "quantity": 1 }] }),
    )
    .await
    .assert_problem(409, "idempotency-conflict");
    // Nothing lost any more: nothing to re-reserve under a new key.
    app.post(
        "/v1/orders/rr-1/rereserve",
        json!({ "rereserve_id": "third" }),
    )
    .await
    .assert_problem(409, "nothing-to-rereserve");
    app.post("/v1/orders/nope/rereserve", json!({ "rereserve_id": "x" }))
        .await
        .assert_problem(404, "unknown-order");
    app.post(
        "/v1/orders/rr-1/rereserve",
        json!({ "rereserve_id": "bad key" }),
    )
    .await
    .assert_problem(422, "invalid-input");
    let stock = app.get("/v1/products/7/stock").await;
    assert_eq!(
        (
            stock.body["available"].as_i64(),
            stock.body["reserved"].as_i64()
        ),
        (Some(1), Some(2)),
        "{}",
        stock.text
    );
}

/// Lets an order's active reservations lapse now (their expiry moved into the past) and runs
/// one sweeper round, so the test waits for no TTL.
async fn expire_now(app: &crate::support::TestApp, order: &str) {
    let client = app.db.pool.get().await.expect("connection");
    client
        .execute(
            "UPDATE reservations SET expires_at = now() - interval '1 second' \
             WHERE order_id = $1 AND status = 'active'",
            &[&order],
        )
        .await
        .expect("expiry moved");
    let swept = app.admin(Method::POST, "/v1/admin/sweep", None).await;
    assert_eq!(swept.status, StatusCode::OK, "{}", swept.text);
}

/// `GET /v1/orders/{id}` names the order's status, the same the order list gives it, in every
/// state: active, confirmed, released, expired, and an order whose released item was
/// re-reserved and then expired (released: the rule looks at every row, as the list does).
#[tokio::test]
async fn an_order_reads_with_the_status_the_list_gives_it() {
    let app = spawn_app().await;
    app.stock(1, 50).await;
    app.stock(2, 50).await;
    for order in [
        "st-active",
        "st-confirmed",
        "st-released",
        "st-expired",
        "st-again",
    ] {
        let a = app.reserve(order, &[(1, 1), (2, 1)]).await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    }
    for path in [
        "/v1/orders/st-confirmed/confirm",
        "/v1/orders/st-released/release",
        "/v1/orders/st-again/release",
    ] {
        let a = app.call(Method::POST, path, None, None).await;
        assert_eq!(a.status, StatusCode::OK, "{path}: {}", a.text);
    }
    expire_now(&app, "st-expired").await;
    let again = app
        .post(
            "/v1/orders/st-again/rereserve",
            json!({"rereserve_id": "st-again-1"}),
        )
        .await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.text);
    expire_now(&app, "st-again").await;

    let list = app.get("/v1/orders?limit=100").await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.text);
    let listed = list.body["orders"].as_array().expect("orders").clone();
    assert_eq!(listed.len(), 5, "{}", list.text);
    for (order, expected) in [
        ("st-active", "active"),
        ("st-confirmed", "confirmed"),
        ("st-released", "released"),
        ("st-expired", "expired"),
        ("st-again", "released"),
    ] {
        let in_list = listed
            .iter()
            .find(|o| o["order_id"] == order)
            .expect("listed");
        assert_eq!(in_list["status"], expected, "{order} in the list");
        let read = app.get(&format!("/v1/orders/{order}")).await;
        assert_eq!(read.status, StatusCode::OK, "{}", read.text);
        assert_eq!(read.body["status"], expected, "{order}: {}", read.text);
    }
    // The document says so too: a required `status` of the list's type.
    let doc = saldo_http::openapi::document(true);
    let view = &doc["components"]["schemas"]["OrderView"];
    assert!(
        view["required"]
            .as_array()
            .is_some_and(|r| r.contains(&json!("status"))),
        "{view}"
    );
    assert_eq!(
        view["properties"]["status"]["$ref"],
        "#/components/schemas/ItemStatus"
    );
}
