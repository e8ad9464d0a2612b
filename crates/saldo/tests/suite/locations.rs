//! Stock per location, against every served strategy: split and single allocation
//! in priority order, pinned locations, all-or-nothing across items and locations, confirm,
//! release, expiry and re-reserve per allocation, direct sales from locations, the first
//! location count adopting what the product held, and many orders splitting across three
//! locations of two products at once (no deadlock reaches a caller, no location oversold,
//! the audit's location invariants hold). Products never given a location answer as before. A
//! bundle pinned to a location takes its components there.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use saldo::domain::{
    AllocationMode, LocationId, OrderId, OrderItems, Priority, Reason, SaleId, Tags, Ttl,
};
use saldo::stock::locations::{self, LocatedStock};
use saldo::stock::{
    admin, sweeper, Placement, SaleRequest, Status, StockEngine, StrategyConfig, StrategyName,
};
use saldo::{Error, InputError};

use crate::contract::{
    assert_audit_clean, engine_with_stock, pid, request, rerequest, safe_strategies,
};
use crate::harness::{test_db, TestDb};

pub(crate) fn loc(id: &str) -> LocationId {
    LocationId::new(id).expect("location id")
}

pub(crate) fn oid(id: &str) -> OrderId {
    OrderId::new(id).expect("order id")
}

/// A strategy over a database whose products are stocked at locations:
/// `(product, location, count)`; locations get priorities `(location, priority)`.
async fn located(
    db: &TestDb,
    name: StrategyName,
    counts: &[(i64, &str, i64)],
    priorities: &[(&str, i64)],
) -> StockEngine {
    let engine = engine_with_stock(db, name, &StrategyConfig::default(), &[]).await;
    for &(id, priority) in priorities {
        locations::set_priority(
            engine.store(),
            &loc(id),
            Priority::new(priority).expect("p"),
        )
        .await
        .expect("priority");
    }
    for &(p, l, count) in counts {
        locations::set_count(engine.store(), pid(p), &loc(l), count)
            .await
            .expect("location count");
    }
    engine
}

/// (location, available, reserved) of a product, by location id.
async fn at(engine: &StockEngine, product: i64) -> Vec<(String, i32, i32)> {
    let s: LocatedStock = locations::get(engine.store(), pid(product))
        .await
        .expect("stock");
    let sums = s
        .locations
        .iter()
        .fold((0, 0), |(a, r), l| (a + l.available, r + l.reserved));
    assert_eq!(
        sums,
        (s.stock.available, s.stock.reserved),
        "the product row is the sum of its locations"
    );
    s.locations
        .into_iter()
        .map(|l| (l.location_id.as_str().to_owned(), l.available, l.reserved))
        .collect()
}

fn parts(items: &[saldo::stock::ReservedItem], product: i64) -> Vec<(String, i32)> {
    items
        .iter()
        .find(|i| i.product_id == pid(product))
        .expect("item")
        .allocations
        .iter()
        .map(|a| (a.location_id.as_str().to_owned(), a.quantity))
        .collect()
}

fn placed(allocation: AllocationMode, pinned: &[(i64, &str)]) -> Placement {
    Placement {
        allocation,
        pinned: pinned
            .iter()
            .map(|&(p, l)| (pid(p), loc(l)))
            .collect::<BTreeMap<_, _>>(),
    }
}

#[tokio::test]
async fn split_allocation_fills_locations_in_priority_order() {
    for name in safe_strategies() {
        let db = test_db().await;
        let engine = located(
            &db,
            name,
            &[(1, "north", 2), (1, "south", 3), (1, "east", 10)],
            &[("north", 1), ("south", 1), ("east", 5)],
        )
        .await;
        // Plain reserve (the default placement): north, then south (same priority: by id),
        // then east.
        let r = engine
            .reserve(&request("o-1", &[(1, 7)], Ttl::default()))
            .await
            .expect("reserve");
        assert_eq!(
            parts(&r.items, 1),
            [("east".into(), 2), ("north".into(), 2), ("south".into(), 3)],
            "{name}"
        );
        assert_eq!(
            at(&engine, 1).await,
            [
                ("east".into(), 8, 2),
                ("north".into(), 0, 2),
                ("south".into(), 0, 3)
            ],
            "{name}"
        );
        // More than all locations hold together: refused, nothing taken.
        let short = engine
            .reserve(&request("o-2", &[(1, 9)], Ttl::default()))
            .await;
        assert!(
            matches!(short, Err(Error::InsufficientStock { product_id, requested: 9, available: 8 }) if product_id == pid(1)),
            "{name}: {short:?}"
        );
        // The replay answers what the first request allocated.
        let again = engine
            .reserve(&request("o-1", &[(1, 7)], Ttl::default()))
            .await
            .expect("replay");
        assert!(again.replayed);
        assert_eq!(parts(&again.items, 1), parts(&r.items, 1), "{name}");
        let read = engine.order(&oid("o-1")).await.expect("order");
        assert_eq!(parts(&read, 1), parts(&r.items, 1), "{name}");
        assert_audit_clean(&db, name).await;
    }
}

