//! The SQL text every stock path shares, in one place so that a column or a bookkeeping rule
//! cannot be forgotten in one copy: the columns of a reservation row, the INSERT of reservation
//! rows, and the tail of every write to a stock row (`version` moves, `updated_at` is stamped).
//!
//! A leaf: statement text only, no code from the crate.

/// The columns of a reservation row as `lifecycle::parse_rows` reads them (by name). Every
/// query that hands rows to it selects (or returns) these.
#[macro_export]
#[doc(hidden)]
macro_rules! reservation_columns {
    () => {
        "id, order_id, product_id, quantity, status, expires_at, created_at, request_key, backordered, allocated"
    };
}

/// `UPDATE stock SET <set>, version = version + 1, updated_at = now() <rest>`: every write to a
/// stock row moves its version (the optimistic strategy's check and the lab's traces rely on it)
/// and stamps `updated_at`, so the tail is written once, here.
#[macro_export]
#[doc(hidden)]
macro_rules! stock_update {
    ($set:literal, $rest:literal) => {
        concat!(
            "UPDATE stock SET ",
            $set,
            ", version = version + 1, updated_at = now() ",
            $rest
        )
    };
}

/// `SELECT <reservation columns> FROM reservations <rest>`.
macro_rules! select_reservations {
    ($rest:literal) => {
        concat!(
            "SELECT ",
            crate::reservation_columns!(),
            " FROM reservations ",
            $rest
        )
    };
}

/// One order's rows, per product oldest first (the order `lifecycle::current_items` relies on).
pub(crate) const ORDER_ROWS: &str =
    select_reservations!("WHERE order_id = $1 ORDER BY product_id, created_at");
/// The same, locked: the first step of confirm and release (reservation rows before stock).
pub(crate) const ORDER_ROWS_FOR_UPDATE: &str =
    select_reservations!("WHERE order_id = $1 ORDER BY product_id, created_at FOR UPDATE");
/// Many orders' rows (a batch's), read after its stock rows are locked: the idempotency
/// decision is made on what committed before the batch held them.
pub(crate) const ORDERS_ROWS: &str =
    select_reservations!("WHERE order_id = ANY($1) ORDER BY order_id, product_id, created_at");
/// Many orders' rows locked in one consistent order (order id, then as [`ORDER_ROWS_FOR_UPDATE`]
/// locks one order's), before any stock row: the global lock order.
pub(crate) const ORDERS_ROWS_FOR_UPDATE: &str = select_reservations!(
    "WHERE order_id = ANY($1) ORDER BY order_id, product_id, created_at FOR UPDATE"
);
/// Active rows past their expiry, oldest first, skipping rows a confirm holds (the sweeper).
pub(crate) const DUE_ROWS: &str = select_reservations!(
    "WHERE status = 'active' AND expires_at < now() \
     ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED"
);
/// Moves rows to a final status; `settled_at` from the clock, read while the stock rows are
/// locked (see `lifecycle::settle`).
pub(crate) const SETTLE: &str =
    "UPDATE reservations SET status = $2, settled_at = clock_timestamp() WHERE id = ANY($1)";

/// A product's stock row, unlocked (the admin read; the optimistic and naive first read).
pub(crate) const STOCK_ROW: &str = "SELECT available, reserved, version, backorder_limit, \
     backordered, located FROM stock WHERE product_id = $1";

/// Locks stock rows in the global lock order (ascending product id) and reads what they hold.
pub(crate) const LOCK_STOCK: &str =
    "SELECT product_id, available, backorder_limit, located FROM stock \
     WHERE product_id = ANY($1) ORDER BY product_id FOR UPDATE";
/// Of these products, those no other transaction holds locked (never waits).
pub(crate) const PROBE_LOCKS: &str = "SELECT product_id FROM stock \
     WHERE product_id = ANY($1) ORDER BY product_id FOR UPDATE SKIP LOCKED";

/// Writes reservation rows, one per element of the parallel arrays (id, order id, product,
/// quantity, TTL in seconds, request key), and returns what only the database knows: each row's
/// `created_at` and `expires_at` by id (the rest is what was sent; returning whole rows cost a
/// batch of 128 rows measurably: BENCHMARKS.md). The reserve of one order and the batch of many
/// orders insert through this one statement.
pub(crate) const INSERT_RESERVATIONS: &str =
    "INSERT INTO reservations (id, order_id, product_id, quantity, expires_at, request_key) \
     SELECT g.id, g.order_id, g.product_id, g.quantity, \
            now() + make_interval(secs => g.ttl_s), g.request_key \
       FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::int[], $5::float8[], $6::text[]) \
            AS g(id, order_id, product_id, quantity, ttl_s, request_key) \
     RETURNING id, created_at, expires_at";
