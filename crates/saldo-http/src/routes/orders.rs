//! Order routes: reserve every item of an order or none, confirm, release, read. A replayed
//! reservation answers 200 with the original body and `"replayed": true` instead of 201.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use saldo::domain::{OrderId, OrderItems, Ttl, MAX_TTL_S, MIN_TTL_S};
use saldo::stock::{ReserveRequest, ReservedItem, Status};
use saldo::Error;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{detached, ApiJson, ApiPath, PROBLEM};
use crate::auth::Client;
use crate::error::{ApiError, Problem};
use crate::AppState;

/// One line of an order.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ItemRequest {
    /// > 0
    pub product_id: i64,
    /// 1..=10000 (after summing repeated products)
    pub quantity: i64,
}

/// Reserve every item of an order, or none.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReserveBody {
    /// 1-64 characters from `[A-Za-z0-9._:-]`; the idempotency key.
    pub order_id: String,
    /// 1..=100 items.
    pub items: Vec<ItemRequest>,
    /// Reservation lifetime in seconds, 1..=86400; the server's default when absent.
    #[serde(default)]
    pub ttl_s: Option<u64>,
}

/// Status of a reservation row.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ItemStatus {
    Active,
    Confirmed,
    Released,
    Expired,
}

impl From<Status> for ItemStatus {
    fn from(s: Status) -> Self {
        match s {
            Status::Active => ItemStatus::Active,
            Status::Confirmed => ItemStatus::Confirmed,
            Status::Released => ItemStatus::Released,
            Status::Expired => ItemStatus::Expired,
        }
    }
}

/// One product's reservation.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ItemView {
    pub product_id: i64,
    pub quantity: i32,
    pub status: ItemStatus,
    pub expires_at: DateTime<Utc>,
}

impl From<&ReservedItem> for ItemView {
    fn from(i: &ReservedItem) -> Self {
        ItemView {
            product_id: i.product_id.get(),
            quantity: i.quantity,
            status: i.status.into(),
            expires_at: i.expires_at,
        }
    }
}

fn views(items: &[ReservedItem]) -> Vec<ItemView> {
    items.iter().map(ItemView::from).collect()
}

/// A reservation as `POST /v1/reservations` answers it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReservationView {
    pub order_id: String,
    /// `active`, or `confirmed` when a replay finds the order already paid.
    pub status: ItemStatus,
    pub items: Vec<ItemView>,
    /// When the first item lapses unless confirmed.
    pub expires_at: DateTime<Utc>,
    /// True when this request matched an existing reservation and changed nothing.
    pub replayed: bool,
}

/// What a confirm did.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConfirmView {
    pub order_id: String,
    pub confirmed: Vec<ItemView>,
    /// Items that expired or were released before the confirm: re-reserve or refund them.
    pub missing: Vec<ItemView>,
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
    pub items: Vec<ItemView>,
}

fn order_id(raw: String) -> Result<OrderId, ApiError> {
    Ok(OrderId::new(raw)?)
}

/// Reserve every item of an order or none.
#[utoipa::path(post, path = "/v1/reservations", tag = "orders",
    request_body = ReserveBody,
    security((), ("api_token" = [])),
    responses(
        (status = 201, description = "Reserved", body = ReservationView),
        (status = 200, description = "Replay of an existing reservation (`replayed: true`)", body = ReservationView),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = PROBLEM),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM),
        (status = 404, description = "Unknown product (`product_id`)", body = Problem, content_type = PROBLEM),
        (status = 409, description = "Insufficient stock (`product_id`) or idempotency conflict", body = Problem, content_type = PROBLEM),
        (status = 413, description = "Body too large", body = Problem, content_type = PROBLEM),
        (status = 415, description = "Not JSON", body = Problem, content_type = PROBLEM),
        (status = 422, description = "Invalid input", body = Problem, content_type = PROBLEM),
        (status = 503, description = "Contention or database unavailable; retry", body = Problem, content_type = PROBLEM),
    ))]
