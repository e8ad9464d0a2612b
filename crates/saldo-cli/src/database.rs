//! Which database a command talks to: the `--database-url` given, or the embedded cluster
//! (`pg-local`) in the per-user data directory, kept running while the returned value lives.
//! Every subcommand that needs PostgreSQL goes through [`open`].

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
