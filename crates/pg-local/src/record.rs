//! How another process reaches a running cluster: a small record file (mode 0600) written by
//! the process that owns the cluster and read by tools that would otherwise start a second
//! server on the same data directory. It names the owner's pid, the socket directory and the
//! port; the password stays in its own 0600 file. A record whose owner is gone is stale and
//! means nothing: [`Record::read_live`] ignores it, and the next owner overwrites it.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::{auth, io, Cluster, Error};

/// Largest record read (a handful of short lines).
const MAX_RECORD_BYTES: u64 = 16 * 1024;

/// What a record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The process that owns (started, and stops) the postmaster.
    pub owner_pid: u32,
    /// The postmaster when the record was written (a supervisor may restart it under a new pid).
    pub postmaster_pid: u32,
    pub data_dir: PathBuf,
    pub socket_dir: PathBuf,
    pub port: u16,
    /// The server also listens on 127.0.0.1:`port`.
    pub tcp: bool,
    pub password_file: PathBuf,
}

impl Record {
    /// The record of `cluster`, owned by this process.
    pub fn of(cluster: &Cluster) -> Record {
        Record {
            owner_pid: std::process::id(),
            postmaster_pid: cluster.pid().unwrap_or(0),
            data_dir: cluster.data_dir().to_owned(),
            socket_dir: cluster.socket_dir().to_owned(),
            port: cluster.port(),
            tcp: cluster.has_tcp(),
            password_file: cluster.password_file().to_owned(),
        }
    }

    /// Writes the record to `path` (mode 0600), replacing any older one atomically.
    pub fn write(&self, path: &Path) -> Result<(), Error> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".tmp{}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let text = format!(
            "owner_pid={}\npostmaster_pid={}\ndata_dir={}\nsocket_dir={}\nport={}\ntcp={}\npassword_file={}\n",
            self.owner_pid,
            self.postmaster_pid,
            self.data_dir.display(),
            self.socket_dir.display(),
            self.port,
            self.tcp,
            self.password_file.display(),
        );
        let _ = fs::remove_file(&tmp);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io(format!("creating {}", tmp.display())))?;
        f.write_all(text.as_bytes())
            .map_err(io(format!("writing {}", tmp.display())))?;
        fs::rename(&tmp, path).map_err(io(format!("renaming to {}", path.display())))
    }

    /// Reads a record; `None` when there is none or it cannot be parsed.
    pub fn read(path: &Path) -> Option<Record> {
        let meta = fs::metadata(path).ok()?;
        if meta.len() > MAX_RECORD_BYTES {
            return None;
        }
        let text = fs::read_to_string(path).ok()?;
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
        };
        Some(Record {
            owner_pid: field("owner_pid")?.parse().ok()?,
            postmaster_pid: field("postmaster_pid")?.parse().ok()?,
            data_dir: PathBuf::from(field("data_dir")?),
            socket_dir: PathBuf::from(field("socket_dir")?),
            port: field("port")?.parse().ok()?,
            tcp: field("tcp")?.parse().ok()?,
            password_file: PathBuf::from(field("password_file")?),
        })
    }

    /// The record at `path` if its owner still runs (a live owner keeps its postmaster up or
    /// restarts it; whether it answers is for the caller's first connection to tell).
    pub fn read_live(path: &Path) -> Option<Record> {
        Record::read(path).filter(Record::owner_alive)
    }

    pub fn owner_alive(&self) -> bool {
        i32::try_from(self.owner_pid)
            .ok()
            .filter(|p| *p > 0)
            .is_some_and(crate::reap::alive)
    }

    /// Removes the record at `path` if it is this process's own (never another owner's).
    pub fn remove_own(path: &Path) {
        if Record::read(path).is_some_and(|r| r.owner_pid == std::process::id()) {
            let _ = fs::remove_file(path);
        }
    }

    /// The superuser's URL for `database` over the socket, password read from its file.
    pub fn url(&self, database: &str) -> Result<String, Error> {
        let password = auth::load(&self.password_file)?.ok_or_else(|| Error::Io {
            what: format!("reading {}", self.password_file.display()),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })?;
        Ok(crate::url_for(
            &self.socket_dir,
            self.port,
            database,
            password.expose(),
        ))
    }

    /// [`Record::url`] without the password, for people.
    pub fn redacted_url(&self, database: &str) -> String {
        crate::url_for(&self.socket_dir, self.port, database, crate::REDACTED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_a_dead_owner_is_stale() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("postgres.run");
        let mut record = Record {
            owner_pid: std::process::id(),
            postmaster_pid: 42,
            data_dir: "/d/postgres".into(),
            socket_dir: "/d/postgres".into(),
            port: 5432,
            tcp: false,
            password_file: "/d/postgres.password".into(),
        };
        record.write(&path).expect("write");
        let meta = fs::metadata(&path).expect("meta");
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
            0o600
        );
        assert_eq!(Record::read_live(&path), Some(record.clone()));
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        record.owner_pid = child.id();
        child.wait().expect("wait");
        record.write(&path).expect("rewrite");
        assert_eq!(Record::read(&path), Some(record));
        assert_eq!(
            Record::read_live(&path),
            None,
            "a dead owner's record is stale"
        );
        // Not ours: left alone.
        Record::remove_own(&path);
        assert!(path.exists());
    }
}
