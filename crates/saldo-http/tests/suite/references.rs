//! References and metadata over HTTP: a transfer, a hold and a group take `reference` and
//! `metadata` and show them in every answer; a replay with other ones is 409 like another
//! amount; past a bound either is a 422 `invalid-input` problem with nothing written.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::{spawn_app, TestApp};

async fn two_accounts(app: &TestApp) {
    for (id, opening) in [(1, 1_000), (2, 0)] {
        let a = app
            .admin(
                Method::POST,
                "/v1/accounts",
                Some(json!({"id": id, "opening_balance": opening})),
            )
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    }
}

fn transfer(id: &str, extra: Value) -> Value {
    let mut body = json!({"id": id, "from": 1, "to": 2, "amount": 10});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    body
}

#[tokio::test]
async fn transfers_holds_and_groups_show_their_reference_and_metadata() {
    let app = spawn_app().await;
    two_accounts(&app).await;
    let tags = json!({"reference": "pay_1", "metadata": {"invoice": "INV-1"}});
    let t = app
        .post("/v1/transfers", transfer("t-1", tags.clone()))
        .await;
    assert_eq!(t.status, StatusCode::CREATED, "{}", t.text);
    assert_eq!(
        (&t.body["reference"], &t.body["metadata"]),
        (&tags["reference"], &tags["metadata"])
    );
    let read = app.get("/v1/transfers/t-1").await;
    assert_eq!(read.body["reference"], tags["reference"], "{}", read.text);
    let replay = app
        .post("/v1/transfers", transfer("t-1", tags.clone()))
        .await;
    assert_eq!(replay.status, StatusCode::OK, "{}", replay.text);
    let other = json!({"reference": "pay_2", "metadata": {"invoice": "INV-1"}});
    let conflict = app.post("/v1/transfers", transfer("t-1", other)).await;
    conflict.assert_problem(409, "idempotency-conflict");
    let hold = app
        .post(
            "/v1/transfers",
            transfer("h-1", json!({"pending": true, "reference": "cart-7"})),
        )
        .await;
    assert_eq!(hold.status, StatusCode::CREATED, "{}", hold.text);
    assert_eq!(hold.body["reference"], json!("cart-7"));
    assert_eq!(hold.body["metadata"], Value::Null);
    let group = app
        .post(
            "/v1/transfer-groups",
            json!({"id": "g-1", "reference": "fx-1", "metadata": {"desk": "fx"},
                   "transfers": [transfer("g-1-0", json!({"reference": "leg"}))]}),
        )
        .await;
    assert_eq!(group.status, StatusCode::CREATED, "{}", group.text);
    assert_eq!(
        (&group.body["reference"], &group.body["metadata"]["desk"]),
        (&json!("fx-1"), &json!("fx"))
    );
    assert_eq!(group.body["transfers"][0]["reference"], json!("leg"));
}

#[tokio::test]
async fn a_reference_or_metadata_past_its_bounds_is_422_with_nothing_written() {
    let app = spawn_app().await;
    two_accounts(&app).await;
    let many: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    for (n, bad) in [
        json!({"reference": ""}),
        json!({"reference": "x".repeat(129)}),
        json!({"reference": "a\nb"}),
        json!({"metadata": many}),
        json!({"metadata": {"k": 1}}),
        json!({"metadata": {"k": "v".repeat(257)}}),
        json!({"metadata": {"": "v"}}),
        json!({"metadata": ["a"]}),
    ]
    .into_iter()
    .enumerate()
    {
        let id = format!("bad-{n}");
        let refused = app.post("/v1/transfers", transfer(&id, bad.clone())).await;
        refused.assert_problem(422, "invalid-input");
        let missing = app.get(&format!("/v1/transfers/{id}")).await;
        assert_eq!(
            missing.status,
            StatusCode::NOT_FOUND,
            "{bad}: {}",
            missing.text
        );
    }
}

