//! The contract clients generate from: the served `/openapi.json` passes our own structural
//! checks (path parameters match their templates, every `$ref` resolves, every operation
//! documents its errors with the problem schema), its limits are the code's constants and the
//! server agrees with them at the boundaries, security is declared as configured, and `/docs`
//! is served with strict headers and no token, and renders (under Node.js, `docs_page.js`)
//! inline code as code and the admin-only operations marked. (The full OpenAPI validator and
//! schemathesis run against a real `saldo serve` in `.ci/contract`.)

use std::collections::BTreeSet;

use axum::http::{header, Method, StatusCode};
use saldo::domain::{MAX_ITEMS_PER_ORDER, MAX_QUANTITY, MAX_TTL_S, MIN_TTL_S};
use saldo::listing::MAX_PAGE_LIMIT;
use serde_json::{json, Value};

use crate::support::{spawn_app, spawn_app_with, TestApp, ADMIN, API};

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

/// Every operation as (method, path, operation).
fn operations(doc: &Value) -> Vec<(&str, &str, &Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS {
            if let Some(op) = item.get(method) {
                out.push((method, path.as_str(), op));
            }
        }
    }
    out
}

fn resolves(doc: &Value, reference: &str) -> bool {
    reference
        .strip_prefix("#/")
        .is_some_and(|p| doc.pointer(&format!("/{p}")).is_some())
}

fn collect_refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                out.push(r);
            }
            m.values().for_each(|v| collect_refs(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

/// What is wrong with a document, by our own reading of OpenAPI 3.1: empty when it is sound.
fn problems(doc: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let mut ids = BTreeSet::new();
    for (method, path, op) in operations(doc) {
        let at = format!("{} {path}", method.to_uppercase());
        let template: BTreeSet<&str> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .collect();
        let params = op["parameters"].as_array().cloned().unwrap_or_default();
        let declared: BTreeSet<String> = params
            .iter()
            .filter(|p| p["in"] == "path")
            .map(|p| p["name"].as_str().unwrap_or("").to_owned())
            .collect();
        for p in &params {
            let name = p["name"].as_str().unwrap_or("");
            match p["in"].as_str() {
                Some("path") if !template.contains(name) => found.push(format!(
                    "{at}: path parameter `{name}` is not in the template"
                )),
                Some("path") if p["required"] != true => {
                    found.push(format!("{at}: path parameter `{name}` is not required"))
                }
                Some("path" | "query" | "header") => {}
                other => found.push(format!("{at}: parameter `{name}` in {other:?}")),
            }
            if !p["schema"].is_object() {
                found.push(format!("{at}: parameter `{name}` has no schema"));
            }
        }
        for name in &template {
            if !declared.contains(*name) {
                found.push(format!("{at}: `{{{name}}}` is not declared"));
            }
        }
        match op["operationId"].as_str() {
            Some(id) if !ids.insert(id.to_owned()) => {
                found.push(format!("{at}: operationId `{id}` twice"))
            }
            Some(_) => {}
            None => found.push(format!("{at}: no operationId")),
        }
        let responses = op["responses"].as_object().cloned().unwrap_or_default();
        let secured = op["security"].as_array().is_some_and(|s| !s.is_empty());
        let mut required: Vec<&str> = Vec::new();
        if secured {
            required.push("401");
        }
        if op.get("requestBody").is_some() {
            required.extend(["400", "408", "413", "415", "422"]);
        }
        if !params.is_empty() {
            required.push("422");
        }
        if path.starts_with("/v1/") {
            required.push("503");
        }
        for status in required {
            if !responses.contains_key(status) {
                found.push(format!("{at}: {status} not documented"));
            }
        }
        for (status, r) in &responses {
            if status.starts_with('4') || status.starts_with('5') {
                let schema = &r["content"]["application/problem+json"]["schema"]["$ref"];
                if schema != "#/components/schemas/Problem" {
                    found.push(format!("{at}: {status} is not a problem document"));
                }
            }
        }
    }
    let mut refs = Vec::new();
    collect_refs(doc, &mut refs);
    for r in refs {
        if !resolves(doc, r) {
            found.push(format!("`{r}` does not resolve"));
        }
    }
    found
}

async fn served(app: &TestApp) -> Value {
    let a = app.get("/openapi.json").await;
    assert_eq!(a.status, StatusCode::OK);
    a.body
}

#[tokio::test]
async fn the_served_document_passes_the_structural_checks() {
    let app = spawn_app_with(Some(API), 4).await;
    let doc = served(&app).await;
    assert!(doc["openapi"]
        .as_str()
        .is_some_and(|v| v.starts_with("3.1")));
    let found = problems(&doc);
    assert!(found.is_empty(), "{found:#?}");
    // The routes the lists and the reference page added.
    for (method, path) in [
        ("get", "/v1/products"),
        ("get", "/v1/orders"),
        ("get", "/v1/accounts"),
        ("post", "/v1/accounts"),
        ("get", "/docs"),
    ] {
        assert!(doc["paths"][path][method].is_object(), "{method} {path}");
    }
}

/// Every description in the document, wherever it sits.
fn descriptions<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(d)) = m.get("description") {
                out.push(d);
            }
            m.values().for_each(|v| descriptions(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| descriptions(v, out)),
        _ => {}
    }
}

