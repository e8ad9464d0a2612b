//! Returns over HTTP (issue 27): `POST /v1/orders/{id}/returns` brings confirmed units back
//! (201, replayed 200, another payload 409 `idempotency-conflict`), never more than was
//! confirmed (409 `return-exceeds-confirmed`, nothing written, all items or none), refuses
//! what it does not know as 404/422, and the audit accounts for it (clean after returns, a
//! tampered return shows). The race that proves the bound is in the library's suite.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::spawn_app;

#[tokio::test]
async fn a_return_brings_confirmed_units_back_once_and_never_more() {
    let app = spawn_app().await;
    app.stock(1, 5).await;
    app.stock(2, 5).await;
    // Product 3 is stocked per location: 2 at `a`, 4 at `b`; the order takes its 2 at `a`.
    for (location, count) in [("a", 2), ("b", 4)] {
        let path = format!("/v1/products/3/locations/{location}/stock");
        let a = app
            .admin(Method::PUT, &path, Some(json!({ "count": count })))
            .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    }
    let r = app
        .post(
            "/v1/reservations",
            json!({"order_id": "ret-o", "items": [{"product_id": 1, "quantity": 3},
                   {"product_id": 2, "quantity": 1},
                   {"product_id": 3, "quantity": 2, "location_id": "a"}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let c = app.post("/v1/orders/ret-o/confirm", json!({})).await;
    assert_eq!(c.status, StatusCode::OK, "{}", c.text);
    let available = |p: i64| {
        let app = &app;
        async move { app.get(&format!("/v1/products/{p}/stock")).await.body["available"].clone() }
    };
    assert_eq!(available(1).await, 2);

    let body = json!({"return_id": "ret-1", "items": [{"product_id": 1, "quantity": 2}],
                      "reason": "wrong size"});
    let a = app.post("/v1/orders/ret-o/returns", body.clone()).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    assert_eq!(a.body["items"][0]["quantity"], 2);
    assert_eq!(a.body["items"][0]["state"], "available");
    assert_eq!(a.body["replayed"], false);
    assert_eq!(available(1).await, 4);
    // The same return again: the same answer, nothing more back.
    let again = app.post("/v1/orders/ret-o/returns", body).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    assert_eq!(again.body["replayed"], true);
    assert_eq!(again.body["returned_at"], a.body["returned_at"]);
    assert_eq!(available(1).await, 4);
    app.post(
        "/v1/orders/ret-o/returns",
        json!({"return_id": "ret-1", "items": [{"product_id": 1, "quantity": 1}], "reason": "wrong size"}),
    )
    .await
    .assert_problem(409, "idempotency-conflict");

    // 3 confirmed, 2 back: 2 more is refused, naming both.
    let over = app
        .post(
            "/v1/orders/ret-o/returns",
            json!({"return_id": "ret-2", "items": [{"product_id": 1, "quantity": 2}], "reason": "x"}),
        )
        .await;
    over.assert_problem(409, "return-exceeds-confirmed");
    assert_eq!(
        (
            &over.body["confirmed"],
            &over.body["returned"],
            &over.body["requested"]
        ),
        (&json!(3), &json!(2), &json!(2)),
        "{}",
        over.text
    );
    // All or nothing: product 1's unit stays out when product 2 asks too much.
    app.post(
        "/v1/orders/ret-o/returns",
        json!({"return_id": "ret-3", "items": [{"product_id": 1, "quantity": 1},
               {"product_id": 2, "quantity": 2}], "reason": "x"}),
    )
    .await
    .assert_problem(409, "return-exceeds-confirmed");
    assert_eq!(available(1).await, 4);
    assert_eq!(available(2).await, 4);
    for (body, status, kind) in [
        (
            json!({"return_id": "ret-4", "items": [{"product_id": 1, "quantity": 1, "state": "lost"}], "reason": "x"}),
            422,
            "invalid-input",
        ),
        (
            json!({"return_id": "ret-4", "items": [{"product_id": 1, "quantity": 1}, {"product_id": 1, "quantity": 1}], "reason": "x"}),
            422,
            "invalid-input",
        ),
        (
            json!({"return_id": "ret-4", "items": [{"product_id": 1, "quantity": 1}], "reason": "x".repeat(201)}),
            422,
            "invalid-input",
        ),
        (
            json!({"return_id": "ret-4", "items": [], "reason": "x"}),
            422,
            "invalid-input",
        ),
        (
            json!({"return_id": "ret-4", "items": [{"product_id": 9, "quantity": 1}], "reason": "x"}),
            404,
            "not-in-order",
        ),
        (
            json!({"return_id": "ret-4", "items": [{"product_id": 2, "quantity": 1, "location_id": "north"}], "reason": "x"}),
            404,
            "unknown-location",
        ),
    ] {
        app.post("/v1/orders/ret-o/returns", body)
            .await
            .assert_problem(status, kind);
    }
    app.post(
        "/v1/orders/nope/returns",
        json!({"return_id": "ret-5", "items": [{"product_id": 1, "quantity": 1}], "reason": "x"}),
    )
    .await
    .assert_problem(404, "unknown-order");
    // The last unit comes back; the line is then fully returned.
    let last = app
        .post(
            "/v1/orders/ret-o/returns",
            json!({"return_id": "ret-6", "items": [{"product_id": 1, "quantity": 1}], "reason": "x"}),
        )
        .await;
    assert_eq!(last.status, StatusCode::CREATED, "{}", last.text);
    assert_eq!(available(1).await, 5);
    let o = app.get("/v1/orders/ret-o").await;
    assert_eq!(o.body["items"][0]["returned"], 3, "{}", o.text);
    assert!(o.body["items"][1].get("returned").is_none(), "{}", o.text);

    // A located product's units go back where its line was allocated, or where the return says.
    let at = |location: &'static str| {
        let app = &app;
        async move {
            let s = app.get("/v1/products/3/stock").await;
            s.body["locations"]
                .as_array()
                .and_then(|ls| ls.iter().find(|l| l["location_id"] == location))
                .map(|l| l["available"].clone())
        }
    };
    assert_eq!(
        (at("a").await, at("b").await),
        (Some(json!(0)), Some(json!(4)))
    );
    let home = app
        .post(
            "/v1/orders/ret-o/returns",
            json!({"return_id": "ret-7", "items": [{"product_id": 3, "quantity": 1}], "reason": "x"}),
        )
        .await;
    assert_eq!(home.status, StatusCode::CREATED, "{}", home.text);
    assert_eq!(home.body["items"][0]["location_id"], "a");
    let named = app
        .post(
            "/v1/orders/ret-o/returns",
            json!({"return_id": "ret-8", "items": [{"product_id": 3, "quantity": 1, "location_id": "b"}], "reason": "x"}),
        )
        .await;
    assert_eq!(named.status, StatusCode::CREATED, "{}", named.text);
    assert_eq!(
        (at("a").await, at("b").await),
        (Some(json!(1)), Some(json!(5)))
    );
    app.post(
        "/v1/orders/ret-o/returns",
        json!({"return_id": "ret-9", "items": [{"product_id": 3, "quantity": 1, "location_id": "nowhere"}], "reason": "x"}),
    )
    .await
    .assert_problem(404, "unknown-location");

    let audit = app.admin(Method::GET, "/v1/admin/audit", None).await;
    assert_eq!(audit.body["ok"], true, "{}", audit.text);
    // The feed takes events in once nothing can commit below them: wait for it, bounded.
    let until = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let feed = app.get("/v1/events?after=start&limit=1000").await;
        let returned = feed.body["events"]
            .as_array()
            .map(|e| e.iter().filter(|e| e["type"] == "order.returned").count());
        if returned == Some(4) || tokio::time::Instant::now() > until {
            assert_eq!(returned, Some(4), "{}", feed.text);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // A return written behind the engine's back is what the audit finds.
    let client = app.db.pool.get().await.expect("connection");
    client
        .execute(
            "UPDATE return_items SET quantity = quantity + 1 WHERE return_id = 'ret-6'",
            &[],
        )
        .await
        .expect("tamper");
    let audit = app.admin(Method::GET, "/v1/admin/audit", None).await;
    assert_eq!(audit.body["ok"], false, "{}", audit.text);
    assert_eq!(audit.body["divergences"][0]["product_id"], 1);
}
