//! The transfers and holds of a history against the journal: every acknowledged one is there
//! once (one row, or one per account side on Citus) as asked, every refused one is not; each
//! hold is in the state its acknowledged post or void put it in (never both), else pending;
//! and every balance is its opening plus what moved.

use std::collections::{BTreeMap, BTreeSet};

use super::types::{Books, Check, Found, Opening, TransferRow};
use crate::faults::history::{Op, Record, Verdict};

/// What the answers moved, per account: posted cents in and out, held and pending credits.
#[derive(Debug, Default)]
pub struct Moves {
    pub balance: BTreeMap<i64, i64>,
    pub held: BTreeMap<i64, i64>,
    pub pending_credits: BTreeMap<i64, i64>,
}

impl Moves {
    fn post(&mut self, from: i64, to: i64, amount: i64) {
        *self.balance.entry(from).or_default() -= amount;
        *self.balance.entry(to).or_default() += amount;
    }

    fn hold(&mut self, from: i64, to: i64, amount: i64) {
        *self.held.entry(from).or_default() += amount;
        *self.pending_credits.entry(to).or_default() += amount;
    }
}

/// What a hold's acknowledged post and void did.
#[derive(Debug, Default)]
struct Fate {
    posted: Option<i64>,
    voided: bool,
}

fn fates(history: &[Record]) -> BTreeMap<&str, Fate> {
    let mut fates: BTreeMap<&str, Fate> = BTreeMap::new();
    for record in history.iter().filter(|r| r.outcome() == Verdict::Applied) {
        match &record.op {
            Op::Post { id, amount } => fates.entry(id).or_default().posted = Some(*amount),
            Op::Void { id } => fates.entry(id).or_default().voided = true,
            _ => {}
        }
    }
    fates
}

/// A transfer or a hold as asked: (id, from, to, amount, is a hold).
fn asked(op: &Op) -> Option<(&str, i64, i64, i64, bool)> {
    match op {
        Op::Transfer {
            id,
            from,
            to,
            amount,
        } => Some((id, *from, *to, *amount, false)),
        Op::Hold {
            id,
            from,
            to,
            amount,
        } => Some((id, *from, *to, *amount, true)),
        _ => None,
    }
}

/// Checks every transfer and hold of `history` against `books`; returns what the answers moved.
pub fn check(history: &[Record], books: &Books, found: &mut Found) -> Moves {
    let mut journal: BTreeMap<&str, Vec<&TransferRow>> = BTreeMap::new();
    for row in books.transfers.iter().filter(|t| t.kind == "transfer") {
        journal.entry(&row.id).or_default().push(row);
    }
    let fates = fates(history);
    let mut moves = Moves::default();
    let mut known: BTreeSet<&str> = BTreeSet::new();
    for record in history {
        let Some((id, from, to, amount, hold)) = asked(&record.op) else {
            continue;
        };
        known.insert(id);
        let rows = journal.get(id).map(Vec::as_slice).unwrap_or(&[]);
        match record.outcome() {
            Verdict::Applied => {
                // The money moves as the answers say, whatever the journal has.
                let row = once(id, from, to, amount, rows, books.sides, found);
                if hold {
                    let fate = hold_fate(id, fates.get(id), found);
                    fate.moves(from, to, amount, &mut moves);
                    if let Some(row) = row {
                        fate.is_in(row, found);
                    }
                } else {
                    moves.post(from, to, amount);
                    if let Some(row) = row {
                        posted_at_once(row, found);
                    }
                }
            }
            Verdict::NotApplied if !rows.is_empty() => found.add(
                Check::RefusedNotApplied,
                format!(
                    "transfer {id} was answered {:?}, yet the journal has {rows:?}",
                    record.deciding()
                ),
            ),
            _ => {}
        }
    }
    for (id, rows) in &journal {
        if !known.contains(id) {
            found.add(
                Check::RefusedNotApplied,
                format!("transfer {id} is in the journal, though no client sent it: {rows:?}"),
            );
        }
    }
    moves
}

