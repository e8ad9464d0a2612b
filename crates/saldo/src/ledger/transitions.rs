//! The transfer state machine, as one table: a transfer moves only out of `pending`, to
//! `posted` (a post), `voided` (a void) or `expired` (past its deadline); nothing moves out of
//! `posted`, `voided` or `expired`. Every other (state, operation) pair answers why it cannot
//! happen: the same post or void that already won answers the same again (a replay), anything
//! else is refused with the state the transfer reached.
//!
//! A deadline is exact: a pending hold past its `expires_at` is expired for every post and void,
//! whether or not the sweeper has run. The operation that finds it due expires it there and then
//! (the books move once, as the sweeper would have moved them) and is refused, naming
//! `expired`. "Due" is decided against the transaction's clock (the coordinator's on Citus),
//! the clock the sweeper uses.
//!
//! Pure: post, void and the sweeper's expiry all decide here ([`super::apply::settle`]), on one
//! node and on Citus, one operation at a time or in a batch.

use chrono::{DateTime, Utc};

use crate::domain::{Amount, TransferStatus};
use crate::ledger::types::Transfer;

/// What is asked of a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Post,
    Void,
    /// The sweeper's (or a post's or void's) expiry of a hold past its deadline.
    Expire,
}

/// The only moves there are: (from, action, to).
pub const MOVES: [(TransferStatus, Action, TransferStatus); 3] = [
    (
        TransferStatus::Pending,
        Action::Post,
        TransferStatus::Posted,
    ),
    (
        TransferStatus::Pending,
        Action::Void,
        TransferStatus::Voided,
    ),
    (
        TransferStatus::Pending,
        Action::Expire,
        TransferStatus::Expired,
    ),
];

/// Where `action` takes a transfer in `from`, if anywhere ([`MOVES`]).
pub fn moves_to(from: TransferStatus, action: Action) -> Option<TransferStatus> {
    MOVES
        .iter()
        .find(|(f, a, _)| *f == from && *a == action)
        .map(|(_, _, to)| *to)
}

/// What a transfer is, as far as the state machine cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub status: TransferStatus,
    /// Created pending (a hold): only such a transfer can be posted, voided or expired, and
    /// only its winning post or void can replay.
    pub was_pending: bool,
    pub amount: i64,
    /// What a posted hold moved (`None` on a one-shot transfer: the whole amount).
    pub posted_amount: Option<i64>,
    /// Its deadline was reached (`expires_at <= now`, the transaction's clock).
    pub due: bool,
}

/// How a hold is settled: the operation as asked (a post carries its amount).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Post `amount` (the whole hold when `None`); the rest is released.
    Post(Option<Amount>),
    Void,
    /// The sweeper, for a hold past its deadline.
    Expire,
}

impl Settle {
    pub fn action(self) -> Action {
        match self {
            Settle::Post(_) => Action::Post,
            Settle::Void => Action::Void,
            Settle::Expire => Action::Expire,
        }
    }

    /// The status the hold reaches when this settle wins.
    pub fn target(self) -> TransferStatus {
        match self {
            Settle::Post(_) => TransferStatus::Posted,
            Settle::Void => TransferStatus::Voided,
            Settle::Expire => TransferStatus::Expired,
        }
    }
}

/// What comes of an operation on a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The transfer moves to this status, and the accounts with it.
    Move(TransferStatus),
    /// The hold is past its deadline: it expires now (the books move as for an expiry) and the
    /// post or void that found it is refused, naming `expired`.
    ExpireThenRefuse,
    /// The same post (same amount) or void that already won: the same answer, nothing moves.
    Replay,
    /// Nothing moves: the transfer is not pending; the refusal names the state it reached.
    Refuse,
    /// An expiry of a hold not yet due: nothing moves (the sweeper only picks due holds, so
    /// this is never asked of the engine).
    NotDue,
}

