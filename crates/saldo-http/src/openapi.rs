//! The OpenAPI document clients generate from. utoipa collects the paths from the handlers'
//! annotations; this module owns what they share and what is decided once, at start-up:
//!
//! - [`schema`]: the schema of every bounded input, built from the constants the code enforces
//!   (`saldo::domain`, `saldo::listing`, the routes' own limits), so the document cannot drift
//!   from the checks;
//! - [`render`]: completes the collected document for this configuration: each operation's
//!   security as configured (a route open because API auth is disabled declares none), and
//!   the error statuses every operation of its kind can answer (401, 400/408/413/415/422 for a
//!   body, 422 for parameters, 503 for routes that reach the database), all with the problem
//!   schema. Statuses a route documents itself keep its own description. It also links each
//!   creating operation's answers to the follow-ups that take the new id (`FOLLOW_UPS`).

use serde_json::{json, Map, Value};
use utoipa::openapi::link::Link;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::Schema;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{RefOr, Required};
use utoipa::{IntoParams, Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;

use crate::error::Problem;
use crate::routes::lists::StatusFilter;
use crate::routes::orders::{ItemRequest, ReserveItemRequest};
use crate::AppState;

/// Media type of error answers, for the `responses(...)` of every path.
pub(crate) const PROBLEM: &str = "application/problem+json";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "saldo",
        description = "Sell the last unit exactly once and move money without deadlocks, on PostgreSQL. \
                       Errors are RFC 9457 problem documents with a stable `type` per kind."
    ),
    components(schemas(Problem, ItemRequest, ReserveItemRequest, StatusFilter)),
    modifiers(&BearerSchemes),
    tags(
        (name = "stock", description = "Products and their stock"),
        (name = "orders", description = "Reservations, confirmation and release"),
        (name = "accounts", description = "Accounts and transfers"),
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
const ORDER_FOLLOW_UPS: &[&str] = &["get_order", "confirm", "release", "extend", "rereserve"];

/// The operations that create something another operation names in its path: (creating
/// operationId, the answer's field holding the new id, the follow-ups' path parameter, the
/// follow-ups' operationIds). Checked against the document by the contract suite.
const FOLLOW_UPS: [(&str, &str, &str, &[&str]); 3] = [
    ("reserve", "order_id", "order_id", ORDER_FOLLOW_UPS),
    ("rereserve", "order_id", "order_id", ORDER_FOLLOW_UPS),
    (
        "transfer",
        "id",
        "id",
        &["get_transfer", "post_transfer", "void_transfer"],
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
            "Not applied: the database is unavailable or busy, or the deadline passed (retry); \
             `outcome-unknown` only for a write whose COMMIT got no answer (replay)",
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
        "content": { PROBLEM: { "schema": { "$ref": "#/components/schemas/Problem" } } }
    })
}

/// Path parameters, for the document only: handlers take them with `ApiPath<i64>` /
/// `ApiPath<String>` and check them through the domain newtypes. Written by hand because
/// utoipa's derive drops `required` for a field whose schema is `schema_with`.
pub struct ProductPath;
pub struct AccountPath;
pub struct OrderPath;
pub struct LocationPath;
pub struct ProductLocationPath;

impl IntoParams for LocationPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        path_param("location_id", schema::location_id())
    }
}

impl IntoParams for ProductLocationPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let mut params = path_param("product_id", schema::product_id());
        params.extend(path_param("location_id", schema::location_id()));
        params
    }
}

fn path_param(name: &str, schema: Schema) -> Vec<Parameter> {
    vec![ParameterBuilder::new()
        .name(name)
        .parameter_in(ParameterIn::Path)
        .required(Required::True)
        .schema(Some(schema))
        .build()]
}

impl IntoParams for ProductPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        path_param("product_id", schema::product_id())
    }
}

impl IntoParams for AccountPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        path_param("id", schema::account_id())
    }
}

