//! Removing the throwaway data directories that earlier processes left behind.
//!
//! An ephemeral cluster's directory is removed when its [`crate::Cluster`] is dropped, but a test
//! harness keeps its cluster in a `static`, which is never dropped: the postmaster stops (parent-
//! death signal) and its directory stays, tens of megabytes per test binary run, until the disk
//! fills. So every ephemeral start first reaps the `pg-local-*` directories whose owner process
//! is gone and whose postmaster is not running. A directory that records no owner is only
//! reaped once it is old, so a sibling process that is still running initdb is never touched.
//! "Gone" is judged as in `owner.rs`: an owner whose pid another process holds now is gone,
//! and a postmaster pid held by a process working elsewhere is no postmaster.

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::owner;

/// Prefix of every ephemeral directory, under the system temp dir.
pub(crate) const PREFIX: &str = "pg-local-";
/// File in an ephemeral directory naming the process that owns it.
pub(crate) const OWNER_FILE: &str = "owner.pid";
/// A directory without an owner file is reaped only when older than this.
const UNOWNED_GRACE: Duration = Duration::from_secs(60 * 60);
/// Most directories examined per start, so a huge temp dir cannot stall a start.
const MAX_EXAMINED: usize = 10_000;

/// Records the current process as the owner of `dir`.
pub(crate) fn claim(dir: &Path) -> std::io::Result<()> {
    owner::claim(&dir.join(OWNER_FILE))
}

/// Removes stale ephemeral directories under `root`; returns how many were removed.
/// Best effort: a directory that cannot be read or removed is left alone.
pub(crate) fn reap_stale(root: &Path) -> usize {
    let Ok(entries) = fs::read_dir(root) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten().take(MAX_EXAMINED) {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(PREFIX) {
            continue;
        }
        let dir = entry.path();
        if is_stale(&dir) && fs::remove_dir_all(&dir).is_ok() {
            tracing::debug!(dir = %dir.display(), "removed a stale ephemeral cluster directory");
            removed += 1;
        }
    }
    removed
}

fn is_stale(dir: &Path) -> bool {
    if !dir.is_dir() || postmaster_running(&dir.join("data")) {
        return false;
    }
    match owner::alive_in(&dir.join(OWNER_FILE)) {
        Some(alive) => !alive,
        None => older_than(dir, UNOWNED_GRACE),
    }
}

fn postmaster_running(data_dir: &Path) -> bool {
    read_pid(&data_dir.join("postmaster.pid")).is_some_and(|pid| owner::runs_in(pid, data_dir))
}

/// The first line of `file` as a pid.
pub(crate) fn read_pid(file: &Path) -> Option<i32> {
    let text = fs::read_to_string(file).ok()?;
    text.lines().next()?.trim().parse().ok().filter(|p| *p > 0)
}

fn older_than(dir: &Path, age: Duration) -> bool {
    fs::metadata(dir)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|elapsed| elapsed > age)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pid that is certainly not running: a child we started and reaped.
    fn dead_pid() -> i32 {
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = child.id() as i32;
        child.wait().expect("wait");
        pid
    }

    #[test]
    fn reaps_only_directories_whose_owner_is_gone() {
        let root = tempfile::tempdir().expect("tempdir");
        let dead = root.path().join(format!("{PREFIX}dead"));
        let mine = root.path().join(format!("{PREFIX}mine"));
        let fresh_unowned = root.path().join(format!("{PREFIX}initdb-in-progress"));
        let unrelated = root.path().join("something-else");
        for d in [&dead, &mine, &fresh_unowned, &unrelated] {
            fs::create_dir_all(d.join("data")).expect("mkdir");
        }
        fs::write(dead.join(OWNER_FILE), dead_pid().to_string()).expect("write");
        claim(&mine).expect("claim");
        // Its owner's pid is this process's now, but the owner started at another time: the
        // directory of a killed process whose pid was handed on.
        let reused = root.path().join(format!("{PREFIX}reused"));
        fs::create_dir_all(reused.join("data")).expect("mkdir");
        let me = owner::Owner::current().expect("me");
        let before_me = owner::Owner {
            started: me.started.saturating_sub(1),
            ..me
        };
        fs::write(reused.join(OWNER_FILE), before_me.to_text()).expect("write");

        assert_eq!(reap_stale(root.path()), 2);
        assert!(!dead.exists(), "a dead owner's directory is removed");
        assert!(
            !reused.exists(),
            "so is one whose owner's pid went to another process"
        );
        assert!(mine.exists(), "a live owner's directory stays");
        assert!(fresh_unowned.exists(), "a young unowned directory stays");
        assert!(unrelated.exists(), "other directories are never touched");
    }

    #[test]
    fn a_running_postmaster_keeps_its_directory() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join(format!("{PREFIX}running"));
        fs::create_dir_all(dir.join("data")).expect("mkdir");
        fs::write(dir.join(OWNER_FILE), dead_pid().to_string()).expect("write");
        // The postmaster.pid names a live process working in the data directory.
        let mut postmaster = std::process::Command::new("sleep")
            .arg("30")
            .current_dir(dir.join("data"))
            .spawn()
            .expect("spawn sleep");
        fs::write(
            dir.join("data/postmaster.pid"),
            format!("{}\n/data\n", postmaster.id()),
        )
        .expect("write");
        let reaped = reap_stale(root.path());
        let _ = postmaster.kill();
        let _ = postmaster.wait();
        assert_eq!(reaped, 0);
        assert!(dir.exists());
    }

    /// A postmaster.pid left by a crash whose pid went to a process working elsewhere (here
    /// this test process) keeps nothing alive.
    #[test]
    fn a_postmaster_pid_held_by_another_process_keeps_nothing() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join(format!("{PREFIX}crashed"));
        fs::create_dir_all(dir.join("data")).expect("mkdir");
        fs::write(dir.join(OWNER_FILE), dead_pid().to_string()).expect("write");
        fs::write(
            dir.join("data/postmaster.pid"),
            format!("{}\n/data\n", std::process::id()),
        )
        .expect("write");
        assert_eq!(reap_stale(root.path()), 1);
        assert!(!dir.exists());
    }
}
