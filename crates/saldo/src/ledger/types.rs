//! The ledger's vocabulary: strategies, journal kinds, requests, journal rows, accounts, the
//! movement every path applies, and the two conversions every path shares.
//!
//! A leaf of `ledger`: every other module of it imports from here; nothing points back.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::{
    AccountId, Amount, BalanceLimits, GroupId, Tags, TransferId, TransferStatus, TransferTimeout,
};
use crate::error::Error;
use crate::ledger::currency::{Currency, Denomination, Scale};

/// How a transfer takes its two account locks: the strategies the service runs. The race lab
/// (`saldo-lab`) adds its naive one through [`MoveFunds`] and `Ledger::transfer_with`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferStrategy {
    /// Both rows locked in ascending id by one statement, then the decision.
    Ordered,
    /// Group commit for a hot account (`ledger::batched`): movements that meet on a partition
    /// are applied by one transaction; a lone one runs as `ordered`.
    Batched,
}

impl TransferStrategy {
    /// Every strategy.
    pub const ALL: &'static [TransferStrategy] =
        &[TransferStrategy::Ordered, TransferStrategy::Batched];

    pub fn parse(s: &str) -> Option<TransferStrategy> {
        TransferStrategy::ALL
            .iter()
            .copied()
            .find(|t| t.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TransferStrategy::Ordered => "ordered",
            TransferStrategy::Batched => "batched",
        }
    }
}

/// The contested step of a movement: lock the two accounts and move the money, inside the
/// transaction the ledger opened (the journal lookup before it and the journal row after it are
/// the ledger's, whatever the implementation). [`TransferStrategy`] implements it for the
/// service; the race lab implements it for its naive strategy. `layout` says which schema the
/// database has (the locks differ on Citus).
#[async_trait::async_trait]
pub trait MoveFunds: Send + Sync {
    async fn move_funds(
        &self,
        client: &deadpool_postgres::Client,
        layout: crate::store::schema::Layout,
        m: &Movement<'_>,
    ) -> Result<(), Error>;
}

impl std::fmt::Display for TransferStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a journal row records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferKind {
    /// Between two customer accounts.
    Transfer,
    /// From the system account, when the account was opened.
    Opening,
    /// From the system account.
    Deposit,
    /// To the system account.
    Withdrawal,
    /// A posted transfer moved back, all or part: from its destination to its source (either
    /// may be the system account), naming it (`reverses`).
    Reversal,
}

impl TransferKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransferKind::Transfer => "transfer",
            TransferKind::Opening => "opening",
            TransferKind::Deposit => "deposit",
            TransferKind::Withdrawal => "withdrawal",
            TransferKind::Reversal => "reversal",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<TransferKind> {
        [
            TransferKind::Transfer,
            TransferKind::Opening,
            TransferKind::Deposit,
            TransferKind::Withdrawal,
            TransferKind::Reversal,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

/// An account to open ([`crate::ledger::Ledger::open`]): its id, its opening balance moved
/// from the system account (0..=`MAX_AMOUNT`, within its limits), its limits, its currency and
/// scale (fixed for good), and the caller's reference and metadata for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccountRequest {
    pub id: AccountId,
    pub opening_balance: i64,
    pub limits: BalanceLimits,
    pub denomination: Denomination,
    pub tags: Tags,
}

/// A transfer between two customer accounts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TransferRequest {
    pub id: TransferId,
    pub from: AccountId,
    pub to: AccountId,
    pub amount: Amount,
    /// The caller's reference and metadata, if any (part of the idempotency comparison).
    pub tags: Tags,
}

impl TransferRequest {
    /// The movement it asks for (kind `transfer`).
    pub fn movement(&self) -> Movement<'_> {
        Movement {
            id: &self.id,
            from: self.from,
            to: self.to,
            amount: self.amount,
            kind: TransferKind::Transfer,
        }
    }
}

/// A reversal of posted transfer `original`: `amount` of it (what is left of it when `None`:
/// posted minus already reversed) moves back from its destination to its source, as transfer
/// `id` of kind [`TransferKind::Reversal`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReversalRequest {
    /// The reversal's own id: its idempotency key, as any transfer's.
    pub id: TransferId,
    pub original: TransferId,
    pub amount: Option<Amount>,
    /// The reversal's reference and metadata (part of the idempotency comparison).
    pub tags: Tags,
}

/// A transfer of a linked group, or a lone one: posted at once (`pending: None`) or held for
/// `pending: Some(timeout)` until posted, voided or expired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkedTransfer {
    pub transfer: TransferRequest,
    pub pending: Option<TransferTimeout>,
}

/// Transfers applied all or none, keyed by the client's group id (1..=`MAX_GROUP_TRANSFERS`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupRequest {
    pub id: GroupId,
    pub transfers: Vec<LinkedTransfer>,
    /// The group's own reference and metadata (each transfer carries its own).
    pub tags: Tags,
}

/// A group as applied (or found by a replay): its transfers in request order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    pub id: GroupId,
    pub transfers: Vec<Transfer>,
    /// True when the group id was already applied with this payload and nothing changed now.
    pub replayed: bool,
    /// The group's own reference and metadata, as stored.
    #[serde(flatten)]
    pub tags: Tags,
}

