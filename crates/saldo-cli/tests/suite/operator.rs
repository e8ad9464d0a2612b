//! The operator's first hour, through the real binary:
//! - tools attach: `locks`, `audit`, `sweep`, `migrate` use the embedded cluster a running
//!   `saldo serve` records in its data directory (they see its data and start no second
//!   postmaster), and start their own only when none runs, saying so — a dead owner's record
//!   included;
//! - validate first: a bad setting exits non-zero naming the flag or variable actually used,
//!   before the data directory is created or anything is printed on stdout;
//! - errors a person reads: one line per cause, the server's host and port and the OS error,
//!   no backtrace unless `SALDO_BACKTRACE=1`.
//!
//! Every wait is bounded; servers listen on 127.0.0.1 only and are killed by their own handle.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::tokens::{saldo, Serve};

/// A path under a fresh temporary directory that does not exist yet.
fn absent_dir(root: &tempfile::TempDir) -> std::path::PathBuf {
    root.path().join("saldo")
}

async fn run(data_dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = saldo(data_dir);
    cmd.args(args).envs(env.iter().copied());
    tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("saldo answered in time")
        .expect("run saldo")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The pid the cluster's `postmaster.pid` names, if any.
fn postmaster_pid(data_dir: &Path) -> Option<i32> {
    std::fs::read_to_string(data_dir.join("postgres/postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_attach_to_a_running_serve_and_start_their_own_only_when_none_runs() {
    let root = tempfile::tempdir().expect("tempdir");
    let data = absent_dir(&root);
    // The service's own sweeper must not expire the reservation first: `sweep` has to.
    let serve = Serve::start_embedded(&data, &["--sweep-interval-s", "1h"]).await;
    let admin = serve.generated("admin").expect("admin token printed");
    let api = serve.generated("api").expect("api token printed");
    let record = data.join("postgres.run");
    let mode = std::fs::metadata(&record)
        .expect("the record")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the record is private");
    let postmaster = postmaster_pid(&data).expect("the service's postmaster");

    assert_eq!(
        serve
            .status(
                "PUT",
                "/v1/products/1/stock",
                Some(&admin),
                r#"{"count": 5}"#
            )
            .await,
        200
    );
    let reserve =
        r#"{"order_id": "attach-1", "items": [{"product_id": 1, "quantity": 2}], "ttl_s": 1}"#;
    assert_eq!(
        serve
            .status("POST", "/v1/reservations", Some(&api), reserve)
            .await,
        201
    );

    // The reservation lives in the service's database only: a `sweep` that expires it (once
    // its 1 s TTL is over; bounded polling) works on that database.
    let mut expired = 0u64;
    for _ in 0..40 {
        let out = run(&data, &["sweep"], &[]).await;
        assert!(out.status.success(), "sweep: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("attached to the embedded PostgreSQL"),
            "sweep did not attach: {}",
            text(&out.stderr)
        );
        expired += text(&out.stdout)
            .trim()
            .strip_prefix("expired ")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .expect("`expired N reservations and M pending transfers`");
        if expired > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(expired, 1, "sweep expired the service's reservation");
    assert_eq!(
        serve
            .status("GET", "/v1/products/1/stock", Some(&api), "")
            .await,
        200
    );

    for (tool, says) in [
        (&["audit"][..], "audit clean"),
        (&["locks"][..], "no session is waiting on a lock"),
        (&["migrate"][..], "migrations applied"),
    ] {
        let out = run(&data, tool, &[]).await;
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{tool:?}: {stderr}");
        assert!(
            text(&out.stdout).contains(says),
            "{tool:?}: {}",
            text(&out.stdout)
        );
        assert!(
            stderr.contains("attached to the embedded PostgreSQL"),
            "{tool:?}: {stderr}"
        );
        assert!(
            !stderr.contains("starting its embedded"),
            "{tool:?}: {stderr}"
        );
    }
    // No second postmaster ever ran: the service's is still the one, and still up.
    assert_eq!(postmaster_pid(&data), Some(postmaster));
    assert!(alive(postmaster));
    // A second owner is refused in one line naming the running one.
    let second = run(&data, &["db"], &[]).await;
    assert!(!second.status.success());
    let stderr = text(&second.stderr);
    assert!(
        stderr.contains("already runs the embedded PostgreSQL"),
        "{stderr}"
    );

    // kill -9 of the service: its record stays behind, naming a dead owner (stale).
    let _ = serve.stop().await;
    for _ in 0..200 {
        if !alive(postmaster) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!alive(postmaster), "the postmaster followed its parent");
    assert!(record.exists(), "a killed owner cannot remove its record");
    let out = run(&data, &["audit"], &[]).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("starting its embedded PostgreSQL"),
        "{stderr}"
    );
    assert!(!stderr.contains("attached"), "{stderr}");
}

/// Arguments, environment, and the name the error must use.
type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);

/// A setting that cannot work is refused before anything happens: the data directory (a path
/// that does not exist yet) is not created, nothing is printed on stdout, and the message names
/// the flag or variable the user actually used. Before validation came first, each of these ran
/// initdb and migrations (and a port in use was reported after a freshly printed admin token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_are_checked_before_anything_is_created() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken = taken.local_addr().expect("addr").to_string();
    let taken_port = taken.rsplit(':').next().expect("port").to_owned();
    let cases: Vec<Case> = vec![
        (
            vec!["serve", "--admin-token", "short"],
            vec![],
            "--admin-token",
        ),
        (
            vec!["serve"],
            vec![("SALDO_ADMIN_TOKEN", "short")],
            "SALDO_ADMIN_TOKEN",
        ),
        (vec!["serve", "--api-token", "short"], vec![], "--api-token"),
        (vec!["serve", "--strategy", "foo"], vec![], "--strategy"),
        (vec!["serve", "--listen", &taken], vec![], "--listen"),
        (
            vec!["serve"],
            vec![("SALDO_LISTEN", &taken)],
            "SALDO_LISTEN",
        ),
        (vec!["serve", "--listen", "nowhere"], vec![], "--listen"),
        (
            vec!["serve", "--reservation-ttl-s", "500ms"],
            vec![],
            "--reservation-ttl-s",
        ),
        (
            vec!["serve"],
            vec![("SALDO_RESERVATION_TTL_S", "15x")],
            "SALDO_RESERVATION_TTL_S",
        ),
        (
            vec!["serve"],
            vec![("SALDO_STRATEGY", "foo")],
            "SALDO_STRATEGY",
        ),
        (
            vec!["race", "last-unit", "--strategy", "foo"],
            vec![],
            "--strategy",
        ),
        (vec!["bench", "--strategy", "foo"], vec![], "--strategy"),
        (vec!["bench", "--duration", "ten"], vec![], "--duration"),
        (
            vec!["--embedded-port", &taken_port, "locks"],
            vec![],
            "--embedded-port",
        ),
    ];
    for (args, env, names) in cases {
        let root = tempfile::tempdir().expect("tempdir");
        let data = absent_dir(&root);
        let out = run(&data, &args, &env).await;
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} {env:?} was accepted");
        assert!(stderr.contains(names), "{args:?} {env:?}: {stderr}");
        assert!(
            !data.exists(),
            "{args:?} {env:?} created the data directory"
        );
        assert_eq!(text(&out.stdout), "", "{args:?} {env:?} printed");
    }
}

