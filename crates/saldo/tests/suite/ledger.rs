//! The ledger's scenarios: crossed transfers with the ordered strategy (no failure),
//! idempotent replays, every typed refusal, and the ledger audit after each scenario. The
//! refusal and replay checks run against the lab's naive strategy too (`saldo_lab::LabTransfer`,
//! a dev-dependency); the naive deadlock demonstrations are `saldo-lab`'s
//! `tests/suite/naive_ledger.rs`.

use saldo::audit::{audit_ledger, LedgerDivergence, LedgerInvariant};
use saldo::domain::{AccountId, Amount, TransferId, MAX_AMOUNT};
use saldo::ledger::{Ledger, Transfer, TransferKind, TransferRequest};
use saldo::retry::{TxOptions, TxStats};
use saldo::stock::batched::BatchedConfig;
use saldo::stock::Store;
use saldo::{Error, InputError};
use saldo_lab::race::transfers::{crossed_between, second_account, OPENING_BALANCE as OPENING};
use saldo_lab::testing::ledger_divergences;
use saldo_lab::LabTransfer;

use super::harness::{test_db, TestDb, TRANSFER};

pub(crate) fn acc(n: i64) -> AccountId {
    AccountId::new(n).expect("account id")
}

pub(crate) fn tid(s: &str) -> TransferId {
    TransferId::new(s).expect("transfer id")
}

pub(crate) fn amount(n: i64) -> Amount {
    Amount::new(n).expect("amount")
}

pub(crate) fn request(id: &str, from: i64, to: i64, n: i64) -> TransferRequest {
    TransferRequest {
        id: tid(id),
        from: acc(from),
        to: acc(to),
        amount: amount(n),
        tags: Default::default(),
    }
}

/// A ledger serving this binary's transfer strategy (`harness::TRANSFER`) for deposits and
/// withdrawals too.
fn ledger_with(db: &TestDb, tx: TxOptions) -> Ledger {
    let store = Store::new(db.pool.clone(), tx).with_layout(db.layout);
    Ledger::serving(store, TRANSFER, &BatchedConfig::default())
}

async fn assert_ledger_clean(db: &TestDb) {
    let divergences = ledger_divergences(&db.store()).await;
    assert!(divergences.is_empty(), "ledger audit found {divergences:?}");
}

async fn balance(ledger: &Ledger, n: i64) -> i64 {
    ledger.account(acc(n)).await.expect("account").balance
}

