//! The audit on a Citus coordinator, where a read across shards has no common
//! snapshot: a multi-shard commit is a 2PC, and a query that spans workers can see one half.
//!
//! - **Per-shard invariants, exact.** Every check about one distribution value (a product's
//!   stock row against its reservations, movements, sales and fills; an account's balance,
//!   `held` and `pending_credits` against its own journal rows) runs as one query filtered by
//!   that value on every table: Citus routes it to the one shard group holding the value, where
//!   it is one statement, so it reads one snapshot. (The tests check the plan: one task.)
//! - **The cross-shard rule, per transfer.** Both sides of every transfer exist, sit on the
//!   accounts its `transfer_ids` row names, and agree. A one-shot read finds the suspects
//!   ([`suspect_transfers`]; it cannot tell a divergence from a 2PC in flight); each suspect is
//!   read, then re-read once every prepared transaction that held one of its shards right after
//!   the previous read has resolved (`pg_prepared_xacts` and their locks on every node: a
//!   half-visible commit always has its other half prepared, holding that half's shard), and
//!   it is a divergence only when two such reads find the same disagreement. A suspect with
//!   nothing in flight on its shards is re-read at once, whatever the bound; one whose 2PCs do
//!   not resolve within the bound is reported as unresolved, never as clean and never as a
//!   divergence.
//!
//! No global sum is read: with every account equal to its journal and every transfer's two
//! sides present and equal, the balances sum to zero and `held` sums to `pending_credits` by
//! construction, which is the single node's `TotalIsZero` / `PendingTotalsMatch` rule. The
//! same holds per currency: every account's rows are in its currency (checked with the
//! account, on its shard: `JournalInAccountCurrency`) and a transfer's two sides agree on
//! theirs (`SidesAgree`), so each transfer moves one currency between two accounts of it, and
//! each currency sums to zero on its own (`CurrencyTotalIsZero`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use serde::Serialize;

use super::sql;
use super::{AccountState, Divergence, LedgerDivergence, ProductState, MAX_DIVERGENCES};
use crate::error::Error;
use crate::operation::Operation;
use crate::store::retry::checkout;

/// Products or accounts listed per page (each is then checked on its own shard).
const PAGE: i64 = 500;
/// Most suspect transfers rechecked by one audit (the rest are reported as unresolved).
pub const MAX_SUSPECTS: i64 = 1_000;
/// Longest a recheck may wait for 2PCs to resolve ([`CitusAuditOptions::recheck_for`] is
/// capped to it).
pub const MAX_RECHECK: Duration = Duration::from_secs(600);
/// Default bound of the recheck: Citus resolves a prepared transaction in milliseconds, and
/// its recovery of an abandoned one (coordinator lost mid-commit) runs every minute.
pub const DEFAULT_RECHECK: Duration = Duration::from_secs(90);

/// How long the cross-shard recheck may wait.
#[derive(Debug, Clone, Copy)]
pub struct CitusAuditOptions {
    /// Bound on waiting for the 2PCs in flight; a suspect still unresolved then is reported
    /// in [`CitusAudit::unresolved`].
    pub recheck_for: Duration,
}

impl Default for CitusAuditOptions {
    fn default() -> Self {
        CitusAuditOptions {
            recheck_for: DEFAULT_RECHECK,
        }
    }
}

/// What the Citus audit found. Clean when all four are empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CitusAudit {
    /// Per product, read on its shard (the single node's invariants of [`ProductState`]).
    pub stock: Vec<Divergence>,
    /// Per account, read on its shard: balance, held and pending credits against its journal.
    pub ledger: Vec<LedgerDivergence>,
    /// Transfers whose sides disagree, confirmed by two reads with no 2PC in flight between.
    pub transfers: Vec<TransferDivergence>,
    /// Suspect transfers whose 2PCs did not resolve within the bound (or beyond
    /// [`MAX_SUSPECTS`]): neither clean nor a divergence; audit again.
    pub unresolved: Vec<String>,
}

impl CitusAudit {
    pub fn is_clean(&self) -> bool {
        self.stock.is_empty()
            && self.ledger.is_empty()
            && self.transfers.is_empty()
            && self.unresolved.is_empty()
    }
}

/// Which part of the double entry broke for one transfer id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferInvariant {
    /// Journal rows exist for an id that `transfer_ids` does not know.
    RoutedById,
    /// The debit side (on `from_account`'s shard) is missing.
    DebitSideExists,
    /// The credit side (on `to_account`'s shard) is missing.
    CreditSideExists,
    /// A side names other accounts than the id's row, or there are more than two sides.
    SidesMatchRoute,
    /// The two sides differ in amount, currency, kind, status, posted amount, the transfer a
    /// reversal names or what was reversed of it.
    SidesAgree,
}

