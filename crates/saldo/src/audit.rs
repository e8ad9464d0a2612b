//! The divergence audit: it must come back empty. For every product it checks
//! - `reserved = Σ active reservations` (their allocated units: quantity − backordered),
//! - `available + reserved = last count + adjustments since − confirmed since the count − sold
//!   directly since the count` (direct sales, `stock::sales`, take from `available` only; a
//!   confirm sells the allocated units, and a backorder of a confirmed reservation filled
//!   since the count was sold at its fill) `+ returned since the count` (`stock::returns`: confirmed
//!   units brought back into `available`) `± moved into or out of available since the count`
//!   (`stock::moves`: `move` movements), and, for backorders (`stock::backorders`),
//! - `backordered = Σ live reservations' backordered`, never above `backorder_limit`, and
//! - filled in arrival order: per product, the fills in the order they were written never go
//!   back to an older arrival, and no live backorder is older than one that got a fill, and,
//!   for the non-sellable states (migration V21),
//! - each state (`damaged`, `safety_stock`, `incoming`) = Σ moves into it − Σ moves out of it
//!   plus Σ returns into it (never below zero: the table's CHECKs), and a located product's
//!   states are the sums of its locations'.
//!
//! [`audit_ledger`] checks the ledger the same way: all balances sum to zero and all `held`
//! equal all `pending_credits` (the double entry, for posted and pending amounts separately),
//! each balance equals its posted credits minus its posted debits in the transfers journal, and
//! each `held` / `pending_credits` equals the sum of its live pending debits / credits. With
//! currencies (migration V12): every currency sums to zero on its own (its accounts' balances
//! and the system account's position in it, from the journal), its `held` equals its
//! `pending_credits`, and every journal row is in its accounts' currency.
//!
//! Each audit reads one consistent snapshot (REPEATABLE READ, read only). A divergence means some
//! path wrote stock or balances without going through the engine.
//!
//! On a Citus coordinator there is no such snapshot across shards: [`citus`] audits there.
//! Every statement of both is in [`sql`]; [`audit_ledger_of`] and [`audit_stock_of`] pick the
//! audit of a database's layout.

use deadpool_postgres::Pool;
use serde::Serialize;

use crate::domain::{AccountId, ProductId, TransferId};
use crate::error::Error;
use crate::ledger::currency::Currency;
use crate::ledger::types::Counters;
use crate::operation::Operation;
use crate::store::retry::checkout;
use crate::store::schema::Layout;

pub mod citus;
pub mod sql;

/// Most divergences returned by one audit.
pub const MAX_DIVERGENCES: i64 = 1_000;

/// Which invariant broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Invariant {
    /// `reserved` differs from the sum of active reservations.
    ReservedMatchesActive,
    /// `available + reserved` differs from what the history says is on hand.
    OnHandMatchesHistory,
    /// `backordered` differs from the sum of live reservations' backordered units.
    BackorderedMatchesLive,
    /// `backordered` is above `backorder_limit` (expected: the limit).
    BackorderedWithinLimit,
    /// Fills out of arrival order (expected 0, actual how many): a fill went back to an older
    /// arrival than the fill before it, or a live backorder is older than one that got a fill.
    FilledInArrivalOrder,
    /// A product stocked per location: `available` differs from the sum of its locations'.
    LocationsSumToAvailable,
    /// A product stocked per location: `reserved` differs from the sum of its locations'.
    LocationsSumToReserved,
    /// A location's `reserved` differs from the active allocations at it (summed over the
    /// product's locations that diverge).
    LocationReservedMatchesAllocations,
    /// An allocated reservation's allocations do not add up to its quantity (summed over the
    /// product's rows that diverge).
    AllocationsMatchQuantity,
    /// The product's latest movement (migration V22, the one at its row's version) does not say
    /// its counters: a movement or a row written around the engine. `expected` is the
    /// movement's value and `actual` the row's, for the first of seq (-1: no movement at the
    /// version), available, reserved and backordered that differs. Reported only for a product
    /// whose other invariants hold (a repair of those writes its own `repair` movement).
    LatestMovementMatchesCounters,
    /// `damaged` differs from its moves and returns: Σ moved in − Σ moved out + Σ returned.
    DamagedMatchesMoves,
    /// `safety_stock` differs from its moves and returns.
    SafetyStockMatchesMoves,
    /// `incoming` differs from its moves and returns.
    IncomingMatchesMoves,
    /// A product stocked per location: a state differs from the sum of its locations' (the
    /// three states' totals).
    LocationsSumToStates,
}

