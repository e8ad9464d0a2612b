//! Backorders and preorders (issue 15): a product may promise up to `backorder_limit` units it
//! does not have. A reservation takes what is available and backorders the rest (all items or
//! none; past the limit, the usual insufficient-stock refusal); a product with no stock and a
//! limit is a preorder. When units arrive they go to the oldest backorders first, in the same
//! transaction ([`fill_backorders`], the one place that does it), and only what remains becomes
//! available.
//!
//! Bookkeeping: a reservation's `quantity` = allocated + `backordered`. `stock.reserved` counts
//! allocated units of active reservations only (on hand = available + reserved, as before);
//! `stock.backordered` = Σ `backordered` of live reservations. Confirm sells what is allocated
//! and leaves the backorder pending; a fill of a confirmed reservation sends its units straight
//! to sold. Release and expiry give back the allocated units and drop the backorder (the hold's
//! expiry applies to the whole reservation: a preorder kept past its hold must be confirmed or
//! extended). Each fill writes a `backorder_fills` row (reservation, its arrival number, units,
//! sold or not, the movement that brought them): the audit's evidence of arrival order and of
//! what left on hand through a backorder.
//!
//! Hot path: a product with limit 0 pays nothing. Every strategy takes as before; a take
//! refused for want of stock reads the product's limit with the row it reads anyway to name
//! the refusal (`lifecycle::take_refusal`, optimistic's read), and on a product with a limit
//! answers `NeedsBackorderPath`: the reserve rolls back and reruns here on the locked path
//! ([`take`]: stock rows `FOR UPDATE` in product order, the decision on the locked values).
//! `batched` reads the limit with the rows it locks anyway and routes such an order to the
//! same path.
//!
//! Lock order: arrival paths ([`prelock`]) lock the product's live backordered reservation rows
//! (in order id order, as batched confirms lock many orders' rows) before its stock row, as
//! confirm and release lock their order's rows before stock; rows that committed between the two are newer than all of those and locked after the
//! stock row (a rare cycle with their own confirm surfaces as 40P01 and reruns).

use uuid::Uuid;

use deadpool_postgres::Client;

use crate::domain::{InputError, ProductId, Quantity, MAX_BACKORDER_LIMIT};
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::admin::stock_of;
use crate::stock::lifecycle::Row;
use crate::stock::types::{Status, Stock};
use crate::store::handle::Store;
use crate::store::retry::in_transaction;

/// Rounds of [`fill_backorders`] at most: each locks the oldest backorders that the remaining
/// units cover; a later round only runs when a row left between the read and its lock.
const MAX_FILL_ROUNDS: usize = 8;

const LOCK_POLICY: &str = "SELECT backordered, located FROM stock WHERE product_id = $1 FOR UPDATE";
const SET_POLICY: &str = crate::stock_update!(
    "backorder_limit = $2",
    "WHERE product_id = $1 \
     RETURNING available, reserved, version, backorder_limit, backordered"
);
const LOCK_FOR_BACKORDER: &str =
    "SELECT product_id, available, backorder_limit, backordered, located FROM stock \
     WHERE product_id = ANY($1) ORDER BY product_id FOR UPDATE";
/// Per product: allocated units leave available for reserved, backordered units are promised.
const TAKE: &str = crate::stock_update!(
    "available = stock.available - d.a, reserved = stock.reserved + d.a, \
     backordered = stock.backordered + d.b",
    "FROM unnest($1::bigint[], $2::int[], $3::int[]) AS d(product_id, a, b) \
     WHERE stock.product_id = d.product_id"
);
/// The arrival number comes from the sequence here, under the stock row lock.
const MARK: &str = "UPDATE reservations SET backordered = d.b, \
     backorder_arrival = nextval('backorder_arrivals') \
     FROM unnest($1::uuid[], $2::int[]) AS d(id, b) WHERE reservations.id = d.id";
/// Dropped backorders of released or expired rows (their stock rows already locked).
const DROP: &str = crate::stock_update!(
    "backordered = stock.backordered - d.b",
    "FROM unnest($1::bigint[], $2::int[]) AS d(product_id, b) \
     WHERE stock.product_id = d.product_id"
);
/// Every live backorder of the product, before its stock row is locked, in the order batched
/// confirms lock many orders' rows (order id, product, created_at): two lockers of many orders'
/// rows never wait on each other in a cycle. (The fill reads them again in arrival order.)
const PRELOCK: &str = "SELECT id FROM reservations WHERE product_id = $1 AND backordered > 0 \
     AND status IN ('active', 'confirmed') ORDER BY order_id, product_id, created_at FOR UPDATE";
/// The oldest live backorders that `$2` units reach (each row starts before `$2` is used up),
/// locked; the outer conditions are checked again on the locked version.
const OLDEST: &str = "SELECT id, status, backordered, backorder_arrival FROM reservations \
     WHERE id IN (SELECT id FROM (SELECT id, sum(backordered) OVER \
                  (ORDER BY backorder_arrival, id) - backordered AS before \
                  FROM reservations WHERE product_id = $1 AND backordered > 0 \
                  AND status IN ('active', 'confirmed')) q WHERE before < $2::int) \
       AND backordered > 0 AND status IN ('active', 'confirmed') \
     ORDER BY backorder_arrival, id FOR UPDATE";
