//! Statements and balances at a time (migration V20), on this binary's transfer strategy and
//! cluster (`harness`): every write leaves one entry per account it changed whose counters,
//! replayed, are the account's after each step; a balance asked for between two writes is the
//! counters as they were then; pages follow their cursor and refuse another statement's; the
//! audit shows an entry changed behind the ledger's back.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use saldo::domain::{AccountId, Amount, TransferId, TransferTimeout};
use saldo::ledger::entries::{Direction, Entry, EntryKind};
use saldo::ledger::{Ledger, ReversalRequest, TransferRequest};
use saldo::listing::entries::{balance_at, entries, EntryFilter};
use saldo::listing::{PageLimit, MAX_PAGE_LIMIT};
use saldo::stock::batched::BatchedConfig;
use saldo::{Error, InputError};
use saldo_lab::testing::ledger_divergences;

use super::harness::{test_db, TestDb, TRANSFER};

fn acc(n: i64) -> AccountId {
    AccountId::new(n).expect("account id")
}

fn tid(s: &str) -> TransferId {
    TransferId::new(s).expect("transfer id")
}

fn request(id: &str, from: i64, to: i64, n: i64) -> TransferRequest {
    TransferRequest {
        id: tid(id),
        from: acc(from),
        to: acc(to),
        amount: Amount::new(n).expect("amount"),
        tags: Default::default(),
    }
}

/// (balance, held, pending credits).
type Counters = (i64, i64, i64);

/// What each entry says happened, applied from nothing: a post releases the whole hold it
/// names, whatever it posted.
fn replay(entries: &[Entry]) -> Vec<Counters> {
    let mut holds: HashMap<String, i64> = HashMap::new();
    let (mut b, mut h, mut p) = (0i64, 0i64, 0i64);
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let sign = if e.direction == Direction::Debit {
            -1
        } else {
            1
        };
        let hold = e
            .transfer_id
            .as_ref()
            .and_then(|t| holds.get(t.as_str()).copied())
            .unwrap_or(0);
        let debit = e.direction == Direction::Debit;
        match e.kind {
            EntryKind::Hold => {
                if let Some(t) = &e.transfer_id {
                    holds.insert(t.as_str().to_owned(), e.amount);
                }
                if debit {
                    h += e.amount
                } else {
                    p += e.amount
                }
            }
            EntryKind::Post | EntryKind::Void | EntryKind::Expire => {
                if e.kind == EntryKind::Post {
                    b += sign * e.amount;
                }
                if debit {
                    h -= hold
                } else {
                    p -= hold
                }
            }
            _ => b += sign * e.amount,
        }
        out.push((b, h, p));
    }
    out
}

async fn statement(ledger: &Ledger, n: i64) -> Vec<Entry> {
    let filter = EntryFilter::new(acc(n), None, None);
    let limit = PageLimit::new(i64::from(MAX_PAGE_LIMIT)).expect("limit");
    let page = entries(ledger.store(), &filter, limit, None)
        .await
        .expect("statement");
    assert!(page.next.is_none(), "one page holds this test's entries");
    page.items
}

async fn counters(ledger: &Ledger, n: i64) -> Counters {
    let a = ledger.account(acc(n)).await.expect("account");
    (a.balance, a.held, a.pending_credits)
}

/// The database's clock, between two writes.
async fn now(db: &TestDb) -> DateTime<Utc> {
    let client = db.pool.get().await.expect("client");
    client
        .query_one("SELECT clock_timestamp()", &[])
        .await
        .expect("clock")
        .get(0)
}