/// One broken invariant of one product.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Divergence {
    pub product_id: ProductId,
    pub invariant: Invariant,
    pub expected: i64,
    pub actual: i64,
}

/// The divergence of a row of [`sql::MOVEMENT_AUDIT`].
fn movement_divergence(r: &tokio_postgres::Row) -> Result<Divergence, Error> {
    let product_id = ProductId::new(r.try_get("product_id")?)?;
    let version: i64 = r.try_get("version")?;
    let (expected, actual) = match r.try_get::<_, Option<i64>>("seq")? {
        None => (-1, version),
        Some(_) => [
            ("available_after", "available"),
            ("reserved_after", "reserved"),
            ("backordered_after", "backordered"),
        ]
        .into_iter()
        .map(|(m, s)| Ok((r.try_get::<_, i64>(m)?, r.try_get::<_, i64>(s)?)))
        .collect::<Result<Vec<_>, Error>>()?
        .into_iter()
        .find(|(e, a)| e != a)
        .unwrap_or((version, version)),
    };
    Ok(Divergence {
        product_id,
        invariant: Invariant::LatestMovementMatchesCounters,
        expected,
        actual,
    })
}

/// The movement divergences of `rows` for products not already in `out` (see
/// [`Invariant::LatestMovementMatchesCounters`]).
fn add_movement_divergences(
    out: &mut Vec<Divergence>,
    rows: &[tokio_postgres::Row],
) -> Result<(), Error> {
    let others: std::collections::HashSet<ProductId> = out.iter().map(|d| d.product_id).collect();
    for r in rows {
        let d = movement_divergence(r)?;
        if !others.contains(&d.product_id) {
            out.push(d);
        }
    }
    Ok(())
}

fn backorder_divergences(r: &tokio_postgres::Row) -> Result<Vec<Divergence>, Error> {
    let product_id = ProductId::new(r.try_get("product_id")?)?;
    let backordered: i64 = r.try_get("backordered")?;
    let limit: i64 = r.try_get("backorder_limit")?;
    let out_of_order: i64 = r.try_get("out_of_order")?;
    let mut out = Vec::new();
    let mut check = |invariant, expected: i64, actual: i64, broken: bool| {
        if broken {
            out.push(Divergence {
                product_id,
                invariant,
                expected,
                actual,
            });
        }
    };
    check(
        Invariant::BackorderedWithinLimit,
        limit,
        backordered,
        backordered > limit,
    );
    check(
        Invariant::FilledInArrivalOrder,
        0,
        out_of_order,
        out_of_order > 0,
    );
    Ok(out)
}

/// One consistent, read-only view of the database for an audit: every invariant of one audit is
/// checked against the same snapshot, whatever commits meanwhile.
async fn snapshot(
    client: &mut deadpool_postgres::Client,
) -> Result<deadpool_postgres::Transaction<'_>, Error> {
    Ok(client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?)
}

/// One product's row and what its reservations and history say it should hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProductState {
    pub product_id: ProductId,
    pub available: i64,
    pub reserved: i64,
    pub version: i64,
    /// Σ active reservations: what `reserved` should be.
    pub active_reserved: i64,
    pub backordered: i64,
    pub backorder_limit: i64,
    /// Σ live reservations' backorders: what `backordered` should be.
    pub live_backordered: i64,
    /// last count + adjustments − confirmed − sold since the count: what `available +
    /// reserved` should be.
    pub expected_on_hand: i64,
    /// The non-sellable states and what their moves and returns say they should hold.
    pub damaged: i64,
    pub expected_damaged: i64,
    pub safety_stock: i64,
    pub expected_safety_stock: i64,
    pub incoming: i64,
    pub expected_incoming: i64,
}

