//! The invariant checks the race lab and the bench share: what the database holds after a run,
//! read back (never written) and compared with what the buyers were told. Both also run
//! saldo's divergence audit ([`saldo::audit`]).

use std::collections::BTreeMap;

use deadpool_postgres::Pool;
use saldo::error::Error;
use saldo::retry::checkout;
use serde::Serialize;

const TOTALS: &str = "SELECT coalesce(sum(available), 0)::bigint, \
     coalesce(sum(reserved), 0)::bigint, coalesce(min(available), 0)::bigint FROM stock";
const ROWS_PER_ORDER: &str = "SELECT order_id, count(*) FROM reservations GROUP BY order_id";
const OVERSOLD: &str = "SELECT count(*) FROM (SELECT product_id FROM reservations \
     WHERE status IN ('active', 'confirmed') GROUP BY product_id HAVING sum(quantity) > $1) t";
const LIVE_UNITS: &str = "SELECT coalesce(sum(quantity), 0)::bigint FROM reservations \
     WHERE status IN ('active', 'confirmed')";
const USER_BALANCES: &str = "SELECT coalesce(sum(balance), 0)::bigint FROM accounts WHERE id <> 0";
const TRANSFERS_MADE: &str = "SELECT count(*) FROM transfers WHERE kind = 'transfer'";
/// [`TRANSFERS_MADE`] on the Citus layout, where each transfer has a row per side: its debit
/// side counted.
const TRANSFERS_MADE_CITUS: &str =
    "SELECT count(*) FROM transfers WHERE kind = 'transfer' AND account_id = from_account";
const RESERVATION_STATUSES: &str =
    "SELECT order_id, status FROM reservations WHERE starts_with(order_id, $1)";
/// Per (product, location): units allocated by live reservations.
const LOCATION_ALLOCATIONS: &str = "SELECT sl.product_id, sl.location_id, \
            coalesce((SELECT sum(a.quantity) FROM reservation_allocations a \
                       JOIN reservations r ON r.id = a.reservation_id \
                      WHERE a.product_id = sl.product_id AND a.location_id = sl.location_id \
                        AND r.status = 'active'), 0)::bigint AS allocated \
       FROM stock_locations sl ORDER BY sl.product_id, sl.location_id";
/// Per reservation row: its order, its quantity and what its allocations add up to.
const ROW_ALLOCATIONS: &str = "SELECT r.order_id, r.quantity::bigint AS quantity, \
            coalesce(sum(a.quantity), 0)::bigint AS allocated \
       FROM reservations r LEFT JOIN reservation_allocations a ON a.reservation_id = r.id \
      GROUP BY r.id, r.order_id, r.quantity";

/// One invariant checked after a run.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// Sums over every stock row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StockTotals {
    pub available: i64,
    pub reserved: i64,
    /// Lowest `available` of any product (the CHECK keeps it ≥ 0).
    pub min_available: i64,
}

/// What the database holds against what the callers were told: exactly that when every call
/// was answered, at least that when some answers were lost to errors (the work may have been
/// done without the caller hearing of it).
pub fn granted_matches(in_db: i64, granted: u64, errors: u64) -> bool {
    let granted = i64::try_from(granted).unwrap_or(i64::MAX);
    if errors == 0 {
        in_db == granted
    } else {
        in_db >= granted
    }
}

