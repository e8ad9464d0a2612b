//! The ledger's decisions, in memory: ONE operation (a new transfer posted or held, or the post,
//! void or expiry of a hold) applied to account rows the caller's transaction already holds
//! locked. It checks the limits, computes the new `balance`/`held`/`pending_credits` and moves a
//! transfer's status, all or nothing: on a refusal the rows are exactly as they were.
//!
//! No I/O here, so the same function serves the one-transfer transaction ([`super::flows`]),
//! a linked group (several operations on one set of locked rows) and the batched engine (every
//! operation of a batch in arrival order); the caller then writes each changed account once
//! ([`Locked::changed`]) and the journal rows its operations produced.
//!
//! Which settle may move a transfer is the state machine's ([`super::transitions`]); here it
//! moves the books. The idempotency decision of a new transfer (the same request again is a
//! replay, another under its id a conflict) is made here too, on the journal row found.
//!
//! Currencies: money moves only between two accounts of one denomination (currency and scale);
//! the system account, which has none, takes the other side's. [`currency`] decides it on the
//! locked rows, first, for a placement (a transfer, a hold, each leg of a group, each placement
//! of a batch) and for a post; a refusal ([`Error::CurrencyMismatch`]) writes nothing.
//!
//! Arithmetic: limits are compared in `i128`, so no comparison can overflow; new stored values
//! are checked `i64` and refused with [`Error::BalanceOutOfRange`] (a 4xx) when they would not
//! fit, before anything is written.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use crate::domain::{
    AccountId, Amount, GroupId, Tags, TransferId, TransferStatus, TransferTimeout, NO_TAGS,
};
use crate::error::{Error, InputError};
use crate::ledger::currency::{Currency, Denomination};
use crate::ledger::entries::{Direction, EntryKind, NewEntry};
use crate::ledger::transitions::{self, Seen, Settle, Step};
use crate::ledger::types::{checked_balance, Movement, Transfer, TransferKind};
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
    /// `None` only for the system account: it is the other side in every currency.
    pub denomination: Option<Denomination>,
    /// The seq of its latest entry as locked (0: none yet); the write numbers its new entries
    /// after it.
    pub entry_seq: i64,
}

/// The account rows one transaction holds locked, which of them an operation changed, and
/// the entries those changes made (in the order they were made: per account, its running
/// counters).
#[derive(Debug, Clone, Default)]
pub struct Locked {
    rows: BTreeMap<AccountId, AccountRow>,
    changed: BTreeSet<AccountId>,
    entries: Vec<NewEntry>,
}

/// What one operation did to its two accounts, for their entries.
struct Change<'a> {
    transfer: &'a TransferId,
    kind: EntryKind,
    amount: i64,
    currency: Currency,
}

