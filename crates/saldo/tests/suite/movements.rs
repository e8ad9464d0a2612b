//! A product's movements (migration V22), on this binary's cluster (`harness`; rerun on Citus
//! by `tests/citus.rs`): every write of a product's stock row leaves one movement naming what
//! made it, whose counters are the row's right after it, under every strategy; pages follow
//! their cursor and refuse another statement's; concurrent reservations of one product leave
//! gap-free movements whose last is the row, where a naive journal that numbers a movement by
//! the version it read before the write loses them every run.

use std::sync::Arc;

use saldo::domain::{OrderId, OrderItems, Quantity, Reason, ReturnId, SaleId, Tags, Ttl};
use saldo::listing::movements::{movements, MovementFilter};
use saldo::listing::{Cursor, PageLimit};
use saldo::stock::movements::{MoveKind, Movement};
use saldo::stock::{
    admin, build, ReturnItemRequest, ReturnItems, ReturnRequest, SaleRequest, StrategyConfig,
    StrategyName,
};
use saldo::{Error, InputError};
use tokio::sync::Barrier;

use crate::contract::{assert_audit_clean, engine_with_stock, pid, request, safe_strategies};
use crate::harness::test_db;

fn order(id: &str) -> OrderId {
    OrderId::new(id).expect("order id")
}

fn limit(n: i64) -> PageLimit {
    PageLimit::new(n).expect("limit")
}

/// Every movement of `product`, a page of `per_page` at a time through the cursors.
async fn all_movements(store: &saldo::stock::Store, product: i64, per_page: i64) -> Vec<Movement> {
    let filter = MovementFilter::new(pid(product), None, None);
    let mut out = Vec::new();
    let mut cursor: Option<Cursor> = None;
    loop {
        let page = movements(store, &filter, limit(per_page), cursor.as_ref())
            .await
            .expect("page");
        assert!(page.items.len() <= per_page as usize);
        out.extend(page.items);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return out,
        }
    }
}

/// The product's counters (available, reserved, backordered) and version, read directly.
async fn row(store: &saldo::stock::Store, product: i64) -> ((i32, i32, i32), i64) {
    let client = store.pool.get().await.expect("client");
    let r = client
        .query_one(
            "SELECT available, reserved, backordered, version FROM stock WHERE product_id = $1",
            &[&product],
        )
        .await
        .expect("row");
    ((r.get(0), r.get(1), r.get(2)), r.get(3))
}

/// Seqs one after the other, each change the difference of its counters with the one before,
/// the last one the row.
async fn assert_journal_is_the_row(store: &saldo::stock::Store, product: i64, all: &[Movement]) {
    for pair in all.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert_eq!(b.seq, a.seq + 1, "gap-free: {a:?} then {b:?}");
        assert!(b.at >= a.at);
        assert_eq!(
            (b.available_delta, b.reserved_delta, b.backordered_delta),
            (
                b.available_after - a.available_after,
                b.reserved_after - a.reserved_after,
                b.backordered_after - a.backordered_after
            )
        );
    }
    let last = all.last().expect("a movement");
    let (counters, version) = row(store, product).await;
    assert_eq!(last.seq, version);
    assert_eq!(
        (
            last.available_after,
            last.reserved_after,
            last.backordered_after
        ),
        counters
    );
}

