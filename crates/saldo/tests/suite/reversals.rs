//! Reversals through the library: full and partial reversals summing to what was posted, then
//! refused; every refusal (not posted, more than is left, the reverser's funds) with nothing
//! written; idempotent replays and conflicting ones; the original's counters, its list of
//! reversals and its events; and the race: concurrent reversals of one transfer never exceed
//! it (for the harness's strategy), where a naive check-then-write reversal does. Every
//! scenario ends with a clean audit.

use std::sync::Arc;

use saldo::domain::{Reference, Tags, TransferStatus, TransferTimeout};
use saldo::fixtures::make_holds_due;
use saldo::ledger::{Ledger, ReversalRequest, Transfer, TransferKind, TransferStrategy};
use saldo::stock::batched::BatchedConfig;
use saldo::Error;
use saldo_lab::testing::ledger_divergences;

use super::harness::{test_db, TestDb, TRANSFER};
use super::ledger::{acc, amount, request, tid};

async fn clean(db: &TestDb) {
    let divergences = ledger_divergences(&db.store()).await;
    assert!(divergences.is_empty(), "ledger audit found {divergences:?}");
}

fn reversal(id: &str, original: &str, n: Option<i64>) -> ReversalRequest {
    ReversalRequest {
        id: tid(id),
        original: tid(original),
        amount: n.map(amount),
        tags: Tags::default(),
    }
}

async fn balances(ledger: &Ledger) -> (i64, i64) {
    let a = ledger.account(acc(1)).await.expect("1").balance;
    let b = ledger.account(acc(2)).await.expect("2").balance;
    (a, b)
}

/// Rows of the journal and events: what a refusal must leave as it was.
async fn written(db: &TestDb) -> (i64, i64) {
    let client = db.pool.get().await.expect("client");
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM transfers), (SELECT count(*) FROM events)",
            &[],
        )
        .await
        .expect("count");
    (row.get(0), row.get(1))
}

/// Accounts 1 (1000) and 2 (0), and transfer `t` of `n` from 1 to 2.
async fn paid(db: &TestDb, n: i64) -> Ledger {
    let ledger = Ledger::serving(db.store(), TRANSFER, &BatchedConfig::default());
    ledger.open_account(acc(1), 1_000).await.expect("open 1");
    ledger.open_account(acc(2), 0).await.expect("open 2");
    ledger
        .transfer(TRANSFER, &request("t", 1, 2, n))
        .await
        .expect("transfer");
    ledger
}

