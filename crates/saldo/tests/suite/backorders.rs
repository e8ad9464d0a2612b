//! Backorders and preorders, on every served strategy: units beyond what is
//! available are backordered up to the product's limit (all items or none), arrivals fill the
//! oldest backorders first (partially too) in the same transaction, confirm reports backordered
//! units as pending and a later fill sells them, release and expiry drop them, replays answer
//! the same figures, and the audit proves the books, the limit and the arrival order (and
//! catches each when broken behind the engine's back).

use std::sync::Arc;

use futures::future::join_all;
use saldo::audit::{audit_stock, Invariant};
use saldo::domain::{Reason, Ttl};
use saldo::stock::backorders::set_policy;
use saldo::stock::{admin, sweeper, PendingItem, StockEngine, StrategyConfig, StrategyName};
use saldo::Error;

use crate::contract::{
    assert_audit_clean, engine_with_stock, pid, request, rerequest, safe_strategies,
};
use crate::harness::test_db;

fn reason() -> Reason {
    Reason::new("restock").expect("reason")
}

/// (available, reserved, backordered) of a product.
async fn books(engine: &StockEngine, p: i64) -> (i32, i32, i32) {
    let s = admin::get(engine.store(), pid(p)).await.expect("stock");
    (s.available, s.reserved, s.backordered)
}

/// Backordered units per product of an order's current items.
async fn backordered_of(engine: &StockEngine, order: &str) -> Vec<(i64, i32)> {
    let order_id = saldo::domain::OrderId::new(order).expect("id");
    engine
        .order(&order_id)
        .await
        .expect("order")
        .iter()
        .map(|i| (i.product_id.get(), i.backordered))
        .collect()
}

#[tokio::test]
async fn a_preorder_fills_oldest_first_and_confirm_reports_pending() {
    for name in safe_strategies() {
        let db = test_db().await;
        let engine = engine_with_stock(&db, name, &StrategyConfig::default(), &[(1, 0)]).await;
        let store = engine.store().clone();
        let limited = set_policy(&store, pid(1), 5).await.expect("policy");
        assert_eq!((limited.backorder_limit, limited.backordered), (5, 0));

        let ttl = Ttl::default();
        let first = engine.reserve(&request("o1", &[(1, 2)], ttl)).await;
        let first = first.expect("preorder");
        assert_eq!(first.items[0].backordered, 2, "{name}");
        engine
            .reserve(&request("o2", &[(1, 2)], ttl))
            .await
            .expect("o2");
        // Past the limit: the usual refusal, naming what could be had (the room left: 1).
        let past = engine.reserve(&request("o3", &[(1, 2)], ttl)).await;
        assert!(
            matches!(
                past,
                Err(Error::InsufficientStock {
                    requested: 2,
                    available: 1,
                    ..
                })
            ),
            "{name}: {past:?}"
        );
        let third = engine
            .reserve(&request("o3", &[(1, 1)], ttl))
            .await
            .expect("o3");
        assert_eq!(books(&engine, 1).await, (0, 0, 5), "{name}");
        // A replay answers the same figures and takes nothing.
        let replay = engine
            .reserve(&request("o3", &[(1, 1)], ttl))
            .await
            .expect("replay");
        assert!(replay.replayed);
        assert_eq!(replay.items, third.items, "{name}");
        assert_eq!(books(&engine, 1).await, (0, 0, 5), "{name}");

        // The limit cannot go below what is backordered: refused, nothing written.
        let lowered = set_policy(&store, pid(1), 4).await;
        assert!(
            matches!(
                lowered,
                Err(Error::BackorderLimitBelowBackordered {
                    limit: 4,
                    backordered: 5,
                    ..
                })
            ),
            "{lowered:?}"
        );
        assert_eq!(
            admin::get(&store, pid(1))
                .await
                .expect("stock")
                .backorder_limit,
            5
        );

        // Paid before the units exist: confirmed, the backorder pending (not missing).
        let paid = engine.confirm(&first.order_id).await.expect("confirm o1");
        assert!(paid.missing.is_empty(), "{name}");
        assert_eq!(
            paid.pending,
            vec![PendingItem {
                product_id: pid(1),
                quantity: 2
            }]
        );
        assert_audit_clean(&db, name).await;

        // 3 arrive: o1's 2 go straight to sold, o2 gets 1 of its 2, nothing is left over.
        let after = admin::adjust(&store, pid(1), 3, &reason())
            .await
            .expect("restock");
        assert_eq!(
            (after.available, after.reserved, after.backordered),
            (0, 1, 2),
            "{name}"
        );
        assert_eq!(backordered_of(&engine, "o1").await, vec![(1, 0)]);
        assert_eq!(backordered_of(&engine, "o2").await, vec![(1, 1)]);
        assert_eq!(backordered_of(&engine, "o3").await, vec![(1, 1)]);
        assert_audit_clean(&db, name).await;

        // o2 cancels: its allocated unit returns, its backorder is dropped.
        let o2 = saldo::domain::OrderId::new("o2").expect("id");
        engine.release(&o2).await.expect("release");
        assert_eq!(books(&engine, 1).await, (1, 0, 1), "{name}");
        assert_audit_clean(&db, name).await;

        // A count of 5 (on hand was 1): 4 arrive, o3's 1 is filled, 3 become available.
        let counted = admin::set_count(&store, pid(1), 5).await.expect("count");
        assert_eq!(
            (counted.available, counted.reserved, counted.backordered),
            (4, 1, 0),
            "{name}"
        );
        let o3 = saldo::domain::OrderId::new("o3").expect("id");
        let paid = engine.confirm(&o3).await.expect("confirm o3");
        assert!(paid.pending.is_empty(), "{name}");
        assert_eq!(books(&engine, 1).await, (4, 0, 0), "{name}");
        assert_audit_clean(&db, name).await;
    }
}

