//! The outbox and the feed: every committed change has its events, written by the transaction
//! that made it (nothing for what was refused or rolled back), each stream's positions are
//! gap-free, and a reader that follows the feed with its cursor sees every event exactly once,
//! even when transactions commit in another order than the one they took their ids in, where a
//! reader that remembers the highest id it saw skips events for good.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use saldo::domain::{OrderId, OrderItems, Reason, Reference, SaleId, Tags, Ttl};
use saldo::events::{self, Cursor, Filter};
use saldo::stock::{
    admin, build, sweeper, ReserveRequest, SaleRequest, StrategyConfig, StrategyName,
};
use saldo::Error;

use crate::harness::{test_db, TestDb};

fn request(order: &str, items: &[(i64, i64)], ttl: Ttl) -> ReserveRequest {
    ReserveRequest {
        order_id: OrderId::new(order).expect("order id"),
        items: OrderItems::new(items.iter().copied()).expect("items"),
        ttl,
        tags: saldo::domain::Tags::NONE,
    }
}

/// Every event of the feed, read page by page from the start, once every committed event is in
/// it (other tests' transactions on the same server may hold the horizon back a while: the
/// wait is bounded).
async fn whole_feed(db: &TestDb) -> Vec<events::Event> {
    let store = db.store();
    let client = db.pool.get().await.expect("client");
    let committed: i64 = client
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .expect("count")
        .get(0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut all = Vec::new();
    let mut after: Option<Cursor> = None;
    for _ in 0..100_000 {
        let page = events::read(&store, after, 100, &Filter::default())
            .await
            .expect("read");
        let next: Cursor = page.next.parse().expect("cursor");
        let empty = page.events.is_empty();
        all.extend(page.events);
        after = Some(next);
        if all.len() as i64 >= committed || tokio::time::Instant::now() > deadline {
            break;
        }
        if empty {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    all
}

/// Per stream, the positions its events have, in feed order.
fn positions(events: &[events::Event]) -> BTreeMap<String, Vec<i64>> {
    let mut streams: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for e in events {
        streams
            .entry(e.stream.clone())
            .or_default()
            .push(e.position);
    }
    streams
}

/// Positions increase by one within each stream (a product's start at its first write's
/// version, an order's at 1).
fn assert_gap_free(events: &[events::Event]) {
    for (stream, p) in positions(events) {
        assert!(
            p.windows(2).all(|w| w[1] == w[0] + 1),
            "stream {stream}: positions {p:?}"
        );
        if !stream.starts_with("product:") {
            assert_eq!(p.first(), Some(&1), "stream {stream}: {p:?}");
        }
    }
}

#[tokio::test]
async fn every_change_writes_its_events_and_a_refusal_none() {
    for name in StrategyName::ALL.iter().copied() {
        let db = test_db().await;
        let store = db.store();
        admin::set_count(&store, saldo::domain::ProductId::new(1).expect("id"), 3)
            .await
            .expect("count");
        let engine = build(name, store.clone(), &StrategyConfig::default());
        // An order's and a sale's reference travel with their first events.
        let cart = Tags {
            reference: Some(Reference::new("cart-1").expect("reference")),
            metadata: None,
        };
        engine
            .reserve(&ReserveRequest {
                tags: cart.clone(),
                ..request("o-1", &[(1, 2)], Ttl::default())
            })
            .await
            .expect("reserve");
        let refused = engine
            .reserve(&request("o-2", &[(1, 2)], Ttl::default()))
            .await;
        assert!(
            matches!(refused, Err(Error::InsufficientStock { .. })),
            "{name}"
        );
        let o1 = OrderId::new("o-1").expect("id");
        engine.confirm(&o1).await.expect("confirm");
        engine
            .reserve(&request(
                "o-3",
                &[(1, 1)],
                Ttl::from_millis(1).expect("ttl"),
            ))
            .await
            .expect("reserve");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(sweeper::sweep(&store).await.expect("sweep"), 1, "{name}");
        let reason = Reason::new("restock").expect("reason");
        admin::adjust(
            &store,
            saldo::domain::ProductId::new(1).expect("id"),
            2,
            &reason,
        )
        .await
        .expect("adjust");
        engine
            .sell(&SaleRequest {
                sale_id: SaleId::new("s-1").expect("id"),
                items: OrderItems::new([(1, 1)]).expect("items"),
                tags: cart.clone(),
            })
            .await
            .expect("sell");

        let feed = whole_feed(&db).await;
        for (stream, kind) in [
            ("order:o-1", "reservation.created"),
            ("sale:s-1", "sale.created"),
        ] {
            let event = feed
                .iter()
                .find(|e| e.stream == stream && e.kind == kind)
                .expect("event");
            assert_eq!(event.data["reference"], "cart-1", "{name}: {stream}");
        }
        let kinds: Vec<(&str, &str)> = feed
            .iter()
            .map(|e| (e.stream.as_str(), e.kind.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("product:1", "stock.changed"),
                ("product:1", "stock.changed"),
                ("order:o-1", "reservation.created"),
                ("product:1", "stock.changed"),
                ("order:o-1", "reservation.confirmed"),
                ("product:1", "stock.changed"),
                ("order:o-3", "reservation.created"),
                ("product:1", "stock.changed"),
                ("order:o-3", "reservation.expired"),
                ("product:1", "stock.changed"),
                ("product:1", "stock.changed"),
                ("sale:s-1", "sale.created"),
            ],
            "{name}"
        );
        assert!(
            !feed.iter().any(|e| e.stream == "order:o-2"),
            "{name}: a refusal wrote an event"
        );
        assert_gap_free(&feed);
        // The product's last event says what its row says.
        let last = feed
            .iter()
            .rev()
            .find(|e| e.stream == "product:1")
            .expect("product");
        let stock = admin::get(&store, saldo::domain::ProductId::new(1).expect("id"))
            .await
            .expect("stock");
        assert_eq!(last.position, stock.version, "{name}");
        assert_eq!(last.data["available"], stock.available, "{name}");
        assert_eq!(last.data["reserved"], stock.reserved, "{name}");
    }
}

/// A transaction that took its id first and commits last: the feed holds everything after it
/// back until it ends, then returns it first; a reader that follows "ids above the last one I
/// saw" has moved past it and never sees it.
#[tokio::test]
async fn the_feed_waits_for_a_late_commit_where_highest_id_readers_skip_it() {
    let db = test_db().await;
    let store = db.store();
    let product = saldo::domain::ProductId::new(1).expect("id");
    admin::set_count(&store, product, 10).await.expect("count");
    let start = whole_feed(&db).await.len();

    // A transaction takes its xid and its event id, and stays open.
    let mut slow = db.pool.get().await.expect("client");
    let slow = slow.transaction().await.expect("begin");
    slow.batch_execute(
        "INSERT INTO events (stream_type, stream_id, position, type, data) \
         VALUES ('sale', 'late', 1, 'sale.created', '{}')",
    )
    .await
    .expect("late event");

    // Meanwhile a reservation commits: its events take higher ids.
    let engine = build(
        StrategyName::Atomic,
        store.clone(),
        &StrategyConfig::default(),
    );
    engine
        .reserve(&request("o-fast", &[(1, 1)], Ttl::default()))
        .await
        .expect("reserve");

    // The naive reader sees the fast events and remembers the highest id.
    let client = db.pool.get().await.expect("client");
    let naive_seen: Vec<i64> = client
        .query("SELECT id FROM events ORDER BY id", &[])
        .await
        .expect("naive read")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let naive_high = *naive_seen.iter().max().expect("events");
    // saldo's reader returns nothing past the open transaction yet.
    let held = events::read(&store, None, 100, &Filter::default())
        .await
        .expect("read");
    assert_eq!(
        held.events.len(),
        start,
        "the horizon holds the fast events back"
    );

    slow.commit().await.expect("commit");
    let naive_after: Vec<i64> = client
        .query(
            "SELECT id FROM events WHERE id > $1 ORDER BY id",
            &[&naive_high],
        )
        .await
        .expect("naive read")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        naive_after.is_empty(),
        "the naive reader never sees the late event"
    );

    let feed = whole_feed(&db).await;
    assert_eq!(feed.len(), start + 3);
    assert_eq!(
        feed[start].stream, "sale:late",
        "the late commit comes first in the feed"
    );
    let ids: BTreeSet<i64> = feed.iter().map(|e| e.id).collect();
    assert_eq!(ids.len(), feed.len(), "no event twice");
}

/// Many writers at once, a follower reading as they go: at the end it has seen every committed
/// event exactly once, and every stream's positions are gap-free.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_sees_every_event_once_under_concurrent_writers() {
    let db = test_db().await;
    let store = db.store();
    for p in 1..=4 {
        admin::set_count(
            &store,
            saldo::domain::ProductId::new(p).expect("id"),
            100_000,
        )
        .await
        .expect("count");
    }
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let engine = build(
                if w % 2 == 0 {
                    StrategyName::Batched
                } else {
                    StrategyName::Atomic
                },
                store.clone(),
                &StrategyConfig::default(),
            );
            tokio::spawn(async move {
                for i in 0..40 {
                    let order = format!("w{w}-{i}");
                    let items = [(1 + (i % 4), 1), (1 + ((i + w) % 4), 1)];
                    engine
                        .reserve(&request(&order, &items, Ttl::default()))
                        .await
                        .expect("reserve");
                    if i % 3 == 0 {
                        engine
                            .confirm(&OrderId::new(order).expect("id"))
                            .await
                            .expect("confirm");
                    }
                }
            })
        })
        .collect();
    // The follower reads as the writers write; once they are done it is told how many events
    // committed, and stops when it has read that many (bounded in count and time).
    let (target_tx, mut target_rx) = tokio::sync::watch::channel(None::<usize>);
    let follower_store = store.clone();
    let follower = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut after: Option<Cursor> = None;
        for _ in 0..200_000 {
            let page = events::read(&follower_store, after, 50, &Filter::default())
                .await
                .expect("read");
            after = Some(page.next.parse().expect("cursor"));
            let empty = page.events.is_empty();
            seen.extend(page.events);
            let target = *target_rx.borrow_and_update();
            if target.is_some_and(|t| seen.len() >= t) {
                break;
            }
            if empty {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        seen
    });
    for w in writers {
        w.await.expect("writer");
    }
    let committed: i64 = db
        .pool
        .get()
        .await
        .expect("client")
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .expect("count")
        .get(0);
    target_tx
        .send(Some(usize::try_from(committed).expect("count")))
        .expect("follower alive");
    let seen = tokio::time::timeout(Duration::from_secs(120), follower)
        .await
        .expect("the follower caught up in time")
        .expect("follower");
    let ids: Vec<i64> = seen.iter().map(|e| e.id).collect();
    let unique: BTreeSet<i64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "an event seen twice");
    assert_eq!(ids.len() as i64, committed, "an event missed");
    assert_gap_free(&seen);
}

