//! Running PostgreSQL's programs as the right user, and keeping the postmaster on a leash.
//!
//! Three concerns live here:
//! - **who runs it**: PostgreSQL refuses to run as root, so as root every command runs as the
//!   `postgres` system user and the directories it needs are handed to that user;
//! - **what it sees**: every program pg-local starts gets a cleared environment holding only
//!   what PostgreSQL's programs use ([`KEPT_ENV`], plus what [`crate::Config::env`] adds). The
//!   parent's environment holds its secrets (saldo's bearer tokens, a `DATABASE_URL` with a
//!   password), and a child's environment is readable in `/proc/<pid>/environ` by its user:
//!   for the postmaster that is any database superuser session (`pg_read_file`, `COPY FROM
//!   PROGRAM`);
//! - **how long it lives**: the postmaster gets `PR_SET_PDEATHSIG = SIGINT` (fast shutdown) so the
//!   kernel stops it when its parent dies, even by SIGKILL. The parent-death signal fires when the
//!   *thread* that forked the child exits, so the child is spawned from a dedicated thread that
//!   stays alive, blocked in `wait()`, for exactly as long as the server runs. It runs in a
//!   process group of its own, so a terminal's Ctrl-C reaches only its parent.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::{Gid, Pid, Uid, User};

use crate::error::{io, Error};

/// The identity PostgreSQL's programs run under.
#[derive(Debug, Clone)]
pub(crate) enum RunAs {
    /// Not root: run as ourselves.
    CurrentUser,
    /// Root: run as this unprivileged user.
    User { uid: Uid, gid: Gid },
}

impl RunAs {
    pub(crate) fn for_current_process() -> Result<RunAs, Error> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(RunAs::CurrentUser);
        }
        let user = User::from_name("postgres")?.ok_or(Error::NoPostgresUser)?;
        Ok(RunAs::User {
            uid: user.uid,
            gid: user.gid,
        })
    }

    /// A command for `program` that runs under this identity, from a directory it can read,
    /// with a clean environment ([`clean_command`]).
    pub(crate) fn command(&self, program: &Path) -> Command {
        let mut cmd = clean_command(program);
        cmd.current_dir("/");
        if let RunAs::User { uid, gid } = self {
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
        cmd
    }

    /// Makes `dir` owned by the server's user with mode 0700, as initdb and postgres demand.
    pub(crate) fn prepare_dir(&self, dir: &Path) -> Result<(), Error> {
        self.prepare_file(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io(format!("chmod 0700 {}", dir.display())))
    }

    /// Hands `path` to the server's user (a no-op when not root).
    pub(crate) fn prepare_file(&self, path: &Path) -> Result<(), Error> {
        if let RunAs::User { uid, gid } = self {
            std::os::unix::fs::chown(path, Some(uid.as_raw()), Some(gid.as_raw()))
                .map_err(io(format!("chown {} to postgres", path.display())))?;
        }
        Ok(())
    }
}

/// Environment variables a child keeps from this process: the search path, the locale and the
/// time zone. Nothing else PostgreSQL's programs read is needed (pg-local passes data
/// directories, ports and sockets as arguments, and sets `PGPASSFILE` and `HOME` itself where
/// they matter).
pub const KEPT_ENV: &[&str] = &["PATH", "LANG", "LANGUAGE", "TZ", "TZDIR"];

/// Whether a child keeps the variable `name` (the [`KEPT_ENV`] names and every `LC_*`).
pub fn kept_env(name: &str) -> bool {
    KEPT_ENV.contains(&name) || name.starts_with("LC_")
}

/// A command for `program` whose environment is only this process's [`kept_env`] variables:
/// every child pg-local starts is made here, so no secret of the parent reaches one.
pub(crate) fn clean_command(program: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear();
    for (name, value) in std::env::vars_os() {
        if name.to_str().is_some_and(kept_env) {
            cmd.env(name, value);
        }
    }
    cmd
}