/// No description carries a run of spaces: a Rust string literal continued onto the next line
/// without its `\` keeps the indentation (three did, in the schemas of a reservation's items).
#[test]
fn descriptions_have_no_runs_of_spaces_from_a_broken_line_continuation() {
    let doc = saldo_http::openapi::document(true);
    let mut all = Vec::new();
    descriptions(&doc, &mut all);
    assert!(all.len() > 100, "{} descriptions", all.len());
    let broken: Vec<&&str> = all.iter().filter(|d| d.contains("   ")).collect();
    assert!(broken.is_empty(), "{broken:#?}");
}

/// The checks can fail: a document with `limit` and `top` declared as path parameters and
/// errors without the problem schema (as the served one once was) is refused.
#[test]
fn the_structural_checks_refuse_a_query_parameter_declared_in_the_path() {
    let doc = json!({
        "openapi": "3.1.0",
        "paths": {
            "/v1/accounts/{id}/transfers": { "get": {
                "operationId": "list_transfers",
                "parameters": [
                    { "name": "id", "in": "path", "required": true, "schema": { "type": "integer" } },
                    { "name": "limit", "in": "path", "required": true, "schema": { "type": "integer" } }
                ],
                "responses": { "200": { "description": "ok" },
                               "404": { "description": "no such account" } }
            } }
        },
        "components": {}
    });
    let found = problems(&doc);
    assert!(
        found
            .iter()
            .any(|p| p.contains("`limit` is not in the template")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.contains("404 is not a problem document")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|p| p.contains("422 not documented")),
        "{found:?}"
    );
}

#[test]
fn limits_in_the_document_are_the_codes_constants() {
    let doc = saldo_http::openapi::document(true);
    let schemas = &doc["components"]["schemas"];
    let reserve = &schemas["ReserveBody"]["properties"];
    assert_eq!(reserve["ttl_s"]["minimum"], json!(MIN_TTL_S));
    assert_eq!(reserve["ttl_s"]["maximum"], json!(MAX_TTL_S));
    assert_eq!(reserve["items"]["maxItems"], json!(MAX_ITEMS_PER_ORDER));
    assert_eq!(reserve["items"]["minItems"], json!(1));
    assert_eq!(
        schemas["ItemRequest"]["properties"]["quantity"]["maximum"],
        json!(MAX_QUANTITY)
    );
    let policy = &schemas["Policy"]["properties"]["backorder_limit"];
    assert_eq!(
        (&policy["minimum"], &policy["maximum"]),
        (&json!(0), &json!(saldo::domain::MAX_BACKORDER_LIMIT))
    );
    let limit = doc["paths"]["/v1/products"]["get"]["parameters"]
        .as_array()
        .expect("params")
        .iter()
        .find(|p| p["name"] == "limit")
        .expect("limit")
        .clone();
    assert_eq!(limit["in"], "query");
    assert_eq!(limit["schema"]["maximum"], json!(MAX_PAGE_LIMIT));
    for (path, name) in [
        ("/v1/accounts/{id}/transfers", "limit"),
        ("/v1/admin/refusals", "top"),
    ] {
        let params = doc["paths"][path]["get"]["parameters"]
            .as_array()
            .expect("params");
        let p = params.iter().find(|p| p["name"] == name).expect(name);
        assert_eq!(p["in"], "query", "{path} {name}");
        assert_eq!(p["required"], false, "{path} {name}");
    }
}