impl Locked {
    pub fn new(rows: impl IntoIterator<Item = AccountRow>) -> Self {
        Locked {
            rows: rows.into_iter().map(|r| (r.id, r)).collect(),
            changed: BTreeSet::new(),
            entries: Vec::new(),
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

    /// The entries of every change so far, in the order made.
    pub fn entries(&self) -> &[NewEntry] {
        &self.entries
    }

    /// Drops the entries made so far (the lab's [`crate::ledger::types::MoveFunds`] form of
    /// `ordered`, whose caller writes the movement's entries from the rows as they end up).
    pub fn forget_entries(&mut self) {
        self.entries.clear();
    }

    /// Marks both accounts of `t` changed as they are, with an entry each saying so: the entries
    /// of a movement some other code applied to these rows (the lab's strategies), read back
    /// under the locks.
    pub fn record_as_is(&mut self, t: &NewTransfer<'_>, currency: Currency) -> Result<(), Error> {
        let m = &t.movement;
        let (from, to) = (*self.get(m.from)?, *self.get(m.to)?);
        self.commit(
            from,
            to,
            Change {
                transfer: m.id,
                kind: EntryKind::placed(m.kind, t.pending.is_some()),
                amount: m.amount.get(),
                currency,
            },
        );
        Ok(())
    }

    /// Replaces both rows at once, and records an entry for each: the all-or-nothing step of
    /// every operation.
    fn commit(&mut self, from: AccountRow, to: AccountRow, change: Change<'_>) {
        for (row, direction) in [(from, Direction::Debit), (to, Direction::Credit)] {
            self.changed.insert(row.id);
            self.rows.insert(row.id, row);
            self.entries.push(NewEntry {
                account: row.id,
                transfer: Some(change.transfer.clone()),
                kind: change.kind,
                direction,
                amount: change.amount,
                currency: Some(change.currency),
                balance_after: row.balance,
                held_after: row.held,
                pending_credits_after: row.pending_credits,
            });
        }
    }
}

/// A transfer to place: posted at once, or pending (a hold) for `pending`'s timeout.
#[derive(Debug, Clone, Copy)]
pub struct NewTransfer<'r> {
    pub movement: Movement<'r>,
    pub pending: Option<TransferTimeout>,
    /// Its reference and metadata (stored with it, compared on a replay).
    pub tags: &'r Tags,
    /// A reversal's original (kind [`TransferKind::Reversal`] only).
    pub reverses: Option<&'r TransferId>,
}

impl<'r> NewTransfer<'r> {
    /// A transfer posted at once.
    pub fn posted(movement: Movement<'r>) -> Self {
        NewTransfer {
            movement,
            pending: None,
            tags: &NO_TAGS,
            reverses: None,
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

    /// The name it runs under (metrics, "not applied" answers).
    pub fn operation(&self) -> Operation {
        match (self.pending, self.movement.kind) {
            (Some(_), _) => Operation::Hold,
            (None, TransferKind::Deposit) => Operation::Deposit,
            (None, TransferKind::Withdrawal) => Operation::Withdraw,
            (None, TransferKind::Opening) => Operation::OpenAccount,
            (None, TransferKind::Transfer) => Operation::Transfer,
            (None, TransferKind::Reversal) => Operation::Reverse,
        }
    }

    /// True when a journalled transfer is what this asks for: same accounts, amount, kind, the
    /// same timeout (or none), the same group (or none) and the same reference and metadata
    /// (or none).
    pub fn same_as(&self, existing: &Transfer, group: Option<&GroupId>) -> bool {
        let m = &self.movement;
        existing.from == m.from
            && existing.to == m.to
            && existing.amount == m.amount.get()
            && existing.kind == m.kind
            && existing.timeout_s == self.pending.map(|p| p.secs())
            && existing.group_id.as_ref() == group
            && existing.tags == *self.tags
            && existing.reverses.as_ref() == self.reverses
    }
}

/// The idempotency decision of a lone transfer whose id is journalled: the same payload answers
/// the original result (marked as a replay), anything else is a conflict.
pub fn replay(existing: Transfer, t: &NewTransfer<'_>) -> Result<Transfer, Error> {
    if t.same_as(&existing, None) {
        Ok(Transfer {
            replayed: true,
            ..existing
        })
    } else {
        Err(Error::TransferConflict(t.movement.id.clone()))
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
    /// A hold's deadline.
    pub expires_at: Option<DateTime<Utc>>,
    /// The currency it was placed in.
    pub currency: Currency,
}

impl TransferState {
    /// The refusal of an operation that cannot move it: the state it reached and what moved
    /// (the whole amount of a one-shot transfer, as a read of it says).
    pub fn not_pending(&self) -> Error {
        Error::TransferNotPending {
            id: self.id.clone(),
            status: self.status,
            posted_amount: transitions::effective_posted(
                self.status,
                self.amount,
                self.posted_amount,
            ),
        }
    }

    fn seen(&self, now: DateTime<Utc>) -> Seen {
        Seen {
            status: self.status,
            was_pending: self.was_pending,
            amount: self.amount,
            posted_amount: self.posted_amount,
            due: transitions::is_due(self.expires_at, now),
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
    /// The hold was past its deadline: it expired now (the state and the rows moved, to be
    /// written and committed like an applied settle), and the post or void is refused with
    /// [`TransferState::not_pending`].
    Expired,
}

/// What a reversal needs of its original, read under the locks of the original's two accounts
/// (every reversal of it takes the same two locks first, so none can move it meanwhile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Original {
    /// Its settle state, as a post or void reads it.
    pub state: TransferState,
    /// What reversals moved back of it so far, and how many they were.
    pub reversed: i64,
    pub reversals: i32,
}

impl Original {
    /// What it moved: its posted amount once posted, 0 otherwise.
    pub fn posted(&self) -> i64 {
        transitions::effective_posted(
            self.state.status,
            self.state.amount,
            self.state.posted_amount,
        )
        .unwrap_or(0)
    }

    /// The position of the `transfer.reversed` event of its next reversal, in its own stream:
    /// after its creation (1), its settle (2, a hold's) and each earlier reversal.
    pub fn next_event_position(&self) -> i64 {
        1 + i64::from(self.state.was_pending) + i64::from(self.reversals) + 1
    }
}

/// How much a reversal of `original` moves, at `now` (the transaction's clock): `asked`, or
/// all that is left of it when `None` (posted minus reversed already). Only a posted transfer
/// is reversed ([`transitions::reversible`]: [`Error::TransferNotPosted`] names the state as a
/// read says it); more than is left, or nothing left, is [`Error::ReversalExceedsPosted`].
pub fn reversal_amount(
    original: &Original,
    asked: Option<Amount>,
    now: DateTime<Utc>,
) -> Result<Amount, Error> {
    let due = transitions::is_due(original.state.expires_at, now);
    transitions::reversible(original.state.status, due).map_err(|status| {
        Error::TransferNotPosted {
            id: original.state.id.clone(),
            status,
        }
    })?;
    let posted = original.posted();
    // The schema keeps 0 <= reversed <= posted; a row outside it is an error, never a guess.
    let left = posted
        .checked_sub(original.reversed)
        .filter(|left| (0..=posted).contains(left))
        .ok_or_else(|| {
            Error::invariant(format!(
                "transfer {} reversed {} of the {posted} it posted",
                original.state.id, original.reversed
            ))
        })?;
    let n = asked.map_or(left, Amount::get);
    if n > left || n < 1 {
        return Err(Error::ReversalExceedsPosted {
            id: original.state.id.clone(),
            posted,
            reversed: original.reversed,
            requested: asked.map(Amount::get),
        });
    }
    Ok(Amount::new(n)?)
}

/// Places a reversal of `original` on locked rows: `t` must move from its destination back to
/// its source; the funds and limits are a transfer's ([`place`]: the reversing account needs
/// the money), and it moves in the original's currency.
pub fn reverse(
    locked: &mut Locked,
    original: &Original,
    t: &NewTransfer<'_>,
) -> Result<Currency, Error> {
    let m = &t.movement;
    if m.kind != TransferKind::Reversal
        || (m.from, m.to) != (original.state.to, original.state.from)
        || t.reverses != Some(&original.state.id)
    {
        return Err(Error::invariant(format!(
            "reversal {} of transfer {} does not move it back",
            m.id, original.state.id
        )));
    }
    let before = locked.clone();
    let moved = place(locked, t)?;
    if moved != original.state.currency {
        *locked = before;
        return Err(Error::invariant(format!(
            "transfer {} was placed in {} between accounts now in {moved}",
            original.state.id, original.state.currency
        )));
    }
    Ok(moved)
}

/// The idempotency decision of a reversal whose id is journalled: a reversal of the same
/// original with the same reference and metadata, and the same amount when one is asked
/// (without one it asked for "the rest", which the first answer resolved), answers as it was
/// (marked as a replay); anything else under that id is a conflict.
pub fn replay_reversal(
    existing: Transfer,
    original: &TransferId,
    asked: Option<Amount>,
    tags: &Tags,
) -> Result<Transfer, Error> {
    let same = existing.kind == TransferKind::Reversal
        && existing.reverses.as_ref() == Some(original)
        && asked.is_none_or(|a| a.get() == existing.amount)
        && existing.tags == *tags;
    if same {
        Ok(Transfer {
            replayed: true,
            ..existing
        })
    } else {
        Err(Error::TransferConflict(existing.id))
    }
}

/// The reserved prefix of opening transfers' ids (`opening:<account>`): client transfer ids may
/// not start with it, so they can never collide with one.
pub const OPENING_PREFIX: &str = "opening:";

/// Input checks of a movement that need no database: distinct accounts, no reserved id, and
/// the system account only on the side its kind says.
pub fn validate(m: &Movement<'_>) -> Result<(), InputError> {
    if m.id.as_str().starts_with(OPENING_PREFIX) {
        return Err(InputError::TransferIdInvalid);
    }
    if m.from == m.to {
        return Err(InputError::SameAccount);
    }
    let system_ok = match m.kind {
        TransferKind::Deposit | TransferKind::Opening => m.from == AccountId::SYSTEM,
        TransferKind::Withdrawal => m.to == AccountId::SYSTEM,
        TransferKind::Transfer => false,
        // The original's two sides, moved back: either may be the system account.
        TransferKind::Reversal => true,
    };
    for side in [m.from, m.to] {
        if side == AccountId::SYSTEM && !system_ok {
            return Err(InputError::AccountIdNotPositive(side.get()));
        }
    }
    Ok(())
}

/// The currency a movement between `from` and `to` moves: both accounts' when they agree (the
/// same currency and scale), the customer's when the other is the system account, else
/// [`Error::CurrencyMismatch`] naming both accounts and both denominations.
pub fn currency(from: &AccountRow, to: &AccountRow) -> Result<Currency, Error> {
    match (from.denomination, to.denomination) {
        (Some(f), Some(t)) if f != t => Err(Error::CurrencyMismatch {
            from: from.id,
            to: to.id,
            from_currency: f.currency,
            to_currency: t.currency,
            from_scale: f.scale,
            to_scale: t.scale,
        }),
        (Some(d), _) | (None, Some(d)) => Ok(d.currency),
        (None, None) => Err(Error::invariant(format!(
            "a movement between accounts {} and {} that have no currency",
            from.id, to.id
        ))),
    }
}

/// [`currency`] of a movement's two accounts, as `locked` holds them.
pub fn currency_of(locked: &Locked, m: &Movement<'_>) -> Result<Currency, Error> {
    currency(locked.get(m.from)?, locked.get(m.to)?)
}

/// Places a new transfer on locked rows: a posted one moves `balance` on both sides, a pending
/// one adds to the source's `held` and the destination's `pending_credits`. Either way the
/// debit counts against the source's `min_balance` with what it already holds, and the credit
/// against the destination's `max_balance` with what is already pending to it. The two
/// accounts' currencies are checked first ([`currency`]); returns the currency it moved, which
/// its journal row records.
pub fn place(locked: &mut Locked, t: &NewTransfer<'_>) -> Result<Currency, Error> {
    let m = &t.movement;
    let amount = m.amount.get();
    let mut from = *locked.get(m.from)?;
    let mut to = *locked.get(m.to)?;
    let moved = currency(&from, &to)?;
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
    let change = Change {
        transfer: m.id,
        kind: EntryKind::placed(m.kind, t.pending.is_some()),
        amount,
        currency: moved,
    };
    locked.commit(from, to, change);
    Ok(moved)
}

/// Settles a hold on locked rows, as the state machine says ([`transitions::step`], at `now`,
/// the transaction's clock): exactly one of post, void and expiry moves a `pending` transfer; a
/// later one finds the state it reached ([`Error::TransferNotPending`]), except the same post or
/// void repeated, which answers [`Settled::Replayed`]; a post or void of a hold past its
/// deadline expires it ([`Settled::Expired`]). A post moves `amount` (at most the hold) and
/// releases the whole hold; void and expiry release it. Releasing can break no limit (it only
/// lowers `held` and `pending_credits`), so only the posted balances are range-checked. A post
/// moves money, so its accounts' currencies are checked as a placement's are (they are fixed
/// when an account is opened: a mismatch here means a hold written around the engine).
pub fn settle(
    locked: &mut Locked,
    t: &mut TransferState,
    how: Settle,
    now: DateTime<Utc>,
) -> Result<Settled, Error> {
    let (target, settled) = match transitions::step(&t.seen(now), how) {
        Step::Refuse => return Err(t.not_pending()),
        Step::Replay => return Ok(Settled::Replayed),
        Step::NotDue => {
            return Err(Error::invariant(format!(
                "expiry of transfer {} before its deadline",
                t.id
            )))
        }
        Step::ExpireThenRefuse => (TransferStatus::Expired, Settled::Expired),
        Step::Move(target) => (target, Settled::Applied),
    };
    let posted = match how {
        Settle::Post(n) if target == TransferStatus::Posted => {
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
        _ => 0,
    };
    let mut from = *locked.get(t.from)?;
    let mut to = *locked.get(t.to)?;
    if posted > 0 {
        let moved = currency(&from, &to)?;
        if moved != t.currency {
            return Err(Error::invariant(format!(
                "hold {} was placed in {} between accounts in {moved}",
                t.id, t.currency
            )));
        }
    }
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
    let (kind, amount) = match target {
        TransferStatus::Posted => (EntryKind::Post, posted),
        TransferStatus::Voided => (EntryKind::Void, t.amount),
        // The transition table moves a pending hold to posted, voided or expired only.
        TransferStatus::Expired | TransferStatus::Pending => (EntryKind::Expire, t.amount),
    };
    let change = Change {
        transfer: &t.id,
        kind,
        amount,
        currency: t.currency,
    };
    locked.commit(from, to, change);
    t.status = target;
    t.posted_amount = (posted > 0).then_some(posted);
    Ok(settled)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            denomination: Some(Denomination::DEFAULT),
            entry_seq: 0,
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
            tags: &crate::domain::NO_TAGS,
            reverses: None,
        }
    }

    /// The clock every test settles at.
    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).expect("time")
    }

    /// A pending hold of `amount`; `due`: its deadline is `now()` (reached), else a minute on.
    fn state(id: &TransferId, amount: i64, due: bool) -> TransferState {
        let deadline = if due {
            now()
        } else {
            now() + chrono::Duration::minutes(1)
        };
        TransferState {
            id: id.clone(),
            from: acc(1),
            to: acc(2),
            amount,
            status: TransferStatus::Pending,
            posted_amount: None,
            was_pending: true,
            expires_at: Some(deadline),
            currency: Currency::DEFAULT,
        }
    }

    fn movement(
        id: &TransferId,
        from: AccountId,
        to: AccountId,
        kind: TransferKind,
    ) -> Movement<'_> {
        Movement {
            id,
            from,
            to,
            amount: Amount::new(1).expect("amount"),
            kind,
        }
    }

