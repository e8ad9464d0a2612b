//! The naive located reservation (`naive-locations`, for `saldo race split-locations`): what
//! shop platforms did (Medusa #14987). It reads each product's locations unlocked, allocates
//! in the application ([`decide`]), thinks ([`THINK`]) and writes the values it computed from
//! its read ([`reserve`]), so every buyer that read before the others wrote takes the same
//! units.

use std::collections::BTreeMap;
use std::time::Duration;

use saldo::domain::{AllocationMode, LocationId, ProductId, Quantity};
use saldo::error::Error;
use saldo::retry::checkout;
use saldo::stock::allocate::{allocate, Shortfall, Source};

/// Its name in `--strategy` and the reports.
pub const NAME: &str = "naive-locations";
/// The pause between its read and its write.
pub const THINK: Duration = Duration::from_millis(20);

const READ: &str = "SELECT sl.location_id, sl.available, sl.reserved, l.priority \
     FROM stock_locations sl JOIN locations l USING (location_id) WHERE sl.product_id = $1";
const WRITE_LOCATION: &str = "UPDATE stock_locations SET available = $3, reserved = $4 \
     WHERE product_id = $1 AND location_id = $2";
const WRITE_STOCK: &str = saldo::stock_update!(
    "available = available - $2, reserved = reserved + $2",
    "WHERE product_id = $1"
);
/// The reservation row and its allocations, as the engine would write them.
const INSERT_ROW: &str = "WITH r AS ( \
       INSERT INTO reservations (id, order_id, product_id, quantity, expires_at, allocated) \
       VALUES (gen_random_uuid(), $1, $2, $3, now() + interval '15 minutes', true) \
       RETURNING id, product_id) \
     INSERT INTO reservation_allocations (reservation_id, product_id, location_id, quantity) \
     SELECT r.id, r.product_id, g.location_id, g.quantity \
       FROM r, unnest($4::text[], $5::int[]) AS g(location_id, quantity)";

/// One item as the naive allocator decided it: the locations' values it computed from its read.
pub struct Item {
    product: i64,
    quantity: i32,
    /// (location, quantity taken, available after, reserved after), all computed from the read.
    parts: Vec<(String, i32, i32, i32)>,
}

/// The unlocked reads of each item's locations and the allocation, decided in the application.
/// The connection goes back to the pool before this returns.
pub async fn decide(
    pool: &deadpool_postgres::Pool,
    items: &[(i64, i64)],
) -> Result<Vec<Item>, Error> {
    let client = checkout(pool, saldo::Operation::Lab).await?;
    let mut out = Vec::with_capacity(items.len());
    for &(product, quantity) in items {
        let product_id = ProductId::new(product)?;
        let quantity = Quantity::new(quantity)?.get();
        let mut seen: BTreeMap<String, (i32, i32)> = BTreeMap::new();
        let mut sources = Vec::new();
        for r in client.query(READ, &[&product]).await? {
            let id: String = r.try_get("location_id")?;
            let (available, reserved): (i32, i32) =
                (r.try_get("available")?, r.try_get("reserved")?);
            seen.insert(id.clone(), (available, reserved));
            sources.push(Source {
                location_id: LocationId::new(id)?,
                priority: r.try_get("priority")?,
                available,
            });
        }
        let parts = match allocate(quantity, AllocationMode::Split, None, &sources) {
            Ok(parts) => parts,
            Err(Shortfall::Insufficient { available }) => {
                return Err(Error::InsufficientStock {
                    product_id,
                    requested: quantity,
                    available,
                })
            }
            Err(Shortfall::UnknownLocation) => return Err(Error::UnknownProduct(product_id)),
        };
        let parts = parts
            .into_iter()
            .map(|(location, taken)| {
                let (available, reserved) =
                    seen.get(location.as_str()).copied().unwrap_or_default();
                (
                    location.as_str().to_owned(),
                    taken,
                    available - taken,
                    reserved + taken,
                )
            })
            .collect();
        out.push(Item {
            product,
            quantity,
            parts,
        });
    }
    Ok(out)
}

/// The pause, then blind writes of what [`decide`] computed, for order `order_id`.
pub async fn reserve(
    pool: &deadpool_postgres::Pool,
    order_id: &str,
    decided: Vec<Item>,
) -> Result<(), Error> {
    tokio::time::sleep(THINK).await;
    let client = checkout(pool, saldo::Operation::Lab).await?;
    for item in &decided {
        for (location, _, available, reserved) in &item.parts {
            client
                .execute(
                    WRITE_LOCATION,
                    &[&item.product, &location.as_str(), available, reserved],
                )
                .await?;
        }
        client
            .execute(WRITE_STOCK, &[&item.product, &item.quantity])
            .await?;
        super::record_movement(&client, item.product).await?;
        let locations: Vec<&str> = item.parts.iter().map(|p| p.0.as_str()).collect();
        let taken: Vec<i32> = item.parts.iter().map(|p| p.1).collect();
        client
            .execute(
                INSERT_ROW,
                &[&order_id, &item.product, &item.quantity, &locations, &taken],
            )
            .await?;
    }
    Ok(())
}
