//! Backorders on a product stocked per location (issue 27 item 4), on every served strategy: a
//! reservation takes what the locations have (split, in allocation order) and backorders the
//! rest within the limit (all or nothing; a pinned or single placement is not backordered); an
//! arrival at a location (a location count that raises it, a move from `incoming` into
//! `available` there, a return into `available` there) fills the oldest backorders first and allocates the filled units at that
//! location (a confirmed order's are sold from there); confirm, release, expiry and re-reserve
//! keep the books (a preorder with nothing allocated yet too); many reservations racing
//! arrivals never pass the limit, never make a location negative and fill in arrival order;
//! and the audit finds a fill written without its allocation.

use std::sync::Arc;

use futures::future::join_all;
use saldo::audit::{audit_stock, Invariant};
use saldo::domain::{
    AllocationMode, MoveId, Priority, Quantity, Reason, ReturnId, StockState, Ttl,
};
use saldo::stock::backorders::set_policy;
use saldo::stock::{
    locations, sweeper, MoveRequest, Place, Placement, ReservedItem, ReturnItemRequest,
    ReturnItems, ReturnRequest, Status, StockEngine, StrategyConfig, StrategyName,
};
use saldo::Error;
use tokio::sync::Barrier;

use crate::contract::{
    assert_audit_clean, engine_with_stock, pid, request, rerequest, safe_strategies,
};
use crate::harness::{test_db, TestDb};
use crate::locations::{loc, oid};

/// Product 1 at `north` (priority 0) and `south` (priority 1), `(location, count)` each, with
/// `incoming` units parked at each location (counted, then moved out of `available`), and a
/// backorder limit.
async fn located(
    db: &TestDb,
    name: StrategyName,
    counts: &[(&str, i64, i64)],
    limit: i64,
) -> StockEngine {
    let engine = engine_with_stock(db, name, &StrategyConfig::default(), &[]).await;
    let store = engine.store();
    for (l, priority) in [("north", 0), ("south", 1)] {
        let priority = Priority::new(priority).expect("priority");
        locations::set_priority(store, &loc(l), priority)
            .await
            .expect("priority");
    }
    for &(l, count, incoming) in counts {
        locations::set_count(store, pid(1), &loc(l), count + incoming)
            .await
            .expect("count");
        if incoming > 0 {
            let id = format!("park-{l}");
            let park = shift(
                &id,
                incoming,
                l,
                StockState::Available,
                StockState::Incoming,
            );
            saldo::stock::moves::record(store, &park)
                .await
                .expect("park incoming");
        }
    }
    set_policy(store, pid(1), limit).await.expect("policy");
    engine
}

/// A move of `quantity` units of product 1 at `location` from `from` to `to`.
fn shift(id: &str, quantity: i64, location: &str, from: StockState, to: StockState) -> MoveRequest {
    let place = |state| Place {
        state,
        location_id: Some(loc(location)),
    };
    MoveRequest {
        move_id: MoveId::new(id).expect("move id"),
        product_id: pid(1),
        quantity: Quantity::new(quantity).expect("quantity"),
        from: place(from),
        to: place(to),
        reason: Reason::new("delivered").expect("reason"),
    }
}

/// Units of product 1 arriving at `location`: from `incoming` into `available`.
fn arrive(id: &str, quantity: i64, location: &str) -> MoveRequest {
    shift(
        id,
        quantity,
        location,
        StockState::Incoming,
        StockState::Available,
    )
}

/// (location, available, reserved) of product 1, by location id; the row is their sum.
async fn at(engine: &StockEngine) -> Vec<(String, i32, i32)> {
    let s = locations::get(engine.store(), pid(1)).await.expect("stock");
    let sums = s
        .locations
        .iter()
        .fold((0, 0), |(a, r), l| (a + l.available, r + l.reserved));
    assert_eq!(
        sums,
        (s.stock.available, s.stock.reserved),
        "row = Σ locations"
    );
    s.locations
        .into_iter()
        .map(|l| (l.location_id.as_str().to_owned(), l.available, l.reserved))
        .collect()
}

