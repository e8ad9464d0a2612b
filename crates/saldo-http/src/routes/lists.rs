//! List routes: products, orders (optionally by status), accounts and the transfer search (by
//! reference, account and status), a page at a time over `saldo::listing` (keyset by id;
//! `next_cursor` is where the next page starts, null at the end). Same auth as the neighbouring
//! reads: the API token (or the admin token).

use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use saldo::domain::{AccountId, Reference, TransferStatus};
use saldo::listing::transfers::TransferFilter;
use saldo::listing::{self, Cursor, ListKind, PageLimit};
use saldo::stock::Status;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::extract::ApiQuery;
use super::schema;
use super::stock::LocationView;
use super::task::detached;
use super::views::{AccountView, ItemStatus, StockView, TransferView};
use crate::auth::Client;
use crate::error::{ApiError, Problem, PROBLEM_JSON};
use crate::state::AppState;

/// `limit` and `cursor` of a list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ProductsQuery {
    #[param(schema_with = schema::page_limit)]
    pub limit: Option<i64>,
    #[param(schema_with = schema::products_cursor)]
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LocationsQuery {
    #[param(schema_with = schema::page_limit)]
    pub limit: Option<i64>,
    #[param(schema_with = schema::locations_cursor)]
    pub cursor: Option<String>,
}

/// A location and what it holds over all products.
#[derive(Debug, Serialize, ToSchema)]
pub struct LocationSummaryView {
    #[serde(flatten)]
    pub location: LocationView,
    /// Products with a row at it (stocked there now or before).
    pub products: i64,
    pub available: i64,
    pub reserved: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LocationsPage {
    /// Ascending location id, retired ones included.
    pub locations: Vec<LocationSummaryView>,
    /// Pass as `cursor` for the next page; null when this page is the last.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AccountsQuery {
    #[param(schema_with = schema::page_limit)]
    pub limit: Option<i64>,
    #[param(schema_with = schema::accounts_cursor)]
    pub cursor: Option<String>,
}

/// An order's status, as a filter.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum StatusFilter {
    Active,
    Confirmed,
    Released,
    Expired,
}

