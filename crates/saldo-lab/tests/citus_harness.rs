//! The Citus half of the harness itself (its own binary: these tests count and reuse the
//! process's spare databases, so no other test may take one meanwhile; they run one at a time):
//! - a database a test hands back comes to the next test empty, exactly as migrated (the rows
//!   the migrations wrote, sequences restarted), whatever the last test wrote;
//! - one whose catalogs a test changed, even on a worker only, is dropped, not reused;
//! - beyond the few spares kept, a test database is dropped on every node (left behind, each
//!   keeps a Citus maintenance daemon busy on every node).

use saldo::db::{self, PoolOptions};
use saldo_lab::testing::{citus_cluster, citus_db, limit_spares, spare_limit, TestDb};
use tokio::sync::Mutex;

/// One test at a time: each counts or reuses the process's spares.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// Spares this binary keeps: one is all its tests need, and each database beyond the limit
/// the last test makes is a whole Citus migration (minutes on a loaded machine at the default).
const SPARES_HERE: usize = 1;

/// The lock every test holds, with this binary's spare limit set.
async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    limit_spares(SPARES_HERE);
    ONE_AT_A_TIME.lock().await
}

/// A session on `node` in `database` (its pool of one, kept alive with the client).
async fn session(node: &pg_local::Cluster, database: &str) -> deadpool_postgres::Object {
    let options = PoolOptions {
        max_size: 1,
        ..PoolOptions::default()
    };
    let pool = db::connect(&node.url(database), &options).expect("pool");
    pool.get().await.expect("client")
}

/// How many nodes of the Citus test cluster hold a database named `name`.
async fn nodes_holding(name: &str) -> usize {
    let mut holding = 0;
    for node in citus_cluster().nodes() {
        let n: i64 = session(node, "postgres")
            .await
            .query_one(
                "SELECT count(*) FROM pg_database WHERE datname = $1",
                &[&name],
            )
            .await
            .expect("pg_database")
            .get(0);
        holding += usize::from(n > 0);
    }
    holding
}

async fn name_of(db: &TestDb) -> String {
    db.pool
        .get()
        .await
        .expect("client")
        .query_one("SELECT current_database()", &[])
        .await
        .expect("current_database")
        .get(0)
}

/// Hands `db` back as a test's end does (blocking, off the runtime's threads).
async fn hand_back(db: TestDb) {
    tokio::task::spawn_blocking(move || drop(db))
        .await
        .expect("drop");
}

/// What a test can see of a database's rows: the migrations' rows (the system account, the
/// feed's state), the stock, the journal and the next value of a sequence no column owns.
async fn visible_state(db: &TestDb) -> String {
    let client = db.pool.get().await.expect("client");
    let row = client
        .query_one(
            "SELECT (SELECT json_agg(a ORDER BY id) FROM accounts a)::text, \
                    (SELECT json_agg(f) FROM feed_state f)::text, \
                    (SELECT count(*) FROM stock), (SELECT count(*) FROM transfers), \
                    (SELECT count(*) FROM events)",
            &[],
        )
        .await
        .expect("state");
    let sequence: i64 = client
        .query_one("SELECT nextval('backorder_arrivals')", &[])
        .await
        .expect("nextval")
        .get(0);
    let (accounts, feed): (Option<String>, Option<String>) = (row.get(0), row.get(1));
    format!(
        "accounts {accounts:?}, feed_state {feed:?}, stock {}, transfers {}, events {}, \
         next arrival {sequence}",
        row.get::<_, i64>(2),
        row.get::<_, i64>(3),
        row.get::<_, i64>(4)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_back_database_comes_to_the_next_test_empty_as_migrated() {
    let _serial = one_at_a_time().await;
    let first = citus_db().await;
    let name = name_of(&first).await;
    let as_migrated = visible_state(&first).await;
    first
        .pool
        .get()
        .await
        .expect("client")
        .batch_execute(
            "INSERT INTO stock (product_id, available) VALUES (1, 5), (2, 7); \
             INSERT INTO accounts (id, balance) VALUES (1, 0), (2, 0); \
             UPDATE accounts SET balance = -100 WHERE id = 0; \
             UPDATE accounts SET balance = 100 WHERE id = 1; \
             UPDATE feed_state SET last_seq = 41, next_id = 9; \
             SELECT nextval('backorder_arrivals'); SELECT nextval('backorder_arrivals');",
        )
        .await
        .expect("a test's writes");
    assert_ne!(visible_state(&first).await, as_migrated, "the writes show");
    hand_back(first).await;

    let next = citus_db().await;
    assert_eq!(name_of(&next).await, name, "the spare is reused");
    // Every row as migrated, and the sequence restarted (`visible_state` takes its next value).
    assert_eq!(visible_state(&next).await, as_migrated);
    hand_back(next).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_whose_catalogs_changed_on_a_worker_is_dropped_not_reused() {
    let _serial = one_at_a_time().await;
    let db = citus_db().await;
    let name = name_of(&db).await;
    // A change the coordinator does not see: a table on one worker only.
    let worker = &citus_cluster().workers()[0];
    session(worker, &name)
        .await
        .batch_execute("CREATE TABLE left_by_a_test (x int)")
        .await
        .expect("worker-only table");
    hand_back(db).await;

    let next = citus_db().await;
    assert_ne!(
        name_of(&next).await,
        name,
        "a changed database is not reused"
    );
    assert_eq!(
        nodes_holding(&name).await,
        0,
        "{name} is dropped on every node"
    );
    hand_back(next).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_the_spares_a_test_database_is_dropped_on_every_node() {
    let _serial = one_at_a_time().await;
    let mut dbs = Vec::new();
    let mut names = Vec::new();
    let limit = spare_limit();
    for _ in 0..=limit {
        let db = citus_db().await;
        names.push(name_of(&db).await);
        dbs.push(db);
    }
    for db in dbs {
        hand_back(db).await;
    }
    let nodes = citus_cluster().nodes().count();
    let mut kept = 0;
    for name in &names {
        match nodes_holding(name).await {
            0 => {}
            n if n == nodes => kept += 1,
            n => panic!("{name} is on {n} of {nodes} nodes"),
        }
    }
    assert!(
        kept <= limit,
        "{kept} of {} handed back kept, at most {limit} may be",
        names.len()
    );
    assert!(kept < names.len(), "one beyond the spares is dropped");
}
