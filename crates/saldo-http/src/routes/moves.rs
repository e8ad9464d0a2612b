//! Moves: `POST /v1/products/{product_id}/moves` moves units of a product between `available`
//! and its non-sellable states (`damaged`, `safety_stock`, `incoming`), and between its
//! locations, with a reason, all or nothing. 201 when moved now; 200 with the original result
//! and `"replayed": true` when the same `move_id` comes again for the product with the same
//! body; 409 `idempotency-conflict` with another. Never more than the source holds: 409
//! `move-exceeds-stock` names the state, what it holds and what was asked (reserved units are
//! never a source). A move into `available` fills backorders first, as any arrival does.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use saldo::domain::{LocationId, MoveId, ProductId, Quantity, Reason, StockState};
use saldo::stock::{Move, MoveRequest, Place};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::extract::{ApiJson, ApiPath};
use super::params::ProductPath;
use super::schema;
use super::task::detached;
use crate::auth::Client;
use crate::error::{ApiError, Problem, PROBLEM_JSON};
use crate::state::AppState;

/// One end of a move.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlaceBody {
    #[schema(schema_with = schema::stock_state)]
    pub state: String,
    /// Products stocked per location: the location (required there; naming one for any other
    /// product is a 404 `unknown-location`).
    #[serde(default)]
    #[schema(schema_with = schema::item_location_id)]
    pub location_id: Option<String>,
}

/// Move units of a product from one place to another.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveBody {
    #[schema(schema_with = schema::move_id)]
    pub move_id: String,
    #[schema(schema_with = schema::quantity)]
    #[serde(deserialize_with = "super::numbers::i64")]
    pub quantity: i64,
    pub from: PlaceBody,
    pub to: PlaceBody,
    #[schema(schema_with = schema::reason)]
    pub reason: String,
}

/// One end of a move as stored.
#[derive(Debug, Serialize, ToSchema)]
pub struct PlaceView {
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location_id: Option<String>,
}

/// A move as `POST /v1/products/{product_id}/moves` answers it.
#[derive(Debug, Serialize, ToSchema)]
pub struct MoveView {
    pub move_id: String,
    pub product_id: i64,
    pub quantity: i32,
    pub from: PlaceView,
    pub to: PlaceView,
    pub reason: String,
    pub moved_at: DateTime<Utc>,
    /// True when this move had been made before: nothing moved now.
    pub replayed: bool,
}

fn place_view(p: &Place) -> PlaceView {
    PlaceView {
        state: p.state.as_str(),
        location_id: p.location_id.as_ref().map(|l| l.as_str().to_owned()),
    }
}

impl From<Move> for MoveView {
    fn from(m: Move) -> Self {
        MoveView {
            move_id: m.move_id.as_str().to_owned(),
            product_id: m.product_id.get(),
            quantity: m.quantity,
            from: place_view(&m.from),
            to: place_view(&m.to),
            reason: m.reason,
            moved_at: m.moved_at,
            replayed: m.replayed,
        }
    }
}

fn place(raw: PlaceBody) -> Result<Place, ApiError> {
    Ok(Place {
        state: StockState::parse(&raw.state)?,
        location_id: raw.location_id.map(LocationId::new).transpose()?,
    })
}

fn request(product_id: i64, body: MoveBody) -> Result<MoveRequest, ApiError> {
    Ok(MoveRequest {
        move_id: MoveId::new(body.move_id)?,
        product_id: ProductId::new(product_id)?,
        quantity: Quantity::new(body.quantity)?,
        from: place(body.from)?,
        to: place(body.to)?,
        reason: Reason::new(body.reason)?,
    })
}

/// Move units of a product between `available` and its non-sellable states, or between its
/// locations, all or nothing; idempotent by `move_id` (per product). Same path under every
/// strategy.
#[utoipa::path(post, path = "/v1/products/{product_id}/moves", tag = "stock",
    params(ProductPath),
    request_body = MoveBody,
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 201, description = "Moved", body = MoveView),
        (status = 200, description = "Replay of an existing move (`replayed: true`): nothing moved now", body = MoveView),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown product, or a location the product is not stocked at (`unknown-location`: also any location named for a product not stocked per location)", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "More than the source holds (`move-exceeds-stock`: `state`, `held`, `requested`, `location_id`), the same `move_id` with another body (`idempotency-conflict`), a product stocked per location whose move names no location (`stocked-by-location`), or the destination past the limit (`stock-limit`); nothing moved", body = Problem, content_type = PROBLEM_JSON),
        (status = 413, description = "Body too large", body = Problem, content_type = PROBLEM_JSON),
        (status = 415, description = "Not JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid input (an unknown state, a quantity outside 1..=10000, a reason over 200 characters, a move that changes neither state nor location)", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "Not applied (deadline, contention, database unavailable; retry) or outcome unknown (replay)", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn move_units(
    _: Client,
    State(state): State<AppState>,
    ApiPath(product_id): ApiPath<i64>,
    ApiJson(body): ApiJson<MoveBody>,
) -> Result<(StatusCode, Json<MoveView>), ApiError> {
    let request = request(product_id, body)?;
    let stock = state.stock.clone();
    let done = detached(async move { stock.move_units(&request).await }).await?;
    let code = if done.replayed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((code, Json(done.into())))
}
