//! The last-unit race's bug, in both of its forms, for the race lab only (never safe, never
//! served): read the balance without a lock, decide in the application, "think" (the article's
//! payment call), then write.
//!
//! - [`NaiveSubtract`] writes `available - n`: two sessions that read the same last unit both
//!   subtract, and the second write would go negative — the `CHECK (available >= 0)` refuses it
//!   with SQLSTATE 23514, which reaches the buyer as an error (the last line of defence held).
//! - [`NaiveOverwrite`] writes the values computed in the application (`SET available = 0`):
//!   the lost update. Every session that read the same balance writes the same result, nothing
//!   goes negative, and several units are sold from one; only the audit notices.
//! - [`NaiveReplay`] takes units like `atomic`, but recognises a replay only while the order
//!   still holds live rows (the older idempotency rule, before idempotency per request): a
//!   checkout's late retry of a released or expired order takes the units again.

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Client;

use saldo::domain::{ProductId, Quantity};
use saldo::error::Error;
use saldo::stock::atomic::Atomic;
use saldo::stock::optimistic::{read_and_check, Check};
use saldo::stock::trace::{Session, TraceSink, TraceStep};
use saldo::stock::{
    Reservation, ReserveRequest, StockEngine, StockStrategy, Store, Taken, UnitTaker,
};
use saldo::store::dialect::Tx;

const SUBTRACT: &str = saldo::stock_update!(
    "available = available - $2, reserved = reserved + $2",
    "WHERE product_id = $1"
);
const OVERWRITE: &str =
    saldo::stock_update!("available = $2, reserved = $3", "WHERE product_id = $1");

/// Longest think a naive strategy accepts, whatever the configuration says.
pub const MAX_THINK: Duration = Duration::from_secs(1);

/// `UPDATE … SET available = available - n` after an application-side check.
#[derive(Debug, Clone, Default)]
pub struct NaiveSubtract {
    pub think: Duration,
    pub trace: Option<TraceSink>,
}

/// `UPDATE … SET available = <value computed in the application>`: the lost update.
#[derive(Debug, Clone, Default)]
pub struct NaiveOverwrite {
    pub think: Duration,
    pub trace: Option<TraceSink>,
}

/// The shared naive first half: read without a lock, check in the application, think.
async fn read_check_think(
    tx: &Tx<'_>,
    session: &Session<'_>,
    product: ProductId,
    quantity: Quantity,
    think: Duration,
) -> Result<Check, Error> {
    let check = read_and_check(tx, session, product, quantity).await?;
    if matches!(check, Check::Enough(_)) {
        // Between this read and the write below another session may sell the same unit.
        tokio::time::sleep(think.min(MAX_THINK)).await;
    }
    Ok(check)
}

/// Runs the write, recording what the row holds afterwards or the SQLSTATE that refused it.
async fn write(
    client: &Client,
    session: &Session<'_>,
    product: ProductId,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<(), Error> {
    let stmt = client.prepare_cached(sql).await?;
    match client.query_one(&stmt, params).await {
        Ok(row) => {
            session.record_written(product, &row)?;
            super::record_movement(client, product.get()).await
        }
        Err(e) => {
            let sqlstate = e.code().map_or("", |c| c.code()).to_owned();
            session.record(product, || TraceStep::WriteFailed { sqlstate });
            Err(e.into())
        }
    }
}

#[async_trait]
impl UnitTaker for NaiveSubtract {
    fn name(&self) -> &'static str {
        "naive-subtract"
    }

    async fn take(&self, tx: &Tx<'_>, items: &[(ProductId, Quantity)]) -> Result<Taken, Error> {
        let session = Session::start(self.trace.as_ref());
        for (index, &(product, quantity)) in items.iter().enumerate() {
            if let Check::Declined(seen) =
                read_check_think(tx, &session, product, quantity, self.think).await?
            {
                return Ok(Taken::Declined { index, seen });
            }
            write(
                tx.client(),
                &session,
                product,
                SUBTRACT,
                &[&product.get(), &quantity.get()],
            )
            .await?;
        }
        Ok(Taken::All)
    }
}

#[async_trait]
impl UnitTaker for NaiveOverwrite {
    fn name(&self) -> &'static str {
        "naive-overwrite"
    }

    async fn take(&self, tx: &Tx<'_>, items: &[(ProductId, Quantity)]) -> Result<Taken, Error> {
        let session = Session::start(self.trace.as_ref());
        for (index, &(product, quantity)) in items.iter().enumerate() {
            let seen = match read_check_think(tx, &session, product, quantity, self.think).await? {
                Check::Enough(seen) => seen,
                Check::Declined(seen) => return Ok(Taken::Declined { index, seen }),
            };
            let available = seen.available - quantity.get();
            let reserved = seen.reserved.saturating_add(quantity.get());
            write(
                tx.client(),
                &session,
                product,
                OVERWRITE,
                &[&product.get(), &available, &reserved],
            )
            .await?;
        }
        Ok(Taken::All)
    }
}

/// `atomic`, with the older idempotency rule (see the module header): lab only. Everything
/// but `reserve` is `atomic`'s; `reserve` goes through saldo's one door for it,
/// [`StockEngine::reserve_forgetting_released`].
#[derive(Clone)]
pub struct NaiveReplay {
    engine: StockEngine,
}

impl NaiveReplay {
    pub fn new(store: Store) -> Self {
        NaiveReplay {
            engine: StockEngine::new(store, Atomic),
        }
    }
}

#[async_trait]
impl StockStrategy for NaiveReplay {
    fn name(&self) -> &'static str {
        "naive-replay"
    }

    fn taker(&self) -> &dyn UnitTaker {
        &Atomic
    }

    async fn reserve(
        &self,
        _store: &Store,
        request: &ReserveRequest,
    ) -> Result<Reservation, Error> {
        self.engine.reserve_forgetting_released(request).await
    }
}
