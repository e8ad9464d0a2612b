//! The ledger's decisions, in memory: ONE operation (a new transfer posted or held, or the post,
//! void or expiry of a hold) applied to account rows the caller's transaction already holds
//! locked. It checks the limits, computes the new `balance`/`held`/`pending_credits` and moves a
//! transfer's status, all or nothing: on a refusal the rows are exactly as they were.
//!
//! No I/O here, so the same function serves the one-transfer transaction ([`super::holds`]),
//! a linked group (several operations on one set of locked rows) and the batched engine (every
//! operation of a batch in arrival order); the caller then writes each changed account once
//! ([`Locked::changed`]) and the journal rows its operations produced.
//!
//! Arithmetic: limits are compared in `i128`, so no comparison can overflow; new stored values
//! are checked `i64` and refused with [`Error::BalanceOutOfRange`] (a 4xx) when they would not
//! fit, before anything is written.

use std::collections::{BTreeMap, BTreeSet};

use crate::domain::{AccountId, Amount, TransferId, TransferStatus, TransferTimeout};
use crate::error::Error;
use crate::ledger::types::{checked_balance, Movement, TransferKind};
use crate::operation::Operation;

/// One locked account row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountRow {
    pub id: AccountId,
    pub balance: i64,
    pub held: i64,
    pub pending_credits: i64,
    /// `None` only for the system account: no limits.
    pub min_balance: Option<i64>,
    pub max_balance: Option<i64>,
}

/// The account rows one transaction holds locked, and which of them an operation changed.
#[derive(Debug, Clone, Default)]
pub struct Locked {
    rows: BTreeMap<AccountId, AccountRow>,
    changed: BTreeSet<AccountId>,
}

impl Locked {
    pub fn new(rows: impl IntoIterator<Item = AccountRow>) -> Self {
        Locked {
            rows: rows.into_iter().map(|r| (r.id, r)).collect(),
            changed: BTreeSet::new(),
        }
    }

    /// The row, or [`Error::UnknownAccount`]: an id the locking SELECT did not return does not
    /// exist (every id an operation names is in the set the caller locked).
    pub fn get(&self, id: AccountId) -> Result<&AccountRow, Error> {
        self.rows.get(&id).ok_or(Error::UnknownAccount(id))
    }

    /// The rows some operation changed, in id order: one UPDATE each (or one for all).
    pub fn changed(&self) -> impl Iterator<Item = &AccountRow> {
        self.changed.iter().filter_map(|id| self.rows.get(id))
    }

    /// Replaces both rows at once: the all-or-nothing step of every operation.
    fn commit(&mut self, from: AccountRow, to: AccountRow) {
        for row in [from, to] {
            self.changed.insert(row.id);
            self.rows.insert(row.id, row);
        }
    }
}

/// A transfer to place: posted at once, or pending (a hold) for `pending`'s timeout.
#[derive(Debug, Clone, Copy)]
pub struct NewTransfer<'r> {
    pub movement: Movement<'r>,
    pub pending: Option<TransferTimeout>,
}

impl<'r> NewTransfer<'r> {
    /// A transfer posted at once.
    pub fn posted(movement: Movement<'r>) -> Self {
        NewTransfer {
            movement,
            pending: None,
        }
    }

    /// The status its journal row is written with.
    pub fn status(&self) -> TransferStatus {
        if self.pending.is_some() {
            TransferStatus::Pending
        } else {
            TransferStatus::Posted
        }
    }

    /// The name an operation on a new transfer runs under (metrics, "not applied" answers).
    pub(crate) fn operation(&self) -> Operation {
        match (self.pending, self.movement.kind) {
            (Some(_), _) => Operation::Hold,
            (None, TransferKind::Deposit) => Operation::Deposit,
            (None, TransferKind::Withdrawal) => Operation::Withdraw,
            (None, TransferKind::Opening) => Operation::OpenAccount,
            (None, TransferKind::Transfer) => Operation::Transfer,
        }
    }
}