const FILL_ROWS: &str = "UPDATE reservations SET backordered = reservations.backordered - d.f \
     FROM unnest($1::uuid[], $2::int[]) AS d(id, f) WHERE reservations.id = d.id";
const RECORD_FILLS: &str = "INSERT INTO backorder_fills \
     (product_id, reservation_id, arrival, quantity, sold, movement_id) \
     SELECT $1, d.id, d.arrival, d.f, d.sold, $2 \
       FROM unnest($3::uuid[], $4::bigint[], $5::int[], $6::bool[]) AS d(id, arrival, f, sold)";
/// Filled units leave available: to reserved for active rows, out of on hand (sold) for
/// confirmed ones; either way they leave `backordered`.
const FILL_STOCK: &str = crate::stock_update!(
    "available = available - $2 - $3, reserved = reserved + $2, \
     backordered = backordered - $2 - $3",
    "WHERE product_id = $1"
);

/// Sets a product's `backorder_limit` (0..=[`MAX_BACKORDER_LIMIT`]). Lowering it below what is
/// backordered now is refused ([`Error::BackorderLimitBelowBackordered`]), nothing written.
pub async fn set_policy(store: &Store, product_id: ProductId, limit: i64) -> Result<Stock, Error> {
    if !(0..=i64::from(MAX_BACKORDER_LIMIT)).contains(&limit) {
        return Err(InputError::BackorderLimitOutOfRange(limit).into());
    }
    let limit = i32::try_from(limit).map_err(|_| InputError::BackorderLimitOutOfRange(limit))?;
    // The backorder path's statements lock many products' rows at once (and fill through a
    // subquery under FOR UPDATE): not built for Citus yet. Refusing the limit keeps every
    // product there off that path.
    if store.is_citus() {
        return Err(Error::UnsupportedOnCitus("backorders"));
    }
    in_transaction(
        &store.pool,
        &store.tx,
        Operation::SetPolicy,
        move |client| {
            crate::tx_body!(client => async {
                let row = client
                    .query_opt(LOCK_POLICY, &[&product_id.get()])
                    .await?
                    .ok_or(Error::UnknownProduct(product_id))?;
                let backordered: i32 = row.try_get("backordered")?;
                // Not on a product stocked per location (see `Error::BackordersAndLocations`).
                if limit > 0 && row.try_get::<_, bool>("located")? {
                    return Err(Error::BackordersAndLocations(product_id));
                }
                if limit < backordered {
                    return Err(Error::BackorderLimitBelowBackordered {
                        product_id,
                        limit,
                        backordered,
                    });
                }
                let row = client.query_one(SET_POLICY, &[&product_id.get(), &limit]).await?;
                stock_of(product_id, &row)
            })
        },
    )
    .await
}

/// The locked take: locks the items' stock rows in product order, allocates what is
/// available and backorders the rest within each product's limit, all items or none. Returns
/// the backordered units per item (in `items` order). Refusals as `atomic`'s; the refusal's
/// `available` is what could have been had (available + backorder room).
pub(crate) async fn take(
    client: &Client,
    items: &[(ProductId, Quantity)],
) -> Result<Vec<i32>, Error> {
    let products: Vec<i64> = items.iter().map(|(p, _)| p.get()).collect();
    let stmt = client.prepare_cached(LOCK_FOR_BACKORDER).await?;
    let rows = client.query(&stmt, &[&products]).await?;
    let mut allocated = Vec::with_capacity(items.len());
    let mut backordered = Vec::with_capacity(items.len());
    for &(product, quantity) in items {
        let Some(row) = rows
            .iter()
            .find(|r| r.try_get::<_, i64>("product_id").ok() == Some(product.get()))
        else {
            return Err(Error::UnknownProduct(product));
        };
        if row.try_get::<_, bool>("located")? {
            // Rolls back; `lifecycle::reserve_with` reruns the order on the located path.
            return Err(Error::StockedByLocation(product));
        }
        let available: i32 = row.try_get("available")?;
        let room =
            row.try_get::<_, i32>("backorder_limit")? - row.try_get::<_, i32>("backordered")?;
        let (a, b) = split(quantity.get(), available, room).ok_or(Error::InsufficientStock {
            product_id: product,
            requested: quantity.get(),
            available: available.saturating_add(room.max(0)),
        })?;
        allocated.push(a);
        backordered.push(b);
    }
    let stmt = client.prepare_cached(TAKE).await?;
    let updated = client
        .execute(&stmt, &[&products, &allocated, &backordered])
        .await?;
    if updated != products.len() as u64 {
        return Err(Error::invariant(format!(
            "backorder take updated {updated} stock rows, expected {} (all locked)",
            products.len()
        )));
    }
    Ok(backordered)
}