#[tokio::test]
async fn open_deposit_withdraw_transfer_and_list() {
    let db = test_db().await;
    let ledger = ledger_with(&db, db.tx.clone());
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
        .transfer(TRANSFER, &request("t1", 1, 2, 300))
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

/// The crossed-transfers race: transfers each way, all fired at once. Fewer on Citus, where
/// each one commits by 2PC across two workers (two orders of magnitude slower on a shared
/// 2-core machine): still more than the pool's connections, so they queue on both rows in both
/// orders.
const CROSSED_EACH_WAY: usize = if super::harness::CITUS { 30 } else { 100 };

/// What the crossed race left behind.
struct Crossed {
    /// The two accounts it crossed: 1 and 2 on one node; on Citus, 1 and the first account on
    /// the other worker (`saldo_lab::race::transfers::second_account`).
    accounts: (i64, i64),
    ok: usize,
    errors: Vec<Error>,
}

/// The crossed transfers on a fresh ledger (`saldo_lab::race::transfers::crossed`).
async fn crossed_transfers(ledger: &Ledger, strategy: LabTransfer) -> Crossed {
    let second = second_account(ledger).await.expect("second account");
    let answers = crossed_between(
        ledger,
        strategy,
        (acc(1), acc(second)),
        2 * CROSSED_EACH_WAY as u32,
        "x",
    )
    .await
    .expect("the race ran");
    let mut out = Crossed {
        accounts: (1, second),
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

async fn assert_total_unchanged(ledger: &Ledger, (a, b): (i64, i64)) {
    let total = balance(ledger, a).await + balance(ledger, b).await;
    let system = ledger.account(AccountId::SYSTEM).await.expect("system");
    assert_eq!(total, 2 * OPENING);
    assert_eq!(total + system.balance, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crossed_transfers_of_the_served_strategy_never_fail() {
    let db = test_db().await;
    let stats = TxStats::new();
    let ledger = ledger_with(&db, db.tx.clone().with_stats(stats.clone()));
    let crossed = crossed_transfers(&ledger, LabTransfer::from(TRANSFER)).await;
    let codes: Vec<String> = crossed.errors.iter().map(ToString::to_string).collect();
    assert_eq!(crossed.ok, 2 * CROSSED_EACH_WAY, "failures: {codes:?}");
    // Same number each way: each balance is back exactly where it started.
    let (a, b) = crossed.accounts;
    assert_eq!(balance(&ledger, a).await, OPENING);
    assert_eq!(balance(&ledger, b).await, OPENING);
    assert_total_unchanged(&ledger, crossed.accounts).await;
    assert_eq!(
        stats.deadlock_retries(),
        0,
        "{TRANSFER}: locking in id order cannot deadlock"
    );
    assert_ledger_clean(&db).await;
}

#[tokio::test]
async fn insufficient_funds_is_refused_once_and_never_retried() {
    let db = test_db().await;
    let stats = TxStats::new();
    let ledger = ledger_with(&db, db.tx.clone().with_stats(stats.clone()));
    ledger.open_account(acc(1), 100).await.expect("open 1");
    ledger.open_account(acc(2), 0).await.expect("open 2");
    for strategy in LabTransfer::ALL {
        let before = stats.attempts();
        let refused = strategy
            .transfer(&ledger, &request("too-much", 1, 2, 101))
            .await;
        match refused {
            Err(Error::InsufficientFunds {
                account,
                requested,
                balance,
                ..
            }) => assert_eq!((account, requested, balance), (acc(1), 101, 100)),
            other => panic!("{strategy}: expected insufficient funds, got {other:?}"),
        }
        assert_eq!(
            stats.attempts() - before,
            1,
            "{strategy}: a refusal was retried"
        );
    }
    let before = stats.attempts();
    assert!(matches!(
        ledger.withdraw(tid("w-too-much"), acc(2), amount(1)).await,
        Err(Error::InsufficientFunds { balance: 0, .. })
    ));
    assert_eq!(stats.attempts() - before, 1);
    assert_eq!(stats.retries(), 0);
    assert_eq!(balance(&ledger, 1).await, 100);
    assert_eq!(balance(&ledger, 2).await, 0);
    // A refused transfer journals nothing: its id is still free, and exactly the balance works.
    let t = ledger
        .transfer(TRANSFER, &request("too-much", 1, 2, 100))
        .await
        .expect("the whole balance");
    assert!(!t.replayed);
    assert_eq!(balance(&ledger, 1).await, 0);
    assert_ledger_clean(&db).await;
}

/// Copies of one transfer id fired at once (fewer on Citus, as for the crossed race).
const REPLAY_COPIES: usize = if super::harness::CITUS { 10 } else { 20 };

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn simultaneous_replays_apply_once() {
    let db = test_db().await;
    let ledger = ledger_with(&db, db.tx.clone());
    ledger.open_account(acc(1), 1_000).await.expect("open 1");
    ledger.open_account(acc(2), 0).await.expect("open 2");
    for strategy in LabTransfer::ALL {
        let id = format!("dup-{strategy}");
        let mut tasks = Vec::new();
        for _ in 0..REPLAY_COPIES {
            let ledger = ledger.clone();
            let req = request(&id, 1, 2, 100);
            tasks.push(tokio::spawn(async move {
                strategy.transfer(&ledger, &req).await
            }));
        }
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.expect("join").expect("every copy succeeds"));
        }
        let applied = results.iter().filter(|t| !t.replayed).count();
        assert_eq!(applied, 1, "{strategy}: applied {applied} times");
        // Every copy answers the original result.
        let original = results.iter().find(|t| !t.replayed).expect("original");
        for t in &results {
            assert_eq!(
                (&t.id, t.from, t.to, t.amount, t.created_at),
                (
                    &original.id,
                    original.from,
                    original.to,
                    original.amount,
                    original.created_at
                )
            );
        }
    }
    // The same for deposits and withdrawals, which share the path.
    let mut tasks = Vec::new();
    for i in 0..REPLAY_COPIES {
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                ledger.deposit(tid("dep"), acc(2), amount(7)).await
            } else {
                ledger.withdraw(tid("wd"), acc(1), amount(3)).await
            }
        }));
    }
    let mut applied = 0;
    for t in tasks {
        applied += usize::from(!t.await.expect("join").expect("copy").replayed);
    }
    assert_eq!(applied, 2);
    let moved = 100 * LabTransfer::ALL.len() as i64;
    assert_eq!(balance(&ledger, 1).await, 1_000 - moved - 3);
    assert_eq!(balance(&ledger, 2).await, moved + 7);
    // Journal: one row per id.
    assert_eq!(
        ledger.transfers_of(acc(2), 100).await.expect("list").len(),
        LabTransfer::ALL.len() + 1
    );
    assert_ledger_clean(&db).await;
}

