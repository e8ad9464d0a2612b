//! Bundle routes: declare a product a bundle of components (admin), read it with its derived
//! availability, turn it back into a plain product (admin). Reserving, confirming, releasing,
//! selling and returning a bundle go through the order, sale and return routes as for any
//! product: the engine takes its components ([`saldo::stock::bundles`]).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use saldo::domain::ProductId;
use saldo::stock::{bundles, Bundle};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::bodies::{order_items, ItemRequest};
use super::extract::{ApiJson, ApiPath};
use super::params::ProductPath;
use super::schema;
use super::task::detached;
use crate::auth::{Admin, Client};
use crate::error::{ApiError, Problem, PROBLEM_JSON};
use crate::state::AppState;

/// A bundle's recipe.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BundleBody {
    #[schema(schema_with = schema::bundle_components)]
    pub components: Vec<ItemRequest>,
}

/// One component of a bundle.
#[derive(Debug, Serialize, ToSchema)]
pub struct BundleComponentView {
    pub product_id: i64,
    /// Units one bundle takes.
    pub quantity: i32,
    /// The component's own available units.
    pub available: i32,
}

/// A bundle: its components and how many whole bundles they make now.
#[derive(Debug, Serialize, ToSchema)]
pub struct BundleView {
    pub product_id: i64,
    /// Derived: the least, over the components, of their available units over their quantity.
    pub available: i32,
    pub components: Vec<BundleComponentView>,
}

impl From<Bundle> for BundleView {
    fn from(b: Bundle) -> Self {
        BundleView {
            product_id: b.product_id.get(),
            available: b.available,
            components: b
                .components
                .into_iter()
                .map(|c| BundleComponentView {
                    product_id: c.product_id.get(),
                    quantity: c.quantity,
                    available: c.available,
                })
                .collect(),
        }
    }
}

/// Declare a product a bundle of components (replacing the recipe it had), creating it if new.
/// A bundle holds no units of its own: reserving, confirming, releasing, expiring, selling or
/// returning `n` of it does the same to `n × quantity` of each component, all or nothing, summed
/// with the request's other lines of the same product.
#[utoipa::path(put, path = "/v1/products/{product_id}/bundle", tag = "stock",
    params(ProductPath),
    request_body = BundleBody,
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The bundle, with its derived availability", body = BundleView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "A component that does not exist (`unknown-product`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "The product holds units, is stocked per location or takes backorders (`bundle-holds-stock`), a component is a bundle (`product-is-bundle`), or the product is a component of a bundle (`component-of-bundle`); nothing written", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid id, no components, too many, a quantity out of range, or the bundle among its own components", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn declare_bundle(
    _: Admin,
    State(state): State<AppState>,
    ApiPath(product_id): ApiPath<i64>,
    ApiJson(body): ApiJson<BundleBody>,
) -> Result<Json<BundleView>, ApiError> {
    let product_id = ProductId::new(product_id)?;
    let components = order_items(&body.components)?;
    let store = state.store().clone();
    let bundle =
        detached(async move { bundles::declare(&store, product_id, &components).await }).await?;
    Ok(Json(bundle.into()))
}

/// Read a bundle: its components and its derived availability.
#[utoipa::path(get, path = "/v1/products/{product_id}/bundle", tag = "stock",
    params(ProductPath),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "The bundle", body = BundleView),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown product (`unknown-product`), or a product that is no bundle (`not-a-bundle`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid id", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn get_bundle(
    _: Client,
    State(state): State<AppState>,
    ApiPath(product_id): ApiPath<i64>,
) -> Result<Json<BundleView>, ApiError> {
    let product_id = ProductId::new(product_id)?;
    let store = state.store().clone();
    let bundle = detached(async move { bundles::get(&store, product_id).await }).await?;
    Ok(Json(bundle.into()))
}

/// Turn a bundle back into a plain product (with no units). Orders already made keep the
/// components they took.
#[utoipa::path(delete, path = "/v1/products/{product_id}/bundle", tag = "stock",
    params(ProductPath),
    security(("admin_token" = [])),
    responses(
        (status = 204, description = "No longer a bundle"),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown product (`unknown-product`), or a product that is no bundle (`not-a-bundle`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid id", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn remove_bundle(
    _: Admin,
    State(state): State<AppState>,
    ApiPath(product_id): ApiPath<i64>,
) -> Result<StatusCode, ApiError> {
    let product_id = ProductId::new(product_id)?;
    let store = state.store().clone();
    detached(async move { bundles::remove(&store, product_id).await }).await?;
    Ok(StatusCode::NO_CONTENT)
}
