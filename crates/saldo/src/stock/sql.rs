//! Every SQL statement of the stock side, in one place: the reservation rows, the stock rows, the
//! routers, backorders, locations, sales, counts and repairs. Where Citus needs its own form the
//! statement is a named pair ([`Sql::pair`], [`Sql::per_key`]); the store's dialect picks the
//! text once. Statements whose Citus form takes other parameters (a router read first, a clock
//! read first, one statement per product) are written out twice here, `CITUS_` beside its
//! single-node form, and chosen by the data-access functions of [`super::rows`].
//!
//! Text only: nothing here runs a statement. Values are always bound, never spliced in.

use crate::store::dialect::Sql;
use crate::store::values::{Col, Values};

/// The columns of a reservation row as `rows::reservations::parse` reads them (by name). Every
/// query that hands rows to it selects these. `lapsed`: stored active but past its expiry by the
/// transaction's clock (`now()`, the same instant for every statement of the transaction).
#[macro_export]
#[doc(hidden)]
macro_rules! reservation_columns {
    () => {
        "id, order_id, product_id, quantity, status, expires_at, created_at, request_key, backordered, allocated, order_position, reference, metadata, returned, (status = 'active' AND expires_at <= now()) AS lapsed"
    };
}

/// `UPDATE stock SET <set>, version = version + 1, updated_at = now() <rest> RETURNING <the
/// row>`: every write to a stock row moves its version (the optimistic strategy's check, the
/// lab's traces and the product's event position rely on it), stamps `updated_at`, and returns
/// the row as it now is (each write's `stock.changed` event is made from it), so the tail is
/// written once, here.
#[macro_export]
#[doc(hidden)]
macro_rules! stock_update {
    ($set:literal, $rest:literal) => {
        concat!(
            "UPDATE stock SET ",
            $set,
            ", version = version + 1, updated_at = now() ",
            $rest,
            " RETURNING stock.product_id, stock.available, stock.reserved, stock.version, \
             stock.backorder_limit, stock.backordered"
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

// ---- Reservation rows -------------------------------------------------------------------------

/// One order's rows, per product oldest first (the order `decide` relies on).
pub(crate) const ORDER_ROWS: Sql = Sql::same(select_reservations!(
    "WHERE order_id = $1 ORDER BY product_id, created_at"
));
/// The same, locked: the first step of confirm, release and extend (reservation rows before
/// stock rows: the global lock order).
pub(crate) const ORDER_ROWS_FOR_UPDATE: Sql = Sql::same(select_reservations!(
    "WHERE order_id = $1 ORDER BY product_id, created_at FOR UPDATE"
));
/// Many orders' rows (a batch's), read after its stock rows are locked: the idempotency
/// decision is made on what committed before the batch held them. (On Citus an unlocked read
/// across shards, which it allows.)
pub(crate) const ORDERS_ROWS: Sql = Sql::same(select_reservations!(
    "WHERE order_id = ANY($1) ORDER BY order_id, product_id, created_at"
));
/// Many orders' rows locked in one consistent order (order id, then as
/// [`ORDER_ROWS_FOR_UPDATE`] locks one order's), before any stock row.
pub(crate) const ORDERS_ROWS_FOR_UPDATE: Sql = Sql::same(select_reservations!(
    "WHERE order_id = ANY($1) ORDER BY order_id, product_id, created_at FOR UPDATE"
));
/// Active rows past their expiry, oldest first, skipping rows a confirm holds (the sweeper).
pub(crate) const DUE_ROWS: Sql = Sql::same(select_reservations!(
    "WHERE status = 'active' AND expires_at <= now() \
     ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED"
));
/// Moves rows to a final status with their order's new event position; `settled_at` from the
/// clock, read while the stock rows are locked (see `flows::settle`). Joined on the product
/// (the distribution column) as well as the id, so Citus routes each row to its shard.
pub(crate) const SETTLE: Sql = Sql::same(
    "UPDATE reservations r SET status = $4, settled_at = clock_timestamp(),             order_position = d.position        FROM unnest($1::uuid[], $2::bigint[], $3::bigint[]) AS d(id, product_id, position)       WHERE r.product_id = d.product_id AND r.id = d.id",
);
/// Writes reservation rows, one per element of the parallel arrays (id, order id, product,
/// quantity, TTL in seconds, request key, allocated), and returns what only the database knows:
/// each row's `created_at` and `expires_at` by id (returning whole rows cost a batch of 128 rows
/// measurably: BENCHMARKS.md). Every reserve, re-reserve and batch inserts through this.
pub(crate) const INSERT_RESERVATIONS: Sql = Sql::same(
    "INSERT INTO reservations (id, order_id, product_id, quantity, expires_at, request_key, \
                               allocated, order_position, reference, metadata) \
     SELECT g.id, g.order_id, g.product_id, g.quantity, \
            now() + make_interval(secs => g.ttl_s), g.request_key, g.allocated, g.position, \
            g.reference, g.metadata \
       FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::int[], $5::float8[], $6::text[], \
                   $7::bool[], $8::bigint[], $9::text[], $10::jsonb[]) \
            AS g(id, order_id, product_id, quantity, ttl_s, request_key, allocated, position, \
                 reference, metadata) \
     RETURNING id, created_at, expires_at",
);
/// Rows per [`CITUS_INSERT_RESERVATIONS`] statement at most: 9 parameters each, far under
/// PostgreSQL's 65,535, and a bounded number of statement texts per connection.
pub(crate) const RESERVATIONS_VALUES_CHUNK: usize = 128;
/// [`INSERT_RESERVATIONS`] on Citus, as multi-row `VALUES` (Citus routes each row to its
/// shard; the `unnest` form runs through the coordinator). No row there has allocations
/// (stock per location is not offered on Citus).
pub(crate) static CITUS_INSERT_RESERVATIONS: Values = Values::new(
    "INSERT INTO reservations (id, order_id, product_id, quantity, expires_at, request_key, \
                               order_position, reference, metadata)",
    &[
        Col::cast("::uuid"),
        Col::cast("::text"),
        Col::cast("::bigint"),
        Col::cast("::int"),
        Col::wrapped("now() + make_interval(secs => ", "::float8)"),
        Col::cast("::text"),
        Col::cast("::bigint"),
        Col::cast("::text"),
        Col::cast("::jsonb"),
    ],
    "RETURNING id, created_at, expires_at",
);
/// The product the routed Citus statements below are routed by: the order's router row.
pub(crate) const CITUS_ORDER_PRODUCTS: Sql =
    Sql::same("SELECT products FROM orders WHERE order_id = $1");
/// Many orders' router rows.
pub(crate) const CITUS_ORDERS_PRODUCTS: Sql =
    Sql::same("SELECT order_id, products FROM orders WHERE order_id = ANY($1)");
/// [`ORDER_ROWS`] routed to the shards of the order's products.
pub(crate) const CITUS_ORDER_ROWS: Sql = Sql::same(select_reservations!(
    "WHERE order_id = $1 AND product_id = ANY($2) ORDER BY product_id, created_at"
));
/// Many orders' rows on one product, locked (one shard per statement).
pub(crate) const CITUS_PRODUCT_ORDERS_ROWS_FOR_UPDATE: Sql = Sql::same(select_reservations!(
    "WHERE product_id = $1 AND order_id = ANY($2) ORDER BY order_id, created_at FOR UPDATE"
));
/// Whether one of `$1`'s reservations is due, unlocked: the probe before a reclaim, so that a
/// refusal with nothing lapsed costs one indexed read and no transaction.
pub(crate) const ANY_DUE_OF: Sql = Sql::same(
    "SELECT EXISTS (SELECT 1 FROM reservations \
      WHERE product_id = ANY($1) AND status = 'active' AND expires_at <= now()) AS due",
);
/// Products with due rows, unlocked (the sweeper's first step on Citus).
pub(crate) const CITUS_DUE_PRODUCTS: Sql = Sql::same(
    "SELECT DISTINCT product_id FROM reservations \
     WHERE status = 'active' AND expires_at <= now() ORDER BY product_id LIMIT $1",
);
/// [`DUE_ROWS`] of one product: the sweeper's step per product on Citus, and what a refused
/// take reclaims on either layout.
pub(crate) const PRODUCT_DUE_ROWS: Sql = Sql::same(select_reservations!(
    "WHERE product_id = $1 AND status = 'active' AND expires_at <= now() \
     ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED"
));
/// The clock [`SETTLE`] reads inside its UPDATE, read on its own (Citus refuses a VOLATILE
/// function in an UPDATE of a distributed table).
pub(crate) const CLOCK: Sql = Sql::same("SELECT clock_timestamp() AS at");
/// [`SETTLE`] with the clock as a parameter (`$5`).
pub(crate) const CITUS_SETTLE: Sql = Sql::same(
    "UPDATE reservations r SET status = $4, settled_at = $5, order_position = d.position \
       FROM unnest($1::uuid[], $2::bigint[], $3::bigint[]) AS d(id, product_id, position) \
      WHERE r.product_id = d.product_id AND r.id = d.id",
);
/// The router write (Citus only): one row per order, its new products distinct and ascending;
/// an order's row gains the products it did not list. Multi-row `VALUES`, routed per shard.
pub(crate) static CITUS_ROUTE_ORDERS: Values = Values::new(
    "INSERT INTO orders AS o (order_id, products)",
    &[Col::cast(""), Col::cast("::bigint[]")],
    "ON CONFLICT (order_id) DO UPDATE SET products = o.products || EXCLUDED.products \
     WHERE NOT o.products @> EXCLUDED.products",
);
/// Moves the expiry of rows this transaction holds locked and decided on (and their order's
/// event position, `$3`).
pub(crate) const EXTEND_ROWS: Sql = Sql::same(
    "UPDATE reservations SET expires_at = now() + make_interval(secs => $2), \
            order_position = $3 \
     WHERE id = ANY($1) AND status = 'active' RETURNING id, expires_at",
);
/// The last event position of each of these orders (the greatest over its rows).
pub(crate) const ORDER_POSITIONS: Sql = Sql::same(
    "SELECT order_id, max(order_position) AS position FROM reservations \
     WHERE order_id = ANY($1) GROUP BY order_id",
);
/// The transaction's clock: an extension's comparisons and the new expiry use the same `now()`.
pub(crate) const NOW: Sql = Sql::same("SELECT now() AS now");

// ---- Stock rows -------------------------------------------------------------------------------

/// The columns a take decides on ([`super::model::StockRow`]).
macro_rules! stock_row_columns {
    () => {
        "product_id, available, backorder_limit, backordered, located"
    };
}

/// A product's stock row, unlocked (the admin read; the optimistic and naive first read).
pub(crate) const STOCK_ROW: Sql = Sql::same(
    "SELECT available, reserved, version, backorder_limit, backordered, located FROM stock \
     WHERE product_id = $1",
);
/// What a declined take read of a product's row, unlocked (to name a refusal, or to see that
/// the product is stocked per location or takes backorders).
pub(crate) const SEEN_ROW: Sql = Sql::same(concat!(
    "SELECT ",
    stock_row_columns!(),
    " FROM stock WHERE product_id = $1"
));
/// Locks stock rows in the global lock order (ascending product id) and reads what a take
/// decides on; on Citus one product (one shard) per statement, in that order.
pub(crate) const LOCK_STOCK: Sql = Sql::per_key(
    concat!(
        "SELECT ",
        stock_row_columns!(),
        " FROM stock WHERE product_id = ANY($1) ORDER BY product_id FOR UPDATE"
    ),
    concat!(
        "SELECT ",
        stock_row_columns!(),
        " FROM stock WHERE product_id = $1 FOR UPDATE"
    ),
);
/// Of these products, those no other transaction holds locked (never waits).
pub(crate) const PROBE_LOCKS: Sql = Sql::per_key(
    "SELECT product_id FROM stock WHERE product_id = ANY($1) ORDER BY product_id \
     FOR UPDATE SKIP LOCKED",
    "SELECT product_id FROM stock WHERE product_id = $1 FOR UPDATE SKIP LOCKED",
);
/// Adds (available, reserved) deltas to many stock rows in one statement.
pub(crate) const APPLY_DELTAS: Sql = Sql::same(crate::stock_update!(
    "available = stock.available + d.a, reserved = stock.reserved + d.r",
    "FROM unnest($1::bigint[], $2::int[], $3::int[]) AS d(product_id, a, r) \
     WHERE stock.product_id = d.product_id"
));
/// [`APPLY_DELTAS`] for one product (on Citus, issued in ascending product id: the lock order).
pub(crate) const APPLY_ONE_DELTA: Sql = Sql::same(crate::stock_update!(
    "available = available + $2, reserved = reserved + $3",
    "WHERE product_id = $1"
));
/// The locked path's write of one row it holds: what it took (or sold), reserved and promised.
pub(crate) const ADD_TO_ROW: Sql = Sql::same(crate::stock_update!(
    "available = available + $2, reserved = reserved + $3, backordered = backordered + $4",
    "WHERE product_id = $1"
));
/// Creates a product at zero when it is new (a count or a location count).
pub(crate) const ENSURE_PRODUCT: Sql = Sql::same(
    "INSERT INTO stock (product_id, available) VALUES ($1, 0) ON CONFLICT (product_id) DO NOTHING",
);
/// One stock row locked with every column the admin paths answer with (and `bundle`: a
/// bundle's own row takes no units).
pub(crate) const LOCK_ROW: Sql = Sql::same(
    "SELECT available, reserved, version, backorder_limit, backordered, located, bundle \
     FROM stock WHERE product_id = $1 FOR UPDATE",
);
/// A count or an adjustment: the row's new `available`.
pub(crate) const SET_AVAILABLE: Sql = Sql::same(crate::stock_update!(
    "available = $2",
    "WHERE product_id = $1"
));
/// A physical count or an adjustment, append-only (the audit's history).
pub(crate) const RECORD_MOVEMENT: Sql = Sql::same(
    "INSERT INTO stock_movements (product_id, kind, quantity, reason, location_id) \
     VALUES ($1, $2, $3, $4, $5) RETURNING id",
);
/// A repair's write of the counters the history says.
pub(crate) const REPAIR_ROW: Sql = Sql::same(crate::stock_update!(
    "available = $2, reserved = $3, backordered = $4",
    "WHERE product_id = $1"
));

// ---- Backorders -------------------------------------------------------------------------------

pub(crate) const SET_POLICY: Sql = Sql::same(crate::stock_update!(
    "backorder_limit = $2",
    "WHERE product_id = $1"
));
/// The arrival number comes from the sequence here, under the stock row lock.
pub(crate) const MARK_BACKORDERS: Sql = Sql::same(
    "UPDATE reservations SET backordered = d.b, \
     backorder_arrival = nextval('backorder_arrivals') \
     FROM unnest($1::uuid[], $2::int[]) AS d(id, b) WHERE reservations.id = d.id",
);
/// Dropped backorders of released or expired rows (their stock rows already locked).
pub(crate) const DROP_BACKORDERS: Sql = Sql::same(crate::stock_update!(
    "backordered = stock.backordered - d.b",
    "FROM unnest($1::bigint[], $2::int[]) AS d(product_id, b) \
     WHERE stock.product_id = d.product_id"
));
/// Every live backorder of the product, before its stock row is locked, in the order batched
/// confirms lock many orders' rows (order id, product, created_at): two lockers of many orders'
/// rows never wait on each other in a cycle. (The fill reads them again in arrival order.)
pub(crate) const PRELOCK_BACKORDERS: Sql = Sql::same(
    "SELECT id FROM reservations WHERE product_id = $1 AND backordered > 0 \
     AND status IN ('active', 'confirmed') ORDER BY order_id, product_id, created_at FOR UPDATE",
);
/// The oldest live backorders that `$2` units reach (each row starts before `$2` is used up),
/// locked; the outer conditions are checked again on the locked version.
pub(crate) const OLDEST_BACKORDERS: Sql = Sql::same(
    "SELECT id, order_id, product_id, status, backordered, backorder_arrival FROM reservations \
     WHERE id IN (SELECT id FROM (SELECT id, sum(backordered) OVER \
                  (ORDER BY backorder_arrival, id) - backordered AS before \
                  FROM reservations WHERE product_id = $1 AND backordered > 0 \
                  AND status IN ('active', 'confirmed')) q WHERE before < $2::int) \
       AND backordered > 0 AND status IN ('active', 'confirmed') \
     ORDER BY backorder_arrival, id FOR UPDATE",
);
pub(crate) const FILL_ROWS: Sql = Sql::same(
    "UPDATE reservations SET backordered = reservations.backordered - d.f, \
            order_position = d.position \
     FROM unnest($1::uuid[], $2::int[], $3::bigint[]) AS d(id, f, position) \
     WHERE reservations.id = d.id",
);
pub(crate) const RECORD_FILLS: Sql = Sql::same(
    "INSERT INTO backorder_fills (product_id, reservation_id, arrival, quantity, sold, \
                                  movement_id) \
     SELECT $1, d.id, d.arrival, d.f, d.sold, $2 \
       FROM unnest($3::uuid[], $4::bigint[], $5::int[], $6::bool[]) AS d(id, arrival, f, sold)",
);
/// Filled units leave available: to reserved for active rows, out of on hand (sold) for
/// confirmed ones; either way they leave `backordered`.
pub(crate) const FILL_STOCK: Sql = Sql::same(crate::stock_update!(
    "available = available - $2 - $3, reserved = reserved + $2, \
     backordered = backordered - $2 - $3",
    "WHERE product_id = $1"
));

// ---- Locations --------------------------------------------------------------------------------

/// A product's location rows, locked in (product, location) order, with their priority.
pub(crate) const LOCK_LOCATIONS: Sql = Sql::same(
    "SELECT sl.product_id, sl.location_id, sl.available, sl.reserved, l.priority \
       FROM stock_locations sl JOIN locations l USING (location_id) \
      WHERE sl.product_id = ANY($1) \
      ORDER BY sl.product_id, sl.location_id FOR UPDATE OF sl",
);
/// Products' location rows with the units active reservations hold allocated at each (what a
/// repair sets `reserved` to), in (product, location) order. `$1`: the products.
pub(crate) const LOCATIONS_WITH_HELD: Sql = Sql::same(
    "SELECT sl.product_id, sl.location_id, sl.available::bigint AS available, \
            sl.reserved::bigint AS reserved, \
            coalesce((SELECT sum(a.quantity) \
                        FROM reservation_allocations a \
                        JOIN reservations r ON r.id = a.reservation_id \
                       WHERE a.product_id = sl.product_id AND a.location_id = sl.location_id \
                         AND r.status = 'active'), 0)::bigint AS held \
       FROM stock_locations sl \
      WHERE sl.product_id = ANY($1) \
      ORDER BY sl.product_id, sl.location_id",
);
/// Locks the given (product, location) rows in the lock order.
pub(crate) const LOCK_LOCATION_ROWS: Sql = Sql::same(
    "SELECT 1 FROM stock_locations \
     WHERE (product_id, location_id) IN (SELECT * FROM unnest($1::bigint[], $2::text[])) \
     ORDER BY product_id, location_id FOR UPDATE",
);
pub(crate) const APPLY_LOCATION_DELTAS: Sql = Sql::same(
    "UPDATE stock_locations sl \
        SET available = sl.available + d.a, reserved = sl.reserved + d.r, updated_at = now() \
       FROM unnest($1::bigint[], $2::text[], $3::int[], $4::int[]) \
            AS d(product_id, location_id, a, r) \
      WHERE sl.product_id = d.product_id AND sl.location_id = d.location_id",
);
pub(crate) const INSERT_ALLOCATIONS: Sql = Sql::same(
    "INSERT INTO reservation_allocations (reservation_id, product_id, location_id, quantity) \
     SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::int[])",
);
/// A fill at a location (`$4`) of product `$3`: each filled row (`$1`, units `$2`, one per row)
/// is allocated there, its allocation at that location growing when it had one; the rows are
/// marked allocated (a row wholly backordered had no allocation yet).
pub(crate) const ALLOCATE_FILLS: Sql = Sql::same(
    "WITH marked AS ( \
       UPDATE reservations SET allocated = true WHERE id = ANY($1) AND NOT allocated) \
     INSERT INTO reservation_allocations (reservation_id, product_id, location_id, quantity) \
     SELECT d.id, $3, $4, d.f FROM unnest($1::uuid[], $2::int[]) AS d(id, f) \
     ON CONFLICT (reservation_id, location_id) DO UPDATE \
        SET quantity = reservation_allocations.quantity + EXCLUDED.quantity",
);
pub(crate) const ALLOCATIONS_OF: Sql = Sql::same(
    "SELECT reservation_id, product_id, location_id, quantity \
       FROM reservation_allocations WHERE reservation_id = ANY($1) \
      ORDER BY product_id, location_id",
);
pub(crate) const ENSURE_LOCATION: Sql = Sql::same(
    "INSERT INTO locations (location_id) VALUES ($1) ON CONFLICT (location_id) DO NOTHING",
);
/// A location's retirement, read under a share lock: a count or a priority holds it until it
/// commits, so a retirement waits for them and they for it (never a count into a location
/// being retired). Taken before any stock row (the order retirement takes them in too).
pub(crate) const LOCATION_FOR_SHARE: Sql =
    Sql::same("SELECT retired_at FROM locations WHERE location_id = $1 FOR SHARE");
/// A location locked for its retirement.
pub(crate) const LOCATION_FOR_UPDATE: Sql = Sql::same(
    "SELECT location_id, priority, retired_at FROM locations WHERE location_id = $1 FOR UPDATE",
);
/// What a location holds over all products, its rows locked (product order, as every taker
/// locks them), so no take or count changes it before the retirement commits.
pub(crate) const LOCATION_HOLDINGS: Sql = Sql::same(
    "SELECT coalesce(sum(available), 0)::bigint AS available, \
            coalesce(sum(reserved), 0)::bigint AS reserved, \
            coalesce(sum(in_states), 0)::bigint AS in_states \
       FROM (SELECT available, reserved, damaged + safety_stock + incoming AS in_states \
               FROM stock_locations WHERE location_id = $1 \
              ORDER BY product_id FOR UPDATE) held",
);
pub(crate) const RETIRE_LOCATION: Sql = Sql::same(
    "UPDATE locations SET retired_at = now() WHERE location_id = $1 \
     RETURNING location_id, priority, retired_at",
);
pub(crate) const UPSERT_PRIORITY: Sql = Sql::same(
    "INSERT INTO locations (location_id, priority) VALUES ($1, $2) \
     ON CONFLICT (location_id) DO UPDATE SET priority = EXCLUDED.priority \
     RETURNING location_id, priority, retired_at",
);
/// A product's first location count: what it held until now becomes the default location's.
pub(crate) const ADOPT_DEFAULT: Sql = Sql::same(
    "INSERT INTO stock_locations (product_id, location_id, available, reserved) \
     VALUES ($1, $2, $3, $4)",
);
/// ... and its active reservations (and confirmed ones still waiting for a backorder, which a
/// fill at a location will allocate further) are allocated there, what they hold on hand, so
/// every invariant holds from the start.
pub(crate) const ALLOCATE_ACTIVE_TO_DEFAULT: Sql = Sql::same(
    "WITH moved AS ( \
       UPDATE reservations SET allocated = true \
        WHERE product_id = $1 AND NOT allocated \
          AND (status = 'active' OR (status = 'confirmed' AND backordered > 0)) \
        RETURNING id, product_id, quantity - backordered AS held) \
     INSERT INTO reservation_allocations (reservation_id, product_id, location_id, quantity) \
     SELECT id, product_id, $2, held FROM moved WHERE held > 0",
);
pub(crate) const UPSERT_LOCATION_COUNT: Sql = Sql::same(
    "INSERT INTO stock_locations (product_id, location_id, available) VALUES ($1, $2, $3) \
     ON CONFLICT (product_id, location_id) DO UPDATE SET available = EXCLUDED.available, \
     updated_at = now()",
);
pub(crate) const SET_LOCATED_TOTAL: Sql = Sql::same(crate::stock_update!(
    "available = $2, located = true",
    "WHERE product_id = $1"
));
pub(crate) const STOCK_WITH_LOCATIONS: Sql = Sql::same(
    "SELECT s.available, s.reserved, s.version, s.backorder_limit, s.backordered, \
            s.damaged, s.safety_stock, s.incoming, \
            sl.location_id, sl.available AS location_available, \
            sl.reserved AS location_reserved, sl.damaged AS location_damaged, \
            sl.safety_stock AS location_safety_stock, sl.incoming AS location_incoming \
       FROM stock s LEFT JOIN stock_locations sl USING (product_id) \
      WHERE s.product_id = $1 ORDER BY sl.location_id",
);

// ---- Sales ------------------------------------------------------------------------------------

/// A sale's items with the sale's reference and metadata (on every row: one round trip).
pub(crate) const SALE_ITEMS: Sql = Sql::same(
    "SELECT i.product_id, i.quantity, i.sold_at, s.reference, s.metadata \
       FROM sale_items i JOIN sales s ON s.sale_id = i.sale_id \
      WHERE i.sale_id = $1 ORDER BY i.product_id",
);
/// Citus: `sale_items` refers to `sales`, a reference table, which Citus writes only in a
/// transaction that reached the shards over one connection per node; the multi-shard read of
/// the sale's items would not do that in parallel mode. Nothing is sent on one node.
pub(crate) const SALE_MODE: Sql =
    Sql::citus_only("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'");
pub(crate) const INSERT_SALE: Sql =
    Sql::same("INSERT INTO sales (sale_id, reference, metadata) VALUES ($1, $2, $3)");
/// A sale's fast path: `available` only (sold units were never reserved), the condition inside
/// the UPDATE; a product stocked per location is left to the locked path.
pub(crate) const SELL_UNITS: Sql = Sql::same(crate::stock_update!(
    "available = available - $2",
    "WHERE product_id = $1 AND available >= $2 AND NOT located"
));
pub(crate) const INSERT_SALE_ITEMS: Sql = Sql::same(
    "INSERT INTO sale_items (sale_id, product_id, quantity) \
     SELECT $1, g.product_id, g.quantity FROM unnest($2::bigint[], $3::int[]) \
     AS g(product_id, quantity) RETURNING product_id, quantity, sold_at",
);
/// Where a sale's units came from (located products only), by product then location.
pub(crate) const SALE_ALLOCATIONS: Sql = Sql::same(
    "SELECT product_id, location_id, quantity FROM sale_allocations \
      WHERE sale_id = $1 ORDER BY product_id, location_id",
);
pub(crate) const INSERT_SALE_ALLOCATIONS: Sql = Sql::same(
    "INSERT INTO sale_allocations (sale_id, product_id, location_id, quantity) \
     SELECT $1, g.product_id, g.location_id, g.quantity \
       FROM unnest($2::bigint[], $3::text[], $4::int[]) AS g(product_id, location_id, quantity)",
);

// ---- Returns ----------------------------------------------------------------------------------

/// A return's items with its order and reason (on every row: one round trip).
pub(crate) const RETURN_ITEMS: Sql = Sql::same(
    "SELECT r.order_id, r.reason, i.product_id, i.quantity, i.location_id, i.state, \
            i.returned_at \
       FROM return_items i JOIN order_returns r ON r.return_id = i.return_id \
      WHERE i.return_id = $1 ORDER BY i.product_id",
);
pub(crate) const INSERT_RETURN: Sql =
    Sql::same("INSERT INTO order_returns (return_id, order_id, reason) VALUES ($1, $2, $3)");
/// Raises a confirmed line's returned count by `$3`, never past what left the shelf for the
/// customer: the condition inside the UPDATE (the line's row is held locked already, and the
/// CHECK `reservations_returned_within_confirmed` stands behind it). Zero rows: refused. The
/// product is named so that Citus routes it to the line's shard.
pub(crate) const RAISE_RETURNED: Sql = Sql::same(
    "UPDATE reservations SET returned = returned + $3, order_position = $4 \
      WHERE id = $1 AND product_id = $2 AND status = 'confirmed' \
        AND returned + $3 <= quantity - backordered \
      RETURNING returned",
);
/// What a refused return is told: the line's confirmed and already returned units.
pub(crate) const LINE_RETURNS: Sql = Sql::same(
    "SELECT status, (quantity - backordered)::bigint AS confirmed, returned::bigint AS returned \
       FROM reservations WHERE id = $1 AND product_id = $2",
);
pub(crate) const INSERT_RETURN_ITEMS: Sql = Sql::same(
    "INSERT INTO return_items (return_id, product_id, quantity, location_id, state) \
     SELECT $1, g.product_id, g.quantity, g.location_id, g.state \
       FROM unnest($2::bigint[], $3::int[], $4::text[], $5::text[]) \
            AS g(product_id, quantity, location_id, state) \
     RETURNING product_id, quantity, location_id, state, returned_at",
);
/// Whether `$1` is stocked at location `$2`.
pub(crate) const STOCKED_AT: Sql = Sql::same(
    "SELECT EXISTS (SELECT 1 FROM stock_locations WHERE product_id = $1 AND location_id = $2) \
         AS stocked",
);

// ---- Stock states and moves (V21) -------------------------------------------------------------

/// Adds deltas to a product's `available` and state columns, never below zero (the condition
/// inside the UPDATE; the row is held locked and the CHECKs stand behind it). Zero rows: refused.
pub(crate) const MOVE_STOCK: Sql = Sql::same(crate::stock_update!(
    "available = available + $2, damaged = damaged + $3, safety_stock = safety_stock + $4, \
     incoming = incoming + $5",
    "WHERE product_id = $1 AND available + $2 >= 0 AND damaged + $3 >= 0 \
       AND safety_stock + $4 >= 0 AND incoming + $5 >= 0"
));
/// The state columns of a product's row (read under its lock).
pub(crate) const STOCK_STATES: Sql =
    Sql::same("SELECT damaged, safety_stock, incoming FROM stock WHERE product_id = $1");
/// A located product's rows at locations `$2`, locked in location order (its stock row is held).
pub(crate) const LOCK_LOCATIONS_FOR_MOVE: Sql = Sql::same(
    "SELECT location_id, available, damaged, safety_stock, incoming FROM stock_locations \
      WHERE product_id = $1 AND location_id = ANY($2) ORDER BY location_id FOR UPDATE",
);
/// [`MOVE_STOCK`] at one location of a located product.
pub(crate) const MOVE_AT_LOCATION: Sql = Sql::same(
    "UPDATE stock_locations SET available = available + $3, damaged = damaged + $4, \
            safety_stock = safety_stock + $5, incoming = incoming + $6, updated_at = now() \
      WHERE product_id = $1 AND location_id = $2 AND available + $3 >= 0 \
        AND damaged + $4 >= 0 AND safety_stock + $5 >= 0 AND incoming + $6 >= 0 \
     RETURNING location_id",
);
/// The columns of a stored move.
macro_rules! move_columns {
    () => {
        "move_id, quantity, from_state, from_location, to_state, to_location, reason, moved_at"
    };
}
/// The move `$2` of product `$1`.
pub(crate) const FIND_MOVE: Sql = Sql::same(concat!(
    "SELECT ",
    move_columns!(),
    " FROM stock_moves WHERE product_id = $1 AND move_id = $2"
));
/// Records a move (stamped while the product's row is held).
pub(crate) const INSERT_MOVE: Sql = Sql::same(concat!(
    "INSERT INTO stock_moves (product_id, move_id, quantity, from_state, from_location, \
                              to_state, to_location, reason) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING ",
    move_columns!()
));

// ---- Bundles (V24) ---------------------------------------------------------------------------

/// Every unit a stock row holds, in any state, reserved or backordered (bigint: six int sums).
macro_rules! bundle_held {
    () => {
        "available::bigint + reserved + backordered + damaged + safety_stock + incoming AS held"
    };
}

/// The recipes of the bundles among `$1`: one row per component, by bundle then component.
pub(crate) const BUNDLE_RECIPES: Sql = Sql::same(
    "SELECT bundle_id, component_id, quantity FROM bundle_components \
     WHERE bundle_id = ANY($1) ORDER BY bundle_id, component_id",
);
/// What a bundle's declaration checks of its rows, locked in the global lock order (on Citus
/// one product per statement, in that order): which exist, which are bundles, whether each
/// takes units, and its `available` (the answer's derived availability).
pub(crate) const BUNDLE_CANDIDATES: Sql = Sql::per_key(
    concat!(
        "SELECT product_id, bundle, located, backorder_limit, available, ",
        bundle_held!(),
        " FROM stock WHERE product_id = ANY($1) ORDER BY product_id FOR UPDATE"
    ),
    concat!(
        "SELECT product_id, bundle, located, backorder_limit, available, ",
        bundle_held!(),
        " FROM stock WHERE product_id = $1 FOR UPDATE"
    ),
);
/// The `available` of each of `$1` (a bundle's read).
pub(crate) const AVAILABLE_OF: Sql =
    Sql::same("SELECT product_id, available FROM stock WHERE product_id = ANY($1)");
/// A bundle that has the product `$1` as a component (no nesting: a bundle is never a
/// component).
pub(crate) const BUNDLES_OF_COMPONENT: Sql = Sql::same(
    "SELECT bundle_id FROM bundle_components WHERE component_id = $1 ORDER BY bundle_id LIMIT 1",
);
/// Forgets a bundle's recipe.
pub(crate) const CLEAR_RECIPE: Sql =
    Sql::same("DELETE FROM bundle_components WHERE bundle_id = $1");
/// One component of a bundle's recipe.
pub(crate) const ADD_COMPONENT: Sql = Sql::same(
    "INSERT INTO bundle_components (bundle_id, component_id, quantity) VALUES ($1, $2, $3)",
);
/// Flags (or unflags) a product as a bundle. Not a write of its units: the version stays.
pub(crate) const SET_BUNDLE_FLAG: Sql =
    Sql::same("UPDATE stock SET bundle = $2, updated_at = now() WHERE product_id = $1");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_citus_reservation_values_write_what_the_unnest_form_writes() {
        let two = CITUS_INSERT_RESERVATIONS.statement(2);
        assert!(two.starts_with(
            "INSERT INTO reservations (id, order_id, product_id, quantity, expires_at, \
             request_key, order_position, reference, metadata) VALUES ($1::uuid"
        ));
        assert!(two.contains(
            "now() + make_interval(secs => $5::float8), $6::text, $7::bigint, $8::text, \
             $9::jsonb), ($10::uuid"
        ));
        assert!(two.ends_with("$18::jsonb) RETURNING id, created_at, expires_at"));
        assert!(INSERT_RESERVATIONS
            .single()
            .contains("now() + make_interval(secs => g.ttl_s)"));
        assert!(INSERT_RESERVATIONS
            .single()
            .ends_with("RETURNING id, created_at, expires_at"));
    }

    #[test]
    fn the_router_values_keep_the_conflict_rule() {
        let two = CITUS_ROUTE_ORDERS.statement(2);
        assert!(two.contains("VALUES ($1, $2::bigint[]), ($3, $4::bigint[]) ON CONFLICT"));
        assert!(two.ends_with("WHERE NOT o.products @> EXCLUDED.products"));
    }

    #[test]
    fn every_stock_write_moves_the_version() {
        assert_eq!(
            crate::stock_update!("available = $2", "WHERE product_id = $1"),
            "UPDATE stock SET available = $2, version = version + 1, updated_at = now() \
             WHERE product_id = $1 RETURNING stock.product_id, stock.available, stock.reserved, \
             stock.version, stock.backorder_limit, stock.backordered"
        );
        for write in [
            APPLY_DELTAS,
            APPLY_ONE_DELTA,
            ADD_TO_ROW,
            SET_AVAILABLE,
            REPAIR_ROW,
            SET_POLICY,
            DROP_BACKORDERS,
            FILL_STOCK,
            SET_LOCATED_TOTAL,
            SELL_UNITS,
        ] {
            assert!(write
                .single()
                .contains("version = version + 1, updated_at = now()"));
        }
    }
}
