//! Running MariaDB's programs as the right user, and keeping mariadbd on a leash.
//!
//! - **who runs it**: MariaDB refuses to run as root, so as root both programs run as the
//!   `mysql` system user (set by `Command::uid`/`gid`), and only our own directories are
//!   handed to it;
//! - **what it sees**: a cleared environment with only pg-local's [`pg_local::kept_env`]
//!   variables, so no secret of the parent's environment reaches the server;
//! - **how long it lives**: mariadbd runs on pg-local's leash ([`pg_local::spawn_guarded`]) with
//!   `PR_SET_PDEATHSIG = SIGKILL` (its data is throwaway), so the kernel kills it when its
//!   parent dies, even by SIGKILL; a process group of its own, so a terminal's Ctrl-C reaches
//!   only its parent.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::{Gid, Uid, User};

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

/// mariadbd's leash (pg-local's guard): SIGKILL when its parent dies (its data is throwaway),
/// SIGTERM (a clean shutdown) to stop it.
pub(crate) const MARIADBD: pg_local::Leash = pg_local::Leash {
    on_parent_death: Signal::SIGKILL,
    stop_with: Signal::SIGTERM,
    thread_name: "mariadb-local-server",
    program: "mariadbd",
};