#[tokio::test]
async fn same_id_with_another_payload_conflicts() {
    let db = test_db().await;
    let ledger = ledger_with(&db, db.tx.clone());
    ledger.open_account(acc(1), 1_000).await.expect("open 1");
    ledger.open_account(acc(2), 1_000).await.expect("open 2");
    let first = ledger
        .transfer(TRANSFER, &request("t", 1, 2, 100))
        .await
        .expect("first");
    let replay = LabTransfer::Naive
        .transfer(&ledger, &request("t", 1, 2, 100))
        .await
        .expect("replay");
    assert!(replay.replayed);
    assert_eq!(
        Transfer {
            replayed: false,
            ..replay
        },
        first
    );
    for other in [request("t", 1, 2, 101), request("t", 2, 1, 100)] {
        let result = ledger.transfer(TRANSFER, &other).await;
        assert!(
            matches!(&result, Err(Error::TransferConflict(id)) if id.as_str() == "t"),
            "{other:?}: {result:?}"
        );
    }
    assert!(matches!(
        ledger.deposit(tid("t"), acc(2), amount(100)).await,
        Err(Error::TransferConflict(_))
    ));
    assert_eq!(balance(&ledger, 1).await, 900);
    assert_eq!(balance(&ledger, 2).await, 1_100);
    assert_ledger_clean(&db).await;
}

#[tokio::test]
async fn refusals_are_typed() {
    let db = test_db().await;
    let ledger = ledger_with(&db, db.tx.clone());
    ledger.open_account(acc(1), 500).await.expect("open 1");

    assert!(matches!(
        ledger.open_account(acc(1), 0).await,
        Err(Error::AccountExists(a)) if a == acc(1)
    ));
    for bad in [-1, MAX_AMOUNT + 1] {
        assert!(matches!(
            ledger.open_account(acc(3), bad).await,
            Err(Error::Input(InputError::AmountOutOfRange { .. }))
        ));
    }
    assert!(matches!(
        ledger.open_account(AccountId::SYSTEM, 1).await,
        Err(Error::Input(InputError::AccountIdNotPositive(0)))
    ));
    for bad in [0, -5, MAX_AMOUNT + 1] {
        assert_eq!(
            Amount::new(bad),
            Err(InputError::AmountOutOfRange {
                amount: bad,
                max: MAX_AMOUNT
            })
        );
    }
    assert!(Amount::new(MAX_AMOUNT).is_ok());
    assert!(AccountId::new(0).is_err());
    assert!(TransferId::new("").is_err());

    for strategy in LabTransfer::ALL {
        for (from, to, unknown) in [(1, 9, 9), (9, 1, 9)] {
            let result = strategy.transfer(&ledger, &request("u", from, to, 1)).await;
            assert!(
                matches!(result, Err(Error::UnknownAccount(a)) if a == acc(unknown)),
                "{strategy} {from}->{to}: {result:?}"
            );
        }
        assert!(matches!(
            strategy.transfer(&ledger, &request("s", 1, 1, 1)).await,
            Err(Error::Input(InputError::SameAccount))
        ));
        let system = TransferRequest {
            from: AccountId::SYSTEM,
            ..request("sys", 1, 2, 1)
        };
        assert!(matches!(
            strategy.transfer(&ledger, &system).await,
            Err(Error::Input(InputError::AccountIdNotPositive(0)))
        ));
        assert!(matches!(
            strategy
                .transfer(&ledger, &request("opening:7", 1, 2, 1))
                .await,
            Err(Error::Input(InputError::TransferIdInvalid))
        ));
    }
    assert!(matches!(
        ledger.deposit(tid("d"), acc(9), amount(1)).await,
        Err(Error::UnknownAccount(a)) if a == acc(9)
    ));
    assert!(matches!(
        ledger.withdraw(tid("w"), acc(9), amount(1)).await,
        Err(Error::UnknownAccount(a)) if a == acc(9)
    ));
    assert!(matches!(
        ledger.account(acc(9)).await,
        Err(Error::UnknownAccount(_))
    ));
    assert!(matches!(
        ledger.transfers_of(acc(9), 10).await,
        Err(Error::UnknownAccount(_))
    ));
    // Limits are clamped, never refused.
    assert_eq!(ledger.transfers_of(acc(1), 0).await.expect("list").len(), 1);
    assert_eq!(
        ledger
            .transfers_of(acc(1), i64::MAX)
            .await
            .expect("list")
            .len(),
        1
    );
    // Nothing above moved money.
    assert_eq!(balance(&ledger, 1).await, 500);
    assert_ledger_clean(&db).await;
}

