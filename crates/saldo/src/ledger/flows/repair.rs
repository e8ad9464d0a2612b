//! Repair of account counters that drifted from the journal: bring each divergent account's
//! `balance`, `held` and `pending_credits` back to what its journal says, in two steps.
//!
//! [`plan`] reads the divergent accounts (the audit's snapshot on one node, each account on its
//! own shard on Citus) and says, per account, what it would write: `balance` ← its posted
//! credits minus its posted debits, `held` ← its live pending debits, `pending_credits` ← its
//! live pending credits. [`apply`] then takes each account alone: it locks the account row,
//! re-reads the account against its journal under that lock (every ledger write to an
//! account's journal rows holds this lock, so they cannot move now) and writes the journal's
//! values only when the drift is still the one planned; otherwise it leaves the account alone
//! and says so (`changed`). Each write is recorded in `account_repairs` (before, after, why):
//! the journal was right and stays as it was, the account is brought back to it, and the row
//! is the trace. (A journal row would not do: the journal is the truth the counters are
//! repaired to, and a repair moves no money.) [`repair`] plans, applies when asked, and
//! re-audits.
//!
//! What no account write can fix is reported, never written, each with why and `saldo audit`,
//! which shows it: an account whose journal puts it outside its limits (the schema refuses
//! the write), sums beyond 64 bits, and on Citus a transfer whose two sides disagree (the
//! double entry itself is broken: which side is right is for a person to decide), whose
//! accounts are left alone.
//!
//! Bounded: at most [`crate::audit::MAX_DIVERGENCES`] accounts per repair, one short
//! transaction each, one account row locked in each.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::audit::{self, citus, AccountState, LedgerAudit};
use crate::domain::AccountId;
use crate::error::Error;
use crate::ledger::rows::accounts;
use crate::ledger::types::Counters;
use crate::operation::Operation;
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::in_transaction;

/// The command that shows what a repair cannot fix.
pub const SHOWN_BY: &str = "saldo audit";

/// What became (or would become) of one account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AccountAction {
    /// Dry run: this is what `apply` would write.
    Planned,
    /// Written, with its `account_repairs` row.
    Applied,
    /// Left alone: the account drifted otherwise between the plan and the lock (run again).
    Changed,
    /// Left alone: no write can fix it (see the reason).
    Unrepairable,
}

/// One divergent account: its counters as planned from, what the journal says they should be,
/// and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccountRepair {
    pub account: AccountId,
    pub before: Counters,
    /// What the journal says (the counters as they are when it is unrepairable).
    pub after: Counters,
    pub action: AccountAction,
    /// Why it is unrepairable, and what to run to see it.
    pub reason: Option<String>,
}

impl AccountRepair {
    /// Old and new values: what the trace's reason and the CLI say.
    pub fn describe(&self) -> String {
        let (b, a) = (self.before, self.after);
        format!(
            "balance {} -> {}, held {} -> {}, pending credits {} -> {}",
            b.balance, a.balance, b.held, a.held, b.pending_credits, a.pending_credits
        )
    }
}

/// What no account write can fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unrepairable {
    /// What it is about: `transfer <id>`.
    pub subject: String,
    pub why: String,
    /// The command that shows it.
    pub shown_by: &'static str,
}

/// A whole ledger repair: every divergent account, what cannot be repaired and why, and what
/// the ledger audit says afterwards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerRepairReport {
    pub applied: bool,
    pub accounts: Vec<AccountRepair>,
    pub unrepairable: Vec<Unrepairable>,
    /// The ledger audit after the repair (dry run: as it stands).
    pub remaining: LedgerAudit,
}

