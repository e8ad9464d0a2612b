//! The audit on Citus (`saldo::audit::citus`): per-shard checks read one shard (one task in
//! the plan) and find a stock or account divergence; the per-transfer double entry does not
//! report a transfer whose 2PC is held half-committed (while the naive global sum and the
//! one-shot read do), answers clean once it resolves, and reports a real orphan every time.
//!
//! A 2PC is held half-committed the way Citus leaves one between its `COMMIT PREPARED`s: the
//! debit side committed on one worker, the credit side `PREPARE TRANSACTION`ed on the other,
//! directly on that worker's shard (a gid of our own, which Citus's recovery leaves alone).

use std::time::Duration;

use saldo::audit::citus::{self, CitusAuditOptions, TransferInvariant};
use saldo::audit::{Invariant, LedgerInvariant};
use saldo_lab::testing::{citus_cluster, citus_db, TestDb};

/// Long enough for any real 2PC of the test to resolve; the held one never does by itself.
const PATIENT: CitusAuditOptions = CitusAuditOptions {
    recheck_for: Duration::from_secs(60),
};
/// For the held 2PC: the audit must give up and say "unresolved" (not wait 60 s for nothing).
const SHORT: CitusAuditOptions = CitusAuditOptions {
    recheck_for: Duration::from_millis(300),
};

/// Which worker (its port) holds `table`'s shard for distribution value `value`.
async fn worker_port(client: &tokio_postgres::Client, table: &str, value: i64) -> i32 {
    client
        .query_one(
            "SELECT nodeport::int FROM pg_dist_shard_placement \
              WHERE shardid = get_shard_id_for_distribution_column($1::text::regclass, $2::bigint)",
            &[&table, &value],
        )
        .await
        .expect("placement")
        .get(0)
}

/// `table`'s shard (a table on one worker) for `value`.
async fn shard(client: &tokio_postgres::Client, table: &str, value: i64) -> String {
    client
        .query_one(
            "SELECT shard_name($1::text::regclass, \
                    get_shard_id_for_distribution_column($1::text::regclass, $2::bigint))::text",
            &[&table, &value],
        )
        .await
        .expect("shard name")
        .get(0)
}

/// A direct session on the worker listening on `port`, in the test's database.
async fn worker(db: &TestDb, port: i32) -> tokio_postgres::Client {
    let config: tokio_postgres::Config = db.url.parse().expect("url");
    let name = config.get_dbname().expect("dbname").to_owned();
    let node = citus_cluster()
        .workers()
        .iter()
        .find(|w| i32::from(w.port()) == port)
        .expect("worker of that port");
    let (client, conn) = tokio_postgres::connect(&node.url(&name), tokio_postgres::NoTls)
        .await
        .expect("worker connection");
    tokio::spawn(conn);
    client
}

/// Two customer accounts on different workers, each opened with 100 from the system account
/// (journal rows, as saldo writes them), and one product counted at 10: a clean start. The
/// ledger's rows are written by hand, as before statements (migration V20): the system account's
/// opening entry goes too, so its counters are the journal's alone.
async fn setup(db: &TestDb) -> (i64, i64) {
    let client = db.pool.get().await.expect("client");
    client
        .batch_execute(
            "DELETE FROM entries WHERE account_id = 0; \
             UPDATE accounts SET entry_seq = 0 WHERE id = 0",
        )
        .await
        .expect("no entries");
    let first = worker_port(&client, "accounts", 1).await;
    let mut second = None;
    for id in 2..200 {
        if worker_port(&client, "accounts", id).await != first {
            second = Some(id);
            break;
        }
    }
    let (a, b) = (1, second.expect("an account on the other worker"));
    client
        .execute(
            "INSERT INTO accounts (id, balance) VALUES ($1, 0), ($2, 0)",
            &[&a, &b],
        )
        .await
        .expect("accounts");
    transfer(db, "open-a", 0, a, 100).await;
    transfer(db, "open-b", 0, b, 100).await;
    client
        .batch_execute(
            "INSERT INTO stock (product_id, available) VALUES (1, 10); \
             INSERT INTO stock_movements (product_id, kind, quantity) VALUES (1, 'count', 10)",
        )
        .await
        .expect("stock");
    (a, b)
}

