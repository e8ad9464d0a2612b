//! The batched ledger engine's own checks (the ledger and model suites rerun on it through
//! `tests/ledger_batched.rs`): one bad transfer never fails its batch-mates, deposits meet on
//! the system account in one batch, replays inside and across batches, a full queue answers
//! `Overloaded`, a queued transfer past its deadline is never applied. Audit clean after each.
//!
//! Batch composition is made deterministic without timing, as in the stock engine's suite: a
//! second session holds an account row, the first movement blocks on it (holding the only
//! in-flight slot of the one partition), and the test waits (bounded) until the queue holds
//! exactly the movements it wants in the next batch.

use std::time::Duration;

use saldo::domain::AccountId;
use saldo::ledger::{Ledger, Transfer, TransferRequest, TransferStrategy};
use saldo::stock::batched::BatchedConfig;
use saldo::Error;
use saldo_lab::testing::ledger_divergences;

use super::harness::{test_db, TestDb};
use super::ledger::{acc, amount, request, tid};
use saldo_lab::testing::RowLock;

/// Upper bound of every wait loop in this module.
const WAIT_LIMIT: Duration = Duration::from_secs(30);

/// One partition running one transaction at a time: every movement shares one queue and the
/// next batch is exactly what queued while the previous one ran.
fn single_partition(db: &TestDb, queue_capacity: usize) -> Ledger {
    let config = BatchedConfig {
        partitions: 1,
        in_flight: 1,
        queue_capacity,
        ..BatchedConfig::default()
    };
    Ledger::serving(db.store(), TransferStrategy::Batched, &config)
}

async fn open(ledger: &Ledger, accounts: &[(i64, i64)]) {
    for &(id, balance) in accounts {
        ledger.open_account(acc(id), balance).await.expect("open");
    }
}

async fn balance(ledger: &Ledger, n: i64) -> i64 {
    ledger.account(acc(n)).await.expect("account").balance
}

async fn assert_ledger_clean(db: &TestDb) {
    let divergences = ledger_divergences(&db.store()).await;
    assert!(divergences.is_empty(), "ledger audit found {divergences:?}");
}

const LOCK_ACCOUNTS: &str = "SELECT 1 FROM accounts WHERE id = ANY($1) ORDER BY id FOR UPDATE";
/// Citus refuses a `FOR UPDATE` over shards: one account per statement, in ascending id.
const LOCK_ACCOUNT: &str = "SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE";

/// A second session holding these accounts' rows until released.
async fn lock_rows(db: &TestDb, ids: &[i64]) -> RowLock {
    match db.layout {
        saldo::db::Layout::Single => RowLock::take(db, LOCK_ACCOUNTS, ids).await,
        saldo::db::Layout::Citus => {
            let mut ids = ids.to_vec();
            ids.sort_unstable();
            RowLock::take_each(db, LOCK_ACCOUNT, &ids).await
        }
    }
}

