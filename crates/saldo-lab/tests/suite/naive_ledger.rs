//! The naive transfers of the crossed-transfers deadlock (arrival-order locks) as
//! `crates/saldo/tests/suite/ledger.rs` showed them: crossed transfers deadlock without the retry,
//! and succeed only by measured retries with it. The ordered strategy's side of the race stays in
//! saldo's suite.

use saldo::audit::audit_ledger;
use saldo::domain::AccountId;
use saldo::ledger::Ledger;
use saldo::retry::{RetryPolicy, TxOptions, TxStats};
use saldo::stock::Store;
use saldo::Error;
use saldo_lab::race::transfers::{crossed, OPENING_BALANCE as OPENING};
use saldo_lab::LabTransfer;

use crate::harness::{test_db, TestDb};

/// Transfers each way, all fired at once (the crossed-transfers race's 200 in all).
const CROSSED_EACH_WAY: usize = 100;

fn acc(n: i64) -> AccountId {
    AccountId::new(n).expect("account id")
}

async fn assert_ledger_clean(db: &TestDb) {
    let divergences = audit_ledger(&db.pool).await.expect("ledger audit");
    assert!(divergences.is_empty(), "ledger audit found {divergences:?}");
}

async fn balance(ledger: &Ledger, n: i64) -> i64 {
    ledger.account(acc(n)).await.expect("account").balance
}

/// What the crossed race left behind.
struct Crossed {
    ok: usize,
    errors: Vec<Error>,
}

/// The 200 crossed transfers on a fresh ledger (`saldo_lab::race::transfers::crossed`).
async fn crossed_transfers(ledger: &Ledger, strategy: LabTransfer) -> Crossed {
    let answers = crossed(ledger, strategy, 2 * CROSSED_EACH_WAY as u32, "x")
        .await
        .expect("the race ran");
    let mut out = Crossed {
        ok: 0,
        errors: Vec::new(),
    };
    for answer in answers {
        match answer {
            Ok(_) => out.ok += 1,
            Err(e) => out.errors.push(e),
        }
    }
    out
}

async fn assert_total_unchanged(ledger: &Ledger) {
    let total = balance(ledger, 1).await + balance(ledger, 2).await;
    let system = ledger.account(AccountId::SYSTEM).await.expect("system");
    assert_eq!(total, 2 * OPENING);
    assert_eq!(total + system.balance, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crossed_transfers_naive_deadlock_without_retry() {
    // One round deadlocks about 20 times in 200 transfers; a few rounds (each on a fresh
    // database, each checked in full) so that a starved scheduler cannot make it pass by luck
    // of timing: at least one deadlock over all rounds is required.
    let mut deadlocks = 0;
    for _ in 0..NAIVE_ROUNDS {
        let db = test_db().await;
        let ledger = naive_ledger(&db, db.tx.clone().with_retry(RetryPolicy::none()));
        let crossed = crossed_transfers(&ledger, LabTransfer::Naive).await;
        deadlocks += crossed
            .errors
            .iter()
            .filter(|e| e.sqlstate().map(|s| s.code()) == Some("40P01"))
            .count();
        // Every failure is a concurrency failure the retry would absorb: 40P01, or 40001 when
        // the cluster runs SERIALIZABLE.
        let unexpected: Vec<&Error> = crossed
            .errors
            .iter()
            .filter(|e| !matches!(e.sqlstate().map(|s| s.code()), Some("40P01" | "40001")))
            .collect();
        assert!(unexpected.is_empty(), "{unexpected:?}");
        // A deadlock victim leaves no effect: whatever committed is still consistent.
        assert_total_unchanged(&ledger).await;
        assert_ledger_clean(&db).await;
        if deadlocks > 0 {
            break;
        }
    }
    assert!(
        deadlocks > 0,
        "the naive race produced no 40P01 in {NAIVE_ROUNDS} rounds: the test cannot fail"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crossed_transfers_naive_succeed_only_by_measured_retries() {
    // As above: rounds until the retry has hidden a deadlock, every round checked in full.
    let stats = TxStats::new();
    for _ in 0..NAIVE_ROUNDS {
        let db = test_db().await;
        let tx = db
            .tx
            .clone()
            .with_retry(RetryPolicy::default().with_max_attempts(NAIVE_ATTEMPTS))
            .with_stats(stats.clone());
        let ledger = naive_ledger(&db, tx);
        let crossed = crossed_transfers(&ledger, LabTransfer::Naive).await;
        let codes: Vec<String> = crossed.errors.iter().map(ToString::to_string).collect();
        assert_eq!(crossed.ok, 2 * CROSSED_EACH_WAY, "failures: {codes:?}");
        assert_eq!(balance(&ledger, 1).await, OPENING);
        assert_eq!(balance(&ledger, 2).await, OPENING);
        assert_total_unchanged(&ledger).await;
        assert_ledger_clean(&db).await;
        if stats.deadlock_retries() > 0 {
            break;
        }
    }
    assert!(stats.deadlock_retries() > 0, "the retry hid no deadlock");
}

/// Rounds of a naive crossed-transfer race at most, until one shows its deadlocks.
const NAIVE_ROUNDS: usize = 3;
/// The naive race deadlocks on most crossings, and PostgreSQL tends to pick the longest waiter
/// as the victim again and again: enough attempts that every transfer gets through.
const NAIVE_ATTEMPTS: u32 = 16;
/// Connections for the naive races. Two transactions at a time is the crossed-transfers timeline
/// (Ana pays Bia while Bia pays Ana): it deadlocks on a good share of the 200 transfers (measured:
/// about 20 without retry) while each deadlock costs one `deadlock_timeout` (50 ms on the test
/// cluster). A wider pool deadlocks on nearly every transfer and only makes the test slower.
const NAIVE_POOL: usize = 2;

fn naive_ledger(db: &TestDb, tx: TxOptions) -> Ledger {
    Ledger::new(Store::new(db.new_pool(NAIVE_POOL), tx))
}