/// A posted transfer written as the Citus layout stores one, in one distributed transaction
/// (Citus commits it with 2PC when the accounts are on different workers).
async fn transfer(db: &TestDb, id: &str, from: i64, to: i64, amount: i64) {
    let mut client = db.pool.get().await.expect("client");
    let tx = client.transaction().await.expect("begin");
    tx.execute(
        "INSERT INTO transfer_ids (id, from_account, to_account) VALUES ($1, $2, $3)",
        &[&id, &from, &to],
    )
    .await
    .expect("id");
    tx.execute(
        "INSERT INTO transfers (account_id, id, from_account, to_account, amount, kind) \
         VALUES ($2, $1, $2, $3, $4, 'transfer'), ($3, $1, $2, $3, $4, 'transfer')",
        &[&id, &from, &to, &amount],
    )
    .await
    .expect("sides");
    tx.execute(
        "UPDATE accounts SET balance = balance - $2 WHERE id = $1",
        &[&from, &amount],
    )
    .await
    .expect("debit");
    tx.execute(
        "UPDATE accounts SET balance = balance + $2 WHERE id = $1",
        &[&to, &amount],
    )
    .await
    .expect("credit");
    tx.commit().await.expect("commit");
}

/// A transfer of 5 from `a` to `b` held half-committed: its id and debit side committed
/// through the coordinator; its credit side prepared on `b`'s worker under `gid`, not
/// committed. Returns the session that holds it.
async fn hold_half_committed(
    db: &TestDb,
    id: &str,
    a: i64,
    b: i64,
    gid: &str,
) -> tokio_postgres::Client {
    let client = db.pool.get().await.expect("client");
    client
        .execute(
            "INSERT INTO transfer_ids (id, from_account, to_account) VALUES ($1, $2, $3)",
            &[&id, &a, &b],
        )
        .await
        .expect("id");
    let mut coordinator = db.pool.get().await.expect("client");
    let tx = coordinator.transaction().await.expect("begin");
    tx.execute(
        "INSERT INTO transfers (account_id, id, from_account, to_account, amount) \
         VALUES ($2, $1, $2, $3, 5)",
        &[&id, &a, &b],
    )
    .await
    .expect("debit side");
    tx.execute(
        "UPDATE accounts SET balance = balance - 5 WHERE id = $1",
        &[&a],
    )
    .await
    .expect("debit");
    tx.commit().await.expect("debit committed");

    let port = worker_port(&client, "accounts", b).await;
    let (transfers, accounts) = (
        shard(&client, "transfers", b).await,
        shard(&client, "accounts", b).await,
    );
    let held = worker(db, port).await;
    held.batch_execute("SET citus.enable_manual_changes_to_shards = on; BEGIN")
        .await
        .expect("begin on the worker");
    held.execute(
        &format!(
            "INSERT INTO {transfers} (account_id, id, from_account, to_account, amount) \
             VALUES ($2, $1, $3, $2, 5)"
        ),
        &[&id, &b, &a],
    )
    .await
    .expect("credit side");
    held.execute(
        &format!("UPDATE {accounts} SET balance = balance + 5 WHERE id = $1"),
        &[&b],
    )
    .await
    .expect("credit");
    held.batch_execute(&format!("PREPARE TRANSACTION '{gid}'"))
        .await
        .expect("prepared");
    held
}

async fn global_sum(db: &TestDb) -> i64 {
    let client = db.pool.get().await.expect("client");
    client
        .query_one("SELECT sum(balance)::bigint FROM accounts", &[])
        .await
        .expect("sum")
        .get(0)
}

/// The per-product and per-account queries (their Citus forms, as the dialect picks them) are
/// routed whole to one shard: one task, no subplan (a subplan would be read apart from the
/// rest, under another snapshot).
#[tokio::test]
async fn per_shard_checks_run_as_one_task_on_one_shard() {
    let db = citus_db().await;
    let client = db.pool.get().await.expect("client");
    let dialect = saldo::store::dialect::Dialect::of(saldo::db::Layout::Citus);
    for sql in [
        dialect.text(&saldo::audit::sql::PRODUCT_STATE),
        dialect.text(&saldo::audit::sql::ACCOUNT_STATE),
    ] {
        let plan: Vec<String> = client
            .query(&format!("EXPLAIN {}", sql.replace("$1", "1")), &[])
            .await
            .expect("explain")
            .iter()
            .map(|r| r.get(0))
            .collect();
        let plan = plan.join("\n");
        assert!(plan.contains("Task Count: 1"), "{plan}");
        assert!(!plan.contains("Subplan"), "{plan}");
    }
}

