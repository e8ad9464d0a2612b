//! Finding the PostgreSQL server binaries on this machine, portably.
//!
//! Order: `$PG_BIN`, then `pg_config --bindir`, then the newest `/usr/lib/postgresql/*/bin`
//! (Debian/Ubuntu layout), then `/usr/local/pgsql/bin`, then whatever `initdb` is on `PATH`.

use std::path::{Path, PathBuf};

use crate::error::Error;

/// The directory that holds `initdb`, `postgres` and `pg_isready`.
#[derive(Debug, Clone)]
pub struct Binaries {
    dir: PathBuf,
}

impl Binaries {
    /// Finds the binaries or says in one line what to install.
    pub fn find() -> Result<Binaries, Error> {
        Binaries::find_in(candidates())
    }

    /// The binaries in `dir` exactly (an explicit choice: no fallback that would hide a typo).
    pub fn at(dir: &Path) -> Result<Binaries, Error> {
        Binaries::find_in(vec![dir.to_path_buf()])
    }

    /// The first complete directory among `candidates`, or the one-line "what to install" error.
    fn find_in(candidates: Vec<PathBuf>) -> Result<Binaries, Error> {
        let mut searched = Vec::new();
        for dir in candidates {
            if is_complete(&dir) {
                return Ok(Binaries { dir });
            }
            searched.push(dir.display().to_string());
        }
        Err(Error::BinariesNotFound {
            searched: if searched.is_empty() {
                "searched PG_BIN, pg_config, /usr/lib/postgresql/*/bin, PATH".into()
            } else {
                format!("searched {}", searched.join(", "))
            },
        })
    }

    /// The directory the binaries were found in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn initdb(&self) -> PathBuf {
        self.dir.join("initdb")
    }

    pub(crate) fn postgres(&self) -> PathBuf {
        self.dir.join("postgres")
    }

    pub(crate) fn pg_isready(&self) -> PathBuf {
        self.dir.join("pg_isready")
    }
}

pub(crate) fn is_complete(dir: &Path) -> bool {
    ["initdb", "postgres", "pg_isready"]
        .iter()
        .all(|b| dir.join(b).is_file())
}

pub(crate) fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = std::env::var_os("PG_BIN") {
        // An explicit choice is the only candidate: silently falling back would hide a typo.
        return vec![PathBuf::from(dir)];
    }
    if let Ok(o) = crate::process::clean_command(Path::new("pg_config"))
        .arg("--bindir")
        .output()
    {
        if o.status.success() {
            let dir = String::from_utf8_lossy(&o.stdout).trim().to_owned();
            if !dir.is_empty() {
                out.push(PathBuf::from(dir));
            }
        }
    }
    out.extend(debian_versions(Path::new("/usr/lib/postgresql")));
    out.push(PathBuf::from("/usr/local/pgsql/bin"));
    if let Some(path) = std::env::var_os("PATH") {
        out.extend(std::env::split_paths(&path));
    }
    out
}

/// `/usr/lib/postgresql/<major>/bin`, newest major first.
pub(crate) fn debian_versions(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut versions: Vec<(u32, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let major = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((major, e.path().join("bin")))
        })
        .collect();
    versions.sort_by_key(|v| std::cmp::Reverse(v.0));
    versions.into_iter().map(|(_, p)| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_debian_major_comes_first() {
        let root = tempfile::tempdir().expect("tempdir");
        for v in ["9", "15", "13", "not-a-version"] {
            std::fs::create_dir_all(root.path().join(v).join("bin")).expect("mkdir");
        }
        let found = debian_versions(root.path());
        let majors: Vec<String> = found
            .iter()
            .map(|p| {
                p.parent()
                    .and_then(|p| p.file_name())
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .collect();
        assert_eq!(majors, ["15", "13", "9"]);
    }

    #[test]
    fn missing_binaries_say_what_to_install_in_one_line() {
        let empty = tempfile::tempdir().expect("tempdir");
        let err = Binaries::find_in(vec![empty.path().to_path_buf()]).expect_err("nothing there");
        let message = err.to_string();
        assert!(matches!(err, Error::BinariesNotFound { .. }));
        assert!(
            message.contains("apt-get install -y postgresql"),
            "{message}"
        );
        assert!(message.contains("PG_BIN"), "{message}");
        assert!(
            message.contains(&empty.path().display().to_string()),
            "{message}"
        );
        assert!(!message.contains('\n'), "one line: {message}");
    }

    #[test]
    fn first_complete_candidate_wins() {
        let incomplete = tempfile::tempdir().expect("tempdir");
        let complete = tempfile::tempdir().expect("tempdir");
        for b in ["initdb", "postgres", "pg_isready"] {
            std::fs::write(complete.path().join(b), "").expect("write");
        }
        let found = Binaries::find_in(vec![
            incomplete.path().to_path_buf(),
            complete.path().to_path_buf(),
        ])
        .expect("found");
        assert_eq!(found.dir(), complete.path());
    }

    #[test]
    fn incomplete_directory_is_not_accepted() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("initdb"), "").expect("write");
        assert!(!is_complete(dir.path()));
    }
}