#[tokio::test]
async fn each_step_of_an_order_leaves_its_movement_under_every_strategy() {
    let db = test_db().await;
    let first = engine_with_stock(&db, StrategyName::Atomic, &StrategyConfig::default(), &[]).await;
    let store = first.store().clone();
    for (i, name) in safe_strategies().enumerate() {
        let product = 10 + i as i64;
        admin::set_count(&store, pid(product), 10)
            .await
            .expect("count");
        let engine = build(name, store.clone(), &StrategyConfig::default());
        let (kept, dropped) = (format!("k-{name}"), format!("d-{name}"));
        engine
            .reserve(&request(&kept, &[(product, 2)], Ttl::default()))
            .await
            .expect("reserve");
        engine.confirm(&order(&kept)).await.expect("confirm");
        engine
            .reserve(&request(&dropped, &[(product, 3)], Ttl::default()))
            .await
            .expect("reserve");
        engine.release(&order(&dropped)).await.expect("release");
        let sale = format!("s-{name}");
        engine
            .sell(&SaleRequest {
                sale_id: SaleId::new(&sale).expect("sale id"),
                items: OrderItems::new([(product, 1)]).expect("items"),
                tags: Tags::NONE,
            })
            .await
            .expect("sale");
        let back = format!("r-{name}");
        engine
            .record_return(&ReturnRequest {
                return_id: ReturnId::new(&back).expect("return id"),
                order_id: order(&kept),
                items: ReturnItems::new([ReturnItemRequest {
                    product_id: pid(product),
                    quantity: Quantity::new(1).expect("quantity"),
                    location_id: None,
                    state: saldo::domain::StockState::Available,
                }])
                .expect("items"),
                reason: Reason::new("damaged").expect("reason"),
            })
            .await
            .expect("return");
        admin::adjust(
            &store,
            pid(product),
            -2,
            &Reason::new("write-off").expect("reason"),
        )
        .await
        .expect("adjust");

        let all = all_movements(&store, product, 2).await;
        let seen: Vec<_> = all
            .iter()
            .map(|m| {
                (
                    m.kind,
                    m.order_id.as_deref(),
                    m.sale_id.as_deref(),
                    m.return_id.as_deref(),
                    (m.available_delta, m.reserved_delta, m.backordered_delta),
                    (m.available_after, m.reserved_after, m.backordered_after),
                )
            })
            .collect();
        let (k, d, s, r) = (Some(&*kept), Some(&*dropped), Some(&*sale), Some(&*back));
        assert_eq!(
            seen,
            vec![
                (MoveKind::Count, None, None, None, (10, 0, 0), (10, 0, 0)),
                (MoveKind::Reserve, k, None, None, (-2, 2, 0), (8, 2, 0)),
                (MoveKind::Confirm, k, None, None, (0, -2, 0), (8, 0, 0)),
                (MoveKind::Reserve, d, None, None, (-3, 3, 0), (5, 3, 0)),
                (MoveKind::Release, d, None, None, (3, -3, 0), (8, 0, 0)),
                (MoveKind::Sale, None, s, None, (-1, 0, 0), (7, 0, 0)),
                (MoveKind::Return, k, None, r, (1, 0, 0), (8, 0, 0)),
                (
                    MoveKind::Adjustment,
                    None,
                    None,
                    None,
                    (-2, 0, 0),
                    (6, 0, 0)
                ),
            ],
            "{name}"
        );
        assert_journal_is_the_row(&store, product, &all).await;
        assert_audit_clean(&db, name).await;
    }
}

#[tokio::test]
async fn pages_follow_their_cursor_and_refuse_another_statement() {
    let db = test_db().await;
    let engine = engine_with_stock(
        &db,
        StrategyName::Atomic,
        &StrategyConfig::default(),
        &[(1, 50), (2, 50)],
    )
    .await;
    let store = engine.store().clone();
    for i in 0..5 {
        engine
            .reserve(&request(&format!("p-{i}"), &[(1, 1)], Ttl::default()))
            .await
            .expect("reserve");
    }
    let one = MovementFilter::new(pid(1), None, None);
    let first = movements(&store, &one, limit(4), None).await.expect("page");
    assert_eq!(first.items.len(), 4);
    let next = first.next.expect("more");
    let second = movements(&store, &one, limit(4), Some(&next))
        .await
        .expect("page");
    assert_eq!(second.items.len(), 2);
    assert!(second.next.is_none());
    assert_eq!(second.items[0].seq, first.items[3].seq + 1);
    // Page sizes do not change what is read.
    let whole = all_movements(&store, 1, 1).await;
    let mut both = first.items.clone();
    both.extend(second.items);
    assert_eq!(whole, both);

    // Product 1's cursor on product 2, or on another range of product 1: refused.
    let two = MovementFilter::new(pid(2), None, None);
    for other in [
        two,
        MovementFilter::new(pid(1), Some(chrono::Utc::now()), None),
    ] {
        match movements(&store, &other, limit(4), Some(&next)).await {
            Err(Error::Input(InputError::CursorInvalid { list })) => {
                assert_eq!(list, "movements")
            }
            other => panic!("another statement's cursor: {other:?}"),
        }
    }
    // A range before every movement is empty; an unknown product is refused.
    let past = chrono::DateTime::UNIX_EPOCH;
    let none = MovementFilter::new(pid(1), None, Some(past));
    let page = movements(&store, &none, limit(4), None)
        .await
        .expect("page");
    assert!(page.items.is_empty() && page.next.is_none());
    let unknown = MovementFilter::new(pid(99), None, None);
    assert!(matches!(
        movements(&store, &unknown, limit(4), None).await,
        Err(Error::UnknownProduct(p)) if p == pid(99)
    ));
    assert!(PageLimit::new(0).is_err() && PageLimit::new(1001).is_err());
}

