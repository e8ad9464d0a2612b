//! Direct sales: all items or none, idempotent by sale id (replay → the original
//! result, other items → conflict, simultaneous copies sell once), refusals as a
//! reservation's, and the audit counting sold units.

use saldo::audit::Invariant;
use saldo::domain::{OrderItems, SaleId, Tags, Ttl};
use saldo::stock::{admin, SaleRequest, StrategyConfig, StrategyName};
use saldo::Error;

use crate::contract::{assert_audit_clean, engine_with_stock, pid, request, safe_strategies, tags};
use crate::harness::test_db;

fn sale(id: &str, items: &[(i64, i64)]) -> SaleRequest {
    SaleRequest {
        sale_id: SaleId::new(id).expect("sale id"),
        items: OrderItems::new(items.iter().copied()).expect("items"),
        tags: Tags::NONE,
    }
}

#[tokio::test]
async fn a_sale_is_all_or_nothing_and_idempotent() {
    for name in safe_strategies() {
        let db = test_db().await;
        let engine =
            engine_with_stock(&db, name, &StrategyConfig::default(), &[(1, 5), (2, 1)]).await;
        let store = engine.store().clone();
        let short = engine.sell(&sale("s-1", &[(1, 2), (2, 2)])).await;
        assert!(
            matches!(short, Err(Error::InsufficientStock { product_id, requested: 2, available: 1 }) if product_id == pid(2)),
            "{name}: {short:?}"
        );
        assert_eq!(
            admin::get(&store, pid(1)).await.expect("stock").available,
            5
        );
        let unknown = engine.sell(&sale("s-1", &[(1, 1), (9, 1)])).await;
        assert!(
            matches!(unknown, Err(Error::UnknownProduct(p)) if p == pid(9)),
            "{name}"
        );
        assert_eq!(
            admin::get(&store, pid(1)).await.expect("stock").available,
            5
        );

        // The refused attempts left no trace: the same id may now sell.
        let sold = engine
            .sell(&sale("s-1", &[(2, 1), (1, 2)]))
            .await
            .expect("sell");
        assert!(!sold.replayed);
        assert_eq!(sold.items.len(), 2);
        assert_eq!(
            (sold.items[0].product_id, sold.items[0].quantity),
            (pid(1), 2)
        );
        let s1 = admin::get(&store, pid(1)).await.expect("stock");
        let s2 = admin::get(&store, pid(2)).await.expect("stock");
        assert_eq!(
            (s1.available, s1.reserved, s2.available),
            (3, 0, 0),
            "{name}"
        );

        let replay = engine
            .sell(&sale("s-1", &[(1, 2), (2, 1)]))
            .await
            .expect("replay");
        assert!(replay.replayed);
        assert_eq!(
            (replay.items.clone(), replay.sold_at),
            (sold.items, sold.sold_at)
        );
        assert!(matches!(
            engine.sell(&sale("s-1", &[(1, 1)])).await,
            Err(Error::SaleConflict(_))
        ));
        // The same items with a reference the sale was not made with: a conflict too.
        let tagged = SaleRequest {
            tags: tags("pay-1", &[("channel", "pos")]),
            ..sale("s-1", &[(1, 2), (2, 1)])
        };
        assert!(matches!(
            engine.sell(&tagged).await,
            Err(Error::SaleConflict(_))
        ));
        // A tagged sale stores and answers its tags; a replay must carry the same ones.
        let tagged_sale = SaleRequest {
            tags: tagged.tags.clone(),
            ..sale("s-2", &[(1, 1)])
        };
        let first = engine.sell(&tagged_sale).await.expect("tagged sale");
        assert_eq!(
            (first.replayed, &first.tags),
            (false, &tagged.tags),
            "{name}"
        );
        let again = engine.sell(&tagged_sale).await.expect("tagged replay");
        assert_eq!(
            (again.replayed, &again.tags),
            (true, &tagged.tags),
            "{name}"
        );
        assert!(matches!(
            engine.sell(&sale("s-2", &[(1, 1)])).await,
            Err(Error::SaleConflict(_))
        ));
        assert_eq!(
            admin::get(&store, pid(1)).await.expect("stock").available,
            2
        );
        assert_audit_clean(&db, name).await;
    }
}

/// Copies of one sale sent at once.
const COPIES: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn simultaneous_copies_of_a_sale_sell_once() {
    for name in safe_strategies() {
        let db = test_db().await;
        let engine = engine_with_stock(&db, name, &StrategyConfig::default(), &[(1, 100)]).await;
        let tasks: Vec<_> = (0..COPIES)
            .map(|_| {
                let engine = engine.clone();
                tokio::spawn(async move { engine.sell(&sale("s-dup", &[(1, 3)])).await })
            })
            .collect();
        let mut fresh = 0;
        for t in tasks {
            let s = t.await.expect("join").expect("sell");
            fresh += usize::from(!s.replayed);
        }
        assert_eq!(fresh, 1, "{name}");
        let s = admin::get(engine.store(), pid(1)).await.expect("stock");
        assert_eq!(s.available, 97, "{name}");
        assert_audit_clean(&db, name).await;
    }
}

#[tokio::test]
async fn the_audit_counts_sold_units() {
    let db = test_db().await;
    let engine = engine_with_stock(
        &db,
        StrategyName::Atomic,
        &StrategyConfig::default(),
        &[(1, 10), (2, 10)],
    )
    .await;
    engine
        .reserve(&request("o-1", &[(1, 2)], Ttl::default()))
        .await
        .expect("reserve");
    engine.sell(&sale("s-1", &[(1, 3)])).await.expect("sell");
    engine.sell(&sale("s-2", &[(2, 4)])).await.expect("sell");
    assert_audit_clean(&db, StrategyName::Atomic).await;
    // A count after the sales starts the history again: still clean.
    admin::set_count(engine.store(), pid(2), 6)
        .await
        .expect("count");
    assert_audit_clean(&db, StrategyName::Atomic).await;
    // A sale written behind the engine's back (rows, no stock change) is a divergence.
    let client = db.pool.get().await.expect("client");
    client
        .batch_execute(
            "INSERT INTO sales (sale_id) VALUES ('s-raw'); \
             INSERT INTO sale_items (sale_id, product_id, quantity) VALUES ('s-raw', 1, 1)",
        )
        .await
        .expect("raw sale");
    let d = db.audit_stock().await.expect("audit");
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(
        (d[0].product_id, d[0].invariant, d[0].expected, d[0].actual),
        (pid(1), Invariant::OnHandMatchesHistory, 6, 7)
    );
}
