//! The `saldo` command: glue between flags and the library. Each subcommand parses its flags
//! into typed options and validates every one of them before anything is started, created or
//! printed; then it opens its database (`database.rs`) and calls one library operation. A
//! failure is printed as one line per cause (`errors.rs`), exit status 1.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use saldo::db::{self, PoolOptions};
use saldo::retry::TxOptions;
use saldo::stock::{sweeper, Store};

mod bench;
mod database;
mod duration;
mod errors;
mod locks;
mod logging;
mod race;
mod serve;
mod supervise;
mod token;
use database::{EmbeddedOptions, Role};
use saldo_lab::scratch::Server;

/// deadlock_timeout of the local Citus cluster `race --citus-workers` starts: the lab's
/// deadlocks are on purpose, and only their detection matters (the single node's scratch
/// database gets the same through `ALTER DATABASE`).
const CITUS_RACE_DEADLOCK_TIMEOUT: &str = "100ms";

#[derive(Parser)]
#[command(
    name = "saldo",
    version,
    about = "Sell the last unit exactly once, on PostgreSQL",
    after_help = "Durations take units (500ms, 10s, 15m, 1h) or a plain number in the flag's \
                  unit (_s: seconds, _ms: milliseconds). Errors print one line per cause; \
                  SALDO_BACKTRACE=1 adds the backtrace."
)]
struct Cli {
    /// PostgreSQL URL; absent → the embedded cluster in --data-dir (server binaries from
    /// PG_BIN, else `pg_config --bindir`, else the newest /usr/lib/postgresql/*/bin).
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    database_url: Option<String>,
    /// saldo's data directory: the embedded PostgreSQL, its password, the service's tokens.
    /// Default: /var/lib/saldo as root, else $XDG_DATA_HOME/saldo or ~/.local/share/saldo.
    #[arg(long, env = "SALDO_DATA_DIR", global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Let the embedded PostgreSQL also listen on 127.0.0.1 (a free port; the password is still
    /// required). Off by default: only its private Unix socket.
    #[arg(long, env = "SALDO_EMBEDDED_TCP", global = true)]
    embedded_tcp: bool,
    /// Let the embedded PostgreSQL listen on 127.0.0.1 at this fixed port (implies
    /// --embedded-tcp; the password is still required).
    #[arg(long, env = "SALDO_EMBEDDED_PORT", global = true,
          value_parser = clap::value_parser!(u16).range(1..))]
    embedded_port: Option<u16>,
    /// Start a local Citus cluster (a coordinator and N workers on 127.0.0.1, ephemeral) from
    /// Citus-enabled binaries (SALDO_CITUS_PG_BIN, or the usual places): `serve` runs on it,
    /// `race` races on it, `bench` measures it beside the single node. 1 ..= 8.
    #[arg(long, env = "SALDO_CITUS_WORKERS", global = true, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=database::MAX_CITUS_WORKERS as u64))]
    citus_workers: Option<u64>,
    /// Log format on stderr: `text` (coloured only on a terminal, never with NO_COLOR set) or
    /// `json` (one object per line). RUST_LOG filters either.
    #[arg(long, env = "SALDO_LOG_FORMAT", global = true, value_enum,
          default_value_t = logging::LogFormat::Text)]
    log_format: logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the database (embedded by default), migrate it, and sweep expired reservations and
    /// holds every `--sweep-interval-s` until Ctrl-C. Other saldo commands attach to its cluster.
    Db {
        /// Time between sweeper rounds (plain number: seconds; or 30s, 5m), 1 s ..= 1 h.
        #[arg(long, env = "SALDO_SWEEP_INTERVAL_S", default_value_t = 30,
              value_parser = duration::secs(1, 3600))]
        sweep_interval_s: u64,
    },
    /// Apply the migrations and exit (on the running serve/db's cluster when there is one). On
    /// a Citus coordinator (the `citus` extension installed) the schema is laid out distributed.
    Migrate {
        /// Require the distributed (Citus) layout: refused unless the database has the Citus
        /// extension (without it, the layout follows the database).
        #[arg(long)]
        citus: bool,
    },
    /// Run the divergence audits (stock and ledger); exits 1 when anything diverges.
    /// `--repair` prints what it would change per divergent product; `--repair --apply`
    /// changes it (products that change meanwhile are left alone) and audits again. On a
    /// Citus coordinator: per shard and per transfer, read-only, without `--repair`.
    Audit {
        /// Print, per divergent product, what a repair would write (nothing is written).
        #[arg(long)]
        repair: bool,
        /// With --repair: write it (a `repair: …` movement per product) and re-audit.
        #[arg(long, requires = "repair")]
        apply: bool,
    },
    /// Expire due reservations and pending transfers once (bounded batches) and print how many.
    Sweep,
    /// Rerun a seed's race against strategies side by side and check every invariant.
    Race(race::Args),
    /// Run the HTTP service (embedded PostgreSQL when no URL is given).
    Serve(serve::Args),
    /// Show sessions waiting on locks, who blocks them and for how long.
    Locks(locks::Args),
    /// Measure strategies side by side on a scratch database; exits 1 if an invariant breaks.
    Bench(bench::Args),
    /// Rotate or list the service's stored bearer tokens (in the saldo data directory).
    Token(token::Args),
}

