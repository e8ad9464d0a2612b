//! The private MariaDB's promises, on a real server: it answers on its socket, its password
//! file is 0600, nothing listens on TCP unless asked, and no mariadbd outlives its owner —
//! after drop, and after the owner is SIGKILLed.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use mariadb_local::{Config, MariaDb};

/// Set in the child process of the SIGKILL test: start a server, report, wait to be killed.
const CHILD_ENV: &str = "MARIADB_LOCAL_TEST_CHILD";

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

fn wait_gone(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    !alive(pid)
}

/// Socket inodes the process `pid` holds.
fn socket_inodes(pid: u32) -> Vec<String> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy().into_owned();
            link.strip_prefix("socket:[")
                .and_then(|s| s.strip_suffix(']'))
                .map(str::to_owned)
        })
        .collect()
}

/// Whether `pid` holds a listening TCP socket (state 0A in /proc/net/tcp{,6}).
fn listens_on_tcp(pid: u32) -> bool {
    let mine = socket_inodes(pid);
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|table| {
        std::fs::read_to_string(table)
            .unwrap_or_default()
            .lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.get(3) == Some(&"0A")).then(|| f.get(9).map(|s| s.to_string()))?
            })
            .any(|inode| mine.contains(&inode))
    })
}

#[test]
fn answers_on_its_socket_keeps_its_password_private_and_is_gone_after_drop() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let server = MariaDb::start(&Config::default()).expect("start");
    let mode = std::fs::metadata(server.password_file())
        .expect("password file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(
        std::fs::read_to_string(server.password_file()).expect("read"),
        server.password()
    );
    // The server's greeting: protocol 10, then its version.
    let mut stream = UnixStream::connect(server.socket()).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut greeting = [0u8; 64];
    let n = stream.read(&mut greeting).expect("greeting");
    assert!(String::from_utf8_lossy(&greeting[..n]).contains("MariaDB"));
    assert!(!listens_on_tcp(server.pid()), "no TCP listener by default");
    let (pid, dir) = (server.pid(), server.dir().to_path_buf());
    drop(server);
    assert!(!alive(pid), "mariadbd {pid} outlived the drop");
    assert!(!dir.exists(), "{} outlived the drop", dir.display());
}

#[test]
fn the_server_dies_with_its_sigkilled_owner() {
    if let Some(report) = std::env::var_os(CHILD_ENV) {
        // The child: start, say which pid, then wait to be killed (bounded).
        let server = MariaDb::start(&Config::default()).expect("start");
        std::fs::write(&report, server.pid().to_string()).expect("report");
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("pid");
    let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            "the_server_dies_with_its_sigkilled_owner",
            "--nocapture",
        ])
        .env(CHILD_ENV, &report)
        .spawn()
        .expect("spawn child");
    let deadline = Instant::now() + Duration::from_secs(60);
    let pid = loop {
        if let Some(pid) = std::fs::read_to_string(&report)
            .ok()
            .and_then(|t| t.parse::<u32>().ok())
        {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "the child never reported its server"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(alive(pid));
    child.kill().expect("SIGKILL the owner");
    let _ = child.wait();
    assert!(
        wait_gone(pid),
        "mariadbd {pid} outlived its SIGKILLed owner"
    );
}
