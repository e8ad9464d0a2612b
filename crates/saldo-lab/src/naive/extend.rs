//! The naive extension (`naive-extend`, for `saldo race extend-vs-sweeper`): what extending a
//! hold looks like without the row lock. It reads the order's reservations unlocked, decides
//! in the application that the hold is live, thinks ([`THINK`], the slow call of the
//! last-unit race) and writes the new expiry without a condition: the sweeper expires the
//! hold in between and the extension "succeeds" on an expired row.

use std::time::Duration;

use saldo::domain::{OrderId, ProductId};
use saldo::error::Error;
use saldo::retry::checkout;

/// Its name in `--strategy` and the reports.
pub const NAME: &str = "naive-extend";
/// The pause between its read and its write: longer than the race's holds, so a hold read as
/// live is due (and swept) before the write.
pub const THINK: Duration = Duration::from_millis(600);

const READ: &str = "SELECT product_id, status, expires_at > now() AS live FROM reservations \
     WHERE order_id = $1";
const WRITE: &str = "UPDATE reservations SET expires_at = now() + make_interval(secs => $2) \
     WHERE order_id = $1";

/// Extends `order_id`'s hold to `ttl_s` seconds from now: an unlocked read, the decision in
/// the application, a pause, and a write that does not re-check what it decided on.
pub async fn extend(
    pool: &deadpool_postgres::Pool,
    order_id: &OrderId,
    ttl_s: f64,
) -> Result<(), Error> {
    let client = checkout(pool, saldo::Operation::Lab).await?;
    let rows = client.query(READ, &[&order_id.as_str()]).await?;
    if rows.is_empty() {
        return Err(Error::UnknownOrder(order_id.clone()));
    }
    for r in &rows {
        let status: String = r.try_get("status")?;
        let live: bool = r.try_get("live")?;
        if status != "active" || !live {
            return Err(Error::ReservationExpired {
                order_id: order_id.clone(),
                product_id: ProductId::new(r.try_get("product_id")?)?,
            });
        }
    }
    tokio::time::sleep(THINK).await;
    client.execute(WRITE, &[&order_id.as_str(), &ttl_s]).await?;
    Ok(())
}
