//! Direct sales: `POST /v1/sales` takes units from available straight to sold, all
//! items or none, for payment methods that clear too late to hold a reservation.
//! 201 when sold now; 200 with the original result and `"replayed": true` when the same sale
//! id comes again with the same items, reference and metadata; 409 `idempotency-conflict` with
//! anything else. Refusals are a reservation's (409 `insufficient-stock`, 404
//! `unknown-product`), counted alike. Items of located products may name a location and the
//! sale an allocation, as a reservation's may (the same parsing: [`super::orders`]).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use saldo::domain::SaleId;
use saldo::stock::{Sale, SaleRequest};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::bodies::{shown_tags, tags};
use super::extract::ApiJson;
use super::orders::{reserve_items, Allocation, AllocationView, ReserveItemRequest};
use super::schema;
use super::task::detached;
use crate::auth::Client;
use crate::error::{ApiError, Problem, PROBLEM_JSON};
use crate::state::AppState;

/// Sell every item now, or none.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SaleBody {
    #[schema(schema_with = schema::sale_id)]
    pub sale_id: String,
    /// An item of a located product may name its `location_id` (sold from there or refused).
    #[schema(schema_with = schema::reserve_items)]
    pub items: Vec<ReserveItemRequest>,
    /// How items without a location are taken from a located product's locations: `split`
    /// (the default) or `single`, as for a reservation.
    #[serde(default)]
    #[schema(schema_with = schema::allocation)]
    pub allocation: Option<Allocation>,
    /// The caller's id for the sale (a payment, an invoice, a cart); part of the idempotency
    /// comparison.
    #[serde(default)]
    #[schema(schema_with = schema::reference)]
    pub reference: Option<String>,
    #[serde(default)]
    #[schema(schema_with = schema::metadata)]
    pub metadata: Option<serde_json::Value>,
}

/// One product of a sale.
#[derive(Debug, Serialize, ToSchema)]
pub struct SoldItemView {
    pub product_id: i64,
    pub quantity: i32,
    /// Where the units were sold from, by location id: products stocked per location only
    /// (absent for the others).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(required = false)]
    pub allocations: Vec<AllocationView>,
}

/// A sale as `POST /v1/sales` answers it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SaleView {
    pub sale_id: String,
    /// Per product (repeated products summed), ascending.
    pub items: Vec<SoldItemView>,
    pub sold_at: DateTime<Utc>,
    /// True when this sale had been made before: nothing was taken now.
    pub replayed: bool,
    /// The caller's reference, as given.
    pub reference: Option<String>,
    /// The caller's metadata, as given.
    #[schema(value_type = Option<std::collections::BTreeMap<String, String>>)]
    pub metadata: Option<serde_json::Value>,
}

impl From<Sale> for SaleView {
    fn from(s: Sale) -> Self {
        let (reference, metadata) = shown_tags(s.tags);
        SaleView {
            sale_id: s.sale_id.as_str().to_owned(),
            items: s
                .items
                .iter()
                .map(|i| SoldItemView {
                    product_id: i.product_id.get(),
                    quantity: i.quantity,
                    allocations: AllocationView::all(&i.allocations),
                })
                .collect(),
            sold_at: s.sold_at,
            replayed: s.replayed,
            reference,
            metadata,
        }
    }
}

/// Sell every item straight from available (nothing reserved), or none; idempotent by
/// `sale_id`. Same path under every strategy (`batched` never queues a sale).
#[utoipa::path(post, path = "/v1/sales", tag = "orders",
    request_body = SaleBody,
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 201, description = "Sold", body = SaleView),
        (status = 200, description = "Replay of an existing sale (`replayed: true`): nothing taken", body = SaleView),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown product (`product_id`) or a product not stocked at the named location (`unknown-location`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "Insufficient stock (`product_id`; at the named location, in one location for `single`, in all for `split`), idempotency conflict (the sale id was used with other items, reference or metadata), or a location on a Citus database (`unsupported-on-citus`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 413, description = "Body too large", body = Problem, content_type = PROBLEM_JSON),
        (status = 415, description = "Not JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid input", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "Not applied (deadline, contention, database unavailable; retry) or outcome unknown (replay)", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn sell(
    _: Client,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<SaleBody>,
) -> Result<(StatusCode, Json<SaleView>), ApiError> {
    let sale_id = SaleId::new(body.sale_id)?;
    crate::access_log::note_sale_id(&sale_id);
    let (items, placement) = reserve_items(&body.items, body.allocation)?;
    let tags = tags(body.reference, body.metadata)?;
    let request = SaleRequest {
        sale_id,
        items,
        tags,
    };
    let stock = state.stock.clone();
    let sale = detached(async move { stock.sell_placed(&request, &placement).await })
        .await
        .inspect_err(|e| state.note_refusal(e))?;
    let code = if sale.replayed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((code, Json(sale.into())))
}