impl IntoParams for OrderPath {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        path_param("order_id", schema::order_id())
    }
}

/// Schemas of bounded inputs, each built from the constant the code checks.
pub mod schema {
    use saldo::domain::{
        MAX_AMOUNT, MAX_BACKORDER_LIMIT, MAX_ITEMS_PER_ORDER, MAX_LIMIT, MAX_ORDER_ID_LEN,
        MAX_PRIORITY, MAX_QUANTITY, MAX_REASON_LEN, MAX_STOCK_COUNT, MAX_TRANSFER_TIMEOUT_S,
        MAX_TTL_S, MIN_TRANSFER_TIMEOUT_S, MIN_TTL_S,
    };
    use saldo::ledger::{MAX_LIST, OPENING_PREFIX};
    use saldo::listing::{ListKind, MAX_PAGE_LIMIT};
    use utoipa::openapi::schema::{
        Array, KnownFormat, Object, ObjectBuilder, OneOf, Ref, Schema, SchemaFormat, SchemaType,
        Type,
    };

    use crate::metrics::MAX_TOP;

    /// The id alphabet of order, transfer and re-reserve ids (`saldo::domain::valid_token`).
    pub fn id_pattern() -> String {
        format!("^[A-Za-z0-9._:-]{{1,{MAX_ORDER_ID_LEN}}}$")
    }

    fn integer(min: i64, max: i64, nullable: bool, description: &str) -> ObjectBuilder {
        let kind = if nullable {
            SchemaType::from_iter([Type::Integer, Type::Null])
        } else {
            SchemaType::Type(Type::Integer)
        };
        Object::builder()
            .schema_type(kind)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
            .minimum(Some(min))
            .maximum(Some(max))
            .description(Some(description))
    }

    fn string(pattern: String, max_len: usize, description: &str) -> Schema {
        string_of(pattern, 1, max_len, description, None)
    }

    fn string_of(
        pattern: String,
        min_len: usize,
        max_len: usize,
        description: &str,
        example: Option<&str>,
    ) -> Schema {
        Object::builder()
            .schema_type(Type::String)
            .min_length(Some(min_len))
            .max_length(Some(max_len))
            .pattern(Some(pattern))
            .description(Some(description))
            .examples(example)
            .build()
            .into()
    }

    // Examples name the fixtures `.ci/contract` creates (product 1, accounts 1 and 2), so
    // schemathesis's example phase reaches past "unknown product" into the real work.

    pub fn product_id() -> Schema {
        integer(1, i64::MAX, false, "Product id (> 0)")
            .examples([1])
            .build()
            .into()
    }

    const ACCOUNT_ID: &str = "Account id (> 0; 0 is the ledger's system account)";

    pub fn account_id() -> Schema {
        integer(1, i64::MAX, false, ACCOUNT_ID)
            .examples([1])
            .build()
            .into()
    }

    /// An account id whose example differs from [`account_id`]'s, for a transfer's `to`.
    pub fn other_account_id() -> Schema {
        integer(1, i64::MAX, false, ACCOUNT_ID)
            .examples([2])
            .build()
            .into()
    }

    fn id(description: &str, example: &str) -> Schema {
        string_of(
            id_pattern(),
            1,
            MAX_ORDER_ID_LEN,
            description,
            Some(example),
        )
    }

    pub fn order_id() -> Schema {
        id(
            "Order id: the idempotency key of its reservation",
            "order-1",
        )
    }

    pub fn sale_id() -> Schema {
        id("Sale id: the idempotency key of a direct sale", "sale-1")
    }

    pub fn rereserve_id() -> Schema {
        id("This re-reserve's own idempotency key", "order-1-again")
    }

