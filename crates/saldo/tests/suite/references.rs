//! References and metadata through the library (issue 26, part 2): a transfer, a hold and a
//! group (its own and each leg's) store the caller's reference and metadata with the row and
//! answer them, with every transfer strategy; a replay under the same id with another reference
//! or metadata is the idempotency conflict and writes nothing; values past their bounds are
//! typed input errors. An account opens with its own reference and metadata, answered by
//! every read of it. The transfer search (`saldo::listing::transfers::transfers`) finds transfers
//! by reference, account and status, combined, a page at a time, and refuses a cursor of other
//! filters or another list.

use std::collections::BTreeMap;

use saldo::domain::{
    BalanceLimits, GroupId, Metadata, Reference, Tags, TransferStatus, TransferTimeout,
    MAX_METADATA_KEYS, MAX_REFERENCE_LEN,
};
use saldo::ledger::{
    AccountRequest, Denomination, GroupRequest, Ledger, LinkedTransfer, TransferRequest,
    TransferStrategy,
};
use saldo::listing::transfers::{transfers, TransferFilter};
use saldo::listing::{self, Cursor, ListKind, PageLimit};
use saldo::stock::batched::BatchedConfig;
use saldo::stock::Store;
use saldo::{Error, InputError};

use super::contract::tags;
use super::harness::{test_db, TestDb};
use super::ledger::{acc, request, tid};

fn tagged(id: &str, from: i64, to: i64, n: i64, t: &Tags) -> TransferRequest {
    TransferRequest {
        tags: t.clone(),
        ..request(id, from, to, n)
    }
}

async fn journal_rows(db: &TestDb) -> i64 {
    let client = db.pool.get().await.expect("client");
    client
        .query_one("SELECT count(*) FROM transfers", &[])
        .await
        .expect("count")
        .get(0)
}

/// A transfer, a hold (posted later) and a group carry their reference and metadata, stored
/// and read back, with every strategy.
#[tokio::test]
async fn transfers_holds_and_groups_keep_their_reference_and_metadata() {
    let db = test_db().await;
    let timeout = TransferTimeout::from_secs(60).expect("timeout");
    for (k, &strategy) in TransferStrategy::ALL.iter().enumerate() {
        let (a, b) = (10 * k as i64 + 1, 10 * k as i64 + 2);
        let ledger = Ledger::serving(db.store(), strategy, &BatchedConfig::default());
        ledger.open_account(acc(a), 1_000).await.expect("open a");
        ledger.open_account(acc(b), 0).await.expect("open b");
        let id = |s: &str| format!("{s}-{strategy}");
        let t1 = tags("pay_1", &[("invoice", "INV-1"), ("provider", "acme")]);
        let t = ledger
            .transfer(strategy, &tagged(&id("t"), a, b, 10, &t1))
            .await
            .expect("transfer");
        assert_eq!(t.tags, t1);
        assert_eq!(
            ledger
                .get_transfer(&tid(&id("t")))
                .await
                .expect("read")
                .tags,
            t1
        );
        let t2 = tags("cart 7 / hold", &[("cart", "7")]);
        let h = ledger
            .hold(&tagged(&id("h"), a, b, 20, &t2), timeout)
            .await
            .expect("hold");
        assert_eq!(h.tags, t2);
        let posted = ledger.post(&tid(&id("h")), None).await.expect("post");
        assert_eq!(posted.tags, t2, "a post keeps the hold's tags");
        let gt = tags("exchange-1", &[("desk", "fx")]);
        let leg = tags("leg-1", &[]);
        let group = GroupRequest {
            id: GroupId::new(id("g")).expect("group"),
            transfers: vec![
                LinkedTransfer {
                    transfer: tagged(&id("g0"), a, b, 1, &leg),
                    pending: None,
                },
                LinkedTransfer {
                    transfer: request(&id("g1"), a, b, 2),
                    pending: Some(timeout),
                },
            ],
            tags: gt.clone(),
        };
        let applied = ledger.transfer_group(&group).await.expect("group");
        assert_eq!(applied.tags, gt);
        assert_eq!(applied.transfers[0].tags, leg);
        assert_eq!(applied.transfers[1].tags, Tags::NONE);
        let again = ledger.transfer_group(&group).await.expect("group replay");
        assert!(again.replayed);
        assert_eq!((again.tags, &again.transfers[0].tags), (gt, &leg));
        let replay = ledger
            .transfer(strategy, &tagged(&id("t"), a, b, 10, &t1))
            .await
            .expect("replay");
        assert!(replay.replayed);
        assert_eq!(replay.tags, t1);
    }
}