#[tokio::test]
async fn partial_reversals_sum_to_the_posted_amount_then_are_refused() {
    let db = test_db().await;
    let ledger = paid(&db, 100).await;
    let r1 = ledger
        .reverse(&reversal("r1", "t", Some(30)))
        .await
        .expect("reverse 30");
    assert_eq!(
        (r1.kind, r1.from, r1.to, r1.amount, r1.status),
        (
            TransferKind::Reversal,
            acc(2),
            acc(1),
            30,
            TransferStatus::Posted
        )
    );
    assert_eq!((r1.reverses, r1.replayed), (Some(tid("t")), false));
    assert_eq!(balances(&ledger).await, (930, 70));

    // The same request again answers the same reversal; the id with another original, amount
    // or reference is a conflict; none of them writes.
    let before = written(&db).await;
    let again = ledger
        .reverse(&reversal("r1", "t", Some(30)))
        .await
        .expect("replay");
    assert!(again.replayed);
    assert_eq!((again.id, again.amount), (tid("r1"), 30));
    let no_amount = ledger.reverse(&reversal("r1", "t", None)).await;
    assert!(matches!(
        no_amount,
        Ok(Transfer {
            replayed: true,
            amount: 30,
            ..
        })
    ));
    let mut tagged = reversal("r1", "t", Some(30));
    tagged.tags.reference = Some(Reference::new("refund-1").expect("reference"));
    for other in [
        reversal("r1", "t", Some(31)),
        tagged,
        reversal("t", "r1", None),
    ] {
        let refused = ledger.reverse(&other).await;
        assert!(
            matches!(&refused, Err(Error::TransferConflict(id)) if *id == other.id),
            "{other:?}: {refused:?}"
        );
    }
    // More than is left: refused naming posted, reversed and requested, nothing written.
    let over = ledger.reverse(&reversal("r-over", "t", Some(71))).await;
    assert!(
        matches!(
            over,
            Err(Error::ReversalExceedsPosted {
                posted: 100,
                reversed: 30,
                requested: Some(71),
                ..
            })
        ),
        "{over:?}"
    );
    assert_eq!(written(&db).await, before, "a refusal wrote");
    assert!(matches!(
        ledger.get_transfer(&tid("r-over")).await,
        Err(Error::UnknownTransfer(_))
    ));

    // The rest (no amount): 70; then nothing is left, with or without an amount.
    let r2 = ledger
        .reverse(&reversal("r2", "t", None))
        .await
        .expect("rest");
    assert_eq!(r2.amount, 70);
    assert_eq!(balances(&ledger).await, (1_000, 0));
    let before = written(&db).await;
    for (id, n) in [("r3", None), ("r4", Some(1))] {
        let refused = ledger.reverse(&reversal(id, "t", n)).await;
        assert!(
            matches!(
                refused,
                Err(Error::ReversalExceedsPosted {
                    posted: 100,
                    reversed: 100,
                    requested,
                    ..
                }) if requested == n
            ),
            "{refused:?}"
        );
    }
    assert_eq!(written(&db).await, before, "a refusal wrote");

    // The original shows what was reversed and links its reversals; its stream has an event
    // per reversal after its creation.
    let t = ledger.get_transfer(&tid("t")).await.expect("original");
    assert_eq!(t.reversed_amount, 100);
    assert_eq!(t.reversals, [tid("r1"), tid("r2")]);
    assert_eq!(t.status, TransferStatus::Posted);
    let client = db.pool.get().await.expect("client");
    let stream: Vec<(String, i64)> = client
        .query(
            "SELECT type, position FROM events WHERE stream_type = 'transfer' \
             AND stream_id = 't' ORDER BY position",
            &[],
        )
        .await
        .expect("events")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let kinds: Vec<(&str, i64)> = stream.iter().map(|(k, p)| (k.as_str(), *p)).collect();
    assert_eq!(
        kinds,
        [
            ("transfer.created", 1),
            ("transfer.reversed", 2),
            ("transfer.reversed", 3)
        ]
    );
    clean(&db).await;
}

/// Only posted money is reversed: a pending hold, a voided one, one past its deadline (still
/// stored pending) and an unknown id are refused with nothing written; a posted hold reverses
/// what it posted; the reverser needs the money.
#[tokio::test]
async fn holds_not_posted_and_a_reverser_without_funds_are_refused() {
    let db = test_db().await;
    let ledger = paid(&db, 100).await;
    let timeout = TransferTimeout::from_secs(60).expect("timeout");
    for id in ["h-pending", "h-void", "h-due", "h-post"] {
        ledger
            .hold(&request(id, 1, 2, 50), timeout)
            .await
            .expect("hold");
    }
    ledger.void(&tid("h-void")).await.expect("void");
    make_holds_due(&db.pool, &["h-due"]).await.expect("due");
    ledger
        .post(&tid("h-post"), Some(amount(20)))
        .await
        .expect("post");
    let before = written(&db).await;
    for (original, status) in [
        ("h-pending", TransferStatus::Pending),
        ("h-void", TransferStatus::Voided),
        ("h-due", TransferStatus::Expired),
    ] {
        let refused = ledger.reverse(&reversal("r", original, None)).await;
        assert!(
            matches!(&refused, Err(Error::TransferNotPosted { id, status: s })
                if *id == tid(original) && *s == status),
            "{original}: {refused:?}"
        );
    }
    let unknown = ledger.reverse(&reversal("r", "nope", None)).await;
    assert!(matches!(unknown, Err(Error::UnknownTransfer(id)) if id == tid("nope")));
    assert_eq!(written(&db).await, before, "a refusal wrote");

    // A posted hold: what it posted, not what it held.
    let over = ledger.reverse(&reversal("r", "h-post", Some(21))).await;
    assert!(matches!(
        over,
        Err(Error::ReversalExceedsPosted { posted: 20, .. })
    ));
    let back = ledger
        .reverse(&reversal("r", "h-post", None))
        .await
        .expect("reverse the post");
    assert_eq!(back.amount, 20);

    // Account 2 spent what it got: reversing it needs funds it no longer has. (The due hold
    // is expired first: a refusal for funds expires the reverser's due holds, a write of its
    // own.)
    assert_eq!(ledger.expire_due().await.expect("sweep"), 1);
    ledger.open_account(acc(3), 0).await.expect("open 3");
    let available = ledger.account(acc(2)).await.expect("2").available;
    ledger
        .transfer(TRANSFER, &request("spent", 2, 3, available))
        .await
        .expect("spend");
    let before = written(&db).await;
    let broke = ledger.reverse(&reversal("r-broke", "t", Some(10))).await;
    assert!(
        matches!(broke, Err(Error::InsufficientFunds { account, requested: 10, .. }) if account == acc(2)),
        "{broke:?}"
    );
    assert_eq!(written(&db).await, before, "a refusal wrote");
    clean(&db).await;
}

