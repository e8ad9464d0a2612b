//! pg-local: a private PostgreSQL cluster started from the machine's own binaries.
//!
//! It is two things at once: the embedded default of `saldo serve` (a persistent data directory,
//! fsync on) and the harness of every test (a throwaway directory with fast, unsafe-on-crash
//! settings). Both share one life-cycle rule: **no postgres outlives the process that started it**.
//! That holds on drop, on panic (drop runs while unwinding) and when the parent is killed outright,
//! because the postmaster is started with a parent-death signal (see [`spawn_guarded`]).
//!
//! The cluster listens on 127.0.0.1 only, on a port chosen by asking the kernel for a free one, and
//! trusts loopback connections (it is a private, per-user development cluster, not a shared server).
//! When the current process is root, initdb and postgres run as the `postgres` system user, because
//! PostgreSQL refuses to run as root.

mod binaries;
mod process;
mod reap;

pub use binaries::Binaries;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a freshly started server may take to accept connections before we give up.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a fast shutdown may take before the postmaster is killed.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);
/// How many times a start is retried when the chosen port was taken in the meantime.
const PORT_ATTEMPTS: usize = 5;
/// Name of the superuser created by initdb.
pub const SUPERUSER: &str = "postgres";

/// Everything that can go wrong while finding, initialising or running a cluster.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "PostgreSQL server binaries (initdb, postgres) not found: install them (Debian/Ubuntu: \
         `apt-get install -y postgresql`) or point PG_BIN at their directory ({searched})"
    )]
    BinariesNotFound { searched: String },
    #[error("running as root but there is no `postgres` system user to run PostgreSQL as: create it (`useradd -r postgres`) or run as a normal user")]
    NoPostgresUser,
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("initdb failed ({status}): {output}")]
    InitDb { status: String, output: String },
    #[error("postgres exited during start-up; last lines of its log ({log}):\n{tail}")]
    StartFailed { log: PathBuf, tail: String },
    #[error("postgres did not accept connections within {0:?}")]
    StartTimeout(Duration),
    #[error("system call failed: {0}")]
    Sys(#[from] nix::Error),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// Where the cluster keeps its data.
#[derive(Debug, Clone)]
pub enum DataDir {
    /// A directory that survives restarts; created and initialised on first use. fsync stays on.
    Persistent(PathBuf),
    /// A temporary directory removed when the cluster is dropped. fsync and synchronous commit are
    /// off: fast, and only acceptable because the data is thrown away.
    Ephemeral,
}

/// What to start.
#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: DataDir,
    /// `max_connections` of the server.
    pub max_connections: u32,
    /// Extra `-c name=value` settings, e.g. `default_transaction_isolation=serializable`.
    pub settings: Vec<(String, String)>,
}

impl Config {
    /// A throwaway cluster for tests.
    pub fn ephemeral() -> Self {
        Config {
            data_dir: DataDir::Ephemeral,
            max_connections: 400,
            settings: Vec::new(),
        }
    }

    /// A cluster whose data lives in `dir`.
    pub fn persistent(dir: impl Into<PathBuf>) -> Self {
        Config {
            data_dir: DataDir::Persistent(dir.into()),
            max_connections: 200,
            settings: Vec::new(),
        }
    }

    /// Adds one server setting.
    pub fn setting(mut self, name: &str, value: &str) -> Self {
        self.settings.push((name.to_owned(), value.to_owned()));
        self
    }
}

/// The default persistent data directory for the current user: `$SALDO_DATA_DIR`, else
/// `$XDG_DATA_HOME/saldo/postgres`, else `~/.local/share/saldo/postgres`; as root
/// `/var/lib/saldo/postgres` (root's home is not traversable by the `postgres` user).
pub fn default_data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SALDO_DATA_DIR") {
        return PathBuf::from(dir);
    }
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/lib/saldo/postgres");
    }
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME") {
        return PathBuf::from(xdg).join("saldo/postgres");
    }
    let home = std::env::var_os("HOME").map_or_else(std::env::temp_dir, PathBuf::from);
    home.join(".local/share/saldo/postgres")
}

/// A running cluster. Dropping it stops the server (fast shutdown) and removes an ephemeral
/// data directory.
#[derive(Debug)]
pub struct Cluster {
    port: u16,
    data_dir: PathBuf,
    log_file: PathBuf,
    server: Option<process::Guarded>,
    // Declared last so the directory is removed after the server has stopped.
    _temp: Option<tempfile::TempDir>,
}

impl Cluster {
    /// Finds the binaries, initialises the data directory if needed and starts the server.
    pub fn start(config: &Config) -> Result<Cluster, Error> {
        let binaries = Binaries::find()?;
        let run_as = process::RunAs::for_current_process()?;
        let (temp, data_dir) = match &config.data_dir {
            DataDir::Ephemeral => {
                reap::reap_stale(&std::env::temp_dir());
                let temp = tempfile::Builder::new()
                    .prefix(reap::PREFIX)
                    .tempdir()
                    .map_err(io("creating a temporary directory"))?;
                reap::claim(temp.path()).map_err(io("recording the directory's owner"))?;
                let data = temp.path().join("data");
                run_as.prepare_dir(temp.path())?;
                (Some(temp), data)
            }
            DataDir::Persistent(dir) => (None, dir.clone()),
        };
        let ephemeral = temp.is_some();
        if !data_dir.join("PG_VERSION").exists() {
            init_data_dir(&binaries, &run_as, &data_dir, ephemeral)?;
        }
        let log_file = data_dir
            .parent()
            .unwrap_or(Path::new("/"))
            .join("postgres.log");

        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            match start_server(&binaries, &run_as, config, &data_dir, &log_file, port) {
                Ok(server) => {
                    tracing::info!(port, data_dir = %data_dir.display(), "postgres started");
                    return Ok(Cluster {
                        port,
                        data_dir,
                        log_file,
                        server: Some(server),
                        _temp: temp,
                    });
                }
                // Another process may have taken the port between our probe and the bind.
                Err(e @ Error::StartFailed { .. }) if port_conflict(&e) => last_error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or(Error::StartTimeout(STARTUP_TIMEOUT)))
    }