/// The same id with another reference or other metadata (or none where there was one) is
/// the idempotency conflict, as another amount is; nothing is written.
#[tokio::test]
async fn a_replay_with_other_tags_conflicts_and_writes_nothing() {
    let db = test_db().await;
    let timeout = TransferTimeout::from_secs(60).expect("timeout");
    for (k, &strategy) in TransferStrategy::ALL.iter().enumerate() {
        let (a, b) = (10 * k as i64 + 1, 10 * k as i64 + 2);
        let ledger = Ledger::serving(db.store(), strategy, &BatchedConfig::default());
        ledger.open_account(acc(a), 1_000).await.expect("open a");
        ledger.open_account(acc(b), 0).await.expect("open b");
        let id = |s: &str| format!("{s}-{strategy}");
        let original = tags("pay_1", &[("invoice", "INV-1")]);
        ledger
            .transfer(strategy, &tagged(&id("t"), a, b, 10, &original))
            .await
            .expect("transfer");
        ledger
            .hold(&tagged(&id("h"), a, b, 10, &original), timeout)
            .await
            .expect("hold");
        let rows = journal_rows(&db).await;
        let others = [
            tags("pay_2", &[("invoice", "INV-1")]),
            tags("pay_1", &[("invoice", "INV-2")]),
            tags("pay_1", &[("invoice", "INV-1"), ("extra", "x")]),
            Tags::NONE,
        ];
        for other in &others {
            let refused = ledger
                .transfer(strategy, &tagged(&id("t"), a, b, 10, other))
                .await;
            assert!(
                matches!(&refused, Err(Error::TransferConflict(_))),
                "{other:?}: {refused:?}"
            );
            let refused = ledger
                .hold(&tagged(&id("h"), a, b, 10, other), timeout)
                .await;
            assert!(
                matches!(&refused, Err(Error::TransferConflict(_))),
                "{other:?}: {refused:?}"
            );
        }
        let group = |t: &Tags, leg: &Tags| GroupRequest {
            id: GroupId::new(id("g")).expect("group"),
            transfers: vec![LinkedTransfer {
                transfer: tagged(&id("g0"), a, b, 1, leg),
                pending: None,
            }],
            tags: t.clone(),
        };
        ledger
            .transfer_group(&group(&original, &original))
            .await
            .expect("group");
        let rows_after_group = journal_rows(&db).await;
        assert_eq!(rows_after_group, rows + 1);
        for (g, leg) in [(&others[0], &original), (&original, &others[1])] {
            let refused = ledger.transfer_group(&group(g, leg)).await;
            assert!(
                matches!(&refused, Err(Error::GroupConflict(_))),
                "{refused:?}"
            );
        }
        assert_eq!(journal_rows(&db).await, rows_after_group, "nothing written");
    }
}