/// How `quantity` splits into (allocated, backordered) given what is available and the
/// backorder room left; `None` when it does not fit. Available units always go first.
pub(crate) fn split(quantity: i32, available: i32, room: i32) -> Option<(i32, i32)> {
    let allocated = quantity.min(available.max(0));
    let backordered = quantity - allocated;
    (backordered <= room.max(0)).then_some((allocated, backordered))
}

/// Records the backordered units of just-inserted rows (with their arrival numbers), and on
/// the in-memory rows. `backordered[i]` belongs to `rows[i]`.
pub(crate) async fn mark(
    client: &Client,
    rows: &mut [Row],
    backordered: &[i32],
) -> Result<(), Error> {
    let mut ids = Vec::new();
    let mut units = Vec::new();
    for (row, &b) in rows.iter_mut().zip(backordered) {
        if b > 0 {
            row.item.backordered = b;
            ids.push(row.id);
            units.push(b);
        }
    }
    if ids.is_empty() {
        return Ok(());
    }
    let stmt = client.prepare_cached(MARK).await?;
    client.execute(&stmt, &[&ids, &units]).await?;
    Ok(())
}

/// Takes the dropped backorders of released or expired rows off their products'
/// `backordered` (stock rows already locked by the caller). No statement when none.
pub(crate) async fn drop_backorders(client: &Client, rows: &[&Row]) -> Result<(), Error> {
    let mut per_product: std::collections::BTreeMap<i64, i32> = Default::default();
    for r in rows.iter().filter(|r| r.item.backordered > 0) {
        *per_product.entry(r.item.product_id.get()).or_default() += r.item.backordered;
    }
    if per_product.is_empty() {
        return Ok(());
    }
    let products: Vec<i64> = per_product.keys().copied().collect();
    let units: Vec<i32> = per_product.values().copied().collect();
    let stmt = client.prepare_cached(DROP).await?;
    client.execute(&stmt, &[&products, &units]).await?;
    Ok(())
}

/// Locks the product's live backorders in arrival order: called by an arrival path BEFORE it
/// locks the stock row, to keep the global lock order (reservation rows, then stock).
pub(crate) async fn prelock(client: &Client, product: ProductId) -> Result<(), Error> {
    let stmt = client.prepare_cached(PRELOCK).await?;
    client.query(&stmt, &[&product.get()]).await?;
    Ok(())
}

/// What a fill did: units that went to active reservations (now reserved) and to confirmed
/// ones (now sold).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Filled {
    pub to_reserved: i32,
    pub to_sold: i32,
}

impl Filled {
    pub fn total(self) -> i32 {
        self.to_reserved + self.to_sold
    }
}

/// THE fill: `arrived` units just added to `product`'s available (by the movement
/// `movement_id`, whose transaction holds the stock row) go to the oldest live backorders
/// first (arrival order), possibly filling the last one partially; only what remains stays
/// available. Every arrival of units calls this, in its own transaction.
pub async fn fill_backorders(
    client: &Client,
    product: ProductId,
    arrived: i32,
    movement_id: i64,
) -> Result<Filled, Error> {
    let mut filled = Filled::default();
    let mut left = arrived;
    for _ in 0..MAX_FILL_ROUNDS {
        if left <= 0 {
            break;
        }
        let stmt = client.prepare_cached(OLDEST).await?;
        let rows = client.query(&stmt, &[&product.get(), &left]).await?;
        if rows.is_empty() {
            break;
        }
        let (mut ids, mut arrivals, mut units, mut sold) = (vec![], vec![], vec![], vec![]);
        for row in &rows {
            if left == 0 {
                break;
            }
            let waiting: i32 = row.try_get("backordered")?;
            let status = Status::parse(&row.try_get::<_, String>("status")?)?;
            let f = waiting.min(left);
            left -= f;
            ids.push(row.try_get::<_, Uuid>("id")?);
            arrivals.push(row.try_get::<_, i64>("backorder_arrival")?);
            units.push(f);
            sold.push(status == Status::Confirmed);
            if status == Status::Confirmed {
                filled.to_sold += f;
            } else {
                filled.to_reserved += f;
            }
        }
        let stmt = client.prepare_cached(FILL_ROWS).await?;
        client.execute(&stmt, &[&ids, &units]).await?;
        let stmt = client.prepare_cached(RECORD_FILLS).await?;
        client
            .execute(
                &stmt,
                &[&product.get(), &movement_id, &ids, &arrivals, &units, &sold],
            )
            .await?;
    }
    if filled.total() > 0 {
        let stmt = client.prepare_cached(FILL_STOCK).await?;
        client
            .execute(
                &stmt,
                &[&product.get(), &filled.to_reserved, &filled.to_sold],
            )
            .await?;
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn available_units_go_first_and_the_rest_within_the_room() {
        assert_eq!(split(3, 5, 0), Some((3, 0)));
        assert_eq!(split(3, 1, 2), Some((1, 2)));
        assert_eq!(split(3, 1, 1), None);
        assert_eq!(split(3, 0, 3), Some((0, 3)), "a preorder");
        assert_eq!(split(1, 0, 0), None);
        assert_eq!(split(2, -1, -4), None, "nonsense never grants");
    }
}
