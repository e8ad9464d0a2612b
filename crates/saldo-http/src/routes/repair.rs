//! `POST /v1/admin/repair` (admin): what `saldo audit --repair [--apply]` does, over
//! HTTP. A dry run unless `{"apply": true}`: per divergent product, its counters and what they
//! should be (`reserved` from the active reservations, `available` from the history), and per
//! divergent account its `balance`, `held` and `pending_credits` and what its journal says they
//! should be; applied, each product is written under its row lock with a `repair: …` movement,
//! each account under its lock with an `account_repairs` row, one that changed since the plan
//! is left alone (`changed`), what no write can fix is named with why (`unrepairable`), and
//! the answer carries the re-audit of both: `remaining` is empty only when all is clean.

use axum::extract::State;
use axum::Json;
use saldo::audit::Finding;
use saldo::ledger::repair::{AccountAction, AccountRepair, LedgerRepairReport, Unrepairable};
use saldo::ledger::Counters;
use saldo::stock::repair::{self, Counts, LocationCounts, ProductRepair, RepairAction};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::admin::{LedgerDivergenceView, TransferDivergenceView};
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
    /// Left alone: it changed during the repair (run it again).
    Changed,
    /// Left alone: no write can satisfy its invariants (a product: the history says fewer
    /// units than are actively reserved, or, stocked per location, its locations cannot be
    /// made to agree with it: count it; an account: see its `reason`).
    Unrepairable,
}

/// A location's counters.
#[derive(Debug, Serialize, ToSchema)]
pub struct LocationCountsView {
    pub available: i64,
    pub reserved: i64,
}

impl From<LocationCounts> for LocationCountsView {
    fn from(c: LocationCounts) -> Self {
        LocationCountsView {
            available: c.available,
            reserved: c.reserved,
        }
    }
}

/// One location row of a product stocked per location that the repair sets back (or would).
#[derive(Debug, Serialize, ToSchema)]
pub struct LocationRepairView {
    pub location_id: String,
    pub before: LocationCountsView,
    pub after: LocationCountsView,
}

/// One divergent product.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProductRepairView {
    pub product_id: i64,
    /// The row version the repair was planned against.
    pub version: i64,
    pub before: CountsView,
    pub after: CountsView,
    /// A product stocked per location: its location rows that change, in location order
    /// (`reserved` ← the active allocations at the location; `available` kept, or the
    /// location's on-hand kept, whichever agrees with the product's history). Empty for other
    /// products, and when unrepairable (no reading agrees: count its locations).
    pub locations: Vec<LocationRepairView>,
    pub action: RepairActionView,
}

impl From<&ProductRepair> for ProductRepairView {
    fn from(p: &ProductRepair) -> Self {
        ProductRepairView {
            product_id: p.product_id.get(),
            version: p.version,
            before: p.before.into(),
            after: p.after.into(),
            locations: p
                .locations
                .iter()
                .map(|l| LocationRepairView {
                    location_id: l.location_id.as_str().to_owned(),
                    before: l.before.into(),
                    after: l.after.into(),
                })
                .collect(),
            action: match p.action {
                RepairAction::Planned => RepairActionView::Planned,
                RepairAction::Applied => RepairActionView::Applied,
                RepairAction::Changed => RepairActionView::Changed,
                RepairAction::Unrepairable => RepairActionView::Unrepairable,
            },
        }
    }
}

/// An account's counters.
#[derive(Debug, Serialize, ToSchema)]
pub struct AccountCountersView {
    pub balance: i64,
    pub held: i64,
    pub pending_credits: i64,
}

impl From<Counters> for AccountCountersView {
    fn from(c: Counters) -> Self {
        AccountCountersView {
            balance: c.balance,
            held: c.held,
            pending_credits: c.pending_credits,
        }
    }
}

