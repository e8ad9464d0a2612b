//! Finding the MariaDB server binaries, portably: `$MARIADB_BIN` (exactly, when set), then
//! every `PATH` directory, `/usr/sbin`, `/usr/bin`, `/usr/local/sbin`, `/usr/local/bin`,
//! `/usr/local/mysql/bin`. The server is `mariadbd` (or the older `mysqld`); the installer is
//! `mariadb-install-db` (or `mysql_install_db`); each is looked for on its own, since Debian
//! puts the one in `/usr/sbin` and the other in `/usr/bin`.

use std::path::{Path, PathBuf};

use crate::error::Error;

/// The environment variable naming the directory that holds both binaries.
pub const BIN_ENV: &str = "MARIADB_BIN";

const SERVERS: &[&str] = &["mariadbd", "mysqld"];
const INSTALLERS: &[&str] = &["mariadb-install-db", "mysql_install_db"];
const FALLBACK_DIRS: &[&str] = &[
    "/usr/sbin",
    "/usr/bin",
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/local/mysql/bin",
];

/// The server and its installer.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub server: PathBuf,
    pub install_db: PathBuf,
}

impl Binaries {
    /// Finds both binaries or says in one line what to install.
    pub fn find() -> Result<Binaries, Error> {
        let dirs = match std::env::var_os(BIN_ENV) {
            Some(dir) => vec![PathBuf::from(dir)],
            None => candidates(),
        };
        Binaries::find_in(&dirs)
    }

    /// Both binaries from `dirs` (each the first match, server names before fallbacks).
    pub fn find_in(dirs: &[PathBuf]) -> Result<Binaries, Error> {
        let server = first(dirs, SERVERS);
        let install_db = first(dirs, INSTALLERS);
        match (server, install_db) {
            (Some(server), Some(install_db)) => Ok(Binaries { server, install_db }),
            _ => Err(Error::BinariesNotFound {
                searched: format!(
                    "searched {}",
                    dirs.iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
        }
    }
}

fn candidates() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for dir in FALLBACK_DIRS {
        let dir = PathBuf::from(dir);
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

fn first(dirs: &[PathBuf], names: &[&str]) -> Option<PathBuf> {
    names
        .iter()
        .flat_map(|name| dirs.iter().map(move |dir| dir.join(name)))
        .find(|path| is_executable(path))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binaries_name_the_package_to_install_in_one_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = Binaries::find_in(&[dir.path().to_path_buf()]).expect_err("nothing there");
        let text = err.to_string();
        assert!(text.contains("apt-get install -y mariadb-server"), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }
}
