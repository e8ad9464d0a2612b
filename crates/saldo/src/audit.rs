//! The divergence audit (seed 000): it must come back empty. For every product it checks
//! - `reserved = Σ active reservations` (their allocated units: quantity − backordered),
//! - `available + reserved = last count + adjustments since − confirmed since the count − sold
//!   directly since the count` (direct sales, `stock::sales`, take from `available` only; a
//!   confirm sells the allocated units, and a backorder of a confirmed reservation filled
//!   since the count was sold at its fill), and, for backorders (`stock::backorders`),
//! - `backordered = Σ live reservations' backordered`, never above `backorder_limit`, and
//! - filled in arrival order: per product, the fills in the order they were written never go
//!   back to an older arrival, and no live backorder is older than one that got a fill.
//!
//! [`audit_ledger`] checks the ledger the same way: all balances sum to zero and all `held`
//! equal all `pending_credits` (the double entry, for posted and pending amounts separately),
//! each balance equals its posted credits minus its posted debits in the transfers journal, and
//! each `held` / `pending_credits` equals the sum of its live pending debits / credits.
//!
//! Each audit reads one consistent snapshot (REPEATABLE READ, read only). A divergence means some
//! path wrote stock or balances without going through the engine.
//!
//! On a Citus coordinator there is no such snapshot across shards: [`citus`] audits there.

use deadpool_postgres::Pool;
use serde::Serialize;

use crate::domain::{AccountId, ProductId};
use crate::error::Error;
use crate::operation::Operation;
use crate::store::retry::checkout;
use crate::store::schema::Layout;

pub mod citus;

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
}

/// One broken invariant of one product.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Divergence {
    pub product_id: ProductId,
    pub invariant: Invariant,
    pub expected: i64,
    pub actual: i64,
}

/// Per product: its row and what reservations and history say it should hold. `$1` names one
/// product, or NULL for all. Shared by the audit (which keeps the divergent rows) and the
/// repair (which reads one product's targets under its row lock).
macro_rules! stock_state {
    () => {
        "
WITH last_count AS (
    SELECT DISTINCT ON (product_id) product_id, id, quantity, created_at
      FROM stock_movements
     WHERE kind = 'count' AND location_id IS NULL AND ($1::bigint IS NULL OR product_id = $1)
     ORDER BY product_id, id DESC),
adjusted AS (
    SELECT m.product_id, sum(m.quantity)::bigint AS delta
      FROM stock_movements m JOIN last_count c USING (product_id)
     WHERE m.kind = 'adjustment' AND m.location_id IS NULL AND m.id > c.id
     GROUP BY m.product_id),
fills_sold AS (
    SELECT reservation_id, sum(quantity)::bigint AS quantity
      FROM backorder_fills
     WHERE sold AND ($1::bigint IS NULL OR product_id = $1)
     GROUP BY reservation_id),
confirmed AS (
    SELECT r.product_id,
           sum(r.quantity - r.backordered - coalesce(f.quantity, 0))::bigint AS quantity
      FROM reservations r JOIN last_count c USING (product_id)
      LEFT JOIN fills_sold f ON f.reservation_id = r.id
     WHERE r.status = 'confirmed' AND r.settled_at > c.created_at
     GROUP BY r.product_id),
filled_sold AS (
    SELECT f.product_id, sum(f.quantity)::bigint AS quantity
      FROM backorder_fills f JOIN last_count c USING (product_id)
     WHERE f.sold AND f.movement_id >= c.id
     GROUP BY f.product_id),
sold AS (
    SELECT i.product_id, sum(i.quantity)::bigint AS quantity
      FROM sale_items i JOIN last_count c USING (product_id)
     WHERE i.sold_at > c.created_at
     GROUP BY i.product_id),
active AS (
    SELECT product_id, sum(quantity - backordered)::bigint AS quantity
      FROM reservations
     WHERE status = 'active' AND ($1::bigint IS NULL OR product_id = $1)
     GROUP BY product_id),
live_backorders AS (
    SELECT product_id, sum(backordered)::bigint AS units
      FROM reservations
     WHERE backordered > 0 AND status IN ('active', 'confirmed')
       AND ($1::bigint IS NULL OR product_id = $1)
     GROUP BY product_id)
SELECT s.product_id,
       s.available::bigint                                   AS available,
       s.reserved::bigint                                    AS reserved,
       s.version,
       coalesce(a.quantity, 0)                               AS active_reserved,
       s.backordered::bigint                                 AS backordered,
       s.backorder_limit::bigint                             AS backorder_limit,
       coalesce(lb.units, 0)                                 AS live_backordered,
       (s.available + s.reserved)::bigint                    AS on_hand,
       coalesce(c.quantity, 0) + coalesce(adj.delta, 0) - coalesce(cf.quantity, 0)
         - coalesce(sd.quantity, 0) - coalesce(fs.quantity, 0) AS expected_on_hand
  FROM stock s
  LEFT JOIN last_count c USING (product_id)
  LEFT JOIN adjusted adj USING (product_id)
  LEFT JOIN confirmed cf USING (product_id)
  LEFT JOIN sold sd USING (product_id)
  LEFT JOIN filled_sold fs USING (product_id)
  LEFT JOIN active a USING (product_id)
  LEFT JOIN live_backorders lb USING (product_id)
 WHERE ($1::bigint IS NULL OR s.product_id = $1)"
    };
}