/// (allocations by location, backordered) of an order's latest line of product 1 (its live
/// one when it has one).
async fn line(engine: &StockEngine, order: &str) -> (Vec<(String, i32)>, i32) {
    let items: Vec<ReservedItem> = engine.order(&oid(order)).await.expect("order");
    let live = |i: &&ReservedItem| matches!(i.status, Status::Active | Status::Confirmed);
    let item = items
        .iter()
        .rev()
        .find(live)
        .or(items.last())
        .expect("a line");
    let parts = item
        .allocations
        .iter()
        .map(|a| (a.location_id.as_str().to_owned(), a.quantity))
        .collect();
    (parts, item.backordered)
}

fn own(parts: &[(&str, i32)]) -> Vec<(String, i32)> {
    parts.iter().map(|&(l, n)| (l.to_owned(), n)).collect()
}

fn rows(parts: &[(&str, i32, i32)]) -> Vec<(String, i32, i32)> {
    parts
        .iter()
        .map(|&(l, a, r)| (l.to_owned(), a, r))
        .collect()
}

/// Takes what the locations have, backorders the rest within the limit; a location count and
/// a move from `incoming` fill the oldest first, allocated where they arrive; confirm sells
/// what is allocated and a later fill sells from the location it arrives at; release gives the
/// allocations back and drops the backorder.
#[tokio::test]
async fn a_located_reservation_backorders_the_rest_and_arrivals_fill_it_where_they_land() {
    for name in safe_strategies() {
        let db = test_db().await;
        let engine = located(&db, name, &[("north", 2, 2), ("south", 1, 0)], 5).await;
        let ttl = Ttl::default();
        let o1 = engine.reserve(&request("o1", &[(1, 5)], ttl)).await;
        assert_eq!(o1.expect("o1").items[0].backordered, 2, "{name}");
        assert_eq!(
            line(&engine, "o1").await,
            (own(&[("north", 2), ("south", 1)]), 2)
        );
        engine
            .reserve(&request("o2", &[(1, 2)], ttl))
            .await
            .expect("o2: a preorder");
        assert_eq!(line(&engine, "o2").await, (Vec::new(), 2), "{name}");
        let past = engine.reserve(&request("o3", &[(1, 2)], ttl)).await;
        assert!(
            matches!(past, Err(Error::InsufficientStock { available: 1, .. })),
            "{name}: {past:?}"
        );
        assert_eq!(at(&engine).await, rows(&[("north", 0, 2), ("south", 0, 1)]));
        assert_audit_clean(&db, name).await;

        // 3 units counted in at south: o1's 2, then 1 of o2's, all allocated at south.
        let counted = locations::set_count(engine.store(), pid(1), &loc("south"), 4).await;
        let counted = counted.expect("count");
        assert_eq!(counted.stock.backordered, 1, "{name}");
        assert_eq!(
            line(&engine, "o1").await,
            (own(&[("north", 2), ("south", 3)]), 0)
        );
        assert_eq!(line(&engine, "o2").await, (own(&[("south", 1)]), 1));
        assert_eq!(at(&engine).await, rows(&[("north", 0, 2), ("south", 0, 4)]));
        assert_audit_clean(&db, name).await;

        // o2 confirmed: its allocated unit is sold, its last unit pending; the 2 incoming units
        // at north arrive: 1 sold to o2 from north, 1 left available there.
        let confirmed = engine.confirm(&oid("o2")).await.expect("confirm");
        assert_eq!(confirmed.pending.len(), 1, "{name}");
        let arrival = arrive("arrive-north", 2, "north");
        saldo::stock::moves::record(engine.store(), &arrival)
            .await
            .expect("arrival");
        assert_eq!(
            line(&engine, "o2").await,
            (own(&[("north", 1), ("south", 1)]), 0)
        );
        assert_eq!(at(&engine).await, rows(&[("north", 1, 2), ("south", 0, 3)]));
        assert_audit_clean(&db, name).await;

        engine.release(&oid("o1")).await.expect("release");
        assert_eq!(at(&engine).await, rows(&[("north", 3, 0), ("south", 3, 0)]));
        assert_audit_clean(&db, name).await;
    }
}

