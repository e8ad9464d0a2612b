//! Money routes (seed 002): open an account (admin), read it and its latest transfers, and move
//! money between two accounts. Transfers always lock both accounts in id order, with the
//! served transfer strategy (`ordered`, or the `batched` engine that groups the movements of a
//! hot account into one transaction); the naive order exists for the lab only. A replayed transfer id
//! answers 200 with the original transfer and `"replayed": true`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use saldo::domain::{AccountId, Amount, TransferId};
use saldo::ledger::{Account, Transfer, TransferKind, TransferRequest, MAX_LIST};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{detached, ApiJson, ApiPath, ApiQuery, PROBLEM};
use crate::auth::{Admin, Client};
use crate::error::{ApiError, Problem};
use crate::AppState;

/// Transfers listed by `GET /v1/accounts/{id}/transfers` when `limit` is absent.
pub const DEFAULT_LIST: i64 = 50;

/// Open an account with an opening balance moved from the system account.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenAccount {
    /// > 0
    pub id: i64,
    /// 0..=1000000000000 minor units (default 0).
    #[serde(default)]
    pub opening_balance: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AccountView {
    pub id: i64,
    pub balance: i64,
}

impl From<Account> for AccountView {
    fn from(a: Account) -> Self {
        AccountView {
            id: a.id.get(),
            balance: a.balance,
        }
    }
}

/// Move `amount` from one account to another.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TransferBody {
    /// 1-64 characters from `[A-Za-z0-9._:-]`; the idempotency key.
    pub id: String,
    pub from: i64,
    pub to: i64,
    /// 1..=1000000000000 minor units.
    pub amount: i64,
}

/// Money entering or leaving the ledger through the system account.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MovementBody {
    /// 1-64 characters from `[A-Za-z0-9._:-]`; the idempotency key (shared with transfers).
    pub id: String,
    /// 1..=1000000000000 minor units.
    pub amount: i64,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KindView {
    Transfer,
    Opening,
    Deposit,
    Withdrawal,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TransferView {
    pub id: String,
    /// 0 is the system account (openings, deposits).
    pub from: i64,
    pub to: i64,
    pub amount: i64,
    pub kind: KindView,
    pub created_at: DateTime<Utc>,
    /// True when this id was already journalled with the same payload.
    pub replayed: bool,
}

impl From<Transfer> for TransferView {
    fn from(t: Transfer) -> Self {
        TransferView {
            id: t.id.as_str().to_owned(),
            from: t.from.get(),
            to: t.to.get(),
            amount: t.amount,
            kind: match t.kind {
                TransferKind::Transfer => KindView::Transfer,
                TransferKind::Opening => KindView::Opening,
                TransferKind::Deposit => KindView::Deposit,
                TransferKind::Withdrawal => KindView::Withdrawal,
            },
            created_at: t.created_at,
            replayed: t.replayed,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TransfersView {
    pub account: i64,
    /// Newest first.
    pub transfers: Vec<TransferView>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// How many transfers, 1..=1000 (default 50).
    pub limit: Option<i64>,
}

/// Open an account.
#[utoipa::path(post, path = "/v1/accounts", tag = "accounts",
    request_body = OpenAccount,
    security(("admin_token" = [])),
    responses(
        (status = 201, description = "Opened", body = AccountView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM),
        (status = 409, description = "The account exists (`account`)", body = Problem, content_type = PROBLEM),
        (status = 422, description = "Invalid id or opening balance", body = Problem, content_type = PROBLEM),
    ))]
pub async fn open_account(
    _: Admin,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<OpenAccount>,
) -> Result<(StatusCode, Json<AccountView>), ApiError> {
    let id = AccountId::new(body.id)?;
    let ledger = state.ledger.clone();
    let account =
        detached(async move { ledger.open_account(id, body.opening_balance).await }).await?;
    Ok((StatusCode::CREATED, Json(account.into())))
}

/// Read an account's balance.
#[utoipa::path(get, path = "/v1/accounts/{id}", tag = "accounts",
    params(("id" = i64, Path, description = "Account id (> 0)")),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "The account", body = AccountView),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM),
        (status = 404, description = "Unknown account", body = Problem, content_type = PROBLEM),
        (status = 422, description = "Invalid id", body = Problem, content_type = PROBLEM),
    ))]
pub async fn get_account(
    _: Client,
    State(state): State<AppState>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<AccountView>, ApiError> {
    let id = AccountId::new(id)?;
    let ledger = state.ledger.clone();
    Ok(Json(
        detached(async move { ledger.account(id).await })
            .await?
            .into(),
    ))
}

/// An account's latest transfers, newest first.
#[utoipa::path(get, path = "/v1/accounts/{id}/transfers", tag = "accounts",
    params(("id" = i64, Path, description = "Account id (> 0)"), ListQuery),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "Latest transfers", body = TransfersView),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM),
        (status = 404, description = "Unknown account", body = Problem, content_type = PROBLEM),
        (status = 422, description = "Invalid id or limit", body = Problem, content_type = PROBLEM),
    ))]
