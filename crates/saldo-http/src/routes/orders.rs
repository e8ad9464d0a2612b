//! Order routes: reserve every item of an order or none, re-reserve what it lost, extend its
//! hold, confirm, release, read. A replayed reservation or re-reserve answers 200 with the order's current
//! state and `"replayed": true` instead of 201, whatever happened to the order since: the order
//! id (and a re-reserve's `rereserve_id`) is an idempotency key for good.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

use saldo::domain::{
    AllocationMode, InputError, Lines, LocationId, OrderId, OrderItems, ProductId, RequestKey, Ttl,
    MAX_TTL_S, MIN_TTL_S,
};
use saldo::stock::{Placement, RereserveRequest, Reservation, ReserveRequest, ReservedItem};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::bodies::{order_items, shown_tags, tags, ItemRequest};
use super::extract::{ApiJson, ApiPath, OptionalJson};
use super::params::OrderPath;
use super::schema;
use super::task::detached;
use super::views::ItemStatus;
use crate::auth::Client;
use crate::error::{ApiError, Problem, PROBLEM_JSON};
use crate::state::AppState;

/// One line of a reservation: a location may be named (take only from there).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReserveItemRequest {
    #[schema(schema_with = schema::product_id)]
    #[serde(deserialize_with = "super::numbers::i64")]
    pub product_id: i64,
    #[schema(schema_with = schema::quantity)]
    #[serde(deserialize_with = "super::numbers::i64")]
    pub quantity: i64,
    /// Take this item only from this location (products stocked per location).
    #[serde(default)]
    #[schema(schema_with = schema::item_location_id)]
    pub location_id: Option<String>,
}

/// How items without a location are allocated across a product's locations.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Allocation {
    /// Each item from one location: the first by priority that has enough.
    Single,
    /// Fill from locations in priority order (the default).
    Split,
}

/// Reserve every item of an order, or none.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReserveBody {
    #[schema(schema_with = schema::order_id)]
    pub order_id: String,
    #[schema(schema_with = schema::reserve_items)]
    pub items: Vec<ReserveItemRequest>,
    /// `split` when absent. Only products stocked per location look at it.
    #[serde(default)]
    #[schema(schema_with = schema::allocation)]
    pub allocation: Option<Allocation>,
    #[serde(default, deserialize_with = "super::numbers::opt_u64")]
    #[schema(schema_with = schema::ttl_s)]
    pub ttl_s: Option<u64>,
    /// The caller's id for the order (a cart, a checkout, a payment): kept with the order,
    /// shown in every answer about it, searchable (`GET /v1/orders?reference=`) and part of the
    /// idempotency comparison.
    #[serde(default)]
    #[schema(schema_with = schema::reference)]
    pub reference: Option<String>,
    #[serde(default)]
    #[schema(schema_with = schema::metadata)]
    pub metadata: Option<serde_json::Value>,
}

/// Take again what an order lost (expired or released before payment), all or nothing.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RereserveBody {
    /// Sending it again answers what it did and takes nothing more.
    #[schema(schema_with = schema::rereserve_id)]
    pub rereserve_id: String,
    #[serde(default)]
    #[schema(schema_with = schema::rereserve_items)]
    pub items: Option<Vec<ItemRequest>>,
    #[serde(default, deserialize_with = "super::numbers::opt_u64")]
    #[schema(schema_with = schema::ttl_s)]
    pub ttl_s: Option<u64>,
}

/// Extend an order's hold: its active reservations expire `ttl_s` from now.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtendBody {
    #[serde(deserialize_with = "super::numbers::i64")]
    #[schema(schema_with = schema::extend_ttl_s)]
    pub ttl_s: i64,
}

/// Which lines of the order a confirm or release acts on (the body is optional: without it,
/// the whole order).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LinesBody {
    /// Absent or null: the whole order.
    #[serde(default)]
    #[schema(schema_with = schema::product_ids)]
    pub product_ids: Option<Vec<super::numbers::Int>>,
}

