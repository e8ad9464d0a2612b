//! Returns: `POST /v1/orders/{order_id}/returns` brings confirmed units of the order back into
//! `available` (at a location for a product stocked per location: the named one, or where the
//! line was allocated), with a reason, every item or none. 201 when brought back now; 200 with
//! the original result and `"replayed": true` when the same `return_id` comes again with the
//! same order, items and reason; 409 `idempotency-conflict` with anything else. Never more of a
//! line than was confirmed: 409 `return-exceeds-confirmed` names what was confirmed and what
//! came back already. An item's `state` (absent: `available`) puts its units into a
//! non-sellable state instead (`damaged`, `safety_stock`, `incoming`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use saldo::domain::{
    InputError, LocationId, OrderId, ProductId, Quantity, Reason, ReturnId, StockState,
};
use saldo::stock::{Return, ReturnItemRequest, ReturnItems, ReturnRequest};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::extract::{ApiJson, ApiPath};
use super::params::OrderPath;
use super::schema;
use super::task::detached;
use crate::auth::Client;
use crate::error::{ApiError, Problem, PROBLEM_JSON};
use crate::state::AppState;

/// One product coming back.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReturnItemBody {
    #[schema(schema_with = schema::product_id)]
    #[serde(deserialize_with = "super::numbers::i64")]
    pub product_id: i64,
    #[schema(schema_with = schema::quantity)]
    #[serde(deserialize_with = "super::numbers::i64")]
    pub quantity: i64,
    /// Products stocked per location: where the units go (absent: where the line was
    /// allocated). Naming one for any other product is a 404 `unknown-location`.
    #[serde(default)]
    #[schema(schema_with = schema::item_location_id)]
    pub location_id: Option<String>,
    #[serde(default)]
    #[schema(schema_with = schema::return_state)]
    pub state: Option<String>,
}

/// Bring confirmed units of an order back, every item or none.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReturnBody {
    #[schema(schema_with = schema::return_id)]
    pub return_id: String,
    #[schema(schema_with = schema::return_items)]
    pub items: Vec<ReturnItemBody>,
    #[schema(schema_with = schema::reason)]
    pub reason: String,
}

/// One product that came back.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReturnedItemView {
    pub product_id: i64,
    pub quantity: i32,
    /// Where the units went (products stocked per location only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location_id: Option<String>,
    /// The stock state they went to.
    pub state: &'static str,
}

/// A return as `POST /v1/orders/{order_id}/returns` answers it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReturnView {
    pub return_id: String,
    pub order_id: String,
    /// Per product, ascending.
    pub items: Vec<ReturnedItemView>,
    pub reason: String,
    pub returned_at: DateTime<Utc>,
    /// True when this return had been made before: nothing came back now.
    pub replayed: bool,
}

impl From<Return> for ReturnView {
    fn from(r: Return) -> Self {
        ReturnView {
            return_id: r.return_id.as_str().to_owned(),
            order_id: r.order_id.as_str().to_owned(),
            items: r
                .items
                .iter()
                .map(|i| ReturnedItemView {
                    product_id: i.product_id.get(),
                    quantity: i.quantity,
                    location_id: i.location_id.as_ref().map(|l| l.as_str().to_owned()),
                    state: i.state.as_str(),
                })
                .collect(),
            reason: r.reason,
            returned_at: r.returned_at,
            replayed: r.replayed,
        }
    }
}

fn item(raw: &ReturnItemBody) -> Result<ReturnItemRequest, ApiError> {
    let state = match raw.state.as_deref() {
        None => StockState::Available,
        Some(named) => StockState::parse(named)?,
    };
    Ok(ReturnItemRequest {
        product_id: ProductId::new(raw.product_id)?,
        quantity: Quantity::new(raw.quantity)?,
        location_id: raw
            .location_id
            .as_deref()
            .map(LocationId::new)
            .transpose()?,
        state,
    })
}

fn request(order_id: String, body: ReturnBody) -> Result<ReturnRequest, ApiError> {
    if body.items.len() > saldo::domain::MAX_ITEMS_PER_ORDER {
        return Err(InputError::TooManyItems {
            max: saldo::domain::MAX_ITEMS_PER_ORDER,
        }
        .into());
    }
    let items = body.items.iter().map(item).collect::<Result<Vec<_>, _>>()?;
    Ok(ReturnRequest {
        return_id: ReturnId::new(body.return_id)?,
        order_id: OrderId::new(order_id)?,
        items: ReturnItems::new(items)?,
        reason: Reason::new(body.reason)?,
    })
}

/// Bring confirmed units of an order back into `available` (or, per item, a non-sellable
/// state), every item or none; idempotent by
/// `return_id`. Same path under every strategy.
#[utoipa::path(post, path = "/v1/orders/{order_id}/returns", tag = "orders",
    params(OrderPath),
    request_body = ReturnBody,
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 201, description = "Brought back", body = ReturnView),
        (status = 200, description = "Replay of an existing return (`replayed: true`): nothing came back now", body = ReturnView),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown order, a product the order has no line of (`not-in-order`), or a location the product is not stocked at (`unknown-location`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "More than was confirmed (`return-exceeds-confirmed`: `confirmed`, `returned`, `requested`), the same `return_id` with another payload (`idempotency-conflict`), a retired location, or a product stocked per location whose line names no location (`stocked-by-location`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 413, description = "Body too large", body = Problem, content_type = PROBLEM_JSON),
        (status = 415, description = "Not JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid input (a product named twice, over 100 items, a reason over 200 characters, an unknown `state`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "Not applied (deadline, contention, database unavailable; retry) or outcome unknown (replay)", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn record_return(
    _: Client,
    State(state): State<AppState>,
    ApiPath(raw): ApiPath<String>,
    ApiJson(body): ApiJson<ReturnBody>,
) -> Result<(StatusCode, Json<ReturnView>), ApiError> {
    let request = request(raw, body)?;
    crate::access_log::note_order_id(&request.order_id);
    let stock = state.stock.clone();
    let done = detached(async move { stock.record_return(&request).await }).await?;
    let code = if done.replayed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((code, Json(done.into())))
}
