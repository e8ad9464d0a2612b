//! Everything on the local Citus test cluster, one test binary so the cluster starts
//! once (each test still gets a distributed database as migrated, `saldo_lab::testing::citus_db`):
//! - the distributed schema: the migrations lay the tables out by product and by account, and
//!   every constraint Citus refuses is replaced by one that refuses the same bad write, shown
//!   here by running that write on one node and on Citus (this file);
//! - the audit on Citus: per-shard checks and the per-transfer double entry (`citus/audit.rs`);
//! - the stock operations: the contract, stock, model, batched, listing, sales, returns,
//!   movements, retry
//!   and repair suites rerun on Citus (their `crate::harness`), plus crossing multi-item orders whose products are on
//!   different workers, a direct sale across workers and the refusals (`citus/stock.rs`);
//! - the ledger: the ledger, holds and ledger-model suites for both transfer strategies, the
//!   batched engine's suite, the ledger repair, and crossed transfers and holds across workers
//!   (`citus/ledger.rs`), each test ending with the Citus audit clean;
//! - the event feed: the outbox of every write, the sequencer's order under concurrent
//!   writers and a late commit, retention (`suite/events.rs`).
//!
//! Without Citus binaries it fails saying what to install (`SALDO_CITUS_PG_BIN`).

// Loading the ledger suites twice, once per transfer strategy, is the point.
#![allow(clippy::duplicate_mod)]

use saldo_lab::testing::{citus_db, test_db, TestDb};

/// The audit on Citus: per-shard checks and the per-transfer double entry.
#[path = "citus/audit.rs"]
mod audit;

/// Two products with stock, two accounts with money, one live reservation of order `o1` on
/// product 1 (portable SQL: the same on both layouts).
const SETUP: &str = "\
    INSERT INTO stock (product_id, available) VALUES (1, 10), (2, 10); \
    INSERT INTO reservations (id, order_id, product_id, quantity, expires_at) \
      VALUES (gen_random_uuid(), 'o1', 1, 1, now() + interval '1 minute'); \
    INSERT INTO accounts (id, balance) VALUES (1, 100), (2, 100);";

/// One node's transfer: one journal row.
const SINGLE_TRANSFER: &str = "INSERT INTO transfers (id, from_account, to_account, amount) \
     VALUES ($1, $2, $3, 5)";
/// Citus's transfer: the id's row, then both sides in one INSERT (see migrations-citus/V2).
const CITUS_TRANSFER_ID: &str =
    "INSERT INTO transfer_ids (id, from_account, to_account) VALUES ($1, $2, $3)";
const CITUS_TRANSFER_SIDES: &str = "\
    INSERT INTO transfers (account_id, id, from_account, to_account, amount) \
    VALUES ($2, $1, $2, $3, 5), ($3, $1, $2, $3, 5)";

async fn citus_and_single() -> (TestDb, TestDb) {
    let (citus, single) = (citus_db().await, test_db().await);
    for db in [&citus, &single] {
        let client = db.pool.get().await.expect("client");
        client.batch_execute(SETUP).await.expect("setup");
    }
    (citus, single)
}

/// The SQLSTATE `sql` fails with (it must fail).
async fn refusal(db: &TestDb, sql: &str) -> String {
    let client = db.pool.get().await.expect("client");
    match client.batch_execute(sql).await {
        Ok(()) => panic!("accepted: {sql}"),
        Err(e) => e
            .code()
            .map(|c| c.code().to_owned())
            .unwrap_or_else(|| panic!("{e}")),
    }
}

/// A transfer written the way `db`'s layout writes one, in one transaction.
async fn transfer(db: &TestDb, citus: bool, id: &str, from: i64, to: i64) -> Result<(), String> {
    let mut client = db.pool.get().await.expect("client");
    let tx = client.transaction().await.expect("begin");
    let written = if citus {
        match tx.execute(CITUS_TRANSFER_ID, &[&id, &from, &to]).await {
            Ok(_) => tx.execute(CITUS_TRANSFER_SIDES, &[&id, &from, &to]).await,
            Err(e) => Err(e),
        }
    } else {
        tx.execute(SINGLE_TRANSFER, &[&id, &from, &to]).await
    };
    match written {
        Ok(_) => tx.commit().await.map_err(|e| e.to_string()),
        Err(e) => Err(e
            .code()
            .map(|c| c.code().to_owned())
            .unwrap_or_else(|| e.to_string())),
    }
}