/// The named lines, or `None` (no body, no `product_ids`: the whole order).
fn lines(body: Option<LinesBody>) -> Result<Option<Lines>, ApiError> {
    Ok(body
        .and_then(|b| b.product_ids)
        .map(|ids| Lines::new(ids.into_iter().map(|i| i.0)))
        .transpose()?)
}

/// Units of one item taken at one location.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AllocationView {
    pub location_id: String,
    pub quantity: i32,
}

/// One product's reservation.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ItemView {
    pub product_id: i64,
    pub quantity: i32,
    pub status: ItemStatus,
    pub expires_at: DateTime<Utc>,
    /// Of `quantity`, the units backordered (not on hand yet; filled oldest first when units
    /// arrive). Absent when 0: a product without a backorder policy answers as before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backordered: Option<i32>,
    /// Where the units came from, by location id: products stocked per location only (absent
    /// for the others, so their answers are what they always were).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(required = false)]
    pub allocations: Vec<AllocationView>,
    /// Of a confirmed line's units, those that came back (`POST …/returns`). Absent when 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub returned: Option<i32>,
}

impl AllocationView {
    /// The views of `parts`, in their order.
    pub(super) fn all(parts: &[saldo::stock::model::LocationQuantity]) -> Vec<AllocationView> {
        parts
            .iter()
            .map(|a| AllocationView {
                location_id: a.location_id.as_str().to_owned(),
                quantity: a.quantity,
            })
            .collect()
    }
}

impl From<&ReservedItem> for ItemView {
    fn from(i: &ReservedItem) -> Self {
        ItemView {
            product_id: i.product_id.get(),
            quantity: i.quantity,
            status: i.status.into(),
            expires_at: i.expires_at,
            backordered: (i.backordered > 0).then_some(i.backordered),
            returned: (i.returned > 0).then_some(i.returned),
            allocations: AllocationView::all(&i.allocations),
        }
    }
}

/// Units a confirmed order still waits for (its backorder).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PendingView {
    pub product_id: i64,
    pub quantity: i32,
}

fn views(items: &[ReservedItem]) -> Vec<ItemView> {
    items.iter().map(ItemView::from).collect()
}

/// A reservation as `POST /v1/reservations` answers it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReservationView {
    pub order_id: String,
    /// `active` while any item is held; else `confirmed` if any item was sold; else `released`
    /// if any was released; else `expired`.
    pub status: ItemStatus,
    /// Per product, its latest reservation row, with its real status.
    pub items: Vec<ItemView>,
    /// When the first item lapses unless confirmed.
    pub expires_at: DateTime<Utc>,
    /// True when this request had been made before: nothing was taken now.
    pub replayed: bool,
    /// The order's reference, as its first request gave it.
    pub reference: Option<String>,
    /// The order's metadata, as its first request gave it.
    #[schema(value_type = Option<std::collections::BTreeMap<String, String>>)]
    pub metadata: Option<serde_json::Value>,
}

/// What a confirm did.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConfirmView {
    pub order_id: String,
    pub confirmed: Vec<ItemView>,
    /// Items that expired or were released before the confirm: re-reserve or refund them.
    pub missing: Vec<ItemView>,
    /// Backordered units of the confirmed items: sold, shipped when they arrive (nothing to
    /// re-reserve or refund). Absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingView>,
}

/// What a release did.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReleaseView {
    pub order_id: String,
    pub released: Vec<ItemView>,
}

/// Every reservation row of an order.
#[derive(Debug, Serialize, ToSchema)]
pub struct OrderView {
    pub order_id: String,
    /// From every row: `active` while any is held; else `confirmed` if any was sold; else
    /// `released` if any was released; else `expired`. What `GET /v1/orders` says of the order.
    pub status: ItemStatus,
    pub items: Vec<ItemView>,
    /// The order's reference, as its first request gave it.
    pub reference: Option<String>,
    /// The order's metadata, as its first request gave it.
    #[schema(value_type = Option<std::collections::BTreeMap<String, String>>)]
    pub metadata: Option<serde_json::Value>,
}