/// A return into `available` is an arrival: its units fill the oldest backorders first, at
/// the location they come back to for a located product (allocated there), and only the rest
/// is available; a product without locations the same, from its row.
#[tokio::test]
async fn a_return_into_available_fills_backorders_first() {
    for name in safe_strategies() {
        let db = test_db().await;
        let engine = located(&db, name, &[("north", 1, 0), ("south", 1, 0)], 3).await;
        sold_then_preordered(&engine, 2).await;
        let back = give_back("r1", "o1", Some("south"));
        engine.record_return(&back).await.expect("return");
        assert_eq!(
            line(&engine, "o2").await,
            (own(&[("south", 1)]), 1),
            "{name}"
        );
        assert_eq!(at(&engine).await, rows(&[("north", 0, 0), ("south", 0, 1)]));
        assert_audit_clean(&db, name).await;

        let db = test_db().await;
        let engine = engine_with_stock(&db, name, &StrategyConfig::default(), &[(1, 1)]).await;
        set_policy(engine.store(), pid(1), 3).await.expect("policy");
        sold_then_preordered(&engine, 1).await;
        engine
            .record_return(&give_back("r1", "o1", None))
            .await
            .expect("return");
        let stock = saldo::stock::admin::get(engine.store(), pid(1)).await;
        let stock = stock.expect("stock");
        assert_eq!(
            (stock.available, stock.reserved, stock.backordered),
            (0, 1, 1),
            "{name}"
        );
        assert_audit_clean(&db, name).await;
    }
}

/// `o1` takes `sold` units of product 1 and confirms them; `o2` then preorders 2.
async fn sold_then_preordered(engine: &StockEngine, sold: i64) {
    let ttl = Ttl::default();
    engine
        .reserve(&request("o1", &[(1, sold)], ttl))
        .await
        .expect("o1");
    engine.confirm(&oid("o1")).await.expect("confirm o1");
    engine
        .reserve(&request("o2", &[(1, 2)], ttl))
        .await
        .expect("o2: a preorder");
}

/// One unit of product 1 of `order` back into `available` (at `location`, if named).
fn give_back(id: &str, order: &str, location: Option<&str>) -> ReturnRequest {
    ReturnRequest {
        return_id: ReturnId::new(id).expect("return id"),
        order_id: oid(order),
        items: ReturnItems::new([ReturnItemRequest {
            product_id: pid(1),
            quantity: Quantity::new(1).expect("quantity"),
            location_id: location.map(loc),
            state: StockState::Available,
        }])
        .expect("items"),
        reason: Reason::new("customer return").expect("reason"),
    }
}

/// A pinned or single placement takes no backorders (a fill gives units wherever they arrive):
/// the usual refusal, nothing written; an arrival never fills a dead backorder.
#[tokio::test]
async fn a_pinned_or_single_placement_is_not_backordered() {
    let db = test_db().await;
    let name = StrategyName::Atomic;
    let engine = located(&db, name, &[("north", 2, 0), ("south", 1, 0)], 5).await;
    let pinned = Placement {
        allocation: AllocationMode::Split,
        pinned: [(pid(1), loc("south"))].into_iter().collect(),
    };
    let single = Placement {
        allocation: AllocationMode::Single,
        ..Placement::default()
    };
    for placement in [pinned, single] {
        let refused = engine
            .reserve_placed(&request("p1", &[(1, 3)], Ttl::default()), &placement)
            .await;
        assert!(
            matches!(refused, Err(Error::InsufficientStock { .. })),
            "{placement:?}: {refused:?}"
        );
    }
    assert_eq!(at(&engine).await, rows(&[("north", 2, 0), ("south", 1, 0)]));
    assert_audit_clean(&db, name).await;
}