/// One divergent account.
#[derive(Debug, Serialize, ToSchema)]
pub struct AccountRepairView {
    pub account: i64,
    pub before: AccountCountersView,
    /// What its journal says (as before when unrepairable).
    pub after: AccountCountersView,
    pub action: RepairActionView,
    /// Why it is unrepairable, and the command that shows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl From<&AccountRepair> for AccountRepairView {
    fn from(a: &AccountRepair) -> Self {
        AccountRepairView {
            account: a.account.get(),
            before: a.before.into(),
            after: a.after.into(),
            action: match a.action {
                AccountAction::Planned => RepairActionView::Planned,
                AccountAction::Applied => RepairActionView::Applied,
                AccountAction::Changed => RepairActionView::Changed,
                AccountAction::Unrepairable => RepairActionView::Unrepairable,
            },
            reason: a.reason.clone(),
        }
    }
}

/// Something no write can fix (on Citus: a transfer whose two sides disagree).
#[derive(Debug, Serialize, ToSchema)]
pub struct UnrepairableView {
    /// What it is about, e.g. `transfer t-1`.
    pub subject: String,
    pub why: String,
    /// The command that shows it (`saldo audit`).
    pub shown_by: String,
}

impl From<&Unrepairable> for UnrepairableView {
    fn from(u: &Unrepairable) -> Self {
        UnrepairableView {
            subject: u.subject.clone(),
            why: u.why.clone(),
            shown_by: u.shown_by.to_owned(),
        }
    }
}

/// The ledger's part of a repair.
#[derive(Debug, Serialize, ToSchema)]
pub struct LedgerRepairView {
    pub accounts: Vec<AccountRepairView>,
    pub unrepairable: Vec<UnrepairableView>,
}

impl From<&LedgerRepairReport> for LedgerRepairView {
    fn from(r: &LedgerRepairReport) -> Self {
        LedgerRepairView {
            accounts: r.accounts.iter().map(AccountRepairView::from).collect(),
            unrepairable: r.unrepairable.iter().map(UnrepairableView::from).collect(),
        }
    }
}

/// One thing the audit still finds after the repair: a product's divergence (`product_id`),
/// an account's (`account_id`) or the ledger's totals (neither), or on Citus a transfer's
/// (`transfer_id`; `unresolved` when its 2PC did not resolve in time).
#[derive(Debug, Serialize, ToSchema)]
pub struct FindingView {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer_id: Option<String>,
    /// The stock, ledger or transfer invariant broken (as `GET /v1/admin/audit` names them).
    pub invariant: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actual: Option<i64>,
}

impl From<&Finding> for FindingView {
    fn from(f: &Finding) -> Self {
        let none = FindingView {
            product_id: None,
            account_id: None,
            transfer_id: None,
            invariant: String::new(),
            expected: None,
            actual: None,
        };
        match f {
            Finding::Product(d) => {
                let v = DivergenceView::from(d);
                FindingView {
                    product_id: Some(v.product_id),
                    invariant: v.invariant,
                    expected: Some(v.expected),
                    actual: Some(v.actual),
                    ..none
                }
            }
            Finding::Ledger(d) => {
                let v = LedgerDivergenceView::from(d);
                FindingView {
                    account_id: v.account,
                    invariant: v.invariant,
                    expected: Some(v.expected),
                    actual: Some(v.actual),
                    ..none
                }
            }
            Finding::Transfer(d) => {
                let v = TransferDivergenceView::from(d);
                FindingView {
                    transfer_id: Some(v.transfer_id),
                    invariant: v.invariant,
                    ..none
                }
            }
            Finding::Unresolved(id) => FindingView {
                transfer_id: Some(id.clone()),
                invariant: "unresolved".to_owned(),
                ..none
            },
        }
    }
}

/// A repair's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct RepairView {
    pub applied: bool,
    pub products: Vec<ProductRepairView>,
    /// Per divergent account, what was (or would be) written, and what no write can fix.
    pub ledger: LedgerRepairView,
    /// The whole audit afterwards, stock and ledger (a dry run: as it stands): empty only when
    /// everything is clean.
    pub remaining: Vec<FindingView>,
}

/// Repair divergent stock rows from their reservations and history, and divergent accounts from
/// their journal (dry run by default).
#[utoipa::path(post, path = "/v1/admin/repair", tag = "admin",
    request_body = RepairBody,
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "Per divergent product and account, what was (or would be) changed, what cannot be, and the audit afterwards", body = RepairView),
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
        ledger: LedgerRepairView::from(&report.ledger),
        remaining: report.remaining.iter().map(FindingView::from).collect(),
    }))
}
