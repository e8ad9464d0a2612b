//! A killed service restarts in place, and its secrets stay in saldo, through the real binary:
//! - the run record (`postgres.run`) a kill -9 leaves behind names a pid that, by the next
//!   start, belongs to another live process (in a container often the new saldo itself): that
//!   is no owner, so `saldo serve` and `saldo db` start and `saldo audit` attaches to them;
//! - the embedded postmaster's environment (readable by any database superuser session through
//!   `/proc/<pid>/environ`) holds none of saldo's: no token, nothing but the locale, time zone
//!   and search path.
//!
//! Every wait is bounded; servers listen on 127.0.0.1 only and are killed by their own handle.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use tokio::io::AsyncBufReadExt;

use crate::tokens::{saldo, Serve};

const ADMIN: &str = "restart-admin-token-0123456789";
const API: &str = "restart-api-token-0123456789ab";

async fn run(data_dir: &Path, args: &[&str]) -> Output {
    let mut cmd = saldo(data_dir);
    cmd.args(args);
    tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("saldo answered in time")
        .expect("run saldo")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

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

/// The record a kill -9 leaves behind, as this saldo writes it, except that its pid is now
/// `pid`'s, a live process that started at another time than the dead owner did.
fn write_stale_record(data_dir: &Path, pid: u32) {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot id");
    let cluster = data_dir.join("postgres");
    let record = format!(
        "owner_pid={pid}\nowner_started=1\nboot_id={}\npostmaster_pid=999999\ndata_dir={}\n\
         socket_dir={}\nport=5432\ntcp=false\npassword_file={}\n",
        boot.trim(),
        cluster.display(),
        cluster.display(),
        data_dir.join("postgres.password").display()
    );
    let path = data_dir.join("postgres.run");
    std::fs::write(&path, record).expect("write the stale record");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
}

/// Waits (bounded) until the postmaster `pid` is gone.
async fn wait_gone(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while alive(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!alive(pid), "postmaster {pid} outlived its owner");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_naming_a_live_unrelated_pid_does_not_stop_a_restart() {
    let root = tempfile::tempdir().expect("tempdir");
    let data = root.path().join("saldo");
    let out = run(&data, &["migrate"]).await;
    assert!(out.status.success(), "migrate: {}", text(&out.stderr));
    let mut unrelated = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("spawn sleep");
    write_stale_record(&data, unrelated.id());

    let serve = Serve::start_embedded(&data, &[]).await;
    let postmaster = postmaster_pid(&data).expect("the service's postmaster");
    let out = run(&data, &["audit"]).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "audit: {stderr}");
    assert!(
        stderr.contains(&format!(
            "attached to the embedded PostgreSQL that saldo pid {}",
            serve.child.id().expect("pid")
        )),
        "audit did not attach to the service: {stderr}"
    );
    // The live service is still told from a stale record: a second owner is refused.
    let second = run(&data, &["db"]).await;
    assert!(!second.status.success());
    assert!(text(&second.stderr).contains("already runs the embedded PostgreSQL"));
    let _ = serve.stop().await;
    wait_gone(postmaster).await;

    // `saldo db` after the same kind of crash.
    write_stale_record(&data, unrelated.id());
    let mut db = saldo(&data)
        .arg("db")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn saldo db");
    let mut lines = tokio::io::BufReader::new(db.stdout.take().expect("stdout")).lines();
    let ready = tokio::time::timeout(Duration::from_secs(120), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.starts_with("saldo database ready at") {
                return true;
            }
        }
        false
    })
    .await;
    let _ = db.kill().await;
    let still_running = alive(unrelated.id() as i32);
    let _ = unrelated.kill();
    let _ = unrelated.wait();
    assert!(matches!(ready, Ok(true)), "saldo db did not start");
    assert!(still_running, "the unrelated process was left alone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_postmaster_gets_none_of_saldos_secrets() {
    let root = tempfile::tempdir().expect("tempdir");
    let data = root.path().join("saldo");
    let serve = Serve::start_embedded_with_env(
        &data,
        &[],
        &[
            ("SALDO_ADMIN_TOKEN", ADMIN),
            ("SALDO_API_TOKEN", API),
            ("SALDO_SOME_FUTURE_SECRET", "future-secret-value"),
        ],
    )
    .await;
    assert_eq!(
        serve
            .status("GET", "/v1/admin/locks", Some(ADMIN), "")
            .await,
        200,
        "the service runs with the tokens of its environment"
    );
    let postmaster = postmaster_pid(&data).expect("the service's postmaster");
    let environ = std::fs::read(format!("/proc/{postmaster}/environ")).expect("environ");
    let _ = serve.stop().await;
    let environ = text(&environ);
    for secret in [ADMIN, API, "future-secret-value"] {
        assert!(!environ.contains(secret), "the postmaster holds a secret");
    }
    let names: Vec<&str> = environ
        .split('\0')
        .filter_map(|v| v.split_once('=').map(|(k, _)| k))
        .collect();
    assert!(
        names.iter().all(|k| pg_local::kept_env(k)),
        "the postmaster inherited {names:?}"
    );
}
