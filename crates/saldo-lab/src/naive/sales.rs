//! The naive sale (`naive-sale`, for `saldo race sales-vs-reservations`): a direct sale the
//! way the last-unit race's bug sells. It reads `available` unlocked, decides in the
//! application ([`decide`]), thinks ([`THINK`], a payment provider's callback) and writes the
//! value it computed from its read ([`sell`]): every naive sale that read the unit before
//! anyone took it "sells" it, and overwrites what the others took. Its sale rows are written as
//! saldo's, so the audit (which counts sold units) sees the oversell.

use std::time::Duration;

use saldo::domain::{ProductId, Quantity};
use saldo::error::Error;
use saldo::retry::checkout;
use saldo::stock::SaleRequest;

/// Its name in `--strategy` and the reports.
pub const NAME: &str = "naive-sale";
/// The pause between its read and its write.
pub const THINK: Duration = Duration::from_millis(50);

const READ: &str = "SELECT available FROM stock WHERE product_id = $1";
const WRITE: &str = saldo::stock_update!("available = $2", "WHERE product_id = $1");
const INSERT_SALE: &str = "INSERT INTO sales (sale_id) VALUES ($1)";
const INSERT_ITEM: &str =
    "INSERT INTO sale_items (sale_id, product_id, quantity) VALUES ($1, $2, $3)";

/// What the naive seller decided: each product's `available` after the sale, computed in the
/// application from its read.
pub struct Decision(Vec<(ProductId, Quantity, i32)>);

/// The read and the decision. The connection goes back to the pool before this returns, so a
/// caller waiting between [`decide`] and [`sell`] holds none.
pub async fn decide(
    pool: &deadpool_postgres::Pool,
    request: &SaleRequest,
) -> Result<Decision, Error> {
    let client = checkout(pool, saldo::Operation::Lab).await?;
    let mut after = Vec::new();
    for (product, quantity) in request.items.iter() {
        let row = client
            .query_opt(READ, &[&product.get()])
            .await?
            .ok_or(Error::UnknownProduct(product))?;
        let available: i32 = row.try_get("available")?;
        if available < quantity.get() {
            return Err(Error::InsufficientStock {
                product_id: product,
                requested: quantity.get(),
                available,
            });
        }
        after.push((product, quantity, available - quantity.get()));
    }
    Ok(Decision(after))
}

/// The pause, then the write of what [`decide`] computed (a lost update).
pub async fn sell(
    pool: &deadpool_postgres::Pool,
    request: &SaleRequest,
    decision: Decision,
) -> Result<(), Error> {
    tokio::time::sleep(THINK).await;
    let client = checkout(pool, saldo::Operation::Lab).await?;
    let sale = request.sale_id.as_str();
    client.execute(INSERT_SALE, &[&sale]).await?;
    for (product, quantity, available) in decision.0 {
        client.execute(WRITE, &[&product.get(), &available]).await?;
        super::record_movement(&client, product.get()).await?;
        client
            .execute(INSERT_ITEM, &[&sale, &product.get(), &quantity.get()])
            .await?;
    }
    Ok(())
}
