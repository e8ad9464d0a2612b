//! Stock per location over HTTP: `PUT /v1/products/{id}/locations/{location}/stock` and
//! `PUT /v1/locations/{location}` (admin), `GET /v1/products/{id}/stock` with its locations,
//! reservations allocated split (default) or single or at a named location, with their
//! `allocations`, confirm and release per allocation, direct sales from the locations, refusals as problems (404
//! `unknown-location`, 409 `insufficient-stock` and `stocked-by-location`, 422 for bad ids,
//! priorities and a product named with two locations), the document describing all of it,
//! `GET /v1/locations` and retiring one (`DELETE /v1/locations/{location}`: 409
//! `location-not-empty` until it holds nothing, then 409 `location-retired` for a count),
//! a drifted location set back by `POST /v1/admin/repair` (its `locations` before and after),
//! and products never given a location answering exactly as before. Run on `atomic`
//! (tests.rs) and `batched` (batched.rs).

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{spawn_app, TestApp};

pub(crate) async fn count_at(app: &TestApp, product: i64, location: &str, count: i64) -> Value {
    let a = app
        .admin(
            Method::PUT,
            &format!("/v1/products/{product}/locations/{location}/stock"),
            Some(json!({ "count": count })),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    a.body
}

async fn priority(app: &TestApp, location: &str, priority: i64) {
    let a = app
        .admin(
            Method::PUT,
            &format!("/v1/locations/{location}"),
            Some(json!({ "priority": priority })),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(
        a.body,
        json!({"location_id": location, "priority": priority, "retired_at": null})
    );
}

fn allocations(item: &Value) -> Vec<(String, i64)> {
    item["allocations"]
        .as_array()
        .expect("allocations")
        .iter()
        .map(|a| {
            (
                a["location_id"].as_str().expect("id").to_owned(),
                a["quantity"].as_i64().expect("quantity"),
            )
        })
        .collect()
}

fn locations(stock: &Value) -> Vec<(String, i64, i64)> {
    stock["locations"]
        .as_array()
        .expect("locations")
        .iter()
        .map(|l| {
            (
                l["location_id"].as_str().expect("id").to_owned(),
                l["available"].as_i64().expect("available"),
                l["reserved"].as_i64().expect("reserved"),
            )
        })
        .collect()
}

fn s(x: &str) -> String {
    x.to_owned()
}

#[tokio::test]
async fn a_split_reservation_is_allocated_in_priority_order_and_settles_there() {
    let app = spawn_app().await;
    priority(&app, "north", 1).await;
    priority(&app, "south", 2).await;
    count_at(&app, 1, "south", 10).await;
    let stock = count_at(&app, 1, "north", 3).await;
    assert_eq!(
        (stock["available"].as_i64(), stock["reserved"].as_i64()),
        (Some(13), Some(0))
    );
    let r = app
        .post(
            "/v1/reservations",
            json!({"order_id": "o-split", "items": [{"product_id": 1, "quantity": 5}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(
        allocations(&r.body["items"][0]),
        [(s("north"), 3), (s("south"), 2)]
    );
    let stock = app.get("/v1/products/1/stock").await;
    assert_eq!(
        (
            stock.body["available"].as_i64(),
            stock.body["reserved"].as_i64()
        ),
        (Some(8), Some(5))
    );
    assert_eq!(
        locations(&stock.body),
        [(s("north"), 0, 3), (s("south"), 8, 2)]
    );
    let order = app.get("/v1/orders/o-split").await;
    assert_eq!(
        allocations(&order.body["items"][0]),
        [(s("north"), 3), (s("south"), 2)]
    );
    let c = app.post("/v1/orders/o-split/confirm", json!({})).await;
    assert_eq!(c.status, StatusCode::OK, "{}", c.text);
    assert_eq!(
        allocations(&c.body["confirmed"][0]),
        [(s("north"), 3), (s("south"), 2)]
    );
    let stock = app.get("/v1/products/1/stock").await;
    assert_eq!(
        locations(&stock.body),
        [(s("north"), 0, 0), (s("south"), 8, 0)]
    );
    // A direct sale takes from the locations too (north is empty now).
    let sale = app
        .post(
            "/v1/sales",
            json!({"sale_id": "s-1", "items": [{"product_id": 1, "quantity": 2}]}),
        )
        .await;
    assert_eq!(sale.status, StatusCode::CREATED, "{}", sale.text);
    assert_eq!(
        sale.body["items"][0]["allocations"],
        json!([{"location_id": "south", "quantity": 2}]),
        "{}",
        sale.text
    );
    let stock = app.get("/v1/products/1/stock").await;
    assert_eq!(
        locations(&stock.body),
        [(s("north"), 0, 0), (s("south"), 6, 0)]
    );
    // A sale may name its location: one the product is not stocked at is 404, nothing sold.
    let nowhere = app
        .post(
            "/v1/sales",
            json!({"sale_id": "s-2", "items": [
                {"product_id": 1, "quantity": 1, "location_id": "east"}]}),
        )
        .await;
    nowhere.assert_problem(404, "unknown-location");
    let pinned = app
        .post(
            "/v1/sales",
            json!({"sale_id": "s-2", "items": [
                {"product_id": 1, "quantity": 1, "location_id": "south"}]}),
        )
        .await;
    assert_eq!(pinned.status, StatusCode::CREATED, "{}", pinned.text);
    let stock = app.get("/v1/products/1/stock").await;
    assert_eq!(
        locations(&stock.body),
        [(s("north"), 0, 0), (s("south"), 5, 0)]
    );
    let audit = app.admin(Method::GET, "/v1/admin/audit", None).await;
    assert_eq!(audit.body["ok"], true, "{}", audit.text);
}

#[tokio::test]
async fn single_and_pinned_allocation_and_their_refusals() {
    let app = spawn_app().await;
    count_at(&app, 1, "a", 2).await;
    count_at(&app, 1, "b", 4).await;
    app.stock(2, 5).await;
    let single = app
        .post(
            "/v1/reservations",
            json!({"order_id": "o-1", "allocation": "single",
                   "items": [{"product_id": 1, "quantity": 3}]}),
        )
        .await;
    assert_eq!(single.status, StatusCode::CREATED, "{}", single.text);
    assert_eq!(allocations(&single.body["items"][0]), [(s("b"), 3)]);
    // 3 left in total, but no single location holds them.
    let short = app
        .post(
            "/v1/reservations",
            json!({"order_id": "o-2", "allocation": "single",
                   "items": [{"product_id": 1, "quantity": 3}]}),
        )
        .await;
    short.assert_problem(409, "insufficient-stock");
    assert_eq!(short.body["product_id"], 1);
    let pinned = app
        .post(
            "/v1/reservations",
            json!({"order_id": "o-3", "items": [
                {"product_id": 1, "quantity": 2, "location_id": "a"},
                {"product_id": 2, "quantity": 1}]}),
        )
        .await;
    assert_eq!(pinned.status, StatusCode::CREATED, "{}", pinned.text);
    assert_eq!(allocations(&pinned.body["items"][0]), [(s("a"), 2)]);
    // A plain product's item has no `allocations` at all: its answer is what it always was.
    assert!(
        pinned.body["items"][1].get("allocations").is_none(),
        "{}",
        pinned.text
    );
    let nowhere = app
        .post(
            "/v1/reservations",
            json!({"order_id": "o-4", "items": [{"product_id": 1, "quantity": 1, "location_id": "nowhere"}]}),
        )
        .await;
    nowhere.assert_problem(404, "unknown-location");
    assert_eq!(nowhere.body["location_id"], "nowhere");
    let plain = app
        .post(
            "/v1/reservations",
            json!({"order_id": "o-5", "items": [{"product_id": 2, "quantity": 1, "location_id": "a"}]}),
        )
        .await;
    plain.assert_problem(404, "unknown-location");
    let twice = app
        .post(
            "/v1/reservations",
            json!({"order_id": "o-6", "items": [
                {"product_id": 1, "quantity": 1, "location_id": "a"},
                {"product_id": 1, "quantity": 1, "location_id": "b"}]}),
        )
        .await;
    twice.assert_problem(422, "invalid-input");
    app.post(
        "/v1/reservations",
        json!({"order_id": "o-7", "allocation": "nearest", "items": [{"product_id": 1, "quantity": 1}]}),
    )
    .await
    .assert_problem(422, "invalid-body");
    app.post(
        "/v1/reservations",
        json!({"order_id": "o-7", "items": [{"product_id": 1, "quantity": 1, "location_id": "bad id"}]}),
    )
    .await
    .assert_problem(422, "invalid-input");
    // Release puts the units back where they came from.
    let released = app.post("/v1/orders/o-1/release", json!({})).await;
    assert_eq!(released.status, StatusCode::OK, "{}", released.text);
    let stock = app.get("/v1/products/1/stock").await;
    assert_eq!(locations(&stock.body), [(s("a"), 0, 2), (s("b"), 4, 0)]);
    let audit = app.admin(Method::GET, "/v1/admin/audit", None).await;
    assert_eq!(audit.body["ok"], true, "{}", audit.text);
}

#[tokio::test]
async fn location_admin_routes_refuse_bad_input_and_product_wide_writes() {
    let app = spawn_app().await;
    count_at(&app, 1, "a", 2).await;
    let put = |path: &'static str, body: Value| {
        let app = &app;
        async move { app.admin(Method::PUT, path, Some(body)).await }
    };
    put("/v1/locations/a", json!({"priority": 1_000_001}))
        .await
        .assert_problem(422, "invalid-input");
    put("/v1/locations/a%20b", json!({"priority": 1}))
        .await
        .assert_problem(422, "invalid-input");
    put("/v1/products/1/locations/a/stock", json!({"count": -1}))
        .await
        .assert_problem(422, "invalid-input");
    put("/v1/products/0/locations/a/stock", json!({"count": 1}))
        .await
        .assert_problem(422, "invalid-input");
    // A located product is counted per location: a product-wide count or adjustment is 409.
    put("/v1/products/1/stock", json!({"count": 1}))
        .await
        .assert_problem(409, "stocked-by-location");
    app.admin(
        Method::POST,
        "/v1/products/1/stock/adjustments",
        Some(json!({"delta": 1, "reason": "found"})),
    )
    .await
    .assert_problem(409, "stocked-by-location");
    // Without the admin token: 401.
    let anon = app
        .call(
            Method::PUT,
            "/v1/locations/a",
            None,
            Some(json!({"priority": 1})),
        )
        .await;
    assert_eq!(anon.status, StatusCode::UNAUTHORIZED, "{}", anon.text);
    // A product never given a location reads as before, with an empty list.
    app.stock(2, 3).await;
    let plain = app.get("/v1/products/2/stock").await;
    assert_eq!(plain.body["locations"], json!([]));
    assert_eq!(plain.body["available"], 3);
}

#[tokio::test]
async fn the_document_describes_the_location_routes_and_fields() {
    let app = spawn_app().await;
    let doc = app.get("/openapi.json").await.body;
    let count = &doc["paths"]["/v1/products/{product_id}/locations/{location_id}/stock"]["put"];
    assert_eq!(count["security"], json!([{ "admin_token": [] }]));
    let names: Vec<&str> = count["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, ["product_id", "location_id"]);
    let priority = &doc["paths"]["/v1/locations/{location_id}"]["put"];
    assert_eq!(priority["security"], json!([{ "admin_token": [] }]));
    let item = &doc["components"]["schemas"]["ReserveItemRequest"]["properties"];
    assert!(item["location_id"]["pattern"].is_string(), "{item}");
    let body = &doc["components"]["schemas"]["ReserveBody"]["properties"];
    assert_eq!(body["allocation"]["enum"], json!(["single", "split"]));
    // Absent for products never given a location: not required.
    let view = &doc["components"]["schemas"]["ItemView"];
    assert!(view["properties"]["allocations"].is_object(), "{view}");
    let required = view["required"].as_array().expect("required");
    assert!(!required.contains(&json!("allocations")), "{view}");
    let stock = &doc["components"]["schemas"]["LocatedStockView"]["properties"];
    assert!(stock["locations"].is_object(), "{stock}");
}

#[tokio::test]
async fn locations_are_listed_and_retired_once_they_hold_nothing() {
    let app = spawn_app().await;
    count_at(&app, 1, "north", 2).await;
    count_at(&app, 1, "south", 1).await;
    let path = "/v1/locations/north";
    let held = app.admin(Method::DELETE, path, None).await;
    held.assert_problem(409, "location-not-empty");
    assert_eq!(
        (
            held.body["available"].as_i64(),
            held.body["reserved"].as_i64()
        ),
        (Some(2), Some(0))
    );
    app.admin(Method::DELETE, "/v1/locations/nowhere", None)
        .await
        .assert_problem(404, "unknown-location");
    app.call(Method::DELETE, path, None, None)
        .await
        .assert_problem(401, "unauthorized");
    count_at(&app, 1, "north", 0).await;
    let retired = app.admin(Method::DELETE, path, None).await;
    assert_eq!(retired.status, StatusCode::OK, "{}", retired.text);
    assert!(retired.body["retired_at"].is_string(), "{}", retired.text);
    app.admin(
        Method::PUT,
        "/v1/products/1/locations/north/stock",
        Some(json!({ "count": 1 })),
    )
    .await
    .assert_problem(409, "location-retired");

    let first = app.get("/v1/locations?limit=1").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    assert_eq!(first.body["locations"][0]["location_id"], "north");
    assert!(first.body["locations"][0]["retired_at"].is_string());
    let cursor = first.body["next_cursor"]
        .as_str()
        .expect("cursor")
        .to_owned();
    let second = app
        .get(&format!("/v1/locations?limit=1&cursor={cursor}"))
        .await;
    assert_eq!(
        (
            &second.body["locations"][0]["location_id"],
            &second.body["locations"][0]["available"],
            &second.body["locations"][0]["retired_at"],
        ),
        (&json!("south"), &json!(1), &json!(null)),
        "{}",
        second.text
    );
    app.get("/v1/locations?cursor=o-1")
        .await
        .assert_problem(422, "cursor-invalid");
}

/// A located product with a backorder limit: a reservation past its locations' stock takes
/// what they have and backorders the rest; a location count fills the backorder there.
#[tokio::test]
async fn a_located_backorder_is_filled_by_a_location_count() {
    let app = spawn_app().await;
    count_at(&app, 8, "north", 1).await;
    let limit = app
        .admin(
            Method::PUT,
            "/v1/products/8/policy",
            Some(json!({"backorder_limit": 2})),
        )
        .await;
    assert_eq!(limit.status, StatusCode::OK, "{}", limit.text);
    let order = app.reserve("lb-1", &[(8, 3)]).await;
    assert_eq!(order.status, StatusCode::CREATED, "{}", order.text);
    let item = &order.body["items"][0];
    assert_eq!(item["backordered"], 2, "{}", order.text);
    assert_eq!(allocations(item), vec![("north".to_owned(), 1)]);
    app.reserve("lb-2", &[(8, 1)])
        .await
        .assert_problem(409, "insufficient-stock");

    let counted = count_at(&app, 8, "south", 2).await;
    assert_eq!(counted["backordered"], 0, "{counted}");
    assert_eq!(
        locations(&counted),
        vec![("north".to_owned(), 0, 1), ("south".to_owned(), 0, 2)]
    );
    let filled = app.get("/v1/orders/lb-1").await;
    assert_eq!(filled.status, StatusCode::OK, "{}", filled.text);
    let item = &filled.body["items"][0];
    assert_eq!(item.get("backordered"), None, "{}", filled.text);
    assert_eq!(
        allocations(item),
        vec![("north".to_owned(), 1), ("south".to_owned(), 2)]
    );
}

/// `POST /v1/admin/repair` on a product stocked per location whose location's `reserved`
/// drifted: the plan names the location's row before and after, the applied repair sets it and
/// the product's row back, and the audit is clean afterwards.
#[tokio::test]
async fn the_repair_sets_a_drifted_location_back() {
    let app = spawn_app().await;
    count_at(&app, 1, "north", 3).await;
    count_at(&app, 1, "south", 4).await;
    app.reserve("o-loc", &[(1, 4)]).await;
    let clean = app.get("/v1/products/1/stock").await;
    let client = app.db.pool.get().await.expect("client");
    client
        .batch_execute(
            "UPDATE stock_locations SET reserved = reserved + 1 WHERE location_id = 'south'; \
             UPDATE stock SET reserved = reserved + 1 WHERE product_id = 1",
        )
        .await
        .expect("drift");
    let dry = app
        .admin(Method::POST, "/v1/admin/repair", Some(json!({})))
        .await;
    assert_eq!(dry.status, StatusCode::OK, "{}", dry.text);
    let product = &dry.body["products"][0];
    assert_eq!(product["action"], "planned", "{}", dry.text);
    assert_eq!(
        product["locations"],
        json!([{"location_id": "south",
                "before": {"available": 3, "reserved": 2},
                "after": {"available": 3, "reserved": 1}}])
    );
    let applied = app
        .admin(
            Method::POST,
            "/v1/admin/repair",
            Some(json!({"apply": true})),
        )
        .await;
    assert_eq!(
        applied.body["products"][0]["action"], "applied",
        "{}",
        applied.text
    );
    assert_eq!(applied.body["remaining"], json!([]));
    let after = app.get("/v1/products/1/stock").await;
    assert_eq!(locations(&after.body), locations(&clean.body));
}