/// The one decision of every post, void and expiry.
pub fn step(seen: &Seen, asked: Settle) -> Step {
    let action = asked.action();
    if let Some(to) = moves_to(seen.status, action) {
        return match (action, seen.due) {
            (Action::Expire, true) => Step::Move(to),
            (Action::Expire, false) => Step::NotDue,
            (_, true) => Step::ExpireThenRefuse,
            (_, false) => Step::Move(to),
        };
    }
    let replay = seen.was_pending
        && match asked {
            Settle::Post(n) => {
                seen.status == TransferStatus::Posted
                    && seen.posted_amount == Some(n.map_or(seen.amount, Amount::get))
            }
            Settle::Void => seen.status == TransferStatus::Voided,
            // The sweeper never answers a caller: nothing to replay.
            Settle::Expire => false,
        };
    if replay {
        Step::Replay
    } else {
        Step::Refuse
    }
}

/// Whether a transfer in `status` can be reversed, as a read at the reversal's clock says it
/// (`due`: its deadline was reached, so a hold still stored pending reads `expired`): only a
/// posted one. A reversal moves no status (it is a new transfer, and the original counts what
/// was reversed of it), so it is not a move of [`MOVES`]; any other state is the refusal,
/// naming the state as a read would.
pub fn reversible(status: TransferStatus, due: bool) -> Result<(), TransferStatus> {
    match status {
        TransferStatus::Posted => Ok(()),
        TransferStatus::Pending if due => Err(TransferStatus::Expired),
        other => Err(other),
    }
}

/// What moved for a transfer in `status`: the posted amount of a posted one (its whole amount
/// when the journal leaves it NULL, as for every one-shot transfer), nothing otherwise. What a
/// refusal and a read both say.
pub fn effective_posted(status: TransferStatus, amount: i64, posted: Option<i64>) -> Option<i64> {
    (status == TransferStatus::Posted).then(|| posted.unwrap_or(amount))
}

/// Whether a hold with this deadline is due at `now`.
pub fn is_due(expires_at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    expires_at.is_some_and(|deadline| deadline <= now)
}