#[tokio::test]
async fn retention_prunes_the_oldest_and_an_old_cursor_is_refused() {
    let db = test_db().await;
    let store = db.store();
    let product = saldo::domain::ProductId::new(1).expect("id");
    for n in 1..=5 {
        admin::set_count(&store, product, n).await.expect("count");
    }
    let feed = whole_feed(&db).await;
    assert_eq!(feed.len(), 5);
    let first: Cursor = feed[0].cursor.parse().expect("cursor");
    // Nothing is old enough for a day's retention; everything for none.
    assert_eq!(
        events::prune(&store, Duration::from_secs(86_400))
            .await
            .expect("prune"),
        0
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        events::prune(&store, Duration::from_millis(1))
            .await
            .expect("prune"),
        5
    );
    match events::read(&store, Some(first), 10, &Filter::default()).await {
        Err(Error::CursorExpired { .. }) => {}
        other => panic!("an old cursor was not refused: {other:?}"),
    }
    // A reader starting afresh, and one at the last pruned event, go on from there.
    admin::set_count(&store, product, 6).await.expect("count");
    let fresh = whole_feed(&db).await;
    assert_eq!(fresh.len(), 1);
    assert_eq!(
        fresh[0].position,
        feed[4].position + 1,
        "positions go on after pruning"
    );
    let last: Cursor = feed[4].cursor.parse().expect("cursor");
    let page = events::read(&store, Some(last), 10, &Filter::default())
        .await
        .expect("read");
    assert_eq!(page.events.len(), 1);
}