/// Expiry gives the allocated units back to their locations and drops the backorder (a later
/// arrival fills nothing); a re-reserve of the lost line backorders again, split.
#[tokio::test]
async fn expiry_drops_a_located_backorder_and_a_rereserve_backorders_again() {
    for name in safe_strategies() {
        let db = test_db().await;
        let engine = located(&db, name, &[("north", 1, 0)], 3).await;
        let store = engine.store().clone();
        engine
            .reserve(&request("o1", &[(1, 3)], Ttl::default()))
            .await
            .expect("reserve");
        assert_eq!(line(&engine, "o1").await, (own(&[("north", 1)]), 2));
        let client = db.pool.get().await.expect("client");
        client
            .execute(
                "UPDATE reservations SET expires_at = now() - interval '1 second'",
                &[],
            )
            .await
            .expect("make due");
        assert_eq!(sweeper::sweep(&store).await.expect("sweep"), 1);
        assert_eq!(at(&engine).await, rows(&[("north", 1, 0)]), "{name}");
        locations::set_count(&store, pid(1), &loc("south"), 1)
            .await
            .expect("count");
        assert_eq!(at(&engine).await, rows(&[("north", 1, 0), ("south", 1, 0)]));
        assert_audit_clean(&db, name).await;
        let again = engine
            .rereserve(&rerequest("o1", "k1", None))
            .await
            .expect("rereserve");
        assert_eq!(again.items.last().expect("line").backordered, 1, "{name}");
        assert_eq!(
            line(&engine, "o1").await,
            (own(&[("north", 1), ("south", 1)]), 1)
        );
        assert_audit_clean(&db, name).await;
    }
}

/// A located preorder (nothing allocated anywhere yet) confirms and releases like any other:
/// the release drops the backorder, the locations untouched.
#[tokio::test]
async fn a_located_preorder_is_released_with_nothing_allocated() {
    for name in safe_strategies() {
        let db = test_db().await;
        let engine = located(&db, name, &[("north", 0, 0)], 2).await;
        for order in ["o1", "o2"] {
            engine
                .reserve(&request(order, &[(1, 1)], Ttl::default()))
                .await
                .expect("preorder");
        }
        assert_eq!(line(&engine, "o1").await, (Vec::new(), 1), "{name}");
        engine.confirm(&oid("o1")).await.expect("confirm");
        engine.release(&oid("o2")).await.expect("release");
        let s = locations::get(engine.store(), pid(1)).await.expect("stock");
        assert_eq!((s.stock.reserved, s.stock.backordered), (0, 1), "{name}");
        assert_eq!(at(&engine).await, rows(&[("north", 0, 0)]));
        assert_audit_clean(&db, name).await;
    }
}

/// A product with live backorders counted at its first location: what it held is adopted into
/// the default location (a confirmed order's allocated units included), and the count fills.
#[tokio::test]
async fn a_first_location_count_adopts_backordered_orders_and_fills_them() {
    let db = test_db().await;
    let name = StrategyName::Atomic;
    let engine = engine_with_stock(&db, name, &StrategyConfig::default(), &[(1, 1)]).await;
    let store = engine.store().clone();
    set_policy(&store, pid(1), 4).await.expect("policy");
    for order in ["o1", "o2"] {
        engine
            .reserve(&request(order, &[(1, 2)], Ttl::default()))
            .await
            .expect("reserve");
    }
    engine.confirm(&oid("o1")).await.expect("confirm");
    locations::set_count(&store, pid(1), &loc("north"), 2)
        .await
        .expect("first location count");
    assert_eq!(
        line(&engine, "o1").await,
        (own(&[("default", 1), ("north", 1)]), 0)
    );
    assert_eq!(line(&engine, "o2").await, (own(&[("north", 1)]), 1));
    assert_eq!(
        at(&engine).await,
        rows(&[("default", 0, 0), ("north", 0, 1)])
    );
    assert_audit_clean(&db, name).await;
}