/// A transfer as a read answers it at `now` (the database's clock): a hold still stored
/// pending but past its deadline is expired for every operation, so it reads `expired` (with
/// no `settled_at` yet), as a lapsed reservation reads on the stock side. Its amount stays in
/// the accounts' `held` and `pending_credits` until a post, a void or the sweeper settles it
/// (that write is what `transfer.expired` and `settled_at` record).
pub fn as_read(mut t: Transfer, now: DateTime<Utc>) -> Transfer {
    if t.status == TransferStatus::Pending && is_due(t.expires_at, now) {
        t.status = TransferStatus::Expired;
        t.posted_amount = effective_posted(t.status, t.amount, t.posted_amount);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use TransferStatus::{Expired, Pending, Posted, Voided};

    const AMOUNT: i64 = 30;

    fn amount(n: i64) -> Amount {
        Amount::new(n).expect("amount")
    }

    /// Every state a transfer can be in: each status, created pending or not, due or not, and
    /// for a posted hold the amount it posted.
    fn every_state() -> Vec<Seen> {
        let mut out = Vec::new();
        for status in [Pending, Posted, Voided, Expired] {
            for was_pending in [true, false] {
                for due in [true, false] {
                    let posted = match (status, was_pending) {
                        (Posted, true) => vec![Some(AMOUNT), Some(10)],
                        _ => vec![None],
                    };
                    for posted_amount in posted {
                        out.push(Seen {
                            status,
                            was_pending,
                            amount: AMOUNT,
                            posted_amount,
                            due,
                        });
                    }
                }
            }
        }
        out
    }

    fn every_operation() -> [Settle; 5] {
        [
            Settle::Post(None),
            Settle::Post(Some(amount(AMOUNT))),
            Settle::Post(Some(amount(10))),
            Settle::Void,
            Settle::Expire,
        ]
    }

    /// The expected answer, written out case by case (not through [`MOVES`]).
    fn expected(s: &Seen, asked: Settle) -> Step {
        match (s.status, asked) {
            (Pending, Settle::Expire) if s.due => Step::Move(Expired),
            (Pending, Settle::Expire) => Step::NotDue,
            (Pending, _) if s.due => Step::ExpireThenRefuse,
            (Pending, Settle::Post(_)) => Step::Move(Posted),
            (Pending, Settle::Void) => Step::Move(Voided),
            (Posted, Settle::Post(n))
                if s.was_pending && s.posted_amount == Some(n.map_or(AMOUNT, Amount::get)) =>
            {
                Step::Replay
            }
            (Voided, Settle::Void) if s.was_pending => Step::Replay,
            _ => Step::Refuse,
        }
    }

    #[test]
    fn every_state_by_every_operation() {
        let mut seen_steps = std::collections::BTreeSet::new();
        for s in every_state() {
            for asked in every_operation() {
                let got = step(&s, asked);
                assert_eq!(got, expected(&s, asked), "{asked:?} on {s:?}");
                seen_steps.insert(format!("{got:?}"));
                // Nothing ever moves out of a settled state.
                if s.status != Pending {
                    assert!(!matches!(got, Step::Move(_) | Step::ExpireThenRefuse));
                }
            }
        }
        assert_eq!(seen_steps.len(), 7, "every answer occurs: {seen_steps:?}");
    }

    #[test]
    fn the_table_moves_out_of_pending_only() {
        for from in [Pending, Posted, Voided, Expired] {
            for action in [Action::Post, Action::Void, Action::Expire] {
                let to = moves_to(from, action);
                assert_eq!(to.is_some(), from == Pending, "{action:?} from {from:?}");
            }
        }
        for how in [Settle::Post(None), Settle::Void, Settle::Expire] {
            assert_eq!(moves_to(Pending, how.action()), Some(how.target()));
        }
    }

    /// Only posted money is reversed; a refusal names the state as a read says it.
    #[test]
    fn only_a_posted_transfer_is_reversible() {
        for status in [Pending, Posted, Voided, Expired] {
            for due in [false, true] {
                let expected = match (status, due) {
                    (Posted, _) => Ok(()),
                    (Pending, true) => Err(Expired),
                    (other, _) => Err(other),
                };
                assert_eq!(reversible(status, due), expected, "{status:?} due {due}");
            }
        }
    }

    #[test]
    fn a_refusal_says_what_moved() {
        assert_eq!(effective_posted(Posted, 2500, None), Some(2500));
        assert_eq!(effective_posted(Posted, 2500, Some(10)), Some(10));
        for status in [Pending, Voided, Expired] {
            assert_eq!(effective_posted(status, 2500, None), None);
        }
    }

    /// A read at or after the deadline says expired, and only of a pending hold.
    #[test]
    fn a_read_past_the_deadline_says_expired() {
        let now = Utc::now();
        let hold = |status, expires_at| Transfer {
            id: crate::domain::TransferId::new("h").expect("id"),
            from: crate::domain::AccountId::new(1).expect("account"),
            to: crate::domain::AccountId::new(2).expect("account"),
            amount: 10,
            currency: crate::ledger::currency::Currency::DEFAULT,
            kind: crate::ledger::types::TransferKind::Transfer,
            created_at: now,
            replayed: false,
            status,
            posted_amount: None,
            timeout_s: Some(1),
            expires_at,
            settled_at: None,
            group_id: None,
            tags: crate::domain::Tags::NONE,
            reverses: None,
            reversed_amount: 0,
            reversals: Vec::new(),
        };
        let second = chrono::Duration::seconds(1);
        assert_eq!(as_read(hold(Pending, Some(now)), now).status, Expired);
        assert_eq!(
            as_read(hold(Pending, Some(now + second)), now).status,
            Pending
        );
        assert_eq!(as_read(hold(Pending, None), now).status, Pending);
        for settled in [Posted, Voided, Expired] {
            assert_eq!(
                as_read(hold(settled, Some(now - second)), now).status,
                settled
            );
        }
    }

    #[test]
    fn a_deadline_is_due_from_its_instant_on() {
        let now = Utc::now();
        assert!(is_due(Some(now), now));
        assert!(is_due(Some(now - chrono::Duration::milliseconds(1)), now));
        assert!(!is_due(Some(now + chrono::Duration::milliseconds(1)), now));
        assert!(!is_due(None, now));
    }
}
