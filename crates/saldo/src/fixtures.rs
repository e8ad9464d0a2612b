//! Bulk resets and fixtures for the race lab and the bench (`saldo-lab`): the only writes that
//! do not go through a strategy or the ledger. They live here, with the schema and every other
//! statement that writes it, so a migration that changes a table changes them in the same
//! crate. Never used by the service.
//!
//! Each runs in one transaction on a connection from the pool; none is retried (they run on a
//! scratch database nobody else writes).
//!
//! On a Citus database ([`Layout::Citus`], detected per call) the routers are emptied too and
//! an opening is journalled as the ledger journals it there: one row per side, plus its
//! `transfer_ids` row.

use deadpool_postgres::Pool;
use tokio_postgres::types::ToSql;

use crate::error::Error;
use crate::operation::Operation;
use crate::store::retry::checkout;
use crate::store::schema::{self, Layout};

/// Empties the event tables: their streams' positions restart with the rows emptied here. The
/// feed's numbering goes on (a follower's cursor stays valid; what it had not read is gone, as
/// retention would have it).
macro_rules! empty_events {
    () => {
        "TRUNCATE events, feed, feed_deferred; UPDATE feed_state SET pruned_seq = last_seq;"
    };
}

/// Empties every saldo table but keeps the schema (and the system account of the ledger).
const EMPTY_ALL: &str = concat!(
    empty_events!(),
    "TRUNCATE backorder_fills, reservation_allocations, sale_allocations, stock_locations, \
     locations, reservations, sale_items, sales, return_items, order_returns, stock_moves, stock_movements, \
     product_movements, bundle_components, stock, transfers, transfer_groups, account_repairs, entries; \
     DELETE FROM accounts WHERE id <> 0; UPDATE accounts SET balance = 0, entry_seq = 0 WHERE id = 0"
);
/// The stock tables of the Citus layout, emptied by DELETE in foreign-key order: a TRUNCATE of
/// every shard of every table takes seconds there (measured: 2.2 s against 0.2 s), and the lab
/// empties them before every run. Sequences keep counting (ids stay unique, which is all the
/// lab needs). Sequential: Citus refuses a write to a reference table (`locations`, `sales`)
/// after a parallel multi-shard one in the same transaction.
macro_rules! delete_stock_citus {
    () => {
        "SET LOCAL citus.multi_shard_modify_mode TO 'sequential'; \
         DELETE FROM feed_deferred; DELETE FROM feed; DELETE FROM events; \
         UPDATE feed_state SET pruned_seq = last_seq; DELETE FROM backorder_fills; DELETE FROM reservation_allocations; \
         DELETE FROM sale_allocations; DELETE FROM stock_locations; DELETE FROM locations; \
         DELETE FROM reservations; DELETE FROM sale_items; DELETE FROM sales; \
         DELETE FROM return_items; DELETE FROM order_returns; DELETE FROM stock_moves; DELETE FROM stock_movements; DELETE FROM product_movements; DELETE FROM bundle_components; DELETE FROM stock; DELETE FROM orders;"
    };
}
/// The ledger tables of the Citus layout, likewise (the system account kept, at 0).
macro_rules! delete_ledger_citus {
    () => {
        "SET LOCAL citus.multi_shard_modify_mode TO 'sequential'; \
         DELETE FROM feed_deferred; DELETE FROM feed; DELETE FROM events; \
         UPDATE feed_state SET pruned_seq = last_seq; DELETE FROM account_repairs; \
         DELETE FROM transfers; DELETE FROM transfer_ids; DELETE FROM transfer_group_positions; \
         DELETE FROM transfer_groups; DELETE FROM entries; DELETE FROM accounts WHERE id <> 0; \
         UPDATE accounts SET balance = 0, held = 0, pending_credits = 0, entry_seq = 0 \
          WHERE id = 0"
    };
}
/// [`EMPTY_ALL`] on the Citus layout: its routers too.
/// (One explicit transaction, for the SET LOCAL.)
const EMPTY_ALL_CITUS: &str = concat!(
    "BEGIN; ",
    delete_stock_citus!(),
    delete_ledger_citus!(),
    "; COMMIT"
);

/// Empties the stock tables (the ledger is left alone).
const EMPTY_STOCK: &str = concat!(
    empty_events!(),
    "TRUNCATE backorder_fills, reservation_allocations, sale_allocations, stock_locations, \
     locations, reservations, sale_items, sales, return_items, order_returns, stock_moves, stock_movements, \
     product_movements, bundle_components, stock RESTART IDENTITY"
);
const EMPTY_STOCK_CITUS: &str = delete_stock_citus!();
const STOCK_PRODUCTS: &str = "INSERT INTO stock (product_id, available) \
     SELECT g, $1 FROM generate_series(1, $2::bigint) g";
