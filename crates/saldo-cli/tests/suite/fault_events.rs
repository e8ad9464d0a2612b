//! The event feed under the fault suite's kills: a follower reads the feed through the library
//! with its cursor while 32 clients reserve and transfer and the service or its PostgreSQL is
//! killed -9 and restarted; at the end it has read every committed event exactly once, each
//! stream's positions without a gap, an event for every acknowledged operation and none for a
//! refused one, and every product's and account's last event saying what its row says.
//! (Used by `faults.rs`.)

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::tokio_postgres;
use saldo::db::{self, PoolOptions};
use saldo::events::{self, Cursor, Event, Filter};
use saldo::retry::TxOptions;
use saldo::Store;

/// Events per read.
const PAGE: usize = 500;
/// Reads at most, whatever happens (a read every 20 ms for 10 minutes).
const MAX_READS: usize = 30_000;
/// Pause after an empty page or a failed read (PostgreSQL down).
const PAUSE: Duration = Duration::from_millis(20);
/// How long the follower may take to catch up at the end.
const CATCH_UP: Duration = Duration::from_secs(60);

/// A reader of the feed across the faults (its own small pool; failed reads are retried).
pub(super) struct Follower {
    stop: Arc<AtomicBool>,
    /// How many events committed, once known: the follower stops when it has read them.
    committed: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<Vec<Event>>,
}

impl Follower {
    pub(super) fn start(db_url: &str) -> Follower {
        let options = PoolOptions {
            max_size: 2,
            ..PoolOptions::default()
        };
        let pool = db::connect(db_url, &options).expect("the follower's pool");
        let store = Store::new(pool, TxOptions::default());
        let stop = Arc::new(AtomicBool::new(false));
        let committed = Arc::new(AtomicUsize::new(0));
        let (stopped, target) = (stop.clone(), committed.clone());
        let task = tokio::spawn(async move { follow(store, stopped, target).await });
        Follower {
            stop,
            committed,
            task,
        }
    }

    /// Stops following once it has read `committed` events (or after [`CATCH_UP`]).
    pub(super) async fn finish(self, committed: usize) -> Vec<Event> {
        self.committed.store(committed, Ordering::SeqCst);
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("follower")
    }
}

async fn follow(store: Store, stop: Arc<AtomicBool>, committed: Arc<AtomicUsize>) -> Vec<Event> {
    let mut seen: Vec<Event> = Vec::new();
    let mut after: Option<Cursor> = None;
    let mut stopped_at = None;
    for _ in 0..MAX_READS {
        match events::read(&store, after, PAGE, &Filter::default()).await {
            Ok(page) => {
                after = Some(page.next.parse().expect("cursor"));
                let empty = page.events.is_empty();
                seen.extend(page.events);
                if empty {
                    tokio::time::sleep(PAUSE).await;
                }
            }
            // PostgreSQL is down or restarting: the cursor is kept, the read tried again.
            Err(_) => tokio::time::sleep(PAUSE * 5).await,
        }
        if stop.load(Ordering::SeqCst) {
            let since = *stopped_at.get_or_insert_with(tokio::time::Instant::now);
            if seen.len() >= committed.load(Ordering::SeqCst) || since.elapsed() > CATCH_UP {
                break;
            }
        }
    }
    seen
}

/// What one operation of the load became, as the books check decided it.
pub(super) enum Done<'a> {
    Reservation { order: &'a str, applied: bool },
    Transfer { id: &'a str, applied: bool },
}

/// The follower's events against the database: see the module header.
pub(super) async fn check(db: &tokio_postgres::Client, seen: &[Event], done: &[Done<'_>]) {
    let committed: i64 = db
        .query_one("SELECT count(*) FROM events", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(seen.len() as i64, committed, "events missed or read twice");
    for pair in seen.windows(2) {
        assert_eq!(pair[1].seq, pair[0].seq + 1, "the feed skipped or repeated");
    }
    let mut streams: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for e in seen {
        streams.entry(e.stream.as_str()).or_default().push(e);
    }
    for (stream, events) in &streams {
        let positions: Vec<i64> = events.iter().map(|e| e.position).collect();
        assert!(
            positions.windows(2).all(|w| w[1] == w[0] + 1),
            "{stream}: positions {positions:?}"
        );
        if !stream.starts_with("product:") {
            assert_eq!(positions.first(), Some(&1), "{stream}: {positions:?}");
        }
    }
    let kinds = |stream: String| -> Vec<&str> {
        streams
            .get(stream.as_str())
            .map(|es| es.iter().map(|e| e.kind.as_str()).collect())
            .unwrap_or_default()
    };
    for op in done {
        match op {
            Done::Reservation { order, applied } => {
                let want: &[&str] = if *applied {
                    &["reservation.created"]
                } else {
                    &[]
                };
                assert_eq!(kinds(format!("order:{order}")), want, "order {order}");
            }
            Done::Transfer { id, applied } => {
                let want: &[&str] = if *applied { &["transfer.created"] } else { &[] };
                assert_eq!(kinds(format!("transfer:{id}")), want, "transfer {id}");
            }
        }
    }
    check_last_states(db, &streams).await;
    eprintln!("the follower read {} events exactly once", seen.len());
}

/// Every product's and account's last event says what its row says.
async fn check_last_states(db: &tokio_postgres::Client, streams: &BTreeMap<&str, Vec<&Event>>) {
    let last = |stream: String| {
        streams
            .get(stream.as_str())
            .and_then(|es| es.last().copied())
    };
    let products = db
        .query(
            "SELECT product_id, available, reserved, version FROM stock",
            &[],
        )
        .await
        .expect("stock");
    for row in products {
        let (id, available, reserved, version): (i64, i32, i32, i64) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        let e = last(format!("product:{id}")).expect("a product's events");
        assert_eq!(
            (
                e.data["available"].as_i64(),
                e.data["reserved"].as_i64(),
                e.position
            ),
            (Some(available.into()), Some(reserved.into()), version),
            "product {id}"
        );
    }
    let accounts: HashMap<i64, i64> = db
        .query("SELECT id, balance FROM accounts WHERE id > 0", &[])
        .await
        .expect("accounts")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for (id, balance) in accounts {
        let e = last(format!("account:{id}")).expect("an account's events");
        assert_eq!(e.data["balance"].as_i64(), Some(balance), "account {id}");
    }
}