/// Where each table lives: by product (co-located with stock), by account (co-located with
/// accounts), by its own key, or on every node; and no trigger survives on any of them.
#[tokio::test]
async fn the_migrations_distribute_the_schema() {
    let db = citus_db().await;
    let client = db.pool.get().await.expect("client");
    let rows = client
        .query(
            "SELECT logicalrelid::text, partmethod::text, \
                    coalesce(column_to_column_name(logicalrelid, partkey), ''), colocationid \
             FROM pg_dist_partition ORDER BY 1",
            &[],
        )
        .await
        .expect("pg_dist_partition");
    let layout: Vec<(String, String, String, i32)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let find = |table: &str| {
        layout
            .iter()
            .find(|t| t.0 == table)
            .unwrap_or_else(|| panic!("{table} is not a Citus table: {layout:?}"))
            .clone()
    };
    let stock = find("stock");
    for table in [
        "reservations",
        "stock_movements",
        "product_movements",
        "sale_items",
        "return_items",
        "stock_moves",
        "backorder_fills",
        "stock_locations",
        "reservation_allocations",
        "sale_allocations",
    ] {
        let t = find(table);
        assert_eq!((t.1.as_str(), t.2.as_str()), ("h", "product_id"), "{table}");
        assert_eq!(t.3, stock.3, "{table} co-located with stock");
    }
    let accounts = find("accounts");
    let transfers = find("transfers");
    assert_eq!(
        (transfers.1.as_str(), transfers.2.as_str()),
        ("h", "account_id")
    );
    assert_eq!(
        transfers.3, accounts.3,
        "the journal lives with its accounts"
    );
    let repairs = find("account_repairs");
    assert_eq!(
        (repairs.2.as_str(), repairs.3),
        ("account_id", accounts.3),
        "an account's repairs live with it"
    );
    assert_eq!(find("orders").2, "order_id");
    assert_eq!(find("transfer_ids").2, "id");
    for table in ["webhooks", "webhook_deliveries", "webhook_key"] {
        assert!(
            layout.iter().all(|t| t.0 != table),
            "{table} stays a plain table of the coordinator, like events"
        );
    }
    for table in [
        "sales",
        "order_returns",
        "transfer_groups",
        "transfer_group_positions",
        "locations",
    ] {
        assert_eq!(find(table).1, "n", "{table} is a reference table");
    }
    let triggers: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_trigger t JOIN pg_dist_partition p \
               ON p.logicalrelid = t.tgrelid WHERE NOT t.tgisinternal",
            &[],
        )
        .await
        .expect("triggers")
        .get(0);
    assert_eq!(triggers, 0, "Citus refuses triggers on distributed tables");
}

/// V3's statement-level trigger (a reservation's product must exist) ↔ the co-located FK.
#[tokio::test]
async fn a_reservation_of_an_unknown_product_is_refused_on_both() {
    let (citus, single) = citus_and_single().await;
    let sql = "INSERT INTO reservations (id, order_id, product_id, quantity, expires_at) \
               VALUES (gen_random_uuid(), 'o2', 999, 1, now() + interval '1 minute')";
    assert_eq!(refusal(&single, sql).await, "23503");
    assert_eq!(refusal(&citus, sql).await, "23503");
}

/// V3's row triggers on stock (no delete of a product with reservations) ↔ the FK's NO ACTION.
#[tokio::test]
async fn deleting_a_product_with_reservations_is_refused_on_both() {
    let (citus, single) = citus_and_single().await;
    let sql = "DELETE FROM stock WHERE product_id = 1";
    assert_eq!(refusal(&single, sql).await, "23503");
    assert_eq!(refusal(&citus, sql).await, "23503");
}

/// V3's `reservations_product_is_fixed` ↔ Citus's own refusal to move a row to another shard
/// (a different SQLSTATE, the same refused write).
#[tokio::test]
async fn moving_a_reservation_to_another_product_is_refused_on_both() {
    let (citus, single) = citus_and_single().await;
    let sql = "UPDATE reservations SET product_id = 2 WHERE order_id = 'o1'";
    assert_eq!(refusal(&single, sql).await, "23503");
    let code = refusal(&citus, sql).await;
    assert_eq!(
        code, "0A000",
        "Citus: modifying the distribution column is not supported"
    );
}