/// Past their bounds, a reference and metadata are typed input errors; the schema's CHECKs
/// refuse what bypasses the types.
#[tokio::test]
async fn bounds_are_typed_input_errors_and_checks() {
    assert_eq!(
        Reference::new("x".repeat(MAX_REFERENCE_LEN + 1)),
        Err(InputError::ReferenceLength)
    );
    assert_eq!(
        Reference::new("a\u{0}b"),
        Err(InputError::ReferenceControlCharacter)
    );
    let many: BTreeMap<String, String> = (0..=MAX_METADATA_KEYS)
        .map(|i| (format!("k{i}"), "v".into()))
        .collect();
    assert!(matches!(
        Metadata::new(many),
        Err(InputError::MetadataInvalid(_))
    ));
    assert!(matches!(
        Metadata::from_json(serde_json::json!({"n": 1})),
        Err(InputError::MetadataInvalid(_))
    ));
    assert!(matches!(
        Metadata::from_json(serde_json::json!(["a"])),
        Err(InputError::MetadataInvalid(_))
    ));
    let db = test_db().await;
    let client = db.pool.get().await.expect("client");
    let refused = client
        .execute(
            "INSERT INTO transfer_groups (id, size, reference) VALUES ('g', 1, '')",
            &[],
        )
        .await;
    assert!(refused.is_err(), "an empty reference passes the CHECK");
    let refused = client
        .execute(
            "INSERT INTO transfer_groups (id, size, metadata) VALUES ('g', 1, '[1]'::jsonb)",
            &[],
        )
        .await;
    assert!(refused.is_err(), "a non-object metadata passes the CHECK");
}

fn reference(r: &str) -> Option<Reference> {
    Some(Reference::new(r).expect("reference"))
}

/// Every page of a search from the start, `limit` rows at most each: the ids of each page.
async fn pages(store: &Store, filter: &TransferFilter, limit: i64) -> Vec<Vec<String>> {
    let limit = PageLimit::new(limit).expect("limit");
    let (mut out, mut cursor) = (Vec::new(), None);
    loop {
        let page = transfers(store, filter, limit, cursor.as_ref())
            .await
            .expect("search");
        out.push(
            page.items
                .iter()
                .map(|t| t.id.as_str().to_owned())
                .collect(),
        );
        match page.next {
            Some(next) => cursor = Some(next),
            None => return out,
        }
        assert!(out.len() < 100, "the search does not end: {out:?}");
    }
}

/// Every id a search finds, in page order.
async fn found(store: &Store, filter: &TransferFilter) -> Vec<String> {
    pages(store, filter, 100).await.concat()
}

/// Accounts 1 (1,000 opened), 2 and 3, and six transfers: `x01` 1→2, `x02` 2→3, `x03` 1→3
/// (no reference), `x04` a hold 1→2 still pending, `x05` a hold 3→1 voided, `x06` 1→3; all
/// but `x03` and `x05` with reference `inv-1` (`x05`: `inv-2`). Ids sort the same in every
/// collation (`opening:1`, the opening, first).
async fn journal(ledger: &Ledger) {
    ledger.open_account(acc(1), 1_000).await.expect("open 1");
    ledger.open_account(acc(2), 0).await.expect("open 2");
    ledger.open_account(acc(3), 0).await.expect("open 3");
    let inv = |r: &str| Tags {
        reference: reference(r),
        metadata: None,
    };
    let strategy = TransferStrategy::Ordered;
    let timeout = TransferTimeout::from_secs(600).expect("timeout");
    ledger
        .transfer(strategy, &tagged("x01", 1, 2, 10, &inv("inv-1")))
        .await
        .expect("x01");
    ledger
        .transfer(strategy, &tagged("x02", 2, 3, 5, &inv("inv-1")))
        .await
        .expect("x02");
    ledger
        .transfer(strategy, &request("x03", 1, 3, 10))
        .await
        .expect("x03");
    ledger
        .hold(&tagged("x04", 1, 2, 20, &inv("inv-1")), timeout)
        .await
        .expect("x04");
    ledger
        .hold(&tagged("x05", 3, 1, 5, &inv("inv-2")), timeout)
        .await
        .expect("x05");
    ledger.void(&tid("x05")).await.expect("void x05");
    ledger
        .transfer(strategy, &tagged("x06", 1, 3, 1, &inv("inv-1")))
        .await
        .expect("x06");
}