#[tokio::test]
async fn audit_and_check_catch_writes_behind_the_ledgers_back() {
    let db = test_db().await;
    if db.layout == saldo::db::Layout::Citus {
        // The single node's audit and its global divergences (TotalIsZero); the Citus audit
        // has no global sum and catches the same write per account: tests/citus/audit.rs.
        return;
    }
    let ledger = ledger_with(&db, db.tx.clone());
    ledger.open_account(acc(1), 500).await.expect("open 1");
    let client = db.pool.get().await.expect("client");
    // The last line of defence: no customer balance below zero, whatever the code path.
    let negative = client
        .execute("UPDATE accounts SET balance = -1 WHERE id = 1", &[])
        .await
        .expect_err("CHECK must refuse");
    assert_eq!(negative.code().map(|c| c.code()), Some("23514"));
    client
        .execute(
            "UPDATE accounts SET balance = balance + 5 WHERE id = 1",
            &[],
        )
        .await
        .expect("a write that skips the journal");
    let divergences = audit_ledger(&db.pool).await.expect("audit");
    assert_eq!(
        divergences,
        [
            LedgerDivergence {
                account: None,
                invariant: LedgerInvariant::TotalIsZero,
                expected: 0,
                actual: 5,
                currency: None,
                transfer: None,
            },
            // The account's currency, on its own, is off by as much.
            LedgerDivergence {
                account: None,
                invariant: LedgerInvariant::CurrencyTotalIsZero,
                expected: 0,
                actual: 5,
                currency: Some(saldo::ledger::Currency::DEFAULT),
                transfer: None,
            },
            LedgerDivergence {
                account: Some(acc(1)),
                invariant: LedgerInvariant::BalanceMatchesJournal,
                expected: 500,
                actual: 505,
                currency: None,
                transfer: None,
            },
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn simultaneous_openings_of_one_account_open_it_once() {
    let db = test_db().await;
    let ledger = ledger_with(&db, db.tx.clone());
    let mut tasks = Vec::new();
    for _ in 0..REPLAY_COPIES {
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            ledger.open_account(acc(5), 250).await
        }));
    }
    let mut opened = 0;
    for t in tasks {
        match t.await.expect("join") {
            Ok(a) => {
                assert_eq!(a.balance, 250);
                opened += 1;
            }
            Err(Error::AccountExists(a)) => assert_eq!(a, acc(5)),
            Err(e) => panic!("unexpected: {e}"),
        }
    }
    assert_eq!(opened, 1);
    assert_eq!(balance(&ledger, 5).await, 250);
    let history = ledger.transfers_of(acc(5), 10).await.expect("history");
    assert_eq!(history.len(), 1);
    assert_eq!(
        (history[0].kind, history[0].from, history[0].amount),
        (TransferKind::Opening, AccountId::SYSTEM, 250)
    );
    assert_ledger_clean(&db).await;
}

/// Regression: a movement past `bigint` was PostgreSQL's 22003 (a 500 in the service); both
/// strategies now refuse it as [`Error::BalanceOutOfRange`] and write nothing.
#[tokio::test]
async fn movements_past_bigint_are_refused_typed() {
    let db = test_db().await;
    let ledger = ledger_with(&db, db.tx.clone());
    ledger.open_account(acc(1), 10).await.expect("open 1");
    ledger.open_account(acc(2), 0).await.expect("open 2");
    let client = db.pool.get().await.expect("connection");
    client
        .execute(
            "UPDATE accounts SET balance = $1 WHERE id = 2",
            &[&(i64::MAX - 1)],
        )
        .await
        .expect("edge");
    for strategy in LabTransfer::ALL {
        let result = strategy
            .transfer(&ledger, &request("t-edge", 1, 2, 2))
            .await;
        assert!(
            matches!(result, Err(Error::BalanceOutOfRange { account }) if account == acc(2)),
            "{strategy}: {result:?}"
        );
    }
    client
        .execute(
            "UPDATE accounts SET balance = $1 WHERE id = 0",
            &[&(i64::MIN + 1)],
        )
        .await
        .expect("edge");
    let result = ledger.deposit(tid("d-edge"), acc(1), amount(2)).await;
    assert!(
        matches!(result, Err(Error::BalanceOutOfRange { account }) if account == AccountId::SYSTEM),
        "{result:?}"
    );
    let result = ledger.open_account(acc(3), 2).await;
    assert!(
        matches!(result, Err(Error::BalanceOutOfRange { .. })),
        "{result:?}"
    );
    assert!(matches!(
        ledger.account(acc(3)).await,
        Err(Error::UnknownAccount(_))
    ));
    assert_eq!(balance(&ledger, 1).await, 10, "nothing moved");
}