fn main() -> ExitCode {
    let with_backtrace = errors::backtrace_requested();
    if with_backtrace && std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // Before any thread exists: anyhow captures a backtrace only when told to.
        std::env::set_var("RUST_LIB_BACKTRACE", "1");
    }
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprint!("{}", errors::render(&e, with_backtrace));
            ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn run() -> Result<ExitCode> {
    let matches = Cli::command().try_get_matches().unwrap_or_else(|e| {
        let note = errors::env_source_note(&e, &Cli::command());
        let _ = e.print();
        if let Some(note) = note {
            eprintln!("{note}");
        }
        std::process::exit(e.exit_code())
    });
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // The race lab provokes CHECK violations and deadlocks on purpose: do not log each one.
    let default_filter = match cli.command {
        Command::Race(_) => "warn,saldo::telemetry=off",
        _ => logging::DEFAULT_FILTER,
    };
    logging::init(cli.log_format, default_filter);
    let embedded = EmbeddedOptions {
        data_dir: cli.data_dir,
        tcp: cli.embedded_tcp,
        port: cli.embedded_port,
    };
    // Bounded by the parser (1 ..= MAX_CITUS_WORKERS).
    let citus_workers = cli.citus_workers.map(|n| n as usize);
    if citus_workers.is_some()
        && !matches!(
            cli.command,
            Command::Serve(_) | Command::Race(_) | Command::Bench(_)
        )
    {
        anyhow::bail!(
            "--citus-workers starts a local Citus cluster for serve, race and bench only; give \
             other commands a Citus coordinator with --database-url"
        );
    }
    if let Command::Token(args) = cli.command {
        // Tokens live in saldo's data directory, not in the database: nothing to start.
        token::run(
            args,
            &database::try_state_dir(embedded.data_dir.as_deref())?,
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Command::Bench(args) = cli.command {
        let config = bench::Config::from_args(args)?;
        // HTTP mode talks only to a running service: no database of its own to start. Otherwise
        // the bench works in a scratch database it creates and drops: the one named by the URL
        // is never migrated or written.
        anyhow::ensure!(
            !(config.is_http() && citus_workers.is_some()),
            "--citus-workers with --target: the HTTP bench measures the service it is pointed \
             at (start that one with `saldo serve --citus-workers N`)"
        );
        let database = if config.is_http() {
            None
        } else {
            Some(database::open_with(cli.database_url, embedded, Role::Tool).await?)
        };
        // With --citus-workers: the single node and the local Citus cluster, side by side.
        let mut servers: Vec<Server> = database
            .as_ref()
            .map(|d| Server::from(d.url.as_str()))
            .into_iter()
            .collect();
        if let Some(workers) = citus_workers {
            servers.push(Server::Citus(database::start_citus(workers, None).await?));
        }
        anyhow::ensure!(
            bench::run(config, &servers).await?,
            "bench: an invariant broke (see above)"
        );
        return Ok(ExitCode::SUCCESS);
    }
    if let Command::Race(args) = cli.command {
        // Same for the lab: only its scratch database is touched.
        let config = race::Config::from_args(&args)?;
        if let Some(workers) = citus_workers {
            anyhow::ensure!(
                cli.database_url.is_none(),
                "--citus-workers and --database-url: the race runs on one of them"
            );
            let cluster = database::start_citus(workers, Some(CITUS_RACE_DEADLOCK_TIMEOUT)).await?;
            race::run(config, Server::Citus(cluster)).await?;
        } else {
            let database = database::open_with(cli.database_url, embedded, Role::Tool).await?;
            race::run(config, Server::from(database.url.as_str())).await?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Command::Serve(args) = cli.command {
        // Every setting checked and the listener bound before the data directory is created,
        // the cluster started or a token printed.
        let serve_matches = matches
            .subcommand_matches("serve")
            .context("serve: its arguments")?;
        let prepared = serve::Prepared::new(args, serve_matches)?;
        let data_dir = embedded.data_dir.clone();
        let database = match citus_workers {
            Some(workers) => {
                anyhow::ensure!(
                    cli.database_url.is_none(),
                    "--citus-workers and --database-url: serve runs on one of them (a Citus \
                     coordinator's URL is enough for an existing cluster)"
                );
                database::citus_database(database::start_citus(workers, None).await?)
            }
            None => database::open_with(cli.database_url, embedded, Role::Owner).await?,
        };
        // The service migrates through its own pool: `--pool-size N` is N connections in all.
        serve::run(prepared, &database, data_dir.as_deref()).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let role = if matches!(cli.command, Command::Db { .. }) {
        Role::Owner
    } else {
        Role::Tool
    };
    let database = database::open_with(cli.database_url, embedded, role).await?;
    let pool = db::connect(&database.url, &PoolOptions::default())?;
    if let Command::Migrate { citus } = cli.command {
        let layout = if citus {
            db::migrate_as(&pool, db::Layout::Citus)
                .await
                .map(|()| db::Layout::Citus)
        } else {
            db::migrate(&pool).await
        };
        let layout = layout.context("migrating the database")?;
        println!("migrations applied ({} layout)", layout.as_str());
        return Ok(ExitCode::SUCCESS);
    }
    // Only `db` migrates; the tools that look (and sweep, repair) refuse a schema not theirs.
    let layout = match cli.command {
        Command::Db { .. } => db::migrate_to_serve(&pool)
            .await
            .context("migrating the database")?,
        _ => database::schema_as_built(&pool).await?,
    };
    if let (Command::Audit { repair: false, .. }, db::Layout::Citus) = (&cli.command, layout) {
        return citus_audit_exit(&pool).await;
    }
    let store = Store::new(pool.clone(), TxOptions::default()).with_layout(layout);
    match cli.command {
        // Returned above.
        Command::Migrate { .. } => {}
        // Returned above, before the migration.
        Command::Race(_) | Command::Bench(_) | Command::Serve(_) | Command::Token(_) => {}
        Command::Sweep => {
            let expired = sweeper::sweep(&store).await?;
            let holds = saldo::ledger::Ledger::new(store.clone())
                .expire_due()
                .await?;
            println!("expired {expired} reservations and {holds} pending transfers");
        }
        Command::Locks(args) => locks::run(args, &pool).await?,
        Command::Audit { repair, apply } => {
            if repair && !print_repair(&store, apply).await? {
                pool.close();
                return Ok(ExitCode::FAILURE);
            }
            if store.is_citus() {
                return citus_audit_exit(&pool).await;
            }
            let stock = saldo::audit::audit_stock(&pool).await?;
            let ledger = saldo::audit::audit_ledger(&pool).await?;
            print_divergences(&stock, &ledger);
            if !stock.is_empty() || !ledger.is_empty() {
                pool.close();
                return Ok(ExitCode::FAILURE);
            }
            println!("audit clean: every product matches its history");
            println!(
                "audit clean: balances sum to zero, every account matches its journal, every \
                 held and pending credit matches the live pending transfers"
            );
        }
        Command::Db { sweep_interval_s } => {
            println!("saldo database ready at {}", database.shown_url);
            println!("sweeping every {sweep_interval_s}s; Ctrl-C to stop");
            let mut tick = tokio::time::interval(Duration::from_secs(sweep_interval_s));
            // One watcher for the whole loop: it counts restarts across ticks.
            let watch = supervise::watch(&database);
            tokio::pin!(watch);
            loop {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => break,
                    gave_up = &mut watch => return Err(gave_up),
                    _ = tick.tick() => {
                        match sweeper::sweep(&store).await {
                            Ok(0) => {}
                            Ok(n) => tracing::info!(expired = n, "sweep"),
                            Err(e) => tracing::warn!(error = %e, "sweep failed"),
                        }
                        match saldo::ledger::Ledger::new(store.clone()).expire_due().await {
                            Ok(0) => {}
                            Ok(n) => tracing::info!(expired_transfers = n, "sweep holds"),
                            Err(e) => tracing::warn!(error = %e, "sweep of holds failed"),
                        }
                    }
                }
            }
            println!("stopping");
        }
    }
    pool.close();
    Ok(ExitCode::SUCCESS)
}

/// One line per stock and per ledger divergence (both layouts' audits).
fn print_divergences(
    stock: &[saldo::audit::Divergence],
    ledger: &[saldo::audit::LedgerDivergence],
) {
    for d in stock {
        println!(
            "product {} {:?}: expected {} actual {}",
            d.product_id, d.invariant, d.expected, d.actual
        );
    }
    for d in ledger {
        let account = d.account.map_or("all".to_owned(), |a| a.to_string());
        println!(
            "account {account} {:?}: expected {} actual {}",
            d.invariant, d.expected, d.actual
        );
    }
}

/// [`citus_audit`], then the pool closed and the exit status: failure unless clean.
async fn citus_audit_exit(pool: &deadpool_postgres::Pool) -> anyhow::Result<ExitCode> {
    let clean = citus_audit(pool).await?;
    pool.close();
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `saldo audit` on a Citus coordinator ([`saldo::audit::citus`]): one line per divergence and
/// per unresolved transfer; true when clean.
async fn citus_audit(pool: &deadpool_postgres::Pool) -> anyhow::Result<bool> {
    use saldo::audit::citus::{self, CitusAuditOptions};
    let audit = citus::audit(pool, CitusAuditOptions::default())
        .await
        .context("auditing the Citus database (its schema is laid out by `saldo migrate`)")?;
    print_divergences(&audit.stock, &audit.ledger);
    for d in &audit.transfers {
        let route = d
            .state
            .route
            .map_or("no transfer_ids row".to_owned(), |(from, to)| {
                format!("from {from} to {to}")
            });
        let sides: Vec<String> = d
            .state
            .sides
            .iter()
            .map(|s| format!("{} ({} {})", s.account_id, s.status, s.amount))
            .collect();
        println!(
            "transfer {} {:?}: {route}; sides on accounts [{}]",
            d.state.transfer_id,
            d.invariant,
            sides.join(", ")
        );
    }
    for id in &audit.unresolved {
        println!("transfer {id} UNRESOLVED: its 2PC did not resolve in time; audit again");
    }
    if !audit.is_clean() {
        return Ok(false);
    }
    println!("audit clean (Citus): every product matches its history on its shard");
    println!(
        "audit clean (Citus): every account matches its journal on its shard, every transfer \
         has both sides on its accounts and they agree (so balances sum to zero)"
    );
    Ok(true)
}

/// `saldo audit --repair [--apply]`: one line per divergent product, what it would change (or
/// what became of it). False when a product was left alone (changed meanwhile, or its history
/// cannot be met): the exit status then says so.
async fn print_repair(store: &Store, apply: bool) -> anyhow::Result<bool> {
    use saldo::stock::repair::{self, RepairAction};
    let report = repair::repair(store, apply).await?;
    let mut all_done = true;
    for p in &report.products {
        let what = match p.action {
            RepairAction::Planned => "would set",
            RepairAction::Applied => "repaired:",
            RepairAction::Changed => {
                all_done = false;
                "LEFT ALONE (changed during the repair; run it again):"
            }
            RepairAction::Unrepairable => {
                all_done = false;
                "LEFT ALONE (history below what is reserved; count the product):"
            }
        };
        println!("product {} {what} {}", p.product_id, p.describe());
    }
    if report.products.is_empty() {
        println!("repair: nothing to repair");
    } else if !apply {
        println!("repair: dry run, nothing written; add --apply to write it");
    }
    Ok(all_done)
}
