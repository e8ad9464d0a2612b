//! Stock routes: set a physical count, adjust and set the backorder policy (admin), read a
//! product's stock (with its locations and its units in each non-sellable state); per location: count one location of a
//! product, set a location's allocation priority (admin).

use axum::Json;
use chrono::{DateTime, Utc};
use saldo::domain::{LocationId, Priority, ProductId, Reason};
use saldo::stock::locations::{self, LocatedStock, Location};
use saldo::stock::{admin as stock_admin, backorders, States};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::bundles::BundleView;
use super::extract::{ApiJson, ApiPath};
use super::params::{LocationPath, ProductLocationPath, ProductPath};
use super::schema;
use super::task::detached;
use super::views::StockView;
use crate::auth::{Admin, Client};
use crate::error::{ApiError, Problem, PROBLEM_JSON};
use crate::state::AppState;
use axum::extract::State;

/// A physical count: on-hand (available + reserved) becomes `count`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetCount {
    #[schema(schema_with = schema::count)]
    #[serde(deserialize_with = "super::numbers::i64")]
    pub count: i64,
}

/// A restock (> 0) or write-off (< 0) with its reason.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Adjustment {
    #[schema(schema_with = schema::delta)]
    #[serde(deserialize_with = "super::numbers::i64")]
    pub delta: i64,
    #[schema(schema_with = schema::reason)]
    pub reason: String,
}

/// A product's backorder policy.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    #[schema(schema_with = schema::backorder_limit)]
    #[serde(deserialize_with = "super::numbers::i64")]
    pub backorder_limit: i64,
}

/// A product's stock at one location.
#[derive(Debug, Serialize, ToSchema)]
pub struct LocationStockView {
    pub location_id: String,
    pub available: i32,
    pub reserved: i32,
    /// Its units in the non-sellable states.
    pub states: StatesView,
}

/// Units in the non-sellable states: not available, never reserved or sold; moved with
/// `POST /v1/products/{product_id}/moves` (and returns may put units there).
#[derive(Debug, Serialize, ToSchema)]
pub struct StatesView {
    pub damaged: i32,
    pub safety_stock: i32,
    pub incoming: i32,
}

impl From<States> for StatesView {
    fn from(s: States) -> Self {
        StatesView {
            damaged: s.damaged,
            safety_stock: s.safety_stock,
            incoming: s.incoming,
        }
    }
}

/// A product's stock: its totals and, stocked per location, each location's (the totals are
/// their sums).
#[derive(Debug, Serialize, ToSchema)]
pub struct LocatedStockView {
    pub product_id: i64,
    pub available: i32,
    pub reserved: i32,
    /// Bumped by every write of the row.
    pub version: i64,
    /// As in `StockView`: present only for a product with a backorder policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backorder_limit: Option<i32>,
    /// As in `StockView`: units backordered now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backordered: Option<i32>,
    /// Units in the non-sellable states (the sums of the locations').
    pub states: StatesView,
    /// By location id; empty for a product never given a location.
    pub locations: Vec<LocationStockView>,
    /// A bundle's components (`available` is then derived from theirs); absent for a plain
    /// product.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bundle: Option<BundleView>,
}

impl From<LocatedStock> for LocatedStockView {
    fn from(s: LocatedStock) -> Self {
        let totals = StockView::from(s.stock);
        LocatedStockView {
            product_id: totals.product_id,
            available: totals.available,
            reserved: totals.reserved,
            version: totals.version,
            backorder_limit: totals.backorder_limit,
            backordered: totals.backordered,
            states: s.states.into(),
            locations: s
                .locations
                .into_iter()
                .map(|l| LocationStockView {
                    location_id: l.location_id.as_str().to_owned(),
                    available: l.available,
                    reserved: l.reserved,
                    states: l.states.into(),
                })
                .collect(),
            bundle: s.bundle.map(BundleView::from),
        }
    }
}

/// A location's allocation priority.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetPriority {
    #[schema(schema_with = schema::priority)]
    #[serde(deserialize_with = "super::numbers::i64")]
    pub priority: i64,
}

/// A location as stored.
#[derive(Debug, Serialize, ToSchema)]
pub struct LocationView {
    pub location_id: String,
    pub priority: i32,
    /// When it was retired (it then takes no count, priority or stock); null while in use.
    pub retired_at: Option<DateTime<Utc>>,
}

impl From<Location> for LocationView {
    fn from(l: Location) -> Self {
        LocationView {
            location_id: l.location_id.as_str().to_owned(),
            priority: l.priority.get(),
            retired_at: l.retired_at,
        }
    }
}

fn product(raw: i64) -> Result<ProductId, ApiError> {
    Ok(ProductId::new(raw)?)
}

/// Set the physical count of a product, creating it if new.
#[utoipa::path(put, path = "/v1/products/{product_id}/stock", tag = "stock",
    params(ProductPath),
    request_body = SetCount,
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The stock after the count", body = StockView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "Count below the units reserved", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid id or count", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn set_count(
    _: Admin,
    State(state): State<AppState>,
    ApiPath(product_id): ApiPath<i64>,
    ApiJson(body): ApiJson<SetCount>,
) -> Result<Json<StockView>, ApiError> {
    let product_id = product(product_id)?;
    let store = state.store().clone();
    let stock =
        detached(async move { stock_admin::set_count(&store, product_id, body.count).await })
            .await?;
    Ok(Json(stock.into()))
}