/// Each filter alone and combined, with the rows they keep; the answers are the transfers as a
/// read answers them (tags, status).
#[tokio::test]
async fn the_search_finds_transfers_by_reference_account_and_status_combined() {
    let db = test_db().await;
    let store = db.store();
    let ledger = Ledger::new(store.clone());
    journal(&ledger).await;
    let by = |reference: Option<Reference>, account: Option<i64>, status| TransferFilter {
        reference,
        account: account.map(acc),
        status,
    };
    use TransferStatus::{Expired, Pending, Posted, Voided};
    for (filter, expected) in [
        (
            by(reference("inv-1"), None, None),
            &["x01", "x02", "x04", "x06"][..],
        ),
        (by(reference("inv-2"), None, None), &["x05"]),
        (by(reference("inv-3"), None, None), &[]),
        (by(None, Some(3), None), &["x02", "x03", "x05", "x06"]),
        (by(None, Some(2), None), &["x01", "x02", "x04"]),
        (by(None, None, Some(Pending)), &["x04"]),
        (by(None, None, Some(Voided)), &["x05"]),
        (by(None, None, Some(Expired)), &[]),
        (
            by(None, Some(1), Some(Posted)),
            &["opening:1", "x01", "x03", "x06"],
        ),
        (
            by(reference("inv-1"), Some(1), Some(Posted)),
            &["x01", "x06"],
        ),
        (by(reference("inv-1"), Some(3), None), &["x02", "x06"]),
        (by(reference("inv-2"), Some(2), None), &[]),
        (
            by(None, None, None),
            &["opening:1", "x01", "x02", "x03", "x04", "x05", "x06"],
        ),
    ] {
        assert_eq!(found(&store, &filter).await, expected, "{filter:?}");
    }
    let page = transfers(
        &store,
        &by(reference("inv-1"), None, Some(Pending)),
        PageLimit::default(),
        None,
    )
    .await
    .expect("search");
    assert_eq!(page.items.len(), 1);
    let hold = &page.items[0];
    assert_eq!((hold.id.as_str(), hold.status), ("x04", Pending));
    assert_eq!(hold.tags.reference, reference("inv-1"));
    assert_eq!(hold.from, acc(1));

    // A hold past its deadline reads `expired` (as GET /v1/transfers/{id} answers it) before
    // anything settled it: the search says so too.
    let client = db.pool.get().await.expect("client");
    client
        .execute(
            "UPDATE transfers SET expires_at = now() - interval '1 second' WHERE id = 'x04'",
            &[],
        )
        .await
        .expect("past its deadline");
    assert!(found(&store, &by(None, None, Some(Pending)))
        .await
        .is_empty());
    let expired = transfers(
        &store,
        &by(None, Some(2), Some(Expired)),
        PageLimit::default(),
        None,
    )
    .await
    .expect("search");
    let ids: Vec<(&str, TransferStatus)> = expired
        .items
        .iter()
        .map(|t| (t.id.as_str(), t.status))
        .collect();
    assert_eq!(ids, [("x04", Expired)]);
}

