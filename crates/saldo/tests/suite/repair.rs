//! Repair: divergences of each kind planted behind the engine's back are reported by
//! the dry run (nothing written), fixed by the apply (row back to reservations and history, a
//! zero-quantity `repair: …` movement, the audit clean again), and a product that changes
//! between the plan and the lock is left alone and reported. The same on Citus (the Citus
//! binary reruns this suite), where the plan reads each product on its own shard group.

use saldo::domain::Ttl;
use saldo::stock::repair::{self, Counts, RepairAction};
use saldo::stock::{admin, StrategyConfig, StrategyName};

use crate::contract::{assert_audit_clean, engine_with_stock, pid, request};
use crate::harness::{test_db, TestDb};

async fn raw(db: &TestDb, sql: &str) {
    let client = db.pool.get().await.expect("client");
    client.batch_execute(sql).await.expect("raw write");
}

async fn counts(db: &TestDb, product: i64) -> Counts {
    let client = db.pool.get().await.expect("client");
    let row = client
        .query_one(
            "SELECT available::bigint, reserved::bigint FROM stock WHERE product_id = $1",
            &[&product],
        )
        .await
        .expect("row");
    Counts {
        available: row.get(0),
        reserved: row.get(1),
        backordered: 0,
    }
}

async fn repair_movements(db: &TestDb) -> Vec<(i64, i32, String)> {
    let client = db.pool.get().await.expect("client");
    client
        .query(
            "SELECT product_id, quantity, reason FROM stock_movements \
             WHERE reason LIKE 'repair: %' ORDER BY id",
            &[],
        )
        .await
        .expect("movements")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

#[tokio::test]
async fn repair_reports_then_fixes_every_kind_of_divergence() {
    let db = test_db().await;
    let engine = engine_with_stock(
        &db,
        StrategyName::Atomic,
        &StrategyConfig::default(),
        &[(1, 10), (2, 10), (3, 10), (4, 10)],
    )
    .await;
    for (order, product) in [("o-1", 1), ("o-3", 3), ("o-4", 4)] {
        engine
            .reserve(&request(order, &[(product, 2)], Ttl::default()))
            .await
            .expect("reserve");
    }
    // 1: reserved drifted (on hand right); 2: available drifted; 3: both; 4: untouched.
    raw(
        &db,
        "UPDATE stock SET reserved = reserved + 1, available = available - 1 WHERE product_id = 1; \
         UPDATE stock SET available = available - 3 WHERE product_id = 2; \
         UPDATE stock SET reserved = reserved + 2, available = available + 1 WHERE product_id = 3",
    )
    .await;
    let store = engine.store().clone();

    let dry = repair::repair(&store, false).await.expect("dry run");
    assert!(!dry.applied);
    let seen: Vec<_> = dry
        .products
        .iter()
        .map(|p| (p.product_id, p.before, p.after, p.action))
        .collect();
    let c = |available, reserved| Counts {
        available,
        reserved,
        backordered: 0,
    };
    assert_eq!(
        seen,
        vec![
            (pid(1), c(7, 3), c(8, 2), RepairAction::Planned),
            (pid(2), c(7, 0), c(10, 0), RepairAction::Planned),
            (pid(3), c(9, 4), c(8, 2), RepairAction::Planned),
        ]
    );
    assert_eq!(dry.remaining.len(), 4, "the dry run changed nothing");
    assert_eq!(counts(&db, 2).await, c(7, 0));
    assert!(repair_movements(&db).await.is_empty());

    let done = repair::repair(&store, true).await.expect("apply");
    assert!(done
        .products
        .iter()
        .all(|p| p.action == RepairAction::Applied));
    assert!(done.remaining.is_empty(), "{:?}", done.remaining);
    assert_eq!(counts(&db, 1).await, c(8, 2));
    assert_eq!(counts(&db, 2).await, c(10, 0));
    assert_eq!(counts(&db, 3).await, c(8, 2));
    assert_eq!(counts(&db, 4).await, c(8, 2));
    let movements = repair_movements(&db).await;
    assert_eq!(movements.len(), 3);
    assert_eq!(
        movements[1],
        (
            2,
            0,
            format!(
                "repair: available 7 -> 10, reserved 0 -> 0 (version {})",
                dry.products[1].version
            )
        )
    );
    // The engine carries on from the repaired rows: the held units still confirm.
    let confirmed = engine
        .confirm(&saldo::domain::OrderId::new("o-3").expect("id"))
        .await
        .expect("confirm");
    assert_eq!(confirmed.confirmed.len(), 1);
    assert_audit_clean(&db, StrategyName::Atomic).await;
    // Nothing left to repair: a second run plans nothing.
    assert!(repair::plan(&store).await.expect("plan").is_empty());
}

#[tokio::test]
async fn a_product_that_changes_during_the_repair_is_left_alone() {
    let db = test_db().await;
    let engine = engine_with_stock(
        &db,
        StrategyName::Atomic,
        &StrategyConfig::default(),
        &[(1, 10), (2, 10)],
    )
    .await;
    raw(
        &db,
        "UPDATE stock SET available = available - 1 WHERE product_id IN (1, 2)",
    )
    .await;
    let store = engine.store().clone();
    let plan = repair::plan(&store).await.expect("plan");
    assert_eq!(plan.len(), 2);
    // Between the plan and the lock, an order takes from product 1: its version moves.
    engine
        .reserve(&request("o-between", &[(1, 1)], Ttl::default()))
        .await
        .expect("reserve");
    let applied = repair::apply(&store, &plan).await.expect("apply");
    assert_eq!(
        applied.iter().map(|p| p.action).collect::<Vec<_>>(),
        vec![RepairAction::Changed, RepairAction::Applied]
    );
    // Product 1 was not written (still 1 short), product 2 was.
    assert_eq!(
        counts(&db, 1).await,
        Counts {
            available: 8,
            reserved: 1,
            backordered: 0,
        }
    );
    let left = db.audit_stock().await.expect("audit");
    assert!(left.iter().all(|d| d.product_id == pid(1)), "{left:?}");
    assert_eq!(repair_movements(&db).await.len(), 1);
    // A fresh repair plans from the new state and fixes it.
    let again = repair::repair(&store, true).await.expect("repair");
    assert!(again.remaining.is_empty(), "{again:?}");
    assert_audit_clean(&db, StrategyName::Atomic).await;
}

#[tokio::test]
async fn a_history_below_what_is_reserved_is_reported_not_written() {
    let db = test_db().await;
    let engine = engine_with_stock(
        &db,
        StrategyName::Atomic,
        &StrategyConfig::default(),
        &[(1, 10)],
    )
    .await;
    engine
        .reserve(&request("o-big", &[(1, 5)], Ttl::default()))
        .await
        .expect("reserve");
    // A write-off recorded without touching the row: the history says 2 on hand, 5 are held.
    raw(
        &db,
        "INSERT INTO stock_movements (product_id, kind, quantity, reason) \
         VALUES (1, 'adjustment', -8, 'lost')",
    )
    .await;
    let report = repair::repair(&engine.store().clone(), true)
        .await
        .expect("repair");
    assert_eq!(report.products.len(), 1);
    assert_eq!(report.products[0].action, RepairAction::Unrepairable);
    assert_eq!(
        counts(&db, 1).await,
        Counts {
            available: 5,
            reserved: 5,
            backordered: 0,
        }
    );
    assert!(!report.remaining.is_empty());
    // The admin read agrees: nothing was written.
    assert_eq!(
        admin::get(engine.store(), pid(1))
            .await
            .expect("stock")
            .available,
        5
    );
}
