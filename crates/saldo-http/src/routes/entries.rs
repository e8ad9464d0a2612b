//! An account's statement and its balance at a time (`saldo::listing::entries`): its entries a
//! page at a time (keyset on time and seq, `from`/`to`, the cursor bound to both and to the
//! account), each naming its transfer, what it did and the counters right after it; and the
//! balance, held and pending credits as of an instant. Same auth as the account's own read.

use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use saldo::domain::AccountId;
use saldo::ledger::entries::{BalanceAt, Direction, Entry, EntryKind};
use saldo::listing::entries::{self, EntryFilter};
use saldo::listing::{Cursor, ListKind, PageLimit};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::extract::{ApiPath, ApiQuery};
use super::params::AccountPath;
use super::schema;
use super::task::detached;
use crate::auth::Client;
use crate::error::{ApiError, Problem, PROBLEM_JSON};
use crate::state::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EntriesQuery {
    #[param(schema_with = schema::entries_from)]
    pub from: Option<String>,
    #[param(schema_with = schema::entries_to)]
    pub to: Option<String>,
    #[param(schema_with = schema::page_limit)]
    pub limit: Option<i64>,
    #[param(schema_with = schema::entries_cursor)]
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BalanceQuery {
    pub at: String,
}

// By hand: the derive leaves a `schema_with` parameter optional, and `at` is required.
impl IntoParams for BalanceQuery {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
        vec![ParameterBuilder::new()
            .name("at")
            .parameter_in(ParameterIn::Query)
            .required(utoipa::openapi::Required::True)
            .schema(Some(schema::balance_at()))
            .build()]
    }
}

/// What changed the account.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryKindView {
    /// Opened (with its opening balance, if any; also the first entry of an account older
    /// than statements).
    Opening,
    /// A transfer posted at once: the balance moved by `amount`.
    Transfer,
    Deposit,
    Withdrawal,
    Reversal,
    /// A hold placed: `held` (debit side) or `pending_credits` (credit side) grew by `amount`.
    Hold,
    /// A hold posted: the balance moved by `amount` and the whole hold was released.
    Post,
    /// A hold voided: `amount` released, the balance unchanged.
    Void,
    /// A hold expired: released like a void.
    Expire,
    /// An operator's repair brought the counters back to the journal (`amount`: the balance's
    /// change).
    Repair,
}

impl From<EntryKind> for EntryKindView {
    fn from(k: EntryKind) -> Self {
        match k {
            EntryKind::Opening => EntryKindView::Opening,
            EntryKind::Transfer => EntryKindView::Transfer,
            EntryKind::Deposit => EntryKindView::Deposit,
            EntryKind::Withdrawal => EntryKindView::Withdrawal,
            EntryKind::Reversal => EntryKindView::Reversal,
            EntryKind::Hold => EntryKindView::Hold,
            EntryKind::Post => EntryKindView::Post,
            EntryKind::Void => EntryKindView::Void,
            EntryKind::Expire => EntryKindView::Expire,
            EntryKind::Repair => EntryKindView::Repair,
        }
    }
}

/// The account's side: `debit` for the transfer's source, `credit` for its destination.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DirectionView {
    Debit,
    Credit,
}

impl From<Direction> for DirectionView {
    fn from(d: Direction) -> Self {
        match d {
            Direction::Debit => DirectionView::Debit,
            Direction::Credit => DirectionView::Credit,
        }
    }
}

/// One line of a statement: what happened and the counters right after it.
#[derive(Debug, Serialize, ToSchema)]
pub struct EntryView {
    /// 1, 2, … per account, without gaps.
    pub seq: i64,
    /// The transfer (or hold) that changed the account; null for an opening without a balance
    /// and a repair.
    pub transfer_id: Option<String>,
    pub kind: EntryKindView,
    pub direction: DirectionView,
    /// In minor units of `currency`.
    pub amount: i64,
    #[schema(example = "EUR")]
    pub currency: Option<String>,
    pub balance_after: i64,
    pub held_after: i64,
    /// `balance_after - held_after`.
    pub available_after: i64,
    pub pending_credits_after: i64,
    /// When it was written.
    pub at: DateTime<Utc>,
}