/// Concurrent reversals of one unit each of a transfer of 10, while transfers keep moving
/// money between the same two accounts (through the batched engine when it is the harness's
/// strategy): exactly 10 succeed, the rest are refused naming what is left, and the books and
/// the original's counter agree.
#[tokio::test]
async fn concurrent_reversals_never_exceed_the_posted_amount() {
    const RACERS: usize = 16;
    let db = test_db().await;
    let ledger = Arc::new(paid(&db, 10).await);
    let barrier = Arc::new(tokio::sync::Barrier::new(2 * RACERS));
    let mut tasks = Vec::new();
    for i in 0..RACERS {
        let (l, b) = (ledger.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            b.wait().await;
            l.reverse(&reversal(&format!("r-{i}"), "t", Some(1))).await
        }));
        let (l, b) = (ledger.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            b.wait().await;
            l.transfer(TRANSFER, &request(&format!("x-{i}"), 1, 2, 1))
                .await
        }));
    }
    let mut reversed = 0;
    for task in tasks {
        match task.await.expect("task") {
            Ok(t) if t.kind == TransferKind::Reversal => reversed += t.amount,
            Ok(_) => {}
            Err(Error::ReversalExceedsPosted {
                posted: 10,
                reversed: 10,
                ..
            }) => {}
            Err(e) => panic!("{TRANSFER}: {e:?}"),
        }
    }
    assert_eq!(reversed, 10, "{TRANSFER}");
    let t = ledger.get_transfer(&tid("t")).await.expect("original");
    assert_eq!((t.reversed_amount, t.reversals.len()), (10, 10));
    // 1000 - 10 + 10 reversed - 16 transferred.
    assert_eq!(balances(&ledger).await, (1_000 - 16, 16));
    clean(&db).await;
}

/// What the counter and the account locks prevent: a reversal that reads what is left, then
/// writes (here with a pause between, as a busy server would have), lets concurrent copies all
/// read the same amount left and together reverse more than was posted. Plain SQL on one
/// node, beside the race above (run once: the ordered harness).
#[tokio::test]
async fn a_naive_check_then_write_reversal_exceeds_the_posted_amount() {
    const RACERS: usize = 16;
    if TRANSFER != TransferStrategy::Ordered {
        return;
    }
    let db = test_db().await;
    let ledger = paid(&db, 10).await;
    // Money enough on account 2 for every copy: the excess is the point, not the funds.
    ledger
        .deposit(tid("d"), acc(2), amount(100))
        .await
        .expect("deposit");
    let barrier = Arc::new(tokio::sync::Barrier::new(RACERS));
    let mut tasks = Vec::new();
    for i in 0..RACERS {
        let (pool, b) = (db.pool.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = pool.get().await.expect("client");
            b.wait().await;
            let tx = client.transaction().await.expect("begin");
            let left: i64 = tx
                .query_one(
                    "SELECT amount - reversed FROM transfers WHERE id = 't'",
                    &[],
                )
                .await
                .expect("read")
                .get(0);
            tx.execute("SELECT pg_sleep(0.1)", &[])
                .await
                .expect("pause");
            if left < 1 {
                return false;
            }
            let id = format!("naive-{i}");
            tx.batch_execute(&format!(
                "INSERT INTO transfers (id, from_account, to_account, amount, kind, reverses) \
                   VALUES ('{id}', 2, 1, 1, 'reversal', 't'); \
                 UPDATE accounts SET balance = balance - 1 WHERE id = 2; \
                 UPDATE accounts SET balance = balance + 1 WHERE id = 1; \
                 UPDATE transfers SET reversed = 11 - {left}, reversals = 11 - {left} \
                   WHERE id = 't';"
            ))
            .await
            .expect("write");
            tx.commit().await.expect("commit");
            true
        }));
    }
    let mut applied = 0;
    for task in tasks {
        applied += i64::from(task.await.expect("task"));
    }
    let client = db.pool.get().await.expect("client");
    let moved_back: i64 = client
        .query_one(
            "SELECT sum(amount)::bigint FROM transfers WHERE reverses = 't'",
            &[],
        )
        .await
        .expect("sum")
        .get(0);
    assert_eq!(moved_back, applied);
    assert!(
        moved_back > 10,
        "the naive reversals moved back {moved_back} of a transfer of 10"
    );
}