/// Buyers of one unit each at once on one product.
const BUYERS: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_reservations_leave_gap_free_movements_ending_at_the_row() {
    let db = test_db().await;
    for (i, name) in [StrategyName::Atomic, StrategyName::Batched]
        .into_iter()
        .enumerate()
    {
        let product = 1 + i as i64;
        let engine = Arc::new(
            engine_with_stock(&db, name, &StrategyConfig::default(), &[(product, 100)]).await,
        );
        let start = Arc::new(Barrier::new(BUYERS));
        let buyers: Vec<_> = (0..BUYERS)
            .map(|b| {
                let (engine, start) = (engine.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    engine
                        .reserve(&request(
                            &format!("c-{name}-{b}"),
                            &[(product, 1)],
                            Ttl::default(),
                        ))
                        .await
                })
            })
            .collect();
        for b in buyers {
            b.await.expect("task").expect("reserve");
        }
        let store = engine.store().clone();
        let all = all_movements(&store, product, 7).await;
        assert_journal_is_the_row(&store, product, &all).await;
        let reserved: i32 = all
            .iter()
            .filter(|m| m.kind == MoveKind::Reserve)
            .map(|m| m.reserved_delta)
            .sum();
        assert_eq!(reserved, BUYERS as i32, "{name}");
        assert_audit_clean(&db, name).await;
    }
}

/// The naive journal: a movement numbered by the version its writer read before taking the
/// row, with the counters it read minus its unit. Every buyer reads before any writes (the
/// barrier), so all of them number theirs the same: one movement survives where the row moved
/// by [`BUYERS`], and the journal no longer ends at the row (the engine's check above).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_journal_numbered_before_the_lock_loses_movements() {
    let db = test_db().await;
    let engine = engine_with_stock(
        &db,
        StrategyName::Atomic,
        &StrategyConfig::default(),
        &[(1, 100)],
    )
    .await;
    let store = engine.store().clone();
    let read_all = Arc::new(Barrier::new(BUYERS));
    let tasks: Vec<_> = (0..BUYERS)
        .map(|_| {
            let (pool, read_all) = (store.pool.clone(), read_all.clone());
            tokio::spawn(async move {
                let client = pool.get().await.expect("client");
                let seen = client
                    .query_one(
                        "SELECT available, reserved, version FROM stock WHERE product_id = 1",
                        &[],
                    )
                    .await
                    .expect("read");
                let (available, reserved, version): (i32, i32, i64) =
                    (seen.get(0), seen.get(1), seen.get(2));
                read_all.wait().await;
                client
                    .batch_execute(
                        "BEGIN; UPDATE stock SET available = available - 1, \
                         reserved = reserved + 1, version = version + 1 WHERE product_id = 1",
                    )
                    .await
                    .expect("take");
                let wrote = client
                    .execute(
                        "INSERT INTO product_movements (product_id, seq, kind, available_after, \
                         reserved_after, backordered_after, at) \
                         VALUES (1, $1, 'reserve', $2, $3, 0, clock_timestamp()) \
                         ON CONFLICT DO NOTHING",
                        &[&(version + 1), &(available - 1), &(reserved + 1)],
                    )
                    .await
                    .expect("movement");
                client.batch_execute("COMMIT").await.expect("commit");
                wrote
            })
        })
        .collect();
    let mut written = 0;
    for t in tasks {
        written += t.await.expect("task");
    }
    assert_eq!(
        written, 1,
        "every naive writer numbered its movement the same"
    );
    let all = all_movements(&store, 1, 100).await;
    let (counters, version) = row(&store, 1).await;
    let last = all.last().expect("a movement");
    assert_ne!(last.seq, version, "the naive journal ends before the row");
    assert_ne!(
        (
            last.available_after,
            last.reserved_after,
            last.backordered_after
        ),
        counters
    );
}

