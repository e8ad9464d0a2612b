//! Seed 000 and 004 scenarios for the `atomic` strategy, with the audit after each one.

use std::sync::Arc;
use std::time::Duration;

use crate::harness::{test_db, TestDb};
use saldo::audit::{audit_stock, Invariant};
use saldo::domain::{OrderId, OrderItems, ProductId, Reason, Ttl};
use saldo::stock::{
    admin, build, sweeper, ReserveRequest, StockStrategy, StrategyConfig, StrategyName,
};
use saldo::Error;

fn pid(n: i64) -> ProductId {
    ProductId::new(n).expect("product id")
}

fn request(order: &str, items: &[(i64, i64)], ttl: Ttl) -> ReserveRequest {
    ReserveRequest {
        order_id: OrderId::new(order).expect("order id"),
        items: OrderItems::new(items.iter().copied()).expect("items"),
        ttl,
    }
}

async fn engine_with_stock(db: &TestDb, stock: &[(i64, i64)]) -> Arc<dyn StockStrategy> {
    let store = db.store();
    for &(p, count) in stock {
        admin::set_count(&store, pid(p), count)
            .await
            .expect("count");
    }
    build(StrategyName::Atomic, store, &StrategyConfig::default())
}

async fn assert_audit_clean(db: &TestDb) {
    let divergences = audit_stock(&db.pool).await.expect("audit");
    assert!(divergences.is_empty(), "audit found {divergences:?}");
}

