//! `saldo serve`: the HTTP service. Flags (each also a `SALDO_*` environment variable) are
//! validated into the service's settings before anything listens; the sweeper runs in-process
//! and stops with the server on SIGINT/SIGTERM, after in-flight requests finish.
//!
//! Tokens: the admin and API tokens come from a token file (`--admin-token-file`, followed
//! while the service runs), the environment, a flag (visible in `ps`: warned about) or, by
//! default, from the token store in saldo's data directory (generated and printed once on
//! first start, stored hashed). Every start logs where each comes from and how to replace it,
//! never the token. API authentication is off only with `--insecure-no-api-token`, which is
//! logged as a warning.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use saldo::db::{self, PoolOptions};
use saldo::domain::{
    DEFAULT_MAX_HOLD_S, DEFAULT_TTL_S, MAX_MAX_HOLD_S, MAX_TRANSFER_TIMEOUT_S, MAX_TTL_S,
    MIN_MAX_HOLD_S, MIN_TRANSFER_TIMEOUT_S, MIN_TTL_S,
};
use saldo::ledger::TransferStrategy;
use saldo::retry::{self, RetryPolicy, TxOptions, MAX_ATTEMPTS_LIMIT};
use saldo::stock::StrategyName;
use saldo_http::config::{
    serving_strategy, ApiAuth, RawSettings, DEFAULT_REQUEST_TIMEOUT_MS, MAX_REQUEST_TIMEOUT_MS,
    MIN_REQUEST_TIMEOUT_MS,
};
use saldo_http::config::{
    DEFAULT_BODY_READ_TIMEOUT_MS, DEFAULT_HEADER_READ_TIMEOUT_MS, DEFAULT_IDLE_TIMEOUT_MS,
    MAX_CONNECTIONS_LIMIT, MAX_CONN_TIMEOUT_MS, MIN_CONN_TIMEOUT_MS,
};
use saldo_http::config::{
    DEFAULT_MAX_EVENT_STREAMS, MAX_EVENT_RETENTION_S, MAX_EVENT_STREAMS_LIMIT,
    MIN_EVENT_RETENTION_S,
};
use saldo_http::server::{MAX_SWEEP_INTERVAL_S, MIN_SWEEP_INTERVAL_S};
use saldo_http::starting::Starting;
use saldo_http::startup::{Application, ServiceConfig};
use saldo_http::tokens::{TokenKind, TokenStore};

