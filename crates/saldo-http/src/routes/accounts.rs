//! Money routes: open an account with its limits (admin), read it (balance,
//! held, available, pending credits) and its latest transfers, and move money between two
//! accounts at once or as a hold (`"pending": true`). Transfers always lock both accounts in id
//! order, with the served transfer strategy (`ordered`, or the batched ledger engine that
//! groups the movements of a hot account into one transaction); the naive order exists for the
//! lab only. A replayed transfer id answers 200 with the original transfer and
//! `"replayed": true`. Settling a hold and linked groups are in [`super::transfers`].

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use saldo::domain::{AccountId, Amount, BalanceLimits, TransferId};
use saldo::ledger::{AccountRequest, Denomination, MAX_LIST};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::bodies::TransferBody;
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::params::AccountPath;
use super::schema;
use super::task::detached;
use super::views::{created_or_replayed, AccountView, TransferView};
use crate::auth::{Admin, Client};
use crate::error::{ApiError, Problem, PROBLEM_JSON};
use crate::state::AppState;

/// Transfers listed by `GET /v1/accounts/{id}/transfers` when `limit` is absent.
pub const DEFAULT_LIST: i64 = 50;

/// Open an account with an opening balance moved from the system account, and its limits.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenAccount {
    #[schema(schema_with = schema::account_id)]
    #[serde(deserialize_with = "super::numbers::i64")]
    pub id: i64,
    /// Default 0.
    #[serde(default, deserialize_with = "super::numbers::i64")]
    #[schema(schema_with = schema::opening_balance)]
    pub opening_balance: i64,
    /// `balance - held` may not go below it: 0 (the default) allows no overdraft, a negative
    /// value is a credit line.
    #[serde(default, deserialize_with = "super::numbers::i64")]
    #[schema(schema_with = schema::min_balance)]
    pub min_balance: i64,
    /// `balance + pending_credits` may not go above it; absent: no ceiling.
    #[serde(default, deserialize_with = "super::numbers::opt_i64")]
    #[schema(schema_with = schema::max_balance)]
    pub max_balance: Option<i64>,
    /// What its amounts are in, fixed for good: an ISO 4217 code (`EUR`, `JPY`) or an asset
    /// code of the same shape. Default `EUR`.
    #[schema(
        example = "USD",
        pattern = "^[A-Z][A-Z0-9_]{2,11}$",
        min_length = 3,
        max_length = 12
    )]
    pub currency: Option<String>,
    /// Minor-unit digits (0..=18). Default: the currency's ISO 4217 minor unit (JPY 0; KWD,
    /// BHD, JOD, OMR, TND 3; any other code 2).
    #[serde(default, deserialize_with = "super::numbers::opt_i64")]
    #[schema(example = 2, minimum = 0, maximum = 18)]
    pub scale: Option<i64>,
    /// Your own id for the account (a customer, a wallet); not unique. Stored with it and
    /// shown in every answer about it.
    #[serde(default)]
    #[schema(schema_with = schema::account_reference)]
    pub reference: Option<String>,
    #[serde(default)]
    #[schema(schema_with = schema::metadata)]
    pub metadata: Option<serde_json::Value>,
}

/// Money entering or leaving the ledger through the system account.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MovementBody {
    #[schema(schema_with = schema::transfer_id)]
    pub id: String,
    #[schema(schema_with = schema::amount)]
    #[serde(deserialize_with = "super::numbers::i64")]
    pub amount: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TransfersView {
    pub account: i64,
    /// Newest first.
    pub transfers: Vec<TransferView>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    #[param(schema_with = schema::transfers_limit)]
    pub limit: Option<i64>,
}