impl ProductState {
    pub(crate) fn from_row(r: &tokio_postgres::Row) -> Result<ProductState, Error> {
        Ok(ProductState {
            product_id: ProductId::new(r.try_get("product_id")?)?,
            available: r.try_get("available")?,
            reserved: r.try_get("reserved")?,
            version: r.try_get("version")?,
            active_reserved: r.try_get("active_reserved")?,
            backordered: r.try_get("backordered")?,
            backorder_limit: r.try_get("backorder_limit")?,
            live_backordered: r.try_get("live_backordered")?,
            expected_on_hand: r.try_get("expected_on_hand")?,
            damaged: r.try_get("damaged")?,
            expected_damaged: r.try_get("expected_damaged")?,
            safety_stock: r.try_get("safety_stock")?,
            expected_safety_stock: r.try_get("expected_safety_stock")?,
            incoming: r.try_get("incoming")?,
            expected_incoming: r.try_get("expected_incoming")?,
        })
    }

    /// The broken invariants, if any.
    pub fn divergences(&self) -> Vec<Divergence> {
        let mut out = Vec::new();
        if self.reserved != self.active_reserved {
            out.push(Divergence {
                product_id: self.product_id,
                invariant: Invariant::ReservedMatchesActive,
                expected: self.active_reserved,
                actual: self.reserved,
            });
        }
        if self.backordered != self.live_backordered {
            out.push(Divergence {
                product_id: self.product_id,
                invariant: Invariant::BackorderedMatchesLive,
                expected: self.live_backordered,
                actual: self.backordered,
            });
        }
        let on_hand = self.available + self.reserved;
        if on_hand != self.expected_on_hand {
            out.push(Divergence {
                product_id: self.product_id,
                invariant: Invariant::OnHandMatchesHistory,
                expected: self.expected_on_hand,
                actual: on_hand,
            });
        }
        let states = [
            (
                Invariant::DamagedMatchesMoves,
                self.expected_damaged,
                self.damaged,
            ),
            (
                Invariant::SafetyStockMatchesMoves,
                self.expected_safety_stock,
                self.safety_stock,
            ),
            (
                Invariant::IncomingMatchesMoves,
                self.expected_incoming,
                self.incoming,
            ),
        ];
        for (invariant, expected, actual) in states {
            if expected != actual {
                out.push(Divergence {
                    product_id: self.product_id,
                    invariant,
                    expected,
                    actual,
                });
            }
        }
        out
    }
}

/// The products that diverge (at most [`MAX_DIVERGENCES`]), read in one snapshot: what the
/// audit reports and what a repair plans from. A product stocked per location whose own row
/// agrees with its history but whose locations do not is one of them (its state read in the
/// same snapshot), so a repair sees it too.
pub async fn divergent_products(pool: &Pool) -> Result<Vec<ProductState>, Error> {
    let mut client = checkout(pool, Operation::AuditStock).await?;
    let tx = snapshot(&mut client).await?;
    let all: Option<i64> = None;
    let rows = tx
        .query(sql::STOCK_AUDIT, &[&all, &MAX_DIVERGENCES])
        .await?;
    let mut states = rows
        .iter()
        .map(ProductState::from_row)
        .collect::<Result<Vec<_>, Error>>()?;
    let mut located: Vec<i64> = Vec::new();
    for r in tx.query(sql::LOCATION_AUDIT, &[&MAX_DIVERGENCES]).await? {
        let id: i64 = r.try_get("product_id")?;
        if !located.contains(&id) && !states.iter().any(|s| s.product_id.get() == id) {
            located.push(id);
        }
    }
    for id in located {
        let row = tx
            .query_one(sql::PRODUCT_STATE.single(), &[&Some(id)])
            .await?;
        states.push(ProductState::from_row(&row)?);
    }
    tx.commit().await?;
    states.sort_by_key(|s| s.product_id);
    states.truncate(MAX_DIVERGENCES as usize);
    Ok(states)
}

/// The stock audit of a database of `layout`: [`audit_stock`] in one snapshot on one node,
/// per product on its own shard group on Citus ([`citus::audit_stock`]).
pub async fn audit_stock_of(pool: &Pool, layout: Layout) -> Result<Vec<Divergence>, Error> {
    match layout {
        Layout::Single => audit_stock(pool).await,
        Layout::Citus => citus::audit_stock(pool).await,
    }
}

