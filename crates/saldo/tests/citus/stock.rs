//! Stock on Citus only: orders whose products live on different workers, the `orders` router,
//! and the operations refused on Citus up front.

use saldo::domain::{LocationId, OrderId, Priority, Ttl};
use saldo::stock::{admin, backorders, locations, StrategyConfig, StrategyName};
use saldo::Error;
use saldo_lab::race::buyers::buy_all;
use saldo_lab::testing::TestDb;

use crate::contract::{engine_with_stock, pid, request};
use crate::harness::test_db;

/// The worker holding `product`'s stock shard.
async fn worker_of(db: &TestDb, product: i64) -> String {
    saldo_lab::testing::worker_of(db, saldo::ops::DistributedBy::Product, product).await
}

/// Three products, not all on one worker: the lowest id, then the first ids whose shards sit on
/// the other worker, so every order below spans both workers.
async fn products_on_both_workers(db: &TestDb) -> [i64; 3] {
    let first = worker_of(db, 1).await;
    let mut other = Vec::new();
    for p in 2..=64 {
        if worker_of(db, p).await != first {
            other.push(p);
        }
        if other.len() == 2 {
            return [1, other[0], other[1]];
        }
    }
    panic!("products 1..=64 all on the worker at port {first}");
}

/// The router row of an order: its products.
async fn routed(db: &TestDb, order: &str) -> Vec<i64> {
    let client = db.pool.get().await.expect("client");
    client
        .query_one("SELECT products FROM orders WHERE order_id = $1", &[&order])
        .await
        .expect("router row")
        .get(0)
}

/// Crossing multi-item orders over three products on two workers ((a,b), (b,c), (c,a), which
/// form a cycle unless every transaction locks in one global order): all or nothing, no unit
/// sold twice, no deadlock or other error reaching a buyer, and the routers list each order's
/// products. Then confirm and release go through the routers and the audit stays clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crossing_orders_on_two_workers_never_oversell_nor_deadlock() {
    for name in [StrategyName::Atomic, StrategyName::Batched] {
        let db = test_db().await;
        let [a, b, c] = products_on_both_workers(&db).await;
        let engine = engine_with_stock(
            &db,
            name,
            &StrategyConfig::default(),
            &[(a, 6), (b, 6), (c, 6)],
        )
        .await;
        let pairs = [(a, b), (b, c), (c, a)];
        let orders: Vec<_> = (0..24)
            .map(|i| {
                let (x, y) = pairs[i % 3];
                request(&format!("o{i}"), &[(x, 1), (y, 1)], Ttl::default())
            })
            .collect();
        let results = buy_all(&engine, &orders).await.expect("race");
        let mut sold: std::collections::BTreeMap<i64, i32> = Default::default();
        let mut granted = Vec::new();
        for (order, result) in orders.iter().zip(results) {
            match result {
                Ok(r) => {
                    assert_eq!(r.items.len(), 2, "{name}: all or nothing");
                    for item in &r.items {
                        *sold.entry(item.product_id.get()).or_default() += item.quantity;
                    }
                    granted.push(order.order_id.clone());
                }
                Err(Error::InsufficientStock { .. }) => {}
                Err(e) => panic!("{name}: {} got {e:?}", order.order_id),
            }
        }
        // 18 units, two per order: 9 orders at most, and every unit sold once at most.
        assert!(sold.values().all(|&n| n <= 6), "{name}: {sold:?}");
        assert!(!granted.is_empty(), "{name}");
        for order in &granted {
            let mut products = routed(&db, order.as_str()).await;
            products.sort_unstable();
            assert_eq!(products.len(), 2, "{name}: router of {order}");
        }
        for (i, order) in granted.iter().enumerate() {
            if i % 2 == 0 {
                engine.confirm(order).await.expect("confirm");
            } else {
                engine.release(order).await.expect("release");
            }
        }
        for p in [a, b, c] {
            let s = admin::get(engine.store(), pid(p)).await.expect("stock");
            assert_eq!(s.reserved, 0, "{name}: product {p}");
            assert_eq!(
                s.available,
                6 - sold_confirmed(&granted, &orders, p),
                "{name}"
            );
        }
        let divergences = db.audit_stock().await.expect("audit");
        assert!(divergences.is_empty(), "{name}: {divergences:?}");
    }
}