/// A clean start is clean; a stock row and an account changed behind the engine's back are
/// found on their shards.
#[tokio::test]
async fn per_shard_divergences_are_found() {
    let db = citus_db().await;
    let (a, _) = setup(&db).await;
    let audit = citus::audit(&db.pool, PATIENT).await.expect("audit");
    assert!(audit.is_clean(), "{audit:?}");

    let client = db.pool.get().await.expect("client");
    client
        .batch_execute("UPDATE stock SET available = available - 1 WHERE product_id = 1")
        .await
        .expect("lose a unit");
    client
        .execute(
            "UPDATE accounts SET balance = balance + 7 WHERE id = $1",
            &[&a],
        )
        .await
        .expect("print money");
    let audit = citus::audit(&db.pool, PATIENT).await.expect("audit");
    assert_eq!(audit.stock.len(), 1, "{audit:?}");
    assert_eq!(audit.stock[0].invariant, Invariant::OnHandMatchesHistory);
    assert_eq!((audit.stock[0].expected, audit.stock[0].actual), (10, 9));
    assert_eq!(audit.ledger.len(), 1, "{audit:?}");
    assert_eq!(
        audit.ledger[0].invariant,
        LedgerInvariant::BalanceMatchesJournal
    );
    assert_eq!(
        (audit.ledger[0].expected, audit.ledger[0].actual),
        (100, 107)
    );
    assert!(
        audit.transfers.is_empty() && audit.unresolved.is_empty(),
        "{audit:?}"
    );
}

/// A transfer held between its workers' commits: the naive global sum and the one-shot read
/// report it; the audit does not (it is unresolved while held: neither clean nor a
/// divergence), and it is clean once the 2PC commits, whether that happens before or during
/// its recheck.
#[tokio::test]
async fn a_transfer_in_flight_is_not_a_divergence() {
    let db = citus_db().await;
    let (a, b) = setup(&db).await;
    transfer(&db, "whole", a, b, 3).await;
    assert!(citus::audit(&db.pool, PATIENT)
        .await
        .expect("audit")
        .is_clean());

    let held = hold_half_committed(&db, "held", a, b, "saldo_test_held").await;
    // The naive methods see half a transfer.
    assert_eq!(global_sum(&db).await, -5, "the global sum sees one side");
    assert_eq!(
        citus::suspect_transfers(&db.pool).await.expect("one-shot"),
        vec!["held".to_owned()],
        "the one-shot read reports it"
    );
    // The audit waits for it, and says unresolved when its bound runs out.
    let audit = citus::audit(&db.pool, SHORT).await.expect("audit");
    assert!(audit.transfers.is_empty(), "{audit:?}");
    assert!(
        audit.stock.is_empty() && audit.ledger.is_empty(),
        "{audit:?}"
    );
    assert_eq!(audit.unresolved, vec!["held".to_owned()]);

    // Resolved during a patient audit's recheck (or before its first read): clean.
    let patient = tokio::spawn({
        let pool = db.pool.clone();
        async move { citus::audit(&pool, PATIENT).await }
    });
    held.batch_execute("COMMIT PREPARED 'saldo_test_held'")
        .await
        .expect("commit prepared");
    let audit = patient.await.expect("join").expect("audit");
    assert!(audit.is_clean(), "{audit:?}");
    assert_eq!(global_sum(&db).await, 0);
    assert!(citus::audit(&db.pool, PATIENT)
        .await
        .expect("audit")
        .is_clean());
}