use crate::commands::shared::Global;
use crate::database::{self, Database, Role};
use crate::duration;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on: IP:PORT, [IPv6]:PORT, :PORT (every IPv4 interface, a warning is
    /// logged) or HOST:PORT (resolved now; its first IPv4 address, else its first address).
    #[arg(long, env = "SALDO_LISTEN", default_value = "127.0.0.1:8080", value_parser = listen)]
    listen: SocketAddr,
    /// Stock strategy; only strategies safe under concurrency are accepted. `batched` is the
    /// default: level with `atomic` for a lone buyer, far ahead once buyers meet on a product
    /// (BENCHMARKS.md).
    #[arg(long, env = "SALDO_STRATEGY", default_value = "batched", value_parser = strategy)]
    strategy: StrategyName,
    /// Transfer strategy of the ledger (transfers, deposits, withdrawals, holds, posts, voids):
    /// `batched` (the default: the ledger engine, movements that meet on a hot account share one
    /// transaction; a lone one runs as `ordered`, so it is level with it at low load and far
    /// ahead on a hot account, BENCHMARKS.md) or `ordered` (one transaction each, accounts locked
    /// in id order).
    #[arg(long, env = "SALDO_TRANSFER_STRATEGY", default_value = "batched",
          value_parser = transfer_strategy)]
    transfer_strategy: TransferStrategy,
    /// Lifetime of a reservation whose request gives no `ttl_s` (seconds, or 90s, 15m, 2h).
    #[arg(long, env = "SALDO_RESERVATION_TTL_S", default_value_t = DEFAULT_TTL_S,
          value_parser = duration::secs(MIN_TTL_S, MAX_TTL_S))]
    reservation_ttl_s: u64,
    /// Life of a pending transfer (a hold) whose request gives no `timeout_s` (seconds, or 90s,
    /// 15m, 2h, 7days): 1 s to 30 days.
    #[arg(long, env = "SALDO_TRANSFER_TIMEOUT", default_value = "15m",
          value_parser = duration::secs(MIN_TRANSFER_TIMEOUT_S as u64,
                                        MAX_TRANSFER_TIMEOUT_S as u64))]
    transfer_timeout: u64,
    /// Longest a reservation may be held since it was made, extensions
    /// (`POST /v1/orders/{id}/extend`) included (seconds, or 90m, 24h, 2d).
    #[arg(long, env = "SALDO_MAX_HOLD", default_value_t = DEFAULT_MAX_HOLD_S,
          value_parser = duration::secs(MIN_MAX_HOLD_S, MAX_MAX_HOLD_S))]
    max_hold: u64,
    /// Time between sweeper rounds (seconds, or 30s, 5m).
    #[arg(long, env = "SALDO_SWEEP_INTERVAL_S", default_value_t = 30,
          value_parser = duration::secs(MIN_SWEEP_INTERVAL_S, MAX_SWEEP_INTERVAL_S))]
    sweep_interval_s: u64,
    /// Admin bearer token, overriding the stored one (not persisted). On the command line it
    /// is visible to every local user in `ps`: prefer --admin-token-file. When no token is given
    /// the stored one is used; on first start one is generated, stored hashed and printed once.
    #[arg(long, env = "SALDO_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// A file holding the admin token (one line; owned by this user, mode 0600 or stricter),
    /// overriding the stored one; re-read within a second when it changes.
    #[arg(
        long,
        env = "SALDO_ADMIN_TOKEN_FILE",
        value_name = "PATH",
        conflicts_with = "admin_token"
    )]
    admin_token_file: Option<PathBuf>,
    /// Bearer token of every non-admin /v1 route (reads included), overriding the stored one
    /// (not persisted). On the command line it is visible in `ps`: prefer --api-token-file.
    /// When no token is given the stored one is used; on first start one is generated, stored
    /// hashed and printed once. `saldo token rotate api` replaces it.
    #[arg(long, env = "SALDO_API_TOKEN", hide_env_values = true)]
    api_token: Option<String>,
    /// A file holding the API token (one line; owned by this user, mode 0600 or stricter),
    /// overriding the stored one; re-read within a second when it changes.
    #[arg(
        long,
        env = "SALDO_API_TOKEN_FILE",
        value_name = "PATH",
        conflicts_with = "api_token"
    )]
    api_token_file: Option<PathBuf>,
    /// Serve the non-admin /v1 routes WITHOUT authentication: anyone who reaches the port may
    /// reserve stock and move money. Logged as a warning at start.
    #[arg(long, env = "SALDO_INSECURE_NO_API_TOKEN",
          value_parser = clap::builder::BoolishValueParser::new(),
          action = clap::ArgAction::SetTrue)]
    insecure_no_api_token: bool,
    /// Whole-request timeout.
    #[arg(long, env = "SALDO_REQUEST_TIMEOUT_MS", default_value_t = DEFAULT_REQUEST_TIMEOUT_MS,
          value_parser = duration::millis(MIN_REQUEST_TIMEOUT_MS, MAX_REQUEST_TIMEOUT_MS))]
    request_timeout_ms: u64,
    /// Database connections at most.
    #[arg(long, env = "SALDO_POOL_SIZE", default_value_t = db::DEFAULT_POOL_SIZE as u64,
          value_parser = clap::value_parser!(u64).range(1..=1_000))]
    pool_size: u64,
    /// How long a request waits for a free connection.
    #[arg(long, env = "SALDO_POOL_WAIT_TIMEOUT_MS", default_value_t = db::DEFAULT_POOL_WAIT_TIMEOUT_MS,
          value_parser = duration::millis(1, 600_000))]
    pool_wait_timeout_ms: u64,
    /// How long opening a connection may take.
    #[arg(long, env = "SALDO_POOL_CREATE_TIMEOUT_MS", default_value_t = db::DEFAULT_POOL_CREATE_TIMEOUT_MS,
          value_parser = duration::millis(1, 600_000))]
    pool_create_timeout_ms: u64,
    /// How long checking a returned connection may take.
    #[arg(long, env = "SALDO_POOL_RECYCLE_TIMEOUT_MS", default_value_t = db::DEFAULT_POOL_RECYCLE_TIMEOUT_MS,
          value_parser = duration::millis(1, 600_000))]
    pool_recycle_timeout_ms: u64,
    /// `SET LOCAL lock_timeout` of every transaction.
    #[arg(long, env = "SALDO_LOCK_TIMEOUT_MS", default_value_t = retry::DEFAULT_LOCK_TIMEOUT_MS,
          value_parser = duration::millis(1, retry::MAX_TIMEOUT_MS))]
    lock_timeout_ms: u64,
    /// `SET LOCAL statement_timeout` of every transaction.
    #[arg(long, env = "SALDO_STATEMENT_TIMEOUT_MS", default_value_t = retry::DEFAULT_STATEMENT_TIMEOUT_MS,
          value_parser = duration::millis(1, retry::MAX_TIMEOUT_MS))]
    statement_timeout_ms: u64,
    /// Attempts of a transaction that hits a deadlock or serialization failure (first included).
    #[arg(long, env = "SALDO_RETRY_ATTEMPTS", default_value_t = retry::DEFAULT_MAX_ATTEMPTS,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_ATTEMPTS_LIMIT)))]
    retry_attempts: u32,
    /// Time a request's headers may take, from its first byte (from the accept for a new
    /// connection); past it the connection is closed.
    #[arg(long, env = "SALDO_HEADER_READ_TIMEOUT_MS", default_value_t = DEFAULT_HEADER_READ_TIMEOUT_MS,
          value_parser = duration::millis(MIN_CONN_TIMEOUT_MS, MAX_CONN_TIMEOUT_MS))]
    header_read_timeout_ms: u64,
    /// Time a connection with no request in flight stays open.
    #[arg(long, env = "SALDO_IDLE_TIMEOUT_MS", default_value_t = DEFAULT_IDLE_TIMEOUT_MS,
          value_parser = duration::millis(MIN_CONN_TIMEOUT_MS, MAX_CONN_TIMEOUT_MS))]
    idle_timeout_ms: u64,
    /// Time a request's body may take after its headers; then 408.
    #[arg(long, env = "SALDO_BODY_READ_TIMEOUT_MS", default_value_t = DEFAULT_BODY_READ_TIMEOUT_MS,
          value_parser = duration::millis(MIN_CONN_TIMEOUT_MS, MAX_CONN_TIMEOUT_MS))]
    body_read_timeout_ms: u64,
    /// Open connections at most; by default (and at most) the RLIMIT_NOFILE soft limit minus a
    /// reserve for the pool and the process's files. At the cap the longest-idle connections
    /// are closed to make room.
    #[arg(long, env = "SALDO_MAX_CONNECTIONS",
          value_parser = clap::value_parser!(u64).range(1..=MAX_CONNECTIONS_LIMIT))]
    max_connections: Option<u64>,
    /// Event streams (GET /v1/events/stream) open at once; one more is answered 503
    /// `too-many-streams` with Retry-After.
    #[arg(long, env = "SALDO_MAX_EVENT_STREAMS", default_value_t = DEFAULT_MAX_EVENT_STREAMS,
          value_parser = clap::value_parser!(u64).range(1..=MAX_EVENT_STREAMS_LIMIT))]
    max_event_streams: u64,
    /// How long the event feed keeps events (7days, 12h, 30m; 1 minute to 365 days); a cursor
    /// older than that is answered 410 `cursor-expired`.
    #[arg(long, env = "SALDO_EVENT_RETENTION", default_value = "7days",
          value_parser = duration::secs(MIN_EVENT_RETENTION_S, MAX_EVENT_RETENTION_S))]
    event_retention: u64,
    /// Let webhooks target loopback, private, link-local and unspecified addresses (refused by
    /// default, at registration and at every connection).
    #[arg(long, env = "SALDO_WEBHOOK_ALLOW_PRIVATE_TARGETS",
          value_parser = clap::builder::BoolishValueParser::new(),
          action = clap::ArgAction::SetTrue)]
    webhook_allow_private_targets: bool,
    /// Ceiling of a webhook's first retry wait (full jitter, doubling per attempt, capped at
    /// 5 minutes).
    #[arg(long, env = "SALDO_WEBHOOK_BACKOFF_BASE_MS",
          default_value_t = saldo_http::webhooks::settings::DEFAULT_BACKOFF_BASE_MS,
          value_parser = clap::value_parser!(u64).range(
              saldo_http::webhooks::settings::MIN_BACKOFF_BASE_MS
                  ..=saldo_http::webhooks::settings::MAX_BACKOFF_BASE_MS))]
    webhook_backoff_base_ms: u64,
    /// Attempts of one webhook batch before its subscription turns `failing` (resume it).
    #[arg(long, env = "SALDO_WEBHOOK_MAX_ATTEMPTS",
          default_value_t = saldo_http::webhooks::settings::DEFAULT_MAX_ATTEMPTS,
          value_parser = clap::value_parser!(u32).range(
              1..=i64::from(saldo_http::webhooks::settings::MAX_MAX_ATTEMPTS)))]
    webhook_max_attempts: u32,
    // Last, so the help's order is unchanged. Not a flag of saldo's: people coming from other servers type it, and clap alone
    // suggested `--pool-create-timeout-ms`. Hidden, and refused by its parser pointing at
    // --listen (a bare `--port` reads as PORT).
    #[arg(long = "port", hide = true, num_args = 0..=1, default_missing_value = "PORT",
          value_parser = no_port)]
    _port: Option<String>,
}

