//! The oversell checks of saldo's contract suite (`crates/saldo/tests/suite/contract.rs`),
//! run against the naive strategies with the read–write window widened: they must fail there,
//! proof that the checks can fail. Under SERIALIZABLE the database rescues even the naive code.

use std::time::Duration;

use saldo::audit::Invariant;
use saldo::domain::ProductId;
use saldo::retry::{RetryPolicy, TxOptions};
use saldo::stock::{admin, StockEngine, Store, StrategyConfig};
use saldo_lab::race::buyers::{one_unit_each, Tally};
use saldo_lab::LabStrategy;

use crate::harness::{test_db, TestDb};

/// Whole-transaction attempts, as in the contract suite.
const CONTRACT_ATTEMPTS: u32 = 12;
/// The widened window for the naive strategies (the last-unit race's payment call, shortened). Wide
/// enough that two of the 32 pooled sessions read the last unit before the first one writes even
/// on a loaded two-core machine, where tasks and backends wait tens of milliseconds for a core;
/// it costs about one window per attempt (later readers see the unit gone and stop at once).
const NAIVE_THINK: Duration = Duration::from_millis(150);
/// Attempts a naive strategy gets to show its failure; one failing attempt is required. With
/// 50 buyers and a 150 ms window every pooled session reads before the first write, so the first
/// attempt fails in practice; the others are there for a scheduler that starves the race anyway.
const NAIVE_ATTEMPTS: usize = 5;

fn pid(n: i64) -> ProductId {
    ProductId::new(n).expect("product id")
}

/// Stocks the products, then builds `name` over the database with the widened window.
async fn engine_with_stock(db: &TestDb, name: LabStrategy, stock: &[(i64, i64)]) -> StockEngine {
    let store = Store::new(
        db.pool.clone(),
        TxOptions::default()
            .with_retry(RetryPolicy::default().with_max_attempts(CONTRACT_ATTEMPTS)),
    )
    .with_layout(db.layout);
    for &(p, count) in stock {
        admin::set_count(&store, pid(p), count)
            .await
            .expect("count");
    }
    name.build(store, &StrategyConfig::default(), NAIVE_THINK)
}

async fn assert_audit_clean(db: &TestDb, name: LabStrategy) {
    let divergences = db.audit_stock().await.expect("audit");
    assert!(
        divergences.is_empty(),
        "{name}: audit found {divergences:?}"
    );
}

async fn race_for_product(engine: &StockEngine, buyers: usize) -> Tally {
    one_unit_each(engine, buyers).await.expect("race")
}

async fn serializable(db: &TestDb) -> bool {
    let client = db.pool.get().await.expect("client");
    let level: String = client
        .query_one("SHOW default_transaction_isolation", &[])
        .await
        .expect("show")
        .get(0);
    level == "serializable"
}

/// One last-unit race of a naive strategy with the window widened.
async fn naive_last_unit(name: LabStrategy) -> (TestDb, Tally) {
    let db = test_db().await;
    let engine = engine_with_stock(&db, name, &[(1, 1)]).await;
    let tally = race_for_product(&engine, 50).await;
    (db, tally)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn naive_overwrite_sells_the_last_unit_many_times_and_the_audit_sees_it() {
    if crate::harness::SERIALIZABLE {
        return naive_is_rescued_by_serializable(LabStrategy::NaiveOverwrite).await;
    }
    let mut seen = Vec::new();
    for _ in 0..NAIVE_ATTEMPTS {
        let (db, tally) = naive_last_unit(LabStrategy::NaiveOverwrite).await;
        if serializable(&db).await {
            // SERIALIZABLE turns the lost update into 40001 + whole-transaction retry: even the
            // naive code sells once there, which is why it is the distributed-SQL default.
            assert_eq!(tally.units(), 1, "{tally:?}");
            return;
        }
        let divergences = db.audit_stock().await.expect("audit");
        let stock = admin::get(&db.store(), pid(1)).await.expect("stock");
        // The lost update goes unnoticed by the row itself: nothing negative, no error.
        assert!(stock.available >= 0);
        assert!(tally.errors.is_empty(), "{tally:?}");
        if tally.units() > 1 {
            // Every seller wrote reserved=1, but each left a reservation row behind.
            assert!(
                divergences
                    .iter()
                    .any(|d| d.invariant == Invariant::ReservedMatchesActive
                        && d.expected == tally.units() as i64),
                "{divergences:?}"
            );
            return;
        }
        seen.push(tally.units());
    }
    panic!("naive-overwrite never oversold in {NAIVE_ATTEMPTS} attempts: sold {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn naive_subtract_hits_the_check_constraint_and_the_error_reaches_buyers() {
    if crate::harness::SERIALIZABLE {
        return naive_is_rescued_by_serializable(LabStrategy::NaiveSubtract).await;
    }
    let mut seen = Vec::new();
    for _ in 0..NAIVE_ATTEMPTS {
        let (db, tally) = naive_last_unit(LabStrategy::NaiveSubtract).await;
        if serializable(&db).await {
            assert_eq!(tally.units(), 1, "{tally:?}");
            return;
        }
        let stock = admin::get(&db.store(), pid(1)).await.expect("stock");
        // The CHECK is the last line of defence: stock never goes negative, one unit is sold...
        assert_eq!((stock.available, stock.reserved), (0, 1));
        assert_eq!(tally.units(), 1);
        // ...but buyers who passed the application's check get a constraint error instead of a
        // clean refusal.
        if tally.check_violations() > 0 {
            assert_audit_clean(&db, LabStrategy::NaiveSubtract).await;
            return;
        }
        seen.push(tally);
    }
    panic!("naive-subtract never hit the CHECK in {NAIVE_ATTEMPTS} attempts: {seen:?}");
}

/// Under SERIALIZABLE the database itself detects the read-decide-write race: the losers get
/// 40001 and rerun (or give up), so even the naive code never sells a unit twice. The same race
/// that breaks it under READ COMMITTED is the proof that the isolation level, not luck, saves it.
async fn naive_is_rescued_by_serializable(name: LabStrategy) {
    let (db, tally) = naive_last_unit(name).await;
    let stock = admin::get(&db.store(), pid(1)).await.expect("stock");
    assert!(
        tally.units() <= 1,
        "{name} oversold under serializable: {tally:?}"
    );
    assert_eq!(stock.available + stock.reserved, 1, "{name}");
    assert_eq!(tally.check_violations(), 0, "{name}: {tally:?}");
    assert_audit_clean(&db, name).await;
}