/// What the journal says `state`'s counters should be, or why they cannot be written: the
/// schema's own checks (`held`, `pending_credits` ≥ 0, `balance − held ≥ min_balance`,
/// `balance + pending_credits ≤ max_balance`), decided here before anything is written.
pub(crate) fn target(state: &AccountState) -> Result<Counters, String> {
    if state.foreign_rows != 0 {
        // The journal itself is wrong: no counters can be brought back to it.
        return Err(format!(
            "its journal has {} rows in another currency than its own",
            state.foreign_rows
        ));
    }
    let fits = |v: i128| i64::try_from(v).ok();
    let (Some(balance), Some(held), Some(pending_credits)) = (
        fits(state.expected_balance),
        fits(state.expected_held),
        fits(state.expected_pending_credits),
    ) else {
        return Err("its journal sums beyond 64 bits".to_owned());
    };
    let after = Counters {
        balance,
        held,
        pending_credits,
    };
    if held < 0 || pending_credits < 0 {
        return Err("its journal's pending amounts sum below zero".to_owned());
    }
    if after == counters(state) {
        if let Some((expected, actual)) = state.entry_divergence() {
            // The counters are right; an entry is not, and rewriting counters cannot fix it.
            return Err(format!(
                "its counters agree with its journal but its latest entry does not say them \
                 (entry {expected}, account {actual}): an entry was written or changed around \
                 the engine"
            ));
        }
    }
    if let Some(min) = state.min_balance {
        if i128::from(balance) - i128::from(held) < i128::from(min) {
            return Err(format!(
                "its journal puts it below its minimum (balance {balance} - held {held} < \
                 min_balance {min})"
            ));
        }
    }
    if let Some(max) = state.max_balance {
        if i128::from(balance) + i128::from(pending_credits) > i128::from(max) {
            return Err(format!(
                "its journal puts it above its maximum (balance {balance} + pending credits \
                 {pending_credits} > max_balance {max})"
            ));
        }
    }
    Ok(after)
}

fn counters(state: &AccountState) -> Counters {
    Counters {
        balance: state.balance,
        held: state.held,
        pending_credits: state.pending_credits,
    }
}

/// The planned repair of one account, not yet applied.
fn planned(state: &AccountState) -> AccountRepair {
    let before = counters(state);
    match target(state) {
        Ok(after) => AccountRepair {
            account: state.account,
            before,
            after,
            action: AccountAction::Planned,
            reason: None,
        },
        Err(why) => unrepairable(state.account, before, why),
    }
}

fn unrepairable(account: AccountId, before: Counters, why: String) -> AccountRepair {
    AccountRepair {
        account,
        before,
        after: before,
        action: AccountAction::Unrepairable,
        reason: Some(format!("{why}; `{SHOWN_BY}` shows it")),
    }
}

/// What a repair would do: per divergent account, and what it cannot fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerPlan {
    pub accounts: Vec<AccountRepair>,
    pub unrepairable: Vec<Unrepairable>,
}

/// What a repair would change (read-only), and what it cannot fix. On Citus the double entry
/// is audited first: an account on a transfer whose sides disagree is left alone.
pub async fn plan(store: &Store) -> Result<LedgerPlan, Error> {
    let (layout, pool) = (store.layout(), &store.pool);
    let states = audit::divergent_accounts_of(pool, layout).await?;
    let broken = if store.is_citus() {
        citus::audit_transfers(pool, citus::CitusAuditOptions::default()).await?
    } else {
        (Vec::new(), Vec::new())
    };
    // The accounts each broken transfer names (its route and its sides), and why.
    let mut blocked: BTreeMap<i64, String> = BTreeMap::new();
    let mut problems = Vec::new();
    for d in &broken.0 {
        let id = &d.state.transfer_id;
        let why = format!("transfer {id}: {:?} (its two sides disagree)", d.invariant);
        let routed = d.state.route.into_iter().flat_map(|(f, t)| [f, t]);
        for account in routed.chain(d.state.sides.iter().map(|s| s.account_id)) {
            blocked.entry(account).or_insert_with(|| why.clone());
        }
        problems.push(Unrepairable {
            subject: format!("transfer {id}"),
            why: format!(
                "{:?}: its two sides disagree; which is right is for a person to decide",
                d.invariant
            ),
            shown_by: SHOWN_BY,
        });
    }
    for id in &broken.1 {
        problems.push(Unrepairable {
            subject: format!("transfer {id}"),
            why: "its 2PC did not resolve within the audit's bound: neither clean nor broken yet"
                .to_owned(),
            shown_by: SHOWN_BY,
        });
    }
    let accounts = states
        .iter()
        .map(|state| match blocked.get(&state.account.get()) {
            Some(why) => unrepairable(state.account, counters(state), why.clone()),
            None => planned(state),
        })
        .collect();
    Ok(LedgerPlan {
        accounts,
        unrepairable: problems,
    })
}

/// Applies a plan account by account (see the module header); returns each account's fate.
pub async fn apply(store: &Store, plan: &[AccountRepair]) -> Result<Vec<AccountRepair>, Error> {
    let mut out = Vec::with_capacity(plan.len());
    for planned in plan {
        let done = match planned.action {
            AccountAction::Planned => apply_one(store, planned).await?,
            _ => planned.clone(),
        };
        if done.action == AccountAction::Changed {
            tracing::warn!(account = %planned.account, "repair: the account changed during the repair; left alone");
        }
        out.push(done);
    }
    Ok(out)
}

