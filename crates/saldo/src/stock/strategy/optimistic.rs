//! The `optimistic` strategy: read `available` and `version` without a lock, check in
//! the application, then `UPDATE … WHERE product_id = $1 AND version = $2`. Zero rows means
//! someone wrote in between: re-read and try again after a jittered backoff, up to
//! [`OptimisticConfig::attempts`], then [`Error::VersionConflict`] — distinct from insufficient
//! stock, because the units may still be there.
//!
//! Isolation: under READ COMMITTED (the default) every statement of the reserve transaction
//! takes a fresh snapshot, so the re-read inside the same transaction sees the new version.
//! Under SERIALIZABLE the UPDATE of a row changed after the snapshot fails with 40001 instead of
//! matching zero rows, and the whole-transaction retry ([`crate::store::retry`]) reruns it from BEGIN.
//!
//! The backoff sleeps inside the transaction, holding only the rows of this order's earlier
//! (lower id) items — never the contested row — and is bounded by attempts × `max_backoff_ms`.

use async_trait::async_trait;

use crate::domain::{ProductId, Quantity};
use crate::error::Error;
use crate::stock::model::StockRow;
use crate::stock::rows::stock::changed;
use crate::stock::strategy::trace::{Session, TraceSink, TraceStep};
use crate::stock::taker::{Taken, UnitTaker};
use crate::store::dialect::{Sql, Tx};
use crate::store::retry::RetryPolicy;

/// Most attempts per item, whatever the configuration says.
pub const MAX_OPTIMISTIC_ATTEMPTS: u32 = 50;
/// Longest single backoff, whatever the configuration says.
pub const MAX_OPTIMISTIC_BACKOFF_MS: u64 = 100;

const TAKE_IF_VERSION: Sql = Sql::same(crate::stock_update!(
    "available = available - $3, reserved = reserved + $3",
    "WHERE product_id = $1 AND version = $2"
));
const READ_ROW: Sql = Sql::same(
    "SELECT available, reserved, version, backorder_limit, backordered, located FROM stock \
     WHERE product_id = $1",
);

/// What the unlocked read saw. Public for the race lab's naive takers (`saldo-lab`).
pub struct Seen {
    pub available: i32,
    pub reserved: i32,
    pub version: i64,
}

/// What the application-side check decided.
pub enum Check {
    /// Enough units on a product not stocked per location: write, on the version read.
    Enough(Seen),
    /// Not taken from `available` here: what was read of the row (`None`: no such product),
    /// for the flow to decide ([`Taken::Declined`]).
    Declined(Option<StockRow>),
}

/// Reads the row without a lock and checks it in the application: the first half of the
/// optimistic strategy, and of the lab's naive ones, which differ in how they write. It lives
/// here, with the safe strategy, so that nothing served depends on lab-only code; it is public
/// for the lab.
pub async fn read_and_check(
    tx: &Tx<'_>,
    session: &Session<'_>,
    product: ProductId,
    quantity: Quantity,
) -> Result<Check, Error> {
    let Some(row) = tx.query_opt(&READ_ROW, &[&product.get()]).await? else {
        return Ok(Check::Declined(None));
    };
    let seen = Seen {
        available: row.try_get("available")?,
        reserved: row.try_get("reserved")?,
        version: row.try_get("version")?,
    };
    let stock_row = StockRow {
        available: seen.available,
        backorder_limit: row.try_get("backorder_limit")?,
        backordered: row.try_get("backordered")?,
        located: row.try_get("located")?,
    };
    // The flow allocates such a product over its locations.
    if stock_row.located {
        return Ok(Check::Declined(Some(stock_row)));
    }
    session.record(product, || TraceStep::Read {
        available: seen.available,
        reserved: seen.reserved,
        version: seen.version,
    });
    if seen.available < quantity.get() {
        if stock_row.backorder_limit == 0 {
            let available = seen.available;
            session.record(product, || TraceStep::Refused { available });
        }
        return Ok(Check::Declined(Some(stock_row)));
    }
    Ok(Check::Enough(seen))
}

/// How hard the optimistic strategy tries before answering `VersionConflict`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptimisticConfig {
    /// Read–check–write attempts per item, the first included (1..=[`MAX_OPTIMISTIC_ATTEMPTS`]).
    pub attempts: u32,
    /// Backoff before attempt n is uniform in `0..=min(max, base · 2^n)` (full jitter).
    pub base_backoff_ms: u64,
    pub max_backoff_ms: u64,
}

impl Default for OptimisticConfig {
    fn default() -> Self {
        OptimisticConfig {
            attempts: 10,
            base_backoff_ms: 1,
            max_backoff_ms: 20,
        }
    }
}

impl OptimisticConfig {
    fn policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.attempts.clamp(1, MAX_OPTIMISTIC_ATTEMPTS),
            base_backoff_ms: self.base_backoff_ms.min(MAX_OPTIMISTIC_BACKOFF_MS),
            max_backoff_ms: self.max_backoff_ms.min(MAX_OPTIMISTIC_BACKOFF_MS),
        }
    }
}

/// Version-checked UPDATE with bounded re-reads.
#[derive(Debug, Clone, Default)]
pub struct Optimistic {
    pub config: OptimisticConfig,
    pub trace: Option<TraceSink>,
}

#[async_trait]
impl UnitTaker for Optimistic {
    fn name(&self) -> &'static str {
        "optimistic"
    }

    async fn take(&self, tx: &Tx<'_>, items: &[(ProductId, Quantity)]) -> Result<Taken, Error> {
        let session = Session::start(self.trace.as_ref());
        let policy = self.config.policy();
        let update = tx.prepare(&TAKE_IF_VERSION).await?;
        'items: for (index, &(product, quantity)) in items.iter().enumerate() {
            for attempt in 1..=policy.max_attempts {
                let version = match read_and_check(tx, &session, product, quantity).await? {
                    Check::Enough(seen) => seen.version,
                    Check::Declined(seen) => return Ok(Taken::Declined { index, seen }),
                };
                if let Some(row) = tx
                    .client()
                    .query_opt(&update, &[&product.get(), &version, &quantity.get()])
                    .await?
                {
                    changed(tx, std::slice::from_ref(&row))?;
                    session.record_written(product, &row)?;
                    continue 'items;
                }
                session.record(product, || TraceStep::VersionMoved {
                    read_version: version,
                });
                crate::telemetry::version_conflict();
                if attempt < policy.max_attempts {
                    tokio::time::sleep(policy.backoff(attempt)).await;
                }
            }
            return Err(Error::VersionConflict {
                product_id: product,
                attempts: policy.max_attempts,
            });
        }
        Ok(Taken::All)
    }
}