/// One product's [`stock_state!`] row (the repair, under the product's row lock).
pub(crate) const PRODUCT_STATE: &str = stock_state!();

const STOCK_AUDIT: &str = concat!(
    "SELECT * FROM (",
    stock_state!(),
    ") st WHERE reserved <> active_reserved OR on_hand <> expected_on_hand \
     OR backordered <> live_backordered \
     ORDER BY product_id LIMIT $2"
);

/// The backorder invariants that no repair can restore (the limit, the arrival order; the
/// count of live backorders is a [`ProductState`] invariant), divergent products only. The
/// out-of-order count: fills whose arrival is below their predecessor's (fill id order), plus
/// live backorders older than the newest arrival any fill reached.
const BACKORDER_AUDIT: &str = "
WITH ordered AS (
    SELECT product_id, arrival,
           lag(arrival) OVER (PARTITION BY product_id ORDER BY id) AS previous
      FROM backorder_fills),
backwards AS (
    SELECT product_id, count(*) AS n FROM ordered WHERE arrival < previous GROUP BY product_id),
reached AS (
    SELECT product_id, max(arrival) AS arrival FROM backorder_fills GROUP BY product_id),
skipped AS (
    SELECT r.product_id, count(*) AS n
      FROM reservations r JOIN reached f USING (product_id)
     WHERE r.backordered > 0 AND r.status IN ('active', 'confirmed')
       AND r.backorder_arrival < f.arrival
     GROUP BY r.product_id)
SELECT s.product_id, s.backordered::bigint AS backordered,
       s.backorder_limit::bigint AS backorder_limit,
       coalesce(b.n, 0) + coalesce(k.n, 0) AS out_of_order
  FROM stock s
  LEFT JOIN backwards b USING (product_id)
  LEFT JOIN skipped k USING (product_id)
 WHERE s.backordered > s.backorder_limit OR coalesce(b.n, 0) + coalesce(k.n, 0) > 0
 ORDER BY s.product_id
 LIMIT $1";

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
        out
    }
}

/// The products that diverge (at most [`MAX_DIVERGENCES`]), read in one snapshot: what the
/// audit reports and what a repair plans from.
pub async fn divergent_products(pool: &Pool) -> Result<Vec<ProductState>, Error> {
    let mut client = checkout(pool, Operation::AuditStock).await?;
    let tx = snapshot(&mut client).await?;
    let all: Option<i64> = None;
    let rows = tx.query(STOCK_AUDIT, &[&all, &MAX_DIVERGENCES]).await?;
    tx.commit().await?;
    rows.iter().map(ProductState::from_row).collect()
}

/// The location invariants (issue 15), per product: its row is the sum of its locations, each
/// location's `reserved` is the sum of the active allocations at it, and each allocated
/// reservation's allocations add up to its quantity. `$1`: most rows returned.
const LOCATION_AUDIT: &str = "
WITH sums AS (
    SELECT product_id, sum(available)::bigint AS available, sum(reserved)::bigint AS reserved
      FROM stock_locations GROUP BY product_id),
