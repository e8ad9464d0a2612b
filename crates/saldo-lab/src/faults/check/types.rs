//! The checker's vocabulary: what the set-up made ([`Opening`]), the database as read
//! ([`Books`]), and what a check found ([`Violation`], named by its [`Check`]).

use std::collections::BTreeMap;
use std::fmt;

/// What the set-up made before the history began.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Opening {
    /// Units per product: counted plus restocked.
    pub units: BTreeMap<i64, i64>,
    /// Opening balance per customer account, in cents.
    pub cents: BTreeMap<i64, i64>,
}

/// One product's stock row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockRow {
    pub available: i64,
    pub reserved: i64,
}

/// One reservation row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationRow {
    pub order: String,
    pub product: i64,
    pub quantity: i64,
    pub status: String,
}

/// One transfer as the journal has it: identical rows counted once, with how many there are
/// (`copies`: one on one node, one per account side on Citus).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferRow {
    pub id: String,
    pub from: i64,
    pub to: i64,
    pub amount: i64,
    pub kind: String,
    pub status: String,
    pub posted_amount: Option<i64>,
    pub copies: i64,
}

/// One account row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountRow {
    pub balance: i64,
    pub held: i64,
    pub pending_credits: i64,
}

/// The database's state, read directly after the history settled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Books {
    pub stock: BTreeMap<i64, StockRow>,
    pub reservations: Vec<ReservationRow>,
    pub transfers: Vec<TransferRow>,
    /// Every account, the system account 0 included.
    pub accounts: BTreeMap<i64, AccountRow>,
    /// Journal rows per transfer: 1 on one node, 2 on Citus (a side per account).
    pub sides: i64,
}

/// The checks, by what they promise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Check {
    /// No answer was a 5xx other than 503: a fault is never an internal error.
    NoInternalError,
    /// Every outcome was learned (by the answer or a replay).
    Settled,
    /// Every acknowledged operation applied, exactly once.
    AppliedOnce,
    /// Nothing answered "not applied" (a 4xx, or a 503 with `applied: false`) applied, and
    /// nothing nobody was told about was written.
    RefusedNotApplied,
    /// counted + restocked = available + reserved + confirmed, per product.
    UnitsConserved,
    /// Every balance is its opening plus what moved; all of them sum to zero.
    MoneyConserved,
    /// No hold both posted and voided.
    OneFatePerHold,
    /// No reservation both confirmed and released.
    OneFatePerReservation,
    /// `GET /v1/admin/audit` clean.
    Audit,
}

/// One broken promise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub check: Check,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.check, self.detail)
    }
}

/// The violations found so far.
#[derive(Debug, Default)]
pub struct Found(pub Vec<Violation>);

impl Found {
    pub fn add(&mut self, check: Check, detail: impl Into<String>) {
        self.0.push(Violation {
            check,
            detail: detail.into(),
        });
    }
}
