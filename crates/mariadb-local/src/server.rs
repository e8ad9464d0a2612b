//! `MariaDb`: one throwaway server — its directory, its password, its process, its stop.
//!
//! Layout of the temporary directory (`$TMPDIR/mariadb-local-XXXXXX`, ours):
//! `owner` (who started it, for reaping after a SIGKILL), `password` (0600), `data/` and `run/`
//! (0700, handed to the `mysql` user when we are root: the datadir, and the socket, pid file,
//! error log and the one-shot init file that creates the `saldo` user, removed once the server
//! is ready). Start-up is kept short: a 32 MiB buffer pool, 16 MiB redo log, no binlog, no
//! performance schema, no doublewrite, the log flushed once a second (the data is throwaway).

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::binaries::Binaries;
use crate::error::{io, Error};
use crate::process::{RunAs, MARIADBD, SHUTDOWN_TIMEOUT};
use pg_local::{spawn_guarded, Guarded};

/// The one user created, with every privilege (`'saldo'@'localhost'`, and `@'127.0.0.1'` when TCP).
pub const USER: &str = "saldo";
/// Longest wait for `mariadb-install-db` and then for the server to accept connections.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
const PREFIX: &str = "mariadb-local-";
/// Bytes of a log's end quoted in an error.
const TAIL_BYTES: u64 = 600;

/// How to start the server.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listen on `127.0.0.1:<port>` too; `None` (the default): `--skip-networking`.
    pub tcp_port: Option<u16>,
    /// `innodb_lock_wait_timeout` in seconds (error 1205 after it); default 10.
    pub lock_wait_timeout_s: u32,
    /// `max_connections`; default 300.
    pub max_connections: u32,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            tcp_port: None,
            lock_wait_timeout_s: 10,
            max_connections: 300,
        }
    }
}

/// A running private MariaDB; stopped, and its directory removed, on drop.
#[derive(Debug)]
pub struct MariaDb {
    // Field order: the process stops before its directory goes.
    process: Guarded,
    socket: PathBuf,
    password: String,
    tcp_port: Option<u16>,
    dir: tempfile::TempDir,
}

impl MariaDb {
    /// Starts a server with `config` from the machine's binaries.
    pub fn start(config: &Config) -> Result<MariaDb, Error> {
        let binaries = Binaries::find()?;
        let run_as = RunAs::for_current_process()?;
        reap_orphans();
        let dir = make_dir(&run_as)?;
        let password = generate_password()?;
        write_private(&dir.path().join("password"), &password)?;
        let (data, run) = (dir.path().join("data"), dir.path().join("run"));
        install_db(&binaries, &run_as, &data, &run)?;
        let init = run.join("init.sql");
        write_private(&init, &init_sql(&password, config.tcp_port.is_some()))?;
        run_as.hand_over(&init)?;
        let socket = run.join("mysqld.sock");
        let cmd = server_command(&binaries, &run_as, config, &data, &run);
        let process =
            spawn_guarded(cmd, MARIADBD, SHUTDOWN_TIMEOUT).map_err(io("starting mariadbd"))?;
        let server = MariaDb {
            process,
            socket,
            password,
            tcp_port: config.tcp_port,
            dir,
        };
        server.wait_ready(&run.join("error.log"))?;
        let _ = fs::remove_file(&init);
        tracing::info!(pid = server.pid(), socket = %server.socket.display(), "private MariaDB started");
        Ok(server)
    }

    /// The Unix socket to connect to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The password of [`USER`]: never log it.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The file that holds the password (mode 0600).
    pub fn password_file(&self) -> PathBuf {
        self.dir.path().join("password")
    }

    /// The loopback port, when one was asked for.
    pub fn tcp_port(&self) -> Option<u16> {
        self.tcp_port
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The server's temporary directory (removed on drop).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A `mysql://` URL of database `db` over the socket (it holds the password: never log it).
    pub fn url(&self, db: &str) -> String {
        format!(
            "mysql://{USER}:{}@localhost/{db}?socket={}",
            self.password,
            self.socket.display()
        )
    }

    /// Stops the server now (SIGTERM, then SIGKILL after [`SHUTDOWN_TIMEOUT`]).
    pub fn stop(mut self) {
        self.process.stop(SHUTDOWN_TIMEOUT);
    }

    /// Waits, bounded, for "ready for connections" in the error log and the socket file.
    fn wait_ready(&self, log: &Path) -> Result<(), Error> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let text = fs::read_to_string(log).unwrap_or_default();
            if text.contains("ready for connections") && self.socket.exists() {
                return Ok(());
            }
            if self.process.has_exited() {
                return Err(Error::Exited { tail: tail(log) });
            }
            if Instant::now() >= deadline {
                return Err(Error::NotReady {
                    socket: self.socket.clone(),
                    seconds: STARTUP_TIMEOUT.as_secs(),
                    tail: tail(log),
                });
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

/// The temporary directory: ours (0711 as root, so `mysql` may pass through), with an owner
/// file, and `data/`, `run/` handed to the server's user with mode 0700.
fn make_dir(run_as: &RunAs) -> Result<tempfile::TempDir, Error> {
    let dir = tempfile::Builder::new()
        .prefix(PREFIX)
        .tempdir()
        .map_err(io("creating the temporary directory"))?;
    let mode = if matches!(run_as, RunAs::User { .. }) {
        0o711
    } else {
        0o700
    };
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(mode))
        .map_err(io("chmod the temporary directory"))?;
    if let Some(owner) = pg_local::Owner::current() {
        fs::write(dir.path().join("owner"), owner.to_text())
            .map_err(io("writing the owner file"))?;
    }
    for sub in ["data", "run"] {
        let path = dir.path().join(sub);
        fs::create_dir(&path).map_err(io(format!("mkdir {}", path.display())))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700))
            .map_err(io(format!("chmod {}", path.display())))?;
        run_as.hand_over(&path)?;
    }
    Ok(dir)
}