#[tokio::test]
async fn single_allocation_takes_the_first_location_with_enough() {
    for name in safe_strategies() {
        let db = test_db().await;
        let engine = located(&db, name, &[(1, "a", 2), (1, "b", 4), (1, "c", 9)], &[]).await;
        let single = placed(AllocationMode::Single, &[]);
        let r = engine
            .reserve_placed(&request("o-1", &[(1, 3)], Ttl::default()), &single)
            .await
            .expect("reserve");
        assert_eq!(parts(&r.items, 1), [("b".into(), 3)], "{name}");
        // 12 left in total, but no single location holds 10: refused, nothing moved.
        let short = engine
            .reserve_placed(&request("o-2", &[(1, 10)], Ttl::default()), &single)
            .await;
        assert!(
            matches!(short, Err(Error::InsufficientStock { available: 9, .. })),
            "{name}: {short:?}"
        );
        assert_eq!(
            at(&engine, 1).await,
            [("a".into(), 2, 0), ("b".into(), 1, 3), ("c".into(), 9, 0)],
            "{name}"
        );
        assert_audit_clean(&db, name).await;
    }
}

#[tokio::test]
async fn a_pinned_location_is_the_only_source_and_unknown_ones_are_refused() {
    for name in safe_strategies() {
        let db = test_db().await;
        let engine = located(&db, name, &[(1, "a", 5), (1, "b", 1)], &[]).await;
        admin::set_count(engine.store(), pid(2), 5)
            .await
            .expect("count");
        let r = engine
            .reserve_placed(
                &request("o-1", &[(1, 1)], Ttl::default()),
                &placed(AllocationMode::Split, &[(1, "b")]),
            )
            .await
            .expect("reserve");
        assert_eq!(parts(&r.items, 1), [("b".into(), 1)], "{name}");
        let empty = engine
            .reserve_placed(
                &request("o-2", &[(1, 1)], Ttl::default()),
                &placed(AllocationMode::Split, &[(1, "b")]),
            )
            .await;
        assert!(
            matches!(empty, Err(Error::InsufficientStock { available: 0, .. })),
            "{name}: {empty:?}"
        );
        let unknown = engine
            .reserve_placed(
                &request("o-3", &[(1, 1)], Ttl::default()),
                &placed(AllocationMode::Split, &[(1, "nowhere")]),
            )
            .await;
        assert!(
            matches!(&unknown, Err(Error::UnknownLocation { product_id, location_id }) if *product_id == pid(1) && location_id.as_str() == "nowhere"),
            "{name}: {unknown:?}"
        );
        // A product never given a location has none to pin.
        let unlocated = engine
            .reserve_placed(
                &request("o-4", &[(2, 1)], Ttl::default()),
                &placed(AllocationMode::Split, &[(2, "a")]),
            )
            .await;
        assert!(
            matches!(unlocated, Err(Error::UnknownLocation { .. })),
            "{name}: {unlocated:?}"
        );
        assert_audit_clean(&db, name).await;
    }
}

#[tokio::test]
async fn an_order_across_located_and_plain_products_is_all_or_nothing() {
    for name in safe_strategies() {
        let db = test_db().await;
        let engine = located(&db, name, &[(1, "a", 2), (1, "b", 2), (3, "a", 1)], &[]).await;
        admin::set_count(engine.store(), pid(2), 5)
            .await
            .expect("count");
        let short = engine
            .reserve(&request("o-1", &[(1, 3), (2, 1), (3, 2)], Ttl::default()))
            .await;
        assert!(
            matches!(short, Err(Error::InsufficientStock { product_id, .. }) if product_id == pid(3)),
            "{name}: {short:?}"
        );
        assert_eq!(
            at(&engine, 1).await,
            [("a".into(), 2, 0), ("b".into(), 2, 0)]
        );
        assert_eq!(
            admin::get(engine.store(), pid(2))
                .await
                .expect("s")
                .available,
            5
        );
        let r = engine
            .reserve(&request("o-1", &[(1, 3), (2, 1), (3, 1)], Ttl::default()))
            .await
            .expect("reserve");
        assert_eq!(parts(&r.items, 1), [("a".into(), 2), ("b".into(), 1)]);
        assert!(
            parts(&r.items, 2).is_empty(),
            "a plain product has no allocations"
        );
        let plain = admin::get(engine.store(), pid(2)).await.expect("s");
        assert_eq!((plain.available, plain.reserved), (4, 1), "{name}");
        assert!(locations::get(engine.store(), pid(2))
            .await
            .expect("s")
            .locations
            .is_empty());
        assert_audit_clean(&db, name).await;
    }
}