/// Fires `buyers` single-unit reservations of product 1 at once; returns how many succeeded.
async fn race_for_product(engine: &Arc<dyn StockStrategy>, buyers: usize) -> usize {
    let mut tasks = Vec::new();
    for i in 0..buyers {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            engine
                .reserve(&request(&format!("buyer-{i}"), &[(1, 1)], Ttl::default()))
                .await
        }));
    }
    let mut sold = 0;
    for t in tasks {
        match t.await.expect("join") {
            Ok(_) => sold += 1,
            Err(Error::InsufficientStock { product_id, .. }) => assert_eq!(product_id, pid(1)),
            Err(e) => panic!("unexpected error reached a buyer: {e}"),
        }
    }
    sold
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_buyers_for_the_last_unit_twenty_times() {
    for run in 0..20 {
        let db = test_db().await;
        let engine = engine_with_stock(&db, &[(1, 1)]).await;
        let sold = race_for_product(&engine, 50).await;
        let stock = admin::get(engine.store(), pid(1)).await.expect("stock");
        assert_eq!(sold, 1, "run {run}");
        assert_eq!((stock.available, stock.reserved), (0, 1), "run {run}");
        assert_audit_clean(&db).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oversubscribed_purchases_sell_exactly_the_stock() {
    for buyers in [100, 500, 1000] {
        let db = test_db().await;
        let engine = engine_with_stock(&db, &[(1, 10)]).await;
        let sold = race_for_product(&engine, buyers).await;
        let stock = admin::get(engine.store(), pid(1)).await.expect("stock");
        assert_eq!(sold, 10, "{buyers} buyers");
        assert_eq!((stock.available, stock.reserved), (0, 10));
        assert_audit_clean(&db).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crossing_multi_item_orders_never_deadlock_and_are_all_or_nothing() {
    let db = test_db().await;
    let engine = engine_with_stock(&db, &[(1, 60), (2, 40)]).await;
    let mut tasks = Vec::new();
    for i in 0..100 {
        let engine = engine.clone();
        // Half list [1,2], half [2,1]: the engine sorts, so locks never cross.
        let items = if i % 2 == 0 {
            vec![(1, 1), (2, 1)]
        } else {
            vec![(2, 1), (1, 1)]
        };
        tasks.push(tokio::spawn(async move {
            engine
                .reserve(&request(&format!("multi-{i}"), &items, Ttl::default()))
                .await
        }));
    }
    let mut sold = 0;
    for t in tasks {
        match t.await.expect("join") {
            Ok(_) => sold += 1,
            Err(Error::InsufficientStock { product_id, .. }) => assert_eq!(product_id, pid(2)),
            Err(e) => panic!("error reached a caller: {e}"),
        }
    }
    assert_eq!(sold, 40);
    let s1 = admin::get(engine.store(), pid(1)).await.expect("stock");
    let s2 = admin::get(engine.store(), pid(2)).await.expect("stock");
    // All-or-nothing: product 1 lost exactly as many units as product 2.
    assert_eq!((s1.available, s1.reserved), (20, 40));
    assert_eq!((s2.available, s2.reserved), (0, 40));
    assert_audit_clean(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_simultaneous_replays_reserve_once() {
    let db = test_db().await;
    let engine = engine_with_stock(&db, &[(1, 5), (2, 5)]).await;
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move {
            engine
                .reserve(&request("same-order", &[(1, 2), (2, 1)], Ttl::default()))
                .await
        }));
    }
    let mut fresh = 0;
    for t in tasks {
        let r = t.await.expect("join").expect("replay must succeed");
        if !r.replayed {
            fresh += 1;
        }
        assert_eq!(r.items.len(), 2);
    }
    assert_eq!(fresh, 1);
    let s1 = admin::get(engine.store(), pid(1)).await.expect("stock");
    assert_eq!((s1.available, s1.reserved), (3, 2));
    assert_audit_clean(&db).await;
}

#[tokio::test]
async fn lifecycle_errors_and_idempotency() {
    let db = test_db().await;
    let engine = engine_with_stock(&db, &[(1, 3), (2, 3)]).await;
    let order = OrderId::new("o-1").expect("id");

    // Unknown product and insufficient stock are distinct, and nothing is half-written.
    match engine
        .reserve(&request("o-x", &[(1, 1), (99, 1)], Ttl::default()))
        .await
    {
        Err(Error::UnknownProduct(p)) => assert_eq!(p, pid(99)),
        other => panic!("expected unknown product, got {other:?}"),
    }
    match engine
        .reserve(&request("o-y", &[(1, 1), (2, 4)], Ttl::default()))
        .await
    {
        Err(Error::InsufficientStock { product_id, .. }) => assert_eq!(product_id, pid(2)),
        other => panic!("expected insufficient stock, got {other:?}"),
    }
    let s1 = admin::get(engine.store(), pid(1)).await.expect("stock");
    assert_eq!(
        (s1.available, s1.reserved),
        (3, 0),
        "a refused order left units behind"
    );

    let r = engine
        .reserve(&request("o-1", &[(1, 1), (2, 1)], Ttl::default()))
        .await
        .expect("reserve");
    assert!(!r.replayed);
    let again = engine
        .reserve(&request("o-1", &[(2, 1), (1, 1)], Ttl::default()))
        .await
        .expect("replay");
    assert!(again.replayed);
    assert!(matches!(
        engine
            .reserve(&request("o-1", &[(1, 2)], Ttl::default()))
            .await,
        Err(Error::IdempotencyConflict(_))
    ));

    let c = engine.confirm(&order).await.expect("confirm");
    assert_eq!(c.confirmed.len(), 2);
    assert!(c.missing.is_empty());
    let c2 = engine.confirm(&order).await.expect("confirm again");
    assert_eq!(c, c2, "confirm is idempotent");
    let s1 = admin::get(engine.store(), pid(1)).await.expect("stock");
    assert_eq!((s1.available, s1.reserved), (2, 0));

    // Release returns units; twice is the same as once.
    engine
        .reserve(&request("o-2", &[(1, 2)], Ttl::default()))
        .await
        .expect("reserve");
    let o2 = OrderId::new("o-2").expect("id");
    let rel = engine.release(&o2).await.expect("release");
    assert_eq!(rel.released.len(), 1);
    assert_eq!(engine.release(&o2).await.expect("again"), rel);
    let s1 = admin::get(engine.store(), pid(1)).await.expect("stock");
    assert_eq!((s1.available, s1.reserved), (2, 0));
    // A released order may be reserved again.
    engine
        .reserve(&request("o-2", &[(1, 2)], Ttl::default()))
        .await
        .expect("re-reserve");

    assert!(matches!(
        engine.confirm(&OrderId::new("nope").expect("id")).await,
        Err(Error::UnknownOrder(_))
    ));

    // Admin refusals.
    assert!(matches!(
        admin::set_count(engine.store(), pid(1), 1).await,
        Err(Error::CountBelowReserved { .. })
    ));
    let reason = Reason::new("write-off").expect("reason");
    assert!(matches!(
        admin::adjust(engine.store(), pid(1), -1, &reason).await,
        Err(Error::AdjustmentWouldGoNegative { .. })
    ));
    assert!(matches!(
        admin::adjust(engine.store(), pid(7), 1, &reason).await,
        Err(Error::UnknownProduct(_))
    ));
    let restock = Reason::new("restock").expect("reason");
    let s = admin::adjust(engine.store(), pid(1), 10, &restock)
        .await
        .expect("adjust");
    assert_eq!((s.available, s.reserved), (10, 2));
    assert_audit_clean(&db).await;
}

#[tokio::test]
async fn expired_items_are_reported_missing_and_may_be_reserved_again() {
    let db = test_db().await;
    let engine = engine_with_stock(&db, &[(1, 5), (2, 5)]).await;
    let short = Ttl::from_millis(1).expect("ttl");
    engine
        .reserve(&request("o-exp", &[(1, 1), (2, 1)], short))
        .await
        .expect("reserve");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let expired = sweeper::sweep(engine.store()).await.expect("sweep");
    assert_eq!(expired, 2);
    let order = OrderId::new("o-exp").expect("id");
    let c = engine.confirm(&order).await.expect("confirm");
    assert!(c.confirmed.is_empty());
    assert_eq!(c.missing.len(), 2);
    let again = engine
        .reserve(&request("o-exp", &[(1, 1), (2, 1)], Ttl::default()))
        .await
        .expect("re-reserve");
    assert!(!again.replayed);
    assert_eq!(
        engine
            .confirm(&order)
            .await
            .expect("confirm")
            .confirmed
            .len(),
        2
    );
    assert_audit_clean(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn confirms_racing_sweepers_have_exactly_one_winner() {
    let db = test_db().await;
    let engine = engine_with_stock(&db, &[(1, 2000), (2, 2000)]).await;
    let ttl = Ttl::from_millis(30).expect("ttl");
    for i in 0..1000 {
        let items: &[(i64, i64)] = if i % 3 == 0 {
            &[(1, 1), (2, 1)]
        } else {
            &[(1 + i % 2, 1)]
        };
        engine
            .reserve(&request(&format!("race-{i}"), items, ttl))
            .await
            .expect("reserve");
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    let sweepers: Vec<_> = (0..3)
        .map(|_| {
            let store = engine.store().clone();
            tokio::spawn(async move {
                let mut total = 0;
                for _ in 0..20 {
                    total += sweeper::sweep_with_batch(&store, 50).await.expect("sweep");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                total
            })
        })
        .collect();
    let mut confirms = Vec::new();
    for i in 0..1000 {
        let engine = engine.clone();
        confirms.push(tokio::spawn(async move {
            engine
                .confirm(&OrderId::new(format!("race-{i}")).expect("id"))
                .await
        }));
    }
    let mut confirmed_units = 0i64;
    for c in confirms {
        let outcome = c.await.expect("join").expect("confirm");
        confirmed_units += outcome
            .confirmed
            .iter()
            .map(|i| i64::from(i.quantity))
            .sum::<i64>();
    }
    let mut expired = 0u64;
    for s in sweepers {
        expired += s.await.expect("join");
    }
    expired += sweeper::sweep(engine.store()).await.expect("final sweep");
    let units_total = 1000 + 334; // one unit per order, two for every third
    assert_eq!(
        confirmed_units + expired as i64,
        units_total,
        "each unit ends exactly once"
    );
    let client = db.pool.get().await.expect("client");
    let active: i64 = client
        .query_one(
            "SELECT count(*) FROM reservations WHERE status = 'active'",
            &[],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(active, 0);
    let s1 = admin::get(engine.store(), pid(1)).await.expect("stock");
    assert_eq!(s1.reserved, 0);
    assert_audit_clean(&db).await;
}

#[tokio::test]
async fn audit_catches_a_row_written_behind_the_engines_back() {
    let db = test_db().await;
    let engine = engine_with_stock(&db, &[(1, 10), (2, 10)]).await;
    engine
        .reserve(&request("o-a", &[(1, 3)], Ttl::default()))
        .await
        .expect("reserve");
    assert_audit_clean(&db).await;
    let client = db.pool.get().await.expect("client");
    // The bug the audit exists for: a script that sells without the engine.
    client
        .batch_execute("UPDATE stock SET available = available - 1 WHERE product_id = 2")
        .await
        .expect("raw update");
    client
        .batch_execute("UPDATE stock SET reserved = reserved + 1, available = available - 1 WHERE product_id = 1")
        .await
        .expect("raw update");
    let d = audit_stock(&db.pool).await.expect("audit");
    assert!(d.iter().any(|d| d.product_id == pid(2)
        && d.invariant == Invariant::OnHandMatchesHistory
        && d.expected == 10
        && d.actual == 9));
    assert!(d.iter().any(|d| d.product_id == pid(1)
        && d.invariant == Invariant::ReservedMatchesActive
        && d.expected == 3
        && d.actual == 4));
}

#[tokio::test]
async fn check_constraints_refuse_negative_stock() {
    let db = test_db().await;
    engine_with_stock(&db, &[(1, 1)]).await;
    let client = db.pool.get().await.expect("client");
    let err = client
        .batch_execute("UPDATE stock SET available = available - 2 WHERE product_id = 1")
        .await
        .expect_err("CHECK must refuse");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::CHECK_VIOLATION)
    );
}
