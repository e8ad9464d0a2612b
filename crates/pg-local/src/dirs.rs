//! The directories a cluster needs, and the rule for touching them: **only a directory pg-local
//! creates is ever handed to the server's user or re-moded.** A directory someone else made
//! (a user-given parent such as `/srv` or `/tmp/x`) keeps its owner and mode; if the server's
//! user cannot enter it, starting fails with a message saying so.
//!
//! It also picks the Unix socket's directory: the data directory itself (mode 0700, owned by
//! the server's user, so nobody else can reach the socket), unless the socket's path would be
//! too long for `sun_path` or needs quoting; then a private directory under the system temp dir.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{io, Error};
use crate::process::RunAs;
use crate::reap;

/// Longest socket path PostgreSQL accepts: `sizeof(sun_path)` (108 on Linux) minus the NUL.
const MAX_SOCKET_PATH_BYTES: usize = 107;

/// Creates the data directory `dir` if it does not exist (missing ancestors are created with
/// the default mode and left to us), and checks that the server's user may use it.
/// Returns whether `dir` was created now.
pub(crate) fn prepare_data_dir(run_as: &RunAs, dir: &Path) -> Result<bool, Error> {
    if let Some(parent) = dir.parent() {
        if !parent.as_os_str().is_empty() && !parent.exists() {
            fs::create_dir_all(parent).map_err(io(format!("creating {}", parent.display())))?;
        }
        check_traversable(run_as, parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {
            run_as.prepare_dir(dir)?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            check_owned_by_server(run_as, dir)?;
            Ok(false)
        }
        Err(e) => Err(io(format!("creating {}", dir.display()))(e)),
    }
}

/// Fails unless the server's user can search (enter) `dir` and every directory above it.
pub(crate) fn check_traversable(run_as: &RunAs, dir: &Path) -> Result<(), Error> {
    let RunAs::User { uid, gid } = run_as else {
        // Ourselves: an unreadable parent fails with its own clear I/O error.
        return Ok(());
    };
    for ancestor in dir.ancestors() {
        if ancestor.as_os_str().is_empty() {
            continue;
        }
        let meta = fs::metadata(ancestor).map_err(io(format!("reading {}", ancestor.display())))?;
        let mode = meta.permissions().mode();
        let search = if meta.uid() == uid.as_raw() {
            mode & 0o100
        } else if meta.gid() == gid.as_raw() {
            mode & 0o010
        } else {
            mode & 0o001
        };
        if search == 0 {
            return Err(Error::NotTraversable {
                dir: ancestor.to_owned(),
                mode: mode & 0o7777,
                owner: meta.uid(),
            });
        }
    }
    Ok(())
}

/// An existing data directory must already belong to the server's user: we do not take over
/// directories we did not create.
fn check_owned_by_server(run_as: &RunAs, dir: &Path) -> Result<(), Error> {
    let meta = fs::metadata(dir).map_err(io(format!("reading {}", dir.display())))?;
    let expected = match run_as {
        RunAs::User { uid, .. } => uid.as_raw(),
        RunAs::CurrentUser => nix::unistd::geteuid().as_raw(),
    };
    if meta.uid() != expected {
        return Err(Error::NotOurs {
            dir: dir.to_owned(),
            owner: meta.uid(),
            expected,
        });
    }
    Ok(())
}

/// Where the socket of `port` goes for a cluster in `data_dir` (absolute): the data directory
/// when its socket path fits and needs no quoting, else `None` (use [`private_socket_dir`]).
pub(crate) fn socket_dir_in(data_dir: &Path, port: u16) -> Option<PathBuf> {
    let socket = data_dir.join(format!(".s.PGSQL.{port}"));
    let text = socket.to_str()?;
    let plain = text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-+".contains(&b));
    (plain && text.len() <= MAX_SOCKET_PATH_BYTES).then(|| data_dir.to_owned())
}

/// A fresh private directory (0700, the server's user's) under the system temp dir, removed
/// when dropped and reaped by a later start if its owner process dies first.
pub(crate) fn private_socket_dir(run_as: &RunAs) -> Result<tempfile::TempDir, Error> {
    reap::reap_stale(&std::env::temp_dir());
    let dir = tempfile::Builder::new()
        .prefix(&format!("{}sock-", reap::PREFIX))
        .tempdir()
        .map_err(io("creating a socket directory"))?;
    reap::claim(dir.path()).map_err(io("recording the directory's owner"))?;
    run_as.prepare_dir(dir.path())?;
    Ok(dir)
}
