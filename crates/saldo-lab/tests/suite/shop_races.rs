//! The shop races, safe side and naive side in one place, on the same checks the lab runs:
//! hold extensions racing the sweeper (every served strategy holds; the naive
//! read-decide-write extender tells customers their units are held when the sweeper took them),
//! and direct sales racing reservations for the last unit (sold once; the naive seller
//! oversells and the audit, which counts sold units, sees it), restocks filling backorders
//! racing preorders, and orders split across three locations of two products (no location
//! oversold, all or nothing, no deadlock reaches a buyer; the naive allocator, which reads the
//! locations unlocked and writes what it computed, oversells them every run).

use saldo::retry::{RetryPolicy, TxOptions};
use saldo::stock::{Store, StrategyName};
use saldo_lab::naive;
use saldo_lab::race::extend::run_on;
use saldo_lab::race::{backorders, locations, sales, Contender};

use crate::harness::{test_db, TestDb};

/// Orders per run: enough that some extensions land before their hold lapses and some after.
const EXTEND_ORDERS: u32 = 60;

fn store(db: &TestDb) -> Store {
    Store::new(
        db.pool.clone(),
        TxOptions::default().with_retry(RetryPolicy::default().with_max_attempts(12)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn extensions_racing_the_sweeper_have_exactly_one_winner() {
    for &name in StrategyName::ALL {
        let db = test_db().await;
        let outcome = run_on(&store(&db), EXTEND_ORDERS, Contender::Served(name), 0)
            .await
            .expect("run");
        assert!(!outcome.violated(), "{name}: {outcome:?}");
        assert_eq!(
            outcome.extended + outcome.refused_expired,
            u64::from(EXTEND_ORDERS),
            "{name}: every extension answered extended or expired: {outcome:?}"
        );
        // The last extensions start 1.8 holds after the reservations: some are always refused
        // (how many extensions come first depends on the machine, so no count is asserted).
        assert!(outcome.refused_expired > 0, "{name}: {outcome:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_naive_extender_loses_extensions_to_the_sweeper() {
    let db = test_db().await;
    let outcome = run_on(
        &store(&db),
        EXTEND_ORDERS,
        Contender::Naive(naive::extend::NAME),
        0,
    )
    .await
    .expect("run");
    assert!(outcome.lost_extensions > 0, "{outcome:?}");
    assert!(outcome.violated());
}

/// Requests per sales run: half reserve the last unit, half buy it directly.
const SALE_BUYERS: u32 = 40;
/// Runs per served strategy.
const SALE_RUNS: u32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn direct_sales_racing_reservations_sell_the_last_unit_once() {
    for &name in StrategyName::ALL {
        let db = test_db().await;
        let store = store(&db);
        for run in 0..SALE_RUNS {
            if run > 0 {
                saldo::fixtures::empty_all(&db.pool).await.expect("reset");
            }
            let outcome = sales::run_on(&store, SALE_BUYERS, Contender::Served(name), run)
                .await
                .expect("run");
            assert!(!outcome.violated(), "{name}: {outcome:?}");
            assert_eq!(outcome.reserved + outcome.sold, 1, "{name}: {outcome:?}");
            assert_eq!(outcome.refused, u64::from(SALE_BUYERS) - 1, "{name}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_naive_seller_oversells_the_last_unit() {
    let db = test_db().await;
    let outcome = sales::run_on(
        &store(&db),
        SALE_BUYERS,
        Contender::Naive(naive::sales::NAME),
        0,
    )
    .await
    .expect("run");
    assert!(outcome.oversold() > 0, "{outcome:?}");
    assert!(outcome.audit_divergences > 0, "{outcome:?}");
}

/// Requests per backorder-fill run: half reserve a unit of the preorder, half restock one.
const FILL_BUYERS: u32 = 40;
/// Runs per contender (the naive one must fail every one of them).
const FILL_RUNS: u32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restocks_racing_preorders_fill_in_arrival_order_within_the_limit() {
    for &name in StrategyName::ALL {
        let db = test_db().await;
        let store = store(&db);
        for run in 0..FILL_RUNS {
            if run > 0 {
                saldo::fixtures::empty_all(&db.pool).await.expect("reset");
            }
            let outcome = backorders::run_on(&store, FILL_BUYERS, Contender::Served(name), run)
                .await
                .expect("run");
            assert!(!outcome.violated(), "{name}: {outcome:?}");
            assert_eq!(outcome.restocked, u64::from(FILL_BUYERS / 2), "{name}");
            assert_eq!(
                outcome.reserved + outcome.refused,
                u64::from(FILL_BUYERS / 2),
                "{name}: {outcome:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_naive_restock_fills_out_of_order_and_loses_updates_every_run() {
    let db = test_db().await;
    let store = store(&db);
    for run in 0..FILL_RUNS {
        if run > 0 {
            saldo::fixtures::empty_all(&db.pool).await.expect("reset");
        }
        let outcome = backorders::run_on(
            &store,
            FILL_BUYERS,
            Contender::Naive(naive::backorders::NAME),
            run,
        )
        .await
        .expect("run");
        assert!(outcome.violated(), "run {run}: {outcome:?}");
        assert!(outcome.audit_divergences > 0, "run {run}: {outcome:?}");
    }
}

/// Orders per split-locations run: far more than the 20 units stocked across six locations.
const LOCATION_BUYERS: u32 = 40;
/// Runs per served strategy.
const LOCATION_RUNS: u32 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn split_orders_across_locations_never_oversell_a_location() {
    for &name in StrategyName::ALL {
        let db = test_db().await;
        let store = store(&db);
        for run in 0..LOCATION_RUNS {
            if run > 0 {
                saldo::fixtures::empty_all(&db.pool).await.expect("reset");
            }
            let outcome = locations::run_on(&store, LOCATION_BUYERS, Contender::Served(name), run)
                .await
                .expect("run");
            assert!(!outcome.violated(), "{name}: {outcome:?}");
            assert_eq!(
                outcome.granted_orders + outcome.refused,
                u64::from(LOCATION_BUYERS),
                "{name}: every order granted or cleanly refused: {outcome:?}"
            );
            // Product 1 (10 units) is wanted far beyond its stock: it sells out exactly.
            assert!(outcome.granted_units >= 10, "{name}: {outcome:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_naive_allocator_oversells_its_locations() {
    let db = test_db().await;
    let outcome = locations::run_on(
        &store(&db),
        LOCATION_BUYERS,
        Contender::Naive(naive::locations::NAME),
        0,
    )
    .await
    .expect("run");
    assert!(outcome.location_oversold > 0, "{outcome:?}");
    assert!(outcome.violated(), "{outcome:?}");
}