/// Flag parser of `--listen`: a URL is refused naming the address to give instead (the
/// address parser alone took `http:` for an IPv6 address without brackets); anything else is
/// `saldo_http::config::parse_listen`'s.
fn listen(raw: &str) -> Result<SocketAddr, String> {
    if let Some((scheme, rest)) = raw.trim().split_once("://") {
        let address = rest.split('/').next().unwrap_or(rest);
        return Err(format!(
            "{raw:?} is a URL: drop its scheme ({scheme}://) and give the address, e.g. \
             --listen {address}"
        ));
    }
    saldo_http::config::parse_listen(raw)
}

/// Flag parser of the hidden `--port`: always refused, pointing at `--listen`.
fn no_port(raw: &str) -> Result<String, String> {
    Err(format!(
        "saldo serve has no --port: give the address to listen on, e.g. --listen 127.0.0.1:{raw}"
    ))
}

/// Flag parser: unknown and lab-only strategies are refused before anything starts.
fn strategy(s: &str) -> Result<StrategyName, String> {
    serving_strategy(s).map_err(|e| e.to_string())
}

/// A `saldo serve` whose every setting was checked and whose listener is bound: what is left
/// can fail only on the database or the token store.
pub struct Prepared {
    args: Args,
    listener: tokio::net::TcpListener,
    /// Where the admin and the API token come from, as the user gave them.
    origins: [TokenOrigin; 2],
}