/// Units of `product` in the confirmed (even-indexed) granted orders.
fn sold_confirmed(granted: &[OrderId], orders: &[saldo::stock::ReserveRequest], p: i64) -> i32 {
    granted
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .filter_map(|(_, o)| orders.iter().find(|r| &r.order_id == o))
        .flat_map(|r| r.items.iter())
        .filter(|(product, _)| product.get() == p)
        .map(|(_, q)| q.get())
        .sum()
}

/// What the stock engine does not run on Citus yet is refused before anything is written:
/// backorders and stock per location. Typed, so the service answers 409
/// `unsupported-on-citus`, never a 500 or half a write.
#[tokio::test]
async fn backorders_and_locations_are_refused_up_front() {
    let db = test_db().await;
    let store = db.store();
    admin::set_count(&store, pid(1), 5).await.expect("count");
    let before = admin::get(&store, pid(1)).await.expect("stock");
    let refused = |r: Result<(), Error>, what: &str| match r {
        Err(Error::UnsupportedOnCitus(_)) => {}
        other => panic!("{what}: {other:?}"),
    };
    refused(
        backorders::set_policy(&store, pid(1), 3).await.map(drop),
        "backorder policy",
    );
    let location = LocationId::new("north").expect("location");
    refused(
        locations::set_count(&store, pid(1), &location, 2)
            .await
            .map(drop),
        "location count",
    );
    refused(
        locations::set_priority(&store, &location, Priority::new(1).expect("priority"))
            .await
            .map(drop),
        "location priority",
    );
    assert_eq!(admin::get(&store, pid(1)).await.expect("stock"), before);
    let client = db.pool.get().await.expect("client");
    let locations: i64 = client
        .query_one("SELECT count(*) FROM locations", &[])
        .await
        .expect("locations")
        .get(0);
    assert_eq!(locations, 0);
}

/// A direct sale of products on both workers runs on Citus as on one node: all or nothing, a
/// replay takes nothing, the same id with other items is a conflict, a shortfall writes
/// nothing (the sale's key is a reference table's, relayed from a worker on a duplicate).
#[tokio::test]
async fn a_direct_sale_across_workers_sells_once_or_not_at_all() {
    use saldo::domain::{OrderItems, SaleId};
    use saldo::stock::sales::{sell, SaleRequest};
    let db = test_db().await;
    let [a, b, _] = products_on_both_workers(&db).await;
    let store = db.store();
    for p in [a, b] {
        admin::set_count(&store, pid(p), 3).await.expect("count");
    }
    let sale = |id: &str, items: &[(i64, i64)]| SaleRequest {
        sale_id: SaleId::new(id).expect("sale id"),
        items: OrderItems::new(items.iter().copied()).expect("items"),
        tags: saldo::domain::Tags::NONE,
    };
    let first = sell(&store, &sale("s1", &[(a, 2), (b, 1)]))
        .await
        .expect("sold");
    assert!(!first.replayed);
    let again = sell(&store, &sale("s1", &[(a, 2), (b, 1)]))
        .await
        .expect("replay");
    assert!(again.replayed);
    assert!(matches!(
        sell(&store, &sale("s1", &[(a, 1)])).await,
        Err(Error::SaleConflict(_))
    ));
    assert!(matches!(
        sell(&store, &sale("s2", &[(a, 1), (b, 3)])).await,
        Err(Error::InsufficientStock { product_id, .. }) if product_id == pid(b)
    ));
    let left = |p| {
        let store = store.clone();
        async move { admin::get(&store, pid(p)).await.expect("stock").available }
    };
    assert_eq!((left(a).await, left(b).await), (1, 2));
    let divergences = db.audit_stock().await.expect("audit");
    assert!(divergences.is_empty(), "{divergences:?}");
}