/// The divergent products of a database of `layout` ([`divergent_products`], or
/// [`citus::divergent_products`] on Citus).
pub async fn divergent_products_of(
    pool: &Pool,
    layout: Layout,
) -> Result<Vec<ProductState>, Error> {
    match layout {
        Layout::Single => divergent_products(pool).await,
        Layout::Citus => citus::divergent_products(pool).await,
    }
}

/// Runs the stock audit; an empty answer means every product is consistent with its history,
/// its backorders and (stocked per location) its locations and allocations. All three queries
/// read one snapshot.
pub async fn audit_stock(pool: &Pool) -> Result<Vec<Divergence>, Error> {
    let mut client = checkout(pool, Operation::AuditStock).await?;
    let tx = snapshot(&mut client).await?;
    let all: Option<i64> = None;
    let states = tx
        .query(sql::STOCK_AUDIT, &[&all, &MAX_DIVERGENCES])
        .await?;
    let backorders = tx.query(sql::BACKORDER_AUDIT, &[&MAX_DIVERGENCES]).await?;
    let locations = tx.query(sql::LOCATION_AUDIT, &[&MAX_DIVERGENCES]).await?;
    let movements = tx.query(sql::MOVEMENT_AUDIT, &[&MAX_DIVERGENCES]).await?;
    tx.commit().await?;
    let mut out = Vec::new();
    for r in &states {
        out.extend(ProductState::from_row(r)?.divergences());
    }
    for r in &backorders {
        out.extend(backorder_divergences(r)?);
    }
    for r in &locations {
        let invariant = match r.try_get::<_, &str>("invariant")? {
            "available" => Invariant::LocationsSumToAvailable,
            "reserved" => Invariant::LocationsSumToReserved,
            "states" => Invariant::LocationsSumToStates,
            "location_reserved" => Invariant::LocationReservedMatchesAllocations,
            _ => Invariant::AllocationsMatchQuantity,
        };
        out.push(Divergence {
            product_id: ProductId::new(r.try_get("product_id")?)?,
            invariant,
            expected: r.try_get("expected")?,
            actual: r.try_get("actual")?,
        });
    }
    add_movement_divergences(&mut out, &movements)?;
    out.sort_by_key(|d| d.product_id);
    out.truncate(MAX_DIVERGENCES as usize);
    Ok(out)
}

/// Which ledger invariant broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LedgerInvariant {
    /// The sum of all balances, the system account included, is not zero: money was created or
    /// destroyed outside the double entry.
    TotalIsZero,
    /// An account's balance differs from its credits minus its debits in the journal (every
    /// account, the system one included, starts at zero; opening balances are journal rows).
    /// Only posted transfers count, with what they posted.
    BalanceMatchesJournal,
    /// In one currency (`currency`), the sum of its accounts' balances and the system account's
    /// position in it is not zero: money crossed currencies outside an exchange's legs.
    CurrencyTotalIsZero,
    /// In one currency (`currency`), the sum of `held` differs from the sum of
    /// `pending_credits`: a pending amount has one side only (or crossed currencies).
    PendingTotalsMatch,
    /// An account has journal rows in another currency than its own (expected 0, actual how
    /// many; `currency` is the account's).
    JournalInAccountCurrency,
    /// An account's `held` differs from the sum of its live pending debits.
    HeldMatchesPending,
    /// An account's `pending_credits` differs from the sum of its live pending credits.
    PendingCreditsMatchPending,
    /// An account whose counters agree with its journal has a latest entry (migration V20)
    /// that does not say them: an entry written, changed or removed around the engine.
    /// `expected` is the entry's value and `actual` the account's, for the first of seq
    /// (`entry_seq` against the largest seq found, 0 for none), balance, held and pending
    /// credits that differs. Reported only when the counters agree with the journal: counters
    /// that drifted are that drift (a repair writes its entry).
    LatestEntryMatchesCounters,
    /// A transfer's `reversed` differs from the sum of the reversals that name it (`expected`
    /// is that sum, `actual` the transfer's counter; `transfer` names it).
    ReversedMatchesReversals,
    /// A transfer's `reversals` differs from how many reversals name it.
    ReversalsMatchCount,
    /// Reversals name a transfer that is not there (`expected` how many, `actual` 0).
    ReversalOriginalExists,
}

