//! The ledger between two accounts whose shards are on different workers (placement read from
//! Citus's metadata, not assumed): every transfer writes both workers (a 2PC) and locks an
//! account on each. Crossed transfers in both directions never deadlock (the locks are taken
//! one account per statement, ascending) and conserve money; holds settle both journal sides
//! in one statement; a taken id answers as on one node. The Citus audit is clean after each.

use saldo::domain::{AccountId, Amount, TransferId, TransferStatus, TransferTimeout};
use saldo::ledger::{Ledger, TransferRequest, TransferStrategy};
use saldo::retry::RetryPolicy;
use saldo::stock::batched::BatchedConfig;
use saldo::Error;
use saldo_lab::race::transfers::{crossed_between, OPENING_BALANCE};
use saldo_lab::testing::{
    accounts_on_two_workers, citus_db, ledger_divergences, worker_of, TestDb,
};
use saldo_lab::LabTransfer;

/// Crossed transfers fired at once (half each way). Fewer than the single-node race's 200: on
/// Citus each is a 2PC serialised on the same two rows, and the queue behind them must drain
/// within the pool's checkout timeout on a busy 2-core machine.
const CROSSED: u32 = 60;

fn acc(n: i64) -> AccountId {
    AccountId::new(n).expect("account")
}

async fn assert_clean(db: &TestDb) {
    let divergences = ledger_divergences(&db.store()).await;
    assert!(divergences.is_empty(), "Citus audit found {divergences:?}");
}

/// Two accounts on different workers, proven.
async fn two_workers(db: &TestDb) -> (i64, i64) {
    let (a, b) = accounts_on_two_workers(db).await;
    assert_ne!(
        worker_of(db, saldo::ops::DistributedBy::Account, a).await,
        worker_of(db, saldo::ops::DistributedBy::Account, b).await
    );
    (a, b)
}