/// How a [`Guarded`] child is leashed: the signal the kernel sends it when its parent dies,
/// the one [`Guarded::stop`] sends first (SIGKILL follows after the grace), and the names its
/// thread and log lines use. pg-local's postmaster uses [`POSTMASTER`]; other crates starting a
/// throwaway server of their own (mariadb-local) bring theirs.
#[derive(Debug, Clone, Copy)]
pub struct Leash {
    pub on_parent_death: Signal,
    pub stop_with: Signal,
    /// The name of the thread that forks and waits for the child.
    pub thread_name: &'static str,
    /// The program, as warnings name it.
    pub program: &'static str,
}

/// The postmaster's leash: SIGINT (fast shutdown) both when its parent dies and to stop it.
pub(crate) const POSTMASTER: Leash = Leash {
    on_parent_death: Signal::SIGINT,
    stop_with: Signal::SIGINT,
    thread_name: "pg-local-postmaster",
    program: "postgres",
};

/// A child process that the kernel stops if this process dies, and that [`Guarded::stop`] (or
/// drop) stops otherwise.
#[derive(Debug)]
pub struct Guarded {
    pid: u32,
    waiter: Option<JoinHandle<std::io::Result<ExitStatus>>>,
    leash: Leash,
    grace: Duration,
}

impl Guarded {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn has_exited(&self) -> bool {
        self.waiter.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// The leash's stop signal; SIGKILL if it is still running after `grace`. Returns once the
    /// child is reaped.
    pub fn stop(&mut self, grace: Duration) {
        let Some(waiter) = self.waiter.take() else {
            return;
        };
        // A pid is at most i32::MAX on Linux (`pid_max` ≤ 2^22).
        let pid = Pid::from_raw(self.pid as i32);
        if !waiter.is_finished() {
            let _ = kill(pid, self.leash.stop_with);
            let deadline = Instant::now() + grace;
            while !waiter.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if !waiter.is_finished() {
                tracing::warn!(
                    pid = self.pid,
                    program = self.leash.program,
                    "the server ignored its stop signal; killing it"
                );
                let _ = kill(pid, Signal::SIGKILL);
            }
        }
        // The waiter thread has reaped (or is about to reap) the child, so the pid is not reused
        // under us while we signalled it.
        let _ = waiter.join();
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.stop(self.grace);
    }
}

/// Spawns `cmd` on `leash`, from a thread that lives as long as the child; a drop stops it,
/// waiting up to `grace` before SIGKILL.
pub fn spawn_guarded(mut cmd: Command, leash: Leash, grace: Duration) -> std::io::Result<Guarded> {
    set_parent_death_signal(&mut cmd, leash.on_parent_death);
    // A process group of its own: Ctrl-C in a terminal signals the whole foreground group, and
    // the server must outlive its parent's graceful shutdown (in-flight requests still need
    // it); the parent stops it afterwards, or the parent-death signal does.
    cmd.process_group(0);
    let (pid_tx, pid_rx) = mpsc::channel();
    let waiter = std::thread::Builder::new()
        .name(leash.thread_name.into())
        .spawn(move || match cmd.spawn() {
            Ok(mut child) => {
                let _ = pid_tx.send(Ok(child.id()));
                child.wait()
            }
            Err(e) => {
                let _ = pid_tx.send(Err(e));
                Err(std::io::Error::other("spawn failed"))
            }
        })?;
    let pid = match pid_rx.recv() {
        Ok(pid) => pid?,
        Err(_) => return Err(std::io::Error::other("the spawning thread died")),
    };
    Ok(Guarded {
        pid,
        waiter: Some(waiter),
        leash,
        grace,
    })
}

#[allow(unsafe_code)]
fn set_parent_death_signal(cmd: &mut Command, signal: Signal) {
    // SAFETY: `pre_exec` runs in the forked child before exec, where only async-signal-safe
    // operations are allowed. The closure performs exactly one `prctl(2)` system call, which
    // allocates nothing, takes no locks and touches no memory shared with the parent. Std runs
    // this closure after it has applied `uid`/`gid`, which matters because a credential change
    // clears the parent-death signal.
    unsafe {
        cmd.pre_exec(move || nix::sys::prctl::set_pdeathsig(signal).map_err(std::io::Error::from));
    }
}