/// One broken ledger invariant; `account` is `None` for a total; `currency` names the currency
/// of a per-currency total, and the account's of [`LedgerInvariant::JournalInAccountCurrency`];
/// `transfer` names the transfer of a reversal invariant (on Citus with the `account` of the
/// side found wrong).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerDivergence {
    pub account: Option<AccountId>,
    pub invariant: LedgerInvariant,
    pub expected: i64,
    pub actual: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<Currency>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer: Option<TransferId>,
}

/// A numeric sum read as text, as an `i128` (exact: a sum of bigints over any table saldo can
/// hold fits), saturated when it does not parse.
fn sum_i128(row: &tokio_postgres::Row, column: &str) -> Result<i128, Error> {
    let text: String = row.try_get(column)?;
    Ok(text.parse::<i128>().unwrap_or(i128::MAX))
}

/// A sum for the report, saturated to `i64`: a sum beyond `i64` is a divergence whatever its
/// exact value.
fn saturated(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// One account's counters and limits, and what its journal says the counters should be: the
/// audit reports where they differ, the repair writes what the journal says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AccountState {
    pub account: AccountId,
    pub balance: i64,
    pub held: i64,
    pub pending_credits: i64,
    pub min_balance: Option<i64>,
    pub max_balance: Option<i64>,
    /// `None` for the system account.
    pub currency: Option<Currency>,
    /// How many of its journal rows are in another currency than its own (0 when sound).
    pub foreign_rows: i64,
    /// Its posted credits minus its posted debits.
    pub expected_balance: i128,
    /// The sum of its live pending debits.
    pub expected_held: i128,
    /// The sum of its live pending credits.
    pub expected_pending_credits: i128,
    /// The seq of its latest entry as the account row says (0: none yet).
    pub entry_seq: i64,
    /// Its latest entry: its seq and the counters it says (`None`: it has none).
    pub latest_entry: Option<(i64, Counters)>,
}

impl AccountState {
    /// From a row with the account-state columns ([`sql::ACCOUNT_STATE`], [`sql::LEDGER_AUDIT`]).
    pub(crate) fn from_row(r: &tokio_postgres::Row) -> Result<AccountState, Error> {
        let exact = |column| sum_i128(r, column).map(saturated);
        Ok(AccountState {
            account: crate::ledger::types::account_from_db(r.try_get("id")?)?,
            balance: exact("balance")?,
            held: exact("held")?,
            pending_credits: exact("pending_credits")?,
            min_balance: r.try_get("min_balance")?,
            max_balance: r.try_get("max_balance")?,
            currency: r
                .try_get::<_, Option<String>>("currency")?
                .map(|c| crate::ledger::types::currency_from_db(&c))
                .transpose()?,
            foreign_rows: r.try_get("foreign_rows")?,
            expected_balance: sum_i128(r, "expected")?,
            expected_held: sum_i128(r, "expected_held")?,
            expected_pending_credits: sum_i128(r, "expected_pending_credits")?,
            entry_seq: r.try_get("entry_seq")?,
            latest_entry: match r.try_get::<_, Option<i64>>("latest_seq")? {
                None => None,
                Some(seq) => Some((
                    seq,
                    Counters {
                        balance: r.try_get("latest_balance")?,
                        held: r.try_get("latest_held")?,
                        pending_credits: r.try_get("latest_pending_credits")?,
                    },
                )),
            },
        })
    }

    /// [`LedgerInvariant::LatestEntryMatchesCounters`]: (expected, actual) of the first that
    /// differs, if any. An account with no entry and `entry_seq` 0 has no statement yet (a row
    /// written around the engine before V20's time): nothing to compare.
    pub fn entry_divergence(&self) -> Option<(i64, i64)> {
        let Some((seq, e)) = self.latest_entry else {
            return (self.entry_seq != 0).then_some((0, self.entry_seq));
        };
        [
            (seq, self.entry_seq),
            (e.balance, self.balance),
            (e.held, self.held),
            (e.pending_credits, self.pending_credits),
        ]
        .into_iter()
        .find(|(expected, actual)| expected != actual)
    }

