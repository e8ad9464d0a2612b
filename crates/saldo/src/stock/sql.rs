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
        "id, order_id, product_id, quantity, status, expires_at, created_at, request_key"
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

/// Writes reservation rows, one per element of the parallel arrays (id, order id, product,
/// quantity, TTL in seconds, request key), and returns them whole: the reserve of one order and
/// the batch of many orders insert through this one statement.
pub(crate) const INSERT_RESERVATIONS: &str = concat!(
    "INSERT INTO reservations (id, order_id, product_id, quantity, expires_at, request_key) \
     SELECT g.id, g.order_id, g.product_id, g.quantity, \
            now() + make_interval(secs => g.ttl_s), g.request_key \
       FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::int[], $5::float8[], $6::text[]) \
            AS g(id, order_id, product_id, quantity, ttl_s, request_key) \
     RETURNING ",
    crate::reservation_columns!()
);

/// Adds (available, reserved) deltas to many stock rows in one statement.
pub(crate) const APPLY_DELTAS: &str = crate::stock_update!(
    "available = stock.available + d.a, reserved = stock.reserved + d.r",
    "FROM unnest($1::bigint[], $2::int[], $3::int[]) AS d(product_id, a, r) \
     WHERE stock.product_id = d.product_id"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stock_write_moves_the_version() {
        assert_eq!(
            crate::stock_update!("available = $2", "WHERE product_id = $1"),
            "UPDATE stock SET available = $2, version = version + 1, updated_at = now() \
             WHERE product_id = $1"
        );
        assert!(APPLY_DELTAS.contains("version = version + 1, updated_at = now()"));
        assert!(INSERT_RESERVATIONS.ends_with(crate::reservation_columns!()));
    }
}
