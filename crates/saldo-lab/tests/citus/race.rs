//! The race lab on the local Citus test cluster (saldo on Citus): the lab's races pass for every
//! served strategy and the naive ones still fail the same checks there, so the checks can fail
//! on Citus too. Multi-item orders span products on different workers and crossed transfers
//! cross workers (shown from Citus's own placement tables, not assumed). A naive failure is a
//! race: it must show in one of a few attempts (`until_caught`), and the safe strategies must
//! hold in every attempt.
//!
//! Each race makes its own distributed scratch database on the shared cluster
//! (`saldo_lab::testing::citus_server`), as `saldo race --citus-workers N` does on its own.
//! (Part of the `citus` test binary.)

use saldo::ops::{citus_node_of, DistributedBy};
use saldo_lab::race::stock::{StockRace, MULTI_ITEM_PRODUCTS};
use saldo_lab::race::transfers::{self, TransferRace};
use saldo_lab::race::{Report, Scenario, Verdict};
use saldo_lab::scratch::Scratch;
use saldo_lab::testing::{citus_db, citus_server, until_caught};
use saldo_lab::{LabStrategy, LabTransfer};

/// The served strategies and one naive one: every safe one must hold, the naive one must fail.
const STOCK_CONTENDERS: [LabStrategy; 5] = [
    LabStrategy::Atomic,
    LabStrategy::Pessimistic,
    LabStrategy::Optimistic,
    LabStrategy::Batched,
    LabStrategy::NaiveSubtract,
];

fn report<'a>(reports: &'a [Report], name: &str) -> &'a Report {
    reports
        .iter()
        .find(|r| r.strategy == name)
        .unwrap_or_else(|| panic!("no report for {name}: {reports:#?}"))
}

/// The safe strategies held in every run of this race (checked in every attempt).
fn assert_safe_held(reports: &[Report]) {
    for r in reports.iter().filter(|r| r.safe) {
        assert_eq!(r.verdict, Verdict::Held, "{r:#?}");
        assert_eq!(r.violations, 0, "{r:#?}");
        assert_eq!(r.oversold, 0, "{r:#?}");
    }
}

/// The naive contenders broke the race's invariants: there is one, and it failed as expected.
fn naive_failed(reports: &[Report]) -> bool {
    let mut naive = reports.iter().filter(|r| !r.safe).peekable();
    naive.peek().is_some() && naive.all(|r| r.verdict == Verdict::FailedAsExpected)
}

/// One race of the contenders on a scratch database of its own.
async fn stock_race_once(race: &StockRace) -> Vec<Report> {
    let scratch = Scratch::for_race(citus_server()).await.expect("scratch");
    let reports = saldo_lab::race::stock::run(&scratch, race, &STOCK_CONTENDERS)
        .await
        .expect("race");
    scratch.drop_database().await.expect("drop");
    reports
}

/// Races until the naive contender fails (a bounded number of attempts: its failure is a race),
/// the safe ones holding in every attempt.
async fn stock_race(what: &str, race: &StockRace) -> Vec<Report> {
    until_caught(
        what,
        |_| async move {
            let reports = stock_race_once(race).await;
            assert_safe_held(&reports);
            reports
        },
        |reports| naive_failed(reports),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_unit_and_oversubscribed_hold_on_citus_and_naive_oversells() {
    let last = StockRace::new(Scenario::LastUnit, 30, 1, 2, 20, 42).expect("race");
    let reports = stock_race("naive-subtract on the last unit", &last).await;
    for name in ["atomic", "pessimistic", "optimistic", "batched"] {
        let r = report(&reports, name);
        assert_eq!((r.sold_per_run_min, r.sold_per_run_max), (1, 1), "{r:#?}");
    }

    let over = StockRace::new(Scenario::Oversubscribed, 60, 10, 2, 20, 42).expect("race");
    let reports = stock_race("naive-subtract oversubscribed", &over).await;
    for name in ["atomic", "pessimistic", "optimistic", "batched"] {
        let r = report(&reports, name);
        assert_eq!((r.sold_per_run_min, r.sold_per_run_max), (10, 10), "{r:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_item_orders_across_workers_are_all_or_nothing() {
    // The race's products, placed on a database distributed as the scratch one is.
    let placed = citus_db().await;
    let mut nodes = std::collections::BTreeSet::new();
    for product in 1..=MULTI_ITEM_PRODUCTS {
        let node = citus_node_of(&placed.pool, DistributedBy::Product, product)
            .await
            .expect("placement")
            .expect("a placement");
        nodes.insert(node);
    }
    assert!(
        nodes.len() >= 2,
        "products 1..={MULTI_ITEM_PRODUCTS} on one worker: {nodes:?}"
    );

    let race = StockRace::new(Scenario::MultiItem, 60, 10, 2, 20, 7).expect("race");
    let reports = stock_race("naive-subtract on multi-item orders", &race).await;
    for r in reports.iter().filter(|r| r.safe) {
        assert_eq!(r.partial_orders, 0, "{r:#?}");
        assert!(r.errors.is_empty(), "no error reaches a buyer: {r:#?}");
    }
}

/// One crossed-transfers race on a scratch database of its own: the served strategies (which
/// must hold in every attempt), then the naive one without retries.
async fn crossed_transfers_once() -> Vec<Report> {
    let scratch = Scratch::for_race(citus_server()).await.expect("scratch");
    let ledger = saldo::ledger::Ledger::new(scratch.store(Default::default()));
    let second = transfers::second_account(&ledger).await.expect("placement");
    let (one, other) = (
        citus_node_of(scratch.pool(), DistributedBy::Account, 1).await,
        citus_node_of(scratch.pool(), DistributedBy::Account, second).await,
    );
    let (one, other) = (one.expect("placement"), other.expect("placement"));
    assert!(one.is_some() && one != other, "{one:?} vs {other:?}");

    // The served strategies as served (the retry on, for what the cluster itself may abort);
    // the naive one without it, so a deadlock reaches the caller instead of being rerun.
    let served = TransferRace::new(60, 1, true).expect("race");
    let mut reports = transfers::run(
        &scratch,
        &served,
        &[LabTransfer::Ordered, LabTransfer::Batched],
    )
    .await
    .expect("race");
    let naive = TransferRace::new(60, 1, false).expect("race");
    reports.extend(
        transfers::run(&scratch, &naive, &[LabTransfer::Naive])
            .await
            .expect("race"),
    );
    scratch.drop_database().await.expect("drop");
    for name in ["ordered", "batched"] {
        let r = report(&reports, name);
        assert_eq!(r.verdict, Verdict::Held, "{r:#?}");
        assert!(r.errors.is_empty(), "{r:#?}");
        assert_eq!(r.money_drift, Some(0), "{r:#?}");
    }
    let naive = report(&reports, "naive/no-retry");
    assert_eq!(
        naive.money_drift,
        Some(0),
        "a deadlock victim rolls back whole"
    );
    reports
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossed_transfers_across_workers_deadlock_only_for_naive() {
    until_caught(
        "distributed deadlocks reaching the naive callers",
        |_| crossed_transfers_once(),
        |reports| {
            let naive = report(reports, "naive/no-retry");
            naive.verdict == Verdict::FailedAsExpected
                && naive.errors.get("40P01").copied().unwrap_or(0) > 0
        },
    )
    .await;
}