/// Where one kind's token comes from, for the start-up line.
#[derive(Debug, Clone)]
enum TokenOrigin {
    /// `--admin-token` on the command line (visible in `ps`).
    Flag(&'static str),
    /// `SALDO_ADMIN_TOKEN`.
    Env(&'static str),
    /// `--admin-token-file` or `SALDO_ADMIN_TOKEN_FILE`: the name used, and the path.
    File(&'static str, PathBuf),
    /// The token store (generated on first start).
    Stored,
    /// `--insecure-no-api-token`.
    Disabled,
}

impl TokenOrigin {
    /// How `kind`'s token is given, as `matches` says.
    fn of(matches: &clap::ArgMatches, args: &Args, kind: TokenKind) -> TokenOrigin {
        let (value_id, file_id, flag, file_flag, file) = match kind {
            TokenKind::Admin => (
                "admin_token",
                "admin_token_file",
                "--admin-token",
                "--admin-token-file",
                &args.admin_token_file,
            ),
            TokenKind::Api => (
                "api_token",
                "api_token_file",
                "--api-token",
                "--api-token-file",
                &args.api_token_file,
            ),
        };
        if kind == TokenKind::Api && args.insecure_no_api_token {
            return TokenOrigin::Disabled;
        }
        if let Some(path) = file {
            let name = given_as(matches, file_id, file_flag, kind.file_env_var());
            return TokenOrigin::File(name, path.clone());
        }
        match matches.value_source(value_id) {
            Some(clap::parser::ValueSource::EnvVariable) => TokenOrigin::Env(kind.env_var()),
            Some(_) => TokenOrigin::Flag(flag),
            None => TokenOrigin::Stored,
        }
    }

    /// Where the token comes from and how to replace it (never the token).
    fn describe(&self, kind: TokenKind, store: &Path) -> String {
        match self {
            TokenOrigin::Flag(flag) => format!(
                "{kind} from {flag} (visible in `ps`; give --{kind}-token-file PATH instead)"
            ),
            TokenOrigin::Env(var) => {
                format!("{kind} from {var} (not stored; change it and restart to replace it)")
            }
            TokenOrigin::File(name, path) => format!(
                "{kind} from {name}={} (write a new token into the file to replace it)",
                path.display()
            ),
            TokenOrigin::Stored => format!(
                "{kind} stored hashed in {}; `saldo token rotate {kind}` prints a new one",
                store.display()
            ),
            TokenOrigin::Disabled => {
                format!("{kind}: none, API authentication disabled (--insecure-no-api-token)")
            }
        }
    }
}

/// The name the user gave `id` by: its flag, or its environment variable.
fn given_as(
    matches: &clap::ArgMatches,
    id: &str,
    flag: &'static str,
    var: &'static str,
) -> &'static str {
    match matches.value_source(id) {
        Some(clap::parser::ValueSource::EnvVariable) => var,
        _ => flag,
    }
}

impl Prepared {
    /// Validates the tokens (naming the flag or variable they came from) and binds the listen
    /// address, keeping the socket: nothing is created, started or printed yet.
    pub fn new(args: Args, matches: &clap::ArgMatches) -> Result<Prepared> {
        for (id, raw, flag, var) in [
            (
                "admin_token",
                &args.admin_token,
                "--admin-token",
                "SALDO_ADMIN_TOKEN",
            ),
            (
                "api_token",
                &args.api_token,
                "--api-token",
                "SALDO_API_TOKEN",
            ),
        ] {
            if let Some(raw) = raw {
                saldo_http::tokens::Token::new(given_as(matches, id, flag, var), raw.clone())?;
            }
        }
        let origins = [
            TokenOrigin::of(matches, &args, TokenKind::Admin),
            TokenOrigin::of(matches, &args, TokenKind::Api),
        ];
        for origin in &origins {
            if let TokenOrigin::File(name, path) = origin {
                // Read now too, so a bad file is refused before anything is created.
                saldo_http::tokens::read_token_file(name, path)?;
            }
        }
        if args.insecure_no_api_token && (args.api_token.is_some() || args.api_token_file.is_some())
        {
            let (id, flag, var) = if args.api_token_file.is_some() {
                ("api_token_file", "--api-token-file", "SALDO_API_TOKEN_FILE")
            } else {
                ("api_token", "--api-token", "SALDO_API_TOKEN")
            };
            anyhow::bail!(
                "{} is given and {} disables API authentication: choose one",
                given_as(matches, id, flag, var),
                given_as(
                    matches,
                    "insecure_no_api_token",
                    "--insecure-no-api-token",
                    "SALDO_INSECURE_NO_API_TOKEN"
                ),
            );
        }
        let listen_name = given_as(matches, "listen", "--listen", "SALDO_LISTEN");
        let listener = saldo_http::listener::bind(args.listen)
            .with_context(|| format!("{listen_name} {}: cannot listen there", args.listen))?;
        Ok(Prepared {
            args,
            listener,
            origins,
        })
    }
}

/// One line saying where each token comes from and how to replace it (never a token), and a
/// warning for each token given on the command line.
fn log_token_origins(origins: &[TokenOrigin; 2], token_dir: &Path) {
    let store = TokenStore::new(token_dir).path();
    let [admin, api] = origins;
    for (origin, kind) in [(admin, TokenKind::Admin), (api, TokenKind::Api)] {
        if let TokenOrigin::Flag(flag) = origin {
            tracing::warn!(
                "{flag} is visible to every local user in `ps` and in shell history: write the \
                 token into a file only this user can read (chmod 600) and give \
                 --{kind}-token-file PATH (or {}) instead",
                kind.file_env_var()
            );
        }
    }
    let line = if matches!((admin, api), (TokenOrigin::Stored, TokenOrigin::Stored)) {
        format!(
            "tokens: stored hashed in {}; `saldo token rotate admin|api` prints new ones",
            store.display()
        )
    } else {
        format!(
            "tokens: {}; {}",
            admin.describe(TokenKind::Admin, &store),
            api.describe(TokenKind::Api, &store)
        )
    };
    tracing::info!("{line}");
}

/// Flag parser: the served transfer strategies only (the lab's naive one is not among them).
fn transfer_strategy(s: &str) -> Result<TransferStrategy, String> {
    TransferStrategy::parse(s).ok_or_else(|| {
        let known: Vec<&str> = TransferStrategy::ALL.iter().map(|t| t.as_str()).collect();
        format!(
            "unknown transfer strategy {s:?}; known: {}",
            known.join(", ")
        )
    })
}

/// `saldo serve`: every setting checked and the listener bound before the data directory is
/// created, the cluster started or a token printed; then the service until Ctrl-C or SIGTERM.
pub async fn run(args: Args, matches: &clap::ArgMatches, global: Global) -> Result<ExitCode> {
    let Prepared {
        args,
        listener,
        origins,
    } = Prepared::new(args, matches)?;
    // From here on a request is answered at once (503 `starting`, with Retry-After) while the
    // database starts and migrates, instead of waiting in the kernel's backlog.
    let prepared = Started {
        args,
        starting: Starting::answer(listener),
        origins,
    };
    let data_dir = global.embedded.data_dir.clone();
    let database = match global.citus_workers {
        Some(workers) => {
            anyhow::ensure!(
                global.database_url.is_none(),
                "--citus-workers and --database-url: serve runs on one of them (a Citus \
                 coordinator's URL is enough for an existing cluster)"
            );
            database::citus_database(database::start_citus(workers, None).await?)
        }
        None => database::open_with(global.database_url, global.embedded, Role::Owner).await?,
    };
    // The service migrates through its own pool: `--pool-size N` is N connections in all.
    serve(prepared, &database, data_dir.as_deref()).await?;
    Ok(ExitCode::SUCCESS)
}

/// The service's configuration from the checked flags.
fn service_config(args: &Args, database: &Database, token_dir: PathBuf) -> Result<ServiceConfig> {
    Ok(ServiceConfig {
        database_url: database.url.clone(),
        listen: args.listen,
        strategy: args.strategy,
        transfer_strategy: args.transfer_strategy,
        pool: PoolOptions {
            max_size: usize::try_from(args.pool_size)?,
            wait_timeout_ms: args.pool_wait_timeout_ms,
            create_timeout_ms: args.pool_create_timeout_ms,
            recycle_timeout_ms: args.pool_recycle_timeout_ms,
        },
        tx: TxOptions::default()
            .with_lock_timeout_ms(args.lock_timeout_ms)
            .with_statement_timeout_ms(args.statement_timeout_ms)
            .with_retry(RetryPolicy::default().with_max_attempts(args.retry_attempts)),
        settings: RawSettings {
            admin_token: args.admin_token.clone(),
            api_token: args.api_token.clone(),
            admin_token_file: args.admin_token_file.clone(),
            api_token_file: args.api_token_file.clone(),
            api_auth: if args.insecure_no_api_token {
                ApiAuth::Disabled
            } else {
                ApiAuth::Required
            },
            token_dir: Some(token_dir),
            reservation_ttl_s: args.reservation_ttl_s,
            transfer_timeout_s: args.transfer_timeout,
            max_hold_s: args.max_hold,
            request_timeout_ms: args.request_timeout_ms,
            header_read_timeout_ms: args.header_read_timeout_ms,
            idle_timeout_ms: args.idle_timeout_ms,
            body_read_timeout_ms: args.body_read_timeout_ms,
            max_connections: args.max_connections,
            max_event_streams: args.max_event_streams,
            event_retention_s: args.event_retention,
            webhook_allow_private_targets: args.webhook_allow_private_targets,
            webhook_backoff_base_ms: args.webhook_backoff_base_ms,
            webhook_max_attempts: args.webhook_max_attempts,
            ..RawSettings::default()
        },
        sweep_every: Duration::from_secs(args.sweep_interval_s),
    })
}

/// Serves until Ctrl-C or SIGTERM; `data_dir` is `--data-dir` (the token store lives there).
/// The checked flags, with the listener answering "starting" meanwhile.
struct Started {
    args: Args,
    starting: Starting,
    origins: [TokenOrigin; 2],
}

async fn serve(prepared: Started, database: &Database, data_dir: Option<&Path>) -> Result<()> {
    let Started {
        args,
        starting,
        origins,
    } = prepared;
    let token_dir = database::try_state_dir(data_dir)?;
    log_token_origins(&origins, &token_dir);
    let config = service_config(&args, database, token_dir.clone())?;
    let app = Application::build_while_starting(config, starting)
        .await
        .context("starting the service")?;
    // The only place a generated token is ever shown: stdout, once, never the log.
    for g in app.generated_tokens() {
        println!(
            "{kind} token (generated, shown once; stored hashed in {dir}; `saldo token rotate \
             {kind}` replaces it): {token}",
            kind = g.kind,
            dir = token_dir.display(),
            token = g.token.expose(),
        );
    }
    warn_if_exposed(&app, &args);
    // Installed before the line below announces the service: a Ctrl-C right after it is a
    // graceful stop, not the default kill.
    let shutdown = saldo_http::server::shutdown_signal();
    println!(
        "saldo listening on http://{} (strategy {}, transfers {}, sweeping every {}s); Ctrl-C \
         to stop",
        app.local_addr(),
        app.strategy(),
        app.transfer_strategy(),
        args.sweep_interval_s
    );
    // An embedded PostgreSQL that dies is restarted; one that cannot be kept up ends the
    // service with an error (exit status 1) rather than leaving it up and useless.
    tokio::select! {
        served = app.run_until(shutdown) => served?,
        gave_up = crate::supervise::watch(database) => return Err(gave_up),
    }
    println!("stopped");
    Ok(())
}

/// The warnings of a service others can reach, or reach without a token: once, at start.
fn warn_if_exposed(app: &Application, args: &Args) {
    if !app.local_addr().ip().is_loopback() {
        // `:8080` means every interface, as in Go and nginx: say so.
        tracing::warn!(
            listen = %app.local_addr(),
            api_auth = app.api_auth_required(),
            "listening on a non-loopback address: other machines can reach this service (every \
             /v1 route still needs its bearer token unless --insecure-no-api-token)"
        );
    }
    if !app.api_auth_required() {
        tracing::warn!(
            listen = %args.listen,
            "API AUTHENTICATION DISABLED (--insecure-no-api-token): anyone who can reach this \
             address can reserve stock, confirm orders and move money"
        );
    }
}

#[cfg(test)]
mod event_flag_tests {
    use super::*;

    /// `--event-retention`'s parser: whole seconds, one minute to a year.
    fn retention(raw: &str) -> Result<u64, String> {
        duration::secs(MIN_EVENT_RETENTION_S, MAX_EVENT_RETENTION_S)(raw)
    }

    #[test]
    fn retention_is_a_minute_to_a_year() {
        assert_eq!(retention("7days"), Ok(7 * 86_400));
        assert_eq!(retention("1m"), Ok(60));
        assert_eq!(retention("365days"), Ok(365 * 86_400));
        assert!(retention("59s").is_err());
        assert!(retention("366days").is_err());
        assert!(retention("1.5s").is_err());
    }
}

#[cfg(test)]
mod transfer_timeout_tests {
    use super::*;

    /// `--transfer-timeout`'s parser: whole seconds within the hold limits.
    fn transfer_timeout(raw: &str) -> Result<u64, String> {
        duration::secs(
            u64::from(MIN_TRANSFER_TIMEOUT_S),
            u64::from(MAX_TRANSFER_TIMEOUT_S),
        )(raw)
    }

    #[test]
    fn whole_seconds_within_thirty_days() {
        assert_eq!(transfer_timeout("15m"), Ok(900));
        assert_eq!(transfer_timeout("30days"), Ok(2_592_000));
        assert!(transfer_timeout("31days").is_err());
        assert!(transfer_timeout("0s").is_err());
        assert!(transfer_timeout("1500ms").is_err());
        assert!(transfer_timeout("soon").is_err());
    }
}
