//! The `events-follow` race as the lab runs it: a reader follows the event feed while
//! reservations commit and one transaction that wrote its event first commits last. saldo's
//! feed gives every committed event exactly once, each stream in position order, with every
//! served strategy writing; the naive "highest id seen" reader misses the late event (it has
//! read past its id before it commits). On one node and, through the Citus binary, on Citus.

use saldo::stock::StrategyName;
use saldo_lab::naive;
use saldo_lab::race::follow::run_on;
use saldo_lab::race::Contender;
use saldo_lab::testing::until_caught;

use crate::harness::test_db;

/// Writers per run.
const WRITERS: u32 = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_feed_gives_every_committed_event_once_whatever_commits_late() {
    for &name in StrategyName::ALL {
        let db = test_db().await;
        for run in 0..2 {
            let outcome = run_on(&db.store(), WRITERS, Contender::Served(name), run)
                .await
                .expect("run");
            assert!(!outcome.violated(), "{name}: {outcome:?}");
            assert_eq!(outcome.seen, outcome.committed, "{name}: {outcome:?}");
            // The stock count, the late event, and at least one event per reservation.
            assert!(
                outcome.committed > u64::from(WRITERS),
                "{name}: {outcome:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_highest_id_reader_misses_the_late_commit() {
    let outcome = until_caught(
        "the naive reader missing an event",
        |run| async move {
            let db = test_db().await;
            run_on(
                &db.store(),
                WRITERS,
                Contender::Naive(naive::follow::NAME),
                run,
            )
            .await
            .expect("run")
        },
        |outcome| outcome.missed > 0,
    )
    .await;
    assert!(outcome.violated(), "{outcome:?}");
}