/// An order that names a location (`location_id` on an item, or `"allocation": "single"`) is
/// routed to the located path even when no product is located; on Citus that path is refused
/// before any lock, for every strategy (its statements lock many products' rows at once:
/// 0A000 "could not run distributed query with FOR UPDATE", a 500, before the guard).
#[tokio::test]
async fn an_order_naming_a_location_is_refused_before_any_lock() {
    use saldo::domain::AllocationMode;
    use saldo::stock::Placement;
    let db = test_db().await;
    let store = db.store();
    for p in [1, 2] {
        admin::set_count(&store, pid(p), 5).await.expect("count");
    }
    let before = [
        admin::get(&store, pid(1)).await.expect("stock"),
        admin::get(&store, pid(2)).await.expect("stock"),
    ];
    let pinned = Placement {
        pinned: [(pid(2), LocationId::new("north").expect("location"))].into(),
        ..Placement::default()
    };
    let single = Placement {
        allocation: AllocationMode::Single,
        ..Placement::default()
    };
    for name in [StrategyName::Atomic, StrategyName::Batched] {
        let engine = saldo::stock::build(name, store.clone(), &StrategyConfig::default());
        for (i, placement) in [&pinned, &single].into_iter().enumerate() {
            let items = [(1, 1), (2, 1)];
            let order = request(&format!("{}-{i}", name.as_str()), &items, Ttl::default());
            match engine.reserve_placed(&order, placement).await {
                Err(Error::UnsupportedOnCitus(_)) => {}
                other => panic!("{name:?} {placement:?}: {other:?}"),
            }
        }
    }
    let after = [
        admin::get(&store, pid(1)).await.expect("stock"),
        admin::get(&store, pid(2)).await.expect("stock"),
    ];
    assert_eq!(after, before);
}

/// A transaction's lock timeout holds on the worker where its row waits, not only on the
/// coordinator (saldo sets `citus.propagate_set_commands = 'local'` before its timeouts): a
/// reserve behind a held stock row gives up after its 300 ms lock timeout with 55P03, long
/// before its 60 s statement timeout. Without the propagation the worker session waits with
/// PostgreSQL's default (no lock timeout) until the statement timeout cancels it: 57014.
#[tokio::test]
async fn the_lock_timeout_holds_on_the_workers() {
    use saldo::retry::RetryPolicy;
    use saldo::stock::{build, Store};
    use saldo_lab::testing::RowLock;
    let db = test_db().await;
    admin::set_count(&db.store(), pid(1), 5)
        .await
        .expect("count");
    let held = RowLock::take_each(
        &db,
        "SELECT 1 FROM stock WHERE product_id = $1 FOR UPDATE",
        &[1],
    )
    .await;
    let tx = db
        .tx
        .clone()
        .with_lock_timeout_ms(300)
        .with_statement_timeout_ms(60_000)
        .with_retry(RetryPolicy::default().with_max_attempts(1));
    let store = Store::new(db.pool.clone(), tx).with_layout(db.layout);
    let engine = build(StrategyName::Atomic, store, &StrategyConfig::default());
    let started = std::time::Instant::now();
    let refused = engine
        .reserve(&request("o-waits", &[(1, 1)], Ttl::default()))
        .await
        .expect_err("the row is held");
    let waited = started.elapsed();
    held.release().await;
    assert_eq!(
        refused.sqlstate().map(|c| c.code()),
        Some("55P03"),
        "a lock timeout, after {waited:?}: {refused:?}"
    );
    assert_eq!(
        admin::get(&db.store(), pid(1))
            .await
            .expect("stock")
            .available,
        5
    );
}
