//! Which database a command talks to: the `--database-url` given, or the embedded cluster
//! (`pg-local`) in the per-user data directory, kept running while the returned value lives.
//! Every subcommand that needs PostgreSQL goes through [`open`].

use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

use anyhow::Result;

/// A database to talk to: the given URL, or an embedded cluster kept alive while this lives.
pub struct Database {
    pub url: String,
    _embedded: Option<pg_local::Cluster>,
}

pub async fn open(database_url: Option<String>) -> Result<Database> {
    if let Some(url) = database_url {
        return Ok(Database {
            url,
            _embedded: None,
        });
    }
    let data_dir = pg_local::default_data_dir();
    let cluster = tokio::task::spawn_blocking(move || {
        pg_local::Cluster::start(&pg_local::Config::persistent(data_dir))
    })
    .await??;
    let url = cluster.url("postgres");
    eprintln!(
        "embedded PostgreSQL: {url} (data {}, log {})",
        cluster.data_dir().display(),
        cluster.log_file().display()
    );
    Ok(Database {
        url,
        _embedded: Some(cluster),
    })
}

/// saldo's own data directory, where its secrets live (`tokens.json`, mode 0600):
/// `$SALDO_DATA_DIR`, else `/var/lib/saldo` as root, else `$XDG_DATA_HOME/saldo` or
/// `~/.local/share/saldo`. Created 0700 when missing; an existing directory's owner and mode are
/// never changed (it may be one saldo did not create).
pub fn state_dir() -> PathBuf {
    let dir = if let Some(dir) = std::env::var_os("SALDO_DATA_DIR") {
        PathBuf::from(dir)
    } else if nix::unistd::geteuid().is_root() {
        PathBuf::from("/var/lib/saldo")
    } else if let Some(xdg) = std::env::var_os("XDG_DATA_HOME") {
        PathBuf::from(xdg).join("saldo")
    } else {
        let home = std::env::var_os("HOME").map_or_else(std::env::temp_dir, PathBuf::from);
        home.join(".local/share/saldo")
    };
    if !dir.exists() {
        // A failure here surfaces, with the path, from whatever writes into the directory next.
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir);
    }
    dir
}
