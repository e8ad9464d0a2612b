//! `saldo events tail` through the real binary, attached to a test database with
//! `--database-url`: from the start it prints every event once as JSON lines and exits when
//! caught up (saying where to resume); `--after` resumes exactly after a cursor; `--max-events`
//! bounds it; `--type`/`--stream` filter; `--format table` prints columns; `--follow` sees what
//! commits after it started; bad flags are refused before anything is read.

use std::process::Stdio;
use std::time::Duration;

use saldo::domain::ProductId;
use saldo::events::{self, Cursor, Filter};
use saldo::stock::admin;
use saldo_lab::testing::test_db;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::tokens::saldo;

const WAIT: Duration = Duration::from_secs(120);

/// `saldo --database-url URL events tail ARGS…`: success, stdout lines, stderr.
async fn tail(data: &std::path::Path, url: &str, args: &[&str]) -> (bool, Vec<String>, String) {
    let mut cmd = saldo(data);
    cmd.args(["--database-url", url, "events", "tail"])
        .args(args);
    let out = tokio::time::timeout(WAIT, cmd.output())
        .await
        .expect("in time")
        .expect("run saldo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    (
        out.status.success(),
        stdout.lines().map(str::to_owned).collect(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn parsed(lines: &[String]) -> Vec<Value> {
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

fn cursors(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["cursor"].as_str().expect("cursor"))
        .collect()
}

/// Every event of the feed once at least `n` are in it (bounded wait: other tests'
/// transactions on the server hold the sequencer's horizon a while).
async fn feed(store: &saldo::stock::Store, n: usize) -> Vec<events::Event> {
    let until = tokio::time::Instant::now() + WAIT;
    loop {
        let page = events::read(store, None, 1_000, &Filter::default())
            .await
            .expect("read");
        if page.events.len() >= n || tokio::time::Instant::now() > until {
            assert!(page.events.len() >= n, "{} events", page.events.len());
            return page.events;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_prints_the_feed_resumes_and_filters() {
    let data = tempfile::tempdir().expect("tempdir");
    let db = test_db().await;
    let store = db.store();
    for (p, n) in [(1, 1), (1, 2), (2, 1), (1, 3)] {
        admin::set_count(&store, ProductId::new(p).expect("id"), n)
            .await
            .expect("count");
    }
    let all = feed(&store, 4).await;
    let all_cursors: Vec<&str> = all.iter().map(|e| e.cursor.as_str()).collect();

    let (ok, lines, stderr) = tail(data.path(), &db.url, &["--from", "start"]).await;
    assert!(ok, "{stderr}");
    let printed = parsed(&lines);
    assert_eq!(cursors(&printed), all_cursors);
    assert_eq!(printed[0]["type"], "stock.changed");
    let last = all_cursors[3];
    assert!(
        stderr.contains(&format!("--after {last}")),
        "says where to resume: {stderr}"
    );

    // Exactly after a cursor, bounded.
    let (ok, lines, stderr) = tail(
        data.path(),
        &db.url,
        &["--after", all_cursors[1], "--max-events", "1"],
    )
    .await;
    assert!(ok, "{stderr}");
    assert_eq!(cursors(&parsed(&lines)), [all_cursors[2]]);

    // Filters and the table.
    let (ok, lines, _) = tail(
        data.path(),
        &db.url,
        &["--from", "start", "--stream", "product:2"],
    )
    .await;
    assert!(ok);
    assert_eq!(cursors(&parsed(&lines)), [all_cursors[2]]);
    let (ok, lines, _) = tail(
        data.path(),
        &db.url,
        &[
            "--from",
            "start",
            "--type",
            "sale.created,reservation.created",
        ],
    )
    .await;
    assert!(ok);
    assert!(lines.is_empty(), "{lines:?}");
    let (ok, lines, _) = tail(
        data.path(),
        &db.url,
        &["--from", "start", "--format", "table"],
    )
    .await;
    assert!(ok);
    assert_eq!(lines.len(), 5, "a header and four rows: {lines:?}");
    assert!(lines[0].starts_with("SEQ"), "{lines:?}");
    assert!(
        lines[4].contains("product:1") && lines[4].ends_with(last),
        "{lines:?}"
    );

    // From the end (the default): nothing yet.
    let (ok, lines, _) = tail(data.path(), &db.url, &[]).await;
    assert!(ok);
    assert!(lines.is_empty(), "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_refuses_bad_flags_naming_them() {
    let data = tempfile::tempdir().expect("tempdir");
    let db = test_db().await;
    // Bad flags: refused, naming the problem.
    for (args, says) in [
        (&["--type", "stock.exploded"][..], "unknown"),
        (&["--stream", "planet:1"][..], "stream"),
        (&["--after", "e1.x"][..], "cursor"),
        (
            &["--after", "e2.1", "--from", "start"][..],
            "cannot be used with",
        ),
        (&["--max-events", "0"][..], "0"),
    ] {
        let (ok, _, stderr) = tail(data.path(), &db.url, args).await;
        assert!(!ok, "{args:?} accepted");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_follows_what_commits_until_its_bound() {
    let data = tempfile::tempdir().expect("tempdir");
    let db = test_db().await;
    let store = db.store();
    admin::set_count(&store, ProductId::new(1).expect("id"), 1)
        .await
        .expect("count");
    let all = feed(&store, 1).await;
    let last = all[0].cursor.as_str();
    // --follow sees what commits while it polls, and --max-events ends it. It starts after the
    // last event, so what it prints does not depend on when it attached; the pause lets it
    // catch up and poll first (when the machine is slow it reads them on its first read instead,
    // and the answer is the same).
    let mut cmd = saldo(data.path());
    cmd.args(["--database-url", &db.url, "events", "tail", "--follow"])
        .args([
            "--after",
            last,
            "--max-events",
            "2",
            "--poll-interval",
            "50ms",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("spawn");
    let mut out = BufReader::new(child.stdout.take().expect("stdout")).lines();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for n in [4, 5] {
        admin::set_count(&store, ProductId::new(3).expect("id"), n)
            .await
            .expect("count");
    }
    let mut got = Vec::new();
    while let Some(line) = tokio::time::timeout(WAIT, out.next_line())
        .await
        .expect("a line in time")
        .expect("read")
    {
        got.push(line);
    }
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("exits in time")
        .expect("status");
    assert!(status.success());
    let got = parsed(&got);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.iter().all(|e| e["stream"] == "product:3"), "{got:?}");
    let _: Cursor = got[1]["cursor"]
        .as_str()
        .expect("cursor")
        .parse()
        .expect("cursor");
}
