//! Product and order lists. Products page by `stock`'s primary key; orders are the distinct
//! `order_id`s of `reservations`, read in order along `reservations_by_order`, each with the
//! status its rows add up to (the same rule as one order's view: active while any row is held,
//! else confirmed if any was sold, else released if any was, else expired).

use chrono::{DateTime, Utc};

use super::{corrupt, paginate, read, Cursor, ListKind, Page, PageLimit};
use crate::domain::{OrderId, ProductId, Reference};
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::model::Location;
use crate::stock::rows::locations::location_of;
use crate::stock::{Status, Stock};
use crate::store::handle::Store;
use crate::store::retry::checkout;

const PRODUCTS: &str = "SELECT product_id, available, reserved, version, backorder_limit, \
                        backordered FROM stock \
                        WHERE product_id > $1 ORDER BY product_id LIMIT $2";

/// `SELECT <each order's summary> FROM reservations WHERE <cond> GROUP BY order_id ORDER BY
/// order_id LIMIT $2`: an order's status is what its rows add up to.
macro_rules! order_summaries {
    ($cond:literal) => {
        concat!(
            "SELECT order_id, \
                CASE WHEN bool_or(status = 'active') THEN 'active' \
                     WHEN bool_or(status = 'confirmed') THEN 'confirmed' \
                     WHEN bool_or(status = 'released') THEN 'released' \
                     ELSE 'expired' END AS status, \
                count(DISTINCT product_id) AS products, \
                min(created_at) AS created_at \
            FROM reservations WHERE ",
            $cond,
            " GROUP BY order_id ORDER BY order_id LIMIT $2"
        )
    };
}

/// Aggregated per order, in order id order: the index gives the groups already sorted, so the
/// LIMIT stops the scan after that many orders.
const ORDERS: &str = order_summaries!("order_id > $1");

/// [`ORDERS`] for the orders carrying a reference (`$3`): the first `$2` such order ids after
/// the cursor, distinct, along `reservations_by_reference` (only the rows of an order's first
/// request carry it), then those orders' rows summed up as [`ORDERS`] does.
const ORDERS_BY_REFERENCE: &str = order_summaries!(
    "order_id IN (SELECT DISTINCT order_id FROM reservations \
                   WHERE reference = $3 AND order_id > $1 ORDER BY order_id LIMIT $2)"
);

/// Locations by id, each with what it holds over all products (its `stock_locations` rows).
const LOCATIONS: &str = "SELECT l.location_id, l.priority, l.retired_at, \
        count(s.product_id) AS products, \
        coalesce(sum(s.available), 0)::bigint AS available, \
        coalesce(sum(s.reserved), 0)::bigint AS reserved \
    FROM locations l LEFT JOIN stock_locations s ON s.location_id = l.location_id \
    WHERE l.location_id > $1 \
    GROUP BY l.location_id ORDER BY l.location_id LIMIT $2";

/// Orders read per page with a status filter, per row the page may hold: a filter that matches
/// few orders answers a short page (with a cursor) instead of reading the whole table.
pub const ORDERS_READ_PER_ROW: usize = 10;
/// Most orders one filtered page reads.
pub const MAX_ORDERS_READ: usize = 10_000;

/// One order as a list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderSummary {
    pub order_id: OrderId,
    pub status: Status,
    /// Distinct products in its reservation rows.
    pub products: i64,
    /// When its first reservation row was written.
    pub created_at: DateTime<Utc>,
}

/// One location as the list shows it: the location and what it holds over all products.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocationSummary {
    pub location: Location,
    /// Products with a row at it (stocked there now or before).
    pub products: i64,
    pub available: i64,
    pub reserved: i64,
}

/// Locations by ascending id, after `cursor` (a [`ListKind::Locations`] cursor), retired ones
/// included (with `retired_at`).
pub async fn locations(
    store: &Store,
    limit: PageLimit,
    cursor: Option<&Cursor>,
) -> Result<Page<LocationSummary>, Error> {
    let read_rows = limit.get() as usize + 1;
    let locations = read(
        store,
        Operation::ListLocations,
        LOCATIONS,
        Cursor::text_key(cursor),
        read_rows,
        |row| {
            Ok(LocationSummary {
                location: location_of(row)?,
                products: row.try_get("products")?,
                available: row.try_get("available")?,
                reserved: row.try_get("reserved")?,
            })
        },
    )
    .await?;
    Ok(paginate(
        locations,
        limit,
        read_rows,
        |_| true,
        |l| {
            let id = l.location.location_id.as_str().to_owned();
            Cursor::Text(ListKind::Locations, id)
        },
    ))
}