async fn one_i64(
    pool: &Pool,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<i64, Error> {
    let client = checkout(pool, saldo::Operation::Lab).await?;
    Ok(client.query_one(sql, params).await?.try_get(0)?)
}

/// How many divergences saldo's stock audit finds: [`saldo::audit::audit_stock`] in one
/// snapshot on one node, per product on its shard on Citus ([`saldo::audit::citus`]).
pub async fn stock_divergences(pool: &Pool) -> Result<u64, Error> {
    let layout = if is_citus(pool).await? {
        saldo::db::Layout::Citus
    } else {
        saldo::db::Layout::Single
    };
    Ok(saldo::audit::audit_stock_of(pool, layout).await?.len() as u64)
}

/// How many divergences saldo's ledger audit finds: [`saldo::audit::audit_ledger`] on one
/// node; on Citus every account on its shard and both sides of every transfer, with the
/// bounded recheck of 2PCs in flight (an unresolved suspect counts: the lab runs quiesce first).
pub async fn ledger_divergences(pool: &Pool) -> Result<u64, Error> {
    let found = if is_citus(pool).await? {
        use saldo::audit::citus::{audit, CitusAuditOptions};
        let audit = audit(pool, CitusAuditOptions::default()).await?;
        audit.ledger.len() + audit.transfers.len() + audit.unresolved.len()
    } else {
        saldo::audit::audit_ledger(pool).await?.len()
    };
    Ok(found as u64)
}

/// True on a Citus coordinator: the audits there are `saldo::audit::citus`'s.
async fn is_citus(pool: &Pool) -> Result<bool, Error> {
    let client = checkout(pool, saldo::Operation::Lab).await?;
    Ok(saldo::schema::detect(&client).await? == saldo::schema::Layout::Citus)
}

/// [`StockTotals`] of the database.
pub async fn stock_totals(pool: &Pool) -> Result<StockTotals, Error> {
    let client = checkout(pool, saldo::Operation::Lab).await?;
    let row = client.query_one(TOTALS, &[]).await?;
    Ok(StockTotals {
        available: row.try_get(0)?,
        reserved: row.try_get(1)?,
        min_available: row.try_get(2)?,
    })
}

/// Reservation rows per order id (all statuses).
pub async fn rows_per_order(pool: &Pool) -> Result<BTreeMap<String, i64>, Error> {
    let client = checkout(pool, saldo::Operation::Lab).await?;
    client
        .query(ROWS_PER_ORDER, &[])
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// The status of every reservation whose order id starts with `prefix`, by order id (one row
/// per order: the races that read this reserve one product per order).
pub async fn reservation_statuses(
    pool: &Pool,
    prefix: &str,
) -> Result<BTreeMap<String, String>, Error> {
    let client = checkout(pool, saldo::Operation::Lab).await?;
    client
        .query(RESERVATION_STATUSES, &[&prefix])
        .await?
        .iter()
        .map(|r| Ok((r.try_get("order_id")?, r.try_get("status")?)))
        .collect()
}

/// Units that live reservations allocate at one location of one product.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocationAllocated {
    pub product_id: i64,
    pub location_id: String,
    pub allocated: i64,
}

/// [`LocationAllocated`] for every stocked (product, location).
pub async fn location_allocations(pool: &Pool) -> Result<Vec<LocationAllocated>, Error> {
    let client = checkout(pool, saldo::Operation::Lab).await?;
    client
        .query(LOCATION_ALLOCATIONS, &[])
        .await?
        .iter()
        .map(|r| {
            Ok(LocationAllocated {
                product_id: r.try_get("product_id")?,
                location_id: r.try_get("location_id")?,
                allocated: r.try_get("allocated")?,
            })
        })
        .collect()
}

/// One reservation row and what its allocations add up to (all or nothing: the same).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowAllocated {
    pub order_id: String,
    pub quantity: i64,
    pub allocated: i64,
}

/// [`RowAllocated`] for every reservation row (all statuses).
pub async fn row_allocations(pool: &Pool) -> Result<Vec<RowAllocated>, Error> {
    let client = checkout(pool, saldo::Operation::Lab).await?;
    client
        .query(ROW_ALLOCATIONS, &[])
        .await?
        .iter()
        .map(|r| {
            Ok(RowAllocated {
                order_id: r.try_get("order_id")?,
                quantity: r.try_get("quantity")?,
                allocated: r.try_get("allocated")?,
            })
        })
        .collect()
}

/// After a stock run: the audit, no product sold past `stock_per_product`, and every unit a
/// buyer was told it got is in the database ([`granted_matches`]).
pub async fn stock_checks(
    pool: &Pool,
    stock_per_product: i64,
    units_granted: u64,
    errors: u64,
) -> Result<Vec<Check>, Error> {
    let divergences = stock_divergences(pool).await?;
    let oversold = one_i64(pool, OVERSOLD, &[&stock_per_product]).await?;
    let live = one_i64(pool, LIVE_UNITS, &[]).await?;
    Ok(vec![
        Check {
            name: "audit clean",
            ok: divergences == 0,
            detail: format!("{divergences} divergences"),
        },
        Check {
            name: "sold <= stock",
            ok: oversold == 0,
            detail: format!("{oversold} products oversold"),
        },
        Check {
            name: "granted = reserved rows",
            ok: granted_matches(live, units_granted, errors),
            detail: format!("{units_granted} units granted to buyers, {live} live in the database"),
        },
    ])
}

/// After a transfer run: the ledger audit, the users' total unchanged at `expected_total`
/// (transfers move money, they never create it), and one journal row per transfer a client was
/// told succeeded ([`granted_matches`]).
pub async fn ledger_checks(
    pool: &Pool,
    expected_total: i64,
    transfers_granted: u64,
    errors: u64,
) -> Result<Vec<Check>, Error> {
    let divergences = ledger_divergences(pool).await?;
    let made = if is_citus(pool).await? {
        one_i64(pool, TRANSFERS_MADE_CITUS, &[]).await?
    } else {
        one_i64(pool, TRANSFERS_MADE, &[]).await?
    };
    let total = one_i64(pool, USER_BALANCES, &[]).await?;
    Ok(vec![
        Check {
            name: "ledger audit clean",
            ok: divergences == 0,
            detail: format!("{divergences} divergences"),
        },
        Check {
            name: "balances conserved",
            ok: total == expected_total,
            detail: format!("users hold {total}, opened with {expected_total}"),
        },
        Check {
            name: "granted = journal rows",
            ok: granted_matches(made, transfers_granted, errors),
            detail: format!("{transfers_granted} transfers acknowledged, {made} in the journal"),
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn granted_is_exact_unless_answers_were_lost() {
        assert!(granted_matches(5, 5, 0));
        assert!(!granted_matches(6, 5, 0));
        assert!(granted_matches(6, 5, 1));
        assert!(!granted_matches(4, 5, 1));
    }
}
