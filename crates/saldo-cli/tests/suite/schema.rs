//! The commands that look at a database (`locks`, `audit`, `audit --repair --apply`, `sweep`,
//! `events tail`) never change its schema: a newer saldo pointed at a live database must not
//! migrate it under the service running there. They work on a schema exactly as built into the binary and refuse
//! an older, newer or missing one, naming both versions and what to run; the schema version is
//! the same after the refusal. `saldo migrate` still migrates.

use std::path::Path;
use std::time::Duration;

use saldo_lab::testing::test_db;

use crate::tokens::saldo;

/// The newest migration built into this saldo.
fn built() -> i32 {
    saldo::schema::migrations(saldo::db::Layout::Single)
        .iter()
        .map(|m| m.version())
        .max()
        .expect("migrations")
}

async fn applied(pool: &deadpool_postgres::Pool) -> Option<i32> {
    saldo::db::applied_schema_version(pool)
        .await
        .expect("schema version")
}

/// `saldo --database-url URL ARGS…`: success and stdout + stderr.
async fn tool(data: &Path, url: &str, args: &[&str]) -> (bool, String) {
    let mut cmd = saldo(data);
    cmd.args(["--database-url", url]).args(args);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("in time")
        .expect("run saldo");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

const LOOKING: [&[&str]; 5] = [
    &["locks"],
    &["events", "tail", "--from", "start"],
    &["audit"],
    &["audit", "--repair", "--apply"],
    &["sweep"],
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_work_on_their_own_schema_and_refuse_others_without_migrating() {
    let data = tempfile::tempdir().expect("tempdir");
    let db = test_db().await;
    let built = built();
    assert_eq!(
        applied(&db.pool).await,
        Some(built),
        "the test database is current"
    );
    for args in LOOKING {
        let (ok, said) = tool(data.path(), &db.url, args).await;
        assert!(ok, "{args:?} on the current schema: {said}");
    }
    let client = db.pool.get().await.expect("client");

    // Older: the newest migration not applied yet (as a database left by the previous saldo).
    client
        .execute(
            "DELETE FROM refinery_schema_history WHERE version = $1",
            &[&built],
        )
        .await
        .expect("forget the newest migration");
    let older = built - 1;
    for args in LOOKING {
        let (ok, said) = tool(data.path(), &db.url, args).await;
        assert!(!ok, "{args:?} accepted an older schema: {said}");
        assert!(
            said.contains(&format!(
                "the database's schema is version {older}, older than this saldo's (version \
                 {built}): run `saldo migrate`"
            )),
            "{args:?}: {said}"
        );
        assert_eq!(applied(&db.pool).await, Some(older), "{args:?} migrated");
    }

    // Newer: a migration this saldo does not know (a newer saldo migrated the database).
    let newer = built + 1;
    client
        .execute(
            "INSERT INTO refinery_schema_history (version, name, applied_on, checksum) \
             VALUES ($1, 'from_the_future', '2030-01-01T00:00:00Z', '0')",
            &[&newer],
        )
        .await
        .expect("a newer migration");
    for args in LOOKING {
        let (ok, said) = tool(data.path(), &db.url, args).await;
        assert!(!ok, "{args:?} accepted a newer schema: {said}");
        assert!(
            said.contains(&format!(
                "the database's schema is version {newer}, newer than this saldo's (version \
                 {built}): use the newer saldo"
            )),
            "{args:?}: {said}"
        );
        assert_eq!(applied(&db.pool).await, Some(newer), "{args:?} changed it");
    }

    // None: a database never migrated; `saldo migrate` still migrates, and then it works.
    let empty = format!("schema_none_{}", std::process::id());
    saldo::db::create_database(&db.url, &empty, None)
        .await
        .expect("an empty database");
    let (server, _) = db.url.rsplit_once('/').expect("a URL with a database");
    let empty_url = format!("{server}/{empty}");
    let empty_pool =
        saldo::db::connect(&empty_url, &saldo::db::PoolOptions::default()).expect("pool");
    let (ok, said) = tool(data.path(), &empty_url, &["locks"]).await;
    assert!(!ok);
    assert!(said.contains("the database has no saldo schema"), "{said}");
    assert_eq!(applied(&empty_pool).await, None, "locks migrated");
    let (ok, said) = tool(data.path(), &empty_url, &["migrate"]).await;
    assert!(ok, "{said}");
    assert_eq!(applied(&empty_pool).await, Some(built));
    let (ok, said) = tool(data.path(), &empty_url, &["locks"]).await;
    assert!(ok, "{said}");
    empty_pool.close();
    saldo::db::drop_database(&db.url, &empty)
        .await
        .expect("drop it");
}