/// The ledger's writes: an opening, a transfer, a hold posted, a hold voided, a hold expired by
/// the sweeper, each with `account.changed` for every account it changed and its transfer's
/// events; a refused transfer writes none. On both transfer strategies.
#[tokio::test]
async fn every_ledger_change_writes_its_events_and_a_refusal_none() {
    use saldo::domain::{AccountId, Amount, TransferId, TransferTimeout};
    use saldo::ledger::{Ledger, TransferRequest, TransferStrategy};
    use saldo::stock::batched::BatchedConfig;

    let acc = |n: i64| AccountId::new(n).expect("account");
    let tid = |s: &str| TransferId::new(s).expect("transfer id");
    let request = |id: &str, from: i64, to: i64, n: i64| TransferRequest {
        id: tid(id),
        from: acc(from),
        to: acc(to),
        amount: Amount::new(n).expect("amount"),
        tags: Default::default(),
    };
    for strategy in [TransferStrategy::Ordered, TransferStrategy::Batched] {
        let db = test_db().await;
        let store = db.store();
        let ledger = Ledger::serving(store.clone(), strategy, &BatchedConfig::default());
        ledger.open_account(acc(1), 1_000).await.expect("open 1");
        ledger.open_account(acc(2), 0).await.expect("open 2");
        ledger
            .transfer(strategy, &request("t-1", 1, 2, 100))
            .await
            .expect("transfer");
        let refused = ledger
            .transfer(strategy, &request("t-refused", 2, 1, 5_000))
            .await;
        assert!(refused.is_err(), "{strategy:?}: {refused:?}");
        let timeout = TransferTimeout::from_secs(60).expect("timeout");
        ledger
            .hold(&request("h-post", 1, 2, 50), timeout)
            .await
            .expect("hold");
        ledger.post(&tid("h-post"), None).await.expect("post");
        ledger
            .hold(&request("h-void", 1, 2, 30), timeout)
            .await
            .expect("hold");
        ledger.void(&tid("h-void")).await.expect("void");
        ledger
            .hold(&request("h-due", 1, 2, 20), timeout)
            .await
            .expect("hold");
        saldo::fixtures::make_holds_due(&db.pool, &["h-due"])
            .await
            .expect("due");
        assert_eq!(ledger.expire_due().await.expect("sweep"), 1);

        let feed = whole_feed(&db).await;
        let of = |stream: &str| -> Vec<&str> {
            feed.iter()
                .filter(|e| e.stream == stream)
                .map(|e| e.kind.as_str())
                .collect()
        };
        assert_eq!(of("transfer:t-1"), ["transfer.created"], "{strategy:?}");
        assert_eq!(
            of("transfer:h-post"),
            ["transfer.created", "transfer.posted"]
        );
        assert_eq!(
            of("transfer:h-void"),
            ["transfer.created", "transfer.voided"]
        );
        assert_eq!(
            of("transfer:h-due"),
            ["transfer.created", "transfer.expired"]
        );
        assert!(
            of("transfer:t-refused").is_empty(),
            "{strategy:?}: a refusal wrote"
        );
        // Account 1: opened, transfer, hold, post, hold, void, hold, expiry.
        assert_eq!(
            of("account:1").len(),
            8,
            "{strategy:?}: {:?}",
            of("account:1")
        );
        assert_gap_free(&feed);
        // The accounts' last events say what their rows say.
        for id in [1, 2] {
            let last = feed
                .iter()
                .rev()
                .find(|e| e.stream == format!("account:{id}"))
                .expect("account event");
            let account = ledger.account(acc(id)).await.expect("account");
            assert_eq!(last.data["balance"], account.balance, "{strategy:?}");
            assert_eq!(last.data["held"], account.held, "{strategy:?}");
            assert_eq!(last.data["pending_credits"], account.pending_credits);
        }
    }
}

