//! Tests of the cluster's life cycle and of who may get in, against real PostgreSQL servers.
//! Clients are the machine's `psql` (installed with the server binaries), so what is checked
//! is what an operator or another local user would see.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use super::*;
use crate::cluster::{free_port, init_data_dir, is_ready};

fn binaries() -> Binaries {
    Binaries::find().expect("binaries")
}

/// `psql -c 'SELECT 1'` over the cluster's socket, with `password` (none: no password at all)
/// and, when `uid` is given, as that OS user.
fn psql(cluster: &Cluster, password: Option<&str>, uid: Option<u32>) -> Output {
    let psql = binaries().dir().join("psql");
    assert!(psql.is_file(), "psql not found next to the server binaries");
    let mut cmd = std::process::Command::new(psql);
    cmd.arg("-h")
        .arg(cluster.socket_dir())
        .args(["-p", &cluster.port().to_string(), "-U", SUPERUSER])
        .args(["-d", "postgres", "-w", "-Atc", "SELECT 1"])
        .env_remove("PGPASSWORD")
        .env("PGPASSFILE", "/dev/null")
        .current_dir("/");
    if let Some(p) = password {
        cmd.env("PGPASSWORD", p);
    }
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    cmd.output().expect("run psql")
}

fn accepted(out: &Output) -> bool {
    out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "1"
}

fn password_of(cluster: &Cluster) -> String {
    fs::read_to_string(cluster.password_file())
        .expect("password file")
        .trim()
        .to_owned()
}

pub(crate) fn mode_of(path: &Path) -> u32 {
    fs::metadata(path).expect("metadata").permissions().mode() & 0o7777
}

/// The inodes of the TCP sockets the process `pid` holds (IPv4 and IPv6).
pub(crate) fn tcp_sockets_of(pid: u32) -> Vec<String> {
    let mut inodes = Vec::new();
    for entry in fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fds")
        .flatten()
    {
        let Ok(target) = fs::read_link(entry.path()) else {
            continue;
        };
        let target = target.to_string_lossy().into_owned();
        if let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|s| s.strip_suffix(']'))
        {
            inodes.push(inode.to_owned());
        }
    }
    let mut tcp = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            if let Some(inode) = line.split_whitespace().nth(9) {
                if inodes.iter().any(|i| i == inode) {
                    tcp.push(line.to_owned());
                }
            }
        }
    }
    tcp
}

fn server_uid() -> u32 {
    match process::RunAs::for_current_process().expect("run as") {
        process::RunAs::User { uid, .. } => uid.as_raw(),
        process::RunAs::CurrentUser => nix::unistd::geteuid().as_raw(),
    }
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[test]
fn ephemeral_cluster_starts_accepts_and_stops() {
    let mut cluster = Cluster::start(&Config::ephemeral()).expect("start");
    let pid = cluster.pid().expect("pid");
    let binaries = binaries();
    assert!(is_ready(&binaries, cluster.socket_dir(), cluster.port()));
    let data_dir = cluster.data_dir().to_owned();
    cluster.stop();
    assert!(cluster.has_exited());
    assert!(!is_ready(&binaries, cluster.socket_dir(), cluster.port()));
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "postmaster {pid} still running after stop"
    );
    drop(cluster);
    assert!(!data_dir.exists(), "ephemeral data dir not removed");
}

#[test]
fn persistent_cluster_keeps_its_data_directory_and_password() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = parent.path().join("pg");
    let first_password = {
        let c = Cluster::start(&Config::persistent(&dir)).expect("first start");
        assert_eq!(c.password_file(), parent.path().join("pg.password"));
        assert_eq!(mode_of(c.password_file()), 0o600);
        password_of(&c)
    };
    assert!(dir.join("PG_VERSION").exists());
    // A second start reuses the initialised directory and its password.
    let c = Cluster::start(&Config::persistent(&dir)).expect("second start");
    assert_eq!(password_of(&c), first_password);
    assert!(accepted(&psql(&c, Some(&first_password), None)));
    let url = c.url("postgres");
    assert!(url.starts_with("postgresql://postgres:"), "{url}");
    assert!(url.contains(&first_password));
    let shown = c.redacted_url("postgres");
    assert!(!shown.contains(&first_password), "{shown}");
    assert_eq!(redact(&url), shown);
}