    /// The broken invariants, if any.
    pub fn divergences(&self) -> Vec<LedgerDivergence> {
        let foreign = (self.foreign_rows != 0).then_some(LedgerDivergence {
            account: Some(self.account),
            invariant: LedgerInvariant::JournalInAccountCurrency,
            expected: 0,
            actual: self.foreign_rows,
            currency: self.currency,
            transfer: None,
        });
        let journal = [
            (
                LedgerInvariant::BalanceMatchesJournal,
                self.balance,
                self.expected_balance,
            ),
            (
                LedgerInvariant::HeldMatchesPending,
                self.held,
                self.expected_held,
            ),
            (
                LedgerInvariant::PendingCreditsMatchPending,
                self.pending_credits,
                self.expected_pending_credits,
            ),
        ]
        .into_iter()
        .filter(|(_, actual, expected)| i128::from(*actual) != *expected)
        .map(|(invariant, actual, expected)| LedgerDivergence {
            account: Some(self.account),
            invariant,
            expected: saturated(expected),
            actual,
            currency: None,
            transfer: None,
        })
        .chain(foreign)
        .collect::<Vec<_>>();
        if !journal.is_empty() {
            return journal;
        }
        self.entry_divergence()
            .map(|(expected, actual)| LedgerDivergence {
                account: Some(self.account),
                invariant: LedgerInvariant::LatestEntryMatchesCounters,
                expected,
                actual,
                currency: None,
                transfer: None,
            })
            .into_iter()
            .collect()
    }
}

/// The ledger audit of one database, whatever its layout: every finding of
/// [`audit_ledger`] on one node, of [`citus::audit`]'s ledger parts on Citus.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LedgerAudit {
    /// Per account (and, on one node, the totals).
    pub accounts: Vec<LedgerDivergence>,
    /// Citus: transfers whose two sides disagree.
    pub transfers: Vec<citus::TransferDivergence>,
    /// Citus: suspect transfers whose 2PCs did not resolve within the bound (audit again).
    pub unresolved: Vec<String>,
}

impl LedgerAudit {
    pub fn is_clean(&self) -> bool {
        self.accounts.is_empty() && self.transfers.is_empty() && self.unresolved.is_empty()
    }

    /// Every finding, one per entry.
    pub fn findings(&self) -> impl Iterator<Item = Finding> + '_ {
        let accounts = self.accounts.iter().cloned().map(Finding::Ledger);
        let transfers = self.transfers.iter().cloned().map(Finding::Transfer);
        let unresolved = self.unresolved.iter().cloned().map(Finding::Unresolved);
        accounts.chain(transfers).chain(unresolved)
    }
}

/// One thing an audit found, stock or ledger: what a repair reports as remaining.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Finding {
    Product(Divergence),
    Ledger(LedgerDivergence),
    /// Citus: a transfer whose two sides disagree.
    Transfer(citus::TransferDivergence),
    /// Citus: a transfer whose 2PC did not resolve within the audit's bound: neither clean nor
    /// a divergence.
    Unresolved(String),
}

/// The ledger audit of a database of `layout`.
pub async fn audit_ledger_of(pool: &Pool, layout: Layout) -> Result<LedgerAudit, Error> {
    match layout {
        Layout::Single => Ok(LedgerAudit {
            accounts: audit_ledger(pool).await?,
            ..LedgerAudit::default()
        }),
        Layout::Citus => {
            let accounts = citus::audit_accounts(pool).await?;
            let options = citus::CitusAuditOptions::default();
            let (transfers, unresolved) = citus::audit_transfers(pool, options).await?;
            Ok(LedgerAudit {
                accounts,
                transfers,
                unresolved,
            })
        }
    }
}

/// The accounts that diverge from their journal (at most [`MAX_DIVERGENCES`]), in one snapshot
/// on one node, each on its own shard on Citus: what a ledger repair plans from.
pub async fn divergent_accounts_of(
    pool: &Pool,
    layout: Layout,
) -> Result<Vec<AccountState>, Error> {
    match layout {
        Layout::Single => {
            let mut client = checkout(pool, Operation::AuditLedger).await?;
            let tx = snapshot(&mut client).await?;
            let rows = tx.query(sql::LEDGER_AUDIT, &[&MAX_DIVERGENCES]).await?;
            tx.commit().await?;
            rows.iter().map(AccountState::from_row).collect()
        }
        Layout::Citus => citus::divergent_accounts(pool).await,
    }
}