async fn apply_one(store: &Store, planned: &AccountRepair) -> Result<AccountRepair, Error> {
    let writer = store.writer();
    in_transaction(
        &store.pool,
        &store.tx,
        Operation::Repair,
        |client| crate::write_tx!(client, writer => |tx| apply_locked(tx.clone(), planned)),
    )
    .await
}

/// Under the account's lock: the account against its journal again; written when its drift is
/// still the one planned.
async fn apply_locked(tx: Tx<'_>, planned: &AccountRepair) -> Result<AccountRepair, Error> {
    let left = |action| AccountRepair {
        action,
        ..planned.clone()
    };
    let id = planned.account;
    if accounts::lock(&tx, &[id]).await?.get(id).is_err() {
        return Ok(left(AccountAction::Changed));
    }
    let row = tx
        .query_one(&audit::sql::ACCOUNT_STATE, &[&id.get()])
        .await?;
    let state = AccountState::from_row(&row)?;
    let before = counters(&state);
    let after = match target(&state) {
        Ok(after) => after,
        Err(why) => return Ok(unrepairable(id, before, why)),
    };
    let drift = |c: Counters, t: Counters| {
        (
            c.balance.checked_sub(t.balance),
            c.held.checked_sub(t.held),
            c.pending_credits.checked_sub(t.pending_credits),
        )
    };
    if before == after || drift(before, after) != drift(planned.before, planned.after) {
        return Ok(left(AccountAction::Changed));
    }
    let done = AccountRepair {
        account: id,
        before,
        after,
        action: AccountAction::Applied,
        reason: None,
    };
    let reason = format!("repair: {} (journal)", done.describe());
    accounts::repair(&tx, id, before, after, &reason).await?;
    Ok(done)
}

/// Plans, applies when `apply_it`, and re-audits the ledger.
pub async fn repair(store: &Store, apply_it: bool) -> Result<LedgerRepairReport, Error> {
    let LedgerPlan {
        accounts,
        unrepairable,
    } = plan(store).await?;
    let accounts = if apply_it {
        apply(store, &accounts).await?
    } else {
        accounts
    };
    let remaining = audit::audit_ledger_of(&store.pool, store.layout()).await?;
    Ok(LedgerRepairReport {
        applied: apply_it,
        accounts,
        unrepairable,
        remaining,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(expected: (i128, i128, i128), min: Option<i64>, max: Option<i64>) -> AccountState {
        AccountState {
            account: AccountId::new(1).expect("id"),
            balance: 100,
            held: 35,
            pending_credits: 0,
            min_balance: min,
            max_balance: max,
            currency: Some(crate::ledger::currency::Currency::DEFAULT),
            foreign_rows: 0,
            expected_balance: expected.0,
            expected_held: expected.1,
            expected_pending_credits: expected.2,
            entry_seq: 0,
            latest_entry: None,
        }
    }

    #[test]
    fn the_journal_is_the_target_unless_the_schema_would_refuse_it() {
        let ok = target(&state((70, 30, 5), Some(0), Some(100))).expect("repairable");
        assert_eq!(
            ok,
            Counters {
                balance: 70,
                held: 30,
                pending_credits: 5
            }
        );
        // A credit line lets it go below zero, not below the line.
        assert!(target(&state((-20, 0, 0), Some(-50), None)).is_ok());
        let below = target(&state((20, 30, 0), Some(0), None)).expect_err("below");
        assert!(below.contains("below its minimum"), "{below}");
        let above = target(&state((90, 0, 20), Some(0), Some(100))).expect_err("above");
        assert!(above.contains("above its maximum"), "{above}");
        let huge = target(&state((i128::from(i64::MAX) + 1, 0, 0), None, None));
        assert!(huge.expect_err("too big").contains("64 bits"));
        // The system account has no limits.
        assert!(target(&state((-1_000_000, 0, 0), None, None)).is_ok());
    }

    #[test]
    fn an_unrepairable_account_says_why_and_where_to_look() {
        let p = planned(&state((20, 30, 0), Some(0), None));
        assert_eq!(p.action, AccountAction::Unrepairable);
        assert_eq!(p.after, p.before, "nothing would be written");
        assert!(p.reason.expect("why").ends_with("`saldo audit` shows it"));
    }
}