#[tokio::test]
async fn backorders_are_all_or_nothing_and_products_without_a_limit_refuse_as_before() {
    for name in safe_strategies() {
        let db = test_db().await;
        let engine =
            engine_with_stock(&db, name, &StrategyConfig::default(), &[(1, 1), (2, 1)]).await;
        let store = engine.store().clone();
        set_policy(&store, pid(1), 3).await.expect("policy");
        let ttl = Ttl::default();
        // Product 2 has no limit: the whole order is refused, product 1 untouched.
        let refused = engine.reserve(&request("o1", &[(1, 3), (2, 2)], ttl)).await;
        assert!(
            matches!(refused, Err(Error::InsufficientStock { product_id, requested: 2, available: 1 }) if product_id == pid(2)),
            "{name}: {refused:?}"
        );
        assert_eq!(books(&engine, 1).await, (1, 0, 0), "{name}");
        assert_eq!(books(&engine, 2).await, (1, 0, 0), "{name}");
        // Both fit (1 available + 2 backordered of product 1, product 2 in stock).
        let granted = engine
            .reserve(&request("o1", &[(1, 3), (2, 1)], ttl))
            .await
            .expect("reserve");
        let figures: Vec<(i64, i32, i32)> = granted
            .items
            .iter()
            .map(|i| (i.product_id.get(), i.quantity, i.backordered))
            .collect();
        assert_eq!(figures, vec![(1, 3, 2), (2, 1, 0)], "{name}");
        assert_eq!(books(&engine, 1).await, (0, 1, 2), "{name}");
        assert_audit_clean(&db, name).await;
    }
}

#[tokio::test]
async fn expiry_drops_the_backorder_and_a_rereserve_backorders_again() {
    for name in safe_strategies() {
        let db = test_db().await;
        let engine = engine_with_stock(&db, name, &StrategyConfig::default(), &[(1, 1)]).await;
        let store = engine.store().clone();
        set_policy(&store, pid(1), 2).await.expect("policy");
        engine
            .reserve(&request("o1", &[(1, 3)], Ttl::default()))
            .await
            .expect("reserve");
        assert_eq!(books(&engine, 1).await, (0, 1, 2), "{name}");
        let client = db.pool.get().await.expect("client");
        client
            .execute(
                "UPDATE reservations SET expires_at = now() - interval '1 second'",
                &[],
            )
            .await
            .expect("make due");
        assert_eq!(sweeper::sweep(&store).await.expect("sweep"), 1);
        assert_eq!(books(&engine, 1).await, (1, 0, 0), "{name}");
        assert_audit_clean(&db, name).await;
        // A restock now fills nothing: the dropped backorder is gone for good.
        admin::adjust(&store, pid(1), 1, &reason())
            .await
            .expect("restock");
        assert_eq!(books(&engine, 1).await, (2, 0, 0), "{name}");
        let again = engine
            .rereserve(&rerequest("o1", "k1", None))
            .await
            .expect("rereserve");
        assert_eq!(again.items[0].backordered, 1, "{name}");
        assert_eq!(books(&engine, 1).await, (0, 2, 1), "{name}");
        assert_audit_clean(&db, name).await;
    }
}