/// Open an account.
#[utoipa::path(post, path = "/v1/accounts", tag = "accounts",
    request_body = OpenAccount,
    security(("admin_token" = [])),
    responses(
        (status = 201, description = "Opened", body = AccountView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "The account exists (`account`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid id, opening balance, limits, currency, scale, reference or metadata; nothing written", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn open_account(
    _: Admin,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<OpenAccount>,
) -> Result<(StatusCode, Json<AccountView>), ApiError> {
    let id = AccountId::new(body.id)?;
    let limits = BalanceLimits::new(body.min_balance, body.max_balance)?;
    let denomination = Denomination::parse(body.currency.as_deref(), body.scale)?;
    let request = AccountRequest {
        id,
        opening_balance: body.opening_balance,
        limits,
        denomination,
        tags: super::bodies::tags(body.reference, body.metadata)?,
    };
    let ledger = state.ledger.clone();
    let account = detached(async move { ledger.open(&request).await }).await?;
    Ok((StatusCode::CREATED, Json(account.into())))
}

/// Read an account: posted balance, held, available, pending credits and limits.
#[utoipa::path(get, path = "/v1/accounts/{id}", tag = "accounts",
    params(AccountPath),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "The account", body = AccountView),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown account", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid id", body = Problem, content_type = PROBLEM_JSON),
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
    params(AccountPath, ListQuery),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "Latest transfers", body = TransfersView),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown account", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid id or limit", body = Problem, content_type = PROBLEM_JSON),
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

/// Move money between two accounts, locking both in id order: posted at once, or held
/// (`"pending": true`) until posted, voided or expired. Idempotent by `id`.
#[utoipa::path(post, path = "/v1/transfers", tag = "accounts",
    request_body = TransferBody,
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 201, description = "Transferred (`status: posted`) or held (`status: pending`, `expires_at`)", body = TransferView),
        (status = 200, description = "Replay of an existing transfer (`replayed: true`)", body = TransferView),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown account (`account`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "A limit refused it (`insufficient-funds` / `max-balance-exceeded`: `account`, `limit`, the amounts), the accounts are in two currencies (`currency-mismatch`: `from`, `to`, `from_currency`, `to_currency`, `from_scale`, `to_scale`; nothing written), the balance would leave 64 bits (`balance-out-of-range`), or idempotency conflict (`transfer_id`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Same account, bad amount, id or timeout", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "Contention or database unavailable; retry with the same id", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn transfer(
    _: Client,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<TransferBody>,
) -> Result<(StatusCode, Json<TransferView>), ApiError> {
    let linked = body.parse(state.settings.default_transfer_timeout)?;
    crate::access_log::note_transfer_id(&linked.transfer.id);
    let ledger = state.ledger.clone();
    let transfer = detached(async move {
        match linked.pending {
            Some(timeout) => ledger.hold(&linked.transfer, timeout).await,
            None => ledger.transfer(ledger.strategy(), &linked.transfer).await,
        }
    })
    .await?;
    Ok(created_or_replayed(transfer))
}

/// Deposit into an account (from the system account). Idempotent by `id`.
#[utoipa::path(post, path = "/v1/accounts/{id}/deposits", tag = "accounts",
    params(AccountPath),
    request_body = MovementBody,
    security(("admin_token" = [])),
    responses(
        (status = 201, description = "Deposited", body = TransferView),
        (status = 200, description = "Replay (`replayed: true`)", body = TransferView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown account", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "The account's max_balance (`max-balance-exceeded`), a balance out of 64 bits, or idempotency conflict (`transfer_id`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Bad amount or id", body = Problem, content_type = PROBLEM_JSON),
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
    crate::access_log::note_transfer_id(&id);
    let ledger = state.ledger.clone();
    let t = detached(async move { ledger.deposit(id, to, amount).await }).await?;
    Ok(created_or_replayed(t))
}

/// Withdraw from an account (to the system account); `balance - held` may not go below the
/// account's `min_balance`.
#[utoipa::path(post, path = "/v1/accounts/{id}/withdrawals", tag = "accounts",
    params(AccountPath),
    request_body = MovementBody,
    security(("admin_token" = [])),
    responses(
        (status = 201, description = "Withdrawn", body = TransferView),
        (status = 200, description = "Replay (`replayed: true`)", body = TransferView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown account", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "Insufficient funds (`account`, `limit`, the amounts) or idempotency conflict", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Bad amount or id", body = Problem, content_type = PROBLEM_JSON),
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
    crate::access_log::note_transfer_id(&id);
    let ledger = state.ledger.clone();
    let t = detached(async move { ledger.withdraw(id, from, amount).await }).await?;
    Ok(created_or_replayed(t))
}
