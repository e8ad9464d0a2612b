//! How another process reaches a running cluster: a small record file (mode 0600) written by
//! the process that owns the cluster and read by tools that would otherwise start a second
//! server on the same data directory. It names the owner (pid, start time and boot: see
//! `owner.rs`), the socket directory and the port; the password stays in its own 0600 file. A
//! record whose owner is gone is stale and means nothing: [`Record::read_live`] ignores it, and
//! the next owner overwrites it. "Gone" includes a pid now held by another process, which is
//! the usual state of a record left behind by a kill -9 in a container; a record without the
//! start time (written by an older saldo) cannot be told from such a one and is stale too.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::auth::{self, REDACTED};
use crate::cluster::{url_for, Cluster};
use crate::error::{io, Error};
use crate::owner::Owner;

/// Largest record read (a handful of short lines).
const MAX_RECORD_BYTES: u64 = 16 * 1024;

/// What a record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The process that owns (started, and stops) the postmaster.
    pub owner: Owner,
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
    pub fn of(cluster: &Cluster) -> Result<Record, Error> {
        let owner = Owner::current().ok_or_else(|| Error::Io {
            what: "reading this process's start time (/proc/self/stat)".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })?;
        Ok(Record {
            owner,
            postmaster_pid: cluster.pid().unwrap_or(0),
            data_dir: cluster.data_dir().to_owned(),
            socket_dir: cluster.socket_dir().to_owned(),
            port: cluster.port(),
            tcp: cluster.has_tcp(),
            password_file: cluster.password_file().to_owned(),
        })
    }

    /// Writes the record to `path` (mode 0600), replacing any older one atomically.
    pub fn write(&self, path: &Path) -> Result<(), Error> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".tmp{}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let text = format!(
            "owner_pid={}\nowner_started={}\nboot_id={}\npostmaster_pid={}\ndata_dir={}\n\
             socket_dir={}\nport={}\ntcp={}\npassword_file={}\n",
            self.owner.pid,
            self.owner.started,
            self.owner.boot,
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
        let owner = Owner::parse(&format!(
            "{}\n{}\n{}\n",
            field("owner_pid")?,
            field("owner_started")?,
            field("boot_id")?
        ))?;
        Some(Record {
            owner,
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

    /// Whether the very process that wrote the record still runs (not merely its pid).
    pub fn owner_alive(&self) -> bool {
        self.owner.is_alive()
    }

    /// Removes the record at `path` if it is this process's own (never another owner's).
    pub fn remove_own(path: &Path) {
        if Record::read(path).is_some_and(|r| Some(r.owner) == Owner::current()) {
            let _ = fs::remove_file(path);
        }
    }

    /// The superuser's URL for `database` over the socket, password read from its file.
    pub fn url(&self, database: &str) -> Result<String, Error> {
        let password = auth::load(&self.password_file)?.ok_or_else(|| Error::Io {
            what: format!("reading {}", self.password_file.display()),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })?;
        Ok(url_for(
            &self.socket_dir,
            self.port,
            database,
            password.expose(),
        ))
    }

    /// [`Record::url`] without the password, for people.
    pub fn redacted_url(&self, database: &str) -> String {
        url_for(&self.socket_dir, self.port, database, REDACTED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record_of(owner: Owner) -> Record {
        Record {
            owner,
            postmaster_pid: 42,
            data_dir: "/d/postgres".into(),
            socket_dir: "/d/postgres".into(),
            port: 5432,
            tcp: false,
            password_file: "/d/postgres.password".into(),
        }
    }

    #[test]
    fn a_record_round_trips_and_a_dead_owner_is_stale() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("postgres.run");
        let mut record = record_of(Owner::current().expect("this process"));
        record.write(&path).expect("write");
        let meta = fs::metadata(&path).expect("meta");
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
            0o600
        );
        assert_eq!(Record::read_live(&path), Some(record.clone()));
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        record.owner = Owner::of(child.id()).expect("the child runs");
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

    /// After a kill -9 the record stays behind, and its pid soon belongs to some other live
    /// process (in a container, often the restarted owner itself): that is no owner.
    #[test]
    fn a_pid_now_held_by_another_process_is_not_the_owner() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("postgres.run");
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let live = Owner::of(sleeper.id()).expect("sleep runs");
        for stale in [
            Owner {
                started: live.started.saturating_sub(7),
                ..live.clone()
            },
            Owner::current()
                .map(|me| Owner {
                    started: me.started + 1,
                    ..me
                })
                .expect("me"),
        ] {
            record_of(stale).write(&path).expect("write");
            assert!(Record::read(&path).is_some());
            assert_eq!(
                Record::read_live(&path),
                None,
                "a live pid is not a live owner"
            );
            // Not this process's own either (same pid as ours, other start): left alone.
            Record::remove_own(&path);
            assert!(path.exists());
        }
        // A record without the start time (an older saldo's) cannot be told apart: stale.
        fs::write(
            &path,
            format!(
                "owner_pid={}\npostmaster_pid=1\ndata_dir=/d\nsocket_dir=/d\nport=5432\n\
                 tcp=false\npassword_file=/p\n",
                sleeper.id()
            ),
        )
        .expect("write");
        assert_eq!(Record::read_live(&path), None);
        record_of(live).write(&path).expect("write");
        assert!(Record::read_live(&path).is_some(), "the live owner is");
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert_eq!(Record::read_live(&path), None);
    }
}
