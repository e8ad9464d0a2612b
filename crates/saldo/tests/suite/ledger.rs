//! Seed 002 scenarios for the ledger: crossed transfers with the ordered strategy (no failure)
//! and the naive one (deadlocks, visible only when the retry is measured), idempotent replays,
//! every typed refusal, and the ledger audit after each scenario.

use saldo::audit::audit_ledger;
use saldo::domain::{AccountId, Amount, TransferId};
use saldo::ledger::{Ledger, TransferKind, TransferRequest, TransferStrategy};
use saldo::retry::{RetryPolicy, TxOptions, TxStats};
use saldo::stock::Store;
use saldo::Error;

use crate::harness::{test_db, TestDb};

fn acc(n: i64) -> AccountId {
    AccountId::new(n).expect("account id")
}

fn tid(s: &str) -> TransferId {
    TransferId::new(s).expect("transfer id")
}

fn amount(n: i64) -> Amount {
    Amount::new(n).expect("amount")
}

fn request(id: &str, from: i64, to: i64, n: i64) -> TransferRequest {
    TransferRequest {
        id: tid(id),
        from: acc(from),
        to: acc(to),
        amount: amount(n),
    }
}

fn ledger_with(db: &TestDb, tx: TxOptions) -> Ledger {
    Ledger::new(Store::new(db.pool.clone(), tx))
}

async fn assert_ledger_clean(db: &TestDb) {
    let divergences = audit_ledger(&db.pool).await.expect("ledger audit");
    assert!(divergences.is_empty(), "ledger audit found {divergences:?}");
}

async fn balance(ledger: &Ledger, n: i64) -> i64 {
    ledger.account(acc(n)).await.expect("account").balance
}

#[tokio::test]
async fn open_deposit_withdraw_transfer_and_list() {
    let db = test_db().await;
    let ledger = ledger_with(&db, TxOptions::default());
    let a = ledger.open_account(acc(1), 1_000).await.expect("open 1");
    assert_eq!(a.balance, 1_000);
    ledger.open_account(acc(2), 0).await.expect("open 2");

    let d = ledger
        .deposit(tid("d1"), acc(2), amount(50))
        .await
        .expect("deposit");
    assert_eq!(
        (d.from, d.to, d.kind),
        (AccountId::SYSTEM, acc(2), TransferKind::Deposit)
    );
    let w = ledger
        .withdraw(tid("w1"), acc(1), amount(100))
        .await
        .expect("withdraw");
    assert_eq!(
        (w.from, w.to, w.kind),
        (acc(1), AccountId::SYSTEM, TransferKind::Withdrawal)
    );
    let t = ledger
        .transfer(TransferStrategy::Ordered, &request("t1", 1, 2, 300))
        .await
        .expect("transfer");
    assert!(!t.replayed);
    assert_eq!((t.amount, t.kind), (300, TransferKind::Transfer));

    assert_eq!(balance(&ledger, 1).await, 600);
    assert_eq!(balance(&ledger, 2).await, 350);
    // The system account holds minus everything put in: opening 1000 + deposit 50 − withdrawal 100.
    let system = ledger.account(AccountId::SYSTEM).await.expect("system");
    assert_eq!(system.balance, -950);

    let history = ledger.transfers_of(acc(1), 10).await.expect("history");
    let ids: Vec<&str> = history.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids.len(), 3);
    for id in ["opening:1", "w1", "t1"] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
    assert_eq!(
        ledger.transfers_of(acc(1), 1).await.expect("history").len(),
        1
    );
    assert_ledger_clean(&db).await;
}

/// Seed 002: accounts 1 and 2 open with this much each.
const OPENING: i64 = 100_000;
/// Seed 002: transfers each way, all fired at once.
const CROSSED_EACH_WAY: usize = 100;
const CROSSED_AMOUNT: i64 = 10;

/// What the crossed race left behind.
struct Crossed {
    ok: usize,
    errors: Vec<Error>,
}

/// Opens accounts 1 and 2 and fires seed 002's 200 crossed transfers at once.
async fn crossed_transfers(ledger: &Ledger, strategy: TransferStrategy) -> Crossed {
    ledger.open_account(acc(1), OPENING).await.expect("open 1");
    ledger.open_account(acc(2), OPENING).await.expect("open 2");
    let mut tasks = Vec::new();
    for i in 0..2 * CROSSED_EACH_WAY {
        let ledger = ledger.clone();
        let (from, to) = if i % 2 == 0 { (1, 2) } else { (2, 1) };
        tasks.push(tokio::spawn(async move {
            ledger
                .transfer(
                    strategy,
                    &request(&format!("x{i}"), from, to, CROSSED_AMOUNT),
                )
                .await
        }));
    }
    let mut out = Crossed {
        ok: 0,
        errors: Vec::new(),
    };
    for t in tasks {
        match t.await.expect("join") {
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
async fn crossed_transfers_ordered_never_fail() {
    let db = test_db().await;
    let stats = TxStats::new();
    let ledger = ledger_with(&db, TxOptions::default().with_stats(stats.clone()));
    let crossed = crossed_transfers(&ledger, TransferStrategy::Ordered).await;
    let codes: Vec<String> = crossed.errors.iter().map(ToString::to_string).collect();
    assert_eq!(crossed.ok, 2 * CROSSED_EACH_WAY, "failures: {codes:?}");
    // Same number each way: each balance is back exactly where it started.
    assert_eq!(balance(&ledger, 1).await, OPENING);
    assert_eq!(balance(&ledger, 2).await, OPENING);
    assert_total_unchanged(&ledger).await;
    assert_eq!(
        stats.deadlock_retries(),
        0,
        "ordered locking cannot deadlock"
    );
    assert_ledger_clean(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crossed_transfers_naive_deadlock_without_retry() {
    let db = test_db().await;
    let ledger = ledger_with(&db, TxOptions::default().with_retry(RetryPolicy::none()));
    let crossed = crossed_transfers(&ledger, TransferStrategy::Naive).await;
    let deadlocks = crossed
        .errors
        .iter()
        .filter(|e| e.sqlstate().map(|s| s.code()) == Some("40P01"))
        .count();
    assert!(
        deadlocks > 0,
        "the naive race produced no 40P01: the test cannot fail"
    );
    assert_eq!(
        crossed.ok + deadlocks,
        2 * CROSSED_EACH_WAY,
        "{:?}",
        crossed.errors
    );
    // A deadlock victim leaves no effect: whatever committed is still consistent.
    assert_total_unchanged(&ledger).await;
    assert_ledger_clean(&db).await;
}