/// [`INSERT_RESERVATIONS`] with a seventh array: which rows have allocations (the located
/// path's; the hot path keeps the statement above).
pub(crate) const INSERT_ALLOCATED_RESERVATIONS: &str =
    "INSERT INTO reservations (id, order_id, product_id, quantity, expires_at, request_key, \
                               allocated) \
     SELECT g.id, g.order_id, g.product_id, g.quantity, \
            now() + make_interval(secs => g.ttl_s), g.request_key, g.allocated \
       FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::int[], $5::float8[], $6::text[], \
                   $7::bool[]) \
            AS g(id, order_id, product_id, quantity, ttl_s, request_key, allocated) \
     RETURNING id, created_at, expires_at";
/// Adds (available, reserved) deltas to many stock rows in one statement.
pub(crate) const APPLY_DELTAS: &str = crate::stock_update!(
    "available = stock.available + d.a, reserved = stock.reserved + d.r",
    "FROM unnest($1::bigint[], $2::int[], $3::int[]) AS d(product_id, a, r) \
     WHERE stock.product_id = d.product_id"
);

// Citus twins (ARCHITECTURE.md, "On Citus"): Citus refuses a `FOR UPDATE` that spans shards
// and a VOLATILE function in an UPDATE, so these take their locks one product (the
// distribution value) per statement, in ascending order, and are chosen by `stock::layout`.
// The single-node statements above stay as they are.

/// The products an order has reservation rows on (its router row).
pub(crate) const ORDER_PRODUCTS: &str = "SELECT products FROM orders WHERE order_id = $1";
/// Many orders' router rows.
pub(crate) const ORDERS_PRODUCTS: &str =
    "SELECT order_id, products FROM orders WHERE order_id = ANY($1)";
/// [`ORDER_ROWS`] routed to the shards of the order's products.
pub(crate) const ORDER_ROWS_ROUTED: &str = select_reservations!(
    "WHERE order_id = $1 AND product_id = ANY($2) ORDER BY product_id, created_at"
);
/// Many orders' rows on one product, locked (one shard per statement).
pub(crate) const PRODUCT_ORDERS_ROWS_FOR_UPDATE: &str = select_reservations!(
    "WHERE product_id = $1 AND order_id = ANY($2) ORDER BY order_id, created_at FOR UPDATE"
);
/// [`LOCK_STOCK`] for one product.
pub(crate) const LOCK_ONE_STOCK: &str =
    "SELECT product_id, available, backorder_limit, located FROM stock \
     WHERE product_id = $1 FOR UPDATE";
/// [`PROBE_LOCKS`] for one product.
pub(crate) const PROBE_ONE_LOCK: &str =
    "SELECT product_id FROM stock WHERE product_id = $1 FOR UPDATE SKIP LOCKED";
/// Products with due rows, unlocked (the sweeper's first step on Citus).
pub(crate) const DUE_PRODUCTS: &str = "SELECT DISTINCT product_id FROM reservations \
     WHERE status = 'active' AND expires_at < now() ORDER BY product_id LIMIT $1";
/// [`DUE_ROWS`] of one product.
pub(crate) const PRODUCT_DUE_ROWS: &str = select_reservations!(
    "WHERE product_id = $1 AND status = 'active' AND expires_at < now() \
     ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED"
);
/// The clock [`SETTLE`] reads inside its UPDATE, read on its own.
pub(crate) const CLOCK: &str = "SELECT clock_timestamp() AS at";
/// [`SETTLE`] with the clock as a parameter, routed by the rows' products.
pub(crate) const SETTLE_AT: &str = "UPDATE reservations SET status = $2, settled_at = $3 \
     WHERE product_id = ANY($4) AND id = ANY($1)";