/// Each product's opening movement (V22: its counters at version 0).
const OPENING_MOVEMENTS: &str = "INSERT INTO product_movements (product_id, seq, kind, \
     available_after, reserved_after, backordered_after, at) \
     SELECT g, 0, 'opening', $1, 0, 0, now() FROM generate_series(1, $2::bigint) g";
const COUNT_PRODUCTS: &str = "INSERT INTO stock_movements (product_id, kind, quantity, reason) \
     SELECT g, 'count', $1, 'bench' FROM generate_series(1, $2::bigint) g";

/// Empties the ledger (keeping the system account).
const EMPTY_LEDGER: &str = concat!(
    empty_events!(),
    "TRUNCATE transfers, transfer_groups, account_repairs, entries; \
     DELETE FROM accounts WHERE id <> 0; UPDATE accounts SET balance = 0, entry_seq = 0 WHERE id = 0"
);
const EMPTY_LEDGER_CITUS: &str = delete_ledger_citus!();
const OPEN_ACCOUNTS: &str = "INSERT INTO accounts (id, balance, entry_seq) \
     SELECT g, $1, 1 FROM generate_series(1, $2::bigint) g";
/// Each account's opening entry (seq 1, in the default currency the accounts take).
const OPENING_ENTRIES: &str = "INSERT INTO entries (account_id, seq, transfer_id, kind, \
     direction, amount, currency, balance_after, held_after, pending_credits_after, at) \
     SELECT g, 1, 'opening:' || g, 'opening', 'credit', $1::bigint, 'EUR', $1::bigint, 0, 0, now() \
       FROM generate_series(1, $2::bigint) g";
/// The system account's one entry for all those openings.
const SYSTEM_ENTRY: &str = "INSERT INTO entries (account_id, seq, transfer_id, kind, \
     direction, amount, currency, balance_after, held_after, pending_credits_after, at) \
     VALUES (0, 1, NULL, 'opening', 'debit', $1::bigint * $2::bigint, NULL, \
             -($1::bigint * $2::bigint), 0, 0, now())";
const OPENING_ROWS: &str = "INSERT INTO transfers (id, from_account, to_account, amount, kind) \
     SELECT 'opening:' || g, 0, g, $1, 'opening' FROM generate_series(1, $2::bigint) g";
/// [`OPENING_ROWS`] on the Citus layout: the debit side (on the system account's shard), the
/// credit side (on the account's) and the id's router row.
const OPENING_SIDES_CITUS: &str =
    "INSERT INTO transfers (account_id, id, from_account, to_account, amount, kind) \
     SELECT s.account_id, 'opening:' || g, 0, g, $1, 'opening' \
       FROM generate_series(1, $2::bigint) g, LATERAL (VALUES (0::bigint), (g)) AS s(account_id)";
/// (Every fill statement takes the same two parameters: `$1` is only typed here.)
const OPENING_IDS_CITUS: &str = "INSERT INTO transfer_ids (id, from_account, to_account) \
     SELECT 'opening:' || g, 0, g FROM generate_series(1, $2::bigint) g \
      WHERE $1::bigint IS NOT NULL";
const SYSTEM_DEBIT: &str =
    "UPDATE accounts SET balance = -($1::bigint * $2::bigint), entry_seq = 1 WHERE id = 0";

/// Moves the deadline of these pending transfers into the past, so the next sweep expires them:
/// how the lab and the tests make a hold due without waiting out its (at least one second)
/// timeout. Only the deadline changes; the sweeper does the expiring.
/// (On Citus both journal sides of a hold move: the ids are counted once each.)
const MAKE_HOLDS_DUE: &str = "UPDATE transfers SET expires_at = now() - interval '1 second' \
     WHERE id = ANY($1) AND status = 'pending' RETURNING id";

/// See [`MAKE_HOLDS_DUE`]; returns how many holds are now due.
pub async fn make_holds_due(pool: &Pool, ids: &[&str]) -> Result<u64, Error> {
    let client = checkout(pool, Operation::Fixture).await?;
    let rows = client.query(MAKE_HOLDS_DUE, &[&ids]).await?;
    let due: std::collections::BTreeSet<String> = rows.iter().map(|r| r.get(0)).collect();
    Ok(due.len() as u64)
}

/// Back to empty tables (stock, reservations, movements, journal, accounts but the system
/// account, whose balance goes back to 0): the fresh state every lab run starts from.
pub async fn empty_all(pool: &Pool) -> Result<(), Error> {
    let client = checkout(pool, Operation::Fixture).await?;
    let citus = schema::detect(&client).await? == Layout::Citus;
    client
        .batch_execute(if citus { EMPTY_ALL_CITUS } else { EMPTY_ALL })
        .await?;
    Ok(())
}

