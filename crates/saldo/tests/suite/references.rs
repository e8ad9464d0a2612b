//! References and metadata through the library (issue 26, part 2): a transfer, a hold and a
//! group (its own and each leg's) store the caller's reference and metadata with the row and
//! answer them, with every transfer strategy; a replay under the same id with another reference
//! or metadata is the idempotency conflict and writes nothing; values past their bounds are
//! typed input errors.

use std::collections::BTreeMap;

use saldo::domain::{
    GroupId, Metadata, Reference, Tags, TransferTimeout, MAX_METADATA_KEYS, MAX_REFERENCE_LEN,
};
use saldo::ledger::{GroupRequest, Ledger, LinkedTransfer, TransferRequest, TransferStrategy};
use saldo::stock::batched::BatchedConfig;
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
