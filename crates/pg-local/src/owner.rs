//! Who owns something, told apart from whoever has its pid now.
//!
//! A pid alone names a process only while it lives. After a crash (kill -9, an OOM kill, power
//! loss) a file naming the dead owner stays behind, and its pid soon belongs to another process:
//! in a container often the restarted owner itself, or one of its threads. `kill(pid, 0)` then
//! says "alive" for as long as that process runs, and a restart refuses to start. So every owner
//! pg-local records (the run record, the data directory's postmaster owner, an ephemeral
//! directory's owner) also carries the process's start time (`/proc/<pid>/stat` field 22, clock
//! ticks since boot) and the boot's id (`/proc/sys/kernel/random/boot_id`, since ticks restart
//! at every boot): the owner is alive only when the process with that pid started at that tick
//! of this boot.
//!
//! The same flaw hides in PostgreSQL's own `postmaster.pid`: [`runs_in`] tells a live
//! postmaster of a data directory (its working directory is that directory) from a process that
//! only inherited the pid.

use std::fs;
use std::path::Path;
use std::sync::OnceLock;

use nix::sys::signal::kill;
use nix::unistd::Pid;

/// One process: its pid, when it started and in which boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub pid: u32,
    /// Clock ticks after boot at which the process started (`/proc/<pid>/stat` field 22).
    pub started: u64,
    /// The kernel's id of the boot the process runs in.
    pub boot: String,
}

impl Owner {
    /// This process.
    pub fn current() -> Option<Owner> {
        static CURRENT: OnceLock<Option<Owner>> = OnceLock::new();
        CURRENT
            .get_or_init(|| Owner::of(std::process::id()))
            .clone()
    }

    /// The process that has `pid` now; `None` when there is none (or it cannot be read).
    pub fn of(pid: u32) -> Option<Owner> {
        Some(Owner {
            pid,
            started: start_time(pid)?,
            boot: boot_id()?,
        })
    }

    /// Whether this very process still runs: same pid, same start, same boot.
    pub fn is_alive(&self) -> bool {
        Owner::of(self.pid).is_some_and(|now| now == *self)
    }

    /// The text of an owner file: the pid on the first line (what older readers look at), then
    /// the start time and the boot id.
    pub fn to_text(&self) -> String {
        format!("{}\n{}\n{}\n", self.pid, self.started, self.boot)
    }

    /// Parses [`Owner::to_text`]; `None` for anything else.
    pub fn parse(text: &str) -> Option<Owner> {
        let mut lines = text.lines().map(str::trim);
        let pid = lines.next()?.parse().ok().filter(|p| *p > 0)?;
        let started = lines.next()?.parse().ok()?;
        let boot = lines.next().filter(|b| valid_boot_id(b))?.to_owned();
        Some(Owner { pid, started, boot })
    }
}

/// Whether the owner written in `file` still runs: `None` when the file is missing or says
/// nothing usable. A file holding only a pid (written by an older pg-local) is judged by the
/// pid alone, as it was then: a process it cannot tell apart is taken to be the owner.
pub(crate) fn alive_in(file: &Path) -> Option<bool> {
    let text = read_small(file)?;
    if let Some(owner) = Owner::parse(&text) {
        return Some(owner.is_alive());
    }
    let pid: i32 = text
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
        .filter(|p| *p > 0)?;
    Some(alive(pid))
}

/// Writes this process as the owner into `file`.
pub(crate) fn claim(file: &Path) -> std::io::Result<()> {
    let owner = Owner::current().ok_or_else(|| {
        std::io::Error::other("cannot read this process's start time from /proc/self/stat")
    })?;
    fs::write(file, owner.to_text())
}

/// Whether `pid` is a process working in `dir` (a postmaster and its backends work in their
/// data directory). When that cannot be read (another user's process), it is taken to be so:
/// only a process known to work elsewhere is not a postmaster of `dir`.
pub(crate) fn runs_in(pid: i32, dir: &Path) -> bool {
    if !alive(pid) {
        return false;
    }
    let Ok(cwd) = fs::read_link(format!("/proc/{pid}/cwd")) else {
        // Gone meanwhile (then nothing runs there), or not ours to read: assume it does.
        return alive(pid);
    };
    let dir = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
    cwd == dir
}

/// Whether any process has `pid` (whichever it is).
pub(crate) fn alive(pid: i32) -> bool {
    // Signal 0 checks existence without sending anything; EPERM still means it exists.
    !matches!(
        kill(Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// Field 22 of `/proc/<pid>/stat`. The command name (field 2) may hold spaces and parentheses;
/// the fields after its last ')' are plain, the first of them being field 3.
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

fn boot_id() -> Option<String> {
    static BOOT: OnceLock<Option<String>> = OnceLock::new();
    BOOT.get_or_init(|| {
        let id = fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let id = id.trim();
        valid_boot_id(id).then(|| id.to_owned())
    })
    .clone()
}

/// A boot id as the kernel writes it (a UUID): nothing that could break a line-based file.
fn valid_boot_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// Owner files are a few short lines; anything larger is not one.
fn read_small(file: &Path) -> Option<String> {
    const MAX_OWNER_FILE_BYTES: u64 = 4096;
    let meta = fs::metadata(file).ok()?;
    if meta.len() > MAX_OWNER_FILE_BYTES {
        return None;
    }
    fs::read_to_string(file).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_reused_pid_is_not_its_owner() {
        let me = Owner::current().expect("this process");
        assert_eq!(me.pid, std::process::id());
        assert!(me.is_alive());
        assert_eq!(Owner::parse(&me.to_text()), Some(me.clone()));
        // The same pid with another start time: a process that only got the pid.
        let earlier = Owner {
            started: me.started.saturating_sub(1),
            ..me.clone()
        };
        assert!(!earlier.is_alive());
        let other_boot = Owner {
            boot: "00000000-0000-0000-0000-000000000000".into(),
            ..me.clone()
        };
        assert!(!other_boot.is_alive());
    }

    #[test]
    fn an_owner_file_of_a_dead_or_replaced_owner_says_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("owner");
        assert_eq!(alive_in(&file), None, "no file");
        claim(&file).expect("claim");
        assert_eq!(alive_in(&file), Some(true));
        let me = Owner::current().expect("me");
        let replaced = Owner {
            started: me.started + 1,
            ..me
        };
        fs::write(&file, replaced.to_text()).expect("write");
        assert_eq!(
            alive_in(&file),
            Some(false),
            "the pid lives, the owner does not"
        );
        // An older pg-local's file: the pid alone.
        fs::write(&file, format!("{}\n", std::process::id())).expect("write");
        assert_eq!(alive_in(&file), Some(true));
        fs::write(&file, "garbage").expect("write");
        assert_eq!(alive_in(&file), None);
    }

    #[test]
    fn a_process_working_elsewhere_is_not_a_postmaster_of_the_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .current_dir(dir.path())
            .spawn()
            .expect("spawn sleep");
        let pid = i32::try_from(child.id()).expect("pid");
        let elsewhere = tempfile::tempdir().expect("tempdir");
        let (here, there) = (runs_in(pid, dir.path()), runs_in(pid, elsewhere.path()));
        let _ = child.kill();
        let _ = child.wait();
        assert!(here, "sleep works in its directory");
        assert!(!there, "and in no other");
        assert!(!runs_in(pid, dir.path()), "a dead process works nowhere");
    }
}