/// The creating operations link their success answers to the follow-ups that take the new id
/// (schemathesis's stateful phase follows them with real ids instead of meeting 404s), and
/// every link in the document is sound: its `operationId` names exactly one operation, each
/// parameter is one that operation takes, and each value reads a property the answer's schema
/// has.
#[test]
fn response_links_reach_the_follow_ups_and_resolve() {
    let doc = saldo_http::openapi::document(true);
    let ops = operations(&doc);
    let by_id = |id: &str| -> Vec<&Value> {
        ops.iter()
            .filter(|(_, _, op)| op["operationId"] == id)
            .map(|(_, _, op)| *op)
            .collect()
    };
    let mut seen = 0;
    for (method, path, op) in &ops {
        for (status, response) in op["responses"].as_object().expect("responses") {
            let Some(links) = response.get("links").and_then(Value::as_object) else {
                continue;
            };
            let schema_ref = response["content"]["application/json"]["schema"]["$ref"]
                .as_str()
                .expect("a linked answer has a component schema");
            let name = schema_ref.trim_start_matches("#/components/schemas/");
            let properties = &doc["components"]["schemas"][name]["properties"];
            for (link_name, link) in links {
                let at = format!("{method} {path} {status} link {link_name}");
                assert!(link.get("operationRef").is_none(), "{at}: use operationId");
                let id = link["operationId"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{at}: no operationId in {link}"));
                let targets = by_id(id);
                assert_eq!(
                    targets.len(),
                    1,
                    "{at}: operationId {id} must name one operation"
                );
                let taken: BTreeSet<&str> = targets[0]["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p["name"].as_str())
                    .collect();
                let params = link["parameters"].as_object().expect("parameters");
                assert!(!params.is_empty(), "{at}: no parameters");
                for (param, value) in params {
                    assert!(
                        taken.contains(param.as_str()),
                        "{at}: {id} takes no {param}"
                    );
                    let field = value
                        .as_str()
                        .and_then(|v| v.strip_prefix("$response.body#/"))
                        .unwrap_or_else(|| panic!("{at}: {value} is not a body pointer"));
                    assert!(
                        properties.get(field).is_some(),
                        "{at}: {name} has no {field}"
                    );
                }
                seen += 1;
            }
        }
    }
    let linked = |path: &str, status: &str| -> BTreeSet<String> {
        doc["paths"][path]["post"]["responses"][status]["links"]
            .as_object()
            .map(|l| l.values().map(|l| l["operationId"].to_string()).collect())
            .unwrap_or_default()
    };
    let ids = |names: &[&str]| -> BTreeSet<String> {
        names.iter().map(|n| json!(n).to_string()).collect()
    };
    let order = ids(&[
        "get_order",
        "confirm",
        "release",
        "extend",
        "rereserve",
        "record_return",
    ]);
    let transfer = ids(&["get_transfer", "post_transfer", "void_transfer"]);
    for status in ["201", "200"] {
        assert_eq!(linked("/v1/reservations", status), order, "{status}");
        assert_eq!(
            linked("/v1/orders/{order_id}/rereserve", status),
            order,
            "{status}"
        );
        assert_eq!(linked("/v1/transfers", status), transfer, "{status}");
    }
    let webhook = ids(&[
        "get_webhook",
        "delete_webhook",
        "resume_webhook",
        "list_webhook_deliveries",
    ]);
    assert_eq!(linked("/v1/admin/webhooks", "201"), webhook);
    assert_eq!(seen, 2 * (2 * order.len() + transfer.len()) + webhook.len());
}

/// The server agrees with the schema at its edges: the largest value the document allows is
/// accepted, the next one refused (422), for the bounds a reservation carries.
#[tokio::test]
async fn the_server_accepts_the_schemas_edges_and_refuses_just_past_them() {
    let app = spawn_app().await;
    app.stock(1, 2 * i64::from(MAX_QUANTITY)).await;
    let body = |order: &str, ttl: Value, quantity: i64| {
        json!({ "order_id": order, "ttl_s": ttl,
                "items": [{ "product_id": 1, "quantity": quantity }] })
    };
    let a = app
        .post("/v1/reservations", body("edge-1", json!(MAX_TTL_S), 1))
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    let a = app
        .post("/v1/reservations", body("edge-2", json!(MIN_TTL_S), 1))
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    let a = app
        .post(
            "/v1/reservations",
            body("edge-3", Value::Null, i64::from(MAX_QUANTITY)),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    for (order, ttl, quantity, kind) in [
        ("past-1", json!(MAX_TTL_S + 1), 1, "invalid-input"),
        ("past-2", json!(MIN_TTL_S - 1), 1, "invalid-input"),
        (
            "past-3",
            json!(60),
            i64::from(MAX_QUANTITY) + 1,
            "invalid-input",
        ),
        ("past-4", json!(60.5), 1, "invalid-body"),
    ] {
        app.post("/v1/reservations", body(order, ttl, quantity))
            .await
            .assert_problem(422, kind);
    }
}

/// JSON Schema's `integer` includes `3.0`; the server reads it as 3 (it used to answer 422).
#[tokio::test]
async fn integers_written_as_floats_are_integers() {
    let app = spawn_app().await;
    let a = app
        .admin(
            Method::PUT,
            "/v1/products/5/stock",
            Some(json!({ "count": 3.0 })),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(a.body["available"], 3);
    let a = app
        .admin(
            Method::PUT,
            "/v1/products/5/stock",
            Some(json!({ "count": 2.5 })),
        )
        .await;
    a.assert_problem(422, "invalid-body");
}

fn security_of<'a>(doc: &'a Value, method: &str, path: &str) -> Option<&'a Value> {
    doc["paths"][path][method].get("security")
}

#[tokio::test]
async fn security_is_declared_as_configured() {
    // API auth on: client routes name both tokens, admin routes the admin token.
    let with_token = spawn_app_with(Some(API), 4).await;
    let doc = served(&with_token).await;
    let client_routes = [
        ("get", "/v1/products"),
        ("post", "/v1/reservations"),
        ("get", "/v1/accounts/{id}"),
    ];
    for (method, path) in client_routes {
        let s = security_of(&doc, method, path).expect("security");
        assert!(s.to_string().contains("api_token"), "{method} {path}: {s}");
        assert!(doc["paths"][path][method]["responses"]["401"].is_object());
    }
    let admin = security_of(&doc, "put", "/v1/products/{product_id}/stock").expect("admin");
    assert_eq!(admin, &json!([{ "admin_token": [] }]));
    let a = with_token.get("/v1/products").await;
    a.assert_problem(401, "unauthorized");

    // API auth disabled: the same routes declare nothing (and really take any request);
    // admin routes keep their token.
    let open = spawn_app().await;
    let doc = served(&open).await;
    for (method, path) in client_routes {
        assert_eq!(security_of(&doc, method, path), None, "{method} {path}");
        assert!(doc["paths"][path][method]["responses"].get("401").is_none());
    }
    assert_eq!(
        security_of(&doc, "put", "/v1/products/{product_id}/stock"),
        Some(&json!([{ "admin_token": [] }]))
    );
    assert_eq!(open.get("/v1/products").await.status, StatusCode::OK);
    // Ops routes never need a token.
    for path in ["/healthz", "/readyz", "/metrics", "/openapi.json", "/docs"] {
        assert_eq!(security_of(&doc, "get", path), None, "{path}");
    }
}

#[tokio::test]
async fn docs_are_served_without_a_token_with_strict_headers() {
    let app = spawn_app_with(Some(API), 4).await;
    for (path, content_type) in [
        ("/docs", "text/html; charset=utf-8"),
        ("/docs/docs.js", "text/javascript; charset=utf-8"),
        ("/docs/docs.css", "text/css; charset=utf-8"),
    ] {
        let a = app.get(path).await;
        assert_eq!(a.status, StatusCode::OK, "{path}");
        let h = |name| a.headers.get(name).and_then(|v| v.to_str().ok());
        assert_eq!(h(header::CONTENT_TYPE), Some(content_type), "{path}");
        assert_eq!(h(header::X_CONTENT_TYPE_OPTIONS), Some("nosniff"), "{path}");
        let csp = h(header::CONTENT_SECURITY_POLICY).expect("CSP");
        assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"));
        assert!(
            !csp.contains("unsafe-inline") && !csp.contains("http"),
            "{csp}"
        );
    }
    let page = app.get("/docs").await.text;
    // Everything from this origin: no external script, style or font.
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "{page}"
    );
    assert!(page.contains("src=\"/docs/docs.js\"") && page.contains("href=\"/docs/docs.css\""));
    // No inline script the CSP would block.
    assert_eq!(page.matches("<script").count(), 1);
    assert!(app
        .get("/docs/docs.js")
        .await
        .text
        .contains("/openapi.json"));
}

/// What `/docs` shows, rendered by `docs_page.js` under Node.js (the served script and
/// document, a minimal DOM).
async fn docs_rendered(app: &TestApp) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("docs.js");
    let document = dir.path().join("openapi.json");
    std::fs::write(&script, app.get("/docs/docs.js").await.text).expect("script");
    std::fs::write(&document, app.get("/openapi.json").await.text).expect("document");
    let harness = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/suite/docs_page.js");
    let run = tokio::process::Command::new("node")
        .arg(harness)
        .arg(&script)
        .arg(&document)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(60), run)
        .await
        .expect("node answers in time")
        .unwrap_or_else(|e| {
            panic!("this test renders /docs with Node.js: install it (`apt-get install -y nodejs`): {e}")
        });
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the harness prints JSON")
}

