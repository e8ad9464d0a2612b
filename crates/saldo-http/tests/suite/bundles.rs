//! Bundles over HTTP (issue 27 item 3): `PUT /v1/products/{id}/bundle` declares a bundle, `GET`
//! reads it with its derived availability (and `GET …/stock` shows it), `DELETE` makes it a
//! plain product again; a reservation, a partial confirm, a return and a sale that name the
//! bundle take, settle and bring back its components; what a bundle may not do is a 409
//! problem naming it, a bad recipe a 422 or 404; the audit stays clean. A bundle line with a
//! location takes its components there. The races are in the library's suite.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::locations::count_at;
use crate::support::{spawn_app, Answer, TestApp};

/// Declares product 10 a bundle of one of product 1 and two of product 2.
async fn declare_gift_box(app: &TestApp) -> Answer {
    let declared = app
        .admin(
            Method::PUT,
            "/v1/products/10/bundle",
            Some(json!({"components": [{"product_id": 1, "quantity": 1},
                                       {"product_id": 2, "quantity": 2}]})),
        )
        .await;
    assert_eq!(declared.status, StatusCode::OK, "{}", declared.text);
    declared
}

#[tokio::test]
async fn a_bundle_is_declared_sold_returned_and_refused_as_problems() {
    let app = spawn_app().await;
    app.stock(1, 5).await;
    app.stock(2, 6).await;
    let declared = declare_gift_box(&app).await;
    assert_eq!(declared.body["available"], 3, "{}", declared.text);
    assert_eq!(declared.body["components"][1]["quantity"], 2);
    let stock = app.get("/v1/products/10/stock").await;
    assert_eq!(stock.body["available"], 3, "{}", stock.text);
    assert_eq!(stock.body["bundle"]["components"][0]["product_id"], 1);
    let plain = app.get("/v1/products/1/stock").await;
    assert!(plain.body.get("bundle").is_none(), "{}", plain.text);

    // Two bundles and one more unit of product 1, in one order: three of 1, four of 2.
    let r = app.reserve("gift-1", &[(10, 2), (1, 1)]).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let items: Vec<(i64, i64)> = r.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            (
                i["product_id"].as_i64().expect("id"),
                i["quantity"].as_i64().expect("q"),
            )
        })
        .collect();
    assert_eq!(items, vec![(1, 3), (2, 4)], "{}", r.text);
    let replay = app.reserve("gift-1", &[(10, 2), (1, 1)]).await;
    assert_eq!(replay.status, StatusCode::OK, "{}", replay.text);
    app.reserve("gift-2", &[(10, 2)])
        .await
        .assert_problem(409, "insufficient-stock");
    assert_eq!(app.get("/v1/products/10/bundle").await.body["available"], 1);

    let confirmed = app
        .post("/v1/orders/gift-1/confirm", json!({"product_ids": [10]}))
        .await;
    assert_eq!(confirmed.status, StatusCode::OK, "{}", confirmed.text);
    assert_eq!(
        confirmed.body["confirmed"].as_array().map(Vec::len),
        Some(2),
        "{}",
        confirmed.text
    );
    let back = app
        .post(
            "/v1/orders/gift-1/returns",
            json!({"return_id": "ret-1", "reason": "declined",
                   "items": [{"product_id": 10, "quantity": 1, "state": "damaged"}]}),
        )
        .await;
    assert_eq!(back.status, StatusCode::CREATED, "{}", back.text);
    let damaged = app.get("/v1/products/2/stock").await;
    assert_eq!(damaged.body["states"]["damaged"], 2, "{}", damaged.text);
    let sale = app
        .post(
            "/v1/sales",
            json!({"sale_id": "s-1", "items": [{"product_id": 10, "quantity": 1}]}),
        )
        .await;
    assert_eq!(sale.status, StatusCode::CREATED, "{}", sale.text);

    // What a bundle may not do.
    app.admin(
        Method::PUT,
        "/v1/products/10/stock",
        Some(json!({"count": 3})),
    )
    .await
    .assert_problem(409, "product-is-bundle");
    app.admin(
        Method::PUT,
        "/v1/products/1/bundle",
        Some(json!({"components": [{"product_id": 2, "quantity": 1}]})),
    )
    .await
    .assert_problem(409, "component-of-bundle");
    app.admin(
        Method::PUT,
        "/v1/products/11/bundle",
        Some(json!({"components": [{"product_id": 10, "quantity": 1}]})),
    )
    .await
    .assert_problem(409, "product-is-bundle");
    app.admin(
        Method::PUT,
        "/v1/products/12/bundle",
        Some(json!({"components": [{"product_id": 3, "quantity": 1}]})),
    )
    .await
    .assert_problem(404, "unknown-product");
    for (body, kind) in [
        (json!({"components": []}), "invalid-input"),
        (
            json!({"components": [{"product_id": 11, "quantity": 1}]}),
            "invalid-input",
        ),
        (
            json!({"components": [{"product_id": 1, "quantity": 0}]}),
            "invalid-input",
        ),
        (
            json!({"components": [{"product_id": 1, "quantity": 1}], "extra": true}),
            "invalid-body",
        ),
    ] {
        app.admin(Method::PUT, "/v1/products/11/bundle", Some(body))
            .await
            .assert_problem(422, kind);
    }
    app.get("/v1/products/1/bundle")
        .await
        .assert_problem(404, "not-a-bundle");
    app.get("/v1/products/99/bundle")
        .await
        .assert_problem(404, "unknown-product");

    let removed = app
        .admin(Method::DELETE, "/v1/products/10/bundle", None)
        .await;
    assert_eq!(removed.status, StatusCode::NO_CONTENT, "{}", removed.text);
    app.admin(Method::DELETE, "/v1/products/10/bundle", None)
        .await
        .assert_problem(404, "not-a-bundle");

    let audit = app.admin(Method::GET, "/v1/admin/audit", None).await;
    assert_eq!(audit.status, StatusCode::OK, "{}", audit.text);
    assert_eq!(audit.body["ok"], true, "{}", audit.text);
}

