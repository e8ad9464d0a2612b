//! The naive transfer on Citus: debit then credit in the caller's order, each UPDATE
//! routed to its account's shard, between two accounts proven to live on different workers.
//! Crossed transfers then wait on each other across nodes; Citus's distributed deadlock
//! detector aborts one side with 40P01, and without the retry that 40P01 reaches the caller.
//! Money is still conserved and the journal (both sides and the router, written by the
//! ledger) audits clean: the only defect naive shows is the deadlock. The ordered strategy's
//! side of the same race (no 40P01 at all) is in saldo's tests/citus_ledger.rs.

use saldo::domain::AccountId;
use saldo::ledger::Ledger;
use saldo::retry::RetryPolicy;
use saldo::stock::Store;
use saldo::Error;
use saldo_lab::race::transfers::{crossed_between, OPENING_BALANCE};
use saldo_lab::testing::{accounts_on_two_workers, citus_db, ledger_divergences, worker_of};
use saldo_lab::LabTransfer;

/// Crossed transfers per round (half each way).
const CROSSED: u32 = 60;
/// Rounds at most, each on a fresh database, until one shows a deadlock.
const ROUNDS: usize = 3;
/// Two transactions at a time, the crossed-transfers timeline (see saldo-lab's naive_ledger.rs):
/// enough for every crossing to be a possible cycle, few enough that each deadlock is cheap.
const POOL: usize = 2;

fn acc(n: i64) -> AccountId {
    AccountId::new(n).expect("account")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crossed_naive_transfers_across_workers_deadlock_and_reach_the_caller() {
    let mut deadlocks = 0;
    for _ in 0..ROUNDS {
        let db = citus_db().await;
        let (a, b) = accounts_on_two_workers(&db).await;
        assert_ne!(
            worker_of(&db, saldo::ops::DistributedBy::Account, a).await,
            worker_of(&db, saldo::ops::DistributedBy::Account, b).await
        );
        let tx = db.tx.clone().with_retry(RetryPolicy::none());
        let store = Store::new(db.new_pool(POOL), tx).with_layout(db.layout);
        let ledger = Ledger::new(store);
        let answers = crossed_between(&ledger, LabTransfer::Naive, (acc(a), acc(b)), CROSSED, "n")
            .await
            .expect("the race ran");
        let errors: Vec<&Error> = answers.iter().filter_map(|r| r.as_ref().err()).collect();
        let round = errors
            .iter()
            .filter(|e| e.sqlstate().map(|s| s.code()) == Some("40P01"))
            .count();
        // Every failure is the deadlock (nothing else goes wrong with naive here).
        assert_eq!(round, errors.len(), "{errors:?}");
        // Conserved whatever failed: a deadlock victim rolled back whole.
        let total = ledger.account(acc(a)).await.expect("a").balance
            + ledger.account(acc(b)).await.expect("b").balance;
        assert_eq!(total, 2 * OPENING_BALANCE);
        let divergences = ledger_divergences(ledger.store()).await;
        assert!(divergences.is_empty(), "Citus audit found {divergences:?}");
        deadlocks += round;
        if deadlocks > 0 {
            break;
        }
    }
    assert!(
        deadlocks > 0,
        "the naive race across workers produced no 40P01 in {ROUNDS} rounds: the test cannot fail"
    );
}