#[tokio::test]
async fn confirm_release_and_expiry_move_units_at_their_locations() {
    for name in safe_strategies() {
        let db = test_db().await;
        let engine = located(&db, name, &[(1, "a", 2), (1, "b", 5)], &[]).await;
        engine
            .reserve(&request("o-c", &[(1, 3)], Ttl::default()))
            .await
            .expect("reserve");
        let c = engine.confirm(&oid("o-c")).await.expect("confirm");
        assert_eq!(
            parts(&c.confirmed, 1),
            [("a".into(), 2), ("b".into(), 1)],
            "{name}"
        );
        assert_eq!(
            at(&engine, 1).await,
            [("a".into(), 0, 0), ("b".into(), 4, 0)]
        );

        engine
            .reserve(&request("o-r", &[(1, 2)], Ttl::default()))
            .await
            .expect("reserve");
        assert_eq!(
            at(&engine, 1).await,
            [("a".into(), 0, 0), ("b".into(), 2, 2)]
        );
        engine.release(&oid("o-r")).await.expect("release");
        assert_eq!(
            at(&engine, 1).await,
            [("a".into(), 0, 0), ("b".into(), 4, 0)]
        );

        let short = Ttl::from_millis(1).expect("ttl");
        engine
            .reserve(&request("o-e", &[(1, 4)], short))
            .await
            .expect("reserve");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(sweeper::sweep(engine.store()).await.expect("sweep"), 1);
        assert_eq!(
            at(&engine, 1).await,
            [("a".into(), 0, 0), ("b".into(), 4, 0)]
        );

        // Re-reserve what expired: it was held at b only, so it is taken at b again, not split
        // over a (first by priority, now holding 1) and b as a new reserve would be.
        locations::set_count(engine.store(), pid(1), &loc("a"), 1)
            .await
            .expect("count");
        let again = engine
            .rereserve(&rerequest("o-e", "k-1", None))
            .await
            .expect("rereserve");
        let item = again
            .items
            .iter()
            .find(|i| i.status == Status::Active)
            .expect("active");
        assert_eq!(item.quantity, 4);
        assert_eq!(
            at(&engine, 1).await,
            [("a".into(), 1, 0), ("b".into(), 0, 4)],
            "{name}"
        );
        assert_audit_clean(&db, name).await;
    }
}

#[tokio::test]
async fn the_first_location_count_adopts_what_the_product_held() {
    for name in safe_strategies() {
        let db = test_db().await;
        let engine = engine_with_stock(&db, name, &StrategyConfig::default(), &[(1, 5)]).await;
        engine
            .reserve(&request("o-old", &[(1, 2)], Ttl::default()))
            .await
            .expect("reserve");
        let s = locations::set_count(engine.store(), pid(1), &loc("shop"), 4)
            .await
            .expect("count");
        assert_eq!((s.stock.available, s.stock.reserved), (7, 2), "{name}");
        assert_eq!(
            at(&engine, 1).await,
            [("default".into(), 3, 2), ("shop".into(), 4, 0)],
            "{name}"
        );
        assert_audit_clean(&db, name).await;
        // The reservation made before the product had locations settles at the default one.
        engine.release(&oid("o-old")).await.expect("release");
        assert_eq!(
            at(&engine, 1).await,
            [("default".into(), 5, 0), ("shop".into(), 4, 0)]
        );
        // Product-wide counts and adjustments would break the sum: refused.
        let count = admin::set_count(engine.store(), pid(1), 3).await;
        assert!(
            matches!(count, Err(Error::StockedByLocation(_))),
            "{count:?}"
        );
        let reason = Reason::new("broken").expect("reason");
        let adjust = admin::adjust(engine.store(), pid(1), -1, &reason).await;
        assert!(
            matches!(adjust, Err(Error::StockedByLocation(_))),
            "{adjust:?}"
        );
        // A count below what a location holds reserved is refused.
        engine
            .reserve_placed(
                &request("o-new", &[(1, 3)], Ttl::default()),
                &placed(AllocationMode::Single, &[(1, "shop")]),
            )
            .await
            .expect("reserve");
        let below = locations::set_count(engine.store(), pid(1), &loc("shop"), 2).await;
        assert!(
            matches!(below, Err(Error::CountBelowReserved { reserved: 3, .. })),
            "{below:?}"
        );
        assert_audit_clean(&db, name).await;
    }
}

