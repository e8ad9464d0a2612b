//! The seeds' InnoDB claims on a real MariaDB (a private server of `mariadb-local`, one per
//! test process; each test works in a scratch database of its own): every safe strategy sells
//! exactly one last unit in every run and exactly 10 units to 1,000 buyers, under REPEATABLE READ
//! and READ COMMITTED; the naive one oversells; crossed transfers deadlock (1213) without
//! ordering and never with it, each applied exactly once; and the differences from PostgreSQL.

use std::sync::OnceLock;

use mariadb_local::{Config, MariaDb};
use saldo_lab::innodb::differences;
use saldo_lab::innodb::stock::{self, InnoStrategy, StockRace};
use saldo_lab::innodb::transfers::{self, TransferRace, TransferStrategy};
use saldo_lab::innodb::{InnoReport, Isolation, Lab};
use saldo_lab::testing::until_caught;

fn server() -> &'static MariaDb {
    static SERVER: OnceLock<MariaDb> = OnceLock::new();
    SERVER.get_or_init(|| MariaDb::start(&Config::default()).expect("start the private MariaDB"))
}

async fn lab() -> Lab {
    Lab::create(Lab::opts_for(server()))
        .await
        .expect("scratch database")
}

fn assert_held(report: &InnoReport) {
    eprintln!("{report}");
    assert_eq!(report.violations, 0, "{report}");
    assert!(report.errors.is_empty(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_safe_strategy_sells_the_last_unit_exactly_once_in_every_run() {
    let lab = lab().await;
    for &iso in Isolation::ALL {
        let race = StockRace::new("last-unit", (40, 1, 5), 0, iso).expect("race");
        for report in stock::run(&lab, &race, InnoStrategy::SAFE)
            .await
            .expect("run")
        {
            assert_held(&report);
            assert_eq!((report.done_min, report.done_max), (1, 1), "{report}");
        }
    }
    lab.drop_database().await.expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_buyers_for_ten_units_sell_exactly_ten() {
    let lab = lab().await;
    for &iso in Isolation::ALL {
        let race = StockRace::new("oversubscribed", (1000, 10, 1), 0, iso).expect("race");
        for report in stock::run(&lab, &race, InnoStrategy::SAFE)
            .await
            .expect("run")
        {
            assert_held(&report);
            assert_eq!(report.done, 10, "{report}");
            assert_eq!(report.refused + report.conflicts, 990, "{report}");
        }
    }
    lab.drop_database().await.expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_naive_read_then_write_oversells_under_both_levels() {
    let lab = lab().await;
    for &iso in Isolation::ALL {
        let race = StockRace::new("last-unit", (20, 1, 1), 20, iso).expect("race");
        let report = until_caught(
            &format!("naive oversells under {}", iso.as_str()),
            |_| async {
                let reports = stock::run(&lab, &race, &[InnoStrategy::Naive]).await;
                reports.expect("run").remove(0)
            },
            |r: &InnoReport| r.oversold > 0,
        )
        .await;
        eprintln!("{report}");
        assert!(report.violations > 0, "{report}");
    }
    lab.drop_database().await.expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossed_transfers_deadlock_without_ordering_and_never_with_it() {
    let lab = lab().await;
    for &iso in Isolation::ALL {
        let race = TransferRace::new(200, 1, true, iso).expect("race");
        let naive = until_caught(
            &format!("naive transfers deadlock under {}", iso.as_str()),
            |_| async {
                let reports = transfers::run(&lab, &race, &[TransferStrategy::Naive]).await;
                reports.expect("run").remove(0)
            },
            |r: &InnoReport| r.deadlock_retries > 0,
        )
        .await;
        // The retry reran every victim: all 200 applied, each once, no money lost.
        assert_held(&naive);
        assert_eq!(naive.done, 200, "{naive}");
        let ordered = transfers::run(&lab, &race, &[TransferStrategy::Ordered])
            .await
            .expect("run")
            .remove(0);
        assert_held(&ordered);
        assert_eq!(
            (ordered.done, ordered.deadlock_retries),
            (200, 0),
            "{ordered}"
        );
    }
    // Without the retry the victims' 1213 reaches the caller.
    let race = TransferRace::new(200, 1, false, Isolation::RepeatableRead).expect("race");
    let no_retry = until_caught(
        "naive/no-retry returns 1213",
        |_| async {
            let reports = transfers::run(&lab, &race, &[TransferStrategy::Naive]).await;
            reports.expect("run").remove(0)
        },
        |r: &InnoReport| r.errors.contains_key("1213"),
    )
    .await;
    assert!(no_retry.violations > 0, "{no_retry}");
    lab.drop_database().await.expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_plain_select_sees_the_snapshot_while_the_update_reads_the_current_row() {
    let lab = lab().await;
    let rr = differences::snapshot_vs_current_read(&lab, Isolation::RepeatableRead)
        .await
        .expect("rr");
    assert_eq!(
        (
            rr.plain_before,
            rr.plain_after,
            rr.locking_read,
            rr.update_error,
            rr.plain_after_update
        ),
        (5, 5, 4, None, 3),
        "{rr:?}"
    );
    let rc = differences::snapshot_vs_current_read(&lab, Isolation::ReadCommitted)
        .await
        .expect("rc");
    assert_eq!(
        (
            rc.plain_before,
            rc.plain_after,
            rc.locking_read,
            rc.update_error,
            rc.plain_after_update
        ),
        (5, 4, 4, None, 3),
        "{rc:?}"
    );
    lab.drop_database().await.expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gap_locks_block_an_insert_under_repeatable_read_only() {
    let lab = lab().await;
    let rr = differences::gap_lock_blocks_insert(&lab, Isolation::RepeatableRead).await;
    assert_eq!(rr.expect("rr"), Some(1205));
    let rc = differences::gap_lock_blocks_insert(&lab, Isolation::ReadCommitted).await;
    assert_eq!(rc.expect("rc"), None);
    lab.drop_database().await.expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_affected_counts_changed_rows_unless_found_rows_and_autocommit_drops_locks() {
    let lab = lab().await;
    assert_eq!(
        differences::rows_affected(&lab).await.expect("rows"),
        (0, 1)
    );
    let (on, off) = differences::autocommit_and_locks(&lab)
        .await
        .expect("autocommit");
    assert_eq!((on, off), (None, Some(1205)));
    lab.drop_database().await.expect("drop");
}