held AS (
    SELECT a.product_id, a.location_id, sum(a.quantity)::bigint AS quantity
      FROM reservation_allocations a JOIN reservations r ON r.id = a.reservation_id
     WHERE r.status = 'active'
     GROUP BY a.product_id, a.location_id),
per_row AS (
    SELECT r.product_id, r.quantity::bigint AS quantity,
           coalesce(sum(a.quantity), 0)::bigint AS allocated
      FROM reservations r LEFT JOIN reservation_allocations a ON a.reservation_id = r.id
     WHERE r.allocated
     GROUP BY r.id, r.product_id, r.quantity)
SELECT * FROM (
    SELECT s.product_id, 'available' AS invariant, coalesce(x.available, 0) AS expected,
           s.available::bigint AS actual
      FROM stock s LEFT JOIN sums x USING (product_id)
     WHERE s.located AND s.available <> coalesce(x.available, 0)
    UNION ALL
    SELECT s.product_id, 'reserved', coalesce(x.reserved, 0), s.reserved::bigint
      FROM stock s LEFT JOIN sums x USING (product_id)
     WHERE s.located AND s.reserved <> coalesce(x.reserved, 0)
    UNION ALL
    SELECT sl.product_id, 'location_reserved', sum(coalesce(h.quantity, 0))::bigint,
           sum(sl.reserved)::bigint
      FROM stock_locations sl LEFT JOIN held h USING (product_id, location_id)
     WHERE sl.reserved <> coalesce(h.quantity, 0)
     GROUP BY sl.product_id
    UNION ALL
    SELECT product_id, 'allocations', sum(quantity)::bigint, sum(allocated)::bigint
      FROM per_row WHERE quantity <> allocated
     GROUP BY product_id
) d ORDER BY product_id, invariant LIMIT $1";

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

/// One product's [`ProductState`] query for a database of `layout` (`$1`: the product): on
/// Citus routed whole to the product's shard group ([`citus::product_state_sql`]).
pub fn product_state_sql_of(layout: Layout) -> &'static str {
    match layout {
        Layout::Single => PRODUCT_STATE,
        Layout::Citus => citus::PRODUCT_STATE_ROUTED.as_str(),
    }
}

/// Runs the stock audit; an empty answer means every product is consistent with its history,
/// its backorders and (stocked per location) its locations and allocations. All three queries
/// read one snapshot.
pub async fn audit_stock(pool: &Pool) -> Result<Vec<Divergence>, Error> {
    let mut client = checkout(pool, Operation::AuditStock).await?;
    let tx = snapshot(&mut client).await?;
    let all: Option<i64> = None;
    let states = tx.query(STOCK_AUDIT, &[&all, &MAX_DIVERGENCES]).await?;
    let backorders = tx.query(BACKORDER_AUDIT, &[&MAX_DIVERGENCES]).await?;
    let locations = tx.query(LOCATION_AUDIT, &[&MAX_DIVERGENCES]).await?;
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
    /// The sum of all `held` differs from the sum of all `pending_credits`: a pending amount
    /// has one side only.
    PendingTotalsMatch,
    /// An account's `held` differs from the sum of its live pending debits.
    HeldMatchesPending,
    /// An account's `pending_credits` differs from the sum of its live pending credits.
    PendingCreditsMatchPending,
}

/// One broken ledger invariant; `account` is `None` for the total.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerDivergence {
    pub account: Option<AccountId>,
    pub invariant: LedgerInvariant,
    pub expected: i64,
    pub actual: i64,
}

/// Sums in numeric (a sum of bigints cannot overflow the audit itself), read as text:
/// tokio-postgres has no numeric type without another crate, and [`sum_i64`] parses them.
const LEDGER_TOTAL: &str = "SELECT coalesce(sum(balance), 0)::text AS total, \
     coalesce(sum(held), 0)::text AS held, \
     coalesce(sum(pending_credits), 0)::text AS pending_credits FROM accounts";