/// Waits (bounded) until exactly `n` movements are queued.
async fn until_queued(ledger: &Ledger, n: usize) {
    let started = std::time::Instant::now();
    while ledger.engine().queued() != n {
        assert!(started.elapsed() < WAIT_LIMIT, "queue never reached {n}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

type Answer = tokio::task::JoinHandle<Result<Transfer, Error>>;

/// A movement of the ledger's served kind: `from` 0 is a deposit, `to` 0 a withdrawal.
fn spawn_move(ledger: &Ledger, id: &str, from: i64, to: i64, n: i64) -> Answer {
    let ledger = ledger.clone();
    let id = tid(id);
    tokio::spawn(async move {
        match (from, to) {
            (0, to) => ledger.deposit(id, acc(to), amount(n)).await,
            (from, 0) => ledger.withdraw(id, acc(from), amount(n)).await,
            (from, to) => {
                let request = TransferRequest {
                    id,
                    from: acc(from),
                    to: acc(to),
                    amount: amount(n),
                    tags: Default::default(),
                };
                ledger.transfer(TransferStrategy::Batched, &request).await
            }
        }
    })
}

/// Blocks the only slot on `blocked` (an account held by a second session), queues `next` in
/// order, then lets go: `next` becomes one batch in exactly that order.
async fn one_batch_of(
    db: &TestDb,
    ledger: &Ledger,
    blocked: (i64, i64),
    next: &[(&str, i64, i64, i64)],
) -> Vec<Result<Transfer, Error>> {
    let lock = lock_rows(db, &[blocked.0]).await;
    let first = spawn_move(ledger, "blocked", blocked.0, blocked.1, 1);
    db.until_lock_waiter().await;
    let mut answers = Vec::new();
    for (i, &(id, from, to, n)) in next.iter().enumerate() {
        answers.push(spawn_move(ledger, id, from, to, n));
        until_queued(ledger, i + 1).await;
    }
    let before = ledger.engine().stats();
    lock.release().await;
    first.await.expect("join").expect("the blocked movement");
    let mut out = Vec::new();
    for a in answers {
        out.push(a.await.expect("join"));
    }
    let after = ledger.engine().stats();
    // The blocked movement alone, then the batch we built, whole.
    assert_eq!(after.batches, before.batches + 2, "{after:?}");
    assert_eq!(after.largest_batch, next.len() as u64, "{after:?}");
    assert_eq!(after.fallbacks, 0, "{after:?}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_bad_transfer_never_fails_its_batch_mates() {
    let db = test_db().await;
    let ledger = single_partition(&db, 64);
    open(&ledger, &[(1, 100), (2, 0), (3, 10), (4, 0)]).await;
    // Committed before the batch: a replay across batches.
    ledger
        .transfer(TransferStrategy::Batched, &request("earlier", 3, 4, 5))
        .await
        .expect("earlier");
    let answers = one_batch_of(
        &db,
        &ledger,
        (3, 4),
        &[
            ("a", 1, 2, 60),
            ("b", 1, 2, 60), // 40 left: refused, nothing of it written
            ("c", 2, 1, 10),
            ("a", 1, 2, 60), // a replay of "a", inside the batch
            ("a", 1, 2, 61), // the same id with another payload
            ("earlier", 3, 4, 5),
            ("d", 1, 9, 1),  // unknown account
            ("e", 0, 2, 7),  // a deposit: the system account is a batch-mate too
            ("f", 1, 0, 3),  // a withdrawal
            ("g", 1, 2, 47), // 47 left after a, c and f: exactly enough
        ],
    )
    .await;
    let mut answers = answers.into_iter();
    let mut next = || answers.next().expect("an answer");
    let a = next().expect("a");
    assert!(!a.replayed);
    match next() {
        Err(Error::InsufficientFunds {
            account,
            requested,
            balance,
            held,
            ..
        }) => assert_eq!((account, requested, balance, held), (acc(1), 60, 40, 0)),
        other => panic!("b: expected insufficient funds, got {other:?}"),
    }
    assert!(!next().expect("c").replayed);
    let replay = next().expect("a again");
    assert!(replay.replayed);
    assert_eq!((replay.amount, replay.created_at), (a.amount, a.created_at));
    assert!(matches!(next(), Err(Error::TransferConflict(id)) if id == tid("a")));
    assert!(next().expect("earlier again").replayed);
    assert!(matches!(next(), Err(Error::UnknownAccount(id)) if id == acc(9)));
    assert!(!next().expect("e").replayed);
    assert!(!next().expect("f").replayed);
    assert!(!next().expect("g").replayed);

    assert_eq!(balance(&ledger, 1).await, 0);
    assert_eq!(balance(&ledger, 2).await, 60 - 10 + 7 + 47);
    assert_eq!(balance(&ledger, 3).await, 10 - 5 - 1);
    let journalled = ledger.transfers_of(acc(1), 100).await.expect("list");
    let mut ids: Vec<&str> = journalled.iter().map(|t| t.id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["a", "c", "f", "g", "opening:1"]);
    assert_ledger_clean(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deposits_meet_on_the_system_account_in_one_batch() {
    let db = test_db().await;
    let ledger = single_partition(&db, 256);
    open(&ledger, &[(1, 0), (2, 0), (3, 0)]).await;
    let lock = lock_rows(&db, &[0]).await;
    let first = spawn_move(&ledger, "first", 0, 1, 1);
    db.until_lock_waiter().await;
    let mut answers = Vec::new();
    for i in 0..100i64 {
        let to = 1 + i % 3;
        answers.push(spawn_move(&ledger, &format!("dep-{i}"), 0, to, 1 + i));
    }
    until_queued(&ledger, 100).await;
    let before = ledger.engine().stats();
    lock.release().await;
    first.await.expect("join").expect("first deposit");
    for a in answers {
        assert!(!a.await.expect("join").expect("deposit").replayed);
    }
    let after = ledger.engine().stats();
    // However the worker split the queue, the 100 deposits took far fewer transactions.
    assert_eq!(after.orders, before.orders + 101);
    assert!(
        after.batches - before.batches <= 1 + 100 / 2,
        "batches: {before:?} → {after:?}"
    );
    let total: i64 = (0..100i64).map(|i| 1 + i).sum::<i64>() + 1;
    let sum = balance(&ledger, 1).await + balance(&ledger, 2).await + balance(&ledger, 3).await;
    assert_eq!(sum, total);
    let system = ledger.account(AccountId::SYSTEM).await.expect("system");
    assert_eq!(system.balance, -total);
    assert_ledger_clean(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_queue_answers_overloaded_at_once() {
    let db = test_db().await;
    let config = BatchedConfig {
        partitions: 1,
        queue_capacity: 1,
        ..BatchedConfig::default()
    };
    let ledger = Ledger::serving(db.store(), TransferStrategy::Batched, &config);
    open(&ledger, &[(1, 100), (2, 0)]).await;
    let lock = lock_rows(&db, &[1]).await;
    let mut set = tokio::task::JoinSet::new();
    for i in 0..10 {
        let ledger = ledger.clone();
        let request = request(&format!("t-{i}"), 1, 2, 1);
        set.spawn(async move { ledger.transfer(TransferStrategy::Batched, &request).await });
    }
    // One transfer runs alone (blocked on the row), one waits in the only queue slot: the other
    // eight must come back while the row is still held.
    let mut overloaded = 0;
    while overloaded < 8 {
        let answer = tokio::time::timeout(WAIT_LIMIT, set.join_next())
            .await
            .expect("overloaded answers come back without waiting")
            .expect("a task")
            .expect("join");
        match answer {
            Err(Error::Overloaded(_)) => overloaded += 1,
            other => panic!("only overloaded answers can come back now, got {other:?}"),
        }
    }
    lock.release().await;
    let mut moved = 0;
    while let Some(answer) = set.join_next().await {
        match answer.expect("join") {
            Ok(_) => moved += 1,
            Err(Error::Overloaded(_)) => {}
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert!((1..=2).contains(&moved));
    assert_eq!(balance(&ledger, 1).await, 100 - moved);
    assert_eq!(balance(&ledger, 2).await, moved);
    assert_ledger_clean(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queued_transfer_past_its_deadline_is_never_applied() {
    let db = test_db().await;
    let ledger = single_partition(&db, 64);
    open(&ledger, &[(1, 100), (2, 0), (3, 10), (4, 0)]).await;
    let lock = lock_rows(&db, &[3]).await;
    let first = spawn_move(&ledger, "blocked", 3, 4, 1);
    db.until_lock_waiter().await;
    let late = {
        let ledger = ledger.clone();
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + Duration::from_millis(200);
            let request = request("late", 1, 2, 5);
            saldo::deadline::within(
                deadline,
                ledger.transfer(TransferStrategy::Batched, &request),
            )
            .await
        })
    };
    let answer = late.await.expect("join");
    assert!(
        matches!(answer, Err(Error::DeadlineExceeded { .. })),
        "{answer:?}"
    );
    lock.release().await;
    first.await.expect("join").expect("blocked movement");
    // Not applied means not applied: nothing moved, nothing journalled, and the id is free.
    assert_eq!(balance(&ledger, 1).await, 100);
    let again = ledger
        .transfer(TransferStrategy::Batched, &request("late", 1, 2, 5))
        .await
        .expect("the same id, now on time");
    assert!(!again.replayed);
    assert_ledger_clean(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_engines_on_one_database_move_every_cent_once() {
    let db = test_db().await;
    let a = Ledger::serving(
        db.store(),
        TransferStrategy::Batched,
        &BatchedConfig::default(),
    );
    let b = Ledger::serving(
        saldo::stock::Store::new(db.new_pool(8), db.tx.clone()).with_layout(db.layout),
        TransferStrategy::Batched,
        &BatchedConfig::default(),
    );
    open(&a, &[(1, 1_000), (2, 1_000)]).await;
    let mut set = tokio::task::JoinSet::new();
    for i in 0..200 {
        // Every id is sent through both engines: each applies once, the other copy replays.
        let (from, to) = if i % 2 == 0 { (1, 2) } else { (2, 1) };
        for ledger in [a.clone(), b.clone()] {
            let request = request(&format!("x-{i}"), from, to, 3);
            set.spawn(async move { ledger.transfer(TransferStrategy::Batched, &request).await });
        }
    }
    let (mut applied, mut replayed) = (0, 0);
    while let Some(answer) = set.join_next().await {
        match answer.expect("join") {
            Ok(t) if t.replayed => replayed += 1,
            Ok(_) => applied += 1,
            Err(e) => panic!("no movement may fail: {e}"),
        }
    }
    assert_eq!((applied, replayed), (200, 200));
    assert_eq!(balance(&a, 1).await, 1_000);
    assert_eq!(balance(&a, 2).await, 1_000);
    assert_ledger_clean(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holds_posts_and_voids_share_a_batch_and_one_settle_wins() {
    use saldo::domain::TransferTimeout;
    let db = test_db().await;
    let ledger = single_partition(&db, 64);
    open(&ledger, &[(1, 100), (2, 0), (3, 10), (4, 0)]).await;
    let timeout = TransferTimeout::default();
    let held = ledger
        .hold(&request("h0", 1, 2, 20), timeout)
        .await
        .expect("h0 held before the batch");
    assert_eq!(held.status, saldo::domain::TransferStatus::Pending);

    let lock = lock_rows(&db, &[3]).await;
    let first = spawn_move(&ledger, "blocked", 3, 4, 1);
    db.until_lock_waiter().await;
    let mut answers: Vec<Answer> = Vec::new();
    let ops: Vec<Box<dyn Fn(Ledger) -> Answer>> = vec![
        // Post and void of the same hold race inside the batch: the first in line wins.
        Box::new(|l| tokio::spawn(async move { l.post(&tid("h0"), None).await })),
        Box::new(|l| tokio::spawn(async move { l.void(&tid("h0")).await })),
        Box::new(move |l| {
            tokio::spawn(async move { l.hold(&request("h1", 1, 2, 70), timeout).await })
        }),
        // 100 - 20 posted - 70 held: 10 available.
        Box::new(move |l| {
            tokio::spawn(async move { l.hold(&request("h2", 1, 2, 11), timeout).await })
        }),
        Box::new(|l| tokio::spawn(async move { l.void(&tid("h1")).await })),
        Box::new(move |l| {
            tokio::spawn(async move { l.hold(&request("h2", 1, 2, 11), timeout).await })
        }),
        Box::new(|l| tokio::spawn(async move { l.post(&tid("h2"), Some(amount(5))).await })),
    ];
    for (i, op) in ops.iter().enumerate() {
        answers.push(op(ledger.clone()));
        until_queued(&ledger, i + 1).await;
    }
    let before = ledger.engine().stats();
    lock.release().await;
    first.await.expect("join").expect("the blocked movement");
    let mut out = Vec::new();
    for a in answers {
        out.push(a.await.expect("join"));
    }
    let after = ledger.engine().stats();
    assert_eq!(after.batches, before.batches + 2, "{after:?}");
    assert_eq!(after.largest_batch, ops.len() as u64, "{after:?}");

    use saldo::domain::TransferStatus as S;
    let mut out = out.into_iter();
    let mut next = || out.next().expect("an answer");
    let posted = next().expect("post h0");
    assert_eq!((posted.status, posted.posted_amount), (S::Posted, Some(20)));
    assert!(!posted.replayed);
    assert!(matches!(
        next(),
        Err(Error::TransferNotPending {
            status: S::Posted,
            ..
        })
    ));
    assert_eq!(next().expect("hold h1").status, S::Pending);
    assert!(matches!(
        next(),
        Err(Error::InsufficientFunds { held: 70, .. })
    ));
    assert_eq!(next().expect("void h1").status, S::Voided);
    assert_eq!(next().expect("hold h2 once h1 is void").status, S::Pending);
    let partial = next().expect("post 5 of h2");
    assert_eq!(
        (partial.status, partial.posted_amount),
        (S::Posted, Some(5))
    );

    let one = ledger.account(acc(1)).await.expect("account 1");
    assert_eq!(one.balance, 100 - 20 - 5);
    assert_eq!(ledger.account(acc(2)).await.expect("2").balance, 25);
    assert_ledger_clean(&db).await;
}