#[tokio::test]
async fn a_direct_sale_takes_from_locations() {
    for name in safe_strategies() {
        let db = test_db().await;
        let engine = located(&db, name, &[(1, "a", 1), (1, "b", 2)], &[]).await;
        let sale = SaleRequest {
            sale_id: SaleId::new("s-1").expect("id"),
            items: saldo::domain::OrderItems::new([(1, 2)]).expect("items"),
            tags: saldo::domain::Tags::NONE,
        };
        let sold = engine.sell(&sale).await.expect("sell");
        assert_eq!(sold.items[0].quantity, 2);
        // The answer says where the units came from, and a replay says the same.
        let from = |s: &saldo::stock::Sale| -> Vec<(String, i32)> {
            s.items[0]
                .allocations
                .iter()
                .map(|a| (a.location_id.as_str().to_owned(), a.quantity))
                .collect()
        };
        assert_eq!(from(&sold), [("a".into(), 1), ("b".into(), 1)], "{name}");
        assert_eq!(
            at(&engine, 1).await,
            [("a".into(), 0, 0), ("b".into(), 1, 0)],
            "{name}"
        );
        let replay = engine.sell(&sale).await.expect("replay");
        assert!(replay.replayed);
        assert_eq!(from(&replay), from(&sold), "{name}");
        assert_eq!(
            at(&engine, 1).await,
            [("a".into(), 0, 0), ("b".into(), 1, 0)]
        );
        let too_many = SaleRequest {
            sale_id: SaleId::new("s-2").expect("id"),
            items: saldo::domain::OrderItems::new([(1, 2)]).expect("items"),
            tags: saldo::domain::Tags::NONE,
        };
        assert!(matches!(
            engine.sell(&too_many).await,
            Err(Error::InsufficientStock { available: 1, .. })
        ));
        // A sale may name its location: a, first by priority, is passed over for b.
        locations::set_count(engine.store(), pid(1), &loc("a"), 3)
            .await
            .expect("count");
        let from_b = SaleRequest {
            sale_id: SaleId::new("s-3").expect("id"),
            items: saldo::domain::OrderItems::new([(1, 1)]).expect("items"),
            tags: saldo::domain::Tags::NONE,
        };
        let at_b = placed(AllocationMode::Split, &[(1, "b")]);
        engine.sell_placed(&from_b, &at_b).await.expect("sell at b");
        assert_eq!(
            at(&engine, 1).await,
            [("a".into(), 3, 0), ("b".into(), 0, 0)],
            "{name}"
        );
        let from_b_again = SaleRequest {
            sale_id: SaleId::new("s-4").expect("id"),
            ..from_b
        };
        assert!(matches!(
            engine.sell_placed(&from_b_again, &at_b).await,
            Err(Error::InsufficientStock { available: 0, .. })
        ));
        assert!(matches!(
            engine
                .sell_placed(&from_b_again, &placed(AllocationMode::Split, &[(1, "c")]))
                .await,
            Err(Error::UnknownLocation { .. })
        ));
        assert_audit_clean(&db, name).await;
    }
}