/// No TCP listener, a socket directory nobody else can enter, and no way in without
/// the password. On the trust/127.0.0.1 cluster of before, every assertion here failed.
#[test]
fn nobody_else_gets_in() {
    let cluster = Cluster::start(&Config::ephemeral()).expect("start");
    let pid = cluster.pid().expect("pid");
    let tcp = tcp_sockets_of(pid);
    assert!(tcp.is_empty(), "the postmaster holds TCP sockets: {tcp:?}");
    assert!(!cluster.has_tcp());

    let meta = fs::metadata(cluster.socket_dir()).expect("socket dir");
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    assert_eq!(meta.uid(), server_uid());

    let password = password_of(&cluster);
    assert_eq!(mode_of(cluster.password_file()), 0o600);
    assert!(
        !accepted(&psql(&cluster, None, None)),
        "no password must be refused"
    );
    let wrong = psql(&cluster, Some("not-the-password"), None);
    assert!(!accepted(&wrong), "a wrong password must be refused");
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("password authentication failed"),
        "{}",
        String::from_utf8_lossy(&wrong.stderr)
    );
    assert!(accepted(&psql(&cluster, Some(&password), None)));

    // Another OS user does not even reach the socket, password or not.
    if is_root() {
        if let Some(nobody) = nix::unistd::User::from_name("nobody").expect("getpwnam") {
            let out = psql(&cluster, Some(&password), Some(nobody.uid.as_raw()));
            assert!(!accepted(&out), "another user got in");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains("Permission denied"), "{stderr}");
        }
    }
    let log = fs::read_to_string(cluster.log_file()).expect("log");
    assert!(!log.contains(&password), "the password reached the log");
}

#[test]
fn tcp_is_opt_in_and_still_needs_the_password() {
    let cluster = Cluster::start(&Config::ephemeral().with_tcp()).expect("start");
    assert!(cluster.has_tcp());
    assert!(!tcp_sockets_of(cluster.pid().expect("pid")).is_empty());
    let psql = binaries().dir().join("psql");
    let out = std::process::Command::new(psql)
        .args(["-h", "127.0.0.1", "-p", &cluster.port().to_string()])
        .args(["-U", SUPERUSER, "-d", "postgres", "-w", "-Atc", "SELECT 1"])
        .env_remove("PGPASSWORD")
        .env("PGPASSFILE", "/dev/null")
        .output()
        .expect("psql");
    assert!(!accepted(&out), "TCP without a password must be refused");
}

/// The parent of the data directory was made by someone else: its owner and mode
/// stay. Two clusters under one parent each log inside their own directory. (The old code
/// chmodded the parent to 0700, and chowned it to postgres as root, and shared one log.)
#[test]
fn directories_saldo_did_not_create_keep_owner_and_mode() {
    let root = tempfile::tempdir().expect("tempdir");
    let parent = root.path().join("x");
    fs::create_dir(&parent).expect("mkdir");
    fs::set_permissions(&parent, fs::Permissions::from_mode(0o755)).expect("chmod");
    let owner = fs::metadata(&parent).expect("meta").uid();

    let a = Cluster::start(&Config::persistent(parent.join("a"))).expect("start a");
    let b = Cluster::start(&Config::persistent(parent.join("b"))).expect("start b");
    assert_eq!(mode_of(&parent), 0o755, "the parent's mode changed");
    assert_eq!(
        fs::metadata(&parent).expect("meta").uid(),
        owner,
        "the parent's owner changed"
    );
    assert_ne!(a.log_file(), b.log_file());
    assert!(a.log_file().starts_with(a.data_dir()), "{:?}", a.log_file());
    assert!(b.log_file().starts_with(b.data_dir()), "{:?}", b.log_file());
    // The data directories themselves were created by pg-local: the server's, 0700.
    assert_eq!(mode_of(a.data_dir()), 0o700);
    assert_eq!(
        fs::metadata(a.data_dir()).expect("meta").uid(),
        server_uid()
    );
}