/// The reservation's items and where they may come from. A product named twice is summed (as
/// always); naming it with two different locations is refused.
pub(super) fn reserve_items(
    items: &[ReserveItemRequest],
    allocation: Option<Allocation>,
) -> Result<(OrderItems, Placement), ApiError> {
    let order = OrderItems::new(items.iter().map(|i| (i.product_id, i.quantity)))?;
    let mut pinned: BTreeMap<ProductId, LocationId> = BTreeMap::new();
    for item in items {
        let Some(raw) = &item.location_id else {
            continue;
        };
        let location = LocationId::new(raw.as_str())?;
        let product = ProductId::new(item.product_id)?;
        if pinned
            .insert(product, location.clone())
            .is_some_and(|l| l != location)
        {
            return Err(InputError::LocationConflict(item.product_id).into());
        }
    }
    // An item without a location next to one with: the product is pinned only if all are.
    for item in items {
        if item.location_id.is_none() {
            if let Ok(product) = ProductId::new(item.product_id) {
                if pinned.contains_key(&product) {
                    return Err(InputError::LocationConflict(item.product_id).into());
                }
            }
        }
    }
    let allocation = match allocation {
        Some(Allocation::Single) => AllocationMode::Single,
        Some(Allocation::Split) | None => AllocationMode::Split,
    };
    Ok((order, Placement { allocation, pinned }))
}

fn order_id(raw: String) -> Result<OrderId, ApiError> {
    Ok(OrderId::new(raw)?)
}