/// The one journal entry of an acknowledged transfer, as asked, in as many rows as it has sides.
fn once<'a>(
    id: &str,
    from: i64,
    to: i64,
    amount: i64,
    rows: &[&'a TransferRow],
    sides: i64,
    found: &mut Found,
) -> Option<&'a TransferRow> {
    match rows {
        [row] if (row.from, row.to, row.amount, row.copies) == (from, to, amount, sides) => {
            Some(row)
        }
        _ => {
            found.add(
                Check::AppliedOnce,
                format!("acknowledged transfer {id} ({amount} from {from} to {to}): the journal has {rows:?}, {sides} row(s) expected"),
            );
            None
        }
    }
}

fn posted_at_once(row: &TransferRow, found: &mut Found) {
    if row.status != "posted" || row.posted_amount.is_some_and(|a| a != row.amount) {
        found.add(
            Check::AppliedOnce,
            format!("transfer {} should be posted in full: {row:?}", row.id),
        );
    }
}

/// Where the answers left an acknowledged hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HoldState {
    Pending,
    Posted(i64),
    Voided,
}

impl HoldState {
    fn moves(self, from: i64, to: i64, amount: i64, moves: &mut Moves) {
        match self {
            HoldState::Pending => moves.hold(from, to, amount),
            HoldState::Posted(posted) => moves.post(from, to, posted),
            HoldState::Voided => {}
        }
    }

    /// The journal has the hold in this state (and posted by this amount).
    fn is_in(self, row: &TransferRow, found: &mut Found) {
        let (expected, amount) = match self {
            HoldState::Pending => ("pending", None),
            HoldState::Posted(posted) => ("posted", Some(posted)),
            HoldState::Voided => ("voided", None),
        };
        if row.status != expected {
            // A state nobody acknowledged was reached, or an acknowledged one was not.
            let check = if self == HoldState::Pending {
                Check::RefusedNotApplied
            } else {
                Check::AppliedOnce
            };
            found.add(
                check,
                format!(
                    "hold {}: the answers say {expected}, the journal says {}",
                    row.id, row.status
                ),
            );
        } else if row.posted_amount != amount {
            found.add(
                Check::AppliedOnce,
                format!(
                    "hold {}: posted {amount:?} by the answers, {:?} in the journal",
                    row.id, row.posted_amount
                ),
            );
        }
    }
}

/// One acknowledged hold: posted by its acknowledged post, voided by its acknowledged void
/// (not both), else pending.
fn hold_fate(id: &str, fate: Option<&Fate>, found: &mut Found) -> HoldState {
    let (posted, voided) = fate.map_or((None, false), |f| (f.posted, f.voided));
    if posted.is_some() && voided {
        found.add(
            Check::OneFatePerHold,
            format!("hold {id} was answered both posted and voided"),
        );
    }
    match (posted, voided) {
        (Some(amount), _) => HoldState::Posted(amount),
        (None, true) => HoldState::Voided,
        (None, false) => HoldState::Pending,
    }
}

/// Every customer balance, hold and pending credit is its opening plus what the answers moved,
/// and all balances (the system account's included) sum to zero.
pub fn money(opening: &Opening, books: &Books, moves: &Moves, found: &mut Found) {
    let of = |m: &BTreeMap<i64, i64>, a: i64| m.get(&a).copied().unwrap_or(0);
    for (&account, &cents) in &opening.cents {
        let Some(row) = books.accounts.get(&account) else {
            found.add(
                Check::MoneyConserved,
                format!("account {account} is missing"),
            );
            continue;
        };
        let expected = (
            cents + of(&moves.balance, account),
            of(&moves.held, account),
            of(&moves.pending_credits, account),
        );
        if (row.balance, row.held, row.pending_credits) != expected {
            found.add(
                Check::MoneyConserved,
                format!("account {account}: (balance, held, pending credits) {:?} in the database, {expected:?} by the answers", (row.balance, row.held, row.pending_credits)),
            );
        }
    }
    let total: i64 = books.accounts.values().map(|a| a.balance).sum();
    if total != 0 {
        found.add(
            Check::MoneyConserved,
            format!("the balances sum to {total}, not 0"),
        );
    }
}
