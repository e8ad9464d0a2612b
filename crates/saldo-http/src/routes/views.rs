//! Answer shapes more than one route module returns: an order's status (its reservations and
//! the order list), a product's stock (its read and the product list), an account (its read
//! and the account list), a transfer (the money routes and the holds), a stock divergence (the
//! audit and the repair). Defined once, so the document names one schema for each.

use chrono::{DateTime, Utc};
use saldo::audit::{Divergence, Invariant};
use saldo::domain::TransferStatus;
use saldo::ledger::{Account, Transfer, TransferKind};
use saldo::stock::{Status, Stock};
use serde::Serialize;
use utoipa::ToSchema;

/// Status of a reservation row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ItemStatus {
    Active,
    Confirmed,
    Released,
    Expired,
}

impl From<Status> for ItemStatus {
    fn from(s: Status) -> Self {
        match s {
            Status::Active => ItemStatus::Active,
            Status::Confirmed => ItemStatus::Confirmed,
            Status::Released => ItemStatus::Released,
            Status::Expired => ItemStatus::Expired,
        }
    }
}

impl ItemStatus {
    /// An order's status from its rows': active while any is held, else confirmed if any was
    /// sold, else released if any was, else expired. The rule the order list applies in SQL
    /// (`saldo::listing::stock`), so an order reads the same in the list and on its own.
    pub fn of_order(rows: impl IntoIterator<Item = ItemStatus>) -> ItemStatus {
        let rows: Vec<ItemStatus> = rows.into_iter().collect();
        let any = |status: ItemStatus| rows.contains(&status);
        if any(ItemStatus::Active) {
            ItemStatus::Active
        } else if any(ItemStatus::Confirmed) {
            ItemStatus::Confirmed
        } else if any(ItemStatus::Released) {
            ItemStatus::Released
        } else {
            ItemStatus::Expired
        }
    }
}

/// A product's stock.
#[derive(Debug, Serialize, ToSchema)]
pub struct StockView {
    pub product_id: i64,
    pub available: i32,
    pub reserved: i32,
    /// Bumped by every write of the row.
    pub version: i64,
    /// Most units that may be backordered. With `backordered`, present only for a product
    /// with a backorder policy (absent: 0), so other products answer as before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backorder_limit: Option<i32>,
    /// Units backordered now (promised to live reservations, not on hand yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backordered: Option<i32>,
}

