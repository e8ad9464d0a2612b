//! Where InnoDB differs from PostgreSQL, each as a small experiment on the lab's scratch
//! database that returns what it saw (the InnoDB tests assert it, README's "On MySQL/MariaDB"
//! writes it down). Every experiment uses connections of its own (never the pool), so no
//! session setting or open transaction leaks into a race; every lock wait is bounded by a
//! one-second `innodb_lock_wait_timeout`.

use mysql_async::prelude::Queryable;

use crate::innodb::db::{server_code, InnoDbError, Isolation, Lab};

/// What one REPEATABLE READ (or READ COMMITTED) transaction saw of product 1 (stocked with 5)
/// while another session sold one unit in between.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSeen {
    /// A plain SELECT before the other session's commit (5), and the same SELECT after it:
    /// 5 under REPEATABLE READ (the snapshot), 4 under READ COMMITTED.
    pub plain_before: i64,
    pub plain_after: i64,
    /// `SELECT … FOR UPDATE` after it: a current read, 4 under both.
    pub locking_read: i64,
    /// The server error of `UPDATE … SET available = available - 1` after it (none on InnoDB:
    /// it updates the current row; PostgreSQL's REPEATABLE READ fails it with 40001).
    pub update_error: Option<u16>,
    /// A plain SELECT after that UPDATE: 3 (the transaction sees its own write, made on the
    /// current row, under both levels).
    pub plain_after_update: i64,
}

async fn available(conn: &mut impl Queryable, sql: &str) -> Result<i64, InnoDbError> {
    let value: Option<i64> = conn.query_first(sql).await?;
    Ok(value.unwrap_or(-1))
}

const PLAIN: &str = "SELECT available FROM stock WHERE product_id = 1";

/// The snapshot a repeated plain SELECT sees against the current read of a locking read and
/// of an UPDATE, at `iso`.
pub async fn snapshot_vs_current_read(
    lab: &Lab,
    iso: Isolation,
) -> Result<SnapshotSeen, InnoDbError> {
    lab.reset_stock(5).await?;
    let mut a = lab.single(|o| o).await?;
    let mut b = lab.single(|o| o).await?;
    let mut tx = a.start_transaction(iso.tx()).await?;
    let plain_before = available(&mut tx, PLAIN).await?;
    b.query_drop(
        "UPDATE stock SET available = available - 1, reserved = reserved + 1 WHERE product_id = 1",
    )
    .await?;
    let plain_after = available(&mut tx, PLAIN).await?;
    let locking_read = available(&mut tx, &format!("{PLAIN} FOR UPDATE")).await?;
    let update = tx
        .query_drop("UPDATE stock SET available = available - 1, reserved = reserved + 1 WHERE product_id = 1")
        .await;
    let update_error = update
        .err()
        .map(InnoDbError::from)
        .as_ref()
        .and_then(server_code);
    let plain_after_update = available(&mut tx, PLAIN).await?;
    tx.rollback().await?;
    Ok(SnapshotSeen {
        plain_before,
        plain_after,
        locking_read,
        update_error,
        plain_after_update,
    })
}

/// Gap locks: one transaction at `iso` runs `SELECT … WHERE order_id = 'f' FOR UPDATE` on
/// `reservations` holding 'a' and 'm' (no row matches); another session then inserts 'g'.
/// Returns the insert's server error: 1205 under REPEATABLE READ (the locking read took the
/// gap between 'a' and 'm', a next-key lock), none under READ COMMITTED. PostgreSQL has no
/// gap locks: a locking read that matches nothing locks nothing.
pub async fn gap_lock_blocks_insert(lab: &Lab, iso: Isolation) -> Result<Option<u16>, InnoDbError> {
    lab.reset_stock(1).await?;
    let mut a = lab.single(|o| o).await?;
    a.query_drop(
        "INSERT INTO reservations (order_id, product_id, quantity) VALUES ('a', 1, 1), ('m', 1, 1)",
    )
    .await?;
    let mut b = lab.single(|o| o).await?;
    b.query_drop("SET SESSION innodb_lock_wait_timeout = 1")
        .await?;
    let mut tx = a.start_transaction(iso.tx()).await?;
    let none: Vec<i64> = tx
        .query("SELECT id FROM reservations WHERE order_id = 'f' FOR UPDATE")
        .await?;
    debug_assert!(none.is_empty());
    let insert = b
        .query_drop("INSERT INTO reservations (order_id, product_id, quantity) VALUES ('g', 1, 1)")
        .await;
    tx.rollback().await?;
    Ok(insert
        .err()
        .map(InnoDbError::from)
        .as_ref()
        .and_then(server_code))
}

/// Rows affected by an UPDATE that matches product 1 but changes nothing
/// (`SET available = available`): `(default, with CLIENT_FOUND_ROWS)` = `(0, 1)`. MySQL and
/// MariaDB count changed rows unless the client asks for found rows; PostgreSQL always counts
/// matched rows. A strategy deciding by rows affected must only ever test an UPDATE that
/// changes what it matches (the lab's all do).
pub async fn rows_affected(lab: &Lab) -> Result<(u64, u64), InnoDbError> {
    lab.reset_stock(1).await?;
    let noop = "UPDATE stock SET available = available WHERE product_id = 1";
    let mut plain = lab.single(|o| o).await?;
    plain.query_drop(noop).await?;
    let mut found = lab.single(|o| o.client_found_rows(true)).await?;
    found.query_drop(noop).await?;
    Ok((plain.affected_rows(), found.affected_rows()))
}

/// Autocommit and locks: returns `(autocommit on, autocommit off)`, each the server error
/// another session's UPDATE of product 1 got after this session ran `SELECT … FOR UPDATE`
/// with no BEGIN. With autocommit on (the default) the statement was its own transaction and
/// its lock is gone at once: `None` — a "pessimistic" read outside a transaction protects
/// nothing. With `autocommit = 0` the statement opened a transaction that holds the lock until
/// COMMIT: `Some(1205)`.
pub async fn autocommit_and_locks(lab: &Lab) -> Result<(Option<u16>, Option<u16>), InnoDbError> {
    lab.reset_stock(5).await?;
    let mut a = lab.single(|o| o).await?;
    let mut b = lab.single(|o| o).await?;
    b.query_drop("SET SESSION innodb_lock_wait_timeout = 1")
        .await?;
    let write = "UPDATE stock SET version = version + 1 WHERE product_id = 1";
    let mut outcome = [None, None];
    for (i, autocommit) in [1, 0].into_iter().enumerate() {
        a.query_drop(format!("SET autocommit = {autocommit}"))
            .await?;
        let _: Option<i64> = a.query_first(format!("{PLAIN} FOR UPDATE")).await?;
        let result = b.query_drop(write).await;
        outcome[i] = result
            .err()
            .map(InnoDbError::from)
            .as_ref()
            .and_then(server_code);
        a.query_drop("COMMIT").await?;
    }
    a.query_drop("SET autocommit = 1").await?;
    Ok((outcome[0], outcome[1]))
}