/// Posted rows move `posted_amount` (NULL: the whole amount); pending rows move nothing yet
/// but count in `held` / `pending_credits`; voided and expired rows count nowhere.
const LEDGER_AUDIT: &str = "
WITH moves AS (
    SELECT to_account AS id, coalesce(posted_amount, amount) AS amount
      FROM transfers WHERE status = 'posted'
    UNION ALL
    SELECT from_account AS id, -coalesce(posted_amount, amount)
      FROM transfers WHERE status = 'posted'),
journal AS (
    SELECT id, sum(amount) AS net FROM moves GROUP BY id),
held AS (
    SELECT from_account AS id, sum(amount) AS held
      FROM transfers WHERE status = 'pending' GROUP BY from_account),
credits AS (
    SELECT to_account AS id, sum(amount) AS credits
      FROM transfers WHERE status = 'pending' GROUP BY to_account)
SELECT a.id, a.balance::text AS balance, coalesce(j.net, 0)::text AS expected,
       a.held::text AS held, coalesce(h.held, 0)::text AS expected_held,
       a.pending_credits::text AS pending_credits,
       coalesce(c.credits, 0)::text AS expected_pending_credits
  FROM accounts a
  LEFT JOIN journal j USING (id)
  LEFT JOIN held h USING (id)
  LEFT JOIN credits c USING (id)
 WHERE a.balance <> coalesce(j.net, 0)
    OR a.held <> coalesce(h.held, 0)
    OR a.pending_credits <> coalesce(c.credits, 0)
 ORDER BY a.id
 LIMIT $1";

/// A numeric sum as an `i64` for the report, saturated: a sum beyond `i64` is a divergence
/// whatever its exact value.
fn sum_i64(row: &tokio_postgres::Row, column: &str) -> Result<i64, Error> {
    let text: String = row.try_get(column)?;
    Ok(match text.parse::<i128>() {
        Ok(v) => i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX }),
        Err(_) => i64::MAX,
    })
}

/// Runs the ledger audit in one REPEATABLE READ read-only snapshot; empty means the total is
/// zero and every balance equals its journal.
pub async fn audit_ledger(pool: &Pool) -> Result<Vec<LedgerDivergence>, Error> {
    let mut client = checkout(pool, Operation::AuditLedger).await?;
    let tx = snapshot(&mut client).await?;
    let totals = tx.query_one(LEDGER_TOTAL, &[]).await?;
    let rows = tx.query(LEDGER_AUDIT, &[&MAX_DIVERGENCES]).await?;
    tx.commit().await?;
    let mut out = Vec::new();
    let total = sum_i64(&totals, "total")?;
    if total != 0 {
        out.push(LedgerDivergence {
            account: None,
            invariant: LedgerInvariant::TotalIsZero,
            expected: 0,
            actual: total,
        });
    }
    let (held, credits) = (
        sum_i64(&totals, "held")?,
        sum_i64(&totals, "pending_credits")?,
    );
    if held != credits {
        out.push(LedgerDivergence {
            account: None,
            invariant: LedgerInvariant::PendingTotalsMatch,
            expected: credits,
            actual: held,
        });
    }
    for r in rows {
        let account = crate::ledger::types::account_from_db(r.try_get("id")?)?;
        out.extend(account_divergences(&r, account)?);
    }
    Ok(out)
}

/// One account's row of balance, held and pending credits next to what its journal says they
/// should be (columns `balance`/`expected`, `held`/`expected_held`,
/// `pending_credits`/`expected_pending_credits`): the invariants that differ.
fn account_divergences(
    r: &tokio_postgres::Row,
    account: AccountId,
) -> Result<Vec<LedgerDivergence>, Error> {
    let mut out = Vec::new();
    for (invariant, actual, expected) in [
        (
            LedgerInvariant::BalanceMatchesJournal,
            "balance",
            "expected",
        ),
        (LedgerInvariant::HeldMatchesPending, "held", "expected_held"),
        (
            LedgerInvariant::PendingCreditsMatchPending,
            "pending_credits",
            "expected_pending_credits",
        ),
    ] {
        let (actual, expected) = (sum_i64(r, actual)?, sum_i64(r, expected)?);
        if actual != expected {
            out.push(LedgerDivergence {
                account: Some(account),
                invariant,
                expected,
                actual,
            });
        }
    }
    Ok(out)
}