/// A bundle line that names a location reserves and sells its components there (it was a 404
/// `unknown-location`, as if the bundle's own row had to be stocked there).
#[tokio::test]
async fn a_bundle_line_with_a_location_takes_its_components_there() {
    let app = spawn_app().await;
    for (product, location) in [(1, "north"), (1, "south"), (2, "north"), (2, "south")] {
        count_at(&app, product, location, 4).await;
    }
    declare_gift_box(&app).await;
    let r = app
        .post(
            "/v1/reservations",
            json!({"order_id": "gift-s", "items": [
                {"product_id": 10, "quantity": 1, "location_id": "south"}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let from: Vec<(i64, serde_json::Value)> = r.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            (
                i["product_id"].as_i64().expect("id"),
                i["allocations"].clone(),
            )
        })
        .collect();
    assert_eq!(
        from,
        [
            (1, json!([{"location_id": "south", "quantity": 1}])),
            (2, json!([{"location_id": "south", "quantity": 2}])),
        ],
        "{}",
        r.text
    );
    let sale = app
        .post(
            "/v1/sales",
            json!({"sale_id": "s-n", "items": [
                {"product_id": 10, "quantity": 1, "location_id": "north"}]}),
        )
        .await;
    assert_eq!(sale.status, StatusCode::CREATED, "{}", sale.text);
    assert_eq!(
        sale.body["items"][1]["allocations"],
        json!([{"location_id": "north", "quantity": 2}]),
        "{}",
        sale.text
    );
    // A component pinned by the bundle's line and not by its own is refused, nothing taken.
    app.post(
        "/v1/reservations",
        json!({"order_id": "gift-x", "items": [
            {"product_id": 10, "quantity": 1, "location_id": "north"},
            {"product_id": 1, "quantity": 1}]}),
    )
    .await
    .assert_problem(422, "invalid-input");
    let audit = app.admin(Method::GET, "/v1/admin/audit", None).await;
    assert_eq!(audit.body["ok"], true, "{}", audit.text);
}
