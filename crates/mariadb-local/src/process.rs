//! Running MariaDB's programs as the right user, and keeping mariadbd on a leash.
//!
//! - **who runs it**: MariaDB refuses to run as root, so as root both programs run as the
//!   `mysql` system user (set by `Command::uid`/`gid`), and only our own directories are
//!   handed to it;
//! - **what it sees**: a cleared environment with only pg-local's [`pg_local::kept_env`]
//!   variables, so no secret of the parent's environment reaches the server;
//! - **how long it lives**: mariadbd gets `PR_SET_PDEATHSIG = SIGKILL` (its data is throwaway),
//!   so the kernel kills it when its parent dies, even by SIGKILL. The signal fires when the
//!   *thread* that forked the child exits, so the child is spawned from a dedicated thread that
//!   stays blocked in `wait()` for as long as the server runs. It gets a process group of its
//!   own, so a terminal's Ctrl-C reaches only its parent.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::{Gid, Pid, Uid, User};

use crate::error::{io, Error};

/// Grace after SIGTERM before SIGKILL.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(15);

/// The identity MariaDB's programs run under.
#[derive(Debug, Clone)]
pub(crate) enum RunAs {
    CurrentUser,
    /// We are root: run as the `mysql` system user.
    User {
        uid: Uid,
        gid: Gid,
    },
}

impl RunAs {
    pub(crate) fn for_current_process() -> Result<RunAs, Error> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(RunAs::CurrentUser);
        }
        let user = User::from_name("mysql")?.ok_or(Error::NoMysqlUser)?;
        Ok(RunAs::User {
            uid: user.uid,
            gid: user.gid,
        })
    }

    /// A command for `program` under this identity, from `/`, with a clean environment.
    pub(crate) fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear();
        for (name, value) in std::env::vars_os() {
            if name.to_str().is_some_and(pg_local::kept_env) {
                cmd.env(name, value);
            }
        }
        cmd.current_dir("/");
        if let RunAs::User { uid, gid } = self {
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
        cmd
    }

    /// Hands `path` (one of our directories) to the server's user (a no-op when not root).
    pub(crate) fn hand_over(&self, path: &Path) -> Result<(), Error> {
        if let RunAs::User { uid, gid } = self {
            std::os::unix::fs::chown(path, Some(uid.as_raw()), Some(gid.as_raw()))
                .map_err(io(format!("chown {} to mysql", path.display())))?;
        }
        Ok(())
    }
}

/// A child the kernel kills if this process dies, and that drop stops otherwise.
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

    /// SIGTERM (a clean shutdown); SIGKILL if it still runs after `grace`. Returns once reaped.
    pub(crate) fn stop(&mut self, grace: Duration) {
        let Some(waiter) = self.waiter.take() else {
            return;
        };
        let pid = Pid::from_raw(self.pid as i32);
        if !waiter.is_finished() {
            let _ = kill(pid, Signal::SIGTERM);
            let deadline = Instant::now() + grace;
            while !waiter.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if !waiter.is_finished() {
                tracing::warn!(pid = self.pid, "mariadbd ignored SIGTERM; killing it");
                let _ = kill(pid, Signal::SIGKILL);
            }
        }
        // The waiter reaps the child, so the pid was not reused while we signalled it.
        let _ = waiter.join();
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.stop(SHUTDOWN_TIMEOUT);
    }
}

/// Spawns `cmd` with a parent-death signal, from a thread that lives as long as the child.
pub(crate) fn spawn_guarded(mut cmd: Command) -> Result<Guarded, Error> {
    set_parent_death_signal(&mut cmd);
    cmd.process_group(0);
    let (pid_tx, pid_rx) = mpsc::channel();
    let waiter = std::thread::Builder::new()
        .name("mariadb-local-server".into())
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
        .map_err(io("starting the mariadbd thread"))?;
    let pid = match pid_rx.recv() {
        Ok(Ok(pid)) => pid,
        Ok(Err(e)) => return Err(io("starting mariadbd")(e)),
        Err(_) => {
            return Err(io("starting mariadbd")(std::io::Error::other(
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
    // operations are allowed. The closure makes exactly one `prctl(2)` system call, which
    // allocates nothing, takes no locks and touches no memory shared with the parent. Std runs
    // it after applying `uid`/`gid`, which matters: a credential change clears the signal.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
}
