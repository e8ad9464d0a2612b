//! The OpenAPI document clients generate from. utoipa collects the paths from the handlers'
//! annotations (their bounded inputs' schemas are [`crate::routes::schema`]'s, built from the
//! constants the code enforces); this module owns what is decided once, at start-up:
//!
//! - [`ApiDoc`]: the document's info, tags, shared components and bearer schemes;
//! - [`render`]: completes the collected document for this configuration: each operation's
//!   security as configured (a route open because API auth is disabled declares none), and
//!   the error statuses every operation of its kind can answer (401, 400/408/413/415/422 for a
//!   body, 422 for parameters, 503 for routes that reach the database), all with the problem
//!   schema. Statuses a route documents itself keep its own description. It also links each
//!   creating operation's answers to the follow-ups that take the new id (`FOLLOW_UPS`).
//!
//! The top of the crate's module graph: it reads the routes ([`crate::routes::router`]), and
//! nothing but `app` reads it.

use serde_json::{json, Map, Value};
use utoipa::openapi::link::Link;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::RefOr;
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;

use crate::error::{Problem, PROBLEM_JSON};
use crate::routes::bodies::ItemRequest;
use crate::routes::lists::{StatusFilter, TransferStatusFilter};
use crate::routes::moves::PlaceBody;
use crate::routes::orders::ReserveItemRequest;
use crate::routes::returns::ReturnItemBody;
use crate::state::AppState;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "saldo",
        description = "Sell the last unit exactly once and move money without deadlocks, on PostgreSQL. \
                       Errors are RFC 9457 problem documents with a stable `type` per kind."
    ),
    components(schemas(
        Problem,
        ItemRequest,
        PlaceBody,
        ReserveItemRequest,
        ReturnItemBody,
        StatusFilter,
        TransferStatusFilter
    )),
    modifiers(&BearerSchemes),
    tags(
        (name = "stock", description = "Products and their stock"),
        (name = "orders", description = "Reservations, confirmation and release"),
        (name = "accounts", description = "Accounts and transfers"),
        (name = "events", description = "The event feed: every change in commit-safe order, paged with a cursor or followed live (Server-Sent Events)"),
        (name = "admin", description = "Operator routes (admin token)"),
        (name = "ops", description = "Health, readiness, metrics, this document and its reference page"),
    )
)]
pub struct ApiDoc;

/// Names of the two bearer schemes, as the handlers' `security(...)` name them.
pub const ADMIN_SCHEME: &str = "admin_token";
pub const API_SCHEME: &str = "api_token";

struct BearerSchemes;

impl Modify for BearerSchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for name in [ADMIN_SCHEME, API_SCHEME] {
            components.add_security_scheme(
                name,
                SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
            );
        }
    }
}

/// The document as served, for a service whose API routes need a token (`api_required`) or
/// not; what `app` serves at `/openapi.json`.
pub fn document(api_required: bool) -> Value {
    let (_, api) = OpenApiRouter::<AppState>::with_openapi(ApiDoc::openapi())
        .merge(crate::routes::router())
        .split_for_parts();
    render(&api, api_required)
}

/// Completes the collected document for this configuration (see the module's header).
pub fn render(api: &utoipa::openapi::OpenApi, api_required: bool) -> Value {
    let mut api = api.clone();
    link_follow_ups(&mut api);
    let mut doc = serde_json::to_value(&api).unwrap_or_else(|_| json!({}));
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, item) in paths.iter_mut() {
            let Some(item) = item.as_object_mut() else {
                continue;
            };
            for op in item.values_mut() {
                if let Some(op) = op.as_object_mut() {
                    complete(path, op, api_required);
                    name_link_fields_as_openapi_does(op);
                }
            }
        }
    }
    doc
}

/// What an order's follow-ups are, by operationId (the handlers' names).
const ORDER_FOLLOW_UPS: &[&str] = &[
    "get_order",
    "confirm",
    "release",
    "extend",
    "rereserve",
    "record_return",
];

/// The operations that create something another operation names in its path: (creating
/// operationId, the answer's field holding the new id, the follow-ups' path parameter, the
/// follow-ups' operationIds). Checked against the document by the contract suite.
const FOLLOW_UPS: [(&str, &str, &str, &[&str]); 4] = [
    ("reserve", "order_id", "order_id", ORDER_FOLLOW_UPS),
    ("rereserve", "order_id", "order_id", ORDER_FOLLOW_UPS),
    (
        "transfer",
        "id",
        "id",
        &["get_transfer", "post_transfer", "void_transfer"],
    ),
    (
        "create_webhook",
        "id",
        "id",
        &[
            "get_webhook",
            "delete_webhook",
            "resume_webhook",
            "list_webhook_deliveries",
        ],
    ),
];