/// `/docs` renders the document's inline code (`` `type` ``) as code, not as backticks, and
/// marks exactly the operations whose security requirement is the admin token alone.
#[tokio::test]
async fn the_docs_page_renders_code_and_marks_admin_routes() {
    let app = spawn_app_with(Some(API), 4).await;
    let doc = served(&app).await;
    let shown = docs_rendered(&app).await;
    let with_backticks = shown["with_backticks"].as_array().expect("texts");
    assert!(
        with_backticks.is_empty(),
        "raw Markdown shown: {with_backticks:#?}"
    );
    assert!(
        shown["description_code"]
            .as_array()
            .is_some_and(|c| c.contains(&json!("type"))),
        "the API's description shows `type` as code: {shown}"
    );
    assert!(
        shown["reference_code"]
            .as_array()
            .is_some_and(|c| c.contains(&json!("insufficient-funds"))),
        "{shown}"
    );
    let admin_only: BTreeSet<String> = operations(&doc)
        .into_iter()
        .filter(|(_, _, op)| {
            op["security"].as_array().is_some_and(|reqs| {
                !reqs.is_empty()
                    && reqs.iter().all(|r| {
                        r.as_object()
                            .is_some_and(|r| r.len() == 1 && r.contains_key("admin_token"))
                    })
            })
        })
        .map(|(method, path, _)| format!("{} {path}", method.to_uppercase()))
        .collect();
    assert!(admin_only.contains("PUT /v1/products/{product_id}/stock"));
    assert!(!admin_only.contains("POST /v1/reservations"));
    let rendered = shown["operations"].as_array().expect("operations");
    assert_eq!(
        rendered.len(),
        operations(&doc).len(),
        "every operation is shown"
    );
    let marked: BTreeSet<String> = rendered
        .iter()
        .filter(|op| op["admin"] == true)
        .map(|op| op["key"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(marked, admin_only);
}

/// Follows `next_cursor` from the first page; every page within `limit`.
async fn all_pages(app: &TestApp, path: &str, key: &str, limit: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let mut url = format!(
        "{path}{}limit={limit}",
        if path.contains('?') { '&' } else { '?' }
    );
    for _ in 0..1_000 {
        let a = app.call(Method::GET, &url, Some(ADMIN), None).await;
        assert_eq!(a.status, StatusCode::OK, "{url}: {}", a.text);
        let items = a.body[key].as_array().expect("items").clone();
        assert!(items.len() <= limit);
        out.extend(items);
        match a.body["next_cursor"].as_str() {
            Some(c) => {
                let base = url.split("&cursor=").next().expect("url").to_owned();
                url = format!("{base}&cursor={c}");
            }
            None => {
                assert!(a.body["next_cursor"].is_null(), "{}", a.text);
                return out;
            }
        }
    }
    panic!("no end of {path}");
}

#[tokio::test]
async fn lists_page_through_products_orders_and_accounts() {
    let app = spawn_app().await;
    for p in 1..=5 {
        app.stock(p, 10).await;
    }
    let products = all_pages(&app, "/v1/products", "products", 2).await;
    let ids: Vec<i64> = products
        .iter()
        .map(|p| p["product_id"].as_i64().expect("id"))
        .collect();
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    assert_eq!(products[0]["available"], 10);

    for n in 0..5 {
        assert_eq!(
            app.reserve(&format!("o-{n}"), &[(1, 1)]).await.status,
            StatusCode::CREATED
        );
    }
    let confirmed = app
        .call(Method::POST, "/v1/orders/o-3/confirm", Some(ADMIN), None)
        .await;
    assert_eq!(confirmed.status, StatusCode::OK, "{}", confirmed.text);
    let orders = all_pages(&app, "/v1/orders", "orders", 2).await;
    assert_eq!(orders.len(), 5);
    let only = all_pages(&app, "/v1/orders?status=confirmed", "orders", 1).await;
    assert_eq!(only.len(), 1);
    assert_eq!(only[0]["order_id"], "o-3");
    assert_eq!(only[0]["status"], "confirmed");
    assert_eq!(only[0]["products"], 1);

    for id in [7, 3, 9] {
        let a = app
            .admin(
                Method::POST,
                "/v1/accounts",
                Some(json!({ "id": id, "opening_balance": id })),
            )
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    }
    let accounts = all_pages(&app, "/v1/accounts", "accounts", 2).await;
    let ids: Vec<i64> = accounts
        .iter()
        .map(|a| a["id"].as_i64().expect("id"))
        .collect();
    assert_eq!(ids, [3, 7, 9], "the system account is not listed");
}

#[tokio::test]
async fn bad_list_parameters_are_problems() {
    let app = spawn_app_with(Some(API), 4).await;
    let products_cursor = "p0000000000000005";
    for path in [
        "/v1/products?limit=0".to_owned(),
        format!("/v1/products?limit={}", MAX_PAGE_LIMIT + 1),
        "/v1/products?limit=ten".to_owned(),
        "/v1/products?cursor=garbage".to_owned(),
        format!("/v1/accounts?cursor={products_cursor}"),
        format!("/v1/orders?cursor={products_cursor}x"),
        "/v1/orders?status=shipped".to_owned(),
        "/v1/orders?page=2".to_owned(),
    ] {
        let a = app.call(Method::GET, &path, Some(API), None).await;
        assert_eq!(
            a.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{path}: {}",
            a.text
        );
        assert_eq!(
            a.headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok()),
            Some("application/problem+json"),
            "{path}"
        );
    }
    // A well-formed cursor is a position, even one no page handed out: an empty page.
    let a = app
        .call(
            Method::GET,
            "/v1/products?cursor=pffffffffffffffff",
            Some(API),
            None,
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(a.body, json!({ "products": [], "next_cursor": null }));
    // Lists need the API token like the reads next to them.
    for path in ["/v1/products", "/v1/orders", "/v1/accounts"] {
        app.get(path).await.assert_problem(401, "unauthorized");
    }
}

/// Found by schemathesis: a delta the schema allows, refused as bad input (422) because of the
/// row's current stock. It is a conflict with the row's state (409), like going negative.
#[tokio::test]
async fn a_restock_past_the_stock_limit_is_a_conflict_not_bad_input() {
    let app = spawn_app().await;
    app.stock(1, 1_000_000).await;
    let max = i64::from(saldo::domain::MAX_STOCK_COUNT);
    let a = app
        .admin(
            Method::POST,
            "/v1/products/1/stock/adjustments",
            Some(json!({ "delta": max, "reason": "restock" })),
        )
        .await;
    a.assert_problem(409, "stock-limit");
    assert_eq!(a.body["on_hand_after"], json!(max + 1_000_000));
    // Up to the limit is fine.
    let a = app
        .admin(
            Method::POST,
            "/v1/products/1/stock/adjustments",
            Some(json!({ "delta": max - 1_000_000, "reason": "restock" })),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
}
