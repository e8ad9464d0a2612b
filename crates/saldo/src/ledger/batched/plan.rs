//! A ledger batch decided in memory: every operation in arrival order on the locked rows, as
//! the one-operation transactions would decide them one after the other. Placements replay,
//! conflict, are refused or placed ([`apply::place`]); settles are refused, replayed, applied or
//! (a hold past its deadline) expired and refused ([`apply::settle`]), on the transfer's state
//! as the batch left it. A refusal changes nothing. Pure: the batch transaction
//! (`super::batch`) reads before and writes after.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};

use super::job::Op;
use crate::domain::TransferStatus;
use crate::error::Error;
use crate::ledger::apply::{self, Locked, NewTransfer, Settled, TransferState};
use crate::ledger::currency::Currency;
use crate::ledger::types::Transfer;

/// What one operation of the batch came to, before the writes tell the rows.
#[derive(Debug)]
// One per operation of a batch (bounded by the batch), built once and moved once into the
// answer: boxing the answer would cost an allocation per refusal for no gain.
#[allow(clippy::large_enum_variant)]
pub(super) enum Decision {
    /// Answered without writing: a replay of a journalled transfer, a conflict, a refusal (the
    /// refusal of a post or void that expired its hold too: the expiry is in the plan).
    Done(Result<Transfer, Error>),
    /// Placed: new journal row `n` of this batch; `replayed` for a copy of it later in the
    /// batch.
    Placed { n: usize, replayed: bool },
    /// A settle that applied now, or the same post or void again: the transfer as it is after
    /// the batch.
    Settled { id: String, replayed: bool },
}

/// A settle's transfer as the batch knows it: read under the locks, or placed in this batch.
pub(super) type States = HashMap<String, TransferState>;

/// The batch decided in memory: one decision per operation, the transfers to journal (indexes
/// into the batch, in order) and the holds whose status moves.
pub(super) struct Plan {
    pub decisions: Vec<Decision>,
    pub placed: Vec<usize>,
    /// The currency of each placement of `placed`, in the same order.
    pub currencies: Vec<Currency>,
    pub settled: BTreeMap<String, (TransferStatus, Option<i64>)>,
}

/// Decides every operation in arrival order on the locked rows, at `now` (the transaction's
/// clock: what "due" is decided against).
pub(super) fn decide(
    ops: &[&Op],
    locked: &mut Locked,
    found: &HashMap<String, Transfer>,
    states: &mut States,
    now: DateTime<Utc>,
) -> Plan {
    let mut plan = Plan {
        decisions: Vec::with_capacity(ops.len()),
        placed: Vec::new(),
        currencies: Vec::new(),
        settled: BTreeMap::new(),
    };
    // Ids placed earlier in this batch → their new row number.
    let mut in_batch: HashMap<String, usize> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        let decision = match (op, op.new_transfer()) {
            (Op::Settle { id, how, .. }, _) => match states.get_mut(id.as_str()) {
                None => Decision::Done(Err(Error::UnknownTransfer(id.clone()))),
                Some(state) => settle(&mut plan, locked, state, *how, now),
            },
            (Op::Place { .. }, Some(t)) => place(
                &mut plan,
                ops,
                i,
                &t,
                (locked, found, states),
                &mut in_batch,
            ),
            (Op::Place { .. }, None) => {
                Decision::Done(Err(Error::invariant("a placement without its transfer")))
            }
        };
        plan.decisions.push(decision);
    }
    plan
}

/// A new transfer: a replay of a journalled one, of one placed earlier in the batch, or placed.
fn place(
    plan: &mut Plan,
    ops: &[&Op],
    i: usize,
    t: &NewTransfer<'_>,
    (locked, found, states): (&mut Locked, &HashMap<String, Transfer>, &mut States),
    in_batch: &mut HashMap<String, usize>,
) -> Decision {
    let id = t.movement.id.as_str();
    if let Some(existing) = found.get(id) {
        return Decision::Done(apply::replay(existing.clone(), t));
    }
    if let Some(&n) = in_batch.get(id) {
        return same_as_placed(ops, &plan.placed, n, t);
    }
    match apply::place(locked, t) {
        Err(refusal) => Decision::Done(Err(refusal)),
        Ok(currency) => {
            in_batch.insert(id.to_owned(), plan.placed.len());
            states.insert(id.to_owned(), placed_state(t, currency));
            plan.placed.push(i);
            plan.currencies.push(currency);
            Decision::Placed {
                n: plan.placed.len() - 1,
                replayed: false,
            }
        }
    }
}

