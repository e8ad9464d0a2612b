//! `POST /v1/admin/repair` (admin): what `saldo audit --repair [--apply]` does, over
//! HTTP. A dry run unless `{"apply": true}`: per divergent product, its counters and what they
//! should be (`reserved` from the active reservations, `available` from the history); applied,
//! each product is written under its row lock with a `repair: …` movement, a product that
//! changed since the plan is left alone (`changed`), and the answer carries the re-audit.

use axum::extract::State;
use axum::Json;
use saldo::stock::repair::{self, Counts, ProductRepair, RepairAction};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::extract::ApiJson;
use super::task::detached;
use super::views::DivergenceView;
use crate::auth::Admin;
use crate::error::{ApiError, Problem, PROBLEM_JSON};
use crate::state::AppState;

/// Dry run unless `apply` is true.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RepairBody {
    /// Write the repair (default false: only report what it would change).
    #[serde(default)]
    pub apply: bool,
}

/// A product's counters.
#[derive(Debug, Serialize, ToSchema)]
pub struct CountsView {
    pub available: i64,
    pub reserved: i64,
    /// Units backordered; absent when 0 (a product without backorders answers as before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backordered: Option<i64>,
}

impl From<Counts> for CountsView {
    fn from(c: Counts) -> Self {
        CountsView {
            available: c.available,
            reserved: c.reserved,
            backordered: (c.backordered != 0).then_some(c.backordered),
        }
    }
}

/// What became (or would become) of a divergent product.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RepairActionView {
    /// Dry run: what `apply` would write.
    Planned,
    /// Written, with its `repair: …` movement.
    Applied,
    /// Left alone: the product changed during the repair (run it again).
    Changed,
    /// Left alone: the history says fewer units than are actively reserved (count it).
    Unrepairable,
}

/// One divergent product.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProductRepairView {
    pub product_id: i64,
    /// The row version the repair was planned against.
    pub version: i64,
    pub before: CountsView,
    pub after: CountsView,
    pub action: RepairActionView,
}

impl From<&ProductRepair> for ProductRepairView {
    fn from(p: &ProductRepair) -> Self {
        ProductRepairView {
            product_id: p.product_id.get(),
            version: p.version,
            before: p.before.into(),
            after: p.after.into(),
            action: match p.action {
                RepairAction::Planned => RepairActionView::Planned,
                RepairAction::Applied => RepairActionView::Applied,
                RepairAction::Changed => RepairActionView::Changed,
                RepairAction::Unrepairable => RepairActionView::Unrepairable,
            },
        }
    }
}

/// A repair's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct RepairView {
    pub applied: bool,
    pub products: Vec<ProductRepairView>,
    /// The stock audit afterwards (a dry run: as it stands).
    pub remaining: Vec<DivergenceView>,
}

/// Repair divergent stock rows from their reservations and history (dry run by default).
#[utoipa::path(post, path = "/v1/admin/repair", tag = "admin",
    request_body = RepairBody,
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "Per divergent product, what was (or would be) changed, and the audit afterwards", body = RepairView),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 413, description = "Body too large", body = Problem, content_type = PROBLEM_JSON),
        (status = 415, description = "Not JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid input", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "Not applied (deadline, contention, database unavailable; retry)", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn repair(
    _: Admin,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<RepairBody>,
) -> Result<Json<RepairView>, ApiError> {
    let store = state.store().clone();
    let report = detached(async move { repair::repair(&store, body.apply).await }).await?;
    Ok(Json(RepairView {
        applied: report.applied,
        products: report
            .products
            .iter()
            .map(ProductRepairView::from)
            .collect(),
        remaining: report.remaining.iter().map(DivergenceView::from).collect(),
    }))
}