    #[test]
    fn validation_refuses_same_account_system_and_reserved_ids() {
        let id = TransferId::new("t1").expect("id");
        let (a, b, sys) = (acc(1), acc(2), AccountId::SYSTEM);
        let check = |from, to, kind| validate(&movement(&id, from, to, kind));
        assert_eq!(check(a, b, TransferKind::Transfer), Ok(()));
        assert_eq!(
            check(a, a, TransferKind::Transfer),
            Err(InputError::SameAccount)
        );
        assert_eq!(
            check(sys, a, TransferKind::Transfer),
            Err(InputError::AccountIdNotPositive(0))
        );
        assert_eq!(check(sys, a, TransferKind::Deposit), Ok(()));
        assert_eq!(
            check(a, sys, TransferKind::Deposit),
            Err(InputError::AccountIdNotPositive(0))
        );
        assert_eq!(check(a, sys, TransferKind::Withdrawal), Ok(()));
        let reserved = TransferId::new("opening:1").expect("id");
        assert_eq!(
            validate(&movement(&reserved, a, b, TransferKind::Transfer)),
            Err(InputError::TransferIdInvalid)
        );
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
            // Only a hold past its deadline expires.
            let mut t = state(&id, 30, first == Settle::Expire);
            assert!(matches!(
                settle(&mut locked, &mut t, first, now()),
                Ok(Settled::Applied)
            ));
            let after = locked.clone();
            for then in all {
                let answer = settle(&mut locked, &mut t, then, now());
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
        let mut t = state(&id, 30, false);
        let too_much = Settle::Post(Some(Amount::new(31).expect("amount")));
        assert!(matches!(
            settle(&mut locked, &mut t, too_much, now()),
            Err(Error::PostExceedsHold {
                requested: 31,
                held: 30,
                ..
            })
        ));
        let ten = Settle::Post(Some(Amount::new(10).expect("amount")));
        assert!(matches!(
            settle(&mut locked, &mut t, ten, now()),
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
            settle(&mut locked, &mut t, ten, now()),
            Ok(Settled::Replayed)
        ));
        // The whole amount is another request than the one that won.
        assert!(settle(&mut locked, &mut t, Settle::Post(None), now()).is_err());
    }

    #[test]
    fn a_post_or_void_past_the_deadline_expires_the_hold_and_is_refused() {
        let id = TransferId::new("t").expect("id");
        for how in [
            Settle::Post(None),
            Settle::Post(Some(Amount::new(31).expect("amount"))),
            Settle::Void,
        ] {
            let mut locked = Locked::new([row(1, 100, 0, None), row(2, 0, 0, None)]);
            place(&mut locked, &new(&id, 1, 2, 30, true)).expect("hold");
            let mut t = state(&id, 30, true);
            assert_eq!(
                settle(&mut locked, &mut t, how, now()).ok(),
                Some(Settled::Expired),
                "{how:?}"
            );
            assert_eq!((t.status, t.posted_amount), (TransferStatus::Expired, None));
            assert!(matches!(
                t.not_pending(),
                Error::TransferNotPending {
                    status: TransferStatus::Expired,
                    posted_amount: None,
                    ..
                }
            ));
            // Released as an expiry releases it: nothing posted.
            let (from, to) = (
                locked.get(acc(1)).expect("1"),
                locked.get(acc(2)).expect("2"),
            );
            assert_eq!(
                (from.balance, from.held, to.balance, to.pending_credits),
                (100, 0, 0, 0)
            );
            // The sweeper, coming later, finds it settled.
            assert!(settle(&mut locked, &mut t, Settle::Expire, now()).is_err());
        }
    }

    #[test]
    fn a_refused_void_of_a_one_shot_transfer_names_what_it_posted() {
        let id = TransferId::new("once").expect("id");
        let mut locked = Locked::new([row(1, 100, 0, None), row(2, 0, 0, None)]);
        let mut t = TransferState {
            status: TransferStatus::Posted,
            was_pending: false,
            expires_at: None,
            ..state(&id, 2500, false)
        };
        for how in [Settle::Void, Settle::Post(None)] {
            assert!(matches!(
                settle(&mut locked, &mut t, how, now()),
                Err(Error::TransferNotPending {
                    status: TransferStatus::Posted,
                    posted_amount: Some(2500),
                    ..
                })
            ));
        }
        assert_eq!(locked.changed().count(), 0);
    }

    /// A reversal takes what is asked, or the rest; never more than is left, never from a
    /// transfer that is not posted (a hold past its deadline reads expired).
    #[test]
    fn a_reversal_takes_at_most_what_is_left_of_posted_money() {
        let original = |status, posted_amount, reversed, due| Original {
            state: TransferState {
                id: TransferId::new("t").expect("id"),
                from: acc(1),
                to: acc(2),
                amount: 100,
                status,
                posted_amount,
                was_pending: posted_amount.is_some(),
                expires_at: Some(if due {
                    now()
                } else {
                    now() + chrono::Duration::minutes(1)
                }),
                currency: Currency::DEFAULT,
            },
            reversed,
            reversals: i32::from(reversed > 0),
        };
        let n = |n: i64| Some(Amount::new(n).expect("amount"));
        let left = |o: &Original, asked| reversal_amount(o, asked, now()).map(Amount::get);
        let posted = original(TransferStatus::Posted, None, 30, false);
        assert_eq!(left(&posted, None).ok(), Some(70));
        assert_eq!(left(&posted, n(70)).ok(), Some(70));
        assert!(matches!(
            left(&posted, n(71)),
            Err(Error::ReversalExceedsPosted {
                posted: 100,
                reversed: 30,
                requested: Some(71),
                ..
            })
        ));
        let partly_posted = original(TransferStatus::Posted, Some(40), 40, true);
        assert!(matches!(
            left(&partly_posted, None),
            Err(Error::ReversalExceedsPosted {
                posted: 40,
                reversed: 40,
                requested: None,
                ..
            })
        ));
        for (status, due, named) in [
            (TransferStatus::Pending, false, TransferStatus::Pending),
            (TransferStatus::Pending, true, TransferStatus::Expired),
            (TransferStatus::Voided, false, TransferStatus::Voided),
            (TransferStatus::Expired, false, TransferStatus::Expired),
        ] {
            assert!(matches!(
                left(&original(status, None, 0, due), n(1)),
                Err(Error::TransferNotPosted { status, .. }) if status == named
            ));
        }
        // The next reversal's event follows the creation, a hold's settle and earlier ones.
        assert_eq!(posted.next_event_position(), 3);
        assert_eq!(partly_posted.next_event_position(), 4);
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
            denomination: None,
            entry_seq: 0,
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

    #[test]
    fn money_moves_only_within_one_denomination_and_a_mismatch_moves_nothing() {
        let id = TransferId::new("fx").expect("id");
        let usd = Denomination::new(Currency::new("USD").expect("usd"), None);
        let eur3 = Denomination {
            scale: crate::ledger::currency::Scale::new(3).expect("scale"),
            ..Denomination::DEFAULT
        };
        for other in [usd, eur3] {
            let dollars = AccountRow {
                denomination: Some(other),
                ..row(2, 0, 0, None)
            };
            let mut locked = Locked::new([row(1, 100, 0, None), dollars]);
            for pending in [false, true] {
                assert!(matches!(
                    place(&mut locked, &new(&id, 1, 2, 10, pending)),
                    Err(Error::CurrencyMismatch { from, to, from_currency, to_currency, .. })
                        if from == acc(1) && to == acc(2)
                            && from_currency == Currency::DEFAULT
                            && to_currency == other.currency
                ));
            }
            assert_eq!(locked.changed().count(), 0, "nothing moved");
        }
        // The system account takes the customer's currency; two customers of one agree.
        let system = AccountRow {
            id: AccountId::SYSTEM,
            balance: 0,
            held: 0,
            pending_credits: 0,
            min_balance: None,
            max_balance: None,
            denomination: None,
            entry_seq: 0,
        };
        let dollars = AccountRow {
            denomination: Some(usd),
            ..row(2, 0, 0, None)
        };
        assert_eq!(currency(&system, &dollars).ok(), Some(usd.currency));
        let mut locked = Locked::new([row(1, 100, 0, None), row(3, 0, 0, None)]);
        assert_eq!(
            place(&mut locked, &new(&id, 1, 3, 10, false)).ok(),
            Some(Currency::DEFAULT)
        );
    }
}