/// One journal row of a transfer as stored on its account's shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Side {
    pub account_id: i64,
    pub from_account: i64,
    pub to_account: i64,
    pub amount: i64,
    pub kind: String,
    pub status: String,
    pub posted_amount: Option<i64>,
    pub currency: String,
    /// A reversal's original.
    pub reverses: Option<String>,
    /// What reversals moved back of it.
    pub reversed: i64,
}

/// Everything stored about one transfer id: its router row and its sides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TransferState {
    pub transfer_id: String,
    /// `(from_account, to_account)` from `transfer_ids`.
    pub route: Option<(i64, i64)>,
    /// Sorted by account.
    pub sides: Vec<Side>,
}

impl TransferState {
    /// The first broken rule, if any.
    pub fn problem(&self) -> Option<TransferInvariant> {
        let Some((from, to)) = self.route else {
            return Some(TransferInvariant::RoutedById);
        };
        let on = |account: i64| self.sides.iter().find(|s| s.account_id == account);
        let (Some(debit), Some(credit)) = (on(from), on(to)) else {
            return Some(if on(from).is_none() {
                TransferInvariant::DebitSideExists
            } else {
                TransferInvariant::CreditSideExists
            });
        };
        let routed = |s: &Side| s.from_account == from && s.to_account == to;
        if self.sides.len() != 2 || !routed(debit) || !routed(credit) {
            return Some(TransferInvariant::SidesMatchRoute);
        }
        let terms = |s: &Side| {
            (
                s.amount,
                s.kind.clone(),
                s.status.clone(),
                s.posted_amount,
                s.currency.clone(),
                s.reverses.clone(),
                s.reversed,
            )
        };
        (terms(debit) != terms(credit)).then_some(TransferInvariant::SidesAgree)
    }
}

/// A transfer whose double entry is broken, with what was read (twice, identically).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TransferDivergence {
    pub invariant: TransferInvariant,
    pub state: TransferState,
}

/// The full Citus audit: per-shard stock and account checks, then the per-transfer double
/// entry with its bounded recheck.
pub async fn audit(pool: &Pool, options: CitusAuditOptions) -> Result<CitusAudit, Error> {
    let stock = audit_stock(pool).await?;
    let ledger = audit_accounts(pool).await?;
    let (transfers, unresolved) = audit_transfers(pool, options).await?;
    Ok(CitusAudit {
        stock,
        ledger,
        transfers,
        unresolved,
    })
}

/// Every product checked on its own shard, one routed query each.
pub async fn audit_stock(pool: &Pool) -> Result<Vec<Divergence>, Error> {
    let mut out: Vec<Divergence> = divergent_products(pool)
        .await?
        .iter()
        .flat_map(ProductState::divergences)
        .collect();
    // One multi-shard statement: each shard joins its own products' rows and movements.
    let client = checkout(pool, Operation::AuditStock).await?;
    let movements = client
        .query(sql::MOVEMENT_AUDIT, &[&MAX_DIVERGENCES])
        .await?;
    super::add_movement_divergences(&mut out, &movements)?;
    out.sort_by_key(|d| d.product_id);
    out.truncate(MAX_DIVERGENCES as usize);
    Ok(out)
}

/// The divergent products (at most [`MAX_DIVERGENCES`], by id), each read on its own shard in
/// one routed query: exact per product, which is all a repair needs, since it re-reads each
/// product under its row lock before writing (`stock::repair`).
pub async fn divergent_products(pool: &Pool) -> Result<Vec<ProductState>, Error> {
    let client = checkout(pool, Operation::AuditStock).await?;
    // Routed whole to the product's shard group: one statement, one snapshot.
    let statement = client.prepare(sql::PRODUCT_STATE.citus()).await?;
    let mut out = Vec::new();
    let mut after = 0_i64;
    while out.len() < MAX_DIVERGENCES as usize {
        let ids = page(&client, sql::PRODUCT_PAGE, after).await?;
        for &id in &ids {
            if let Some(row) = client.query_opt(&statement, &[&id]).await? {
                let state = ProductState::from_row(&row)?;
                if !state.divergences().is_empty() {
                    out.push(state);
                }
            }
        }
        match ids.last() {
            Some(&last) if ids.len() as i64 == PAGE => after = last,
            _ => break,
        }
    }
    out.truncate(MAX_DIVERGENCES as usize);
    Ok(out)
}