/// An unreachable server: one line per cause naming host, port and the OS error, even with
/// RUST_BACKTRACE=1 in the environment; the backtrace only with SALDO_BACKTRACE=1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_one_line_per_cause_and_name_the_server() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let url = format!("postgresql://postgres:secret@127.0.0.1:{port}/postgres");
    let root = tempfile::tempdir().expect("tempdir");
    let data = absent_dir(&root);
    let out = run(
        &data,
        &["--database-url", &url, "migrate"],
        &[("RUST_BACKTRACE", "1")],
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.starts_with("error: connecting to PostgreSQL at host 127.0.0.1 port "),
        "{stderr}"
    );
    assert!(stderr.contains(&port.to_string()), "{stderr}");
    assert!(stderr.contains("Connection refused"), "{stderr}");
    assert!(stderr.lines().count() <= 4, "{stderr}");
    assert!(!stderr.contains("backtrace"), "{stderr}");
    assert!(
        !stderr.contains("secret"),
        "the password was printed: {stderr}"
    );
    assert!(!data.exists(), "a URL run needs no data directory");

    let out = run(
        &data,
        &["--database-url", &url, "migrate"],
        &[("SALDO_BACKTRACE", "1")],
    )
    .await;
    assert!(
        text(&out.stderr).contains("backtrace:"),
        "{}",
        text(&out.stderr)
    );
}

/// Flags people carry over from other servers get pointed at saldo's own: `--port` at
/// `--listen` (clap alone suggested `--pool-create-timeout-ms`), a URL given to `--listen` at
/// the address without its scheme (its parser alone called it an IPv6 address without
/// brackets). Refused like any bad flag: exit status 2, nothing created or printed on stdout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_points_port_and_url_flags_at_a_listen_address() {
    let cases: [(&[&str], &str); 4] = [
        (&["serve", "--port", "8080"], "--listen 127.0.0.1:8080"),
        (&["serve", "--port"], "--listen 127.0.0.1:PORT"),
        (
            &["serve", "--listen", "http://127.0.0.1:8080"],
            "--listen 127.0.0.1:8080",
        ),
        (
            &["serve", "--listen", "https://[::1]:8443/"],
            "--listen [::1]:8443",
        ),
    ];
    for (args, says) in cases {
        let root = tempfile::tempdir().expect("tempdir");
        let data = absent_dir(&root);
        let out = run(&data, args, &[]).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        for misleading in ["pool-create-timeout", "IPv6", "brackets"] {
            assert!(!stderr.contains(misleading), "{args:?}: {stderr}");
        }
        assert!(!data.exists(), "{args:?} created the data directory");
        assert_eq!(text(&out.stdout), "", "{args:?} printed");
    }
}