/// `/usr` for `/usr/bin/mariadb-install-db`: where `share/` (error messages, system tables) is.
fn basedir(binaries: &Binaries) -> PathBuf {
    binaries
        .install_db
        .parent()
        .and_then(Path::parent)
        .map_or_else(|| PathBuf::from("/usr"), Path::to_path_buf)
}

/// Runs `mariadb-install-db` into `data`, its output into `run/install.log`, bounded.
fn install_db(binaries: &Binaries, run_as: &RunAs, data: &Path, run: &Path) -> Result<(), Error> {
    let log_path = run.join("install.log");
    let log = fs::File::create(&log_path).map_err(io("creating install.log"))?;
    let log2 = log.try_clone().map_err(io("cloning install.log"))?;
    let mut cmd = run_as.command(&binaries.install_db);
    cmd.arg("--no-defaults")
        .arg(format!("--basedir={}", basedir(binaries).display()))
        .arg(format!("--datadir={}", data.display()))
        .arg(format!("--tmpdir={}", run.display()))
        .args(["--auth-root-authentication-method=socket", "--skip-test-db"])
        .args(["--skip-name-resolve", "--innodb-buffer-pool-size=32M"])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
    let mut child = cmd.spawn().map_err(io("starting mariadb-install-db"))?;
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let status = loop {
        if let Some(status) = child
            .try_wait()
            .map_err(io("waiting for mariadb-install-db"))?
        {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::InstallDb {
                status: "timed out".into(),
                tail: tail(&log_path),
            });
        }
        std::thread::sleep(Duration::from_millis(25));
    };
    if status.success() {
        Ok(())
    } else {
        Err(Error::InstallDb {
            status: status.to_string(),
            tail: tail(&log_path),
        })
    }
}

fn server_command(
    binaries: &Binaries,
    run_as: &RunAs,
    config: &Config,
    data: &Path,
    run: &Path,
) -> std::process::Command {
    let mut cmd = run_as.command(&binaries.server);
    let at = |name: &str, path: PathBuf| format!("--{name}={}", path.display());
    cmd.arg("--no-defaults")
        .arg(format!("--basedir={}", basedir(binaries).display()))
        .arg(at("datadir", data.to_path_buf()))
        .arg(at("socket", run.join("mysqld.sock")))
        .arg(at("pid-file", run.join("mysqld.pid")))
        .arg(at("log-error", run.join("error.log")))
        .arg(at("tmpdir", run.to_path_buf()))
        .arg(at("init-file", run.join("init.sql")))
        .args([
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=16M",
        ])
        .args([
            "--innodb-flush-log-at-trx-commit=0",
            "--innodb-doublewrite=0",
        ])
        .args([
            "--skip-log-bin",
            "--performance-schema=OFF",
            "--skip-name-resolve",
        ])
        .arg(format!(
            "--innodb-lock-wait-timeout={}",
            config.lock_wait_timeout_s
        ))
        .arg(format!("--max-connections={}", config.max_connections))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    match config.tcp_port {
        None => cmd.arg("--skip-networking"),
        Some(port) => cmd.args(["--bind-address=127.0.0.1", &format!("--port={port}")]),
    };
    cmd
}

/// Creates the `saldo` user with the password and every privilege, and its `saldo` database.
fn init_sql(password: &str, tcp: bool) -> String {
    let mut hosts = vec!["localhost"];
    if tcp {
        hosts.push("127.0.0.1");
    }
    let mut sql = String::from("CREATE DATABASE IF NOT EXISTS saldo;\n");
    for host in hosts {
        sql.push_str(&format!(
            "CREATE USER '{USER}'@'{host}' IDENTIFIED BY '{password}';\n\
             GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'{host}' WITH GRANT OPTION;\n"
        ));
    }
    sql
}

/// 24 random bytes as hex (nothing to escape in SQL or a URL).
fn generate_password() -> Result<String, Error> {
    let mut bytes = [0u8; 24];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(io("reading /dev/urandom"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes `text` into a new file of mode 0600 (created with that mode: never readable by others).
fn write_private(path: &Path, text: &str) -> Result<(), Error> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io(format!("creating {}", path.display())))?;
    file.write_all(text.as_bytes())
        .map_err(io(format!("writing {}", path.display())))
}

/// The last bytes of a log, on one line.
fn tail(path: &Path) -> String {
    let Ok(mut file) = fs::File::open(path) else {
        return "(no log)".into();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)));
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Removes the directories of earlier servers whose owner is gone (a SIGKILLed owner's server
/// died with it, by the parent-death signal; its directory stays). A directory without an
/// owner file is left alone: it may be one being created right now.
fn reap_orphans() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(PREFIX) {
            continue;
        }
        let owner = fs::read_to_string(entry.path().join("owner"))
            .ok()
            .and_then(|t| pg_local::Owner::parse(&t));
        if owner.is_some_and(|o| !o.is_alive()) {
            tracing::info!(dir = %entry.path().display(), "removing an orphaned MariaDB directory");
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}