/// One currency's totals ([`sql::LEDGER_CURRENCY_TOTALS`]): its sum with the system account's
/// position in it is zero, its `held` equals its `pending_credits`.
fn currency_totals(r: &tokio_postgres::Row) -> Result<Vec<LedgerDivergence>, Error> {
    let currency = crate::ledger::types::currency_from_db(&r.try_get::<_, String>("currency")?)?;
    let total = saturated(sum_i128(r, "total")?);
    let (held, credits) = (
        saturated(sum_i128(r, "held")?),
        saturated(sum_i128(r, "pending_credits")?),
    );
    let total = (total != 0).then_some((LedgerInvariant::CurrencyTotalIsZero, 0, total));
    let pending = (held != credits).then_some((LedgerInvariant::PendingTotalsMatch, credits, held));
    Ok([total, pending]
        .into_iter()
        .flatten()
        .map(|(invariant, expected, actual)| LedgerDivergence {
            account: None,
            invariant,
            expected,
            actual,
            currency: Some(currency),
            transfer: None,
        })
        .collect())
}

/// The reversal invariants broken in the rows of [`sql::REVERSAL_AUDIT`]: per transfer (per
/// side on Citus), its `reversed` against the sum of its reversals, its `reversals` against
/// their count, or reversals naming a transfer that is not there.
pub(crate) fn reversal_divergences(
    rows: &[tokio_postgres::Row],
) -> Result<Vec<LedgerDivergence>, Error> {
    let mut out = Vec::new();
    for r in rows {
        let transfer = TransferId::new(r.try_get::<_, String>("transfer_id")?)?;
        let account = r
            .try_get::<_, Option<i64>>("account_id")?
            .map(AccountId::new)
            .transpose()?;
        let expected_reversed = saturated(sum_i128(r, "expected_reversed")?);
        let expected_reversals: i64 = r.try_get("expected_reversals")?;
        // An absent original is that finding alone: it has no counters to compare.
        let found = match r.try_get::<_, Option<String>>("t_id")? {
            None => vec![(
                LedgerInvariant::ReversalOriginalExists,
                expected_reversals,
                0,
            )],
            Some(_) => vec![
                (
                    LedgerInvariant::ReversedMatchesReversals,
                    expected_reversed,
                    r.try_get::<_, i64>("reversed")?,
                ),
                (
                    LedgerInvariant::ReversalsMatchCount,
                    expected_reversals,
                    r.try_get::<_, i64>("reversals")?,
                ),
            ],
        };
        out.extend(
            found
                .into_iter()
                .filter(|(_, expected, actual)| expected != actual)
                .map(|(invariant, expected, actual)| LedgerDivergence {
                    account,
                    invariant,
                    expected,
                    actual,
                    currency: None,
                    transfer: Some(transfer.clone()),
                }),
        );
    }
    Ok(out)
}

/// Runs the ledger audit in one REPEATABLE READ read-only snapshot; empty means the total is
/// zero and every balance equals its journal.
pub async fn audit_ledger(pool: &Pool) -> Result<Vec<LedgerDivergence>, Error> {
    let mut client = checkout(pool, Operation::AuditLedger).await?;
    let tx = snapshot(&mut client).await?;
    let totals = tx.query_one(sql::LEDGER_TOTAL, &[]).await?;
    let currencies = tx.query(sql::LEDGER_CURRENCY_TOTALS, &[]).await?;
    let rows = tx.query(sql::LEDGER_AUDIT, &[&MAX_DIVERGENCES]).await?;
    let reversals = tx
        .query(sql::REVERSAL_AUDIT.single(), &[&MAX_DIVERGENCES])
        .await?;
    tx.commit().await?;
    let mut out = Vec::new();
    let total = saturated(sum_i128(&totals, "total")?);
    if total != 0 {
        out.push(LedgerDivergence {
            account: None,
            invariant: LedgerInvariant::TotalIsZero,
            expected: 0,
            actual: total,
            currency: None,
            transfer: None,
        });
    }
    for r in &currencies {
        out.extend(currency_totals(r)?);
    }
    for r in &rows {
        out.extend(AccountState::from_row(r)?.divergences());
    }
    out.extend(reversal_divergences(&reversals)?);
    out.truncate(MAX_DIVERGENCES as usize);
    Ok(out)
}