/// A post or void through the state machine; what moved goes into the plan.
fn settle(
    plan: &mut Plan,
    locked: &mut Locked,
    state: &mut TransferState,
    how: crate::ledger::transitions::Settle,
    now: DateTime<Utc>,
) -> Decision {
    let outcome = match apply::settle(locked, state, how, now) {
        Err(refusal) => return Decision::Done(Err(refusal)),
        Ok(outcome) => outcome,
    };
    let id = state.id.as_str().to_owned();
    if outcome != Settled::Replayed {
        plan.settled
            .insert(id.clone(), (state.status, state.posted_amount));
    }
    if outcome == Settled::Expired {
        return Decision::Done(Err(state.not_pending()));
    }
    Decision::Settled {
        id,
        replayed: outcome == Settled::Replayed,
    }
}

/// A placement whose id was placed earlier in this batch: a replay of it, or a conflict.
fn same_as_placed(ops: &[&Op], placed: &[usize], n: usize, t: &NewTransfer<'_>) -> Decision {
    let first = placed
        .get(n)
        .and_then(|&i| ops.get(i))
        .and_then(|o| o.new_transfer());
    let same = first.is_some_and(|f| {
        let (a, b) = (&f.movement, &t.movement);
        (a.from, a.to, a.amount, a.kind) == (b.from, b.to, b.amount, b.kind)
            && f.pending.map(|p| p.secs()) == t.pending.map(|p| p.secs())
            && f.tags == t.tags
    });
    if same {
        Decision::Placed { n, replayed: true }
    } else {
        Decision::Done(Err(Error::TransferConflict(t.movement.id.clone())))
    }
}