impl From<StatusFilter> for Status {
    fn from(s: StatusFilter) -> Self {
        match s {
            StatusFilter::Active => Status::Active,
            StatusFilter::Confirmed => Status::Confirmed,
            StatusFilter::Released => Status::Released,
            StatusFilter::Expired => Status::Expired,
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OrdersQuery {
    /// Only orders with this status (see `ReservationView.status`).
    pub status: Option<StatusFilter>,
    /// Only orders whose reserve request carried this reference.
    #[param(schema_with = schema::reference)]
    pub reference: Option<String>,
    #[param(schema_with = schema::page_limit)]
    pub limit: Option<i64>,
    #[param(schema_with = schema::orders_cursor)]
    pub cursor: Option<String>,
}

/// A transfer's status, as a filter.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TransferStatusFilter {
    Pending,
    Posted,
    Voided,
    Expired,
}

impl From<TransferStatusFilter> for TransferStatus {
    fn from(s: TransferStatusFilter) -> Self {
        match s {
            TransferStatusFilter::Pending => TransferStatus::Pending,
            TransferStatusFilter::Posted => TransferStatus::Posted,
            TransferStatusFilter::Voided => TransferStatus::Voided,
            TransferStatusFilter::Expired => TransferStatus::Expired,
        }
    }
}

/// The transfer search's filters (each optional, combined) and its page.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TransfersQuery {
    #[param(schema_with = schema::reference_filter)]
    pub reference: Option<String>,
    #[param(schema_with = schema::account_filter)]
    pub account: Option<i64>,
    /// Only transfers in this status, as `GET /v1/transfers/{id}` answers it (a hold past its
    /// deadline is `expired`). One-shot transfers, deposits, withdrawals and openings are
    /// `posted`.
    pub status: Option<TransferStatusFilter>,
    #[param(schema_with = schema::page_limit)]
    pub limit: Option<i64>,
    #[param(schema_with = schema::transfers_cursor)]
    pub cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ProductsPage {
    /// Ascending product id.
    pub products: Vec<StockView>,
    /// Pass as `cursor` for the next page; null when this page is the last.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AccountsPage {
    /// Ascending account id; the system account is never listed.
    pub accounts: Vec<AccountView>,
    /// Pass as `cursor` for the next page; null when this page is the last.
    pub next_cursor: Option<String>,
}

/// One order of the list.
#[derive(Debug, Serialize, ToSchema)]
pub struct OrderSummaryView {
    pub order_id: String,
    /// `active` while any item is held; else `confirmed` if any was sold; else `released` if
    /// any was released; else `expired`.
    pub status: ItemStatus,
    /// Distinct products in the order's reservations.
    pub products: i64,
    /// When its first reservation was made.
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct OrdersPage {
    /// Ascending order id. With a `status` filter a page reads a bounded number of orders, so
    /// it may hold fewer than `limit` (even none) and still have a `next_cursor`.
    pub orders: Vec<OrderSummaryView>,
    /// Pass as `cursor` for the next page; null when this page is the last.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TransfersPage {
    /// Ascending transfer id. With `status`, or `account` next to `reference`, a page reads a
    /// bounded number of journal rows, so it may hold fewer than `limit` (even none) and still
    /// have a `next_cursor`.
    pub transfers: Vec<TransferView>,
    /// Pass as `cursor` for the next page, with the same filters; null when this page is the
    /// last.
    pub next_cursor: Option<String>,
}

/// The limit and cursor of a request, checked.
fn page(
    kind: ListKind,
    limit: Option<i64>,
    cursor: Option<&str>,
) -> Result<(PageLimit, Option<Cursor>), ApiError> {
    let limit = limit.map(PageLimit::new).transpose()?.unwrap_or_default();
    let cursor = cursor.map(|c| Cursor::parse(kind, c)).transpose()?;
    Ok((limit, cursor))
}

/// Products and their stock, by ascending id.
#[utoipa::path(get, path = "/v1/products", tag = "stock",
    params(ProductsQuery),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "One page of products", body = ProductsPage),
        (status = 422, description = "`limit` out of range or a cursor this list did not hand out", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn list_products(
    _: Client,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ProductsQuery>,
) -> Result<Json<ProductsPage>, ApiError> {
    let (limit, cursor) = page(ListKind::Products, query.limit, query.cursor.as_deref())?;
    let store = state.store().clone();
    let page =
        detached(async move { listing::stock::products(&store, limit, cursor.as_ref()).await })
            .await?;
    Ok(Json(ProductsPage {
        products: page.items.into_iter().map(Into::into).collect(),
        next_cursor: page.next.map(|c| c.to_string()),
    }))
}

/// Orders by ascending id, optionally only those with one status or one reference.
#[utoipa::path(get, path = "/v1/orders", tag = "orders",
    params(OrdersQuery),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "One page of orders", body = OrdersPage),
        (status = 422, description = "Unknown status, a reference out of its bounds, `limit` out of range or a cursor this list did not hand out", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn list_orders(
    _: Client,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<OrdersQuery>,
) -> Result<Json<OrdersPage>, ApiError> {
    let (limit, cursor) = page(ListKind::Orders, query.limit, query.cursor.as_deref())?;
    let status = query.status.map(Status::from);
    let reference = query.reference.map(Reference::new).transpose()?;
    let store = state.store().clone();
    let page = detached(async move {
        let cursor = cursor.as_ref();
        match reference {
            Some(r) => listing::stock::orders_by_reference(&store, &r, status, limit, cursor).await,
            None => listing::stock::orders(&store, status, limit, cursor).await,
        }
    })
    .await?;
    Ok(Json(OrdersPage {
        orders: page
            .items
            .into_iter()
            .map(|o| OrderSummaryView {
                order_id: o.order_id.as_str().to_owned(),
                status: o.status.into(),
                products: o.products,
                created_at: o.created_at,
            })
            .collect(),
        next_cursor: page.next.map(|c| c.to_string()),
    }))
}

/// Locations by ascending id, with what each holds over all products.
#[utoipa::path(get, path = "/v1/locations", tag = "stock",
    params(LocationsQuery),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "One page of locations", body = LocationsPage),
        (status = 422, description = "`limit` out of range or a cursor this list did not hand out", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn list_locations(
    _: Client,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<LocationsQuery>,
) -> Result<Json<LocationsPage>, ApiError> {
    let (limit, cursor) = page(ListKind::Locations, query.limit, query.cursor.as_deref())?;
    let store = state.store().clone();
    let page =
        detached(async move { listing::stock::locations(&store, limit, cursor.as_ref()).await })
            .await?;
    Ok(Json(LocationsPage {
        locations: page
            .items
            .into_iter()
            .map(|l| LocationSummaryView {
                location: l.location.into(),
                products: l.products,
                available: l.available,
                reserved: l.reserved,
            })
            .collect(),
        next_cursor: page.next.map(|c| c.to_string()),
    }))
}

/// Customer accounts and their balances, by ascending id.
#[utoipa::path(get, path = "/v1/accounts", tag = "accounts",
    params(AccountsQuery),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "One page of accounts", body = AccountsPage),
        (status = 422, description = "`limit` out of range or a cursor this list did not hand out", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn list_accounts(
    _: Client,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<AccountsQuery>,
) -> Result<Json<AccountsPage>, ApiError> {
    let (limit, cursor) = page(ListKind::Accounts, query.limit, query.cursor.as_deref())?;
    let store = state.store().clone();
    let page =
        detached(async move { listing::ledger::accounts(&store, limit, cursor.as_ref()).await })
            .await?;
    Ok(Json(AccountsPage {
        accounts: page.items.into_iter().map(Into::into).collect(),
        next_cursor: page.next.map(|c| c.to_string()),
    }))
}

/// Search transfers by ascending id: by `reference`, by `account` (either side) and by
/// `status`, each optional, combined. Without any filter every transfer is listed (the
/// journal by id: an export or reconciliation read).
#[utoipa::path(get, path = "/v1/transfers", tag = "accounts",
    params(TransfersQuery),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "One page of transfers", body = TransfersPage),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "A bad filter (an unknown status, an account that is not a positive integer, an empty or too long reference: `invalid-input`), `limit` out of range, or a cursor handed out by another list or under other filters (`cursor-invalid`)", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn search_transfers(
    _: Client,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<TransfersQuery>,
) -> Result<Json<TransfersPage>, ApiError> {
    let filter = TransferFilter {
        reference: query.reference.map(Reference::new).transpose()?,
        account: query.account.map(AccountId::new).transpose()?,
        status: query.status.map(TransferStatus::from),
    };
    let (limit, cursor) = page(ListKind::Transfers, query.limit, query.cursor.as_deref())?;
    let store = state.store().clone();
    let page = detached(async move {
        listing::transfers::transfers(&store, &filter, limit, cursor.as_ref()).await
    })
    .await?;
    Ok(Json(TransfersPage {
        transfers: page.items.into_iter().map(Into::into).collect(),
        next_cursor: page.next.map(|c| c.to_string()),
    }))
}
