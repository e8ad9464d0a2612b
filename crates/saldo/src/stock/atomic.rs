//! The `atomic` strategy (seed 000): the sufficiency check lives inside the UPDATE, and the
//! number of rows affected is the answer. A second session waiting on the row lock re-evaluates
//! the WHERE on the committed version, so it can never take a unit that is gone. A product
//! stocked per location is never taken here (`NOT located`): the refusal read that follows
//! zero rows names it, and the order runs on the located path (`stock::locations`).

use async_trait::async_trait;
use deadpool_postgres::Client;

use crate::domain::{ProductId, Quantity};
use crate::error::Error;
use crate::stock::lifecycle::{take_refusal, UnitTaker};

const TAKE_UNITS: &str = crate::stock_update!(
    "available = available - $2, reserved = reserved + $2",
    "WHERE product_id = $1 AND available >= $2 AND NOT located"
);

/// Conditional UPDATE per item, in ascending product id.
#[derive(Debug, Clone, Copy, Default)]
pub struct Atomic;

#[async_trait]
impl UnitTaker for Atomic {
    fn name(&self) -> &'static str {
        "atomic"
    }

    async fn take(&self, client: &Client, items: &[(ProductId, Quantity)]) -> Result<(), Error> {
        let stmt = client.prepare_cached(TAKE_UNITS).await?;
        for &(product, quantity) in items {
            let rows = client
                .execute(&stmt, &[&product.get(), &quantity.get()])
                .await?;
            if rows == 0 {
                return Err(take_refusal(client, product, quantity).await);
            }
        }
        Ok(())
    }
}