/// As root, a parent the `postgres` user cannot enter is refused with a message naming it,
/// and left as it was (the old code chowned it to postgres).
#[test]
fn a_parent_the_server_cannot_enter_is_refused_not_changed() {
    if !is_root() {
        eprintln!("skipped: only root starts the server as another user");
        return;
    }
    let root = tempfile::tempdir().expect("tempdir");
    let parent = root.path().join("closed");
    fs::create_dir(&parent).expect("mkdir");
    fs::set_permissions(&parent, fs::Permissions::from_mode(0o700)).expect("chmod");
    let err = Cluster::start(&Config::persistent(parent.join("pg"))).expect_err("refused");
    assert!(matches!(err, Error::NotTraversable { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains(&parent.display().to_string()), "{message}");
    assert_eq!(mode_of(&parent), 0o700);
    assert_eq!(fs::metadata(&parent).expect("meta").uid(), 0);
    assert!(!parent.join("pg").exists());
}

/// A cluster an older pg-local initialised with `trust` is switched to SCRAM at its next start.
#[test]
fn a_trust_cluster_is_upgraded_to_scram() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("pg");
    let run_as = process::RunAs::for_current_process().expect("run as");
    dirs::prepare_data_dir(&run_as, &dir).expect("mkdir");
    init_data_dir(&binaries(), &run_as, &dir, true).expect("initdb");
    let hba = fs::read_to_string(dir.join("pg_hba.conf")).expect("hba");
    assert!(hba.contains("trust"));

    let cluster = Cluster::start(&Config::persistent(&dir)).expect("start");
    assert!(auth::hba_is_ours(&dir));
    assert!(!accepted(&psql(&cluster, None, None)));
    assert!(accepted(&psql(
        &cluster,
        Some(&password_of(&cluster)),
        None
    )));
}

/// After a SIGKILL of the postmaster the cluster can be started again in place (what the
/// service's supervisor does), on the same socket and password.
#[test]
fn a_killed_postmaster_can_be_restarted() {
    let mut cluster = Cluster::start(&Config::ephemeral()).expect("start");
    let url = cluster.url("postgres");
    let pid = cluster.pid().expect("pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cluster.has_exited() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(cluster.has_exited());
    // Backends of the dead postmaster may hold its shared memory for a moment.
    let mut attempts = 0;
    loop {
        attempts += 1;
        match cluster.restart() {
            Ok(()) => break,
            Err(e) if attempts < 10 => {
                eprintln!("restart attempt {attempts}: {e}");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("restart: {e}"),
        }
    }
    assert_ne!(cluster.pid(), Some(pid));
    assert_eq!(cluster.url("postgres"), url);
    assert!(accepted(&psql(
        &cluster,
        Some(&password_of(&cluster)),
        None
    )));
}

/// The variables in `/proc/<pid>/environ`.
fn environ_of(pid: u32) -> Vec<(String, String)> {
    let raw = fs::read(format!("/proc/{pid}/environ")).expect("environ");
    raw.split(|b| *b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| {
            let v = String::from_utf8_lossy(v);
            let (k, val) = v.split_once('=').unwrap_or((&v, ""));
            (k.to_owned(), val.to_owned())
        })
        .collect()
}

/// Any database superuser can read the postmaster's environment (`pg_read_file` of
/// `/proc/self/environ` in a backend): it holds only the locale, time zone and search path, and
/// what the configuration adds; nothing else of the parent's, whose environment holds its
/// secrets (saldo's tokens, a `DATABASE_URL`).
#[test]
fn the_postmaster_inherits_no_other_variable_of_its_parent() {
    let parents: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| !kept_env(k))
        .collect();
    assert!(
        !parents.is_empty(),
        "the test runs with variables to leave out"
    );
    let mut config = Config::ephemeral();
    config.env.push(("PGPASSFILE".into(), "/dev/null".into()));
    let cluster = Cluster::start(&config).expect("start");
    let environ = environ_of(cluster.pid().expect("pid"));
    let leaked: Vec<&String> = environ
        .iter()
        .map(|(k, _)| k)
        .filter(|k| !kept_env(k) && k.as_str() != "PGPASSFILE")
        .collect();
    assert!(leaked.is_empty(), "inherited {leaked:?}");
    assert!(environ
        .iter()
        .any(|(k, v)| k == "PGPASSFILE" && v == "/dev/null"));
    if let Ok(path) = std::env::var("PATH") {
        assert!(environ.iter().any(|(k, v)| k == "PATH" && *v == path));
    }
}

/// A crash that takes the postmaster with it (OOM kill, power loss) leaves `postmaster.pid`
/// behind, and its pid may belong to another process by the next start (in a container, often
/// one of the new owner's): that is no server, and the cluster starts in place.
#[test]
fn a_postmaster_pid_left_by_a_crash_does_not_stop_a_start() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("pg");
    drop(Cluster::start(&Config::persistent(&dir)).expect("first start"));
    let mut unrelated = std::process::Command::new("sleep")
        .arg("60")
        .current_dir("/")
        .spawn()
        .expect("spawn sleep");
    fs::write(
        dir.join("postmaster.pid"),
        format!(
            "{}\n{}\n1700000000\n{SOCKET_PORT}\n{}\n\n  5432001         0\nready   \n",
            unrelated.id(),
            dir.display(),
            dir.display()
        ),
    )
    .expect("write a crash's postmaster.pid");
    let started = Cluster::start(&Config::persistent(&dir));
    let still_running = owner::alive(unrelated.id() as i32);
    let _ = unrelated.kill();
    let _ = unrelated.wait();
    let cluster = started.expect("a start over a stale postmaster.pid");
    assert!(still_running, "the unrelated process was left alone");
    assert!(accepted(&psql(
        &cluster,
        Some(&password_of(&cluster)),
        None
    )));
    assert_eq!(
        reap::read_pid(&dir.join("postmaster.pid")),
        cluster.pid().map(|p| p as i32)
    );
}

/// The socket path is fixed per data directory, so a second start on a running directory must
/// be refused, not mistake the first server's answer for its own.
#[test]
fn a_second_server_on_a_running_directory_is_refused() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("pg");
    let first = Cluster::start(&Config::persistent(&dir)).expect("first");
    let err = Cluster::start(&Config::persistent(&dir)).expect_err("second refused");
    assert!(matches!(err, Error::AlreadyRunning { .. }), "{err}");
    assert!(!first.has_exited());
}

