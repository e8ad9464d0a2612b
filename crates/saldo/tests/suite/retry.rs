//! The transaction retry against a real database: which SQLSTATEs rerun the whole transaction,
//! how many times, what the caller sees when attempts run out, and that the per-transaction
//! timeouts are set. Bodies count their own runs, so "not retried" is observed, not assumed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metrics::{Key, KeyName, Metadata, SharedString, Unit};
use saldo::domain::AccountId;
use saldo::retry::{in_transaction, RetryPolicy, TxOptions, TxStats, DEFAULT_MAX_ATTEMPTS};
use saldo::telemetry::{TX_GIVEUPS, TX_RETRIES};
use saldo::Error;

use crate::harness::{test_db, TestDb};

/// Raises `sqlstate` from inside the transaction, as PostgreSQL would.
fn raise(sqlstate: &str) -> String {
    format!("DO $$ BEGIN RAISE EXCEPTION 'test' USING ERRCODE = '{sqlstate}'; END $$")
}

/// Runs a body that executes `sql` (and counts its runs) on the first `failing` runs, then
/// succeeds; returns the result and the number of runs.
async fn run(
    db: &TestDb,
    options: &TxOptions,
    sql: &str,
    failing: u32,
) -> (Result<u32, Error>, u32) {
    let runs = Arc::new(AtomicU32::new(0));
    let result = in_transaction(&db.pool, options, saldo::Operation::Lab, |client| {
        let runs = runs.clone();
        saldo::tx_body!(client => async move {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            if n <= failing {
                client.batch_execute(sql).await?;
            }
            Ok(n)
        })
    })
    .await;
    (result, runs.load(Ordering::SeqCst))
}

#[tokio::test]
async fn deadlock_and_serialization_failure_rerun_up_to_the_limit() {
    let db = test_db().await;
    for sqlstate in ["40P01", "40001"] {
        let stats = TxStats::new();
        let options = TxOptions::default().with_stats(stats.clone());
        let (result, runs) = run(&db, &options, &raise(sqlstate), u32::MAX).await;
        assert_eq!(runs, DEFAULT_MAX_ATTEMPTS, "{sqlstate}");
        match result {
            Err(Error::RetriesExhausted {
                attempts,
                sqlstate: last,
                ..
            }) => assert_eq!((attempts, last.as_str()), (DEFAULT_MAX_ATTEMPTS, sqlstate)),
            other => panic!("{sqlstate}: {other:?}"),
        }
        assert_eq!(stats.retries(), u64::from(DEFAULT_MAX_ATTEMPTS - 1));
        assert_eq!(stats.giveups(), 1);
        let by_state = if sqlstate == "40P01" {
            stats.deadlock_retries()
        } else {
            stats.serialization_retries()
        };
        assert_eq!(
            by_state,
            stats.retries(),
            "{sqlstate} counted under its own SQLSTATE"
        );

        // A transient failure is absorbed: the caller sees the later attempt's success.
        let (result, runs) = run(&db, &options, &raise(sqlstate), 2).await;
        assert_eq!((result.expect("third attempt succeeds"), runs), (3, 3));
    }
}

#[tokio::test]
async fn other_errors_are_never_retried() {
    let db = test_db().await;
    let stats = TxStats::new();
    let options = TxOptions::default()
        .with_retry(RetryPolicy::default().with_max_attempts(8))
        .with_stats(stats.clone());
    // Unique violation, syntax error, division by zero, lock timeout, CHECK violation.
    for sqlstate in ["23505", "42601", "22012", "55P03", "23514"] {
        let (result, runs) = run(&db, &options, &raise(sqlstate), u32::MAX).await;
        assert_eq!(runs, 1, "{sqlstate} was retried");
        let err = result.expect_err("fails");
        assert_eq!(err.sqlstate().map(|s| s.code()), Some(sqlstate));
        assert!(!err.is_retryable());
    }
    // A business refusal from the body: returned as is, after one run.
    let runs = AtomicU32::new(0);
    let result: Result<(), Error> =
        in_transaction(&db.pool, &options, saldo::Operation::Lab, |client| {
            runs.fetch_add(1, Ordering::SeqCst);
            saldo::tx_body!(client => async {
                Err(Error::UnknownAccount(AccountId::new(1).expect("id")))
            })
        })
        .await;
    assert!(matches!(result, Err(Error::UnknownAccount(_))));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(stats.retries(), 0);
    assert_eq!(stats.giveups(), 0);
}