/// Many buyers split across three locations of two products at once, half of them crossing
/// both products: every order is all or nothing, no error (deadlock included) reaches a
/// buyer, no location goes below zero, exactly the stock is sold, and the audit is clean.
#[tokio::test]
async fn concurrent_split_orders_never_oversell_a_location_or_deadlock() {
    const BUYERS: usize = 60;
    for name in safe_strategies() {
        let db = test_db().await;
        let engine = located(
            &db,
            name,
            &[
                (1, "a", 7),
                (1, "b", 11),
                (1, "c", 13),
                (2, "a", 5),
                (2, "b", 9),
                (2, "c", 3),
            ],
            &[("c", 0), ("a", 1), ("b", 2)],
        )
        .await;
        let barrier = Arc::new(tokio::sync::Barrier::new(BUYERS));
        let mut tasks = Vec::new();
        for i in 0..BUYERS {
            let engine = engine.clone();
            let barrier = barrier.clone();
            tasks.push(tokio::spawn(async move {
                let items: &[(i64, i64)] = match i % 3 {
                    0 => &[(1, 3)],
                    1 => &[(1, 2), (2, 2)],
                    _ => &[(2, 1), (1, 1)],
                };
                barrier.wait().await;
                let r = engine
                    .reserve(&request(&format!("o-{i}"), items, Ttl::default()))
                    .await;
                (items, r)
            }));
        }
        let (mut taken1, mut taken2) = (0i32, 0i32);
        for t in tasks {
            let (items, r) = t.await.expect("task");
            match r {
                Ok(r) => {
                    for &(p, q) in items {
                        let allocated: i32 = parts(&r.items, p).iter().map(|x| x.1).sum();
                        assert_eq!(i64::from(allocated), q, "{name}: allocations add up");
                        if p == 1 {
                            taken1 += q as i32
                        } else {
                            taken2 += q as i32
                        }
                    }
                }
                Err(Error::InsufficientStock { .. }) => {}
                Err(e) => panic!("{name}: an error reached a buyer: {e}"),
            }
        }
        let s1 = at(&engine, 1).await;
        let s2 = at(&engine, 2).await;
        let reserved1: i32 = s1.iter().map(|l| l.2).sum();
        let reserved2: i32 = s2.iter().map(|l| l.2).sum();
        assert_eq!((reserved1, reserved2), (taken1, taken2), "{name}");
        assert!(taken1 <= 31 && taken2 <= 17, "{name}");
        // The lowest-priority-number location empties first: c before a before b.
        if taken1 > 13 {
            assert_eq!(
                s1.iter().find(|l| l.0 == "c").map(|l| l.1),
                Some(0),
                "{name}: {s1:?}"
            );
        }
        assert_audit_clean(&db, name).await;
    }
}

/// Drift behind the engine's back on a product stocked per location: the audit names the
/// broken location invariants, and the repair sets the location's `reserved` back to its
/// allocations and the product's row back to the sum of its locations (the drifted counter was
/// the only reading of the drift that agrees with the history), leaving the audit clean.
#[tokio::test]
async fn the_audit_sees_location_drift_and_the_repair_sets_it_back() {
    use saldo::audit::{audit_stock, Invariant};
    use saldo::stock::repair::{self, RepairAction};
    let db = test_db().await;
    let engine = four_reserved_over_a_and_b(&db).await;
    let clean = at(&engine, 1).await;
    drift(
        &db,
        "UPDATE stock_locations SET reserved = reserved + 1 \
          WHERE product_id = 1 AND location_id = 'b'; \
         UPDATE stock SET available = available + 2 WHERE product_id = 1",
    )
    .await;
    let found: Vec<Invariant> = audit_stock(&db.pool)
        .await
        .expect("audit")
        .into_iter()
        .map(|d| d.invariant)
        .collect();
    for expected in [
        Invariant::OnHandMatchesHistory,
        Invariant::LocationsSumToAvailable,
        Invariant::LocationsSumToReserved,
        Invariant::LocationReservedMatchesAllocations,
    ] {
        assert!(found.contains(&expected), "{expected:?} not in {found:?}");
    }
    let planned = repair::repair(engine.store(), false).await.expect("plan");
    assert_eq!(planned.products.len(), 1, "{planned:?}");
    assert_eq!(planned.products[0].action, RepairAction::Planned);
    assert_eq!(planned.products[0].locations.len(), 1, "{planned:?}");
    assert_repaired_to(&engine, &clean).await;
    let after = admin::get(engine.store(), pid(1)).await.expect("stock");
    assert_eq!((after.available, after.reserved), (3, 4));
    assert_audit_clean(&db, StrategyName::Atomic).await;
}

/// Units that slid from a location's `available` to its `reserved` (a take that wrote one
/// side), the product's row drifted the same way: only the location's own row changed in the
/// audit's eyes (the sums still hold), and the repair finds and slides them back.
#[tokio::test]
async fn units_slid_between_a_locations_counters_are_slid_back() {
    let db = test_db().await;
    let engine = four_reserved_over_a_and_b(&db).await;
    let clean = at(&engine, 1).await;
    drift(
        &db,
        "UPDATE stock_locations SET available = available - 1, reserved = reserved + 1 \
          WHERE product_id = 1 AND location_id = 'b'; \
         UPDATE stock SET available = available - 1, reserved = reserved + 1 \
          WHERE product_id = 1",
    )
    .await;
    assert_repaired_to(&engine, &clean).await;
}