/// Counters recorded on this thread (`metrics::with_local_recorder`), by name and labels.
#[derive(Default)]
struct Counting {
    counters: std::sync::Mutex<BTreeMap<String, std::sync::Arc<std::sync::atomic::AtomicU64>>>,
}

impl Counting {
    fn get(&self, key: &str) -> u64 {
        let counters = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        counters
            .get(key)
            .map_or(0, |c| c.load(std::sync::atomic::Ordering::Relaxed))
    }
}

impl metrics::Recorder for Counting {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        let mut counters = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        metrics::Counter::from_arc(counters.entry(name).or_default().clone())
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// One write transaction for the outbox tests: sets product 900's count to `available` (a
/// change of its own) and records an event at `position` (0 is refused by the events table's
/// CHECK, at COMMIT time, since the events travel with the COMMIT).
async fn write_with_event(db: &TestDb, available: i32, position: i64) -> Result<(), Error> {
    use saldo::store::outbox::{NewEvent, StreamType};
    use saldo::store::retry::in_transaction;

    let store = db.store();
    let writer = store.writer();
    in_transaction(
        &store.pool,
        &store.tx,
        saldo::Operation::Events,
        move |client| {
            saldo::write_tx!(client, writer => |tx| async {
                tx.client()
                    .execute(
                        "INSERT INTO stock (product_id, available) VALUES (900, $1) \
                         ON CONFLICT (product_id) DO UPDATE SET available = EXCLUDED.available",
                        &[&available],
                    )
                    .await?;
                tx.emit(NewEvent {
                    stream_type: StreamType::Product,
                    stream_id: "900".into(),
                    position,
                    kind: "stock.changed",
                    data: serde_json::json!({}),
                });
                Ok::<_, Error>(())
            })
        },
    )
    .await
}

async fn count(db: &TestDb, sql: &str) -> i64 {
    let client = db.pool.get().await.expect("client");
    client.query_one(sql, &[]).await.expect("count").get(0)
}

/// `saldo_events_written_total` counts what committed: events whose transaction then failed
/// count nothing, a committed one's count once.
#[test]
fn written_events_are_counted_once_committed() {
    let recorder = Counting::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let db = test_db().await;
            assert!(write_with_event(&db, 5, 0).await.is_err());
            write_with_event(&db, 5, 1).await.expect("committed");
            let rows = count(&db, "SELECT count(*) FROM events").await;
            assert_eq!(
                rows, 1,
                "the failed transaction's event is not in the table"
            );
        })
    });
    assert_eq!(
        recorder.get("saldo_events_written_total{stream_type=product}"),
        1
    );
}

