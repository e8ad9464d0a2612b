//! The vocabulary of account entries (migration V20): one entry per account per change of its
//! counters, written in the transaction that changes them, naming the transfer, what it did to
//! the account (`kind`, `direction`, `amount`) and the counters right after it, so a statement
//! needs no arithmetic and a past balance is one entry's.
//!
//! The decisions ([`super::apply`]) describe each change as a [`NewEntry`] with the counters it
//! left in memory; `rows::accounts` numbers them per account (`seq`, after the account's
//! `entry_seq` as locked) and writes them with the account rows, stamped with the write's time.
//! A leaf of `ledger` beside `types`.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::domain::{AccountId, TransferId};
use crate::ledger::currency::Currency;
use crate::ledger::types::TransferKind;

/// What changed an account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// The account was opened (with its opening balance, if any); also the first entry V20
    /// wrote for every account that existed before it.
    Opening,
    /// A transfer posted at once: `balance` moved by `amount`.
    Transfer,
    Deposit,
    Withdrawal,
    Reversal,
    /// A hold placed: the source's `held`, the destination's `pending_credits` grew by `amount`.
    Hold,
    /// A hold posted: `balance` moved by `amount` (what was posted) and the whole hold released.
    Post,
    /// A hold voided: released (`amount`, the hold), `balance` unchanged.
    Void,
    /// A hold expired: released like a void.
    Expire,
    /// A repair brought the counters back to the journal: `amount` is the balance's change.
    Repair,
}

impl EntryKind {
    pub const ALL: [EntryKind; 10] = [
        EntryKind::Opening,
        EntryKind::Transfer,
        EntryKind::Deposit,
        EntryKind::Withdrawal,
        EntryKind::Reversal,
        EntryKind::Hold,
        EntryKind::Post,
        EntryKind::Void,
        EntryKind::Expire,
        EntryKind::Repair,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Opening => "opening",
            EntryKind::Transfer => "transfer",
            EntryKind::Deposit => "deposit",
            EntryKind::Withdrawal => "withdrawal",
            EntryKind::Reversal => "reversal",
            EntryKind::Hold => "hold",
            EntryKind::Post => "post",
            EntryKind::Void => "void",
            EntryKind::Expire => "expire",
            EntryKind::Repair => "repair",
        }
    }

    pub fn parse(s: &str) -> Option<EntryKind> {
        EntryKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The entry of a new transfer of `kind`: a hold when it is placed pending.
    pub fn placed(kind: TransferKind, pending: bool) -> EntryKind {
        match (pending, kind) {
            (true, _) => EntryKind::Hold,
            (false, TransferKind::Transfer) => EntryKind::Transfer,
            (false, TransferKind::Opening) => EntryKind::Opening,
            (false, TransferKind::Deposit) => EntryKind::Deposit,
            (false, TransferKind::Withdrawal) => EntryKind::Withdrawal,
            (false, TransferKind::Reversal) => EntryKind::Reversal,
        }
    }
}

/// The account's side of the change: `debit` for the transfer's source, `credit` for its
/// destination (a repair's: the sign of the balance's change).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Debit,
    Credit,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Debit => "debit",
            Direction::Credit => "credit",
        }
    }

    pub fn parse(s: &str) -> Option<Direction> {
        [Direction::Debit, Direction::Credit]
            .into_iter()
            .find(|d| d.as_str() == s)
    }
}

/// An entry decided in memory, before its account's `seq` and the write's time are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEntry {
    pub account: AccountId,
    pub transfer: Option<TransferId>,
    pub kind: EntryKind,
    pub direction: Direction,
    pub amount: i64,
    /// What moved; `None` only where nothing has one (the system account's own opening or
    /// repair).
    pub currency: Option<Currency>,
    pub balance_after: i64,
    pub held_after: i64,
    pub pending_credits_after: i64,
}

/// One entry of an account's statement, as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub account: AccountId,
    /// 1, 2, … per account, without gaps.
    pub seq: i64,
    pub transfer_id: Option<TransferId>,
    pub kind: EntryKind,
    pub direction: Direction,
    pub amount: i64,
    pub currency: Option<Currency>,
    pub balance_after: i64,
    pub held_after: i64,
    /// `balance_after - held_after`.
    pub available_after: i64,
    pub pending_credits_after: i64,
    /// When it was written (under the account's lock).
    pub at: DateTime<Utc>,
}

/// An account's counters as of a time: those its last entry at or before it left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BalanceAt {
    pub account: AccountId,
    /// The time asked about.
    pub at: DateTime<Utc>,
    /// The account's currency (`None` for the system account).
    pub currency: Option<Currency>,
    pub balance: i64,
    pub held: i64,
    pub available: i64,
    pub pending_credits: i64,
    /// The entry these are from: its seq and when it was written.
    pub entry_seq: i64,
    pub entry_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_directions_round_trip_their_text() {
        for k in EntryKind::ALL {
            assert_eq!(EntryKind::parse(k.as_str()), Some(k));
        }
        for d in [Direction::Debit, Direction::Credit] {
            assert_eq!(Direction::parse(d.as_str()), Some(d));
        }
        assert_eq!(EntryKind::parse("refund"), None);
        assert_eq!(
            EntryKind::placed(TransferKind::Deposit, true),
            EntryKind::Hold
        );
    }
}