/// A data directory whose socket path would not fit in `sun_path` gets a private socket
/// directory under the temp dir instead: still 0700 and the server's, removed with the cluster.
#[test]
fn a_long_data_directory_gets_a_private_socket_directory() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("a".repeat(60)).join("b".repeat(60));
    let cluster = Cluster::start(&Config::persistent(&dir)).expect("start");
    let socket_dir = cluster.socket_dir().to_owned();
    assert!(!socket_dir.starts_with(&dir), "{socket_dir:?}");
    assert!(
        socket_dir.starts_with(std::env::temp_dir()),
        "{socket_dir:?}"
    );
    let meta = fs::metadata(&socket_dir).expect("socket dir");
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    assert_eq!(meta.uid(), server_uid());
    assert!(accepted(&psql(
        &cluster,
        Some(&password_of(&cluster)),
        None
    )));
    drop(cluster);
    assert!(
        !socket_dir.exists(),
        "the private socket directory stays behind"
    );
}

/// Ctrl-C in a terminal signals the whole foreground process group: the postmaster must not be
/// in its parent's, or it stops before the parent's in-flight requests finish (and a
/// supervisor would "restart" it during shutdown).
#[test]
fn the_postmaster_has_a_process_group_of_its_own() {
    let cluster = Cluster::start(&Config::ephemeral()).expect("start");
    let pid = cluster.pid().expect("pid");
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after_name = &stat[stat.rfind(')').expect("comm") + 1..];
    let pgrp: u32 = after_name
        .split_whitespace()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .expect("pgrp");
    assert_eq!(pgrp, pid, "the postmaster leads its own process group");
    assert_ne!(
        i64::from(pgrp),
        i64::from(nix::unistd::getpgrp().as_raw()),
        "the postmaster shares its parent's process group"
    );
}

