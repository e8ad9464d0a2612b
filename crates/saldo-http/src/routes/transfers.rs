//! Holds, reversals and linked transfers: post a pending transfer (whole or partial), void
//! it, reverse a posted one (all or part, never more than it posted), read any transfer with
//! its status, and apply a linked group of transfers all or none.
//! Post, void and the sweeper's expiry race for a hold with exactly one winner; a loser gets 409
//! `transfer-not-pending` naming the state the hold reached (`transfer_status`), and the
//! winner's own call repeated answers 200 with the same transfer (`replayed: true`).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use saldo::domain::{Amount, GroupId, TransferId, MAX_GROUP_TRANSFERS};
use saldo::ledger::{Group, GroupRequest, ReversalRequest};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::bodies::TransferBody;
use super::extract::{ApiJson, ApiPath};
use super::task::detached;
use super::views::{created_or_replayed, TransferView};
use crate::auth::Client;
use crate::error::{ApiError, Problem, PROBLEM_JSON};
use crate::state::AppState;

/// The transfer a route names.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TransferPath {
    /// Transfer id.
    #[param(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9._:-]{1,64}$")]
    pub id: String,
}

/// What to post of a hold.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PostBody {
    #[serde(default, deserialize_with = "super::numbers::opt_i64")]
    #[schema(schema_with = super::schema::post_amount)]
    pub amount: Option<i64>,
}

/// A reversal of a posted transfer: its own id, and how much of the transfer to move back.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReverseBody {
    /// The reversal's own id: its idempotency key, as any transfer's.
    #[schema(schema_with = super::schema::transfer_id)]
    pub id: String,
    #[serde(default, deserialize_with = "super::numbers::opt_i64")]
    #[schema(schema_with = super::schema::reverse_amount)]
    pub amount: Option<i64>,
    #[serde(default)]
    #[schema(schema_with = super::schema::reference)]
    pub reference: Option<String>,
    #[serde(default)]
    #[schema(schema_with = super::schema::metadata)]
    pub metadata: Option<serde_json::Value>,
}

/// Transfers applied all or none.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupBody {
    /// The group's idempotency key.
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9._:-]{1,64}$")]
    pub id: String,
    /// Each a transfer as for `POST /v1/transfers`, pending or not, with distinct ids; applied
    /// in this order.
    #[schema(min_items = 1, max_items = 100)]
    pub transfers: Vec<TransferBody>,
    /// The group's own reference (each transfer may carry its own too).
    #[serde(default)]
    #[schema(schema_with = super::schema::reference)]
    pub reference: Option<String>,
    #[serde(default)]
    #[schema(schema_with = super::schema::metadata)]
    pub metadata: Option<serde_json::Value>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct GroupView {
    pub id: String,
    /// In request order.
    pub transfers: Vec<TransferView>,
    /// True when this group id was already applied with the same payload.
    pub replayed: bool,
    /// The group's own reference, as given.
    pub reference: Option<String>,
    /// The group's own metadata, as given.
    #[schema(value_type = Option<std::collections::BTreeMap<String, String>>)]
    pub metadata: Option<serde_json::Value>,
}

impl From<Group> for GroupView {
    fn from(g: Group) -> Self {
        GroupView {
            id: g.id.as_str().to_owned(),
            transfers: g.transfers.into_iter().map(Into::into).collect(),
            replayed: g.replayed,
            reference: g.tags.reference.map(|r| r.as_str().to_owned()),
            metadata: g
                .tags
                .metadata
                .as_ref()
                .map(saldo::domain::Metadata::to_json),
        }
    }
}