    /// Transfer ids share the order id alphabet; the ledger keeps `opening:` for itself.
    pub fn transfer_id() -> Schema {
        string_of(
            format!("^(?!{OPENING_PREFIX})[A-Za-z0-9._:-]{{1,{MAX_ORDER_ID_LEN}}}$"),
            1,
            MAX_ORDER_ID_LEN,
            "The idempotency key (shared by transfers, deposits and withdrawals); may not \
             start with `opening:`",
            Some("pay-1"),
        )
    }

    pub fn quantity() -> Schema {
        integer(
            1,
            i64::from(MAX_QUANTITY),
            false,
            "Units; a product repeated in one order is summed, and the sum has the same limit",
        )
        .examples([1])
        .build()
        .into()
    }

    pub fn location_id() -> Schema {
        id("Location id (a warehouse, a store)", "north")
    }

    /// A reservation item's location: the id, or null/absent for "saldo allocates".
    pub fn item_location_id() -> Schema {
        Object::builder()
            .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
            .min_length(Some(1))
            .max_length(Some(MAX_ORDER_ID_LEN))
            .pattern(Some(id_pattern()))
            .description(Some(
                "Take this item only from this location (products stocked per location);                  absent or null: saldo allocates",
            ))
            .build()
            .into()
    }

    pub fn allocation() -> Schema {
        Object::builder()
            .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
            .enum_values(Some(["single", "split"]))
            .description(Some(
                "How items without a location are allocated across a product's locations                  (lower priority first, then by id): `single` takes each item from the first                  location that has enough, `split` (the default: absent or null) fills from                  locations in order",
            ))
            .build()
            .into()
    }

    pub fn priority() -> Schema {
        integer(
            -i64::from(MAX_PRIORITY),
            i64::from(MAX_PRIORITY),
            false,
            "Allocation order: lower first, ties by location id",
        )
        .examples([0])
        .build()
        .into()
    }

    pub fn reserve_items() -> Schema {
        let mut array = Array::new(Ref::from_schema_name("ReserveItemRequest"));
        array.min_items = Some(1);
        array.max_items = Some(MAX_ITEMS_PER_ORDER);
        array.description = Some(
            "The order's lines; a product named twice is summed, and may not name two              different locations"
                .to_owned(),
        );
        array.into()
    }

    fn items_array(nullable: bool, description: &str) -> Schema {
        let items = Ref::from_schema_name("ItemRequest");
        let array = if nullable {
            Array::new_nullable(items)
        } else {
            Array::new(items)
        };
        let mut array = array;
        array.min_items = Some(1);
        array.max_items = Some(MAX_ITEMS_PER_ORDER);
        array.description = Some(description.to_owned());
        array.into()
    }

    pub fn items() -> Schema {
        items_array(false, "The order's lines")
    }

    pub fn rereserve_items() -> Schema {
        items_array(
            true,
            "Which lost products and how many; every product the order lost, with its \
             quantity, when absent or null",
        )
    }

    pub fn ttl_s() -> Schema {
        let max = i64::try_from(MAX_TTL_S).unwrap_or(i64::MAX);
        let min = i64::try_from(MIN_TTL_S).unwrap_or(1);
        integer(
            min,
            max,
            true,
            "Reservation lifetime in seconds; the server's default when absent or null",
        )
        .build()
        .into()
    }

    pub fn extend_ttl_s() -> Schema {
        let max = i64::try_from(MAX_TTL_S).unwrap_or(i64::MAX);
        let min = i64::try_from(MIN_TTL_S).unwrap_or(1);
        integer(
            min,
            max,
            false,
            "Seconds from now until the hold lapses; the server's maximum hold since the \
             reservation was made still applies (422 `hold-limit`)",
        )
        .build()
        .into()
    }

    pub fn amount() -> Schema {
        integer(1, MAX_AMOUNT, false, "Minor units (e.g. cents)")
            .examples([100])
            .build()
            .into()
    }

    pub fn opening_balance() -> Schema {
        integer(
            0,
            MAX_AMOUNT,
            false,
            "Minor units moved from the system account; within the account's own \
             min_balance ..= max_balance",
        )
        .build()
        .into()
    }

