//! The `saldo` command: glue between flags and the library. Each subcommand parses its flags
//! into typed options, then calls one library operation.

use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use saldo::db::{self, PoolOptions};
use saldo::retry::TxOptions;
use saldo::stock::{sweeper, Store};

mod bench;
mod database;
mod locks;
mod race;
mod serve;
mod supervise;
mod token;
use database::open;

#[derive(Parser)]
#[command(
    name = "saldo",
    version,
    about = "Sell the last unit exactly once, on PostgreSQL"
)]
struct Cli {
    /// PostgreSQL URL; absent → an embedded cluster in a per-user data directory.
    #[arg(long, env = "DATABASE_URL", global = true)]
    database_url: Option<String>,
    /// Let the embedded PostgreSQL also listen on 127.0.0.1 (a free port; the password is still
    /// required). Off by default: only its private Unix socket.
    #[arg(long, env = "SALDO_EMBEDDED_TCP", global = true)]
    embedded_tcp: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the database (embedded by default), migrate it, and sweep expired reservations and holds
    /// every `--sweep-interval-s` until Ctrl-C.
    Db {
        #[arg(long, env = "SALDO_SWEEP_INTERVAL_S", default_value_t = 30,
              value_parser = clap::value_parser!(u64).range(1..=3600))]
        sweep_interval_s: u64,
    },
    /// Apply the migrations and exit.
    Migrate,
    /// Run the divergence audits (stock and ledger); exits 1 when anything diverges.
    Audit,
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

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    // The race lab provokes CHECK violations and deadlocks on purpose: do not log each one.
    let default_filter = match cli.command {
        Command::Race(_) => "warn,saldo::telemetry=off",
        _ => "info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Command::Token(args) = cli.command {
        // Tokens live in saldo's data directory, not in the database: nothing to start.
        return token::run(args, &database::try_state_dir()?);
    }
    if let Command::Bench(args) = cli.command {
        // HTTP mode talks only to a running service: no database of its own to start. Otherwise
        // the bench works in a scratch database it creates and drops: the one named by the URL
        // is never migrated or written.
        let database = if args.is_http() {
            None
        } else {
            Some(open(cli.database_url).await?)
        };
        let server_url = database.as_ref().map_or("", |d| d.url.as_str());
        anyhow::ensure!(
            bench::run(args, server_url).await?,
            "bench: an invariant broke (see above)"
        );
        return Ok(());
    }
    let embedded = database::EmbeddedOptions {
        tcp: cli.embedded_tcp,
    };
    let database = database::open_with(cli.database_url, embedded).await?;
    if let Command::Race(args) = cli.command {
        // Same for the lab: only its scratch database is touched.
        return race::run(args, &database.url).await;
    }
    if let Command::Serve(args) = cli.command {
        // The service migrates through its own pool: `--pool-size N` is N connections in all.
        return serve::run(args, &database).await;
    }
    let pool = db::connect(&database.url, &PoolOptions::default())?;
    db::migrate(&pool).await.context("migrating the database")?;
    let store = Store::new(pool.clone(), TxOptions::default());
    match cli.command {
        Command::Migrate => println!("migrations applied"),
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
        Command::Audit => {
            let stock = saldo::audit::audit_stock(&pool).await?;
            let ledger = saldo::audit::audit_ledger(&pool).await?;
            for d in &stock {
                println!(
                    "product {} {:?}: expected {} actual {}",
                    d.product_id, d.invariant, d.expected, d.actual
                );
            }
            for d in &ledger {
                let account = d.account.map_or("all".to_owned(), |a| a.to_string());
                println!(
                    "account {account} {:?}: expected {} actual {}",
                    d.invariant, d.expected, d.actual
                );
            }
            if !stock.is_empty() || !ledger.is_empty() {
                std::process::exit(1);
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
    Ok(())
}