/// Buyers at once for a preorder: exactly the limit is granted (batched included: the
/// orders its batches route to the locked path), the rest refused.
#[tokio::test]
async fn simultaneous_preorders_never_pass_the_limit() {
    const BUYERS: usize = 24;
    const LIMIT: i64 = 7;
    for name in safe_strategies() {
        let db = test_db().await;
        let engine = engine_with_stock(&db, name, &StrategyConfig::default(), &[(1, 0)]).await;
        set_policy(engine.store(), pid(1), LIMIT)
            .await
            .expect("policy");
        let attempts = (0..BUYERS).map(|i| {
            let engine = engine.clone();
            async move {
                engine
                    .reserve(&request(&format!("b{i}"), &[(1, 1)], Ttl::default()))
                    .await
            }
        });
        let results = join_all(attempts).await;
        let granted = results.iter().filter(|r| r.is_ok()).count();
        let refused = results
            .iter()
            .filter(|r| matches!(r, Err(Error::InsufficientStock { .. })))
            .count();
        assert_eq!(
            (granted, refused),
            (LIMIT as usize, BUYERS - LIMIT as usize),
            "{name}: {results:?}"
        );
        assert_eq!(books(&engine, 1).await, (0, 0, LIMIT as i32), "{name}");
        assert_audit_clean(&db, name).await;
    }
}

/// The audit's backorder checks can fail: each is broken behind the engine's back and found.
#[tokio::test]
async fn the_audit_finds_a_fill_out_of_arrival_order_and_drifted_backorders() {
    let db = test_db().await;
    let name = StrategyName::Atomic;
    let engine = engine_with_stock(&db, name, &StrategyConfig::default(), &[(1, 0)]).await;
    let store = engine.store().clone();
    set_policy(&store, pid(1), 4).await.expect("policy");
    for order in ["o1", "o2"] {
        engine
            .reserve(&request(order, &[(1, 2)], Ttl::default()))
            .await
            .expect("preorder");
    }
    admin::adjust(&store, pid(1), 1, &reason())
        .await
        .expect("restock");
    assert_audit_clean(&db, name).await;
    let client = db.pool.get().await.expect("client");
    // A fill that went to the newer backorder (o2) instead of o1: what "newest first" does.
    client
        .execute(
            "UPDATE backorder_fills SET reservation_id = r.id, arrival = r.backorder_arrival \
             FROM reservations r WHERE r.order_id = 'o2'",
            &[],
        )
        .await
        .expect("misfill");
    let found = audit_stock(&db.pool).await.expect("audit");
    assert!(
        found
            .iter()
            .any(|d| d.invariant == Invariant::FilledInArrivalOrder && d.actual == 1),
        "{found:?}"
    );
    client
        .execute(
            "UPDATE stock SET backordered = backordered - 1 WHERE product_id = 1",
            &[],
        )
        .await
        .expect("drift");
    let found = audit_stock(&db.pool).await.expect("audit");
    assert!(
        found
            .iter()
            .any(|d| d.invariant == Invariant::BackorderedMatchesLive
                && (d.expected, d.actual) == (3, 2)),
        "{found:?}"
    );
}