/// `GET /v1/transfers` finds by reference, account and status, pages with `next_cursor`, and
/// answers a cursor of other filters or another list with a 422 `cursor-invalid` problem, a
/// bad filter with a 422 `invalid-input` one; it needs the API token like the reads.
#[tokio::test]
async fn the_transfer_search_answers_pages_and_refuses_bad_cursors_and_filters() {
    let app = spawn_app().await;
    two_accounts(&app).await;
    for (id, extra) in [
        ("s-1", json!({"reference": "inv-1"})),
        ("s-2", json!({"reference": "inv-2"})),
        ("s-3", json!({"reference": "inv-1", "pending": true})),
    ] {
        let t = app.post("/v1/transfers", transfer(id, extra)).await;
        assert_eq!(t.status, StatusCode::CREATED, "{}", t.text);
    }
    let ids = |body: &Value| -> Vec<String> {
        body["transfers"]
            .as_array()
            .expect("transfers")
            .iter()
            .map(|t| t["id"].as_str().expect("id").to_owned())
            .collect()
    };
    let found = app.get("/v1/transfers?reference=inv-1").await;
    assert_eq!(found.status, StatusCode::OK, "{}", found.text);
    assert_eq!(ids(&found.body), ["s-1", "s-3"]);
    assert_eq!(found.body["transfers"][0]["reference"], json!("inv-1"));
    assert_eq!(found.body["next_cursor"], Value::Null);
    let pending = app
        .get("/v1/transfers?account=2&status=pending&reference=inv-1")
        .await;
    assert_eq!(ids(&pending.body), ["s-3"], "{}", pending.text);

    let first = app.get("/v1/transfers?reference=inv-1&limit=1").await;
    assert_eq!(ids(&first.body), ["s-1"], "{}", first.text);
    let cursor = first.body["next_cursor"].as_str().expect("a next page");
    let second = app
        .get(&format!(
            "/v1/transfers?reference=inv-1&limit=1&cursor={cursor}"
        ))
        .await;
    assert_eq!(ids(&second.body), ["s-3"], "{}", second.text);
    for refused in [
        format!("/v1/transfers?reference=inv-2&cursor={cursor}"),
        format!("/v1/transfers?cursor={cursor}"),
        "/v1/transfers?cursor=p0000000000000005".to_owned(),
        "/v1/transfers?cursor=garbage".to_owned(),
        format!("/v1/accounts?cursor={cursor}"),
    ] {
        let a = app.get(&refused).await;
        a.assert_problem(422, "cursor-invalid");
    }
    for bad in [
        "/v1/transfers?status=settled",
        "/v1/transfers?account=0",
        "/v1/transfers?account=one",
        "/v1/transfers?reference=",
        "/v1/transfers?limit=0",
        "/v1/transfers?page=2",
    ] {
        app.get(bad).await.assert_problem(422, "invalid-input");
    }
}

/// An account opens with a reference and metadata, shown by the open, the read and the list;
/// a bad one is 422 with nothing written.
#[tokio::test]
async fn an_account_shows_its_reference_and_metadata() {
    let app = spawn_app().await;
    let opened = app
        .admin(
            Method::POST,
            "/v1/accounts",
            Some(json!({"id": 5, "reference": "cust-5", "metadata": {"crm": "c-5"}})),
        )
        .await;
    assert_eq!(opened.status, StatusCode::CREATED, "{}", opened.text);
    assert_eq!(
        (&opened.body["reference"], &opened.body["metadata"]),
        (&json!("cust-5"), &json!({"crm": "c-5"}))
    );
    let read = app.get("/v1/accounts/5").await;
    assert_eq!(read.body["metadata"]["crm"], json!("c-5"), "{}", read.text);
    let listed = app.get("/v1/accounts").await;
    assert_eq!(listed.body["accounts"][0]["reference"], json!("cust-5"));
    for (n, bad) in [
        json!({"reference": ""}),
        json!({"metadata": {"k": 1}}),
        json!({"metadata": "x"}),
    ]
    .into_iter()
    .enumerate()
    {
        let id = 10 + n as i64;
        let mut body = json!({"id": id});
        if let (Some(b), Some(e)) = (body.as_object_mut(), bad.as_object()) {
            b.extend(e.clone());
        }
        let refused = app.admin(Method::POST, "/v1/accounts", Some(body)).await;
        refused.assert_problem(422, "invalid-input");
        let missing = app.get(&format!("/v1/accounts/{id}")).await;
        assert_eq!(
            missing.status,
            StatusCode::NOT_FOUND,
            "{bad}: {}",
            missing.text
        );
    }
}
