//! Moves over HTTP (issue 27 item 2): `POST /v1/products/{id}/moves` moves units into a
//! non-sellable state and back (201, replayed 200, another body 409 `idempotency-conflict`),
//! never more than the source holds (409 `move-exceeds-stock` naming the state, nothing
//! written), refuses what it does not know as 404/422; `GET …/stock` shows the states; a
//! return may put its units into one; the audit stays clean. The race is in the library's suite.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::spawn_app;

#[tokio::test]
async fn a_move_to_damaged_and_back_shows_in_the_stock_and_keeps_the_audit_clean() {
    let app = spawn_app().await;
    app.stock(1, 5).await;
    let body = json!({"move_id": "mv-1", "quantity": 2,
                      "from": {"state": "available"}, "to": {"state": "damaged"},
                      "reason": "dropped on the floor"});
    let a = app.post("/v1/products/1/moves", body.clone()).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    assert_eq!(a.body["to"]["state"], "damaged");
    assert_eq!(a.body["replayed"], false);
    let s = app.get("/v1/products/1/stock").await;
    assert_eq!(s.body["available"], 3, "{}", s.text);
    assert_eq!(s.body["states"]["damaged"], 2, "{}", s.text);
    assert_eq!(s.body["states"]["incoming"], 0);

    let again = app.post("/v1/products/1/moves", body).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    assert_eq!(again.body["replayed"], true);
    assert_eq!(again.body["moved_at"], a.body["moved_at"]);
    app.post(
        "/v1/products/1/moves",
        json!({"move_id": "mv-1", "quantity": 1, "from": {"state": "available"},
               "to": {"state": "damaged"}, "reason": "dropped on the floor"}),
    )
    .await
    .assert_problem(409, "idempotency-conflict");

    let short = app
        .post(
            "/v1/products/1/moves",
            json!({"move_id": "mv-2", "quantity": 3, "from": {"state": "damaged"},
                   "to": {"state": "available"}, "reason": "repaired"}),
        )
        .await;
    short.assert_problem(409, "move-exceeds-stock");
    assert_eq!(short.body["state"], "damaged");
    assert_eq!(
        (short.body["held"].clone(), short.body["requested"].clone()),
        (json!(2), json!(3))
    );

    for (body, status, kind) in [
        (
            json!({"move_id": "mv-3", "quantity": 1, "from": {"state": "lost"},
                   "to": {"state": "damaged"}, "reason": "x"}),
            422,
            "invalid-input",
        ),
        (
            json!({"move_id": "mv-3", "quantity": 1, "from": {"state": "damaged"},
                   "to": {"state": "damaged"}, "reason": "x"}),
            422,
            "invalid-input",
        ),
        (
            json!({"move_id": "mv 3", "quantity": 1, "from": {"state": "available"},
                   "to": {"state": "damaged"}, "reason": "x"}),
            422,
            "invalid-input",
        ),
        (
            json!({"move_id": "mv-3", "quantity": 1,
                   "from": {"state": "available", "location_id": "north"},
                   "to": {"state": "damaged", "location_id": "north"}, "reason": "x"}),
            404,
            "unknown-location",
        ),
    ] {
        app.post("/v1/products/1/moves", body)
            .await
            .assert_problem(status, kind);
    }

    // A return straight into damaged.
    let r = app
        .post(
            "/v1/reservations",
            json!({"order_id": "mv-o", "items": [{"product_id": 1, "quantity": 1}]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let c = app.post("/v1/orders/mv-o/confirm", json!({})).await;
    assert_eq!(c.status, StatusCode::OK, "{}", c.text);
    let back = app
        .post(
            "/v1/orders/mv-o/returns",
            json!({"return_id": "mv-r", "items": [{"product_id": 1, "quantity": 1,
                   "state": "damaged"}], "reason": "broken in transit"}),
        )
        .await;
    assert_eq!(back.status, StatusCode::CREATED, "{}", back.text);
    assert_eq!(back.body["items"][0]["state"], "damaged");
    let s = app.get("/v1/products/1/stock").await;
    assert_eq!(
        (
            s.body["available"].clone(),
            s.body["states"]["damaged"].clone()
        ),
        (json!(2), json!(3))
    );

    let audit = app.admin(Method::GET, "/v1/admin/audit", None).await;
    assert_eq!(audit.status, StatusCode::OK, "{}", audit.text);
    assert_eq!(audit.body["ok"], true, "{}", audit.text);
    assert_eq!(audit.body["divergences"], json!([]), "{}", audit.text);
}
