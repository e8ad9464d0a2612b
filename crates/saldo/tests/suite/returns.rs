//! Partial confirm and release, and returns, in the library (issue 27): the named lines only
//! under every strategy; concurrent returns of one order never bring back more than was
//! confirmed (the conditional UPDATE on the line's row), beside a naive read-then-write that
//! does, sequenced so it does every run. Rerun on Citus by `tests/citus.rs`.

use std::sync::Arc;

use saldo::domain::{Lines, OrderId, Quantity, Reason, ReturnId, StockState, Ttl};
use saldo::stock::{
    admin, build, ReturnItemRequest, ReturnItems, ReturnRequest, Status, StrategyConfig,
    StrategyName,
};
use saldo::Error;
use tokio::sync::Barrier;

use crate::contract::{assert_audit_clean, engine_with_stock, pid, request, safe_strategies};
use crate::harness::test_db;

/// Returns sent at once against one order's line of [`CONFIRMED`] units, one unit each.
const RETURNS: usize = 8;
const CONFIRMED: i64 = 3;

fn order(id: &str) -> OrderId {
    OrderId::new(id).expect("order id")
}

fn give_back(id: &str, order_id: &str, product: i64, quantity: i64) -> ReturnRequest {
    ReturnRequest {
        return_id: ReturnId::new(id).expect("return id"),
        order_id: order(order_id),
        items: ReturnItems::new([ReturnItemRequest {
            product_id: pid(product),
            quantity: Quantity::new(quantity).expect("quantity"),
            location_id: None,
            state: StockState::Available,
        }])
        .expect("items"),
        reason: Reason::new("customer return").expect("reason"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partial_settles_under_every_strategy_and_racing_returns_stay_within_confirmed() {
    let db = test_db().await;
    let first = engine_with_stock(
        &db,
        StrategyName::Atomic,
        &StrategyConfig::default(),
        &[(1, 100), (2, 100)],
    )
    .await;
    let store = first.store().clone();
    let one = Lines::new([1]).expect("lines");
    let two = Lines::new([2]).expect("lines");
    for name in safe_strategies() {
        let engine = build(name, store.clone(), &StrategyConfig::default());
        let id = format!("part-{name}");
        let o = order(&id);
        engine
            .reserve(&request(&id, &[(1, 1), (2, 1)], Ttl::default()))
            .await
            .expect("reserve");
        let c = engine.confirm_lines(&o, Some(&one)).await.expect("confirm");
        assert_eq!(c.confirmed.len(), 1, "{name}: {c:?}");
        assert_eq!(c.confirmed[0].product_id, pid(1), "{name}");
        let items = engine.order(&o).await.expect("order");
        assert_eq!(items[1].status, Status::Active, "{name}: line 2 untouched");
        match engine.release_lines(&o, Some(&one)).await {
            Err(Error::NotReleasable { status, .. }) => assert_eq!(status, Status::Confirmed),
            other => panic!("{name}: release of a sold line answered {other:?}"),
        }
        let r = engine.release_lines(&o, Some(&two)).await.expect("release");
        assert_eq!(r.released.len(), 1, "{name}");
    }

    first
        .reserve(&request("race", &[(1, CONFIRMED)], Ttl::default()))
        .await
        .expect("reserve");
    first.confirm(&order("race")).await.expect("confirm");
    let before = admin::get(&store, pid(1)).await.expect("stock").available;
    let start = Arc::new(Barrier::new(RETURNS));
    let tasks: Vec<_> = (0..RETURNS)
        .map(|i| {
            let (engine, start) = (first.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                engine
                    .record_return(&give_back(&format!("race-{i}"), "race", 1, 1))
                    .await
            })
        })
        .collect();
    let mut back = 0;
    for t in tasks {
        match t.await.expect("join") {
            Ok(_) => back += 1,
            Err(Error::ReturnExceedsConfirmed {
                confirmed,
                returned,
                ..
            }) => assert_eq!((confirmed, returned), (CONFIRMED, CONFIRMED)),
            Err(e) => panic!("a return failed: {e}"),
        }
    }
    assert_eq!(back, CONFIRMED, "returns that came back");
    let after = admin::get(&store, pid(1)).await.expect("stock").available;
    assert_eq!(i64::from(after - before), CONFIRMED);
    assert_audit_clean(&db, StrategyName::Atomic).await;
}

/// What a return without the conditional would do: read what the line confirmed and what came
/// back (unlocked), then write the count it computed and the units. Every task reads before
/// any writes (a barrier between the two steps), so each sees nothing returned yet and all of
/// them bring a unit back: more than was confirmed, every run. The engine's return does the
/// check inside the UPDATE on the row it holds locked (the test above). Its write is READ
/// COMMITTED, as the naive code would run (the serializable binary's cluster would refuse it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_naive_read_then_write_return_brings_back_more_than_was_confirmed() {
    if crate::harness::CITUS {
        return; // The naive twin shows the race; one layout shows it.
    }
    let db = test_db().await;
    let engine = engine_with_stock(
        &db,
        StrategyName::Atomic,
        &StrategyConfig::default(),
        &[(1, 10)],
    )
    .await;
    engine
        .reserve(&request("naive", &[(1, CONFIRMED)], Ttl::default()))
        .await
        .expect("reserve");
    engine.confirm(&order("naive")).await.expect("confirm");
    let pool = db.new_pool(RETURNS);
    let read_all = Arc::new(Barrier::new(RETURNS));
    let tasks: Vec<_> = (0..RETURNS)
        .map(|_| {
            let (pool, read_all) = (pool.clone(), read_all.clone());
            tokio::spawn(async move {
                let client = pool.get().await.expect("client");
                let line = client
                    .query_one(
                        "SELECT quantity - backordered AS confirmed, returned FROM reservations \
                         WHERE order_id = 'naive' AND product_id = 1 AND status = 'confirmed'",
                        &[],
                    )
                    .await
                    .expect("read");
                let (confirmed, returned): (i32, i32) = (line.get(0), line.get(1));
                read_all.wait().await;
                if returned + 1 > confirmed {
                    return false;
                }
                client
                    .batch_execute(&format!(
                        "BEGIN ISOLATION LEVEL READ COMMITTED; \
                         UPDATE reservations SET returned = {} \
                          WHERE order_id = 'naive' AND product_id = 1; \
                         UPDATE stock SET available = available + 1 WHERE product_id = 1; \
                         COMMIT",
                        returned + 1
                    ))
                    .await
                    .expect("write");
                true
            })
        })
        .collect();
    let mut back = 0;
    for t in tasks {
        back += i64::from(t.await.expect("join"));
    }
    assert_eq!(
        back, RETURNS as i64,
        "every naive return read 0 returned and wrote"
    );
    assert!(
        back > CONFIRMED,
        "the naive returns stayed within what was confirmed"
    );
    let s = admin::get(engine.store(), pid(1)).await.expect("stock");
    assert_eq!(i64::from(s.available), 10 - CONFIRMED + RETURNS as i64);
}
