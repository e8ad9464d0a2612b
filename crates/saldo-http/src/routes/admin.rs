//! Operator routes (admin token): one sweeper round, the divergence audit, who waits on which
//! lock (the `pg_blocking_pids` view, shared with `saldo locks`), and the most refused
//! products (kept out of metric labels to bound their cardinality).

use axum::extract::State;
use axum::Json;
use saldo::audit::citus::{CitusAudit, CitusAuditOptions, TransferDivergence, TransferInvariant};
use saldo::audit::{LedgerDivergence, LedgerInvariant};
use saldo::ops::BlockedSession;
use saldo::stock::sweeper;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::extract::ApiQuery;
use super::schema;
use super::task::detached;
use super::views::DivergenceView;
use crate::auth::Admin;
use crate::error::{ApiError, Problem, PROBLEM_JSON};
use crate::metrics::{RefusalsReport, MAX_TOP};
use crate::state::AppState;

/// Products listed by `/v1/admin/refusals` when `top` is absent.
pub const DEFAULT_TOP: usize = 10;

#[derive(Debug, Serialize, ToSchema)]
pub struct SweepView {
    /// Reservations expired by this round.
    pub expired: u64,
    /// Pending transfers (holds) expired by this round.
    pub expired_transfers: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditView {
    /// True when nothing diverges, stock and ledger.
    pub ok: bool,
    /// Stock divergences.
    pub divergences: Vec<DivergenceView>,
    /// Ledger divergences (`account` absent for the total).
    pub ledger_divergences: Vec<LedgerDivergenceView>,
    /// On a Citus database: transfers whose two journal sides disagree (read twice, with no
    /// 2PC of theirs in flight between). Always empty on one node, where the ledger
    /// divergences above cover the double entry.
    pub transfer_divergences: Vec<TransferDivergenceView>,
    /// On a Citus database: transfer ids whose 2PC did not resolve within the audit's wait:
    /// neither clean nor a divergence, audit again (`ok` is false). Always empty on one node.
    pub unresolved_transfers: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TransferDivergenceView {
    pub transfer_id: String,
    /// `routed_by_id`, `debit_side_exists`, `credit_side_exists`, `sides_match_route` or
    /// `sides_agree`.
    pub invariant: String,
}

impl From<&TransferDivergence> for TransferDivergenceView {
    fn from(d: &TransferDivergence) -> Self {
        TransferDivergenceView {
            transfer_id: d.state.transfer_id.clone(),
            invariant: match d.invariant {
                TransferInvariant::RoutedById => "routed_by_id",
                TransferInvariant::DebitSideExists => "debit_side_exists",
                TransferInvariant::CreditSideExists => "credit_side_exists",
                TransferInvariant::SidesMatchRoute => "sides_match_route",
                TransferInvariant::SidesAgree => "sides_agree",
            }
            .to_owned(),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LedgerDivergenceView {
    pub account: Option<i64>,
    /// `total_is_zero`, `currency_total_is_zero`, `balance_matches_journal`,
    /// `pending_totals_match`, `held_matches_pending`, `pending_credits_match_pending`,
    /// `journal_in_account_currency`, `latest_entry_matches_counters` (an account's latest
    /// entry does not say its counters, which agree with its journal), or for a transfer
    /// (`transfer`) `reversed_matches_reversals` (its `reversed` against the sum of its
    /// reversals), `reversals_match_count` or `reversal_original_exists` (reversals name a
    /// transfer that is not there).
    pub invariant: String,
    pub expected: i64,
    pub actual: i64,
    /// The currency of a per-currency total (`currency_total_is_zero`,
    /// `pending_totals_match`), or the account's (`journal_in_account_currency`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "EUR")]
    pub currency: Option<String>,
    /// The transfer of a reversal invariant (on Citus, `account` is the side found wrong).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer: Option<String>,
}

impl From<&LedgerDivergence> for LedgerDivergenceView {
    fn from(d: &LedgerDivergence) -> Self {
        LedgerDivergenceView {
            account: d.account.map(|a| a.get()),
            invariant: match d.invariant {
                LedgerInvariant::TotalIsZero => "total_is_zero",
                LedgerInvariant::BalanceMatchesJournal => "balance_matches_journal",
                LedgerInvariant::PendingTotalsMatch => "pending_totals_match",
                LedgerInvariant::HeldMatchesPending => "held_matches_pending",
                LedgerInvariant::PendingCreditsMatchPending => "pending_credits_match_pending",
                LedgerInvariant::CurrencyTotalIsZero => "currency_total_is_zero",
                LedgerInvariant::JournalInAccountCurrency => "journal_in_account_currency",
                LedgerInvariant::LatestEntryMatchesCounters => "latest_entry_matches_counters",
                LedgerInvariant::ReversedMatchesReversals => "reversed_matches_reversals",
                LedgerInvariant::ReversalsMatchCount => "reversals_match_count",
                LedgerInvariant::ReversalOriginalExists => "reversal_original_exists",
            }
            .to_owned(),
            expected: d.expected,
            actual: d.actual,
            currency: d.currency.map(|c| c.to_string()),
            transfer: d.transfer.as_ref().map(|t| t.as_str().to_owned()),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BlockedSessionView {
    pub pid: i32,
    /// The sessions this one waits for.
    pub blocked_by: Vec<i32>,
    pub wait_event_type: Option<String>,
    /// How long its transaction has been open.
    pub transaction_age_ms: Option<i64>,
    /// The first 80 characters of its query.
    pub query: Option<String>,
}

impl From<BlockedSession> for BlockedSessionView {
    fn from(s: BlockedSession) -> Self {
        BlockedSessionView {
            pid: s.pid,
            blocked_by: s.blocked_by,
            wait_event_type: s.wait_event_type,
            transaction_age_ms: s.transaction_age_ms,
            query: s.query,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LocksView {
    /// Sessions waiting on a lock, oldest transaction first.
    pub sessions: Vec<BlockedSessionView>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TopQuery {
    #[param(schema_with = schema::top)]
    pub top: Option<usize>,
}

/// Expire due reservations and pending transfers now (one sweeper round).
#[utoipa::path(post, path = "/v1/admin/sweep", tag = "admin",
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "How many reservations and holds expired", body = SweepView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn sweep(_: Admin, State(state): State<AppState>) -> Result<Json<SweepView>, ApiError> {
    let store = state.store().clone();
    let ledger = state.ledger.clone();
    let (expired, expired_transfers) =
        detached(async move { Ok((sweeper::sweep(&store).await?, ledger.expire_due().await?)) })
            .await?;
    Ok(Json(SweepView {
        expired,
        expired_transfers,
    }))
}

/// Run the stock and ledger divergence audits; `ok` must be true.
#[utoipa::path(get, path = "/v1/admin/audit", tag = "admin",
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The audit's findings", body = AuditView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn audit(_: Admin, State(state): State<AppState>) -> Result<Json<AuditView>, ApiError> {
    let pool = state.store().pool.clone();
    let citus = state.store().is_citus();
    // On Citus the single node's one-snapshot audit does not apply (no common snapshot, the
    // journal written per side): the per-shard and per-transfer audit does, as in `saldo audit`.
    let audit = detached(async move {
        if citus {
            return saldo::audit::citus::audit(&pool, CitusAuditOptions::default()).await;
        }
        Ok(CitusAudit {
            stock: saldo::audit::audit_stock(&pool).await?,
            ledger: saldo::audit::audit_ledger(&pool).await?,
            ..CitusAudit::default()
        })
    })
    .await?;
    Ok(Json(AuditView {
        ok: audit.is_clean(),
        divergences: audit.stock.iter().map(DivergenceView::from).collect(),
        ledger_divergences: audit
            .ledger
            .iter()
            .map(LedgerDivergenceView::from)
            .collect(),
        transfer_divergences: audit
            .transfers
            .iter()
            .map(TransferDivergenceView::from)
            .collect(),
        unresolved_transfers: audit.unresolved,
    }))
}

/// Sessions waiting on locks, who blocks them, and for how long.
#[utoipa::path(get, path = "/v1/admin/locks", tag = "admin",
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "Blocked sessions", body = LocksView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn locks(_: Admin, State(state): State<AppState>) -> Result<Json<LocksView>, ApiError> {
    let pool = state.store().pool.clone();
    let sessions = detached(async move { saldo::ops::locks(&pool).await }).await?;
    Ok(Json(LocksView {
        sessions: sessions.into_iter().map(Into::into).collect(),
    }))
}

/// The products most often refused for insufficient stock since the service started.
#[utoipa::path(get, path = "/v1/admin/refusals", tag = "admin",
    params(TopQuery),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "Most refused products first", body = RefusalsReport),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "`top` outside 1..=1000", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn refusals(
    _: Admin,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<TopQuery>,
) -> Result<Json<RefusalsReport>, ApiError> {
    let top = query.top.unwrap_or(DEFAULT_TOP);
    if !(1..=MAX_TOP).contains(&top) {
        return Err(ApiError::InvalidParameter(format!(
            "top must be 1..={MAX_TOP}, got {top}"
        )));
    }
    Ok(Json(state.refusals.top(top)))
}