/// Units that appeared at one location, its product's row following (the sums hold, the
/// history does not): no reading of the locations agrees with the history, so nothing is
/// written and the product is reported unrepairable (count its locations); likewise when
/// reserved moved from one location to another (both readings fit and disagree).
#[tokio::test]
async fn locations_that_no_reading_justifies_are_left_alone() {
    use saldo::stock::repair::{self, RepairAction};
    let cases = [
        "UPDATE stock_locations SET available = available + 1 \
          WHERE product_id = 1 AND location_id = 'a'; \
         UPDATE stock SET available = available + 1 WHERE product_id = 1",
        "UPDATE stock_locations SET available = available + 1, reserved = reserved - 1 \
          WHERE product_id = 1 AND location_id = 'a'; \
         UPDATE stock_locations SET available = available - 1, reserved = reserved + 1 \
          WHERE product_id = 1 AND location_id = 'b'",
    ];
    for sql in cases {
        let db = test_db().await;
        let engine = four_reserved_over_a_and_b(&db).await;
        drift(&db, sql).await;
        let drifted = at(&engine, 1).await;
        let report = repair::repair(engine.store(), true).await.expect("repair");
        assert_eq!(report.products.len(), 1, "{sql}: {report:?}");
        assert_eq!(
            report.products[0].action,
            RepairAction::Unrepairable,
            "{sql}"
        );
        assert!(report.products[0].locations.is_empty(), "{sql}");
        assert!(!report.remaining.is_empty(), "{sql}");
        assert_eq!(at(&engine, 1).await, drifted, "{sql}: nothing written");
    }
}

/// Product 1 with 3 units at `a` and 4 at `b`, 4 of them reserved (3 at `a`, 1 at `b`).
async fn four_reserved_over_a_and_b(db: &TestDb) -> StockEngine {
    let engine = located(db, StrategyName::Atomic, &[(1, "a", 3), (1, "b", 4)], &[]).await;
    engine
        .reserve(&request("o-1", &[(1, 4)], Ttl::default()))
        .await
        .expect("reserve");
    engine
}

/// Applies a repair of product 1 alone and checks it left the audit clean and the locations
/// as `clean`.
async fn assert_repaired_to(engine: &StockEngine, clean: &[(String, i32, i32)]) {
    use saldo::stock::repair::{self, RepairAction};
    let report = repair::repair(engine.store(), true).await.expect("repair");
    assert_eq!(report.products.len(), 1, "{report:?}");
    let action = report.products[0].action;
    assert_eq!(action, RepairAction::Applied, "{report:?}");
    assert!(report.remaining.is_empty(), "{report:?}");
    assert_eq!(at(engine, 1).await, clean);
}

/// Writes behind the engine's back.
async fn drift(db: &TestDb, sql: &str) {
    let client = db.pool.get().await.expect("client");
    client.batch_execute(sql).await.expect("drift");
}