/// The unique live (order, product) index holds the distribution column: Citus keeps it as is.
#[tokio::test]
async fn a_second_live_reservation_of_one_order_and_product_is_refused_on_both() {
    let (citus, single) = citus_and_single().await;
    let sql = "INSERT INTO reservations (id, order_id, product_id, quantity, expires_at) \
               VALUES (gen_random_uuid(), 'o1', 1, 2, now() + interval '1 minute')";
    assert_eq!(refusal(&single, sql).await, "23505");
    assert_eq!(refusal(&citus, sql).await, "23505");
}

/// transfers.id as primary key ↔ `transfer_ids`, distributed by the id: the same id for a
/// transfer between other accounts (other shards) is refused.
#[tokio::test]
async fn a_second_transfer_under_one_id_is_refused_on_both() {
    let (citus, single) = citus_and_single().await;
    for (db, is_citus) in [(&single, false), (&citus, true)] {
        transfer(db, is_citus, "t1", 1, 2).await.expect("first");
        assert_eq!(
            transfer(db, is_citus, "t1", 2, 1).await,
            Err("23505".into())
        );
        assert_eq!(
            transfer(db, is_citus, "t1", 0, 2).await,
            Err("23505".into())
        );
    }
}

/// from_account / to_account REFERENCES accounts ↔ each side's co-located FK, both sides in
/// one INSERT: a transfer naming an unknown account is refused whichever side it is.
#[tokio::test]
async fn a_transfer_with_an_unknown_account_is_refused_on_both() {
    let (citus, single) = citus_and_single().await;
    for (db, is_citus) in [(&single, false), (&citus, true)] {
        assert_eq!(
            transfer(db, is_citus, "t2", 1, 999).await,
            Err("23503".into())
        );
        assert_eq!(
            transfer(db, is_citus, "t3", 999, 1).await,
            Err("23503".into())
        );
    }
    let client = citus.pool.get().await.expect("client");
    let left: i64 = client
        .query_one("SELECT count(*) FROM transfer_ids", &[])
        .await
        .expect("ids")
        .get(0);
    assert_eq!(left, 0, "the refused transfers left no id behind");
}

/// The unique (group_id, group_position) index ↔ `transfer_group_positions` (reference table).
#[tokio::test]
async fn a_second_transfer_at_one_group_position_is_refused_on_both() {
    let (citus, single) = citus_and_single().await;
    let group = "INSERT INTO transfer_groups (id, size) VALUES ('g', 2);";
    let single_sql = format!(
        "{group} INSERT INTO transfers (id, from_account, to_account, amount, group_id, group_position) \
         VALUES ('a', 1, 2, 1, 'g', 0), ('b', 2, 1, 1, 'g', 0)"
    );
    assert_eq!(refusal(&single, &single_sql).await, "23505");
    let citus_sql = format!(
        "{group} INSERT INTO transfer_group_positions (group_id, group_position, transfer_id) \
         VALUES ('g', 0, 'a'), ('g', 0, 'b')"
    );
    assert_eq!(refusal(&citus, &citus_sql).await, "23505");
}

/// sale_items' FKs: to sales (a reference table on Citus) and to stock (co-located); V19's
/// return_items likewise, to order_returns and stock.
#[tokio::test]
async fn a_sale_or_return_item_of_an_unknown_sale_return_or_product_is_refused_on_both() {
    let (citus, single) = citus_and_single().await;
    for db in [&single, &citus] {
        let unknown_return =
            "INSERT INTO return_items (return_id, product_id, quantity) VALUES ('nope', 1, 1)";
        assert_eq!(refusal(db, unknown_return).await, "23503");
        let unknown_product = "INSERT INTO order_returns (return_id, order_id, reason) \
             VALUES ('r1', 'o1', 'x'); \
             INSERT INTO return_items (return_id, product_id, quantity) VALUES ('r1', 999, 1)";
        assert_eq!(refusal(db, unknown_product).await, "23503");
        let unknown_sale =
            "INSERT INTO sale_items (sale_id, product_id, quantity) VALUES ('nope', 1, 1)";
        assert_eq!(refusal(db, unknown_sale).await, "23503");
        let unknown_product = "INSERT INTO sales (sale_id) VALUES ('s1'); \
             INSERT INTO sale_items (sale_id, product_id, quantity) VALUES ('s1', 999, 1)";
        assert_eq!(refusal(db, unknown_product).await, "23503");
    }
}