impl From<Stock> for StockView {
    fn from(s: Stock) -> Self {
        let policy = s.backorder_limit > 0 || s.backordered > 0;
        StockView {
            product_id: s.product_id.get(),
            available: s.available,
            reserved: s.reserved,
            version: s.version,
            backorder_limit: policy.then_some(s.backorder_limit),
            backordered: policy.then_some(s.backordered),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AccountView {
    pub id: i64,
    /// What its amounts are in: an ISO 4217 code or an asset code
    /// (`^[A-Z][A-Z0-9_]{2,11}$`), fixed when it was opened. Null only for the system account
    /// (the other side in every currency).
    #[schema(example = "EUR")]
    pub currency: Option<String>,
    /// Minor-unit digits of its amounts (0..=18; EUR 2, JPY 0): every amount is an integer of
    /// minor units. Null only for the system account.
    #[schema(example = 2, minimum = 0, maximum = 18)]
    pub scale: Option<u8>,
    /// Posted money.
    pub balance: i64,
    /// The sum of the account's live pending debits (holds against it).
    pub held: i64,
    /// `balance - held`.
    pub available: i64,
    /// The sum of the account's live pending credits.
    pub pending_credits: i64,
    /// Absent (null) only for the system account, which has no limits.
    pub min_balance: Option<i64>,
    pub max_balance: Option<i64>,
    /// The caller's reference, as given when it was opened.
    pub reference: Option<String>,
    /// The caller's metadata, as given when it was opened.
    #[schema(value_type = Option<std::collections::BTreeMap<String, String>>)]
    pub metadata: Option<serde_json::Value>,
}

impl From<Account> for AccountView {
    fn from(a: Account) -> Self {
        AccountView {
            id: a.id.get(),
            currency: a.currency.map(|c| c.to_string()),
            scale: a.scale.map(|s| s.get()),
            balance: a.balance,
            held: a.held,
            available: a.available,
            pending_credits: a.pending_credits,
            min_balance: a.min_balance,
            max_balance: a.max_balance,
            reference: a.tags.reference.map(|r| r.as_str().to_owned()),
            metadata: a
                .tags
                .metadata
                .as_ref()
                .map(saldo::domain::Metadata::to_json),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KindView {
    Transfer,
    Opening,
    Deposit,
    Withdrawal,
    /// Moves back (part of) a posted transfer (`reverses`), from its `to` to its `from`.
    Reversal,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StatusView {
    Pending,
    Posted,
    Voided,
    Expired,
}

impl From<TransferStatus> for StatusView {
    fn from(s: TransferStatus) -> Self {
        match s {
            TransferStatus::Pending => StatusView::Pending,
            TransferStatus::Posted => StatusView::Posted,
            TransferStatus::Voided => StatusView::Voided,
            TransferStatus::Expired => StatusView::Expired,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TransferView {
    pub id: String,
    /// 0 is the system account (openings, deposits).
    pub from: i64,
    pub to: i64,
    pub amount: i64,
    /// The currency it moved: its accounts' (money moves only within one currency).
    #[schema(example = "EUR")]
    pub currency: String,
    pub kind: KindView,
    pub created_at: DateTime<Utc>,
    /// True when this id was already journalled with the same payload (for a post or void:
    /// when that same call had already won).
    pub replayed: bool,
    /// `posted` at once, or `pending` until posted, voided or expired (a read past
    /// `expires_at` says `expired` at once, before anything settled it).
    pub status: StatusView,
    /// What moved, once posted.
    pub posted_amount: Option<i64>,
    /// A transfer created pending: its timeout and deadline.
    pub timeout_s: Option<u32>,
    pub expires_at: Option<DateTime<Utc>>,
    /// When a hold was posted, voided or expired (null for a hold past its deadline that no
    /// post, void or sweeper has settled yet).
    pub settled_at: Option<DateTime<Utc>>,
    /// The linked group it was applied in.
    pub group_id: Option<String>,
    /// The caller's reference, as given.
    pub reference: Option<String>,
    /// The caller's metadata, as given.
    #[schema(value_type = Option<std::collections::BTreeMap<String, String>>)]
    pub metadata: Option<serde_json::Value>,
    /// A reversal: the transfer it moves back. Present only on a reversal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverses: Option<String>,
    /// What reversals moved back of it so far (never more than it posted). Present only once
    /// it was reversed (absent: 0), so other transfers answer as before.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub reversed_amount: Option<i64>,
    /// Its reversals' ids, oldest first, at most 100 (a transfer reversed more often lists
    /// the rest in its `to` account's history, each naming it in `reverses`). Present on a
    /// read of this one transfer once it was reversed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reversals: Option<Vec<String>>,
}

/// 201 for a new journal row, 200 for a replay.
pub fn created_or_replayed(t: Transfer) -> (axum::http::StatusCode, axum::Json<TransferView>) {
    let code = if t.replayed {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::CREATED
    };
    (code, axum::Json(t.into()))
}

impl From<Transfer> for TransferView {
    fn from(t: Transfer) -> Self {
        TransferView {
            id: t.id.as_str().to_owned(),
            from: t.from.get(),
            to: t.to.get(),
            amount: t.amount,
            currency: t.currency.to_string(),
            kind: match t.kind {
                TransferKind::Transfer => KindView::Transfer,
                TransferKind::Opening => KindView::Opening,
                TransferKind::Deposit => KindView::Deposit,
                TransferKind::Withdrawal => KindView::Withdrawal,
                TransferKind::Reversal => KindView::Reversal,
            },
            created_at: t.created_at,
            replayed: t.replayed,
            status: t.status.into(),
            posted_amount: t.posted_amount,
            timeout_s: t.timeout_s,
            expires_at: t.expires_at,
            settled_at: t.settled_at,
            group_id: t.group_id.map(|g| g.as_str().to_owned()),
            reference: t.tags.reference.map(|r| r.as_str().to_owned()),
            metadata: t
                .tags
                .metadata
                .as_ref()
                .map(saldo::domain::Metadata::to_json),
            reverses: t.reverses.map(|r| r.as_str().to_owned()),
            reversed_amount: (t.reversed_amount > 0).then_some(t.reversed_amount),
            reversals: (!t.reversals.is_empty())
                .then(|| t.reversals.iter().map(|r| r.as_str().to_owned()).collect()),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DivergenceView {
    pub product_id: i64,
    /// `reserved_matches_active`, `on_hand_matches_history`, `backordered_matches_live`,
    /// `backordered_within_limit`, `filled_in_arrival_order`, or for products stocked per
    /// location `locations_sum_to_available`, `locations_sum_to_reserved`,
    /// `location_reserved_matches_allocations`, `allocations_match_quantity`,
    /// `locations_sum_to_states`, and for the non-sellable states `damaged_matches_moves`,
    /// `safety_stock_matches_moves`, `incoming_matches_moves`, and
    /// `latest_movement_matches_counters` (a product's latest movement against its row).
    pub invariant: String,
    pub expected: i64,
    pub actual: i64,
}

impl From<&Divergence> for DivergenceView {
    fn from(d: &Divergence) -> Self {
        DivergenceView {
            product_id: d.product_id.get(),
            invariant: match d.invariant {
                Invariant::ReservedMatchesActive => "reserved_matches_active",
                Invariant::OnHandMatchesHistory => "on_hand_matches_history",
                Invariant::BackorderedMatchesLive => "backordered_matches_live",
                Invariant::BackorderedWithinLimit => "backordered_within_limit",
                Invariant::FilledInArrivalOrder => "filled_in_arrival_order",
                Invariant::LocationsSumToAvailable => "locations_sum_to_available",
                Invariant::LocationsSumToReserved => "locations_sum_to_reserved",
                Invariant::LocationReservedMatchesAllocations => {
                    "location_reserved_matches_allocations"
                }
                Invariant::AllocationsMatchQuantity => "allocations_match_quantity",
                Invariant::LatestMovementMatchesCounters => "latest_movement_matches_counters",
                Invariant::LocationsSumToStates => "locations_sum_to_states",
                Invariant::DamagedMatchesMoves => "damaged_matches_moves",
                Invariant::SafetyStockMatchesMoves => "safety_stock_matches_moves",
                Invariant::IncomingMatchesMoves => "incoming_matches_moves",
            }
            .to_owned(),
            expected: d.expected,
            actual: d.actual,
        }
    }
}