impl From<Entry> for EntryView {
    fn from(e: Entry) -> Self {
        EntryView {
            seq: e.seq,
            transfer_id: e.transfer_id.map(|t| t.as_str().to_owned()),
            kind: e.kind.into(),
            direction: e.direction.into(),
            amount: e.amount,
            currency: e.currency.map(|c| c.to_string()),
            balance_after: e.balance_after,
            held_after: e.held_after,
            available_after: e.available_after,
            pending_credits_after: e.pending_credits_after,
            at: e.at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EntriesPage {
    pub account: i64,
    /// Oldest first.
    pub entries: Vec<EntryView>,
    /// Pass as `cursor` (with the same `from` and `to`) for the next page; null when this page
    /// is the last.
    pub next_cursor: Option<String>,
}

/// The account's counters as of an instant.
#[derive(Debug, Serialize, ToSchema)]
pub struct BalanceAtView {
    pub account: i64,
    /// The instant asked about.
    pub at: DateTime<Utc>,
    #[schema(example = "EUR")]
    pub currency: Option<String>,
    pub balance: i64,
    pub held: i64,
    pub available: i64,
    pub pending_credits: i64,
    /// The entry these come from (the last one at or before `at`) and when it was written.
    pub entry_seq: i64,
    pub entry_at: DateTime<Utc>,
}

impl From<BalanceAt> for BalanceAtView {
    fn from(b: BalanceAt) -> Self {
        BalanceAtView {
            account: b.account.get(),
            at: b.at,
            currency: b.currency.map(|c| c.to_string()),
            balance: b.balance,
            held: b.held,
            available: b.available,
            pending_credits: b.pending_credits,
            entry_seq: b.entry_seq,
            entry_at: b.entry_at,
        }
    }
}

/// An RFC 3339 time of the query (`name` for the message).
pub(super) fn time(name: &str, raw: &str) -> Result<DateTime<Utc>, ApiError> {
    DateTime::parse_from_rfc3339(raw)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| ApiError::InvalidParameter(format!("{name} is not an RFC 3339 time: {e}")))
}

/// An account's statement: its entries, oldest first, a page at a time.
#[utoipa::path(get, path = "/v1/accounts/{id}/entries", tag = "accounts",
    params(AccountPath, EntriesQuery),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "One page of the statement", body = EntriesPage),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown account", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid id, a time that is not RFC 3339, `limit` out of range (`invalid-input`), or a cursor of another statement or list (`cursor-invalid`)", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn list_entries(
    _: Client,
    State(state): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(query): ApiQuery<EntriesQuery>,
) -> Result<Json<EntriesPage>, ApiError> {
    let id = AccountId::new(id)?;
    let from = query.from.as_deref().map(|t| time("from", t)).transpose()?;
    let to = query.to.as_deref().map(|t| time("to", t)).transpose()?;
    let filter = EntryFilter::new(id, from, to);
    let limit = query
        .limit
        .map(PageLimit::new)
        .transpose()?
        .unwrap_or_default();
    let cursor = query
        .cursor
        .as_deref()
        .map(|c| Cursor::parse(ListKind::Entries, c))
        .transpose()?;
    let store = state.store().clone();
    let page =
        detached(async move { entries::entries(&store, &filter, limit, cursor.as_ref()).await })
            .await?;
    Ok(Json(EntriesPage {
        account: id.get(),
        entries: page.items.into_iter().map(Into::into).collect(),
        next_cursor: page.next.map(|c| c.to_string()),
    }))
}

/// An account's balance, held and pending credits as of an instant: those its last entry at or
/// before it left.
#[utoipa::path(get, path = "/v1/accounts/{id}/balance", tag = "accounts",
    params(AccountPath, BalanceQuery),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "The counters as of `at`", body = BalanceAtView),
        (status = 401, description = "API token required and missing or wrong", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown account (`unknown-account`), or no entry at or before `at`: the account was opened later (`no-balance-at`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Invalid id, or `at` missing or not RFC 3339", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn balance_at(
    _: Client,
    State(state): State<AppState>,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(query): ApiQuery<BalanceQuery>,
) -> Result<Json<BalanceAtView>, ApiError> {
    let id = AccountId::new(id)?;
    let at = time("at", &query.at)?;
    let store = state.store().clone();
    let balance = detached(async move { entries::balance_at(&store, id, at).await }).await?;
    Ok(Json(balance.into()))
}
