//! The `atomic` strategy: the sufficiency check lives inside the UPDATE, and the number of rows
//! affected is the answer. A second session waiting on the row lock re-evaluates the WHERE on
//! the committed version, so it can never take a unit that is gone. A product stocked per
//! location is never taken here (`NOT located`): zero rows declines the item, and the flow
//! decides from the row what becomes of it.

use async_trait::async_trait;

use crate::domain::{ProductId, Quantity};
use crate::error::Error;
use crate::stock::rows::stock::changed;
use crate::stock::taker::{seen, Taken, UnitTaker};
use crate::store::dialect::{Sql, Tx};

const TAKE_UNITS: Sql = Sql::same(crate::stock_update!(
    "available = available - $2, reserved = reserved + $2",
    "WHERE product_id = $1 AND available >= $2 AND NOT located"
));

/// Conditional UPDATE per item, in ascending product id.
#[derive(Debug, Clone, Copy, Default)]
pub struct Atomic;

#[async_trait]
impl UnitTaker for Atomic {
    fn name(&self) -> &'static str {
        "atomic"
    }

    async fn take(&self, tx: &Tx<'_>, items: &[(ProductId, Quantity)]) -> Result<Taken, Error> {
        let stmt = tx.prepare(&TAKE_UNITS).await?;
        for (index, &(product, quantity)) in items.iter().enumerate() {
            let rows = tx
                .client()
                .query(&stmt, &[&product.get(), &quantity.get()])
                .await?;
            changed(tx, &rows)?;
            if rows.is_empty() {
                let seen = seen(tx, product).await?;
                return Ok(Taken::Declined { index, seen });
            }
        }
        Ok(Taken::All)
    }
}