#[tokio::test]
async fn a_location_is_retired_only_once_empty_and_then_takes_nothing() {
    let db = test_db().await;
    let engine = located(
        &db,
        StrategyName::Atomic,
        &[(1, "north", 3), (1, "south", 2)],
        &[],
    )
    .await;
    let store = engine.store();
    engine
        .reserve_placed(
            &request("o-1", &[(1, 1)], Ttl::default()),
            &placed(AllocationMode::Split, &[(1, "north")]),
        )
        .await
        .expect("reserve at north");
    let held = locations::retire(store, &loc("north")).await;
    assert!(
        matches!(
            &held,
            Err(Error::LocationNotEmpty {
                available: 2,
                reserved: 1,
                ..
            })
        ),
        "{held:?}"
    );
    assert!(matches!(
        locations::retire(store, &loc("nowhere")).await,
        Err(Error::NoSuchLocation(_))
    ));
    engine.release(&oid("o-1")).await.expect("release");
    locations::set_count(store, pid(1), &loc("north"), 0)
        .await
        .expect("count out");
    let retired = locations::retire(store, &loc("north"))
        .await
        .expect("retire");
    assert!(retired.retired_at.is_some());
    let again = locations::retire(store, &loc("north"))
        .await
        .expect("retire again");
    assert_eq!(
        again, retired,
        "retiring a retired location answers it as it is"
    );

    // Retired: no count, no priority, nothing to take there.
    assert!(matches!(
        locations::set_count(store, pid(1), &loc("north"), 5).await,
        Err(Error::LocationRetired(_))
    ));
    assert!(matches!(
        locations::set_priority(store, &loc("north"), Priority::new(1).expect("p")).await,
        Err(Error::LocationRetired(_))
    ));
    let pinned = engine
        .reserve_placed(
            &request("o-2", &[(1, 1)], Ttl::default()),
            &placed(AllocationMode::Split, &[(1, "north")]),
        )
        .await;
    assert!(
        matches!(pinned, Err(Error::InsufficientStock { .. })),
        "{pinned:?}"
    );
    assert_eq!(
        at(&engine, 1).await,
        [("north".to_owned(), 0, 0), ("south".to_owned(), 2, 0)]
    );

    // The list shows both, a page at a time, with what each holds and when it was retired.
    let one = saldo::listing::PageLimit::new(1).expect("limit");
    let first = saldo::listing::stock::locations(store, one, None)
        .await
        .expect("page");
    let second = saldo::listing::stock::locations(store, one, first.next.as_ref())
        .await
        .expect("page");
    let shown: Vec<_> = first
        .items
        .iter()
        .chain(&second.items)
        .map(|l| {
            (
                l.location.location_id.as_str().to_owned(),
                l.location.retired_at.is_some(),
                l.available,
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            ("north".to_owned(), true, 0),
            ("south".to_owned(), false, 2)
        ]
    );
    assert_audit_clean(&db, StrategyName::Atomic).await;
}

/// The check the served count makes under its share lock, made the naive way: the location's
/// retirement read without a lock, then (once `go` says so) the units written. A retirement
/// that runs between the two sees an empty location, retires it, and the units land in it.
#[tokio::test]
async fn a_count_that_reads_the_retirement_unlocked_puts_units_in_a_retired_location() {
    let db = test_db().await;
    let engine = located(&db, StrategyName::Atomic, &[(1, "base", 1)], &[]).await;
    let here = loc("late");
    locations::set_priority(engine.store(), &here, Priority::new(0).expect("p"))
        .await
        .expect("location");
    let (read_done, read_seen) = tokio::sync::oneshot::channel();
    let (go, wait_go) = tokio::sync::oneshot::channel::<()>();
    let naive = {
        let pool = db.pool.clone();
        tokio::spawn(async move {
            let mut client = pool.get().await.expect("client");
            // READ COMMITTED, as the naive code would run (on a SERIALIZABLE cluster PostgreSQL
            // itself would refuse its write with 40001: this binary runs there too).
            let tx = client
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::ReadCommitted)
                .start()
                .await
                .expect("begin");
            let retired: Option<chrono::DateTime<chrono::Utc>> = tx
                .query_one(
                    "SELECT retired_at FROM locations WHERE location_id = 'late'",
                    &[],
                )
                .await
                .expect("read")
                .get(0);
            read_done.send(retired.is_some()).expect("signal");
            wait_go.await.expect("go");
            tx.execute(
                "INSERT INTO stock_locations (product_id, location_id, available) \
                 VALUES (1, 'late', 1)",
                &[],
            )
            .await
            .expect("write");
            tx.commit().await.expect("commit");
        })
    };
    assert!(!read_seen.await.expect("read"), "not retired when read");
    locations::retire(engine.store(), &here)
        .await
        .expect("an empty location retires");
    go.send(()).expect("go");
    naive.await.expect("naive count");
    let listed = saldo::listing::stock::locations(
        engine.store(),
        saldo::listing::PageLimit::new(10).expect("limit"),
        None,
    )
    .await
    .expect("locations");
    let late = listed
        .items
        .iter()
        .find(|l| l.location.location_id == here)
        .expect("listed");
    assert!(
        late.location.retired_at.is_some() && late.available == 1,
        "the naive count put a unit in a retired location: {late:?}"
    );
}

/// Rounds of a count and a retirement of one empty location sent at once.
const RETIRE_ROUNDS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retirement_racing_a_count_never_retires_a_location_that_holds_units() {
    let db = test_db().await;
    let engine = located(&db, StrategyName::Atomic, &[(1, "base", 1)], &[]).await;
    for round in 0..RETIRE_ROUNDS {
        let here = loc(&format!("r{round}"));
        locations::set_priority(engine.store(), &here, Priority::new(0).expect("p"))
            .await
            .expect("location");
        let (count, retire) = {
            let (a, b) = (engine.store().clone(), engine.store().clone());
            let (l1, l2) = (here.clone(), here.clone());
            tokio::join!(
                tokio::spawn(async move { locations::set_count(&a, pid(1), &l1, 1).await }),
                tokio::spawn(async move { locations::retire(&b, &l2).await }),
            )
        };
        let (count, retire) = (count.expect("join"), retire.expect("join"));
        match (&count, &retire) {
            (Ok(_), Err(Error::LocationNotEmpty { available: 1, .. }))
            | (Err(Error::LocationRetired(_)), Ok(_)) => {}
            other => panic!("round {round}: {other:?}"),
        }
    }
    assert_audit_clean(&db, StrategyName::Atomic).await;
}

