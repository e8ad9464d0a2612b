//! `saldo race` through the real binary: every safe strategy sells the last unit exactly once
//! in every run while naive-overwrite oversells; exit codes; the `--json` shape.
//!
//! A naive failure is a race: a test demands it in one of a few invocations
//! (`saldo_lab::testing::until_caught`), and checks the safe strategies in every invocation.

use std::process::{Command, Output};

use saldo_lab::testing::{test_db, until_caught};
use serde_json::Value;

/// Runs `saldo --database-url <fresh test db> race ARGS…`.
async fn race(args: &[&str]) -> Output {
    let db = test_db().await;
    let url = db.url.clone();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_saldo"))
            .arg("--database-url")
            .arg(&url)
            .arg("race")
            .args(&args)
            .output()
            .expect("run saldo")
    })
    .await
    .expect("join")
}

fn reports(out: &Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "saldo race failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    json.as_array().expect("an array of reports").clone()
}

fn by_strategy<'a>(reports: &'a [Value], name: &str) -> &'a Value {
    reports
        .iter()
        .find(|r| r["strategy"] == name)
        .unwrap_or_else(|| panic!("no report for {name}"))
}

/// The safe strategies' reports of a last-unit race: one per safe strategy, each with the
/// `--json` keys, one unit sold in each of its 3 runs and no violation.
fn assert_last_unit_safe_held(reports: &[Value]) {
    for name in saldo_lab::LabStrategy::ALL {
        let r = by_strategy(reports, name.as_str());
        // The --json contract: at least these keys, one object per strategy.
        for key in [
            "strategy",
            "runs",
            "sold",
            "refused",
            "conflicts",
            "errors",
            "oversold",
            "violations",
        ] {
            assert!(r.get(key).is_some(), "{name}: no {key} in {r}");
        }
        assert_eq!(r["runs"], 3);
        if name.is_safe() {
            assert_eq!(r["safe"], true, "{name}: {r}");
            assert_eq!(r["sold_per_run_min"], 1, "{name}: {r}");
            assert_eq!(r["sold_per_run_max"], 1, "{name}: {r}");
            assert_eq!(r["violations"], 0, "{name}: {r}");
            assert_eq!(r["verdict"], "held");
        }
    }
    // The CHECK held for naive-subtract, whatever the interleaving.
    assert_eq!(by_strategy(reports, "naive-subtract")["oversold"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_unit_all_safe_strategies_sell_exactly_one_every_run_and_naive_overwrite_oversells() {
    until_caught(
        "naive-overwrite overselling, naive-subtract hitting the CHECK",
        |_| async {
            let out = race(&[
                "last-unit",
                "--strategy",
                "all",
                "--runs",
                "3",
                "--think-ms",
                "30",
                "--json",
            ])
            .await;
            let reports = reports(&out);
            assert_last_unit_safe_held(&reports);
            reports
        },
        |reports| {
            // The lost update: with a 30 ms window the pooled sessions read the last unit.
            let naive = by_strategy(reports, "naive-overwrite");
            // The CHECK held for naive-subtract, and its violations reached the buyers.
            let subtract = by_strategy(reports, "naive-subtract");
            naive["oversold"].as_u64() > Some(0)
                && naive["audit_divergences"].as_u64() > Some(0)
                && naive["verdict"] == "failed_as_expected"
                && subtract["check_violations"].as_u64() > Some(0)
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversubscribed_sells_exactly_the_stock_with_every_safe_strategy() {
    let out = race(&[
        "oversubscribed",
        "--buyers",
        "300",
        "--stock",
        "10",
        "--strategy",
        "atomic,pessimistic,optimistic",
        "--runs",
        "1",
        "--json",
    ])
    .await;
    let reports = reports(&out);
    assert_eq!(reports.len(), 3);
    for r in &reports {
        assert_eq!(r["sold"], 10, "{r}");
        assert_eq!(r["oversold"], 0, "{r}");
        assert_eq!(r["final_available"], 0, "{r}");
        assert_eq!(r["final_reserved"], 10, "{r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_naive_failure_alone_exits_zero_and_says_it_was_expected() {
    until_caught(
        "naive-overwrite failing alone",
        |_| async {
            let out = race(&[
                "last-unit",
                "--strategy",
                "naive-overwrite",
                "--runs",
                "2",
                "--think-ms",
                "30",
            ])
            .await;
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(out.status.success(), "{stdout}");
            stdout
        },
        |stdout| stdout.contains("naive-overwrite failed as expected"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_the_sessions_that_read_the_same_last_unit() {
    until_caught(
        "two sessions reading the last unit, shown by --explain",
        |_| async {
            let out = race(&[
                "last-unit",
                "--strategy",
                "naive-overwrite,atomic",
                "--buyers",
                "4",
                "--runs",
                "1",
                // Wide: each buyer's first connection authenticates with SCRAM now, which
                // staggered the four buyers past a 30 ms window once (only one read the unit:
                // nothing to show).
                "--think-ms",
                "300",
                "--explain",
            ])
            .await;
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(out.status.success(), "{stdout}");
            assert!(stdout.contains("atomic: nothing to show"), "{stdout}");
            stdout
        },
        // At least two sessions read the last unit inside the window and both wrote it.
        |stdout| {
            stdout.contains("sessions read product 1 with available=1")
                && stdout.contains("=> lost update:")
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_item_keeps_orders_whole() {
    let out = race(&[
        "multi-item",
        "--strategy",
        "all",
        "--runs",
        "2",
        "--seed",
        "7",
        "--json",
    ])
    .await;
    let reports = reports(&out);
    // Every safe strategy's report is there and says it is safe: a report missing, or no
    // longer marked safe, must not make this pass without checking anything.
    let safe: Vec<_> = saldo_lab::LabStrategy::ALL
        .iter()
        .filter(|s| s.is_safe())
        .collect();
    assert!(!safe.is_empty());
    for name in safe {
        let r = by_strategy(&reports, name.as_str());
        assert_eq!(r["safe"], true, "{name}: {r}");
        assert_eq!(r["runs"], 2, "{name}: {r}");
        assert_eq!(r["verdict"], "held", "{name}: {r}");
        assert_eq!(r["violations"], 0, "{name}: {r}");
        assert_eq!(r["partial_orders"], 0, "{name}: {r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossed_transfers_deadlock_only_for_naive_without_retry() {
    until_caught(
        "naive transfers deadlocking",
        |_| async {
            let out = race(&[
                "crossed-transfers",
                "--strategy",
                "all",
                "--no-retry",
                "--runs",
                "1",
                "--json",
            ])
            .await;
            let reports = reports(&out);
            let ordered = by_strategy(&reports, "ordered/no-retry");
            assert_eq!(ordered["sold"], 200, "{ordered}");
            assert_eq!(ordered["errors"], serde_json::json!({}), "{ordered}");
            assert_eq!(ordered["money_drift"], 0);
            let naive = by_strategy(&reports, "naive/no-retry");
            assert_eq!(
                naive["money_drift"], 0,
                "a deadlock victim leaves no effect"
            );
            reports
        },
        |reports| by_strategy(reports, "naive/no-retry")["errors"]["40P01"].as_u64() > Some(0),
    )
    .await;
}

#[tokio::test]
async fn bad_flags_are_refused_with_a_clear_message() {
    let out = race(&["last-unit", "--strategy", "atomic,bogus"]).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown strategy \"bogus\""), "{stderr}");

    let out = race(&["last-unit", "--buyers", "0"]).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "clap rejects out-of-range flags"
    );

    let out = race(&["last-unit", "--transfers", "10"]).await;
    assert!(!out.status.success());
    let out = race(&["crossed-transfers", "--strategy", "atomic"]).await;
    assert!(!out.status.success());
}

/// The lab works in a scratch database of its own: the database named by `--database-url` is
/// neither migrated nor written (regression: the CLI used to migrate it before every command).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_database_is_left_untouched() {
    let db = test_db().await;
    let client = db.pool.get().await.expect("client");
    client
        .batch_execute("CREATE DATABASE race_untouched")
        .await
        .expect("create an empty database");
    let url = format!("{}race_untouched", db.url.trim_end_matches(|c| c != '/'));
    let out = tokio::task::spawn_blocking({
        let url = url.clone();
        move || {
            Command::new(env!("CARGO_BIN_EXE_saldo"))
                .args(["--database-url", &url, "race", "last-unit"])
                .args(["--strategy", "atomic", "--runs", "1", "--buyers", "3"])
                .output()
                .expect("run saldo")
        }
    })
    .await
    .expect("join");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pool = saldo::db::connect(&url, &saldo::db::PoolOptions::default()).expect("pool");
    let target = pool.get().await.expect("connect to the user's database");
    let tables: i64 = target
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
            &[],
        )
        .await
        .expect("count tables")
        .get(0);
    assert_eq!(
        tables, 0,
        "saldo race created tables in the user's database"
    );
}

/// Late retries of cancelled and expired orders take nothing with every safe strategy;
/// `naive-replay` (the idempotency rule before the fix) takes every unit again, every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_retry_takes_nothing_with_every_safe_strategy_and_the_old_rule_fails() {
    let out = race(&[
        "late-retry",
        "--strategy",
        "atomic,pessimistic,optimistic,batched,naive-replay",
        "--buyers",
        "20",
        "--runs",
        "2",
        "--json",
    ])
    .await;
    let reports = reports(&out);
    for name in ["atomic", "pessimistic", "optimistic", "batched"] {
        let r = by_strategy(&reports, name);
        assert_eq!(r["oversold"], 0, "{name}: {r}");
        assert_eq!(r["violations"], 0, "{name}: {r}");
        assert_eq!(r["final_available"], 20, "{name}: {r}");
        assert_eq!(r["final_reserved"], 0, "{name}: {r}");
        assert_eq!(r["verdict"], "held", "{name}: {r}");
    }
    let naive = by_strategy(&reports, "naive-replay");
    assert_eq!(
        naive["oversold"], 40,
        "every retry took its unit again: {naive}"
    );
    assert_eq!(naive["violations"], 2, "{naive}");
    assert_eq!(naive["verdict"], "failed_as_expected", "{naive}");
}

/// The runs per strategy `saldo race --help` states for `scenario`: its `--runs` line reads
/// `(default N; scenario, scenario M; …)`.
fn stated_runs(help: &str, scenario: &str) -> u32 {
    let line = help
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("--runs"))
        .nth(1)
        .unwrap_or_else(|| panic!("no --runs help in:\n{help}"));
    let (_, stated) = line.rsplit_once('(').expect("(defaults)");
    let mut default = None;
    for part in stated.trim_end_matches(')').split("; ") {
        let (names, n) = part.rsplit_once(' ').expect("names and a number");
        let n: u32 = n.parse().unwrap_or_else(|_| panic!("{part:?} in {line:?}"));
        if names == "default" {
            default = Some(n);
        } else if names.split(", ").any(|name| name == scenario) {
            return n;
        }
    }
    default.unwrap_or_else(|| panic!("no default in {line:?}"))
}

/// `--help` states each scenario's real default `--runs` (it used to say 5 for all but
/// crossed-transfers while late-retry ran 2, the hold races 3 and extend-vs-sweeper 2): the
/// statement against saldo-lab's catalog for every scenario, and against a real run for
/// late-retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_states_the_runs_each_scenario_really_runs() {
    let out = Command::new(env!("CARGO_BIN_EXE_saldo"))
        .args(["race", "--help"])
        .output()
        .expect("run saldo");
    let help = String::from_utf8_lossy(&out.stdout);
    for &scenario in saldo_lab::race::Scenario::ALL {
        assert_eq!(
            stated_runs(&help, scenario.as_str()),
            scenario.defaults().runs,
            "{scenario:?}: {help}"
        );
    }
    let out = race(&[
        "late-retry",
        "--strategy",
        "atomic",
        "--buyers",
        "2",
        "--json",
    ])
    .await;
    let reports = reports(&out);
    assert_eq!(
        reports[0]["runs"].as_u64(),
        Some(u64::from(stated_runs(&help, "late-retry")))
    );
}
