//! A local Citus cluster: one coordinator and N workers, each a [`Cluster`] of its own, on
//! 127.0.0.1, for saldo's distributed mode (on Citus) and its tests.
//!
//! Every node is an ordinary pg-local cluster, so every rule of the single cluster holds per
//! node: the same life cycle (stopped on drop, on panic and, through each postmaster's
//! parent-death signal, when the owner is SIGKILLed; ephemeral directories reaped by the next
//! start), the same `pg_hba.conf` (SCRAM-SHA-256 for everyone, nothing trusted) and no listener
//! beyond 127.0.0.1. What a distributed cluster adds is that nodes connect to each other: the
//! coordinator to the workers for every distributed statement, workers to each other and to the
//! coordinator for metadata sync and 2PC recovery. Those connections authenticate with the one
//! generated superuser password that all nodes share, read from a `.pgpass` file (mode 0600,
//! the server's user's) that each postmaster gets as `PGPASSFILE`: no trust entry and no
//! password in `citus.node_conninfo` or in a catalog.
//!
//! Citus keeps its metadata per database, so a database is made distributed on every node at
//! once ([`CitusCluster::create_database`]): created on each node, `CREATE EXTENSION citus` on
//! each, then the coordinator registered (`citus_set_coordinator_host`) and the workers added
//! (`citus_add_node`) in the coordinator's copy.
//!
//! The cluster is ephemeral only: Citus records each worker's port in its metadata, and
//! ephemeral nodes take free ports, so a persistent cluster would need fixed ports per node
//! (not built yet).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::binaries::{self, Binaries};
use crate::cluster::Cluster;
use crate::config::{Config, DataDir, SUPERUSER};
use crate::error::{io, Error};
use crate::{auth, process, reap};

pub use crate::error::CITUS_BIN_ENV;

/// Workers a cluster starts unless told otherwise.
pub const DEFAULT_WORKERS: usize = 2;
/// Most workers one local cluster may have: each is a full postmaster on this machine.
pub const MAX_WORKERS: usize = 8;
/// The database made distributed at start-up (the others: [`CitusCluster::create_database`]).
pub const DEFAULT_DATABASE: &str = "postgres";
/// Where `../shared/citus/build-citus /var/cache/saldo-citus` puts its build on saldo's machines
/// (CI's cache directory); searched after [`CITUS_BIN_ENV`] and the ordinary places.
pub const BUILD_CITUS_ROOT: &str = "/var/cache/saldo-citus/root/usr/lib/postgresql";
/// The loopback address every node listens on and registers under.
const HOST: &str = "127.0.0.1";
/// Longest database name accepted (PostgreSQL's NAMEDATALEN − 1).
const MAX_DATABASE_NAME: usize = 63;
/// Most bytes of a failed statement's output kept in an error.
const MAX_SQL_OUTPUT_BYTES: usize = 4096;

/// What to start.
#[derive(Debug, Clone)]
pub struct CitusConfig {
    /// Worker nodes besides the coordinator (1 ..= [`MAX_WORKERS`]).
    pub workers: usize,
    /// The Citus-enabled bin directory; `None`: [`find_binaries`].
    pub bin_dir: Option<PathBuf>,
    /// The template of every node: its `settings`, `max_connections` and `log_limit` are used;
    /// data directory, listener, password file and binaries are the Citus cluster's.
    pub node: Config,
}

impl Default for CitusConfig {
    fn default() -> Self {
        CitusConfig {
            workers: DEFAULT_WORKERS,
            bin_dir: None,
            node: Config::ephemeral(),
        }
    }
}

impl CitusConfig {
    /// `workers` workers (bounded by [`MAX_WORKERS`] at start).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Uses the Citus-enabled binaries in `dir`.
    pub fn bin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.bin_dir = Some(dir.into());
        self
    }

    /// Adds one server setting on every node.
    pub fn setting(mut self, name: &str, value: &str) -> Self {
        self.node = self.node.setting(name, value);
        self
    }
}

/// Finds PostgreSQL binaries whose library directory holds `citus.so`: [`CITUS_BIN_ENV`] alone
/// when set; else `PG_BIN` / `pg_config` / `/usr/lib/postgresql/*/bin` (as [`Binaries::find`]),
/// then build-citus's cache ([`BUILD_CITUS_ROOT`]). The error says what to install.
pub fn find_binaries() -> Result<Binaries, Error> {
    let candidates = match std::env::var_os(CITUS_BIN_ENV) {
        Some(dir) => vec![PathBuf::from(dir)],
        None => {
            let mut all = binaries::candidates();
            all.extend(binaries::debian_versions(Path::new(BUILD_CITUS_ROOT)));
            all
        }
    };
    let mut searched = Vec::new();
    for dir in candidates {
        if binaries::is_complete(&dir) && has_citus(&dir) {
            return Binaries::at(&dir);
        }
        searched.push(dir.display().to_string());
    }
    Err(Error::CitusNotFound {
        searched: searched.join(", "),
    })
}