/// Reserve every item of an order or none.
#[utoipa::path(post, path = "/v1/reservations", tag = "orders",
    request_body = ReserveBody,
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 201, description = "Reserved", body = ReservationView),
        (status = 200, description = "Replay of an existing reservation (`replayed: true`)", body = ReservationView),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown product (`unknown-product`, `product_id`) or a location the product is not stocked at (`unknown-location`, `product_id`, `location_id`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "Insufficient stock (`product_id`; at the named location, in one location for `single`, in all for `split`) or idempotency conflict (the order was reserved with other items, reference or metadata)", body = Problem, content_type = PROBLEM_JSON),
        (status = 413, description = "Body too large", body = Problem, content_type = PROBLEM_JSON),
        (status = 415, description = "Not JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid input (a product named with two different locations included)", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "Not applied (deadline, contention, database unavailable; retry) or outcome unknown (replay)", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn reserve(
    _: Client,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<ReserveBody>,
) -> Result<(StatusCode, Json<ReservationView>), ApiError> {
    let order_id = order_id(body.order_id)?;
    crate::access_log::note_order_id(&order_id);
    let (items, placement) = reserve_items(&body.items, body.allocation)?;
    let ttl = ttl_or_default(&state, body.ttl_s)?;
    let request = ReserveRequest {
        order_id,
        items,
        ttl,
        tags: tags(body.reference, body.metadata)?,
    };
    let stock = state.stock.clone();
    let reservation =
        detached(async move { stock.reserve_placed(&request, &placement).await }).await;
    reservation_response(&state, reservation)
}

fn ttl_or_default(state: &AppState, ttl_s: Option<u64>) -> Result<Ttl, ApiError> {
    let ttl = match ttl_s {
        Some(s) => Ttl::from_secs(s)?,
        None => state.settings.default_ttl,
    };
    debug_assert!((MIN_TTL_S..=MAX_TTL_S).contains(&ttl.as_duration().as_secs()));
    Ok(ttl)
}

/// 201 with the order's state when units were taken, 200 for a replay; refusals counted.
fn reservation_response(
    state: &AppState,
    outcome: Result<Reservation, ApiError>,
) -> Result<(StatusCode, Json<ReservationView>), ApiError> {
    let reservation = outcome.inspect_err(|e| state.note_refusal(e))?;
    let items = views(&reservation.items);
    let status = ItemStatus::of_order(items.iter().map(|i| i.status));
    let expires_at = items
        .iter()
        .map(|i| i.expires_at)
        .min()
        .ok_or_else(|| ApiError::Internal("a reservation without items".into()))?;
    let code = if reservation.replayed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let (reference, metadata) = shown_tags(reservation.tags);
    Ok((
        code,
        Json(ReservationView {
            order_id: reservation.order_id.as_str().to_owned(),
            status,
            items,
            expires_at,
            replayed: reservation.replayed,
            reference,
            metadata,
        }),
    ))
}

/// Re-reserve what an order lost (expired or released), all or nothing; idempotent by
/// `rereserve_id`.
#[utoipa::path(post, path = "/v1/orders/{order_id}/rereserve", tag = "orders",
    params(OrderPath),
    request_body = RereserveBody,
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 201, description = "Re-reserved: the order's current state", body = ReservationView),
        (status = 200, description = "Replay of this re-reserve (`replayed: true`): nothing taken", body = ReservationView),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown order or product", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "Insufficient stock, nothing to re-reserve, a product still held or not in the order, or the same `rereserve_id` with other items", body = Problem, content_type = PROBLEM_JSON),
        (status = 413, description = "Body too large", body = Problem, content_type = PROBLEM_JSON),
        (status = 415, description = "Not JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid input", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "Not applied (deadline, contention, database unavailable; retry) or outcome unknown (replay)", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn rereserve(
    _: Client,
    State(state): State<AppState>,
    ApiPath(raw): ApiPath<String>,
    ApiJson(body): ApiJson<RereserveBody>,
) -> Result<(StatusCode, Json<ReservationView>), ApiError> {
    let request = RereserveRequest {
        order_id: order_id(raw)?,
        rereserve_id: RequestKey::new(body.rereserve_id)?,
        items: body.items.as_deref().map(order_items).transpose()?,
        ttl: ttl_or_default(&state, body.ttl_s)?,
    };
    let stock = state.stock.clone();
    let reservation = detached(async move { stock.rereserve(&request).await }).await;
    reservation_response(&state, reservation)
}

/// What an extension did.
#[derive(Debug, Serialize, ToSchema)]
pub struct ExtendView {
    pub order_id: String,
    /// The order's active items with their new expiry.
    pub extended: Vec<ItemView>,
    /// When the hold now lapses unless confirmed or extended again.
    pub expires_at: DateTime<Utc>,
}

/// Extend an order's hold (a slow payment): its active reservations expire `ttl_s` from now,
/// never past the server's maximum hold (`serve --max-hold`, default 24 h) since each was
/// made. Races the sweeper with exactly one winner: what already expired stays expired (409
/// `reservation-expired`; re-reserve it). All or nothing; same answer under every strategy.
#[utoipa::path(post, path = "/v1/orders/{order_id}/extend", tag = "orders",
    params(OrderPath),
    request_body = ExtendBody,
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "Extended: the active items with their new expiry", body = ExtendView),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown order", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "The hold already expired (`reservation-expired`: the sweeper won; re-reserve) or nothing is active (`nothing-to-extend`: confirmed or released)", body = Problem, content_type = PROBLEM_JSON),
        (status = 413, description = "Body too large", body = Problem, content_type = PROBLEM_JSON),
        (status = 415, description = "Not JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid input, or `ttl_s` would hold past the maximum hold (`hold-limit`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "Not applied (deadline, contention, database unavailable; retry) or outcome unknown (send it again: an extension is idempotent in effect)", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn extend(
    _: Client,
    State(state): State<AppState>,
    ApiPath(raw): ApiPath<String>,
    ApiJson(body): ApiJson<ExtendBody>,
) -> Result<Json<ExtendView>, ApiError> {
    let order_id = order_id(raw)?;
    // A negative count of seconds is out of range like zero is (the same 422).
    let ttl = Ttl::from_secs(u64::try_from(body.ttl_s).unwrap_or(0))?;
    let (stock, max_hold) = (state.stock.clone(), state.settings.max_hold);
    let outcome = detached(async move { stock.extend(&order_id, ttl, max_hold).await }).await?;
    let extended = views(&outcome.extended);
    let expires_at = extended
        .iter()
        .map(|i| i.expires_at)
        .min()
        .ok_or_else(|| ApiError::Internal("an extension without items".into()))?;
    Ok(Json(ExtendView {
        order_id: outcome.order_id.as_str().to_owned(),
        extended,
        expires_at,
    }))
}