/// `psql -c <sql>` over the cluster's socket with its password; panics on failure.
fn psql_run(cluster: &Cluster, sql: &str) {
    let out = std::process::Command::new(binaries().dir().join("psql"))
        .arg("-h")
        .arg(cluster.socket_dir())
        .args(["-p", &cluster.port().to_string(), "-U", SUPERUSER])
        .args(["-d", "postgres", "-w", "-q", "-c", sql])
        .env("PGPASSWORD", password_of(cluster))
        .env("PGPASSFILE", "/dev/null")
        .current_dir("/")
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The log files of a cluster: `server.log` and its rotated predecessors, with their sizes.
fn log_files(cluster: &Cluster) -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = fs::read_dir(cluster.data_dir())
        .expect("read_dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(LOG_FILE))
        .map(|e| {
            let len = e.metadata().expect("meta").len();
            (e.file_name().to_string_lossy().into_owned(), len)
        })
        .collect();
    files.sort();
    files
}

/// The server log (14 MB on a long-lived cluster, never rotated before) is
/// rotated within a bounded set of files whatever the server writes. A tiny limit and a burst
/// of logged statements (`log_statement=all`, ~200 KB of log) must leave at most `files` files,
/// none larger than the limit plus one line, and the newest statements in the current file.
#[test]
fn the_server_log_is_rotated_and_bounded() {
    let limit = LogLimit {
        file_bytes: 16 * 1024,
        files: 3,
    };
    let cluster = Cluster::start(
        &Config::ephemeral()
            .setting("log_statement", "all")
            .log_limit(limit),
    )
    .expect("start");
    let mut sql = String::new();
    for i in 0..2_000 {
        sql.push_str(&format!("SELECT {i} AS burst_statement_number;\n"));
    }
    psql_run(&cluster, &sql);
    psql_run(&cluster, "SELECT 'the last statement'");
    // The copier writes asynchronously: wait (bounded) for the last statement to land.
    let deadline = Instant::now() + Duration::from_secs(10);
    let current = || fs::read_to_string(cluster.log_file()).unwrap_or_default();
    while !current().contains("the last statement") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(current().contains("the last statement"), "{}", current());
    let files = log_files(&cluster);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["server.log", "server.log.1", "server.log.2"],
        "rotated into exactly `files` names"
    );
    let total: u64 = files.iter().map(|(_, len)| len).sum();
    for (name, len) in &files {
        assert!(*len <= limit.file_bytes, "{name} holds {len} bytes");
    }
    assert!(total <= limit.max_total_bytes(), "{total} bytes of log");
}

/// `with_port`: the server listens on 127.0.0.1 at exactly that port, and its URL names it.
#[test]
fn a_fixed_tcp_port_is_used_as_given() {
    let port = free_port().expect("free port");
    let cluster = Cluster::start(&Config::ephemeral().with_port(port)).expect("start");
    assert!(cluster.has_tcp());
    assert_eq!(cluster.port(), port);
    assert!(cluster.url("postgres").contains(&format!(":{port}/")));
    std::net::TcpStream::connect(("127.0.0.1", port)).expect("listening on the fixed port");
    // The same port again cannot be had: one line saying why.
    let err = Cluster::start(&Config::ephemeral().with_port(port)).expect_err("port taken");
    let message = err.to_string();
    assert!(matches!(err, Error::StartFailed { .. }), "{message}");
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(
        message.contains("could not") || message.contains("in use"),
        "{message}"
    );
}

/// A second start on a running directory is refused in one line that says what to do.
#[test]
fn the_already_running_error_is_one_line_saying_what_to_do() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("pg");
    let _first = Cluster::start(&Config::persistent(&dir)).expect("first");
    let message = Cluster::start(&Config::persistent(&dir))
        .expect_err("second refused")
        .to_string();
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(
        message.contains("connect to that server instead"),
        "{message}"
    );
}