/// V8's fill history: its references to the reservation and the movement name the product too
/// on Citus (those tables are keyed by (product_id, id) there); a fill of an unknown reservation
/// or movement is refused on both.
#[tokio::test]
async fn a_backorder_fill_of_an_unknown_reservation_or_movement_is_refused_on_both() {
    let (citus, single) = citus_and_single().await;
    for db in [&single, &citus] {
        // Literal ids (Citus plans an INSERT … SELECT of these through the coordinator).
        let unknown_reservation = "\
            INSERT INTO stock_movements (id, product_id, kind, quantity) \
              VALUES (4242, 1, 'adjustment', 1); \
            INSERT INTO backorder_fills (product_id, reservation_id, arrival, quantity, sold, movement_id) \
              VALUES (1, '00000000-0000-4000-8000-000000000001', 1, 1, false, 4242)";
        assert_eq!(refusal(db, unknown_reservation).await, "23503");
        let unknown_movement = "\
            INSERT INTO reservations (id, order_id, product_id, quantity, expires_at) \
              VALUES ('00000000-0000-4000-8000-000000000002', 'o9', 1, 1, now() + interval '1 minute'); \
            INSERT INTO backorder_fills (product_id, reservation_id, arrival, quantity, sold, movement_id) \
              VALUES (1, '00000000-0000-4000-8000-000000000002', 1, 1, false, 999999)";
        assert_eq!(refusal(db, unknown_movement).await, "23503");
    }
}

/// V7's allocations: the reference to the reservation names the product on Citus, and the key
/// holds it; a second allocation of one reservation at one location, and an allocation of an
/// unknown reservation, are refused on both.
#[tokio::test]
async fn allocations_keep_their_keys_and_references_on_both() {
    let (citus, single) = citus_and_single().await;
    for db in [&single, &citus] {
        let client = db.pool.get().await.expect("client");
        client
            .batch_execute(
                "INSERT INTO locations (location_id) VALUES ('north'); \
                 INSERT INTO stock_locations (product_id, location_id, available) \
                   VALUES (1, 'north', 5); \
                 INSERT INTO reservations (id, order_id, product_id, quantity, expires_at) \
                   VALUES ('00000000-0000-4000-8000-000000000003', 'o3', 1, 1, \
                           now() + interval '1 minute'); \
                 INSERT INTO reservation_allocations (reservation_id, product_id, location_id, quantity) \
                   VALUES ('00000000-0000-4000-8000-000000000003', 1, 'north', 1)",
            )
            .await
            .expect("one allocation");
        let twice = "INSERT INTO reservation_allocations (reservation_id, product_id, location_id, quantity) \
                     VALUES ('00000000-0000-4000-8000-000000000003', 1, 'north', 1)";
        assert_eq!(refusal(db, twice).await, "23505");
        let unknown = "INSERT INTO reservation_allocations (reservation_id, product_id, location_id, quantity) \
                       VALUES ('00000000-0000-4000-8000-000000000004', 1, 'north', 1)";
        assert_eq!(refusal(db, unknown).await, "23503");
        let nowhere = "INSERT INTO stock_locations (product_id, location_id, available) \
                       VALUES (1, 'south', 5)";
        assert_eq!(refusal(db, nowhere).await, "23503");
    }
}

/// The checks travel with the tables: no negative stock, no overdraft, on the shards too.
#[tokio::test]
async fn the_checks_hold_on_the_shards() {
    let (citus, single) = citus_and_single().await;
    for db in [&single, &citus] {
        let oversold = "UPDATE stock SET available = available - 11 WHERE product_id = 2";
        assert_eq!(refusal(db, oversold).await, "23514");
        let overdrawn = "UPDATE accounts SET balance = balance - 101 WHERE id = 2";
        assert_eq!(refusal(db, overdrawn).await, "23514");
        // V19: never more returned than the line holds (o1 holds 1).
        let over_returned = "UPDATE reservations SET returned = 2 WHERE order_id = 'o1'";
        assert_eq!(refusal(db, over_returned).await, "23514");
    }
}