/// Empties the stock tables and stocks products `1..=products` with `units` each, each with a
/// counted history (one `count` movement), so the audit holds from the start. Bulk: one
/// statement per table, then `ANALYZE stock`.
pub async fn stock_products(pool: &Pool, products: u32, units: i32) -> Result<(), Error> {
    let n = i64::from(products);
    let citus = is_citus(pool).await?;
    let bulk = Bulk {
        operation: Operation::Fixture,
        empty: if citus {
            EMPTY_STOCK_CITUS
        } else {
            EMPTY_STOCK
        },
        fill: &[STOCK_PRODUCTS, OPENING_MOVEMENTS, COUNT_PRODUCTS],
        analyze: "ANALYZE stock",
    };
    bulk.run(pool, &[&units, &n]).await
}

const LOCATIONS: &str = "INSERT INTO locations (location_id, priority) \
     SELECT t.location_id, (t.n - 1)::int FROM unnest($1::text[]) WITH ORDINALITY AS t(location_id, n)";
/// Each product's units split across the locations (the first takes the remainder).
const LOCATE_STOCK: &str = "INSERT INTO stock_locations (product_id, location_id, available) \
     SELECT s.product_id, t.location_id, \
            CASE WHEN t.n = 1 \
                 THEN s.available - (cardinality($1::text[]) - 1) * (s.available / cardinality($1::text[])) \
                 ELSE s.available / cardinality($1::text[]) END \
       FROM stock s, unnest($1::text[]) WITH ORDINALITY AS t(location_id, n)";
const MARK_LOCATED: &str = "UPDATE stock SET located = true";

/// [`stock_products`], then every product stocked per location: its units split across
/// `locations` (priorities 0, 1, … in the order given), so the product row stays the sum and
/// the audit holds. The bench's `multi-location` scenario.
pub async fn stock_products_at(
    pool: &Pool,
    products: u32,
    units: i32,
    locations: &[&str],
) -> Result<(), Error> {
    stock_products(pool, products, units).await?;
    let mut client = checkout(pool, Operation::Fixture).await?;
    let tx = client.transaction().await?;
    tx.execute(LOCATIONS, &[&locations]).await?;
    tx.execute(LOCATE_STOCK, &[&locations]).await?;
    tx.execute(MARK_LOCATED, &[]).await?;
    tx.commit().await?;
    client.batch_execute("ANALYZE stock_locations").await?;
    Ok(())
}

/// Empties the ledger and opens accounts `1..=accounts` with `opening_balance` each, with their
/// opening rows in the journal, the system account's matching debit, and an opening entry each
/// (one for the system account), so the ledger audit holds from the start. Bulk, then `ANALYZE accounts`.
pub async fn open_accounts(pool: &Pool, accounts: u32, opening_balance: i64) -> Result<(), Error> {
    let n = i64::from(accounts);
    let citus = is_citus(pool).await?;
    let bulk = Bulk {
        operation: Operation::Fixture,
        empty: if citus {
            EMPTY_LEDGER_CITUS
        } else {
            EMPTY_LEDGER
        },
        fill: if citus {
            &[
                OPEN_ACCOUNTS,
                OPENING_SIDES_CITUS,
                OPENING_IDS_CITUS,
                SYSTEM_DEBIT,
                OPENING_ENTRIES,
                SYSTEM_ENTRY,
            ]
        } else {
            &[
                OPEN_ACCOUNTS,
                OPENING_ROWS,
                SYSTEM_DEBIT,
                OPENING_ENTRIES,
                SYSTEM_ENTRY,
            ]
        },
        analyze: "ANALYZE accounts",
    };
    bulk.run(pool, &[&opening_balance, &n]).await
}

async fn is_citus(pool: &Pool) -> Result<bool, Error> {
    let client = checkout(pool, Operation::Fixture).await?;
    Ok(schema::detect(&client).await? == Layout::Citus)
}

/// A bulk fixture: empty the tables and fill them again in one transaction (every fill statement
/// takes the same `$1` value and `$2` count), then refresh the planner's statistics.
struct Bulk {
    operation: Operation,
    empty: &'static str,
    fill: &'static [&'static str],
    analyze: &'static str,
}

impl Bulk {
    async fn run(&self, pool: &Pool, params: &[&(dyn ToSql + Sync)]) -> Result<(), Error> {
        let mut client = checkout(pool, self.operation).await?;
        let tx = client.transaction().await?;
        tx.batch_execute(self.empty).await?;
        for statement in self.fill {
            tx.execute(*statement, params).await?;
        }
        tx.commit().await?;
        client.batch_execute(self.analyze).await?;
        Ok(())
    }
}