#[tokio::test]
async fn entries_replay_to_the_counters_and_a_past_balance_is_as_it_was() {
    let db = test_db().await;
    let ledger = Ledger::serving(db.store(), TRANSFER, &BatchedConfig::default());
    let before = now(&db).await;
    ledger.open_account(acc(1), 100).await.expect("open 1");
    ledger.open_account(acc(2), 0).await.expect("open 2");
    let reverse = ReversalRequest {
        id: tid("r"),
        original: tid("t"),
        amount: Some(Amount::new(5).expect("amount")),
        tags: Default::default(),
    };
    // After each step: the time, and both accounts' counters then.
    let mut marks: Vec<(DateTime<Utc>, Counters, Counters)> = Vec::new();
    for step in 0..6 {
        match step {
            0 => {}
            1 => {
                ledger
                    .transfer(TRANSFER, &request("t", 1, 2, 30))
                    .await
                    .expect("transfer");
            }
            2 => {
                ledger
                    .hold(&request("h", 1, 2, 20), TransferTimeout::default())
                    .await
                    .expect("hold");
            }
            3 => {
                ledger
                    .post(&tid("h"), Amount::new(15).ok())
                    .await
                    .expect("post");
            }
            4 => {
                ledger
                    .hold(&request("v", 1, 2, 10), TransferTimeout::default())
                    .await
                    .expect("hold");
                ledger.void(&tid("v")).await.expect("void");
            }
            _ => {
                ledger.reverse(&reverse).await.expect("reverse");
            }
        }
        let (one, two) = (counters(&ledger, 1).await, counters(&ledger, 2).await);
        for (n, now) in [(1, one), (2, two)] {
            let entries = statement(&ledger, n).await;
            let seqs: Vec<i64> = entries.iter().map(|e| e.seq).collect();
            assert_eq!(seqs, (1..=entries.len() as i64).collect::<Vec<_>>());
            let said: Vec<Counters> = entries
                .iter()
                .map(|e| (e.balance_after, e.held_after, e.pending_credits_after))
                .collect();
            assert_eq!(replay(&entries), said, "account {n} after step {step}");
            assert_eq!(said.last(), Some(&now), "account {n} after step {step}");
        }
        marks.push((now(&db).await, one, two));
    }
    // Every write above went through: 1 opening, then t, h, post, v and its void, r.
    let one = statement(&ledger, 1).await;
    let kinds: Vec<EntryKind> = one.iter().map(|e| e.kind).collect();
    use EntryKind::*;
    assert_eq!(kinds, [Opening, Transfer, Hold, Post, Hold, Void, Reversal]);
    assert_eq!(marks.last().map(|m| m.1), Some((100 - 30 - 15 + 5, 0, 0)));
    for (at, one, two) in &marks {
        for (n, then) in [(1, *one), (2, *two)] {
            let b = balance_at(ledger.store(), acc(n), *at)
                .await
                .expect("balance at");
            assert_eq!((b.balance, b.held, b.pending_credits), then, "{n} at {at}");
        }
    }
    assert!(matches!(
        balance_at(ledger.store(), acc(1), before).await,
        Err(Error::NoBalanceAt { .. })
    ));
    assert!(matches!(
        balance_at(ledger.store(), acc(9), before).await,
        Err(Error::UnknownAccount(_))
    ));

    // Pages of two follow their cursor to the same statement; another's cursor is refused.
    let filter = EntryFilter::new(acc(1), None, None);
    let two = PageLimit::new(2).expect("limit");
    let (mut paged, mut cursor) = (Vec::new(), None);
    loop {
        let page = entries(ledger.store(), &filter, two, cursor.as_ref())
            .await
            .expect("page");
        paged.extend(page.items.iter().map(|e| e.seq));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(paged, (1..=7).collect::<Vec<i64>>());
    let page = entries(ledger.store(), &filter, two, None)
        .await
        .expect("page");
    let other = EntryFilter::new(acc(2), None, None);
    assert!(matches!(
        entries(ledger.store(), &other, two, page.next.as_ref()).await,
        Err(Error::Input(InputError::CursorInvalid { .. }))
    ));
    // From the third step's time on: the post and what followed.
    let (third, _, _) = marks[2];
    let later = EntryFilter::new(acc(1), Some(third), None);
    let page = entries(ledger.store(), &later, PageLimit::default(), None)
        .await
        .expect("page");
    assert_eq!(page.items.first().map(|e| e.kind), Some(Post));

    assert!(ledger_divergences(&db.store()).await.is_empty());
    // An entry changed behind the ledger's back: the audit names the account.
    let client = db.pool.get().await.expect("client");
    let latest: i64 = client
        .query_one("SELECT entry_seq FROM accounts WHERE id = 2", &[])
        .await
        .expect("seq")
        .get(0);
    client
        .execute(
            "UPDATE entries SET balance_after = balance_after + 1 \
             WHERE account_id = 2 AND seq = $1",
            &[&latest],
        )
        .await
        .expect("tamper");
    let found = ledger_divergences(&db.store()).await;
    assert!(
        found.len() == 1 && found[0].contains("LatestEntryMatchesCounters"),
        "{found:?}"
    );
}
