//! The Citus half of the harness itself: a test database does not outlive its test. Left
//! behind, each one keeps a Citus maintenance daemon on every node (see `testing::db`).

use saldo::db::{self, PoolOptions};
use saldo_lab::testing::{citus_cluster, citus_db};

/// How many nodes of the Citus test cluster hold a database named `name`.
async fn nodes_holding(name: &str) -> usize {
    let mut holding = 0;
    for node in citus_cluster().nodes() {
        let options = PoolOptions {
            max_size: 1,
            ..PoolOptions::default()
        };
        let pool = db::connect(&node.url("postgres"), &options).expect("pool");
        let n: i64 = pool
            .get()
            .await
            .expect("client")
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_citus_test_database_is_dropped_on_every_node_with_its_test_db() {
    let db = citus_db().await;
    let name: String = db
        .pool
        .get()
        .await
        .expect("client")
        .query_one("SELECT current_database()", &[])
        .await
        .expect("current_database")
        .get(0);
    let nodes = citus_cluster().nodes().count();
    assert_eq!(nodes_holding(&name).await, nodes, "{name} is on every node");

    // The drop runs `DROP DATABASE … WITH (FORCE)` on every node, blocking, as a test's end does.
    tokio::task::spawn_blocking(move || drop(db))
        .await
        .expect("drop");
    let left = nodes_holding(&name).await;
    assert_eq!(
        left, 0,
        "{name} is left on {left} node(s) after its TestDb was dropped"
    );
}