/// One journal row, as applied or as found by a replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Transfer {
    pub id: TransferId,
    /// [`AccountId::SYSTEM`] for openings and deposits.
    pub from: AccountId,
    /// [`AccountId::SYSTEM`] for withdrawals.
    pub to: AccountId,
    pub amount: i64,
    /// The currency it moved (its accounts'), recorded when it was placed.
    pub currency: Currency,
    pub kind: TransferKind,
    pub created_at: DateTime<Utc>,
    /// True when the id was already journalled with this payload and nothing changed now (for a
    /// post or void: when that same call had already won).
    pub replayed: bool,
    pub status: TransferStatus,
    /// What moved: `Some` once posted (the whole amount for a one-shot transfer).
    pub posted_amount: Option<i64>,
    /// Set for a transfer created pending: its timeout and deadline.
    pub timeout_s: Option<u32>,
    pub expires_at: Option<DateTime<Utc>>,
    /// When a hold was posted, voided or expired.
    pub settled_at: Option<DateTime<Utc>>,
    /// The linked group it was applied in, if any.
    pub group_id: Option<GroupId>,
    /// Its reference and metadata, as stored.
    #[serde(flatten)]
    pub tags: Tags,
    /// A reversal: the transfer it moved back (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverses: Option<TransferId>,
    /// What reversals moved back of it so far (absent: 0, so a transfer never reversed reads
    /// as before).
    #[serde(skip_serializing_if = "is_zero")]
    pub reversed_amount: i64,
    /// Its reversals' ids, oldest first, at most [`MAX_LISTED_REVERSALS`]: filled by a read of
    /// this one transfer (`Ledger::get_transfer`), empty (absent) elsewhere.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reversals: Vec<TransferId>,
}

/// Most reversal ids a read of one transfer lists (the rest are in its destination account's
/// history, each naming it).
pub const MAX_LISTED_REVERSALS: i64 = 100;

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// An account: its posted balance, what pending transfers hold against it and credit to it,
/// its limits (minor units of its currency), and the reference and metadata it was opened with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Account {
    pub id: AccountId,
    /// What its amounts are in; `None` for the system account only (every currency's other
    /// side).
    pub currency: Option<Currency>,
    /// Minor-unit digits of its amounts; `None` for the system account only.
    pub scale: Option<Scale>,
    /// Posted: the sum of its posted journal.
    pub balance: i64,
    /// The sum of its live pending debits.
    pub held: i64,
    /// `balance - held`: what a new debit may use (down to `min_balance`).
    pub available: i64,
    /// The sum of its live pending credits.
    pub pending_credits: i64,
    /// `None` for the system account only (no limits).
    pub min_balance: Option<i64>,
    pub max_balance: Option<i64>,
    /// The caller's reference and metadata, as given when it was opened (never changed).
    #[serde(flatten)]
    pub tags: Tags,
}

/// An account's three counters: what a repair compares with its journal and writes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub balance: i64,
    pub held: i64,
    pub pending_credits: i64,
}

/// One movement to apply: the common shape of transfer, deposit and withdrawal.
#[derive(Debug, Clone, Copy)]
pub struct Movement<'r> {
    pub id: &'r TransferId,
    pub from: AccountId,
    pub to: AccountId,
    pub amount: Amount,
    pub kind: TransferKind,
}

/// A balance after a movement, or [`Error::BalanceOutOfRange`] when `i64` arithmetic overflowed.
pub(crate) fn checked_balance(account: AccountId, next: Option<i64>) -> Result<i64, Error> {
    next.ok_or(Error::BalanceOutOfRange { account })
}

/// An account's `currency` and `scale` columns (NULL for the system account only): a value
/// the schema's CHECKs cannot produce is an error, never a guess.
pub(crate) fn denomination_from_db(
    row: &tokio_postgres::Row,
) -> Result<Option<Denomination>, Error> {
    let currency: Option<String> = row.try_get("currency")?;
    let scale: Option<i16> = row.try_get("scale")?;
    match (currency, scale) {
        (None, None) => Ok(None),
        (Some(c), Some(s)) => Ok(Some(Denomination {
            currency: currency_from_db(&c)?,
            scale: Scale::new(i64::from(s))
                .map_err(|e| Error::invariant(format!("stored scale: {e}")))?,
        })),
        _ => Err(Error::invariant(
            "an account with a currency but no scale, or a scale alone",
        )),
    }
}

/// A currency code read from the database (its CHECK allows only valid ones).
pub(crate) fn currency_from_db(code: &str) -> Result<Currency, Error> {
    Currency::new(code).map_err(|e| Error::invariant(format!("stored currency: {e}")))
}

/// An account id read from the database: 0 is the system account, anything else a customer.
pub(crate) fn account_from_db(raw: i64) -> Result<AccountId, Error> {
    if raw == AccountId::SYSTEM.get() {
        Ok(AccountId::SYSTEM)
    } else {
        Ok(AccountId::new(raw)?)
    }
}