/// Confirm an order's active reservations (payment arrived), or only the lines named in
/// `product_ids` (the answer is then about those lines). Idempotent.
#[utoipa::path(post, path = "/v1/orders/{order_id}/confirm", tag = "orders",
    params(OrderPath),
    request_body(content = Option<LinesBody>, description = "Optional: the lines to confirm; without a body, the whole order"),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "What was confirmed and what was missing (a named line released or expired before is missing, with its status)", body = ConfirmView),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown order (`unknown-order`), or a named product the order has no line of (`not-in-order`, `product_id`): nothing confirmed", body = Problem, content_type = PROBLEM_JSON),
        (status = 413, description = "Body too large", body = Problem, content_type = PROBLEM_JSON),
        (status = 415, description = "Not JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid order id or `product_ids` (empty, over 100, a product named twice)", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "Not applied (deadline, contention, database unavailable; retry) or outcome unknown (replay)", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn confirm(
    _: Client,
    State(state): State<AppState>,
    ApiPath(raw): ApiPath<String>,
    OptionalJson(body): OptionalJson<LinesBody>,
) -> Result<Json<ConfirmView>, ApiError> {
    let (stock, order_id) = (state.stock.clone(), order_id(raw)?);
    let lines = lines(body)?;
    let outcome =
        detached(async move { stock.confirm_lines(&order_id, lines.as_ref()).await }).await?;
    Ok(Json(ConfirmView {
        order_id: outcome.order_id.as_str().to_owned(),
        confirmed: views(&outcome.confirmed),
        missing: views(&outcome.missing),
        pending: outcome
            .pending
            .iter()
            .map(|p| PendingView {
                product_id: p.product_id.get(),
                quantity: p.quantity,
            })
            .collect(),
    }))
}

/// Release an order's active reservations (cancel), or only the lines named in `product_ids`.
/// Idempotent.
#[utoipa::path(post, path = "/v1/orders/{order_id}/release", tag = "orders",
    params(OrderPath),
    request_body(content = Option<LinesBody>, description = "Optional: the lines to release; without a body, the whole order"),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "What was released", body = ReleaseView),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown order (`unknown-order`), or a named product the order has no line of (`not-in-order`, `product_id`): nothing released", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "`order-not-releasable`: a named line is sold or expired, or (without a body) no line of the order is left to release (`reservation_status` names the state); nothing released", body = Problem, content_type = PROBLEM_JSON),
        (status = 413, description = "Body too large", body = Problem, content_type = PROBLEM_JSON),
        (status = 415, description = "Not JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid order id or `product_ids` (empty, over 100, a product named twice)", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "Not applied (deadline, contention, database unavailable; retry) or outcome unknown (replay)", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn release(
    _: Client,
    State(state): State<AppState>,
    ApiPath(raw): ApiPath<String>,
    OptionalJson(body): OptionalJson<LinesBody>,
) -> Result<Json<ReleaseView>, ApiError> {
    let (stock, order_id) = (state.stock.clone(), order_id(raw)?);
    let lines = lines(body)?;
    let outcome =
        detached(async move { stock.release_lines(&order_id, lines.as_ref()).await }).await?;
    Ok(Json(ReleaseView {
        order_id: outcome.order_id.as_str().to_owned(),
        released: views(&outcome.released),
    }))
}

/// Read an order's reservations with their status and expiry.
#[utoipa::path(get, path = "/v1/orders/{order_id}", tag = "orders",
    params(OrderPath),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "The order's status and its reservation rows", body = OrderView),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown order", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid order id", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn get_order(
    _: Client,
    State(state): State<AppState>,
    ApiPath(raw): ApiPath<String>,
) -> Result<Json<OrderView>, ApiError> {
    let (stock, order_id) = (state.stock.clone(), order_id(raw)?);
    let id = order_id.clone();
    let (items, tags) = detached(async move { stock.order_with_tags(&id).await }).await?;
    let items = views(&items);
    let (reference, metadata) = shown_tags(tags);
    Ok(Json(OrderView {
        order_id: order_id.as_str().to_owned(),
        status: ItemStatus::of_order(items.iter().map(|i| i.status)),
        items,
        reference,
        metadata,
    }))
}