    pub fn min_balance() -> Schema {
        integer(
            -MAX_LIMIT,
            MAX_LIMIT,
            false,
            "`balance - held` may not go below it: 0 (the default) allows no overdraft, a \
             negative value is a credit line",
        )
        .build()
        .into()
    }

    pub fn max_balance() -> Schema {
        integer(
            -MAX_LIMIT,
            MAX_LIMIT,
            true,
            "`balance + pending_credits` may not go above it; absent or null: no ceiling",
        )
        .build()
        .into()
    }

    pub fn transfer_timeout_s() -> Schema {
        integer(
            i64::from(MIN_TRANSFER_TIMEOUT_S),
            i64::from(MAX_TRANSFER_TIMEOUT_S),
            true,
            "Seconds the hold lives (only with `pending`); the service's --transfer-timeout \
             when absent or null",
        )
        .build()
        .into()
    }

    pub fn post_amount() -> Schema {
        integer(
            1,
            MAX_AMOUNT,
            true,
            "Minor units, at most the held amount; absent or null: the whole amount (the rest \
             is released)",
        )
        .build()
        .into()
    }

    pub fn count() -> Schema {
        integer(
            0,
            i64::from(MAX_STOCK_COUNT),
            false,
            "On-hand units (available + reserved)",
        )
        .build()
        .into()
    }

    pub fn backorder_limit() -> Schema {
        integer(
            0,
            i64::from(MAX_BACKORDER_LIMIT),
            false,
            "Most units that may be backordered at once (0: none). Not below the units \
             backordered now (409 `backorder-limit-below-backordered`)",
        )
        .build()
        .into()
    }

    /// Non-zero, bounded in magnitude: two ranges, as JSON Schema has no "not zero" of its own
    /// that generators handle well.
    pub fn delta() -> Schema {
        let max = i64::from(MAX_STOCK_COUNT);
        let mut one_of = OneOf::new();
        one_of
            .items
            .push(integer(-max, -1, false, "A write-off").build().into());
        one_of
            .items
            .push(integer(1, max, false, "A restock").build().into());
        one_of.description = Some("Restock (> 0) or write-off (< 0); never 0".into());
        one_of.into()
    }

    /// Any characters but control characters (Unicode category Cc), as `saldo::domain::Reason`.
    pub fn reason() -> Schema {
        string(
            format!("^[^\\u0000-\\u001F\\u007F-\\u009F]{{1,{MAX_REASON_LEN}}}$"),
            MAX_REASON_LEN,
            "Why; no control characters",
        )
    }

    pub fn page_limit() -> Schema {
        integer(
            1,
            i64::from(MAX_PAGE_LIMIT),
            false,
            "Rows per page (default 100)",
        )
        .build()
        .into()
    }

    fn cursor(kind: ListKind) -> Schema {
        let min_len = match kind {
            ListKind::Orders => 2,
            ListKind::Products | ListKind::Accounts => kind.cursor_max_len(),
        };
        string_of(
            kind.cursor_pattern(),
            min_len,
            kind.cursor_max_len(),
            "Opaque: the `next_cursor` of the previous page, unchanged",
            None,
        )
    }

    pub fn products_cursor() -> Schema {
        cursor(ListKind::Products)
    }

    pub fn accounts_cursor() -> Schema {
        cursor(ListKind::Accounts)
    }

    pub fn orders_cursor() -> Schema {
        cursor(ListKind::Orders)
    }

    pub fn transfers_limit() -> Schema {
        integer(1, MAX_LIST, false, "How many transfers (default 50)")
            .build()
            .into()
    }

    pub fn top() -> Schema {
        integer(
            1,
            i64::try_from(MAX_TOP).unwrap_or(i64::MAX),
            false,
            "How many products (default 10)",
        )
        .build()
        .into()
    }
}