/// An arrival that fills backorders writes the row twice (the count, then the fill): each
/// write its movement, the fill's named by the arrival (single node: backorders are refused on
/// Citus).
#[tokio::test]
async fn an_arrival_that_fills_backorders_leaves_both_movements() {
    if crate::harness::CITUS {
        return;
    }
    let db = test_db().await;
    let engine = engine_with_stock(
        &db,
        StrategyName::Atomic,
        &StrategyConfig::default(),
        &[(1, 0)],
    )
    .await;
    let store = engine.store().clone();
    saldo::stock::backorders::set_policy(&store, pid(1), 3)
        .await
        .expect("policy");
    engine
        .reserve(&request("pre-1", &[(1, 2)], Ttl::default()))
        .await
        .expect("backordered");
    admin::adjust(&store, pid(1), 5, &Reason::new("delivery").expect("reason"))
        .await
        .expect("arrival");
    let all = all_movements(&store, 1, 100).await;
    let seen: Vec<_> = all
        .iter()
        .map(|m| {
            (
                m.kind,
                (m.available_after, m.reserved_after, m.backordered_after),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (MoveKind::Count, (0, 0, 0)),
            (MoveKind::Policy, (0, 0, 0)),
            (MoveKind::Reserve, (0, 0, 2)),
            (MoveKind::Adjustment, (5, 0, 2)),
            (MoveKind::Adjustment, (3, 2, 0)),
        ]
    );
    assert_journal_is_the_row(&store, 1, &all).await;
    assert_audit_clean(&db, StrategyName::Atomic).await;
}

/// A stock move (V21) is a movement of its own kind naming the move: out of `available` into
/// `damaged` lowers the statement's available; between two non-sellable states it moves the
/// row's version with the counters as they were.
#[tokio::test]
async fn a_stock_move_leaves_a_move_movement_naming_it() {
    use saldo::domain::{MoveId, StockState};
    use saldo::stock::{MoveRequest, Place};
    let db = test_db().await;
    let engine = engine_with_stock(
        &db,
        StrategyName::Atomic,
        &StrategyConfig::default(),
        &[(1, 5)],
    )
    .await;
    let shift = |id: &str, quantity: i64, from: StockState, to: StockState| MoveRequest {
        move_id: MoveId::new(id).expect("move id"),
        product_id: pid(1),
        quantity: Quantity::new(quantity).expect("quantity"),
        from: Place {
            state: from,
            location_id: None,
        },
        to: Place {
            state: to,
            location_id: None,
        },
        reason: Reason::new("shelf check").expect("reason"),
    };
    engine
        .move_units(&shift("m-1", 2, StockState::Available, StockState::Damaged))
        .await
        .expect("to damaged");
    engine
        .move_units(&shift(
            "m-2",
            1,
            StockState::Damaged,
            StockState::SafetyStock,
        ))
        .await
        .expect("damaged to safety stock");
    let all = all_movements(engine.store(), 1, 10).await;
    let seen: Vec<_> = all
        .iter()
        .skip(1)
        .map(|m| {
            (
                m.kind,
                m.move_id.as_deref(),
                m.available_delta,
                m.available_after,
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (MoveKind::Move, Some("m-1"), -2, 3),
            (MoveKind::Move, Some("m-2"), 0, 3),
        ]
    );
    assert_journal_is_the_row(engine.store(), 1, &all).await;
    assert_audit_clean(&db, StrategyName::Atomic).await;
}