/// The settle state of a transfer this batch placed (as the journal would read it back): a
/// hold placed now is not due (its timeout is at least a second).
fn placed_state(t: &NewTransfer<'_>, currency: Currency) -> TransferState {
    TransferState {
        id: t.movement.id.clone(),
        from: t.movement.from,
        to: t.movement.to,
        amount: t.movement.amount.get(),
        status: t.status(),
        posted_amount: None,
        was_pending: t.pending.is_some(),
        expires_at: None,
        currency,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{AccountId, Amount, TransferId, TransferTimeout};
    use crate::ledger::apply::AccountRow;
    use crate::ledger::transitions::Settle;
    use crate::ledger::types::TransferKind;

    fn account(n: i64) -> AccountId {
        if n == 0 {
            AccountId::SYSTEM
        } else {
            AccountId::new(n).expect("account")
        }
    }

    fn row(n: i64, balance: i64) -> AccountRow {
        AccountRow {
            id: account(n),
            balance,
            held: 0,
            pending_credits: 0,
            min_balance: (n != 0).then_some(0),
            max_balance: None,
            denomination: (n != 0).then_some(crate::ledger::currency::Denomination::DEFAULT),
            entry_seq: 0,
        }
    }

    fn place(id: &str, from: i64, to: i64, amount: i64, pending: bool) -> Op {
        let kind = match (from, to) {
            (0, _) => TransferKind::Deposit,
            (_, 0) => TransferKind::Withdrawal,
            _ => TransferKind::Transfer,
        };
        Op::Place {
            id: TransferId::new(id).expect("id"),
            from: account(from),
            to: account(to),
            amount: Amount::new(amount).expect("amount"),
            kind,
            pending: pending.then(TransferTimeout::default),
            tags: crate::domain::Tags::NONE,
        }
    }

    fn settle(id: &str, how: Settle) -> Op {
        Op::Settle {
            id: TransferId::new(id).expect("id"),
            how,
            sides: None,
        }
    }

    fn shapes(plan: &Plan) -> Vec<String> {
        plan.decisions
            .iter()
            .map(|d| match d {
                Decision::Placed { n, replayed } => format!("placed {n} {replayed}"),
                Decision::Settled { id, replayed } => format!("settled {id} {replayed}"),
                Decision::Done(Err(Error::TransferNotPending { status, .. })) => {
                    format!("TransferNotPending {status}")
                }
                Decision::Done(Err(e)) => format!("{e:?}")
                    .split([' ', '(', '{'])
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
                Decision::Done(Ok(_)) => "found".to_owned(),
            })
            .collect()
    }

    #[test]
    fn operations_are_decided_in_arrival_order_and_a_refusal_spares_the_rest() {
        let ops = [
            place("a", 1, 2, 60, false),
            place("b", 1, 2, 60, false), // 40 left: refused
            place("c", 2, 1, 10, false),
            place("a", 1, 2, 60, false), // a replay of "a" inside the batch
            place("a", 1, 2, 61, false), // the same id, another payload
            place("d", 1, 9, 1, false),  // unknown account
            place("e", 0, 1, 5, false),  // the system account may go negative
            place("h", 1, 2, 50, true),  // a hold of the last 55 but 5
            place("i", 1, 2, 6, false),  // 5 available: refused
            settle("h", Settle::Void),   // placed in this batch: void it
            place("i", 1, 2, 6, false),  // released: now it goes through
            settle("h", Settle::Void),   // the same void again
            settle("h", Settle::Post(None)),
            settle("zz", Settle::Void), // unknown
        ];
        let ops: Vec<&Op> = ops.iter().collect();
        let mut locked = Locked::new([row(0, 0), row(1, 100), row(2, 0)]);
        let plan = decide(
            &ops,
            &mut locked,
            &HashMap::new(),
            &mut States::new(),
            Utc::now(),
        );
        assert_eq!(
            shapes(&plan),
            [
                "placed 0 false",
                "InsufficientFunds",
                "placed 1 false",
                "placed 0 true",
                "TransferConflict",
                "UnknownAccount",
                "placed 2 false",
                "placed 3 false",
                "InsufficientFunds",
                "settled h false",
                "placed 4 false",
                "settled h true",
                "TransferNotPending voided",
                "UnknownTransfer",
            ]
        );
        assert_eq!(plan.placed, [0, 2, 6, 7, 10]);
        let balance = |n| locked.get(account(n)).map(|r| (r.balance, r.held));
        assert_eq!(balance(0).ok(), Some((-5, 0)));
        assert_eq!(balance(1).ok(), Some((100 - 60 + 10 + 5 - 6, 0)));
        assert_eq!(balance(2).ok(), Some((60 - 10 + 6, 0)));
        assert_eq!(plan.settled.get("h"), Some(&(TransferStatus::Voided, None)));
        // Six changes (five placements and the void), an entry per account each, with the
        // running counters: each account's last entry says its row as the batch left it.
        assert_eq!(locked.entries().len(), 12);
        for n in [0, 1, 2] {
            let last = locked
                .entries()
                .iter()
                .rev()
                .find(|e| e.account == account(n));
            let row = locked.get(account(n)).expect("row");
            assert_eq!(
                last.map(|e| (e.balance_after, e.held_after, e.pending_credits_after)),
                Some((row.balance, row.held, row.pending_credits))
            );
        }
    }

    /// A post of a hold past its deadline expires it in the batch's writes and is refused; a
    /// void after it in the same batch finds it expired; the funds are free again at once.
    #[test]
    fn a_due_hold_is_expired_by_the_first_settle_that_finds_it() {
        let now = Utc::now();
        let id = TransferId::new("h").expect("id");
        let mut locked = Locked::new([
            AccountRow {
                held: 30,
                ..row(1, 100)
            },
            AccountRow {
                pending_credits: 30,
                ..row(2, 0)
            },
        ]);
        let mut states = States::new();
        states.insert(
            "h".into(),
            TransferState {
                id,
                from: account(1),
                to: account(2),
                amount: 30,
                status: TransferStatus::Pending,
                posted_amount: None,
                was_pending: true,
                expires_at: Some(now - chrono::Duration::seconds(1)),
                currency: Currency::DEFAULT,
            },
        );
        let ops = [
            settle("h", Settle::Post(None)),
            settle("h", Settle::Void),
            place("t", 1, 2, 100, false),
        ];
        let ops: Vec<&Op> = ops.iter().collect();
        let plan = decide(&ops, &mut locked, &HashMap::new(), &mut states, now);
        assert_eq!(
            shapes(&plan),
            [
                "TransferNotPending expired",
                "TransferNotPending expired",
                "placed 0 false"
            ]
        );
        assert_eq!(
            plan.settled.get("h"),
            Some(&(TransferStatus::Expired, None))
        );
    }

    #[test]
    fn overflow_is_refused_typed_and_leaves_the_rows_alone() {
        let ops = [place("a", 0, 1, 10, false)];
        let ops: Vec<&Op> = ops.iter().collect();
        let mut locked = Locked::new([row(0, 0), row(1, i64::MAX - 5)]);
        let plan = decide(
            &ops,
            &mut locked,
            &HashMap::new(),
            &mut States::new(),
            Utc::now(),
        );
        assert!(plan.placed.is_empty());
        assert!(matches!(
            plan.decisions[0],
            Decision::Done(Err(Error::BalanceOutOfRange { .. }))
        ));
        assert_eq!(locked.changed().count(), 0);
    }
}