/// Pages of `limit` rows follow one another with their cursors, each transfer once; a cursor
/// is bound to its list and to its filters: one of other filters or of another list is
/// refused as `CursorInvalid`, and reads nothing.
#[tokio::test]
async fn the_search_pages_with_its_cursor_and_refuses_one_of_other_filters() {
    let db = test_db().await;
    let store = db.store();
    journal(&Ledger::new(store.clone())).await;
    let inv1 = TransferFilter {
        reference: reference("inv-1"),
        ..TransferFilter::default()
    };
    assert_eq!(
        pages(&store, &inv1, 1).await,
        [vec!["x01"], vec!["x02"], vec!["x04"], vec!["x06"]]
    );
    let account3 = TransferFilter {
        account: Some(acc(3)),
        ..TransferFilter::default()
    };
    assert_eq!(
        pages(&store, &account3, 3).await,
        [vec!["x02", "x03", "x05"], vec!["x06"]]
    );
    // A filter checked per row: pages may come back short, never with a transfer twice.
    let posted_inv1 = TransferFilter {
        status: Some(TransferStatus::Posted),
        ..inv1.clone()
    };
    assert_eq!(
        pages(&store, &posted_inv1, 1).await.concat(),
        ["x01", "x02", "x06"]
    );

    let one = PageLimit::new(1).expect("limit");
    let first = transfers(&store, &inv1, one, None).await.expect("page 1");
    let cursor = first.next.expect("more pages");
    assert_eq!(cursor.kind(), ListKind::Transfers);
    // The same position under other filters, or no filter, is refused.
    for other in [
        TransferFilter {
            reference: reference("inv-2"),
            ..TransferFilter::default()
        },
        posted_inv1.clone(),
        TransferFilter::default(),
    ] {
        let refused = transfers(&store, &other, one, Some(&cursor)).await;
        assert!(
            matches!(
                refused,
                Err(Error::Input(InputError::CursorInvalid {
                    list: "transfers"
                }))
            ),
            "{other:?}: {refused:?}"
        );
    }
    // Another list's cursor, as a value or as text, is refused too.
    let products = Cursor::Numeric(ListKind::Products, 5);
    assert!(matches!(
        transfers(&store, &inv1, one, Some(&products)).await,
        Err(Error::Input(InputError::CursorInvalid { .. }))
    ));
    for text in [products.to_string(), "o0000000000000007x01".to_owned()] {
        assert!(Cursor::parse(ListKind::Transfers, &text).is_err(), "{text}");
    }
    // Its own text parses back to the same position.
    let again = Cursor::parse(ListKind::Transfers, &cursor.to_string()).expect("parse");
    let second = transfers(&store, &inv1, one, Some(&again))
        .await
        .expect("page 2");
    assert_eq!(second.items[0].id.as_str(), "x02");
    assert!(
        Cursor::parse(ListKind::Accounts, &cursor.to_string()).is_err(),
        "a transfer cursor is no account cursor"
    );
}

/// An account opens with its reference and metadata, and every read answers them: the open,
/// the account, the account list. Opening it again (with other tags or none) is `AccountExists`
/// and changes nothing. Bad metadata never becomes a value, and the schema refuses what
/// bypasses the types: nothing is written.
#[tokio::test]
async fn an_account_keeps_its_reference_and_metadata() {
    let db = test_db().await;
    let store = db.store();
    let ledger = Ledger::new(store.clone());
    let t = tags("cust-42", &[("segment", "retail"), ("crm", "c-9")]);
    let open = |id: i64, tags: Tags| AccountRequest {
        id: acc(id),
        opening_balance: 100,
        limits: BalanceLimits::default(),
        denomination: Denomination::DEFAULT,
        tags,
    };
    let opened = ledger.open(&open(7, t.clone())).await.expect("open");
    assert_eq!((opened.tags.clone(), opened.balance), (t.clone(), 100));
    assert_eq!(ledger.account(acc(7)).await.expect("read").tags, t);
    ledger.open_account(acc(8), 0).await.expect("open untagged");
    assert_eq!(ledger.account(acc(8)).await.expect("read").tags, Tags::NONE);
    let listed = listing::ledger::accounts(&store, PageLimit::default(), None)
        .await
        .expect("list");
    let listed: Vec<(i64, Tags)> = listed
        .items
        .into_iter()
        .map(|a| (a.id.get(), a.tags))
        .collect();
    assert_eq!(listed, [(7, t.clone()), (8, Tags::NONE)]);
    let again = ledger.open(&open(7, tags("cust-43", &[]))).await;
    assert!(
        matches!(again, Err(Error::AccountExists(a)) if a == acc(7)),
        "{again:?}"
    );
    assert_eq!(ledger.account(acc(7)).await.expect("read").tags, t);

    // Bad metadata is a typed error before anything runs; the CHECKs refuse the rest.
    assert!(matches!(
        Metadata::from_json(serde_json::json!({"n": 1})),
        Err(InputError::MetadataInvalid(_))
    ));
    let client = db.pool.get().await.expect("client");
    for bad in [
        "INSERT INTO accounts (id, balance, reference) VALUES (9, 0, '')",
        "INSERT INTO accounts (id, balance, metadata) VALUES (9, 0, '[1]'::jsonb)",
    ] {
        assert!(client.execute(bad, &[]).await.is_err(), "{bad}");
    }
    assert!(matches!(
        ledger.account(acc(9)).await,
        Err(Error::UnknownAccount(_))
    ));
}