/// A real orphan: the credit side removed from its shard together with its money (so each
/// account still matches its journal and only the double entry is broken). Reported every
/// time, as the missing side; so is a side whose amount was changed on its shard.
#[tokio::test]
async fn a_real_orphan_is_reported_every_time() {
    let db = citus_db().await;
    let (a, b) = setup(&db).await;
    transfer(&db, "orphan", a, b, 5).await;
    transfer(&db, "changed", b, a, 2).await;
    let client = db.pool.get().await.expect("client");
    let mut coordinator = db.pool.get().await.expect("client");
    let tx = coordinator.transaction().await.expect("begin");
    tx.execute(
        "DELETE FROM transfers WHERE account_id = $1 AND id = 'orphan'",
        &[&b],
    )
    .await
    .expect("drop the credit side");
    tx.execute(
        "UPDATE accounts SET balance = balance - 5 WHERE id = $1",
        &[&b],
    )
    .await
    .expect("and its money");
    tx.commit().await.expect("commit");
    let tx = coordinator.transaction().await.expect("begin");
    tx.execute(
        "UPDATE transfers SET amount = 3 WHERE account_id = $1 AND id = 'changed'",
        &[&a],
    )
    .await
    .expect("change the credit side");
    tx.execute(
        "UPDATE accounts SET balance = balance + 1 WHERE id = $1",
        &[&a],
    )
    .await
    .expect("and its money");
    tx.commit().await.expect("commit");
    drop(client);

    let expected = [
        ("changed", TransferInvariant::SidesAgree),
        ("orphan", TransferInvariant::CreditSideExists),
    ];
    for _ in 0..3 {
        let audit = citus::audit(&db.pool, PATIENT).await.expect("audit");
        assert!(
            audit.stock.is_empty() && audit.ledger.is_empty(),
            "{audit:?}"
        );
        assert!(audit.unresolved.is_empty(), "{audit:?}");
        assert_eq!(found(&audit), expected);
    }

    // An unrelated transfer held half-committed on other shards: the orphans are still
    // reported (a suspect waits only for the 2PCs holding its own shards, and one with none
    // is re-read whatever the bound), the held one is unresolved.
    let client = db.pool.get().await.expect("client");
    let taken = [
        shard(&client, "transfers", a).await,
        shard(&client, "transfers", b).await,
    ];
    let mut others = Vec::new();
    for id in 2..200 {
        if id != b && !taken.contains(&shard(&client, "transfers", id).await) {
            others.push(id);
        }
        if others.len() == 2 {
            break;
        }
    }
    let (c, d) = (others[0], others[1]);
    client
        .execute(
            "INSERT INTO accounts (id, balance) VALUES ($1, 0), ($2, 0)",
            &[&c, &d],
        )
        .await
        .expect("accounts");
    transfer(&db, "open-c", 0, c, 100).await;
    let held = hold_half_committed(&db, "held", c, d, "saldo_test_unrelated").await;
    for _ in 0..3 {
        let audit = citus::audit(&db.pool, SHORT).await.expect("audit");
        assert_eq!(found(&audit), expected, "{audit:?}");
        assert_eq!(audit.unresolved, ["held"], "{audit:?}");
    }
    held.batch_execute("COMMIT PREPARED 'saldo_test_unrelated'")
        .await
        .expect("commit prepared");
}

fn found(audit: &citus::CitusAudit) -> Vec<(&str, TransferInvariant)> {
    audit
        .transfers
        .iter()
        .map(|d| (d.state.transfer_id.as_str(), d.invariant))
        .collect()
}

/// Currencies on Citus: the credit side of `b`'s opening rewritten in USD on `b`'s shard is
/// found twice over: with the account, on its shard (a row not in the account's currency,
/// co-located), and by the per-transfer double entry (its two sides name two currencies).
#[tokio::test]
async fn a_side_in_another_currency_is_found_on_its_shard_and_across_the_sides() {
    let db = citus_db().await;
    let (_, b) = setup(&db).await;
    let client = db.pool.get().await.expect("client");
    client
        .execute(
            "UPDATE transfers SET currency = 'USD' WHERE account_id = $1 AND id = 'open-b'",
            &[&b],
        )
        .await
        .expect("rewrite one side");
    let audit = citus::audit(&db.pool, PATIENT).await.expect("audit");
    assert!(audit.stock.is_empty(), "{audit:?}");
    assert_eq!(audit.ledger.len(), 1, "{audit:?}");
    let found = &audit.ledger[0];
    assert_eq!(
        (
            found.account.map(|a| a.get()),
            found.invariant,
            found.actual
        ),
        (Some(b), LedgerInvariant::JournalInAccountCurrency, 1)
    );
    assert_eq!(
        found.currency.map(|c| c.to_string()),
        Some("EUR".to_owned())
    );
    assert_eq!(audit.transfers.len(), 1, "{audit:?}");
    assert_eq!(audit.transfers[0].invariant, TransferInvariant::SidesAgree);
    assert_eq!(audit.transfers[0].state.transfer_id, "open-b");
    assert!(audit.unresolved.is_empty(), "{audit:?}");
}