/// Products by ascending id, after `cursor` (a [`ListKind::Products`] cursor).
pub async fn products(
    store: &Store,
    limit: PageLimit,
    cursor: Option<&Cursor>,
) -> Result<Page<Stock>, Error> {
    let read_rows = limit.get() as usize + 1;
    let stock = read(
        store,
        Operation::ListProducts,
        PRODUCTS,
        Cursor::numeric_key(cursor),
        read_rows,
        |row| {
            let product_id =
                ProductId::new(row.try_get("product_id")?).map_err(|e| corrupt("stock", e))?;
            crate::stock::rows::stock::stock_of(product_id, row)
        },
    )
    .await?;
    Ok(paginate(
        stock,
        limit,
        read_rows,
        |_| true,
        |s| Cursor::Numeric(ListKind::Products, s.product_id.get()),
    ))
}

/// Orders by ascending id, after `cursor` (a [`ListKind::Orders`] cursor), only those whose
/// status is `status` when given. A filtered page reads at most
/// `limit × ORDERS_READ_PER_ROW` (≤ [`MAX_ORDERS_READ`]) orders, so it may hold fewer than
/// `limit` and still carry a cursor: follow `next` until it is `None`.
pub async fn orders(
    store: &Store,
    status: Option<Status>,
    limit: PageLimit,
    cursor: Option<&Cursor>,
) -> Result<Page<OrderSummary>, Error> {
    let read_rows = orders_read(status, limit);
    let orders = read(
        store,
        Operation::ListOrders,
        ORDERS,
        Cursor::text_key(cursor),
        read_rows,
        order_summary,
    )
    .await?;
    Ok(order_page(orders, status, limit, read_rows))
}

/// The orders whose first request carried `reference`, by ascending id after `cursor` (a
/// [`ListKind::Orders`] cursor: the same positions as [`orders`]), only those whose status is
/// `status` when given; paged as [`orders`] pages.
pub async fn orders_by_reference(
    store: &Store,
    reference: &Reference,
    status: Option<Status>,
    limit: PageLimit,
    cursor: Option<&Cursor>,
) -> Result<Page<OrderSummary>, Error> {
    let read_rows = orders_read(status, limit);
    let client = checkout(&store.pool, Operation::ListOrders).await?;
    let rows = i64::try_from(read_rows).unwrap_or(i64::MAX);
    let after = Cursor::text_key(cursor);
    let read = client
        .query(ORDERS_BY_REFERENCE, &[&after, &rows, &reference.as_str()])
        .await?;
    let orders = read.iter().map(order_summary).collect::<Result<_, _>>()?;
    Ok(order_page(orders, status, limit, read_rows))
}

/// Rows a page of orders reads: one more than it holds, many more with a status filter.
fn orders_read(status: Option<Status>, limit: PageLimit) -> usize {
    let rows_wanted = limit.get() as usize + 1;
    match status {
        None => rows_wanted,
        Some(_) => (rows_wanted * ORDERS_READ_PER_ROW).clamp(rows_wanted, MAX_ORDERS_READ),
    }
}

fn order_summary(row: &tokio_postgres::Row) -> Result<OrderSummary, Error> {
    Ok(OrderSummary {
        order_id: OrderId::new(row.try_get::<_, String>("order_id")?)
            .map_err(|e| corrupt("reservations", e))?,
        status: crate::stock::model::parse_status(row.try_get("status")?)?,
        products: row.try_get("products")?,
        created_at: row.try_get("created_at")?,
    })
}

fn order_page(
    orders: Vec<OrderSummary>,
    status: Option<Status>,
    limit: PageLimit,
    read_rows: usize,
) -> Page<OrderSummary> {
    paginate(
        orders,
        limit,
        read_rows,
        |o| status.is_none_or(|s| o.status == s),
        |o| Cursor::Text(ListKind::Orders, o.order_id.as_str().to_owned()),
    )
}
