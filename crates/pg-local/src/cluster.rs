//! A running cluster ([`Cluster`]): choosing where its data and password live, initdb, the
//! password, starting the postmaster (on a free port when asked, retried when the port was
//! taken meanwhile), waiting until it answers, restarting and stopping it. A start refuses a
//! data directory a live postmaster uses, and waits for an orphaned one to finish shutting
//! down.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::auth::{self, REDACTED};
use crate::binaries::Binaries;
use crate::config::{
    Config, DataDir, LOG_FILE, ORPHAN_WAIT, SHUTDOWN_TIMEOUT, SOCKET_PORT, STARTUP_TIMEOUT,
    SUPERUSER,
};
use crate::error::{io, Error};
use crate::{dirs, log, owner, process, reap};

/// How many times a start is retried when the chosen port was taken in the meantime.
const PORT_ATTEMPTS: usize = 5;
/// File in the data directory naming the process that started the running postmaster.
const OWNER_FILE: &str = "pg-local.owner";
/// File name of an ephemeral cluster's password, inside its temporary directory.
const EPHEMERAL_PASSWORD_FILE: &str = "password";

/// A running cluster. Dropping it stops the server (fast shutdown) and removes an ephemeral
/// data directory.
#[derive(Debug)]
pub struct Cluster {
    port: u16,
    data_dir: PathBuf,
    socket_dir: PathBuf,
    log_file: PathBuf,
    log: log::SharedLog,
    password: auth::Password,
    password_file: PathBuf,
    tcp: bool,
    /// What a restart needs to start the same server again.
    binaries: Binaries,
    run_as: process::RunAs,
    args: Vec<(String, String)>,
    env: Vec<(String, PathBuf)>,
    server: Option<process::Guarded>,
    // Declared last so the directories are removed after the server has stopped.
    _socket_temp: Option<tempfile::TempDir>,
    _temp: Option<tempfile::TempDir>,
}

impl Cluster {
    /// Finds the binaries, initialises the data directory if needed and starts the server.
    pub fn start(config: &Config) -> Result<Cluster, Error> {
        let binaries = match &config.bin_dir {
            Some(dir) => Binaries::at(dir)?,
            None => Binaries::find()?,
        };
        let run_as = process::RunAs::for_current_process()?;
        let place = Place::choose(config, &run_as)?;
        let existed = place.initialise(&binaries, &run_as)?;
        let password = place.password(&binaries, &run_as, existed)?;
        let log_file = place.data_dir.join(LOG_FILE);
        let (socket_temp, socket_dir) = match dirs::socket_dir_in(&place.data_dir, SOCKET_PORT) {
            Some(dir) => (None, dir),
            None => {
                let temp = dirs::private_socket_dir(&run_as)?;
                let dir = temp.path().to_owned();
                (Some(temp), dir)
            }
        };
        let mut cluster = Cluster {
            port: config.port.unwrap_or(SOCKET_PORT),
            data_dir: place.data_dir,
            socket_dir,
            log: log::RotatingLog::new(log_file.clone(), config.log_limit),
            log_file,
            password,
            password_file: place.password_file,
            tcp: config.tcp,
            binaries,
            run_as,
            args: server_settings(config),
            env: config.env.clone(),
            server: None,
            _socket_temp: socket_temp,
            _temp: place.temp,
        };
        cluster.server = Some(cluster.first_server(config)?);
        Ok(cluster)
    }

    /// The first postmaster of a new [`Cluster`]: on the configured port, or on a free one,
    /// trying another when the chosen port was taken between the probe and the bind.
    fn first_server(&mut self, config: &Config) -> Result<process::Guarded, Error> {
        if !config.tcp || config.port.is_some() {
            return self.start_server();
        }
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            self.port = free_port()?;
            match self.start_server() {
                Ok(server) => return Ok(server),
                // Another process may have taken the port between our probe and the bind.
                Err(e @ Error::StartFailed { .. }) if port_conflict(&e) => last_error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or(Error::StartTimeout(STARTUP_TIMEOUT)))
    }

    /// The port: of the TCP listener when there is one; otherwise it only names the socket.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The directory holding the Unix socket (mode 0700, the server's user's).
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The current server log, inside the data directory (older ones: `<log>.1`, `.2`, …).
    pub fn log_file(&self) -> &Path {
        &self.log_file
    }