    /// TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The server log.
    pub fn log_file(&self) -> &Path {
        &self.log_file
    }

    /// Process id of the postmaster.
    pub fn pid(&self) -> Option<u32> {
        self.server.as_ref().map(process::Guarded::pid)
    }

    /// Connection URL for `database` as the superuser.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{database}", self.port)
    }

    /// Stops the server now (fast shutdown, then SIGKILL after [`SHUTDOWN_TIMEOUT`]).
    pub fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop(SHUTDOWN_TIMEOUT);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

fn init_data_dir(
    binaries: &Binaries,
    run_as: &process::RunAs,
    data_dir: &Path,
    ephemeral: bool,
) -> Result<(), Error> {
    fs::create_dir_all(data_dir).map_err(io(format!("creating {}", data_dir.display())))?;
    run_as.prepare_dir(data_dir)?;
    if let Some(parent) = data_dir.parent() {
        run_as.prepare_dir(parent)?;
    }
    let mut cmd = run_as.command(&binaries.initdb());
    cmd.arg("-D")
        .arg(data_dir)
        .args(["-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--locale=C"]);
    if ephemeral {
        cmd.arg("--no-sync");
    }
    let out = cmd.output().map_err(io("running initdb"))?;
    if !out.status.success() {
        return Err(Error::InitDb {
            status: out.status.to_string(),
            output: String::from_utf8_lossy(&[out.stdout, out.stderr].concat()).into_owned(),
        });
    }
    Ok(())
}

fn start_server(
    binaries: &Binaries,
    run_as: &process::RunAs,
    config: &Config,
    data_dir: &Path,
    log_file: &Path,
    port: u16,
) -> Result<process::Guarded, Error> {
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_file)
        .map_err(io(format!("opening {}", log_file.display())))?;
    run_as.prepare_file(log_file)?;
    let log_err = log.try_clone().map_err(io("duplicating the log handle"))?;

    let mut cmd = run_as.command(&binaries.postgres());
    cmd.arg("-D").arg(data_dir).arg("-p").arg(port.to_string());
    let mut settings: Vec<(String, String)> = vec![
        ("listen_addresses".into(), "127.0.0.1".into()),
        ("unix_socket_directories".into(), String::new()),
        ("max_connections".into(), config.max_connections.to_string()),
        // Seed 002: write who waited for a lock past deadlock_timeout, and keep the default 1 s.
        ("log_lock_waits".into(), "on".into()),
        ("deadlock_timeout".into(), "1s".into()),
    ];
    if matches!(config.data_dir, DataDir::Ephemeral) {
        for (k, v) in [
            ("fsync", "off"),
            ("synchronous_commit", "off"),
            ("full_page_writes", "off"),
        ] {
            settings.push((k.into(), v.into()));
        }
    }
    settings.extend(config.settings.iter().cloned());
    for (name, value) in &settings {
        cmd.arg("-c").arg(format!("{name}={value}"));
    }
    cmd.stdout(log).stderr(log_err);

    let server = process::spawn_guarded(cmd)?;
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        if server.has_exited() {
            return Err(Error::StartFailed {
                log: log_file.to_owned(),
                tail: log_tail(log_file, 15),
            });
        }
        if is_ready(binaries, port) {
            return Ok(server);
        }
        if Instant::now() > deadline {
            server.stop(SHUTDOWN_TIMEOUT);
            return Err(Error::StartTimeout(STARTUP_TIMEOUT));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn is_ready(binaries: &Binaries, port: u16) -> bool {
    std::process::Command::new(binaries.pg_isready())
        .args([
            "-q",
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            SUPERUSER,
        ])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn free_port() -> Result<u16, Error> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(io("asking the kernel for a free port"))?;
    let port = listener
        .local_addr()
        .map_err(io("reading the free port"))?
        .port();
    Ok(port)
}

fn port_conflict(e: &Error) -> bool {
    matches!(e, Error::StartFailed { tail, .. } if tail.contains("could not bind") || tail.contains("Address already in use"))
}

fn log_tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ephemeral_cluster_starts_accepts_and_stops() {
        let mut cluster = Cluster::start(&Config::ephemeral()).expect("start");
        let pid = cluster.pid().expect("pid");
        let binaries = Binaries::find().expect("binaries");
        assert!(is_ready(&binaries, cluster.port()));
        let data_dir = cluster.data_dir().to_owned();
        cluster.stop();
        assert!(!is_ready(&binaries, cluster.port()));
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "postmaster {pid} still running after stop"
        );
        drop(cluster);
        assert!(!data_dir.exists(), "ephemeral data dir not removed");
    }

    #[test]
    fn persistent_cluster_keeps_its_data_directory() {
        let parent = tempfile::tempdir().expect("tempdir");
        let dir = parent.path().join("pg");
        {
            let _c = Cluster::start(&Config::persistent(&dir)).expect("first start");
        }
        assert!(dir.join("PG_VERSION").exists());
        // A second start reuses the initialised directory.
        let c = Cluster::start(&Config::persistent(&dir)).expect("second start");
        assert!(c
            .url("postgres")
            .starts_with("postgres://postgres@127.0.0.1:"));
    }
}