/// Every account checked on its own shard, one routed query each, then every transfer's
/// reversal counters against its reversals, per side (each shard's part exact: see
/// [`sql::REVERSAL_AUDIT`]).
pub async fn audit_accounts(pool: &Pool) -> Result<Vec<LedgerDivergence>, Error> {
    let mut out: Vec<LedgerDivergence> = divergent_accounts(pool)
        .await?
        .iter()
        .flat_map(AccountState::divergences)
        .collect();
    let client = checkout(pool, Operation::AuditLedger).await?;
    let reversals = client
        .query(sql::REVERSAL_AUDIT.citus(), &[&MAX_DIVERGENCES])
        .await?;
    out.extend(super::reversal_divergences(&reversals)?);
    out.truncate(MAX_DIVERGENCES as usize);
    Ok(out)
}

/// The accounts whose counters differ from their own journal rows (at most
/// [`MAX_DIVERGENCES`], by id), each read on its shard in one routed query: exact per account,
/// which is all a repair needs, since it re-reads each account under its lock.
pub async fn divergent_accounts(pool: &Pool) -> Result<Vec<AccountState>, Error> {
    let client = checkout(pool, Operation::AuditLedger).await?;
    let statement = client.prepare(sql::ACCOUNT_STATE.citus()).await?;
    let mut out = Vec::new();
    let mut after = -1_i64;
    while out.len() < MAX_DIVERGENCES as usize {
        let ids = page(&client, sql::ACCOUNT_PAGE, after).await?;
        for &id in &ids {
            if let Some(row) = client.query_opt(&statement, &[&id]).await? {
                let state = AccountState::from_row(&row)?;
                if !state.divergences().is_empty() {
                    out.push(state);
                }
            }
        }
        match ids.last() {
            Some(&last) if ids.len() as i64 == PAGE => after = last,
            _ => break,
        }
    }
    out.truncate(MAX_DIVERGENCES as usize);
    Ok(out)
}

