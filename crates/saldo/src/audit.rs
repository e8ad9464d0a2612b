//! The divergence audit (seed 000): it must come back empty. For every product it checks
//! - `reserved = Σ active reservations`, and
//! - `available + reserved = last count + adjustments since − confirmed since the count − sold
//!   directly since the count` (direct sales, `stock::sales`, take from `available` only).
//!
//! [`audit_ledger`] checks the ledger the same way: all balances sum to zero, and each equals
//! its credits minus its debits in the transfers journal.
//!
//! Each audit reads one consistent snapshot (REPEATABLE READ, read only). A divergence means some
//! path wrote stock or balances without going through the engine.

use deadpool_postgres::Pool;
use serde::Serialize;

use crate::domain::{AccountId, ProductId};
use crate::error::Error;
use crate::retry::checkout;

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
}

/// One broken invariant of one product.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Divergence {
    pub product_id: ProductId,
    pub invariant: Invariant,
    pub expected: i64,
    pub actual: i64,
}

const STOCK_AUDIT: &str = "
WITH last_count AS (
    SELECT DISTINCT ON (product_id) product_id, id, quantity, created_at
      FROM stock_movements WHERE kind = 'count'
     ORDER BY product_id, id DESC),
adjusted AS (
    SELECT m.product_id, sum(m.quantity)::bigint AS delta
      FROM stock_movements m JOIN last_count c USING (product_id)
     WHERE m.kind = 'adjustment' AND m.id > c.id
     GROUP BY m.product_id),
confirmed AS (
    SELECT r.product_id, sum(r.quantity)::bigint AS quantity
      FROM reservations r JOIN last_count c USING (product_id)
     WHERE r.status = 'confirmed' AND r.settled_at > c.created_at
     GROUP BY r.product_id),
sold AS (
    SELECT i.product_id, sum(i.quantity)::bigint AS quantity
      FROM sale_items i JOIN last_count c USING (product_id)
     WHERE i.sold_at > c.created_at
     GROUP BY i.product_id),
active AS (
    SELECT product_id, sum(quantity)::bigint AS quantity
      FROM reservations WHERE status = 'active' GROUP BY product_id)
SELECT s.product_id,
       s.reserved::bigint                                    AS reserved,
       coalesce(a.quantity, 0)                               AS active_reserved,
       (s.available + s.reserved)::bigint                    AS on_hand,
       coalesce(c.quantity, 0) + coalesce(adj.delta, 0) - coalesce(cf.quantity, 0)
         - coalesce(sd.quantity, 0)                          AS expected_on_hand
  FROM stock s
  LEFT JOIN last_count c USING (product_id)
  LEFT JOIN adjusted adj USING (product_id)
  LEFT JOIN confirmed cf USING (product_id)
  LEFT JOIN sold sd USING (product_id)
  LEFT JOIN active a USING (product_id)
 WHERE s.reserved <> coalesce(a.quantity, 0)
    OR s.available + s.reserved <>
       coalesce(c.quantity, 0) + coalesce(adj.delta, 0) - coalesce(cf.quantity, 0)
         - coalesce(sd.quantity, 0)
 ORDER BY s.product_id
 LIMIT $1";

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

/// Runs the stock audit; an empty answer means every product is consistent with its history.
pub async fn audit_stock(pool: &Pool) -> Result<Vec<Divergence>, Error> {
    let mut client = checkout(pool, "audit_stock").await?;
    let tx = snapshot(&mut client).await?;
    let rows = tx.query(STOCK_AUDIT, &[&MAX_DIVERGENCES]).await?;
    tx.commit().await?;
    let mut out = Vec::new();
    for r in rows {
        let product_id = ProductId::new(r.try_get("product_id")?)?;
        let reserved: i64 = r.try_get("reserved")?;
        let active: i64 = r.try_get("active_reserved")?;
        let on_hand: i64 = r.try_get("on_hand")?;
        let expected: i64 = r.try_get("expected_on_hand")?;
        if reserved != active {
            out.push(Divergence {
                product_id,
                invariant: Invariant::ReservedMatchesActive,
                expected: active,
                actual: reserved,
            });
        }
        if on_hand != expected {
            out.push(Divergence {
                product_id,
                invariant: Invariant::OnHandMatchesHistory,
                expected,
                actual: on_hand,
            });
        }
    }
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
    BalanceMatchesJournal,
}

/// One broken ledger invariant; `account` is `None` for the total.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerDivergence {
    pub account: Option<AccountId>,
    pub invariant: LedgerInvariant,
    pub expected: i64,
    pub actual: i64,
}

const LEDGER_TOTAL: &str = "SELECT coalesce(sum(balance), 0)::bigint AS total FROM accounts";

const LEDGER_AUDIT: &str = "
WITH moves AS (
    SELECT to_account AS id, amount FROM transfers
    UNION ALL
    SELECT from_account AS id, -amount FROM transfers),
journal AS (
    SELECT id, sum(amount)::bigint AS net FROM moves GROUP BY id)
SELECT a.id, a.balance, coalesce(j.net, 0) AS expected
  FROM accounts a LEFT JOIN journal j USING (id)
 WHERE a.balance <> coalesce(j.net, 0)
 ORDER BY a.id
 LIMIT $1";

/// Runs the ledger audit in one REPEATABLE READ read-only snapshot; empty means the total is
/// zero and every balance equals its journal.
pub async fn audit_ledger(pool: &Pool) -> Result<Vec<LedgerDivergence>, Error> {
    let mut client = checkout(pool, "audit_ledger").await?;
    let tx = snapshot(&mut client).await?;
    let total: i64 = tx.query_one(LEDGER_TOTAL, &[]).await?.try_get("total")?;
    let rows = tx.query(LEDGER_AUDIT, &[&MAX_DIVERGENCES]).await?;
    tx.commit().await?;
    let mut out = Vec::new();
    if total != 0 {
        out.push(LedgerDivergence {
            account: None,
            invariant: LedgerInvariant::TotalIsZero,
            expected: 0,
            actual: total,
        });
    }
    for r in rows {
        out.push(LedgerDivergence {
            account: Some(crate::ledger::types::account_from_db(r.try_get("id")?)?),
            invariant: LedgerInvariant::BalanceMatchesJournal,
            expected: r.try_get("expected")?,
            actual: r.try_get("balance")?,
        });
    }
    Ok(out)
}