pub async fn reserve(
    _: Client,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<ReserveBody>,
) -> Result<(StatusCode, Json<ReservationView>), ApiError> {
    let order_id = order_id(body.order_id)?;
    let items = OrderItems::new(body.items.iter().map(|i| (i.product_id, i.quantity)))?;
    let ttl = match body.ttl_s {
        Some(s) => Ttl::from_secs(s)?,
        None => state.settings.default_ttl,
    };
    debug_assert!((MIN_TTL_S..=MAX_TTL_S).contains(&ttl.as_duration().as_secs()));
    let request = ReserveRequest {
        order_id,
        items,
        ttl,
    };
    let stock = state.stock.clone();
    let reservation = match detached(async move { stock.reserve(&request).await }).await {
        Ok(r) => r,
        Err(e) => {
            if let ApiError::Domain(Error::InsufficientStock { product_id, .. }) = &e {
                state.refusals.record(*product_id);
            }
            return Err(e);
        }
    };
    let items = views(&reservation.items);
    let status = if !items.is_empty()
        && items
            .iter()
            .all(|i| matches!(i.status, ItemStatus::Confirmed))
    {
        ItemStatus::Confirmed
    } else {
        ItemStatus::Active
    };
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
    Ok((
        code,
        Json(ReservationView {
            order_id: reservation.order_id.as_str().to_owned(),
            status,
            items,
            expires_at,
            replayed: reservation.replayed,
        }),
    ))
}

/// Confirm an order's active reservations (payment arrived). Idempotent.
#[utoipa::path(post, path = "/v1/orders/{order_id}/confirm", tag = "orders",
    params(("order_id" = String, Path, description = "Order id")),
    security((), ("api_token" = [])),
    responses(
        (status = 200, description = "What was confirmed and what was missing", body = ConfirmView),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM),
        (status = 404, description = "Unknown order", body = Problem, content_type = PROBLEM),
        (status = 422, description = "Invalid order id", body = Problem, content_type = PROBLEM),
    ))]
pub async fn confirm(
    _: Client,
    State(state): State<AppState>,
    ApiPath(raw): ApiPath<String>,
) -> Result<Json<ConfirmView>, ApiError> {
    let (stock, order_id) = (state.stock.clone(), order_id(raw)?);
    let outcome = detached(async move { stock.confirm(&order_id).await }).await?;
    Ok(Json(ConfirmView {
        order_id: outcome.order_id.as_str().to_owned(),
        confirmed: views(&outcome.confirmed),
        missing: views(&outcome.missing),
    }))
}

/// Release an order's active reservations (cancel). Idempotent.
#[utoipa::path(post, path = "/v1/orders/{order_id}/release", tag = "orders",
    params(("order_id" = String, Path, description = "Order id")),
    security((), ("api_token" = [])),
    responses(
        (status = 200, description = "What was released", body = ReleaseView),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM),
        (status = 404, description = "Unknown order", body = Problem, content_type = PROBLEM),
        (status = 422, description = "Invalid order id", body = Problem, content_type = PROBLEM),
    ))]
pub async fn release(
    _: Client,
    State(state): State<AppState>,
    ApiPath(raw): ApiPath<String>,
) -> Result<Json<ReleaseView>, ApiError> {
    let (stock, order_id) = (state.stock.clone(), order_id(raw)?);
    let outcome = detached(async move { stock.release(&order_id).await }).await?;
    Ok(Json(ReleaseView {
        order_id: outcome.order_id.as_str().to_owned(),
        released: views(&outcome.released),
    }))
}

/// Read an order's reservations with their status and expiry.
#[utoipa::path(get, path = "/v1/orders/{order_id}", tag = "orders",
    params(("order_id" = String, Path, description = "Order id")),
    security((), ("api_token" = [])),
    responses(
        (status = 200, description = "The order's reservation rows", body = OrderView),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM),
        (status = 404, description = "Unknown order", body = Problem, content_type = PROBLEM),
        (status = 422, description = "Invalid order id", body = Problem, content_type = PROBLEM),
    ))]
pub async fn get_order(
    _: Client,
    State(state): State<AppState>,
    ApiPath(raw): ApiPath<String>,
) -> Result<Json<OrderView>, ApiError> {
    let (stock, order_id) = (state.stock.clone(), order_id(raw)?);
    let id = order_id.clone();
    let items = detached(async move { stock.order(&id).await }).await?;
    Ok(Json(OrderView {
        order_id: order_id.as_str().to_owned(),
        items: views(&items),
    }))
}