/// One page of distribution values above `after` (a multi-shard read: a value created
/// meanwhile may be missed, and is audited next time).
async fn page(
    client: &deadpool_postgres::Client,
    sql: &str,
    after: i64,
) -> Result<Vec<i64>, Error> {
    let rows = client.query(sql, &[&after, &PAGE]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The one-shot read of the double entry: the ids whose sides disagree *as read*, which
/// includes transfers whose 2PC was half-way through its commit. Not a verdict (the
/// [`audit_transfers`] recheck is); public so that tests can show what it alone would report.
pub async fn suspect_transfers(pool: &Pool) -> Result<Vec<String>, Error> {
    let client = checkout(pool, Operation::AuditLedger).await?;
    let rows = client.query(sql::SUSPECTS, &[&MAX_SUSPECTS]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The per-transfer double entry: suspects from one read, each confirmed or cleared by
/// re-reads, each taken once the 2PCs that were in flight on its shards right after the
/// previous one have resolved. Returns the divergences and the ids left unresolved when the
/// bound ran out.
pub async fn audit_transfers(
    pool: &Pool,
    options: CitusAuditOptions,
) -> Result<(Vec<TransferDivergence>, Vec<String>), Error> {
    let deadline = Instant::now() + options.recheck_for.min(MAX_RECHECK);
    let client = checkout(pool, Operation::AuditLedger).await?;
    let ids: Vec<String> = client
        .query(sql::SUSPECTS, &[&MAX_SUSPECTS])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut states = Vec::with_capacity(ids.len());
    for id in &ids {
        states.push(read_transfer(&client, id).await?);
    }
    let mut suspects = blockers(&client, states).await?;
    let mut divergences = Vec::new();
    let mut pause = Duration::from_millis(20);
    while !suspects.is_empty() {
        let current = in_flight(&client).await?;
        let (ready, waiting): (Vec<_>, Vec<_>) = suspects
            .into_iter()
            .partition(|s| s.blockers.iter().all(|b| !current.contains_key(b)));
        suspects = waiting;
        let mut reread = Vec::new();
        for suspect in &ready {
            let state = read_transfer(&client, &suspect.state.transfer_id).await?;
            match state.problem() {
                None => {}
                // The same disagreement twice, with every 2PC in flight on its shards after
                // the first read resolved in between: no commit in progress explains it.
                Some(invariant) if state == suspect.state => {
                    divergences.push(TransferDivergence { invariant, state })
                }
                Some(_) => reread.push(state),
            }
        }
        let progressed = !ready.is_empty();
        suspects.extend(blockers(&client, reread).await?);
        let now = Instant::now();
        if suspects.is_empty() || now >= deadline {
            break;
        }
        if progressed {
            pause = Duration::from_millis(20);
        } else {
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
    let unresolved = suspects.into_iter().map(|s| s.state.transfer_id).collect();
    Ok((divergences, unresolved))
}

/// A suspect transfer as last read, and the 2PCs (`node:gid`) to wait for before reading it
/// again.
struct Suspect {
    state: TransferState,
    blockers: BTreeSet<String>,
}

/// For each state just read: the 2PCs prepared right now that hold one of its shards (or may
/// hold anything). A 2PC whose half was visible to that read is either resolved by now or
/// still prepared, holding the shard of the half not yet visible: the journal shard of one of
/// the accounts (the route names both; if the route is the missing half, the id's shard).
async fn blockers(
    client: &deadpool_postgres::Client,
    states: Vec<TransferState>,
) -> Result<Vec<Suspect>, Error> {
    if states.is_empty() {
        return Ok(Vec::new());
    }
    let current = in_flight(client).await?;
    let mut out = Vec::with_capacity(states.len());
    for state in states {
        let mut accounts: BTreeSet<i64> = state.sides.iter().map(|s| s.account_id).collect();
        if let Some((from, to)) = state.route {
            accounts.extend([from, to]);
        }
        let accounts: Vec<i64> = accounts.into_iter().collect();
        let shards: BTreeSet<String> = client
            .query(sql::TRANSFER_SHARDS, &[&accounts, &state.transfer_id])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let blockers = current
            .iter()
            .filter(|(_, rels)| rels.as_ref().is_none_or(|r| !r.is_disjoint(&shards)))
            .map(|(key, _)| key.clone())
            .collect();
        out.push(Suspect { state, blockers });
    }
    Ok(out)
}

/// The 2PCs prepared on any node of this database right now, with the relations they hold
/// (`None`: unknown, may hold anything).
async fn in_flight(
    client: &deadpool_postgres::Client,
) -> Result<BTreeMap<String, Option<BTreeSet<String>>>, Error> {
    let rows = client.query(sql::IN_FLIGHT, &[]).await?;
    rows.iter()
        .map(|r| {
            let rels: Option<serde_json::Value> = r.try_get("rels")?;
            let rels = rels
                .map(|v| -> BTreeSet<String> {
                    v.as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|x| x.as_str().map(str::to_owned))
                        .collect()
                })
                .filter(|r| !r.is_empty());
            Ok((r.try_get("key")?, rels))
        })
        .collect()
}

/// Everything stored about `id`: its router row (routed by id) and its sides (every shard of
/// the journal, through its index on `id`).
async fn read_transfer(
    client: &deadpool_postgres::Client,
    id: &str,
) -> Result<TransferState, Error> {
    let route = client
        .query_opt(sql::TRANSFER_ROUTE, &[&id])
        .await?
        .map(|r| (r.get(0), r.get(1)));
    let rows = client.query(sql::TRANSFER_SIDES, &[&id]).await?;
    let sides = rows
        .iter()
        .map(|r| {
            Ok(Side {
                account_id: r.try_get(0)?,
                from_account: r.try_get(1)?,
                to_account: r.try_get(2)?,
                amount: r.try_get(3)?,
                kind: r.try_get(4)?,
                status: r.try_get(5)?,
                posted_amount: r.try_get(6)?,
                currency: r.try_get(7)?,
                reverses: r.try_get(8)?,
                reversed: r.try_get(9)?,
            })
        })
        .collect::<Result<_, Error>>()?;
    Ok(TransferState {
        transfer_id: id.to_owned(),
        route,
        sides,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(account_id: i64, amount: i64) -> Side {
        Side {
            account_id,
            from_account: 1,
            to_account: 2,
            amount,
            kind: "transfer".into(),
            currency: "EUR".into(),
            status: "posted".into(),
            posted_amount: None,
            reverses: None,
            reversed: 0,
        }
    }

    #[test]
    fn a_transfer_is_whole_with_both_equal_sides_on_its_accounts() {
        let state = |route, sides| TransferState {
            transfer_id: "t".into(),
            route,
            sides,
        };
        let whole = state(Some((1, 2)), vec![side(1, 5), side(2, 5)]);
        assert_eq!(whole.problem(), None);
        let cases = [
            (
                state(None, vec![side(1, 5), side(2, 5)]),
                TransferInvariant::RoutedById,
            ),
            (
                state(Some((1, 2)), vec![side(2, 5)]),
                TransferInvariant::DebitSideExists,
            ),
            (
                state(Some((1, 2)), vec![side(1, 5)]),
                TransferInvariant::CreditSideExists,
            ),
            (
                state(Some((1, 3)), vec![side(1, 5), side(3, 5)]),
                TransferInvariant::SidesMatchRoute,
            ),
            (
                state(Some((1, 2)), vec![side(1, 5), side(2, 6)]),
                TransferInvariant::SidesAgree,
            ),
        ];
        for (s, expected) in cases {
            assert_eq!(s.problem(), Some(expected), "{s:?}");
        }
    }
}