/// What a post, void or expiry needs of an existing transfer, read while its accounts are
/// locked (nothing else can settle it meanwhile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferState {
    pub id: TransferId,
    pub from: AccountId,
    pub to: AccountId,
    pub amount: i64,
    pub status: TransferStatus,
    /// What moved once posted (the whole amount for a one-shot transfer).
    pub posted_amount: Option<i64>,
    /// Created pending: only such a transfer can be posted, voided or expired.
    pub was_pending: bool,
}

/// How a hold is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Post `amount` (the whole hold when `None`); the rest is released.
    Post(Option<Amount>),
    Void,
    /// The sweeper, for a hold past its deadline.
    Expire,
}

impl Settle {
    /// The status the hold reaches when this settle wins.
    pub fn target(self) -> TransferStatus {
        match self {
            Settle::Post(_) => TransferStatus::Posted,
            Settle::Void => TransferStatus::Voided,
            Settle::Expire => TransferStatus::Expired,
        }
    }
}

/// What a settle did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// It won: the state and the rows moved.
    Applied,
    /// The same post (same amount) or void had already won: nothing changed, same answer.
    Replayed,
}

/// Places a new transfer on locked rows: a posted one moves `balance` on both sides, a pending
/// one adds to the source's `held` and the destination's `pending_credits`. Either way the
/// debit counts against the source's `min_balance` with what it already holds, and the credit
/// against the destination's `max_balance` with what is already pending to it.
pub fn place(locked: &mut Locked, t: &NewTransfer<'_>) -> Result<(), Error> {
    let m = &t.movement;
    let amount = m.amount.get();
    let mut from = *locked.get(m.from)?;
    let mut to = *locked.get(m.to)?;
    if let Some(min_balance) = from.min_balance {
        let after = i128::from(from.balance) - i128::from(from.held) - i128::from(amount);
        if after < i128::from(min_balance) {
            return Err(Error::InsufficientFunds {
                account: from.id,
                requested: amount,
                balance: from.balance,
                held: from.held,
                min_balance,
            });
        }
    }
    if let Some(max_balance) = to.max_balance {
        let after = i128::from(to.balance) + i128::from(to.pending_credits) + i128::from(amount);
        if after > i128::from(max_balance) {
            return Err(Error::MaxBalanceExceeded {
                account: to.id,
                requested: amount,
                balance: to.balance,
                pending_credits: to.pending_credits,
                max_balance,
            });
        }
    }
    if t.pending.is_some() {
        from.held = checked_balance(from.id, from.held.checked_add(amount))?;
        to.pending_credits = checked_balance(to.id, to.pending_credits.checked_add(amount))?;
    } else {
        from.balance = checked_balance(from.id, from.balance.checked_sub(amount))?;
        to.balance = checked_balance(to.id, to.balance.checked_add(amount))?;
    }
    locked.commit(from, to);
    Ok(())
}