#[tokio::test]
async fn a_policy_outside_its_bounds_or_on_an_unknown_product_is_refused() {
    let db = test_db().await;
    let engine = engine_with_stock(
        &db,
        StrategyName::Atomic,
        &StrategyConfig::default(),
        &[(1, 0)],
    )
    .await;
    let store = engine.store();
    for bad in [
        -1,
        i64::from(saldo::domain::MAX_BACKORDER_LIMIT) + 1,
        i64::MIN,
    ] {
        assert!(
            matches!(
                set_policy(store, pid(1), bad).await,
                Err(Error::Input(saldo::InputError::BackorderLimitOutOfRange(_)))
            ),
            "{bad}"
        );
    }
    assert!(matches!(
        set_policy(store, pid(9), 1).await,
        Err(Error::UnknownProduct(_))
    ));
    let s = set_policy(store, pid(1), i64::from(saldo::domain::MAX_BACKORDER_LIMIT))
        .await
        .expect("at the limit");
    assert_eq!(s.backorder_limit, saldo::domain::MAX_BACKORDER_LIMIT);
}

/// The repair reads the new columns right: on a product with backorders (one pending on a
/// confirmed order, one partly filled), drifted counters (`backordered` too) are brought back
/// to allocated units, live backorders and history, and the audit is clean again.
#[tokio::test]
async fn repair_restores_a_product_with_backorders() {
    let db = test_db().await;
    let name = StrategyName::Atomic;
    let engine = engine_with_stock(&db, name, &StrategyConfig::default(), &[(1, 1)]).await;
    let store = engine.store().clone();
    set_policy(&store, pid(1), 5).await.expect("policy");
    let paid = engine
        .reserve(&request("o1", &[(1, 3)], Ttl::default()))
        .await
        .expect("o1");
    engine.confirm(&paid.order_id).await.expect("confirm");
    engine
        .reserve(&request("o2", &[(1, 2)], Ttl::default()))
        .await
        .expect("o2");
    admin::adjust(&store, pid(1), 3, &reason())
        .await
        .expect("restock");
    let before = books(&engine, 1).await;
    assert_eq!(before, (0, 1, 1));
    assert_audit_clean(&db, name).await;
    let client = db.pool.get().await.expect("client");
    client
        .execute(
            "UPDATE stock SET available = available + 2, reserved = 0, backordered = 0 \
             WHERE product_id = 1",
            &[],
        )
        .await
        .expect("drift");
    assert!(!audit_stock(&db.pool).await.expect("audit").is_empty());
    let report = saldo::stock::repair::repair(&store, true)
        .await
        .expect("repair");
    assert!(report.remaining.is_empty(), "{report:?}");
    assert_eq!(books(&engine, 1).await, before);
}

/// Restocks racing confirms and releases of the very orders they fill, from one starting line:
/// arrivals lock the backorders before the stock row, as confirm and release lock their rows
/// first, so nothing reaches a caller (a rare cycle with a newer backorder reruns inside) and
/// the books, the limit and the arrival order hold on every strategy.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restocks_racing_confirms_and_releases_keep_the_books() {
    const ORDERS: usize = 12;
    for name in safe_strategies() {
        let db = test_db().await;
        let engine = engine_with_stock(&db, name, &StrategyConfig::default(), &[(1, 0)]).await;
        let store = engine.store().clone();
        set_policy(&store, pid(1), 2 * ORDERS as i64)
            .await
            .expect("policy");
        for i in 0..ORDERS {
            engine
                .reserve(&request(
                    &format!("r{i}"),
                    &[(1, 1 + (i % 2) as i64)],
                    Ttl::default(),
                ))
                .await
                .expect("preorder");
        }
        let start = Arc::new(tokio::sync::Barrier::new(2 * ORDERS));
        let mut tasks = Vec::new();
        for i in 0..ORDERS {
            let (restocker, store) = (start.clone(), store.clone());
            tasks.push(tokio::spawn(async move {
                restocker.wait().await;
                admin::adjust(&store, pid(1), 1, &reason())
                    .await
                    .map(|_| ())
            }));
            let (engine, start) = (engine.clone(), start.clone());
            tasks.push(tokio::spawn(async move {
                let order = saldo::domain::OrderId::new(format!("r{i}")).expect("id");
                start.wait().await;
                if i % 3 == 0 {
                    engine.release(&order).await.map(|_| ())
                } else {
                    engine.confirm(&order).await.map(|_| ())
                }
            }));
        }
        for task in join_all(tasks).await {
            let answer = task.expect("task");
            assert!(answer.is_ok(), "{name}: {answer:?}");
        }
        assert_audit_clean(&db, name).await;
    }
}