/// Crossed transfers between workers with NO retry: a 40P01 would reach the caller, so none
/// may happen at all; every transfer succeeds and the two balances still sum to what opened.
async fn crossed_without_retry(strategy: TransferStrategy, lab: LabTransfer) {
    let db = citus_db().await;
    let (a, b) = two_workers(&db).await;
    let store = saldo::stock::Store::new(
        db.pool.clone(),
        db.tx.clone().with_retry(RetryPolicy::none()),
    )
    .with_layout(db.layout);
    let ledger = Ledger::serving(store, strategy, &BatchedConfig::default());
    let answers = crossed_between(&ledger, lab, (acc(a), acc(b)), CROSSED, "x")
        .await
        .expect("the race ran");
    let failed: Vec<&Error> = answers.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(failed.is_empty(), "{strategy}: {failed:?}");
    let total = ledger.account(acc(a)).await.expect("a").balance
        + ledger.account(acc(b)).await.expect("b").balance;
    assert_eq!(total, 2 * OPENING_BALANCE);
    let system = ledger.account(AccountId::SYSTEM).await.expect("system");
    assert_eq!(system.balance, -total);
    assert_eq!(
        ledger
            .transfers_of(acc(a), 1_000)
            .await
            .expect("history")
            .len(),
        CROSSED as usize + 1,
        "every transfer and the opening, once each, in a's history"
    );
    assert_clean(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crossed_ordered_transfers_across_workers_never_deadlock() {
    crossed_without_retry(TransferStrategy::Ordered, LabTransfer::Ordered).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crossed_batched_transfers_across_workers_never_deadlock() {
    crossed_without_retry(TransferStrategy::Batched, LabTransfer::Batched).await;
}

fn request(id: &str, from: i64, to: i64, amount: i64) -> TransferRequest {
    TransferRequest {
        id: TransferId::new(id).expect("id"),
        from: acc(from),
        to: acc(to),
        amount: Amount::new(amount).expect("amount"),
        tags: Default::default(),
    }
}

/// (status, rows) of both journal sides of `id`: the two sides always agree.
async fn sides(db: &TestDb, id: &str) -> Vec<(i64, String)> {
    let client = db.pool.get().await.expect("client");
    client
        .query(
            "SELECT account_id, status FROM transfers WHERE id = $1 ORDER BY account_id",
            &[&id],
        )
        .await
        .expect("sides")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[tokio::test]
async fn holds_settle_both_sides_and_a_taken_id_answers_as_on_one_node() {
    let db = citus_db().await;
    let (a, b) = two_workers(&db).await;
    let ledger = Ledger::new(db.store());
    ledger.open_account(acc(a), 100).await.expect("open a");
    ledger.open_account(acc(b), 100).await.expect("open b");
    let timeout = TransferTimeout::from_secs(60).expect("timeout");
    let both = |status: &str| vec![(a, status.to_owned()), (b, status.to_owned())];

    // Posted in part: both sides posted, the rest released.
    ledger
        .hold(&request("p", a, b, 30), timeout)
        .await
        .expect("hold p");
    assert_eq!(sides(&db, "p").await, both("pending"));
    let posted = ledger
        .post(
            &TransferId::new("p").expect("id"),
            Some(Amount::new(20).expect("amount")),
        )
        .await
        .expect("post");
    assert_eq!(
        (posted.status, posted.posted_amount),
        (TransferStatus::Posted, Some(20))
    );
    assert_eq!(sides(&db, "p").await, both("posted"));

    // Voided, then the same void again (a replay), then a post (not pending).
    ledger
        .hold(&request("v", b, a, 50), timeout)
        .await
        .expect("hold v");
    let v = TransferId::new("v").expect("id");
    assert!(!ledger.void(&v).await.expect("void").replayed);
    assert!(ledger.void(&v).await.expect("void again").replayed);
    assert!(matches!(
        ledger.post(&v, None).await,
        Err(Error::TransferNotPending { .. })
    ));
    assert_eq!(sides(&db, "v").await, both("voided"));

    // Expired by the sweeper: both sides.
    ledger
        .hold(&request("e", a, b, 10), timeout)
        .await
        .expect("hold e");
    saldo::fixtures::make_holds_due(&db.pool, &["e"])
        .await
        .expect("due");
    assert_eq!(ledger.expire_due().await.expect("sweep"), 1);
    assert_eq!(sides(&db, "e").await, both("expired"));

    // A taken id: the same payload replays the original, another conflicts, whichever
    // accounts the other payload names (its router row is the id's one key).
    let t = ledger
        .transfer(TransferStrategy::Ordered, &request("t", a, b, 5))
        .await
        .expect("transfer");
    let again = ledger
        .transfer(TransferStrategy::Ordered, &request("t", a, b, 5))
        .await
        .expect("replay");
    assert!(again.replayed && again.created_at == t.created_at);
    for other in [request("t", a, b, 6), request("t", b, a, 5)] {
        assert!(matches!(
            ledger.transfer(TransferStrategy::Ordered, &other).await,
            Err(Error::TransferConflict(_))
        ));
    }
    assert_eq!(
        ledger
            .get_transfer(&TransferId::new("t").expect("id"))
            .await
            .expect("get")
            .amount,
        5
    );
    let (ab, bb) = (
        ledger.account(acc(a)).await.expect("a").balance,
        ledger.account(acc(b)).await.expect("b").balance,
    );
    assert_eq!((ab, bb), (100 - 20 - 5, 100 + 20 + 5));
    assert_clean(&db).await;
}

/// A reversal between two workers' accounts: both sides of the reversal name the original,
/// both sides of the original count what was reversed (one statement each way), more than is
/// left is refused with nothing written, the original lists its reversals, and the Citus
/// audit (sides agree, accounts match their journal) stays clean.
#[tokio::test]
async fn a_partial_reversal_across_workers_keeps_both_sides_in_step() {
    let db = citus_db().await;
    let (a, b) = two_workers(&db).await;
    let ledger = Ledger::serving(
        db.store(),
        TransferStrategy::Batched,
        &BatchedConfig::default(),
    );
    ledger.open_account(acc(a), 100).await.expect("open a");
    ledger.open_account(acc(b), 0).await.expect("open b");
    ledger
        .transfer(TransferStrategy::Batched, &request("t", a, b, 60))
        .await
        .expect("transfer");
    let reverse = |id: &str, n: Option<i64>| saldo::ledger::ReversalRequest {
        id: TransferId::new(id).expect("id"),
        original: TransferId::new("t").expect("id"),
        amount: n.map(|n| Amount::new(n).expect("amount")),
        tags: Default::default(),
    };
    let r1 = ledger
        .reverse(&reverse("r1", Some(25)))
        .await
        .expect("25 back");
    assert_eq!((r1.from, r1.to, r1.amount), (acc(b), acc(a), 25));
    assert!(matches!(
        ledger.reverse(&reverse("r2", Some(36))).await,
        Err(Error::ReversalExceedsPosted {
            posted: 60,
            reversed: 25,
            ..
        })
    ));
    assert_eq!(sides(&db, "r2").await, []);
    let client = db.pool.get().await.expect("client");
    let counted = |id: &'static str| {
        let client = &client;
        async move {
            client
                .query(
                    "SELECT account_id, reversed, reverses FROM transfers WHERE id = $1 \
                     ORDER BY account_id",
                    &[&id],
                )
                .await
                .expect("sides")
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect::<Vec<(i64, i64, Option<String>)>>()
        }
    };
    let t = Some("t".to_owned());
    assert_eq!(counted("r1").await, [(a, 0, t.clone()), (b, 0, t.clone())]);
    assert_eq!(counted("t").await, [(a, 25, None), (b, 25, None)]);
    ledger
        .reverse(&reverse("r3", None))
        .await
        .expect("the rest");
    let original = ledger
        .get_transfer(&TransferId::new("t").expect("id"))
        .await
        .expect("get");
    assert_eq!(original.reversed_amount, 60);
    assert_eq!(
        original.reversals,
        [
            TransferId::new("r1").expect("id"),
            TransferId::new("r3").expect("id")
        ]
    );
    assert_eq!(ledger.account(acc(a)).await.expect("a").balance, 100);
    assert_clean(&db).await;

    // One side's count of what was reversed changed on its shard: the reversal audit, side by
    // side, names the transfer and that account.
    client
        .execute(
            "UPDATE transfers SET reversed = 59 WHERE id = 't' AND account_id = $1",
            &[&b],
        )
        .await
        .expect("plant");
    let found: Vec<_> = saldo::audit::citus::audit_accounts(&db.pool)
        .await
        .expect("audit")
        .into_iter()
        .map(|d| {
            (
                d.transfer.map(|t| t.as_str().to_owned()),
                d.account,
                d.invariant,
                d.expected,
                d.actual,
            )
        })
        .collect();
    assert_eq!(
        found,
        [(
            Some("t".to_owned()),
            Some(acc(b)),
            saldo::audit::LedgerInvariant::ReversedMatchesReversals,
            60,
            59
        )]
    );
}

/// The ledger repair on Citus: an account that drifted is read and written on its own shard;
/// a transfer whose two sides disagree (its credit side changed on its shard) is reported with
/// why and `saldo audit`, and its accounts are left alone: which side is right is for a person
/// to decide.
#[tokio::test]
async fn a_drifted_account_is_repaired_on_its_shard_and_a_broken_transfer_is_reported() {
    use saldo::ledger::repair::{self, AccountAction};
    let db = citus_db().await;
    let (a, b) = two_workers(&db).await;
    let c = (1..).find(|n| *n != a && *n != b).expect("a third account");
    let ledger = Ledger::new(db.store());
    for n in [a, b, c] {
        ledger.open_account(acc(n), 100).await.expect("open");
    }
    ledger
        .transfer(TransferStrategy::Ordered, &request("x", a, b, 10))
        .await
        .expect("transfer");
    let client = db.pool.get().await.expect("client");
    client
        .execute(
            "UPDATE transfers SET amount = 11 WHERE account_id = $1 AND id = 'x'",
            &[&b],
        )
        .await
        .expect("break the credit side");
    client
        .execute(
            "UPDATE accounts SET balance = balance + 7 WHERE id = $1",
            &[&c],
        )
        .await
        .expect("print money");
    let report = repair::repair(&db.store(), true).await.expect("repair");
    let action = |n: i64| {
        report
            .accounts
            .iter()
            .find(|r| r.account == acc(n))
            .map(|r| (r.action, r.reason.clone()))
    };
    assert_eq!(
        action(c),
        Some((AccountAction::Applied, None)),
        "{report:?}"
    );
    let (blocked, why) = action(b).expect("b diverges from its journal side");
    assert_eq!(blocked, AccountAction::Unrepairable);
    assert!(why.is_some_and(|w| w.contains("transfer x")));
    assert_eq!(report.unrepairable.len(), 1, "{report:?}");
    assert_eq!(report.unrepairable[0].subject, "transfer x");
    assert_eq!(report.unrepairable[0].shown_by, "saldo audit");
    assert_eq!(
        report.remaining.transfers.len(),
        1,
        "{:?}",
        report.remaining
    );
    assert_eq!(ledger.account(acc(c)).await.expect("c").balance, 100);
    assert_eq!(ledger.account(acc(b)).await.expect("b").balance, 110);
}

/// Currencies across workers: a transfer and a hold between a EUR and a USD account are
/// refused with `CurrencyMismatch` by both strategies, on the rows locked on their two
/// workers, and nothing is written; a deposit to the USD account is journalled in USD on both
/// of its sides. The Citus audit is clean.
#[tokio::test]
async fn a_currency_mismatch_across_workers_is_refused_and_writes_nothing() {
    use saldo::domain::BalanceLimits;
    use saldo::ledger::{Currency, Denomination};
    let db = citus_db().await;
    let (a, b) = two_workers(&db).await;
    let ledger = Ledger::new(db.store());
    let usd = Denomination::new(Currency::new("USD").expect("code"), None);
    ledger.open_account(acc(a), 100).await.expect("open a");
    ledger
        .open_account_in(acc(b), 0, BalanceLimits::default(), usd)
        .await
        .expect("open b");
    let timeout = TransferTimeout::from_secs(60).expect("timeout");
    for &strategy in TransferStrategy::ALL {
        let ledger = Ledger::serving(db.store(), strategy, &BatchedConfig::default());
        let transfer = ledger
            .transfer(strategy, &request(&format!("t-{strategy}"), a, b, 10))
            .await;
        let hold = ledger
            .hold(&request(&format!("h-{strategy}"), a, b, 10), timeout)
            .await;
        for refused in [transfer, hold] {
            assert!(
                matches!(&refused, Err(Error::CurrencyMismatch { from, to, to_currency, .. })
                    if from.get() == a && to.get() == b && to_currency.as_str() == "USD"),
                "{strategy}: {refused:?}"
            );
        }
    }
    let client = db.pool.get().await.expect("client");
    let ids: i64 = client
        .query_one("SELECT count(*) FROM transfer_ids", &[])
        .await
        .expect("ids")
        .get(0);
    assert_eq!(ids, 1, "only a's opening");
    let (ra, rb) = (
        ledger.account(acc(a)).await.expect("a"),
        ledger.account(acc(b)).await.expect("b"),
    );
    assert_eq!(
        (ra.balance, ra.held, rb.balance, rb.pending_credits),
        (100, 0, 0, 0)
    );
    let deposit = ledger
        .deposit(
            TransferId::new("d").expect("id"),
            acc(b),
            Amount::new(5).expect("amount"),
        )
        .await
        .expect("deposit");
    assert_eq!(deposit.currency.as_str(), "USD");
    let sides: Vec<String> = client
        .query("SELECT currency FROM transfers WHERE id = 'd'", &[])
        .await
        .expect("sides")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(sides, ["USD", "USD"]);
    assert_clean(&db).await;
}

/// A transfer and a group between accounts on two workers carry their reference and
/// metadata on both journal sides (each on its own shard); a replay with other tags is the
/// idempotency conflict with nothing written, with every strategy.
#[tokio::test]
async fn references_and_metadata_ride_on_both_sides_and_are_compared_on_replay() {
    use saldo::domain::{GroupId, Metadata, Reference, Tags};
    use saldo::ledger::{GroupRequest, LinkedTransfer};
    let db = citus_db().await;
    let (a, b) = two_workers(&db).await;
    let tags = Tags {
        reference: Some(Reference::new("pay_9").expect("reference")),
        metadata: Some(Metadata::new([("invoice".into(), "INV-9".into())].into()).expect("md")),
    };
    for strategy in TransferStrategy::ALL {
        let ledger = Ledger::serving(db.store(), *strategy, &BatchedConfig::default());
        if strategy == &TransferStrategy::Ordered {
            ledger.open_account(acc(a), 100).await.expect("open a");
            ledger.open_account(acc(b), 100).await.expect("open b");
        }
        let id = format!("r-{strategy}");
        let tagged = TransferRequest {
            tags: tags.clone(),
            ..request(&id, a, b, 5)
        };
        let t = ledger.transfer(*strategy, &tagged).await.expect("transfer");
        assert_eq!(t.tags, tags);
        let client = db.pool.get().await.expect("client");
        let stored: Vec<(i64, Option<String>, Option<serde_json::Value>)> = client
            .query(
                "SELECT account_id, reference, metadata FROM transfers WHERE id = $1 \
                 ORDER BY account_id",
                &[&id],
            )
            .await
            .expect("sides")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        let md = serde_json::json!({"invoice": "INV-9"});
        let side = |acct| (acct, Some("pay_9".to_owned()), Some(md.clone()));
        let mut expected = vec![side(a), side(b)];
        expected.sort_by_key(|s| s.0);
        assert_eq!(stored, expected);
        let other = TransferRequest {
            tags: Tags::NONE,
            ..tagged.clone()
        };
        let refused = ledger.transfer(*strategy, &other).await;
        assert!(
            matches!(refused, Err(Error::TransferConflict(_))),
            "{refused:?}"
        );
        let group = GroupRequest {
            id: GroupId::new(format!("g-{strategy}")).expect("group"),
            transfers: vec![LinkedTransfer {
                transfer: TransferRequest {
                    id: TransferId::new(format!("g-{strategy}-0")).expect("id"),
                    ..tagged.clone()
                },
                pending: None,
            }],
            tags: tags.clone(),
        };
        let applied = ledger.transfer_group(&group).await.expect("group");
        assert_eq!((&applied.tags, &applied.transfers[0].tags), (&tags, &tags));
        let refused = ledger
            .transfer_group(&GroupRequest {
                tags: Tags::NONE,
                ..group.clone()
            })
            .await;
        assert!(
            matches!(refused, Err(Error::GroupConflict(_))),
            "{refused:?}"
        );
    }
    assert_eq!(
        ledger_balance(&db, a).await + ledger_balance(&db, b).await,
        200
    );
    assert_clean(&db).await;
}

async fn ledger_balance(db: &TestDb, id: i64) -> i64 {
    Ledger::new(db.store())
        .account(acc(id))
        .await
        .expect("account")
        .balance
}

/// The transfer search on Citus, where a transfer is two journal rows on two workers: every
/// filter (none, reference, account, reference with account, status) finds each transfer
/// exactly once, paged one row at a time (so pages stop between the two sides of an id), in
/// id order; an account opened with a reference and metadata answers them.
#[tokio::test]
async fn the_search_finds_each_transfer_once_across_workers() {
    use saldo::domain::{BalanceLimits, Reference, Tags, TransferStatus};
    use saldo::ledger::{AccountRequest, Denomination};
    use saldo::listing::transfers::{transfers, TransferFilter};
    use saldo::listing::PageLimit;
    let db = citus_db().await;
    let (a, b) = two_workers(&db).await;
    let store = db.store();
    let ledger = Ledger::new(store.clone());
    let tags = |r: &str| Tags {
        reference: Some(Reference::new(r).expect("reference")),
        metadata: None,
    };
    let opened = ledger
        .open(&AccountRequest {
            id: acc(a),
            opening_balance: 100,
            limits: BalanceLimits::default(),
            denomination: Denomination::DEFAULT,
            tags: tags("cust-a"),
        })
        .await
        .expect("open a");
    assert_eq!(opened.tags, tags("cust-a"));
    assert_eq!(
        ledger.account(acc(a)).await.expect("a").tags,
        tags("cust-a")
    );
    ledger.open_account(acc(b), 100).await.expect("open b");
    for (n, (from, to)) in [(a, b), (b, a), (a, b), (b, a)].into_iter().enumerate() {
        let t = TransferRequest {
            tags: tags(if n % 2 == 0 { "s-1" } else { "s-2" }),
            ..request(&format!("s{n}"), from, to, 1)
        };
        ledger
            .transfer(TransferStrategy::Ordered, &t)
            .await
            .expect("transfer");
    }
    let timeout = TransferTimeout::from_secs(600).expect("timeout");
    ledger
        .hold(
            &TransferRequest {
                tags: tags("s-1"),
                ..request("s4", b, a, 1)
            },
            timeout,
        )
        .await
        .expect("hold");
    let client = db.pool.get().await.expect("client");
    let ids_where =
        |condition: &str| format!("SELECT id FROM transfer_ids WHERE {condition} ORDER BY id");
    let expect = |sql: String| {
        let client = &client;
        async move {
            client
                .query(&sql, &[])
                .await
                .expect("ids")
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<Vec<String>>()
        }
    };
    let by = |reference: Option<&str>, account: Option<i64>, status| TransferFilter {
        reference: reference.map(|r| Reference::new(r).expect("reference")),
        account: account.map(acc),
        status,
    };
    let all = expect(ids_where("true")).await;
    assert_eq!(all.len(), 7, "two openings and five transfers: {all:?}");
    let s1 = vec!["s0".to_owned(), "s2".to_owned(), "s4".to_owned()];
    for (filter, expected) in [
        (by(None, None, None), all.clone()),
        (by(Some("s-1"), None, None), s1.clone()),
        (
            by(None, Some(a), None),
            expect(ids_where(&format!("{a} IN (from_account, to_account)"))).await,
        ),
        (by(Some("s-1"), Some(b), None), s1.clone()),
        (
            by(Some("s-2"), Some(a), None),
            vec!["s1".to_owned(), "s3".to_owned()],
        ),
        (
            by(None, Some(b), Some(TransferStatus::Pending)),
            vec!["s4".to_owned()],
        ),
        (by(None, None, Some(TransferStatus::Posted)), {
            let mut posted = all.clone();
            posted.retain(|id| id != "s4");
            posted
        }),
    ] {
        for limit in [1, 100] {
            let (mut seen, mut cursor) = (Vec::new(), None);
            loop {
                let page = transfers(
                    &store,
                    &filter,
                    PageLimit::new(limit).expect("limit"),
                    cursor.as_ref(),
                )
                .await
                .expect("search");
                seen.extend(page.items.iter().map(|t| t.id.as_str().to_owned()));
                match page.next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
                assert!(seen.len() <= 2 * all.len(), "{filter:?}: {seen:?}");
            }
            assert_eq!(seen, expected, "{filter:?}, limit {limit}");
        }
    }
    assert_clean(&db).await;
}
