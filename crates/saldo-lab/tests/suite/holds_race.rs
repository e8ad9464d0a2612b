//! The holds and linked-groups races, each run on a fresh database: saldo's ledger holds every
//! invariant (one winner per hold; never below min_balance; no deadlock from crossed groups), and
//! the naive variants of `saldo_lab::naive::holds` break the same checks (proof the checks can
//! fail). No retry on either side: a deadlock or a serialization failure must show. A naive
//! failure is a race, so it must show in one of a few runs (`until_caught`); the ordered
//! strategy must hold in its run.

use saldo::ledger::Ledger;
use saldo::retry::{RetryPolicy, TxOptions};
use saldo::stock::Store;
use saldo_lab::race::holds::{one_run, HoldRace, LabHolds, RunOutcome};
use saldo_lab::race::Scenario;
use saldo_lab::testing::until_caught;

use crate::harness::test_db;

/// The naive read–write window: every racer reads before the first one writes.
const THINK_MS: u64 = 50;

async fn race(scenario: Scenario, holds: u32, strategy: LabHolds) -> RunOutcome {
    let db = test_db().await;
    let tx = TxOptions::default().with_retry(RetryPolicy::none());
    let ledger = Ledger::new(Store::new(db.pool.clone(), tx));
    let race = HoldRace::new(scenario, holds, 1, THINK_MS).expect("race");
    one_run(&ledger, &race, strategy, 0).await.expect("run")
}

#[tokio::test]
async fn post_void_and_expiry_have_exactly_one_winner() {
    let ordered = race(Scenario::HoldSettle, 10, LabHolds::Ordered).await;
    assert!(ordered.held(), "{ordered:?}");
    assert_eq!(ordered.done, 10);
    until_caught(
        "naive settle",
        |_| race(Scenario::HoldSettle, 10, LabHolds::Naive),
        |naive| !naive.held(),
    )
    .await;
}

#[tokio::test]
async fn holds_for_the_last_funds_never_go_below_min_balance() {
    let ordered = race(Scenario::HoldLastFunds, 30, LabHolds::Ordered).await;
    assert!(ordered.held(), "{ordered:?}");
    assert_eq!((ordered.done, ordered.refused), (10, 20));
    until_caught(
        "naive holds for the last funds",
        |_| race(Scenario::HoldLastFunds, 30, LabHolds::Naive),
        |naive| naive.broken && naive.divergences > 0,
    )
    .await;
}

/// Reversals of 1 racing for a transfer of 10: saldo's never move back more than it posted;
/// the naive check-then-write does.
#[tokio::test]
async fn reversals_never_exceed_the_transfer_where_the_naive_ones_do() {
    let ordered = race(Scenario::ReversalRace, 16, LabHolds::Ordered).await;
    assert!(ordered.held(), "{ordered:?}");
    assert_eq!((ordered.done, ordered.refused), (10, 6));
    until_caught(
        "naive reversals beyond the transfer",
        |_| race(Scenario::ReversalRace, 16, LabHolds::Naive),
        |naive| naive.broken && naive.excess > 0,
    )
    .await;
}

#[tokio::test]
async fn crossed_groups_never_deadlock_a_caller() {
    let ordered = race(Scenario::CrossedGroups, 20, LabHolds::Ordered).await;
    assert!(ordered.held(), "{ordered:?}");
    assert_eq!(ordered.done, 20);
    until_caught(
        "naive crossed groups deadlocking",
        |_| race(Scenario::CrossedGroups, 20, LabHolds::Naive),
        |naive| {
            naive
                .errors
                .iter()
                .any(|e| e.sqlstate().is_some_and(|s| s.code() == "40P01"))
        },
    )
    .await;
}

/// Posts spread around their holds' deadlines with no sweeper: saldo posts none past its
/// deadline (the early ones posted, the late ones refused `expired`, every answer the hold's
/// final state); the naive post, which checks the status and never the time, posts late ones.
#[tokio::test]
async fn posts_past_the_deadline_are_refused_where_the_naive_check_posts_them() {
    let ordered = race(Scenario::HoldDeadline, 10, LabHolds::Ordered).await;
    assert!(ordered.held(), "{ordered:?}");
    // Early posts posted, late ones refused (on a busy machine more of them are late; the
    // last ones, half a second past their deadline, always are).
    assert_eq!((ordered.done + ordered.refused, ordered.excess), (10, 0));
    assert!(
        ordered.refused > 0,
        "no post reached the deadline: {ordered:?}"
    );
    until_caught(
        "naive post past the deadline",
        |_| race(Scenario::HoldDeadline, 10, LabHolds::Naive),
        |naive| naive.broken && naive.excess > 0,
    )
    .await;
}