#[tokio::test]
async fn disabled_retry_surfaces_the_first_deadlock() {
    let db = test_db().await;
    let options = TxOptions::default().with_retry(RetryPolicy::none());
    let (result, runs) = run(&db, &options, &raise("40P01"), u32::MAX).await;
    assert_eq!(runs, 1);
    let err = result.expect_err("fails");
    assert_eq!(err.sqlstate().map(|s| s.code()), Some("40P01"));
    assert!(matches!(err, Error::RetriesExhausted { attempts: 1, .. }));
}

#[tokio::test]
async fn attempts_are_bounded_whatever_the_configuration() {
    let db = test_db().await;
    let options = TxOptions::default().with_retry(
        RetryPolicy::default()
            .with_max_attempts(u32::MAX)
            .with_backoff_ms(0, 0),
    );
    let (_, runs) = run(&db, &options, &raise("40001"), u32::MAX).await;
    assert_eq!(runs, saldo::retry::MAX_ATTEMPTS_LIMIT);
    let options = TxOptions::default().with_retry(RetryPolicy::default().with_max_attempts(0));
    let (_, runs) = run(&db, &options, &raise("40001"), u32::MAX).await;
    assert_eq!(runs, 1, "zero attempts still runs once");
}

/// The value of the setting `name` inside a transaction run with `options`.
async fn setting_in_transaction(db: &TestDb, options: &TxOptions, name: &'static str) -> String {
    in_transaction(&db.pool, options, saldo::Operation::Lab, |client| {
        saldo::tx_body!(client => async {
            Ok(client.query_one(&format!("SHOW {name}"), &[]).await?.get::<_, String>(0))
        })
    })
    .await
    .expect("show")
}

#[tokio::test]
async fn timeouts_are_set_per_transaction() {
    let db = test_db().await;
    let show = |options: TxOptions| {
        let db = &db;
        async move {
            (
                setting_in_transaction(db, &options, "lock_timeout").await,
                setting_in_transaction(db, &options, "statement_timeout").await,
            )
        }
    };
    assert_eq!(
        show(TxOptions::default()).await,
        ("5s".to_owned(), "10s".to_owned())
    );
    let custom = TxOptions::default()
        .with_lock_timeout_ms(1_500)
        .with_statement_timeout_ms(2_500);
    assert_eq!(
        show(custom).await,
        ("1500ms".to_owned(), "2500ms".to_owned())
    );
    // SET LOCAL: the pooled connection keeps the server default afterwards.
    let client = db.pool.get().await.expect("client");
    let lock: String = client
        .query_one("SHOW lock_timeout", &[])
        .await
        .expect("show")
        .get(0);
    assert_eq!(lock, "0");
}

#[tokio::test]
async fn index_paths_only_is_set_for_its_transaction_alone() {
    let db = test_db().await;
    let seqscan = |options: TxOptions| {
        let db = &db;
        async move { setting_in_transaction(db, &options, "enable_seqscan").await }
    };
    assert_eq!(seqscan(TxOptions::default()).await, "on");
    assert_eq!(
        seqscan(TxOptions::default().with_index_paths_only()).await,
        "off"
    );
    // SET LOCAL: the pooled connection keeps the server default afterwards.
    assert_eq!(seqscan(TxOptions::default()).await, "on");
}