/// A reversal can itself be reversed (a refund made in error, taken back), never for more than
/// the reversal moved; and the audit ties every transfer's `reversed` and `reversals` to the
/// reversals that name it: a counter changed around the engine, or a reversal whose original
/// is gone, is reported naming the transfer (the audit before this check found nothing).
#[tokio::test]
async fn a_reversal_is_reversible_and_the_audit_ties_each_transfer_to_its_reversals() {
    use saldo::audit::{audit_ledger_of, LedgerDivergence, LedgerInvariant};
    let db = test_db().await;
    let ledger = paid(&db, 100).await;
    ledger
        .reverse(&reversal("r1", "t", Some(40)))
        .await
        .expect("refund 40");
    let back = ledger
        .reverse(&reversal("r1-back", "r1", None))
        .await
        .expect("take the refund back");
    assert_eq!(
        (back.from, back.to, back.amount, back.reverses),
        (acc(1), acc(2), 40, Some(tid("r1")))
    );
    assert_eq!(balances(&ledger).await, (900, 100));
    let over = ledger.reverse(&reversal("r1-over", "r1", Some(1))).await;
    assert!(
        matches!(
            over,
            Err(Error::ReversalExceedsPosted {
                posted: 40,
                reversed: 40,
                ..
            })
        ),
        "{over:?}"
    );
    clean(&db).await;

    let client = db.pool.get().await.expect("client");
    let findings = || async {
        audit_ledger_of(&db.pool, db.layout)
            .await
            .expect("audit")
            .accounts
            .into_iter()
            .filter(|d| d.transfer.is_some())
            .map(|d: LedgerDivergence| {
                (
                    d.transfer.expect("named").as_str().to_owned(),
                    d.invariant,
                    d.expected,
                    d.actual,
                )
            })
            .collect::<Vec<_>>()
    };
    // `reversed` raised around the engine (on Citus on both sides: one finding per side).
    client
        .batch_execute("UPDATE transfers SET reversed = reversed + 1 WHERE id = 't'")
        .await
        .expect("plant reversed");
    let sides = if db.layout == saldo::db::Layout::Citus {
        2
    } else {
        1
    };
    let expected = (
        "t".to_owned(),
        LedgerInvariant::ReversedMatchesReversals,
        40,
        41,
    );
    assert_eq!(findings().await, vec![expected; sides]);
    client
        .batch_execute(
            "UPDATE transfers SET reversed = reversed - 1, reversals = reversals + 1 WHERE id = 't'",
        )
        .await
        .expect("plant reversals");
    let expected = ("t".to_owned(), LedgerInvariant::ReversalsMatchCount, 1, 2);
    assert_eq!(findings().await, vec![expected; sides]);
    // The original of a reversal removed: its reversals are reported as naming nothing.
    client
        .batch_execute(
            "UPDATE transfers SET reversals = reversals - 1 WHERE id = 't';
             DELETE FROM entries WHERE transfer_id = 'r1';
             DELETE FROM transfers WHERE id = 'r1'",
        )
        .await
        .expect("plant a lost original");
    let found = findings().await;
    assert!(
        found.contains(&(
            "r1".to_owned(),
            LedgerInvariant::ReversalOriginalExists,
            1,
            0
        )),
        "{found:?}"
    );
}