    /// The file holding the superuser's password (mode 0600).
    pub fn password_file(&self) -> &Path {
        &self.password_file
    }

    /// Whether the server also listens on 127.0.0.1.
    pub fn has_tcp(&self) -> bool {
        self.tcp
    }

    /// The server binaries this cluster runs.
    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// Process id of the postmaster.
    pub fn pid(&self) -> Option<u32> {
        self.server.as_ref().map(process::Guarded::pid)
    }

    /// Whether the postmaster is gone (it died, or [`Cluster::stop`] stopped it).
    pub fn has_exited(&self) -> bool {
        self.server
            .as_ref()
            .is_none_or(process::Guarded::has_exited)
    }

    /// Connection URL for `database` as the superuser, over the Unix socket, password included:
    /// give it to a client, never to a log (see [`Cluster::redacted_url`]).
    pub fn url(&self, database: &str) -> String {
        self.url_with(database, self.password.expose())
    }

    /// [`Cluster::url`] with the password replaced by [`REDACTED`], for people and logs.
    pub fn redacted_url(&self, database: &str) -> String {
        self.url_with(database, REDACTED)
    }

    fn url_with(&self, database: &str, password: &str) -> String {
        url_for(&self.socket_dir, self.port, database, password)
    }

    /// Starts the server again on the same directories and port, e.g. after it died (stops it
    /// first if it still runs). The new postmaster has the same parent-death guard.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.stop();
        self.server = Some(self.start_server()?);
        Ok(())
    }

    /// Stops the server now (fast shutdown, then SIGKILL after [`SHUTDOWN_TIMEOUT`]).
    pub fn stop(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.stop(SHUTDOWN_TIMEOUT);
        }
    }

    fn start_server(&self) -> Result<process::Guarded, Error> {
        let pid_file = self.data_dir.join("postmaster.pid");
        refuse_if_running(&self.data_dir)?;
        let (log, log_err, copier) = log::pipe_into(&self.log)?;

        let mut cmd = self.run_as.command(&self.binaries.postgres());
        cmd.arg("-D")
            .arg(&self.data_dir)
            .arg("-p")
            .arg(self.port.to_string());
        let listen = if self.tcp { "127.0.0.1" } else { "" };
        let socket_dir = format!("{}", self.socket_dir.display());
        let fixed = [
            ("listen_addresses", listen),
            ("unix_socket_directories", socket_dir.as_str()),
            ("unix_socket_permissions", "0700"),
        ];
        for (name, value) in fixed {
            cmd.arg("-c").arg(format!("{name}={value}"));
        }
        for (name, value) in &self.args {
            cmd.arg("-c").arg(format!("{name}={value}"));
        }
        for (name, value) in &self.env {
            cmd.env(name, value);
        }
        cmd.stdout(log).stderr(log_err);

        let mut server = process::spawn_guarded(cmd, process::POSTMASTER, SHUTDOWN_TIMEOUT)
            .map_err(io("starting postgres"))?;
        // Who owns this postmaster, for a later start that finds it still shutting down.
        owner::claim(&self.data_dir.join(OWNER_FILE))
            .map_err(io("recording the postmaster's owner"))?;
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if server.has_exited() {
                // Let the copier write the server's last words before they are read.
                let drained = Instant::now() + Duration::from_secs(2);
                while !copier.is_finished() && Instant::now() < drained {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let tail = log::tail(&self.log_file, 15);
                return Err(Error::StartFailed {
                    log: self.log_file.clone(),
                    cause: start_failure_cause(&tail),
                    tail,
                });
            }
            // Ready means *our* postmaster answers: the socket path is fixed, so another
            // server on the same directory would answer too.
            let ours = reap::read_pid(&pid_file) == i32::try_from(server.pid()).ok();
            if ours && is_ready(&self.binaries, &self.socket_dir, self.port) {
                tracing::info!(pid = server.pid(), data_dir = %self.data_dir.display(),
                    socket_dir = %self.socket_dir.display(), tcp = self.tcp, "postgres started");
                return Ok(server);
            }
            if Instant::now() > deadline {
                server.stop(SHUTDOWN_TIMEOUT);
                return Err(Error::StartTimeout(STARTUP_TIMEOUT));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where a cluster keeps its data and password, decided before anything is started.
struct Place {
    /// The temporary directory of an ephemeral cluster (removed with it).
    temp: Option<tempfile::TempDir>,
    data_dir: PathBuf,
    password_file: PathBuf,
}

impl Place {
    /// An ephemeral cluster's fresh temporary directory (after reaping those of dead owners),
    /// or the persistent directory made absolute.
    fn choose(config: &Config, run_as: &process::RunAs) -> Result<Place, Error> {
        match &config.data_dir {
            DataDir::Ephemeral => {
                reap::reap_stale(&std::env::temp_dir());
                let temp = tempfile::Builder::new()
                    .prefix(reap::PREFIX)
                    .tempdir()
                    .map_err(io("creating a temporary directory"))?;
                reap::claim(temp.path()).map_err(io("recording the directory's owner"))?;
                run_as.prepare_dir(temp.path())?;
                let password_file = config
                    .password_file
                    .clone()
                    .unwrap_or_else(|| temp.path().join(EPHEMERAL_PASSWORD_FILE));
                Ok(Place {
                    data_dir: temp.path().join("data"),
                    temp: Some(temp),
                    password_file,
                })
            }
            DataDir::Persistent(dir) => {
                let dir =
                    std::path::absolute(dir).map_err(io(format!("resolving {}", dir.display())))?;
                let password_file = config
                    .password_file
                    .clone()
                    .unwrap_or_else(|| default_password_file(&dir));
                Ok(Place {
                    temp: None,
                    data_dir: dir,
                    password_file,
                })
            }
        }
    }

    /// Runs initdb unless the data directory is initialised already; returns whether it was.
    /// An initialised one must not be in use by a running server.
    fn initialise(&self, binaries: &Binaries, run_as: &process::RunAs) -> Result<bool, Error> {
        let data_dir = &self.data_dir;
        if !data_dir.join("PG_VERSION").exists() {
            dirs::prepare_data_dir(run_as, data_dir)?;
            init_data_dir(binaries, run_as, data_dir, self.temp.is_some())?;
            return Ok(false);
        }
        // Before anything touches it (a re-key needs the cluster stopped).
        refuse_if_running(data_dir)?;
        // Still say clearly when the server's user cannot get there.
        if let Some(parent) = data_dir.parent() {
            dirs::check_traversable(run_as, parent)?;
        }
        Ok(true)
    }

    /// The superuser's password: the stored one, else a new one (stored). Either way the
    /// cluster is re-keyed when its `pg_hba.conf` is not ours (it let clients in without one).
    fn password(
        &self,
        binaries: &Binaries,
        run_as: &process::RunAs,
        existed: bool,
    ) -> Result<auth::Password, Error> {
        let data_dir = &self.data_dir;
        let hba_is_ours = auth::hba_is_ours(data_dir);
        if existed && !hba_is_ours {
            tracing::warn!(data_dir = %data_dir.display(),
                "this cluster let clients in without a password: switching it to scram-sha-256");
        }
        if let Some(password) = auth::load(&self.password_file)? {
            if !hba_is_ours {
                auth::rekey(binaries, run_as, data_dir, &password)?;
            }
            return Ok(password);
        }
        if existed && hba_is_ours {
            tracing::warn!(data_dir = %data_dir.display(),
                "no password file for this cluster: setting a new password");
        }
        let password = auth::generate()?;
        auth::rekey(binaries, run_as, data_dir, &password)?;
        auth::store(&self.password_file, &password)?;
        Ok(password)
    }
}

/// A live postmaster on `data_dir` (see [`live_postmaster`]) is an error, except an orphaned one
/// (its parent, e.g. a killed `saldo serve`, is gone): that one is shutting down on its
/// parent-death signal, so a restart right after a crash waits for it.
fn refuse_if_running(data_dir: &Path) -> Result<(), Error> {
    let deadline = Instant::now() + ORPHAN_WAIT;
    loop {
        match live_postmaster(data_dir) {
            None => return Ok(()),
            Some(pid) if orphaned(data_dir, pid) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Some(pid) => {
                return Err(Error::AlreadyRunning {
                    data_dir: data_dir.to_owned(),
                    pid,
                })
            }
        }
    }
}

/// The postmaster running on `data_dir`, as its `postmaster.pid` names it. After a crash that
/// took the postmaster too (OOM kill, power loss) the file stays, and its pid may be another
/// process's by now; PostgreSQL would refuse to start over a file naming any live process, so
/// such a file (its process works outside the data directory, which no postmaster does) is
/// removed here, as PostgreSQL removes one naming a dead process.
fn live_postmaster(data_dir: &Path) -> Option<i32> {
    let file = data_dir.join("postmaster.pid");
    let pid = reap::read_pid(&file)?;
    if owner::runs_in(pid, data_dir) {
        return Some(pid);
    }
    if owner::alive(pid) {
        tracing::warn!(pid, file = %file.display(),
            "postmaster.pid names a process that is not a postmaster of this directory (left \
             by a crash): removing it");
        if let Err(e) = fs::remove_file(&file) {
            tracing::warn!(error = %e, "could not remove the stale postmaster.pid");
        }
    }
    None
}

/// Whether the postmaster `pid` lost the process that started it: the owner recorded in the
/// data directory is gone (see `owner.rs`), or `pid` was re-parented to init.
fn orphaned(data_dir: &Path, pid: i32) -> bool {
    if owner::alive_in(&data_dir.join(OWNER_FILE)) == Some(false) {
        return true;
    }
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // The command name (field 2) may hold spaces; fields after its ')' are plain.
            let rest = &stat[stat.rfind(')')? + 1..];
            rest.split_whitespace().nth(1)?.parse::<i32>().ok()
        })
        .is_some_and(|ppid| ppid == 1)
}

/// `<dir>.password`, next to a persistent data directory.
fn default_password_file(data_dir: &Path) -> PathBuf {
    let mut name = data_dir.file_name().unwrap_or_default().to_owned();
    name.push(".password");
    data_dir.with_file_name(name)
}

/// The `-c` settings of the server besides where it listens.
fn server_settings(config: &Config) -> Vec<(String, String)> {
    let mut settings: Vec<(String, String)> = vec![
        ("max_connections".into(), config.max_connections.to_string()),
        // Write who waited for a lock past deadlock_timeout (the lock-wait diagnosis reads
        // them), and keep the default 1 s.
        ("log_lock_waits".into(), "on".into()),
        ("deadlock_timeout".into(), "1s".into()),
        ("password_encryption".into(), "scram-sha-256".into()),
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
    settings
}

/// The superuser's URL for `database` over the socket in `socket_dir` (or TCP `port`).
pub(crate) fn url_for(socket_dir: &Path, port: u16, database: &str, password: &str) -> String {
    format!(
        "postgresql://{SUPERUSER}:{password}@{}:{port}/{database}",
        percent_encode(&socket_dir.to_string_lossy()),
    )
}

/// The line of a failed start's log that says why: its last FATAL, PANIC or ERROR line, else
/// its last line.
fn start_failure_cause(tail: &str) -> String {
    let lines: Vec<&str> = tail.lines().filter(|l| !l.trim().is_empty()).collect();
    lines
        .iter()
        .rev()
        .find(|l| ["FATAL:", "PANIC:", "ERROR:"].iter().any(|k| l.contains(k)))
        .or(lines.last())
        .map_or_else(|| "no log output".to_owned(), |l| l.trim().to_owned())
}

/// Every byte outside RFC 3986's unreserved set as `%XX` (a socket path as a URL host).
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

pub(crate) fn init_data_dir(
    binaries: &Binaries,
    run_as: &process::RunAs,
    data_dir: &Path,
    ephemeral: bool,
) -> Result<(), Error> {
    // `trust` only for the bootstrap: the cluster is re-keyed (password set, pg_hba.conf
    // replaced) in single-user mode before it ever accepts a connection.
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

/// Whether the server accepts connections (no authentication needed to tell).
pub(crate) fn is_ready(binaries: &Binaries, socket_dir: &Path, port: u16) -> bool {
    process::clean_command(&binaries.pg_isready())
        .arg("-q")
        .arg("-h")
        .arg(socket_dir)
        .args(["-p", &port.to_string(), "-U", SUPERUSER])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

pub(crate) fn free_port() -> Result<u16, Error> {
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
