//! A product's stock statement over HTTP (issue 26): `GET /v1/products/{id}/movements` pages
//! the movements of a reserve, confirm, release, sale and return, each naming what happened
//! and its order, sale or return, with the change and the counters right after it; the cursor
//! belongs to its statement (another product's, another range's or another list's is 422
//! `cursor-invalid`), a limit out of bounds or a bad time is 422 `invalid-input`, an unknown
//! product 404.

use axum::http::StatusCode;
use serde_json::{json, Value};

use crate::support::spawn_app;

#[tokio::test]
async fn a_stock_statement_names_each_step_and_the_counters_after_it() {
    let app = spawn_app().await;
    app.stock(1, 10).await;
    app.stock(2, 10).await;
    let ok = |a: &crate::support::Answer| {
        assert!(a.status.is_success(), "{} {}", a.status, a.text);
    };
    ok(&app.reserve("mv-kept", &[(1, 2)]).await);
    ok(&app.post("/v1/orders/mv-kept/confirm", json!({})).await);
    ok(&app.reserve("mv-dropped", &[(1, 3)]).await);
    ok(&app.post("/v1/orders/mv-dropped/release", json!({})).await);
    ok(&app
        .post(
            "/v1/sales",
            json!({"sale_id": "mv-sale", "items": [{"product_id": 1, "quantity": 1}]}),
        )
        .await);
    ok(&app
        .post(
            "/v1/orders/mv-kept/returns",
            json!({"return_id": "mv-ret", "items": [{"product_id": 1, "quantity": 1}],
                   "reason": "wrong size"}),
        )
        .await);

    let mut seen: Vec<Value> = Vec::new();
    let mut next = "/v1/products/1/movements?limit=3".to_owned();
    let mut first_cursor = None;
    loop {
        let page = app.get(&next).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.text);
        assert_eq!(page.body["product_id"], json!(1));
        let items = page.body["movements"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(items.len() <= 3);
        seen.extend(items);
        let Some(cursor) = page.body["next_cursor"].as_str() else {
            break;
        };
        first_cursor.get_or_insert_with(|| cursor.to_owned());
        next = format!("/v1/products/1/movements?limit=3&cursor={cursor}");
    }
    let line = |m: &Value| {
        json!([
            m["kind"],
            m["order_id"],
            m["sale_id"],
            m["return_id"],
            [
                m["available_delta"],
                m["reserved_delta"],
                m["backordered_delta"]
            ],
            [
                m["available_after"],
                m["reserved_after"],
                m["backordered_after"]
            ]
        ])
    };
    let got: Vec<Value> = seen.iter().map(line).collect();
    let n = Value::Null;
    assert_eq!(
        got,
        vec![
            json!(["count", n, n, n, [10, 0, 0], [10, 0, 0]]),
            json!(["reserve", "mv-kept", n, n, [-2, 2, 0], [8, 2, 0]]),
            json!(["confirm", "mv-kept", n, n, [0, -2, 0], [8, 0, 0]]),
            json!(["reserve", "mv-dropped", n, n, [-3, 3, 0], [5, 3, 0]]),
            json!(["release", "mv-dropped", n, n, [3, -3, 0], [8, 0, 0]]),
            json!(["sale", n, "mv-sale", n, [-1, 0, 0], [7, 0, 0]]),
            json!(["return", "mv-kept", n, "mv-ret", [1, 0, 0], [8, 0, 0]]),
        ]
    );
    let seqs: Vec<i64> = seen.iter().filter_map(|m| m["seq"].as_i64()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    // The last movement is the product's stock as read.
    let stock = app.get("/v1/products/1/stock").await;
    assert_eq!(stock.body["available"], seen[6]["available_after"]);
    assert_eq!(stock.body["reserved"], seen[6]["reserved_after"]);

    let cursor = first_cursor.expect("a second page");
    for refused in [
        format!("/v1/products/2/movements?cursor={cursor}"),
        format!("/v1/products/1/movements?from=2020-01-01T00:00:00Z&cursor={cursor}"),
        "/v1/products/1/movements?cursor=p0000000000000005".to_owned(),
        format!("/v1/products/1/movements?cursor=e{}", &cursor[1..]),
        format!("/v1/accounts/1/entries?cursor={cursor}"),
    ] {
        app.get(&refused)
            .await
            .assert_problem(422, "cursor-invalid");
    }
    for bad in [
        "/v1/products/1/movements?limit=0",
        "/v1/products/1/movements?limit=1001",
        "/v1/products/1/movements?from=yesterday",
        "/v1/products/0/movements",
    ] {
        app.get(bad).await.assert_problem(422, "invalid-input");
    }
    app.get("/v1/products/9/movements")
        .await
        .assert_problem(404, "unknown-product");
    let none = app
        .get("/v1/products/1/movements?from=2030-01-01T00:00:00Z&to=2020-01-01T00:00:00Z")
        .await;
    assert_eq!(none.status, StatusCode::OK, "{}", none.text);
    assert_eq!(none.body["movements"], json!([]));
}