/// The events are sent with the COMMIT, in one round trip: when the database refuses them, the
/// change they describe is not committed either (the INSERT went first and aborted the
/// transaction, so the COMMIT behind it rolled back), and the refusal is the answer.
#[tokio::test]
async fn events_the_database_refuses_take_their_change_with_them() {
    let db = test_db().await;
    let refused = write_with_event(&db, 7, 0).await;
    assert!(
        matches!(&refused, Err(Error::Database(e)) if e.code().map(|c| c.code()) == Some("23514")),
        "the CHECK's refusal is the answer: {refused:?}"
    );
    let stock = count(&db, "SELECT count(*) FROM stock WHERE product_id = 900").await;
    let events = count(&db, "SELECT count(*) FROM events").await;
    assert_eq!((stock, events), (0, 0), "neither the change nor its event");
    write_with_event(&db, 7, 1)
        .await
        .expect("a valid one commits");
    let stock = count(&db, "SELECT count(*) FROM stock WHERE product_id = 900").await;
    assert_eq!(stock, 1);
}

/// The feed's lag: an event committed while an older transaction is still open waits for it
/// (the sequencer's horizon), and its age shows; once that transaction ends and a pass runs,
/// the lag is back to zero (bounded wait: other tests' transactions hold the horizon too).
#[tokio::test]
async fn the_feed_lag_is_the_age_of_what_committed_and_waits() {
    let db = test_db().await;
    let store = db.store();
    let holder = db.pool.get().await.expect("client");
    holder
        .batch_execute("BEGIN; SELECT pg_current_xact_id();")
        .await
        .expect("an open transaction");
    admin::set_count(&store, saldo::domain::ProductId::new(1).expect("id"), 1)
        .await
        .expect("count");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    events::sequencer::pass(&store).await.expect("pass");
    let held = events::lag(&store).await.expect("lag");
    assert!(held >= Duration::from_secs(1), "{held:?}");
    holder.batch_execute("COMMIT").await.expect("commit");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        events::sequencer::pass(&store).await.expect("pass");
        let lag = events::lag(&store).await.expect("lag");
        if lag.is_zero() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "lag stays {lag:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
