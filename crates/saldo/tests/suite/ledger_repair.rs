//! The ledger repair: accounts whose counters drifted from their journal are planned, then
//! written under their lock with an `account_repairs` row; what no write can fix (a journal
//! that puts an account outside its limits) is reported with why and left alone; an account
//! that drifts again between the plan and the lock is left alone; and the stock repair, which
//! the service and the CLI run, repairs and reports the ledger too, saying "nothing remaining"
//! only when the whole audit is clean. On one node and (rerun by `tests/citus.rs`) on Citus,
//! where each account is read and written on its own shard.

use saldo::audit::{audit_ledger_of, Finding};
use saldo::domain::TransferTimeout;
use saldo::ledger::repair::{self, AccountAction};
use saldo::ledger::{Counters, Ledger};
use saldo::stock::batched::BatchedConfig;

use super::harness::{test_db, TestDb, TRANSFER};
use super::ledger::{acc, request, tid};

/// Accounts 1 (100), 2 (50) and 3 (0); a posted transfer `t` of 20 from 1 to 2 and a hold `h`
/// of 30 from 2 to 3.
async fn books(db: &TestDb) -> Ledger {
    let ledger = Ledger::serving(db.store(), TRANSFER, &BatchedConfig::default());
    for (n, opening) in [(1, 100), (2, 50), (3, 0)] {
        ledger.open_account(acc(n), opening).await.expect("open");
    }
    ledger
        .transfer(TRANSFER, &request("t", 1, 2, 20))
        .await
        .expect("transfer");
    let minute = TransferTimeout::from_secs(60).expect("timeout");
    ledger
        .hold(&request("h", 2, 3, 30), minute)
        .await
        .expect("hold");
    ledger
}

async fn raw(db: &TestDb, sql: &str) {
    let client = db.pool.get().await.expect("client");
    client.batch_execute(sql).await.expect("plant");
}

async fn counters(ledger: &Ledger, n: i64) -> Counters {
    let a = ledger.account(acc(n)).await.expect("account");
    Counters {
        balance: a.balance,
        held: a.held,
        pending_credits: a.pending_credits,
    }
}

fn c(balance: i64, held: i64, pending_credits: i64) -> Counters {
    Counters {
        balance,
        held,
        pending_credits,
    }
}