/// Whether the library directory of the binaries in `bin_dir` holds `citus.so`.
pub fn has_citus(bin_dir: &Path) -> bool {
    lib_dir(bin_dir).is_some_and(|lib| lib.join("citus.so").is_file())
}

/// `pg_config --pkglibdir` of that installation, else `<bin_dir>/../lib`.
fn lib_dir(bin_dir: &Path) -> Option<PathBuf> {
    let from_pg_config = process::clean_command(&bin_dir.join("pg_config"))
        .arg("--pkglibdir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    from_pg_config.or_else(|| bin_dir.parent().map(|p| p.join("lib")))
}

/// A running coordinator and its workers. Dropping it stops every node, then removes the
/// shared password files.
#[derive(Debug)]
pub struct CitusCluster {
    // Declared before the shared directory, so nodes stop before their pgpass file goes.
    coordinator: Cluster,
    workers: Vec<Cluster>,
    pgpass: PathBuf,
    password_file: PathBuf,
    /// Makes database set-up one at a time: registering the nodes in two databases at once
    /// fails in Citus ("tuple concurrently updated").
    setting_up: std::sync::Mutex<()>,
    _shared: tempfile::TempDir,
}

impl CitusCluster {
    /// Starts the nodes, and makes [`DEFAULT_DATABASE`] distributed over them.
    pub fn start(config: &CitusConfig) -> Result<CitusCluster, Error> {
        if !(1..=MAX_WORKERS).contains(&config.workers) {
            return Err(Error::Citus(format!(
                "a local Citus cluster has 1 to {MAX_WORKERS} workers, not {}",
                config.workers
            )));
        }
        let binaries = match &config.bin_dir {
            Some(dir) if has_citus(dir) => Binaries::at(dir)?,
            Some(dir) => {
                return Err(Error::CitusNotFound {
                    searched: dir.display().to_string(),
                })
            }
            None => find_binaries()?,
        };
        let run_as = process::RunAs::for_current_process()?;
        // The files every node shares: the password and the .pgpass made of it.
        reap::reap_stale(&std::env::temp_dir());
        let shared = tempfile::Builder::new()
            .prefix(&format!("{}citus-", reap::PREFIX))
            .tempdir()
            .map_err(io("creating the Citus cluster's directory"))?;
        reap::claim(shared.path()).map_err(io("recording the directory's owner"))?;
        run_as.prepare_dir(shared.path())?;
        let password_file = shared.path().join("password");
        let pgpass = shared.path().join("pgpass");
        let password = auth::generate()?;
        auth::store(&password_file, &password)?;
        write_pgpass(&pgpass, &password)?;
        // The postmasters (as the server's user) read the .pgpass; we read both as its owner
        // or as root.
        run_as.prepare_file(&pgpass)?;

        let node = |name: &str| -> Result<Cluster, Error> {
            let mut node = config.node.clone();
            node.data_dir = DataDir::Ephemeral;
            node.tcp = true;
            node.port = None;
            node.password_file = Some(password_file.clone());
            node.bin_dir = Some(binaries.dir().to_owned());
            node.env.push(("PGPASSFILE".into(), pgpass.clone()));
            // The nodes' libpq looks for client certificates under $HOME/.postgresql: as root
            // we would hand them root's HOME, which the server's user may not read (an error,
            // where a missing directory is not).
            node.env.push(("HOME".into(), shared.path().to_owned()));
            let max_prepared = node.max_connections.to_string();
            node = node
                .setting("shared_preload_libraries", "citus")
                // Every multi-shard write commits with PREPARE TRANSACTION on the workers.
                .setting("max_prepared_transactions", &max_prepared)
                .setting("cluster_name", name);
            Cluster::start(&node)
        };
        let coordinator = node("citus-coordinator")?;
        let mut workers = Vec::with_capacity(config.workers);
        for i in 1..=config.workers {
            workers.push(node(&format!("citus-worker-{i}"))?);
        }
        let cluster = CitusCluster {
            coordinator,
            workers,
            pgpass,
            password_file,
            setting_up: std::sync::Mutex::new(()),
            _shared: shared,
        };
        cluster.distribute(DEFAULT_DATABASE)?;
        Ok(cluster)
    }

    /// The coordinator: where clients connect.
    pub fn coordinator(&self) -> &Cluster {
        &self.coordinator
    }

    /// The workers, in the order they were added.
    pub fn workers(&self) -> &[Cluster] {
        &self.workers
    }

    /// The coordinator, to restart it ([`Cluster::restart`]) after it died: fault tests kill
    /// nodes on purpose.
    pub fn coordinator_mut(&mut self) -> &mut Cluster {
        &mut self.coordinator
    }

    /// The workers, to restart one after it died.
    pub fn workers_mut(&mut self) -> &mut [Cluster] {
        &mut self.workers
    }

    /// The coordinator and the workers.
    pub fn nodes(&self) -> impl Iterator<Item = &Cluster> {
        std::iter::once(&self.coordinator).chain(&self.workers)
    }

    /// The `.pgpass` file (mode 0600) every node's outbound connections authenticate with.
    pub fn pgpass_file(&self) -> &Path {
        &self.pgpass
    }

    /// The file holding the superuser's password shared by all nodes (mode 0600).
    pub fn password_file(&self) -> &Path {
        &self.password_file
    }

    /// The coordinator's URL for `database` (password included: never log it).
    pub fn url(&self, database: &str) -> String {
        self.coordinator.url(database)
    }

    /// [`CitusCluster::url`] with the password hidden.
    pub fn redacted_url(&self, database: &str) -> String {
        self.coordinator.redacted_url(database)
    }

    /// Creates `database` on every node and makes it distributed over the workers. `database`
    /// must be a plain lower-case identifier (it is spliced into `CREATE DATABASE`).
    pub fn create_database(&self, database: &str) -> Result<(), Error> {
        check_database_name(database)?;
        // A panic elsewhere while holding it leaves nothing half-done that matters here.
        let _one_at_a_time = self
            .setting_up
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for node in self.nodes() {
            self.run_sql(
                node,
                DEFAULT_DATABASE,
                &format!("CREATE DATABASE {database}"),
            )?;
        }
        self.distribute(database)
    }

    /// Drops `database` on every node (the coordinator first, so no distributed statement
    /// runs against a worker whose copy is gone).
    pub fn drop_database(&self, database: &str) -> Result<(), Error> {
        check_database_name(database)?;
        for node in self.nodes() {
            self.run_sql(
                node,
                DEFAULT_DATABASE,
                &format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"),
            )?;
        }
        Ok(())
    }

    /// Runs `sql` on `node` in `database` with `psql` and returns its unaligned output. It
    /// connects over 127.0.0.1 like the nodes do, so the one `.pgpass` line serves both.
    pub fn run_sql(&self, node: &Cluster, database: &str, sql: &str) -> Result<String, Error> {
        let out = process::clean_command(&node.binaries().dir().join("psql"))
            .args(["-h", HOST])
            .args([
                "-p",
                &node.port().to_string(),
                "-U",
                SUPERUSER,
                "-d",
                database,
            ])
            .args([
                "-X",
                "-q",
                "-w",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ])
            .env("PGPASSFILE", &self.pgpass)
            .current_dir("/")
            .stdin(Stdio::null())
            .output()
            .map_err(io("running psql"))?;
        if !out.status.success() {
            let mut output = String::from_utf8_lossy(&out.stderr).into_owned();
            output.truncate(
                (0..=MAX_SQL_OUTPUT_BYTES.min(output.len()))
                    .rev()
                    .find(|&i| output.is_char_boundary(i))
                    .unwrap_or(0),
            );
            return Err(Error::Citus(format!(
                "`{sql}` on {} failed: {}",
                node_name(node),
                output.trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// `CREATE EXTENSION citus` in `database` on every node, then the coordinator and the
    /// workers registered in the coordinator's metadata (which Citus copies to the workers).
    fn distribute(&self, database: &str) -> Result<(), Error> {
        for node in self.nodes() {
            self.run_sql(node, database, "CREATE EXTENSION IF NOT EXISTS citus")?;
        }
        let mut register = format!(
            "SELECT citus_set_coordinator_host('{HOST}', {});",
            self.coordinator.port()
        );
        for worker in &self.workers {
            register.push_str(&format!(
                "SELECT citus_add_node('{HOST}', {});",
                worker.port()
            ));
        }
        self.run_sql(&self.coordinator, database, &register)?;
        Ok(())
    }
}

/// The name a node's log lines and errors go by (its data directory).
fn node_name(node: &Cluster) -> String {
    node.data_dir().display().to_string()
}

fn check_database_name(name: &str) -> Result<(), Error> {
    let plain = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if plain && name.len() <= MAX_DATABASE_NAME {
        Ok(())
    } else {
        Err(Error::Citus(format!(
            "database name {name:?}: only a plain lower-case identifier of at most \
             {MAX_DATABASE_NAME} bytes"
        )))
    }
}

/// The `.pgpass` of every node and of our own `psql`: the superuser's password for the
/// loopback address only (a wildcard host would offer it to any server a node is pointed at).
/// Created exclusively with mode 0600: libpq ignores a file others can read.
fn write_pgpass(file: &Path, password: &auth::Password) -> Result<(), Error> {
    let pw = password.expose();
    auth::store_secret(file, &format!("{HOST}:*:*:{SUPERUSER}:{pw}\n"))
}

#[cfg(test)]
mod tests;
