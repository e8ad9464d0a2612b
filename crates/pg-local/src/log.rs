//! The server log, rotated and bounded in size. The postmaster's stdout and stderr go to a pipe;
//! a copier thread in this process writes them to `server.log` and, when that file passes
//! [`LogLimit::file_bytes`], renames it to `server.log.1` (shifting older ones up to
//! `server.log.<files - 1>` and deleting the oldest). The whole log therefore never exceeds
//! `files × (file_bytes + MAX_LINE_BYTES)` bytes.
//!
//! Why not PostgreSQL's own `logging_collector`: it truncates only on time-driven rotation, so
//! a size-driven rotation to a name it already used appends and a burst can grow one file
//! without bound; a bounded set of names with a hard size cap is not expressible with it.
//!
//! The copier lives as long as any process holding the pipe (the postmaster and its backends);
//! every postmaster started for one cluster (restarts included) shares one [`RotatingLog`].

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::error::{io, Error};

/// Longest line copied as one piece; a longer one is split (so one line cannot grow a file
/// past its cap by more than this).
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// How much log a cluster keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLimit {
    /// Size at which `server.log` is rotated.
    pub file_bytes: u64,
    /// Files kept, the current one included (at least 1).
    pub files: u32,
}

impl Default for LogLimit {
    /// 8 MiB × 5 files: 40 MiB at most per cluster.
    fn default() -> Self {
        LogLimit {
            file_bytes: 8 * 1024 * 1024,
            files: 5,
        }
    }
}

impl LogLimit {
    /// The most bytes all the log files together can hold.
    pub fn max_total_bytes(&self) -> u64 {
        u64::from(self.files.max(1)) * (self.file_bytes + MAX_LINE_BYTES as u64)
    }
}

/// `server.log` and its rotated predecessors.
#[derive(Debug)]
pub(crate) struct RotatingLog {
    path: PathBuf,
    limit: LogLimit,
    file: Option<File>,
    size: u64,
}

/// Shared by every copier of one cluster.
pub(crate) type SharedLog = Arc<Mutex<RotatingLog>>;

impl RotatingLog {
    pub(crate) fn new(path: PathBuf, limit: LogLimit) -> SharedLog {
        Arc::new(Mutex::new(RotatingLog {
            path,
            limit,
            file: None,
            size: 0,
        }))
    }

    /// The rotated file number `n` (1 = the newest old one).
    fn rotated(&self, n: u32) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    fn open(&mut self) -> std::io::Result<&mut File> {
        if self.file.is_none() {
            let file = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&self.path)?;
            self.size = file.metadata()?.len();
            self.file = Some(file);
        }
        self.file
            .as_mut()
            .ok_or_else(|| std::io::Error::other("log file not open"))
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.file = None;
        let keep = self.limit.files.max(1);
        if keep == 1 {
            fs::remove_file(&self.path).or_else(ignore_missing)?;
        } else {
            fs::remove_file(self.rotated(keep - 1)).or_else(ignore_missing)?;
            for n in (1..keep - 1).rev() {
                fs::rename(self.rotated(n), self.rotated(n + 1)).or_else(ignore_missing)?;
            }
            fs::rename(&self.path, self.rotated(1)).or_else(ignore_missing)?;
        }
        self.size = 0;
        Ok(())
    }

    /// Appends one line (or piece of one), rotating first when the file is full.
    pub(crate) fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        self.open()?;
        if self.size > 0 && self.size + line.len() as u64 > self.limit.file_bytes {
            self.rotate()?;
        }
        let file = self.open()?;
        file.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }
}

fn ignore_missing(e: std::io::Error) -> std::io::Result<()> {
    if e.kind() == std::io::ErrorKind::NotFound {
        Ok(())
    } else {
        Err(e)
    }
}

/// A pipe for the postmaster's stdout and stderr, and the thread copying it into `log`.
pub(crate) fn pipe_into(
    log: &SharedLog,
) -> Result<(std::process::Stdio, std::process::Stdio, JoinHandle<()>), Error> {
    // Close-on-exec: only the postmaster (through dup2 onto its stdio) keeps the write end.
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let write_err = write.try_clone().map_err(io("duplicating the log pipe"))?;
    let log = Arc::clone(log);
    let copier = std::thread::Builder::new()
        .name("pg-local-log".into())
        .spawn(move || copy(File::from(read), &log))
        .map_err(io("starting the log thread"))?;
    Ok((write.into(), write_err.into(), copier))
}

fn copy(read: File, log: &SharedLog) {
    let mut reader = BufReader::new(read);
    let mut line = Vec::with_capacity(1024);
    loop {
        line.clear();
        match reader
            .by_ref()
            .take(MAX_LINE_BYTES as u64)
            .read_until(b'\n', &mut line)
        {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        let Ok(mut log) = log.lock() else { return };
        // A full disk must not stop the server: the line is lost, the pipe keeps draining.
        let _ = log.write(&line);
    }
}

/// The last `lines` lines of `path` (the current log file only).
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_keeps_a_bounded_set_of_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let limit = LogLimit {
            file_bytes: 1000,
            files: 3,
        };
        let log = RotatingLog::new(dir.path().join("server.log"), limit);
        let line = [b'x'; 99];
        let mut log = log.lock().expect("lock");
        for _ in 0..1000 {
            log.write(&line).expect("write");
            log.write(b"\n").expect("write");
        }
        let mut names: Vec<String> = fs::read_dir(dir.path())
            .expect("read_dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["server.log", "server.log.1", "server.log.2"]);
        for name in &names {
            let len = fs::metadata(dir.path().join(name)).expect("meta").len();
            assert!(len <= limit.file_bytes, "{name}: {len} bytes");
        }
    }
}