/// Settles a hold on locked rows: exactly one of post, void and expiry moves a `pending`
/// transfer; a later one finds the state it reached ([`Error::TransferNotPending`]), except the
/// same post or void repeated, which answers [`Settled::Replayed`]. A post moves `amount` (at
/// most the hold) and releases the whole hold; void and expiry release it. Releasing can break
/// no limit (it only lowers `held` and `pending_credits`), so only the posted balances are
/// range-checked.
pub fn settle(locked: &mut Locked, t: &mut TransferState, how: Settle) -> Result<Settled, Error> {
    if t.status != TransferStatus::Pending {
        let same_post = matches!(how, Settle::Post(n)
            if t.status == TransferStatus::Posted
                && t.posted_amount == Some(n.map_or(t.amount, Amount::get)));
        let same_void = how == Settle::Void && t.status == TransferStatus::Voided;
        return if t.was_pending && (same_post || same_void) {
            Ok(Settled::Replayed)
        } else {
            Err(Error::TransferNotPending {
                id: t.id.clone(),
                status: t.status,
                posted_amount: t.posted_amount,
            })
        };
    }
    let posted = match how {
        Settle::Post(n) => {
            let n = n.map_or(t.amount, Amount::get);
            if n > t.amount {
                return Err(Error::PostExceedsHold {
                    id: t.id.clone(),
                    requested: n,
                    held: t.amount,
                });
            }
            n
        }
        Settle::Void | Settle::Expire => 0,
    };
    let mut from = *locked.get(t.from)?;
    let mut to = *locked.get(t.to)?;
    if from.held < t.amount || to.pending_credits < t.amount {
        return Err(Error::invariant(format!(
            "pending transfer {} of {} is not covered by held {} of account {} and pending \
             credits {} of account {}",
            t.id, t.amount, from.held, from.id, to.pending_credits, to.id
        )));
    }
    from.held -= t.amount;
    to.pending_credits -= t.amount;
    from.balance = checked_balance(from.id, from.balance.checked_sub(posted))?;
    to.balance = checked_balance(to.id, to.balance.checked_add(posted))?;
    locked.commit(from, to);
    t.status = how.target();
    t.posted_amount = (posted > 0).then_some(posted);
    Ok(Settled::Applied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::types::TransferKind;

    fn acc(id: i64) -> AccountId {
        AccountId::new(id).expect("id")
    }

    fn row(id: i64, balance: i64, min: i64, max: Option<i64>) -> AccountRow {
        AccountRow {
            id: acc(id),
            balance,
            held: 0,
            pending_credits: 0,
            min_balance: Some(min),
            max_balance: max,
        }
    }

    fn new<'r>(
        id: &'r TransferId,
        from: i64,
        to: i64,
        amount: i64,
        pending: bool,
    ) -> NewTransfer<'r> {
        NewTransfer {
            movement: Movement {
                id,
                from: acc(from),
                to: acc(to),
                amount: Amount::new(amount).expect("amount"),
                kind: TransferKind::Transfer,
            },
            pending: pending.then(TransferTimeout::default),
        }
    }

    fn state(id: &TransferId, amount: i64) -> TransferState {
        TransferState {
            id: id.clone(),
            from: acc(1),
            to: acc(2),
            amount,
            status: TransferStatus::Pending,
            posted_amount: None,
            was_pending: true,
        }
    }

    #[test]
    fn holds_count_against_min_balance_and_pending_credits_against_max() {
        let id = TransferId::new("t").expect("id");
        let mut locked = Locked::new([row(1, 100, 0, None), row(2, 0, 0, Some(150))]);
        place(&mut locked, &new(&id, 1, 2, 60, true)).expect("hold 60");
        let before = locked.clone();
        let refused = place(&mut locked, &new(&id, 1, 2, 41, false));
        assert!(matches!(
            refused,
            Err(Error::InsufficientFunds {
                requested: 41,
                balance: 100,
                held: 60,
                min_balance: 0,
                ..
            })
        ));
        assert_eq!(
            locked.get(acc(1)).ok(),
            before.get(acc(1)).ok(),
            "nothing moved"
        );
        place(&mut locked, &new(&id, 1, 2, 40, false)).expect("the last 40");
        // 40 posted + 60 pending to account 2: 100 of its 150.
        let mut other = Locked::new([row(3, 100, 0, None), *locked.get(acc(2)).expect("2")]);
        assert!(matches!(
            place(&mut other, &new(&id, 3, 2, 51, true)),
            Err(Error::MaxBalanceExceeded {
                requested: 51,
                balance: 40,
                pending_credits: 60,
                max_balance: 150,
                ..
            })
        ));
    }

    #[test]
    fn a_credit_line_lets_the_balance_go_negative_down_to_it() {
        let id = TransferId::new("t").expect("id");
        let mut locked = Locked::new([row(1, 0, -50, None), row(2, 0, 0, None)]);
        place(&mut locked, &new(&id, 1, 2, 50, false)).expect("down to -50");
        assert_eq!(locked.get(acc(1)).expect("1").balance, -50);
        assert!(place(&mut locked, &new(&id, 1, 2, 1, true)).is_err());
    }

    #[test]
    fn exactly_one_settle_wins_and_the_winner_replays() {
        let id = TransferId::new("t").expect("id");
        let all = [Settle::Post(None), Settle::Void, Settle::Expire];
        for first in all {
            let mut locked = Locked::new([row(1, 100, 0, None), row(2, 0, 0, None)]);
            place(&mut locked, &new(&id, 1, 2, 30, true)).expect("hold");
            let mut t = state(&id, 30);
            assert!(matches!(
                settle(&mut locked, &mut t, first),
                Ok(Settled::Applied)
            ));
            let after = locked.clone();
            for then in all {
                let answer = settle(&mut locked, &mut t, then);
                if then == first && first != Settle::Expire {
                    assert!(matches!(answer, Ok(Settled::Replayed)), "{first:?} again");
                } else {
                    assert!(
                        matches!(answer, Err(Error::TransferNotPending { status, .. })
                            if status == first.target()),
                        "{then:?} after {first:?}"
                    );
                }
            }
            let (a, b) = (
                locked.get(acc(1)).expect("1"),
                after.get(acc(1)).expect("1"),
            );
            assert_eq!(a, b, "losers move nothing");
            assert_eq!(a.held, 0);
            let expected = if first == Settle::Void || first == Settle::Expire {
                100
            } else {
                70
            };
            assert_eq!(a.balance, expected);
        }
    }

    #[test]
    fn a_partial_post_releases_the_rest_and_a_larger_one_is_refused() {
        let id = TransferId::new("t").expect("id");
        let mut locked = Locked::new([row(1, 100, 0, None), row(2, 0, 0, None)]);
        place(&mut locked, &new(&id, 1, 2, 30, true)).expect("hold");
        let mut t = state(&id, 30);
        let too_much = Settle::Post(Some(Amount::new(31).expect("amount")));
        assert!(matches!(
            settle(&mut locked, &mut t, too_much),
            Err(Error::PostExceedsHold {
                requested: 31,
                held: 30,
                ..
            })
        ));
        let ten = Settle::Post(Some(Amount::new(10).expect("amount")));
        assert!(matches!(
            settle(&mut locked, &mut t, ten),
            Ok(Settled::Applied)
        ));
        assert_eq!(t.posted_amount, Some(10));
        let (from, to) = (
            locked.get(acc(1)).expect("1"),
            locked.get(acc(2)).expect("2"),
        );
        assert_eq!((from.balance, from.held), (90, 0));
        assert_eq!((to.balance, to.pending_credits), (10, 0));
        assert!(matches!(
            settle(&mut locked, &mut t, ten),
            Ok(Settled::Replayed)
        ));
        // The whole amount is another request than the one that won.
        assert!(settle(&mut locked, &mut t, Settle::Post(None)).is_err());
    }

    #[test]
    fn overflow_is_a_typed_refusal_and_moves_nothing() {
        let id = TransferId::new("t").expect("id");
        let system = AccountRow {
            id: AccountId::SYSTEM,
            balance: i64::MIN + 5,
            held: 0,
            pending_credits: 0,
            min_balance: None,
            max_balance: None,
        };
        let mut locked = Locked::new([system, row(1, 0, 0, None)]);
        let mut deposit = new(&id, 1, 1, 6, false);
        deposit.movement.from = AccountId::SYSTEM;
        assert!(matches!(
            place(&mut locked, &deposit),
            Err(Error::BalanceOutOfRange { account }) if account == AccountId::SYSTEM
        ));
        assert_eq!(locked.changed().count(), 0);
    }
}