/// Adds OpenAPI `links` from each creating operation's success answers (201, and the 200 of a
/// replay) to its follow-ups, passing the id from the answer's body (`$response.body#/...`):
/// clients and schemathesis's stateful phase learn which call comes next and with which id
/// (without them schemathesis calls confirm, post, ... with made-up ids and meets 404s). Here,
/// as one table, rather than as `links(...)` in the routes' `responses`, where the same links
/// would be repeated on every success status of every creating route.
fn link_follow_ups(api: &mut utoipa::openapi::OpenApi) {
    for item in api.paths.paths.values_mut() {
        let ops = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
        ];
        for op in ops.into_iter().flatten() {
            let creates = FOLLOW_UPS
                .iter()
                .find(|(id, ..)| op.operation_id.as_deref() == Some(*id));
            let Some((_, field, param, targets)) = creates else {
                continue;
            };
            for status in ["201", "200"] {
                let Some(RefOr::T(response)) = op.responses.responses.get_mut(status) else {
                    continue;
                };
                for target in *targets {
                    let link = Link::builder()
                        .operation_id(*target)
                        .parameter(*param, format!("$response.body#/{field}"))
                        .build();
                    response.links.insert((*target).to_owned(), RefOr::T(link));
                }
            }
        }
    }
}

/// utoipa 5.5 serializes a response link's fields in Rust's spelling (`operation_id`,
/// `operation_ref`, `request_body`; its `Link` lacks serde's `camelCase` rename), which no
/// OpenAPI tool reads: a validator refuses the link and schemathesis would not follow it. This
/// renames them to the spelling the specification gives them.
fn name_link_fields_as_openapi_does(op: &mut Map<String, Value>) {
    const RENAMES: [(&str, &str); 3] = [
        ("operation_id", "operationId"),
        ("operation_ref", "operationRef"),
        ("request_body", "requestBody"),
    ];
    let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
        return;
    };
    for response in responses.values_mut() {
        let Some(links) = response.get_mut("links").and_then(Value::as_object_mut) else {
            continue;
        };
        for link in links.values_mut().filter_map(Value::as_object_mut) {
            for (rust, openapi) in RENAMES {
                if let Some(value) = link.remove(rust) {
                    link.insert(openapi.to_owned(), value);
                }
            }
        }
    }
}

fn complete(path: &str, op: &mut Map<String, Value>, api_required: bool) {
    if !api_required && names_scheme(op, API_SCHEME) {
        // The route takes any request: declaring a token (or a 401) would tell clients to
        // send one.
        op.remove("security");
        if let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) {
            responses.remove("401");
        }
    }
    let secured = op
        .get("security")
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty());
    let has_body = op.contains_key("requestBody");
    let has_params = op
        .get("parameters")
        .and_then(Value::as_array)
        .is_some_and(|p| !p.is_empty());
    let mut add: Vec<(&str, &str)> = Vec::new();
    if secured {
        add.push(("401", "Missing or wrong bearer token"));
    }
    if has_body {
        add.extend([
            ("400", "Malformed JSON, or a body that could not be read"),
            (
                "408",
                "The body did not arrive within the body-read timeout",
            ),
            ("413", "Body larger than the limit"),
            ("415", "Not `application/json`"),
            ("422", "JSON of the wrong shape or a value out of range"),
        ]);
    }
    if has_params {
        add.push(("422", "A parameter that does not parse or is out of range"));
    }
    if path.starts_with("/v1/") {
        add.push((
            "503",
            "Not applied: the service is starting, the database is unavailable or busy, or the \
             deadline passed (retry); `outcome-unknown` only for a write whose COMMIT got no \
             answer (replay)",
        ));
    }
    let responses = op
        .entry("responses")
        .or_insert_with(|| json!({}))
        .as_object_mut();
    let Some(responses) = responses else {
        return;
    };
    for (status, description) in add {
        responses
            .entry(status)
            .or_insert_with(|| problem(description));
    }
}

fn names_scheme(op: &Map<String, Value>, scheme: &str) -> bool {
    op.get("security")
        .and_then(Value::as_array)
        .is_some_and(|reqs| reqs.iter().any(|r| r.get(scheme).is_some()))
}

fn problem(description: &str) -> Value {
    json!({
        "description": description,
        "content": { PROBLEM_JSON: { "schema": { "$ref": "#/components/schemas/Problem" } } }
    })
}