/// Reservations racing arrivals at two locations, every strategy: never past the limit, no
/// location negative, the units that arrived all went to backorders before any stayed
/// available, fills in arrival order (the audit), the books exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_racing_location_arrivals_keep_the_limit_and_the_order() {
    const BUYERS: usize = 24;
    const ARRIVALS: usize = 8;
    const LIMIT: i32 = 6;
    for name in safe_strategies() {
        let db = test_db().await;
        let parked = (ARRIVALS / 2) as i64;
        let engine = located(&db, name, &[("north", 2, parked), ("south", 1, parked)], 6).await;
        let start = Arc::new(Barrier::new(BUYERS + ARRIVALS));
        let mut tasks = Vec::new();
        for i in 0..BUYERS {
            let (engine, start) = (engine.clone(), start.clone());
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                let order = request(&format!("b{i}"), &[(1, 1)], Ttl::default());
                match engine.reserve(&order).await {
                    Ok(_) => Ok(true),
                    Err(Error::InsufficientStock { .. }) => Ok(false),
                    Err(e) => Err(e),
                }
            }));
        }
        for i in 0..ARRIVALS {
            let (store, start) = (engine.store().clone(), start.clone());
            let location = if i % 2 == 0 { "north" } else { "south" };
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                let arrival = arrive(&format!("a{i}"), 1, location);
                saldo::stock::moves::record(&store, &arrival)
                    .await
                    .map(|_| false)
            }));
        }
        let mut granted = 0;
        for task in join_all(tasks).await {
            granted += i32::from(task.expect("task").expect("no error but a refusal"));
        }
        let units = 3 + ARRIVALS as i32;
        let s = locations::get(engine.store(), pid(1)).await.expect("stock");
        assert!(s.stock.backordered <= LIMIT, "{name}: {s:?}");
        assert!(
            (3 + LIMIT..=units + LIMIT).contains(&granted),
            "{name}: {granted}"
        );
        assert_eq!(s.stock.backordered, (granted - units).max(0), "{name}");
        assert_eq!(s.stock.available, (units - granted).max(0), "{name}");
        assert!(
            s.locations
                .iter()
                .all(|l| l.available >= 0 && l.reserved >= 0),
            "{name}: {s:?}"
        );
        let client = db.pool.get().await.expect("client");
        let skipped: i64 = client
            .query_one(
                "SELECT count(*) FROM reservations r WHERE r.backordered > 0 \
                 AND r.backorder_arrival < (SELECT max(arrival) FROM backorder_fills)",
                &[],
            )
            .await
            .expect("skipped")
            .get(0);
        assert_eq!(skipped, 0, "{name}: a backorder was skipped by a fill");
        assert_audit_clean(&db, name).await;
    }
}

/// The audit finds a fill written without its allocation at the location it arrived at (the
/// allocation dropped behind the engine's back), and a fill out of arrival order.
#[tokio::test]
async fn the_audit_finds_a_located_fill_without_its_allocation_or_out_of_order() {
    let db = test_db().await;
    let name = StrategyName::Atomic;
    let engine = located(&db, name, &[("north", 0, 0)], 4).await;
    let store = engine.store().clone();
    for order in ["o1", "o2"] {
        engine
            .reserve(&request(order, &[(1, 2)], Ttl::default()))
            .await
            .expect("preorder");
    }
    locations::set_count(&store, pid(1), &loc("north"), 1)
        .await
        .expect("arrival");
    assert_eq!(line(&engine, "o1").await, (own(&[("north", 1)]), 1));
    assert_audit_clean(&db, name).await;
    let client = db.pool.get().await.expect("client");
    client
        .execute(
            "DELETE FROM reservation_allocations a USING reservations r \
             WHERE a.reservation_id = r.id AND r.order_id = 'o1'",
            &[],
        )
        .await
        .expect("forget the allocation");
    let found = audit_stock(&db.pool).await.expect("audit");
    for invariant in [
        Invariant::AllocationsMatchQuantity,
        Invariant::LocationReservedMatchesAllocations,
    ] {
        assert!(
            found.iter().any(|d| d.invariant == invariant),
            "{invariant:?}: {found:?}"
        );
    }
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
            .any(|d| d.invariant == Invariant::FilledInArrivalOrder),
        "{found:?}"
    );
}
