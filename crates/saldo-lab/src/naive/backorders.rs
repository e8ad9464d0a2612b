//! The naive restock (`naive-fill`, for `saldo race backorder-fill`): what a fill looks like
//! without the row lock and the queue. It reads the stock row and the product's backorders
//! unlocked, decides in the application which to fill (newest first, the order a stack gives)
//! ([`decide`]), thinks, and writes the values it computed from its read ([`restock`]): every
//! concurrent restock fills the same reservation, older backorders wait while newer ones are
//! served, and the last writer's stock row wins (a lost update the audit sees).

use std::time::Duration;

use saldo::error::Error;
use saldo::retry::checkout;
use uuid::Uuid;

/// Its name in `--strategy` and the reports.
pub const NAME: &str = "naive-fill";
/// The pause between its decision and its write.
pub const THINK: Duration = Duration::from_millis(50);

const READ_STOCK: &str = "SELECT available, reserved, backordered FROM stock WHERE product_id = $1";
const READ_BACKORDERS: &str = "SELECT id, status, backordered, backorder_arrival \
     FROM reservations WHERE product_id = $1 AND backordered > 0 \
     AND status IN ('active', 'confirmed') ORDER BY backorder_arrival DESC";
const WRITE_STOCK: &str = saldo::stock_update!(
    "available = $2, reserved = $3, backordered = $4",
    "WHERE product_id = $1"
);
const RECORD: &str = "INSERT INTO stock_movements (product_id, kind, quantity, reason) \
     VALUES ($1, 'adjustment', $2, 'naive restock') RETURNING id";
const WRITE_ROW: &str = "UPDATE reservations SET backordered = $2 WHERE id = $1";
const RECORD_FILL: &str = "INSERT INTO backorder_fills \
     (product_id, reservation_id, arrival, quantity, sold, movement_id) \
     VALUES ($1, $2, $3, $4, $5, $6)";

/// One fill the naive restock decided on: the row, its arrival, the units, sold or not, and
/// what the row's backorder becomes (computed from the read).
struct Planned {
    id: Uuid,
    arrival: i64,
    units: i32,
    sold: bool,
    left: i32,
}

/// What the naive restock read and decided: the stock row's `available`, `reserved` and
/// `backordered`, and the fills it plans.
pub struct Decision {
    books: (i32, i32, i32),
    plan: Vec<Planned>,
}

/// Writes the restock of `units` of `product` that [`decide`] planned, after a pause of
/// [`THINK`].
pub async fn restock(
    pool: &deadpool_postgres::Pool,
    product: i64,
    units: i32,
    decision: Decision,
) -> Result<(), Error> {
    let Decision {
        books: (available, reserved, backordered),
        plan,
    } = decision;
    tokio::time::sleep(THINK).await;
    let client = checkout(pool, saldo::Operation::Lab).await?;
    let movement: i64 = client
        .query_one(RECORD, &[&product, &units])
        .await?
        .try_get("id")?;
    let filled: i32 = plan.iter().map(|p| p.units).sum();
    let to_reserved: i32 = plan.iter().filter(|p| !p.sold).map(|p| p.units).sum();
    client
        .execute(
            WRITE_STOCK,
            &[
                &product,
                &(available + units - filled),
                &(reserved + to_reserved),
                &(backordered - filled),
            ],
        )
        .await?;
    super::record_movement(&client, product).await?;
    for p in &plan {
        client.execute(WRITE_ROW, &[&p.id, &p.left]).await?;
        client
            .execute(
                RECORD_FILL,
                &[&product, &p.id, &p.arrival, &p.units, &p.sold, &movement],
            )
            .await?;
    }
    Ok(())
}

/// The unlocked reads and the plan: which backorders `units` new units of `product` fill,
/// newest first. The connection goes back to the pool before this returns.
pub async fn decide(
    pool: &deadpool_postgres::Pool,
    product: i64,
    units: i32,
) -> Result<Decision, Error> {
    let client = checkout(pool, saldo::Operation::Lab).await?;
    let row = client.query_one(READ_STOCK, &[&product]).await?;
    let books = (
        row.try_get("available")?,
        row.try_get("reserved")?,
        row.try_get("backordered")?,
    );
    let mut left = units;
    let mut plan = Vec::new();
    for r in client.query(READ_BACKORDERS, &[&product]).await? {
        if left == 0 {
            break;
        }
        let waiting: i32 = r.try_get("backordered")?;
        let f = waiting.min(left);
        left -= f;
        plan.push(Planned {
            id: r.try_get("id")?,
            arrival: r.try_get("backorder_arrival")?,
            units: f,
            sold: r.try_get::<_, String>("status")? == "confirmed",
            left: waiting - f,
        });
    }
    Ok(Decision { books, plan })
}