/// [`APPLY_DELTAS`] for one product (issued in ascending product id: the lock order).
pub(crate) const APPLY_ONE_DELTA: &str = crate::stock_update!(
    "available = available + $2, reserved = reserved + $3",
    "WHERE product_id = $1"
);
/// Writes the router rows of (order, product) pairs, adding products an order's row lacks.
///
/// Not used as written: Citus runs an `INSERT … SELECT` through the coordinator (intermediate
/// results, then one insert per shard), 137 ms for a batch of 32 orders on the 2-worker test
/// cluster; [`route_orders_values`] builds the same write as multi-row `VALUES`, which Citus
/// routes per shard directly (6 ms). Kept as the statement's specification, for its test.
#[cfg(test)]
pub(crate) const ROUTE_ORDERS: &str = "INSERT INTO orders AS o (order_id, products) \
     SELECT g.order_id, array_agg(DISTINCT g.product_id ORDER BY g.product_id) \
       FROM unnest($1::text[], $2::bigint[]) AS g(order_id, product_id) GROUP BY g.order_id \
     ON CONFLICT (order_id) DO UPDATE SET products = o.products || EXCLUDED.products \
     WHERE NOT o.products @> EXCLUDED.products";

/// The router write for `orders` orders (Citus only): `INSERT … VALUES ($1, $2::bigint[]), …`,
/// one row per order (its new products, distinct and ascending), with the conflict rule of
/// `ROUTE_ORDERS`. `orders` ≥ 1; the caller bounds it (one batch).
pub(crate) fn route_orders_values(orders: usize) -> String {
    let rows: Vec<String> = (0..orders)
        .map(|i| format!("(${}, ${}::bigint[])", 2 * i + 1, 2 * i + 2))
        .collect();
    format!(
        "INSERT INTO orders AS o (order_id, products) VALUES {} \
         ON CONFLICT (order_id) DO UPDATE SET products = o.products || EXCLUDED.products \
         WHERE NOT o.products @> EXCLUDED.products",
        rows.join(", ")
    )
}

/// Rows per [`insert_reservations_values`] statement at most: 6 parameters each, far under
/// PostgreSQL's 65,535, and a bounded number of statement texts per connection.
pub(crate) const RESERVATIONS_VALUES_CHUNK: usize = 128;

/// [`INSERT_RESERVATIONS`] on Citus: `INSERT … VALUES (…), …`, one row per reservation, six
/// parameters each in the order of the arrays. Citus routes each row of a multi-row VALUES to
/// its shard; the `INSERT … SELECT … FROM unnest` form instead runs through the coordinator
/// (its rows are computed there, then copied to the shards), which cost a multi-item order on
/// Citus most of its time. `rows` in 1..=[`RESERVATIONS_VALUES_CHUNK`].
pub(crate) fn insert_reservations_values(rows: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|i| {
            let p = 6 * i;
            format!(
                "(${}::uuid, ${}::text, ${}::bigint, ${}::int, \
                 now() + make_interval(secs => ${}::float8), ${}::text)",
                p + 1,
                p + 2,
                p + 3,
                p + 4,
                p + 5,
                p + 6
            )
        })
        .collect();
    format!(
        "INSERT INTO reservations (id, order_id, product_id, quantity, expires_at, request_key) \
         VALUES {} RETURNING id, created_at, expires_at",
        values.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reservation_values_write_what_the_unnest_form_writes() {
        let two = insert_reservations_values(2);
        let head = |s: &str| s[..s.find(" SELECT").or(s.find(" VALUES")).unwrap_or(0)].to_owned();
        assert_eq!(head(&two), head(INSERT_RESERVATIONS));
        assert!(two.contains("now() + make_interval(secs => $5::float8), $6::text), ($7::uuid"));
        assert!(two.ends_with("$12::text) RETURNING id, created_at, expires_at"));
        assert!(INSERT_RESERVATIONS.contains("now() + make_interval(secs => g.ttl_s)"));
    }

    #[test]
    fn the_router_values_keep_the_conflict_rule() {
        let two = route_orders_values(2);
        assert!(two.contains("VALUES ($1, $2::bigint[]), ($3, $4::bigint[]) ON CONFLICT"));
        let tail = |s: &str| s[s.find("ON CONFLICT").unwrap_or(0)..].to_owned();
        assert_eq!(tail(&two), tail(ROUTE_ORDERS));
    }

    #[test]
    fn every_stock_write_moves_the_version() {
        assert_eq!(
            crate::stock_update!("available = $2", "WHERE product_id = $1"),
            "UPDATE stock SET available = $2, version = version + 1, updated_at = now() \
             WHERE product_id = $1"
        );
        assert!(APPLY_DELTAS.contains("version = version + 1, updated_at = now()"));
        assert!(INSERT_RESERVATIONS.ends_with("RETURNING id, created_at, expires_at"));
    }
}
