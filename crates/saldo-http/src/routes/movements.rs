//! A product's stock statement (`saldo::listing::movements`): its movements a page at a time
//! (keyset on time and seq, `from`/`to`, the cursor bound to both and to the product), each
//! naming what happened (and its order, sale or return), the change and the counters right
//! after it. Same auth as the product's own read.

use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use saldo::domain::ProductId;
use saldo::listing::movements::{self, MovementFilter};
use saldo::listing::{Cursor, ListKind, PageLimit};
use saldo::stock::movements::{MoveKind, Movement};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::entries::time;
use super::extract::{ApiPath, ApiQuery};
use super::params::ProductPath;
use super::schema;
use super::task::detached;
use crate::auth::Client;
use crate::error::{ApiError, Problem, PROBLEM_JSON};
use crate::state::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct MovementsQuery {
    #[param(schema_with = schema::movements_from)]
    pub from: Option<String>,
    #[param(schema_with = schema::movements_to)]
    pub to: Option<String>,
    #[param(schema_with = schema::page_limit)]
    pub limit: Option<i64>,
    #[param(schema_with = schema::movements_cursor)]
    pub cursor: Option<String>,
}

/// What changed the product's stock row.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MoveKindView {
    /// The counters the product had when movements began (the first movement of a product
    /// older than statements).
    Opening,
    /// A stock count (an arrival), with the backorders it filled.
    Count,
    /// An adjustment by a signed quantity, with the backorders it filled.
    Adjustment,
    /// Units reserved for an order (`order_id`; null for a batch of several orders).
    Reserve,
    /// An order confirmed: its reserved units sold.
    Confirm,
    /// An order released: its units back to available.
    Release,
    /// Reservations past their expiry: their units back to available.
    Expire,
    /// A direct sale (`sale_id`).
    Sale,
    /// A return of a confirmed order (`order_id`, `return_id`).
    Return,
    /// An operator's repair brought the counters back to their history.
    Repair,
    /// A backorder limit set (counters unchanged).
    Policy,
    /// A stock move (`move_id`) between `available` and a non-sellable state.
    Move,
    /// A write whose cause was not named.
    Other,
}

impl From<MoveKind> for MoveKindView {
    fn from(k: MoveKind) -> Self {
        match k {
            MoveKind::Opening => MoveKindView::Opening,
            MoveKind::Count => MoveKindView::Count,
            MoveKind::Adjustment => MoveKindView::Adjustment,
            MoveKind::Reserve => MoveKindView::Reserve,
            MoveKind::Confirm => MoveKindView::Confirm,
            MoveKind::Release => MoveKindView::Release,
            MoveKind::Expire => MoveKindView::Expire,
            MoveKind::Sale => MoveKindView::Sale,
            MoveKind::Return => MoveKindView::Return,
            MoveKind::Repair => MoveKindView::Repair,
            MoveKind::Policy => MoveKindView::Policy,
            MoveKind::Move => MoveKindView::Move,
            MoveKind::Other => MoveKindView::Other,
        }
    }
}

/// One line of a stock statement: what happened, the change, and the counters right after it.
#[derive(Debug, Serialize, ToSchema)]
pub struct MovementView {
    /// The stock row's version after the write: per product, without gaps.
    pub seq: i64,
    pub kind: MoveKindView,
    pub order_id: Option<String>,
    pub sale_id: Option<String>,
    pub return_id: Option<String>,
    pub move_id: Option<String>,
    /// The change of each counter (from the movement before; from zero for the first).
    pub available_delta: i32,
    pub reserved_delta: i32,
    pub backordered_delta: i32,
    pub available_after: i32,
    pub reserved_after: i32,
    pub backordered_after: i32,
    /// When it was written.
    pub at: DateTime<Utc>,
}

impl From<Movement> for MovementView {
    fn from(m: Movement) -> Self {
        MovementView {
            seq: m.seq,
            kind: m.kind.into(),
            order_id: m.order_id,
            sale_id: m.sale_id,
            return_id: m.return_id,
            move_id: m.move_id,
            available_delta: m.available_delta,
            reserved_delta: m.reserved_delta,
            backordered_delta: m.backordered_delta,
            available_after: m.available_after,
            reserved_after: m.reserved_after,
            backordered_after: m.backordered_after,
            at: m.at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MovementsPage {
    pub product_id: i64,
    /// Oldest first.
    pub movements: Vec<MovementView>,
    /// Pass as `cursor` (with the same `from` and `to`) for the next page; null when this page
    /// is the last.
    pub next_cursor: Option<String>,
}

/// A product's stock statement: its movements, oldest first, a page at a time.
#[utoipa::path(get, path = "/v1/products/{product_id}/movements", tag = "stock",
    params(ProductPath, MovementsQuery),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "One page of the stock statement", body = MovementsPage),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown product", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid id, a time that is not RFC 3339, `limit` out of range (`invalid-input`), or a cursor of another statement or list (`cursor-invalid`)", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn list_movements(
    _: Client,
    State(state): State<AppState>,
    ApiPath(product_id): ApiPath<i64>,
    ApiQuery(query): ApiQuery<MovementsQuery>,
) -> Result<Json<MovementsPage>, ApiError> {
    let product = ProductId::new(product_id)?;
    let from = query.from.as_deref().map(|t| time("from", t)).transpose()?;
    let to = query.to.as_deref().map(|t| time("to", t)).transpose()?;
    let filter = MovementFilter::new(product, from, to);
    let limit = query
        .limit
        .map(PageLimit::new)
        .transpose()?
        .unwrap_or_default();
    let cursor = query
        .cursor
        .as_deref()
        .map(|c| Cursor::parse(ListKind::Movements, c))
        .transpose()?;
    let store = state.store().clone();
    let page =
        detached(
            async move { movements::movements(&store, &filter, limit, cursor.as_ref()).await },
        )
        .await?;
    Ok(Json(MovementsPage {
        product_id: product.get(),
        movements: page.items.into_iter().map(Into::into).collect(),
        next_cursor: page.next.map(|c| c.to_string()),
    }))
}