/// How long the first attempt waits for the second caller to queue for the connection.
const QUEUE_WAIT_LIMIT: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_queues_for_the_pool_behind_waiting_callers() {
    let db = test_db().await;
    // One connection: a failed attempt hands it back to the pool (before its backoff sleep) and
    // the rerun checks out a connection again, so a caller already queued goes first. Had the
    // retrying caller kept its connection, its rerun would come before the queued caller.
    let pool = db.new_pool(1);
    let log: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let options = TxOptions::default();
    let first = {
        let (pool, log, options) = (pool.clone(), log.clone(), options.clone());
        tokio::spawn(async move {
            let runs = AtomicU32::new(0);
            in_transaction(&pool, &options, saldo::Operation::Lab, |client| {
                let first_run = runs.fetch_add(1, Ordering::SeqCst) == 0;
                let (pool, log) = (pool.clone(), log.clone());
                saldo::tx_body!(client => async move {
                    if !first_run {
                        log.lock().expect("log").push("retry");
                        return Ok(());
                    }
                    log.lock().expect("log").push("first");
                    // Fail only once the other caller is queued for the connection.
                    let started = Instant::now();
                    while pool.status().waiting == 0 && started.elapsed() < QUEUE_WAIT_LIMIT {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    client.batch_execute(&raise("40001")).await?;
                    Ok(())
                })
            })
            .await
        })
    };
    while log.lock().expect("log").is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let log2 = log.clone();
    in_transaction(&pool, &options, saldo::Operation::Lab, |client| {
        let log = log2.clone();
        saldo::tx_body!(client => async move {
            log.lock().expect("log").push("other");
            Ok(())
        })
    })
    .await
    .expect("other caller");
    first.await.expect("join").expect("the retry succeeds");
    assert_eq!(*log.lock().expect("log"), ["first", "other", "retry"]);
}

/// Counts every counter increment by (metric name, sqlstate label).
#[derive(Default)]
struct CountingRecorder {
    counts: Arc<Mutex<BTreeMap<(String, String), u64>>>,
}

struct CountingCell {
    key: (String, String),
    counts: Arc<Mutex<BTreeMap<(String, String), u64>>>,
}

impl metrics::CounterFn for CountingCell {
    fn increment(&self, value: u64) {
        *self
            .counts
            .lock()
            .expect("counts")
            .entry(self.key.clone())
            .or_default() += value;
    }
    fn absolute(&self, value: u64) {
        self.counts
            .lock()
            .expect("counts")
            .insert(self.key.clone(), value);
    }
}

impl metrics::Recorder for CountingRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> metrics::Counter {
        let sqlstate = key
            .labels()
            .find(|l| l.key() == "sqlstate")
            .map_or(String::new(), |l| l.value().to_owned());
        metrics::Counter::from_arc(Arc::new(CountingCell {
            key: (key.name().to_owned(), sqlstate),
            counts: self.counts.clone(),
        }))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// The seed's point: a retry that works silently hides a deadlock, so each one is a metric.
#[test]
fn retries_and_giveups_are_metrics_by_sqlstate() {
    let recorder = CountingRecorder::default();
    // A thread-local recorder: the runtime runs on this thread only.
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let db = test_db().await;
            let options = TxOptions::default();
            let (gave_up, _) = run(&db, &options, &raise("40P01"), u32::MAX).await;
            assert!(gave_up.is_err());
            let (absorbed, _) = run(&db, &options, &raise("40001"), 1).await;
            assert!(absorbed.is_ok());
        });
    });
    let counts = recorder.counts.lock().expect("counts").clone();
    let get = |name: &str, state: &str| counts.get(&(name.to_owned(), state.to_owned())).copied();
    let retries = u64::from(DEFAULT_MAX_ATTEMPTS - 1);
    assert_eq!(get(TX_RETRIES, "40P01"), Some(retries));
    assert_eq!(get(TX_GIVEUPS, "40P01"), Some(1));
    assert_eq!(get(TX_RETRIES, "40001"), Some(1));
    assert_eq!(get(TX_GIVEUPS, "40001"), None);
}

/// Regression (found through the HTTP service): a transaction whose future is dropped part-way
/// (a client hung up, a timeout fired) must not go back to the pool open, or the next user of
/// that connection commits the abandoned half. With one pooled connection the next transaction
/// is guaranteed to get the same connection if it was returned.
#[tokio::test]
async fn a_dropped_transaction_leaves_nothing_behind_for_the_next_user() {
    let db = test_db().await;
    let pool = db.new_pool(1);
    let setup = pool.get().await.expect("client");
    setup
        .batch_execute("INSERT INTO stock (product_id, available) VALUES (1, 5)")
        .await
        .expect("seed");
    drop(setup);

    let options = TxOptions::default();
    let abandoned = tokio::time::timeout(
        Duration::from_millis(200),
        in_transaction(&pool, &options, saldo::Operation::Lab, |client| {
            saldo::tx_body!(client => async {
                client
                    .batch_execute("UPDATE stock SET available = 0 WHERE product_id = 1")
                    .await?;
                // The caller gives up while the transaction is still open.
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok::<_, Error>(())
            })
        }),
    )
    .await;
    assert!(abandoned.is_err(), "the body must have been cancelled");

    // The next transaction on the (one-connection) pool commits only its own work.
    in_transaction(&pool, &options, saldo::Operation::Lab, |client| {
        saldo::tx_body!(client => async {
            client.batch_execute("SELECT 1").await?;
            Ok::<_, Error>(())
        })
    })
    .await
    .expect("next transaction");
    let client = pool.get().await.expect("client");
    let available: i32 = client
        .query_one("SELECT available FROM stock WHERE product_id = 1", &[])
        .await
        .expect("read")
        .get(0);
    assert_eq!(
        available, 5,
        "the abandoned UPDATE was committed by the next user"
    );
}