/// Migrating again changes nothing and names the layout the operations must take their locks
/// in; asking for the Citus layout on one node is refused before anything is applied.
#[tokio::test]
async fn migrating_names_the_layout() {
    use saldo::db::{self, Layout};
    let citus = citus_db().await;
    assert_eq!(
        db::migrate(&citus.pool).await.expect("again"),
        Layout::Citus
    );
    assert_eq!(
        db::migrate_to_serve(&citus.pool).await.expect("serves"),
        Layout::Citus
    );

    let single = test_db().await;
    let refused = db::migrate_as(&single.pool, Layout::Citus)
        .await
        .expect_err("no citus extension");
    assert!(
        refused.to_string().contains("no Citus extension"),
        "{refused}"
    );
    assert_eq!(
        db::migrate_to_serve(&single.pool)
            .await
            .expect("one node serves"),
        Layout::Single
    );
}

// ---- the stock operations on Citus ----
//
// The stock suites as on one node (each test's database is dropped when it ends: left behind,
// their maintenance daemons put a 2-core machine at load 100), plus the cross-worker tests.

/// Where this binary's suites get a fresh database: the Citus cluster.
mod harness {
    #![allow(unused_imports)]
    pub use saldo_lab::testing::{
        citus_db as test_db, citus_db_with_pool as test_db_with_pool, TestDb,
    };
    /// The transfer strategy of the model suite.
    pub const TRANSFER: saldo::ledger::TransferStrategy = saldo::ledger::TransferStrategy::Ordered;
    /// The suites run on a Citus database: the few tests that are single-node by nature say so.
    pub const CITUS: bool = true;
}

#[path = "suite/contract.rs"]
mod contract;

#[path = "suite/model.rs"]
mod model;

#[path = "suite/stock.rs"]
mod stock;

#[path = "suite/batched.rs"]
mod batched;

#[path = "suite/listing.rs"]
mod listing;

#[path = "suite/bundles.rs"]
mod bundles;
#[path = "suite/movements.rs"]
mod movements;
#[path = "suite/moves.rs"]
mod moves;
#[path = "suite/returns.rs"]
mod returns;
#[path = "suite/sales.rs"]
mod sales;

#[path = "suite/retry.rs"]
mod retry;

#[path = "suite/repair.rs"]
mod repair;

#[path = "suite/events.rs"]
mod events;

/// Products on different workers, crossing orders, the refusals of what Citus does not run.
#[path = "citus/stock.rs"]
mod citus_only;

// ---- the ledger on Citus ----

#[path = "suite"]
mod ledger_ordered {
    mod harness {
        #![allow(unused_imports)]
        pub use saldo_lab::testing::{
            citus_db as test_db, citus_db_with_pool as test_db_with_pool, TestDb,
        };
        pub const TRANSFER: saldo::ledger::TransferStrategy =
            saldo::ledger::TransferStrategy::Ordered;
        /// The suites size their races for Citus and skip what is single-node by nature.
        pub const CITUS: bool = true;
        /// Each case makes a Citus database (seconds): a few cases, still every operation.
        pub const LEDGER_MODEL_CASES: u32 = 4;
    }

    #[path = "ledger.rs"]
    mod ledger;

    #[path = "holds.rs"]
    mod holds;

    #[path = "ledger_model.rs"]
    mod ledger_model;

    #[path = "ledger_repair.rs"]
    mod ledger_repair;
}

#[path = "suite"]
mod ledger_batched {
    mod harness {
        #![allow(unused_imports)]
        pub use saldo_lab::testing::{
            citus_db as test_db, citus_db_with_pool as test_db_with_pool, TestDb,
        };
        pub const TRANSFER: saldo::ledger::TransferStrategy =
            saldo::ledger::TransferStrategy::Batched;
        pub const CITUS: bool = true;
        pub const LEDGER_MODEL_CASES: u32 = 4;
    }

    #[path = "ledger.rs"]
    mod ledger;

    #[path = "entries.rs"]
    mod entries;

    #[path = "holds.rs"]
    mod holds;

    #[path = "ledger_model.rs"]
    mod ledger_model;

    #[path = "ledger_engine.rs"]
    mod ledger_engine;
}

/// Crossed transfers, holds and their settles between accounts on different workers.
#[path = "citus/ledger.rs"]
mod across_workers;