/// Post a pending transfer: `amount` (default: all of it) moves, the rest of the hold is released.
#[utoipa::path(post, path = "/v1/transfers/{id}/post", tag = "accounts",
    params(TransferPath),
    request_body(content = Option<PostBody>, description = "Optional; absent, `null` or `{}` posts the whole amount"),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "Posted (`status: posted`, `posted_amount`); `replayed: true` when this same post had already won", body = TransferView),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown transfer (`transfer_id`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "`transfer-not-pending`: voided, expired or posted otherwise (`transfer_status`, `posted_amount`); `currency-mismatch` for a hold whose accounts are in two currencies", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Bad id or amount, or more than the hold (`post-exceeds-hold`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "Contention or database unavailable; retry", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn post_transfer(
    _: Client,
    State(state): State<AppState>,
    ApiPath(TransferPath { id }): ApiPath<TransferPath>,
    body: Bytes,
) -> Result<Json<TransferView>, ApiError> {
    let id = TransferId::new(id)?;
    // The body is optional: nothing (or only whitespace), `null` or `{}` mean the whole amount.
    let amount = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        let axum::Json(parsed) = axum::Json::<Option<PostBody>>::from_bytes(&body)?;
        parsed.and_then(|p| p.amount).map(Amount::new).transpose()?
    };
    let ledger = state.ledger.clone();
    let t = detached(async move { ledger.post(&id, amount).await }).await?;
    Ok(Json(t.into()))
}

/// Void a pending transfer: the hold is released.
#[utoipa::path(post, path = "/v1/transfers/{id}/void", tag = "accounts",
    params(TransferPath),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "Voided (`status: voided`); `replayed: true` when already voided by a void", body = TransferView),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown transfer (`transfer_id`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "`transfer-not-pending`: posted or expired (`transfer_status`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Bad id", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "Contention or database unavailable; retry", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn void_transfer(
    _: Client,
    State(state): State<AppState>,
    ApiPath(TransferPath { id }): ApiPath<TransferPath>,
) -> Result<Json<TransferView>, ApiError> {
    let id = TransferId::new(id)?;
    let ledger = state.ledger.clone();
    let t = detached(async move { ledger.void(&id).await }).await?;
    Ok(Json(t.into()))
}

/// Reverse a posted transfer (a refund): `amount` of it (default: all that is left) moves back
/// from its `to` to its `from` as a new transfer of kind `reversal` naming it (`reverses`).
/// Never more in total than it posted; the original then shows `reversed_amount` and, read on
/// its own, its `reversals`. Idempotent by the reversal's id.
#[utoipa::path(post, path = "/v1/transfers/{id}/reverse", tag = "accounts",
    params(TransferPath),
    request_body = ReverseBody,
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 201, description = "Reversed: the reversal (`kind: reversal`, `reverses`, `status: posted`)", body = TransferView),
        (status = 200, description = "Replay of the same reversal (`replayed: true`; without an amount it matches whatever the first one came to)", body = TransferView),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown transfer (`transfer_id`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "`transfer-not-posted`: a hold still pending, voided or expired (`transfer_status`); `reversal-exceeds-posted`: more than is left, or nothing left (`posted_amount`, `reversed_amount`, `requested`: null when the rest was asked); the reversing account's limits (`insufficient-funds`, `max-balance-exceeded`); the reversal id used for something else (`idempotency-conflict`, `transfer_id`). Nothing written", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Bad id, amount, reference or metadata", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "Contention or database unavailable; retry with the same reversal id", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn reverse_transfer(
    _: Client,
    State(state): State<AppState>,
    ApiPath(TransferPath { id }): ApiPath<TransferPath>,
    ApiJson(body): ApiJson<ReverseBody>,
) -> Result<(StatusCode, Json<TransferView>), ApiError> {
    let request = ReversalRequest {
        id: TransferId::new(body.id)?,
        original: TransferId::new(id)?,
        amount: body.amount.map(Amount::new).transpose()?,
        tags: super::bodies::tags(body.reference, body.metadata)?,
    };
    crate::access_log::note_transfer_id(&request.id);
    let ledger = state.ledger.clone();
    let t = detached(async move { ledger.reverse(&request).await }).await?;
    Ok(created_or_replayed(t))
}

/// Read a transfer with its status.
#[utoipa::path(get, path = "/v1/transfers/{id}", tag = "accounts",
    params(TransferPath),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "The transfer", body = TransferView),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown transfer (`transfer_id`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Bad id", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn get_transfer(
    _: Client,
    State(state): State<AppState>,
    ApiPath(TransferPath { id }): ApiPath<TransferPath>,
) -> Result<Json<TransferView>, ApiError> {
    let id = TransferId::new(id)?;
    let ledger = state.ledger.clone();
    let t = detached(async move { ledger.get_transfer(&id).await }).await?;
    Ok(Json(t.into()))
}

/// Apply up to 100 transfers all or none, every account locked once in id order. Idempotent by
/// the group id.
#[utoipa::path(post, path = "/v1/transfer-groups", tag = "accounts",
    request_body = GroupBody,
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 201, description = "Every transfer applied", body = GroupView),
        (status = 200, description = "Replay of the same group (`replayed: true`)", body = GroupView),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = PROBLEM_JSON),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "A transfer names an unknown account (`failed_index`, `failed_transfer_id`, `account`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "Refused as a whole: the first transfer that failed (`failed_index`, `failed_transfer_id`) and why (limits, `currency-mismatch`: a leg between accounts of two currencies, a transfer id already used), or the group id was used with another payload (`group_id`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Empty, over 100 transfers, a repeated transfer id, or a bad transfer (`failed_index`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "Contention or database unavailable; retry with the same group id", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn transfer_group(
    _: Client,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<GroupBody>,
) -> Result<(StatusCode, Json<GroupView>), ApiError> {
    let id = GroupId::new(body.id)?;
    if !(1..=MAX_GROUP_TRANSFERS).contains(&body.transfers.len()) {
        return Err(saldo::Error::from(saldo::InputError::GroupSize {
            len: body.transfers.len(),
            max: MAX_GROUP_TRANSFERS,
        })
        .into());
    }
    let tags = super::bodies::tags(body.reference, body.metadata)?;
    let default_timeout = state.settings.default_transfer_timeout;
    let mut transfers = Vec::with_capacity(body.transfers.len());
    for (index, t) in body.transfers.into_iter().enumerate() {
        // An invalid transfer id is refused as such; any other bad field names its transfer.
        let transfer = TransferId::new(t.id.clone())?;
        transfers.push(t.parse(default_timeout).map_err(|e| match e {
            ApiError::Domain(source) => ApiError::Domain(saldo::Error::GroupRefused {
                group: id.clone(),
                index,
                transfer,
                source: Box::new(source),
            }),
            other => other,
        })?);
    }
    let request = GroupRequest {
        id,
        transfers,
        tags,
    };
    let ledger = state.ledger.clone();
    let group = detached(async move { ledger.transfer_group(&request).await }).await?;
    let code = if group.replayed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((code, Json(group.into())))
}
