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

use crate::config::SHUTDOWN_TIMEOUT;
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

/// A child process that the kernel stops if this process dies, and that [`Guarded::stop`] (or
/// drop) stops otherwise.
#[derive(Debug)]
pub(crate) struct Guarded {
    pid: u32,
    waiter: Option<JoinHandle<std::io::Result<ExitStatus>>>,
}

impl Guarded {
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    pub(crate) fn has_exited(&self) -> bool {
        self.waiter.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Fast shutdown (SIGINT); SIGKILL if it is still running after `grace`.
    pub(crate) fn stop(mut self, grace: Duration) {
        self.stop_inner(grace);
    }

    fn stop_inner(&mut self, grace: Duration) {
        let Some(waiter) = self.waiter.take() else {
            return;
        };
        let pid = Pid::from_raw(self.pid as i32);
        if !waiter.is_finished() {
            let _ = kill(pid, Signal::SIGINT);
            let deadline = Instant::now() + grace;
            while !waiter.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if !waiter.is_finished() {
                tracing::warn!(pid = self.pid, "postgres ignored fast shutdown; killing it");
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
        self.stop_inner(SHUTDOWN_TIMEOUT);
    }
}

/// Spawns `cmd` with a parent-death signal, from a thread that lives as long as the child.
pub(crate) fn spawn_guarded(mut cmd: Command) -> Result<Guarded, Error> {
    set_parent_death_signal(&mut cmd);
    // A process group of its own: Ctrl-C in a terminal signals the whole foreground group, and
    // the server must outlive its parent's graceful shutdown (in-flight requests still need
    // it); the parent stops it afterwards, or the parent-death signal does.
    cmd.process_group(0);
    let (pid_tx, pid_rx) = mpsc::channel();
    let waiter = std::thread::Builder::new()
        .name("pg-local-postmaster".into())
        .spawn(move || match cmd.spawn() {
            Ok(mut child) => {
                let _ = pid_tx.send(Ok(child.id()));
                child.wait()
            }
            Err(e) => {
                let _ = pid_tx.send(Err(e));
                Err(std::io::Error::other("spawn failed"))
            }
        })
        .map_err(io("starting the postmaster thread"))?;
    let pid = match pid_rx.recv() {
        Ok(Ok(pid)) => pid,
        Ok(Err(e)) => return Err(io("starting postgres")(e)),
        Err(_) => {
            return Err(io("starting postgres")(std::io::Error::other(
                "thread died",
            )))
        }
    };
    Ok(Guarded {
        pid,
        waiter: Some(waiter),
    })
}

#[allow(unsafe_code)]
fn set_parent_death_signal(cmd: &mut Command) {
    // SAFETY: `pre_exec` runs in the forked child before exec, where only async-signal-safe
    // operations are allowed. The closure performs exactly one `prctl(2)` system call, which
    // allocates nothing, takes no locks and touches no memory shared with the parent. Std runs
    // this closure after it has applied `uid`/`gid`, which matters because a credential change
    // clears the parent-death signal.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGINT).map_err(std::io::Error::from)
        });
    }
}