/// A bundle line pinned to a location takes each of its components there, reserved or sold (it
/// was refused 404 as if the bundle's own row had to be stocked there); a component not stocked
/// there is named in the refusal, and a component pinned by one line and not by another is a
/// location conflict.
#[tokio::test]
async fn a_bundle_pinned_to_a_location_takes_its_components_there() {
    let db = test_db().await;
    // Per strategy (bases 0, 10, …): components `base + 1` (north 4, south 4) and `base + 2`
    // (north 4, south 2), bundle `base + 5` of one and two of them.
    let seed = engine_with_stock(&db, StrategyName::Atomic, &StrategyConfig::default(), &[]).await;
    for (n, name) in safe_strategies().enumerate() {
        let base = 10 * n as i64;
        let (c1, c2, bundle) = (base + 1, base + 2, base + 5);
        for (p, l, count) in [
            (c1, "north", 4),
            (c1, "south", 4),
            (c2, "north", 4),
            (c2, "south", 2),
        ] {
            locations::set_count(seed.store(), pid(p), &loc(l), count)
                .await
                .expect("location count");
        }
        admin::set_count(seed.store(), pid(bundle), 0)
            .await
            .expect("bundle row");
        let components = OrderItems::new([(c1, 1), (c2, 2)]).expect("components");
        saldo::stock::bundles::declare(seed.store(), pid(bundle), &components)
            .await
            .expect("declare");
        let engine = saldo::stock::build(name, seed.store().clone(), &StrategyConfig::default());
        let south = placed(AllocationMode::Split, &[(bundle, "south")]);

        let r = engine
            .reserve_placed(
                &request(&format!("b-{name}"), &[(bundle, 1)], Ttl::default()),
                &south,
            )
            .await
            .expect("reserve");
        assert_eq!(parts(&r.items, c1), [("south".into(), 1)], "{name}");
        assert_eq!(parts(&r.items, c2), [("south".into(), 2)], "{name}");
        let short = engine
            .reserve_placed(
                &request(&format!("b2-{name}"), &[(bundle, 1)], Ttl::default()),
                &south,
            )
            .await;
        assert!(
            matches!(&short, Err(Error::InsufficientStock { product_id, available: 0, .. }) if *product_id == pid(c2)),
            "{name}: south has no c2 left, and north is not taken: {short:?}"
        );

        let sale = SaleRequest {
            sale_id: SaleId::new(format!("s-{name}")).expect("id"),
            items: OrderItems::new([(bundle, 1)]).expect("items"),
            tags: Tags::NONE,
        };
        let north = placed(AllocationMode::Split, &[(bundle, "north")]);
        let sold = engine.sell_placed(&sale, &north).await.expect("sell");
        let from: Vec<(i64, Vec<(String, i32)>)> = sold
            .items
            .iter()
            .map(|i| {
                let at = i
                    .allocations
                    .iter()
                    .map(|a| (a.location_id.as_str().to_owned(), a.quantity));
                (i.product_id.get(), at.collect())
            })
            .collect();
        assert_eq!(
            from,
            [
                (c1, vec![("north".into(), 1)]),
                (c2, vec![("north".into(), 2)])
            ],
            "{name}"
        );
        assert_eq!(
            at(&engine, c2).await,
            [("north".into(), 2, 0), ("south".into(), 0, 2)],
            "{name}"
        );

        let nowhere = engine
            .reserve_placed(
                &request(&format!("b3-{name}"), &[(bundle, 1)], Ttl::default()),
                &placed(AllocationMode::Split, &[(bundle, "nowhere")]),
            )
            .await;
        assert!(
            matches!(&nowhere, Err(Error::UnknownLocation { product_id, .. }) if *product_id == pid(c1)),
            "{name}: the refusal names the component: {nowhere:?}"
        );
        let conflict = engine
            .reserve_placed(
                &request(
                    &format!("b4-{name}"),
                    &[(bundle, 1), (c1, 1)],
                    Ttl::default(),
                ),
                &north,
            )
            .await;
        assert!(
            matches!(&conflict, Err(Error::Input(InputError::LocationConflict(p))) if *p == c1),
            "{name}: {conflict:?}"
        );
    }
    assert_audit_clean(&db, StrategyName::Atomic).await;
}