/// Adjust available units by a delta with a reason.
#[utoipa::path(post, path = "/v1/products/{product_id}/stock/adjustments", tag = "stock",
    params(ProductPath),
    request_body = Adjustment,
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The stock after the adjustment", body = StockView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown product", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "Available would go negative (`would-go-negative`) or on-hand past the limit (`stock-limit`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid id, delta or reason", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn adjust(
    _: Admin,
    State(state): State<AppState>,
    ApiPath(product_id): ApiPath<i64>,
    ApiJson(body): ApiJson<Adjustment>,
) -> Result<Json<StockView>, ApiError> {
    let product_id = product(product_id)?;
    let reason = Reason::new(body.reason)?;
    let store = state.store().clone();
    let stock =
        detached(async move { stock_admin::adjust(&store, product_id, body.delta, &reason).await })
            .await?;
    Ok(Json(stock.into()))
}

/// Set a product's backorder policy: up to `backorder_limit` units beyond what is available
/// may be reserved as backordered (a preorder when nothing is in stock), filled oldest first
/// when units arrive.
#[utoipa::path(put, path = "/v1/products/{product_id}/policy", tag = "stock",
    params(ProductPath),
    request_body = Policy,
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The stock under the new policy", body = StockView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown product", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "Limit below the units backordered now (`backorder-limit-below-backordered`), or a Citus database (`unsupported-on-citus`: backorders are not run there yet); nothing written", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid id or limit", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn set_policy(
    _: Admin,
    State(state): State<AppState>,
    ApiPath(product_id): ApiPath<i64>,
    ApiJson(body): ApiJson<Policy>,
) -> Result<Json<StockView>, ApiError> {
    let product_id = product(product_id)?;
    let store = state.store().clone();
    let stock =
        detached(
            async move { backorders::set_policy(&store, product_id, body.backorder_limit).await },
        )
        .await?;
    Ok(Json(stock.into()))
}

/// Set the physical count of a product at one location (creating the product and the location
/// if new). The product's first location count makes it stocked per location: what it held
/// until then moves to the location `default`, its active reservations allocated there. A count
/// that raises the location's available is an arrival there: the product's oldest backorders
/// are filled first and allocated at this location; only what remains becomes available.
#[utoipa::path(put, path = "/v1/products/{product_id}/locations/{location_id}/stock", tag = "stock",
    params(ProductLocationPath),
    request_body = SetCount,
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The product's stock after the count, with its locations", body = LocatedStockView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "Count below the units reserved at the location (`count-below-reserved`), the product's total past the limit (`stock-limit`), or a retired location (`location-retired`), or a Citus database (`unsupported-on-citus`: stock per location is not run there yet); nothing written", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid id or count, or one location too many for the product", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn set_location_count(
    _: Admin,
    State(state): State<AppState>,
    ApiPath((product_id, location_id)): ApiPath<(i64, String)>,
    ApiJson(body): ApiJson<SetCount>,
) -> Result<Json<LocatedStockView>, ApiError> {
    let product_id = product(product_id)?;
    let location_id = LocationId::new(location_id)?;
    let store = state.store().clone();
    let stock = detached(async move {
        locations::set_count(&store, product_id, &location_id, body.count).await
    })
    .await?;
    Ok(Json(stock.into()))
}

/// Set a location's allocation priority (lower first, then by id), creating it if new.
#[utoipa::path(put, path = "/v1/locations/{location_id}", tag = "stock",
    params(LocationPath),
    request_body = SetPriority,
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The location", body = LocationView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "A retired location (`location-retired`) or a Citus database (`unsupported-on-citus`: stock per location is not run there yet); nothing written", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid id or priority", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn set_priority(
    _: Admin,
    State(state): State<AppState>,
    ApiPath(location_id): ApiPath<String>,
    ApiJson(body): ApiJson<SetPriority>,
) -> Result<Json<LocationView>, ApiError> {
    let location_id = LocationId::new(location_id)?;
    let priority = Priority::new(body.priority)?;
    let store = state.store().clone();
    let location =
        detached(async move { locations::set_priority(&store, &location_id, priority).await })
            .await?;
    Ok(Json(location.into()))
}

/// Retire a location that holds nothing: it then takes no count, priority or stock (its history
/// stays). Retiring a retired location answers it as it is.
#[utoipa::path(delete, path = "/v1/locations/{location_id}", tag = "stock",
    params(LocationPath),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The location, retired", body = LocationView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown location (`unknown-location`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "It still holds units (`location-not-empty`, with `available` and `reserved` over all products: count them out first), or a Citus database (`unsupported-on-citus`); nothing written", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid id", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn retire_location(
    _: Admin,
    State(state): State<AppState>,
    ApiPath(location_id): ApiPath<String>,
) -> Result<Json<LocationView>, ApiError> {
    let location_id = LocationId::new(location_id)?;
    let store = state.store().clone();
    let location = detached(async move { locations::retire(&store, &location_id).await }).await?;
    Ok(Json(location.into()))
}

/// Read a product's stock, with its locations.
#[utoipa::path(get, path = "/v1/products/{product_id}/stock", tag = "stock",
    params(ProductPath),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "The product's stock: totals, units in each non-sellable state (`states`), and each location's", body = LocatedStockView),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown product", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid id", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn get_stock(
    _: Client,
    State(state): State<AppState>,
    ApiPath(product_id): ApiPath<i64>,
) -> Result<Json<LocatedStockView>, ApiError> {
    let product_id = product(product_id)?;
    let store = state.store().clone();
    Ok(Json(
        detached(async move { locations::get(&store, product_id).await })
            .await?
            .into(),
    ))
}