pub async fn list_transfers(
    _: Client,
    State(state): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<TransfersView>, ApiError> {
    let id = AccountId::new(id)?;
    let limit = query.limit.unwrap_or(DEFAULT_LIST);
    if !(1..=MAX_LIST).contains(&limit) {
        return Err(ApiError::InvalidParameter(format!(
            "limit must be 1..={MAX_LIST}, got {limit}"
        )));
    }
    let ledger = state.ledger.clone();
    let transfers = detached(async move { ledger.transfers_of(id, limit).await }).await?;
    Ok(Json(TransfersView {
        account: id.get(),
        transfers: transfers.into_iter().map(Into::into).collect(),
    }))
}

/// Move money between two accounts, locking both in id order. Idempotent by `id`.
#[utoipa::path(post, path = "/v1/transfers", tag = "accounts",
    request_body = TransferBody,
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 201, description = "Transferred", body = TransferView),
        (status = 200, description = "Replay of an existing transfer (`replayed: true`)", body = TransferView),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = PROBLEM),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM),
        (status = 404, description = "Unknown account (`account`)", body = Problem, content_type = PROBLEM),
        (status = 409, description = "Insufficient funds (`account`) or idempotency conflict (`transfer_id`)", body = Problem, content_type = PROBLEM),
        (status = 422, description = "Same account, bad amount or id", body = Problem, content_type = PROBLEM),
        (status = 503, description = "Contention or database unavailable; retry with the same id", body = Problem, content_type = PROBLEM),
    ))]
pub async fn transfer(
    _: Client,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<TransferBody>,
) -> Result<(StatusCode, Json<TransferView>), ApiError> {
    let request = TransferRequest {
        id: TransferId::new(body.id)?,
        from: AccountId::new(body.from)?,
        to: AccountId::new(body.to)?,
        amount: Amount::new(body.amount)?,
    };
    let ledger = state.ledger.clone();
    let transfer =
        detached(async move { ledger.transfer(ledger.strategy(), &request).await }).await?;
    Ok(created_or_replayed(transfer))
}

/// 201 for a new journal row, 200 for a replay.
fn created_or_replayed(t: Transfer) -> (StatusCode, Json<TransferView>) {
    let code = if t.replayed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    (code, Json(t.into()))
}

/// Deposit into an account (from the system account). Idempotent by `id`.
#[utoipa::path(post, path = "/v1/accounts/{id}/deposits", tag = "accounts",
    params(("id" = i64, Path, description = "Account id (> 0)")),
    request_body = MovementBody,
    security(("admin_token" = [])),
    responses(
        (status = 201, description = "Deposited", body = TransferView),
        (status = 200, description = "Replay (`replayed: true`)", body = TransferView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM),
        (status = 404, description = "Unknown account", body = Problem, content_type = PROBLEM),
        (status = 409, description = "Idempotency conflict (`transfer_id`)", body = Problem, content_type = PROBLEM),
        (status = 422, description = "Bad amount or id", body = Problem, content_type = PROBLEM),
    ))]
pub async fn deposit(
    _: Admin,
    State(state): State<AppState>,
    ApiPath(account): ApiPath<i64>,
    ApiJson(body): ApiJson<MovementBody>,
) -> Result<(StatusCode, Json<TransferView>), ApiError> {
    let (id, to, amount) = (
        TransferId::new(body.id)?,
        AccountId::new(account)?,
        Amount::new(body.amount)?,
    );
    let ledger = state.ledger.clone();
    let t = detached(async move { ledger.deposit(id, to, amount).await }).await?;
    Ok(created_or_replayed(t))
}

/// Withdraw from an account (to the system account); the balance may not go negative.
#[utoipa::path(post, path = "/v1/accounts/{id}/withdrawals", tag = "accounts",
    params(("id" = i64, Path, description = "Account id (> 0)")),
    request_body = MovementBody,
    security(("admin_token" = [])),
    responses(
        (status = 201, description = "Withdrawn", body = TransferView),
        (status = 200, description = "Replay (`replayed: true`)", body = TransferView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM),
        (status = 404, description = "Unknown account", body = Problem, content_type = PROBLEM),
        (status = 409, description = "Insufficient funds or idempotency conflict", body = Problem, content_type = PROBLEM),
        (status = 422, description = "Bad amount or id", body = Problem, content_type = PROBLEM),
    ))]
pub async fn withdraw(
    _: Admin,
    State(state): State<AppState>,
    ApiPath(account): ApiPath<i64>,
    ApiJson(body): ApiJson<MovementBody>,
) -> Result<(StatusCode, Json<TransferView>), ApiError> {
    let (id, from, amount) = (
        TransferId::new(body.id)?,
        AccountId::new(account)?,
        Amount::new(body.amount)?,
    );
    let ledger = state.ledger.clone();
    let t = detached(async move { ledger.withdraw(id, from, amount).await }).await?;
    Ok(created_or_replayed(t))
}