/// The trace rows: (account, reason), in the order written.
async fn repairs(db: &TestDb) -> Vec<(i64, String)> {
    let client = db.pool.get().await.expect("client");
    client
        .query(
            "SELECT account_id, reason FROM account_repairs ORDER BY repaired_at, account_id",
            &[],
        )
        .await
        .expect("repairs")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

async fn ledger_clean(db: &TestDb) -> bool {
    audit_ledger_of(&db.pool, db.layout)
        .await
        .expect("audit")
        .is_clean()
}

#[tokio::test]
async fn drifted_accounts_are_planned_then_brought_back_to_their_journal() {
    let db = test_db().await;
    let ledger = books(&db).await;
    assert!(ledger_clean(&db).await);
    raw(
        &db,
        "UPDATE accounts SET balance = balance + 7 WHERE id = 1; \
         UPDATE accounts SET held = held + 4 WHERE id = 2; \
         UPDATE accounts SET pending_credits = pending_credits + 2 WHERE id = 3",
    )
    .await;
    let store = db.store();
    let dry = repair::repair(&store, false).await.expect("dry run");
    let seen: Vec<_> = dry
        .accounts
        .iter()
        .map(|a| (a.account.get(), a.before, a.after, a.action))
        .collect();
    assert_eq!(
        seen,
        [
            (1, c(87, 0, 0), c(80, 0, 0), AccountAction::Planned),
            (2, c(70, 34, 0), c(70, 30, 0), AccountAction::Planned),
            (3, c(0, 0, 32), c(0, 0, 30), AccountAction::Planned),
        ]
    );
    assert!(dry.unrepairable.is_empty(), "{dry:?}");
    assert!(!dry.remaining.is_clean(), "the dry run changed nothing");
    assert_eq!(counters(&ledger, 1).await, c(87, 0, 0));
    assert!(repairs(&db).await.is_empty());

    let done = repair::repair(&store, true).await.expect("apply");
    assert!(
        done.accounts
            .iter()
            .all(|a| a.action == AccountAction::Applied),
        "{done:?}"
    );
    assert!(done.remaining.is_clean(), "{:?}", done.remaining);
    assert!(ledger_clean(&db).await);
    for (n, expected) in [(1, c(80, 0, 0)), (2, c(70, 30, 0)), (3, c(0, 0, 30))] {
        assert_eq!(counters(&ledger, n).await, expected, "account {n}");
    }
    let trace = repairs(&db).await;
    assert_eq!(trace.len(), 3);
    assert!(trace.contains(&(
        1,
        "repair: balance 87 -> 80, held 0 -> 0, pending credits 0 -> 0 (journal)".to_owned()
    )));
    // The ledger carries on from the repaired counters: the hold posts, and nothing is left.
    ledger.post(&tid("h"), None).await.expect("post");
    assert_eq!(counters(&ledger, 3).await, c(30, 0, 0));
    assert!(ledger_clean(&db).await);
    assert!(repair::plan(&store)
        .await
        .expect("plan")
        .accounts
        .is_empty());
}

#[tokio::test]
async fn a_journal_outside_an_accounts_limits_is_reported_not_written() {
    let db = test_db().await;
    let ledger = books(&db).await;
    // The journal changed behind the ledger's back: transfer `t` now says 200, which account 1
    // (100, no overdraft) cannot have sent.
    raw(&db, "UPDATE transfers SET amount = 200 WHERE id = 't'").await;
    let report = repair::repair(&db.store(), true).await.expect("repair");
    let one = report
        .accounts
        .iter()
        .find(|a| a.account == acc(1))
        .expect("account 1");
    assert_eq!(one.action, AccountAction::Unrepairable);
    let why = one.reason.clone().expect("why");
    assert!(
        why.contains("below its minimum") && why.contains("saldo audit"),
        "{why}"
    );
    assert_eq!(counters(&ledger, 1).await, c(80, 0, 0), "not written");
    // Account 2 can take what the journal says it received: repaired.
    let two = report
        .accounts
        .iter()
        .find(|a| a.account == acc(2))
        .expect("account 2");
    assert_eq!(
        (two.action, two.after),
        (AccountAction::Applied, c(250, 30, 0))
    );
    assert!(!report.remaining.is_clean());
    assert_eq!(repairs(&db).await.len(), 1);
}

#[tokio::test]
async fn an_account_that_drifts_again_during_the_repair_is_left_alone() {
    let db = test_db().await;
    let ledger = books(&db).await;
    raw(
        &db,
        "UPDATE accounts SET balance = balance + 1 WHERE id IN (1, 3)",
    )
    .await;
    let store = db.store();
    let plan = repair::plan(&store).await.expect("plan");
    assert_eq!(plan.accounts.len(), 2);
    raw(
        &db,
        "UPDATE accounts SET balance = balance + 1 WHERE id = 1",
    )
    .await;
    let applied = repair::apply(&store, &plan.accounts).await.expect("apply");
    assert_eq!(
        applied.iter().map(|a| a.action).collect::<Vec<_>>(),
        [AccountAction::Changed, AccountAction::Applied]
    );
    assert_eq!(counters(&ledger, 1).await, c(82, 0, 0), "left alone");
    assert_eq!(counters(&ledger, 3).await, c(0, 0, 30));
    let again = repair::repair(&store, true).await.expect("repair");
    assert!(again.remaining.is_clean(), "{again:?}");
}

/// The repair the service and the CLI run (`stock::repair::repair`) repairs the ledger too and
/// lists its divergences as remaining until they are gone: "nothing remaining" means the whole
/// audit is clean.
#[tokio::test]
async fn the_repair_reports_and_repairs_the_ledger_with_the_stock() {
    let db = test_db().await;
    let ledger = books(&db).await;
    raw(
        &db,
        "UPDATE accounts SET balance = balance - 5 WHERE id = 2",
    )
    .await;
    let store = db.store();
    let dry = saldo::stock::repair::repair(&store, false)
        .await
        .expect("dry run");
    assert!(dry.products.is_empty());
    assert_eq!(dry.ledger.accounts.len(), 1);
    assert!(
        dry.remaining
            .iter()
            .any(|f| matches!(f, Finding::Ledger(d) if d.account == Some(acc(2)))),
        "{:?}",
        dry.remaining
    );
    let done = saldo::stock::repair::repair(&store, true)
        .await
        .expect("apply");
    assert_eq!(done.ledger.accounts[0].action, AccountAction::Applied);
    assert!(done.remaining.is_empty(), "{:?}", done.remaining);
    assert!(ledger_clean(&db).await);
    assert_eq!(counters(&ledger, 2).await, c(70, 30, 0));
}
