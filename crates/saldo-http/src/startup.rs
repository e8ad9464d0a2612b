//! Starting the service: the one wiring of settings, pool, migrations, strategy, metrics and
//! listener that `saldo serve` runs and the tests run too (so the served default, `batched`, is
//! what the startup test drives).
//!
//! [`Application::build`] validates everything and binds before anything is served; the caller
//! then shows the generated tokens (once), announces the address and calls
//! [`Application::run_until`] with its shutdown signal. While it builds, requests on the bound
//! listener are answered 503 `starting` at once ([`crate::starting`]) instead of waiting in the
//! kernel's backlog for the migrations.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use deadpool_postgres::Pool;
use saldo::db::{self, PoolOptions};
use saldo::ledger::TransferStrategy;
use saldo::retry::TxOptions;
use saldo::stock::{self, Store, StrategyConfig, StrategyName};
use tokio::net::TcpListener;

use crate::config::{ConfigError, Generated, RawSettings};
use crate::starting::Starting;
use crate::state::AppState;

/// Everything the service needs to start, validated or checked by [`Application::build`].
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    pub database_url: String,
    pub listen: SocketAddr,
    /// A served strategy: every [`StrategyName`] is safe under concurrency (the lab-only naive
    /// ones are not even nameable here).
    pub strategy: StrategyName,
    /// How the ledger moves money: `ordered` (one transaction each) or `batched` (the ledger
    /// engine, for hot accounts).
    pub transfer_strategy: TransferStrategy,
    pub pool: PoolOptions,
    /// Lock and statement timeouts, retry policy of every transaction.
    pub tx: TxOptions,
    pub settings: RawSettings,
    pub sweep_every: Duration,
}

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("the database: {0}")]
    Database(#[from] saldo::Error),
    #[error("the metrics recorder: {0}")]
    Metrics(String),
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// What `Application::prepare` builds: the state, its pool and the tokens generated on the way.
type Prepared = (AppState, Pool, Vec<Generated>);

/// A service ready to serve: migrated, its listener bound.
pub struct Application {
    listener: TcpListener,
    local_addr: SocketAddr,
    state: AppState,
    pool: Pool,
    strategy: StrategyName,
    transfer_strategy: TransferStrategy,
    sweep_every: Duration,
    generated: Vec<Generated>,
}

impl Application {
    /// Validates the settings (generating and storing tokens where needed), connects, migrates,
    /// builds the strategy and binds the listener. Nothing is served yet.
    pub async fn build(config: ServiceConfig) -> Result<Application, StartupError> {
        let listener =
            crate::listener::bind(config.listen).map_err(|source| StartupError::Bind {
                addr: config.listen,
                source,
            })?;
        Self::build_on(config, listener).await
    }

    /// [`Application::build`] on a listener the caller bound (with [`crate::listener::bind`])
    /// before anything else, so that a port in use is reported before anything is created,
    /// migrated or printed. `config.listen` only names it in errors. Requests that arrive
    /// meanwhile are answered 503 `starting` at once ([`Starting`]).
    pub async fn build_on(
        config: ServiceConfig,
        listener: TcpListener,
    ) -> Result<Application, StartupError> {
        Self::build_while_starting(config, Starting::answer(listener)).await
    }

    /// [`Application::build_on`] for a caller that has been answering on its listener since it
    /// bound it (to cover what it does before building: starting a database, say).
    pub async fn build_while_starting(
        config: ServiceConfig,
        starting: Starting,
    ) -> Result<Application, StartupError> {
        let (listen, strategy, transfer_strategy, sweep_every) = (
            config.listen,
            config.strategy,
            config.transfer_strategy,
            config.sweep_every,
        );
        let built = Self::prepare(config).await;
        // Stopped whether or not the build succeeded: on failure the listener closes with it.
        let listener = starting.stop().await.map_err(|source| StartupError::Bind {
            addr: listen,
            source,
        })?;
        let (state, pool, generated) = built?;
        let local_addr = listener.local_addr().map_err(|source| StartupError::Bind {
            addr: listen,
            source,
        })?;
        Ok(Application {
            listener,
            local_addr,
            state,
            pool,
            strategy,
            transfer_strategy,
            sweep_every,
            generated,
        })
    }

    /// Validates the settings, connects, migrates, builds the strategy and the state.
    async fn prepare(config: ServiceConfig) -> Result<Prepared, StartupError> {
        let validated = config.settings.validate()?;
        let pool = db::connect(&config.database_url, &config.pool)?;
        let layout = db::migrate_to_serve(&pool).await?;
        let engine = stock::build(
            config.strategy,
            Store::new(pool.clone(), config.tx).with_layout(layout),
            &StrategyConfig::default(),
        );
        let prometheus = crate::metrics::install().map_err(StartupError::Metrics)?;
        let state = AppState::new(engine, validated.settings, prometheus)
            .with_transfer_strategy(config.transfer_strategy);
        Ok((state, pool, validated.generated))
    }

    /// The address actually bound (port 0 picks a free one).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn strategy(&self) -> StrategyName {
        self.strategy
    }

    pub fn transfer_strategy(&self) -> TransferStrategy {
        self.transfer_strategy
    }

    /// Tokens generated by this start: show each once, never log them.
    pub fn generated_tokens(&self) -> &[Generated] {
        &self.generated
    }

    /// False only when API authentication was explicitly disabled.
    pub fn api_auth_required(&self) -> bool {
        self.state.settings.credentials.api_required()
    }

    /// Serves until `shutdown` resolves, lets in-flight requests finish (bounded), stops the
    /// sweeper and closes the pool.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let served =
            crate::server::run(self.listener, self.state, self.sweep_every, shutdown).await;
        self.pool.close();
        served
    }
}
