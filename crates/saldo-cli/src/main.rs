//! The `saldo` command: it parses the flags and hands the subcommand to its module in
//! `commands/`, which validates every one of its flags into typed options before anything is
//! started, created or printed, then opens its database (`database.rs`) and calls the library.
//! A failure is printed as one line per cause (`errors.rs`), exit status 1.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod commands;
mod database;
mod duration;
mod errors;
mod logging;
mod supervise;

use commands::{audit, bench, db, events, locks, migrate, race, serve, sweep, token, Global};
use database::EmbeddedOptions;

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
    /// `json` (one object per line). RUST_LOG filters either, but keeps tokio_postgres at info
    /// or above (at debug it logs every statement's parameters: ids, amounts) unless it names
    /// tokio_postgres itself.
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
    Db(db::Args),
    /// Apply the migrations and exit (on the running serve/db's cluster when there is one). On
    /// a Citus coordinator (the `citus` extension installed) the schema is laid out distributed.
    Migrate(migrate::Args),
    /// Run the divergence audits (stock and ledger); exits 1 when anything diverges.
    /// `--repair` prints what it would change per divergent product; `--repair --apply`
    /// changes it (products that change meanwhile are left alone) and audits again. On a
    /// Citus coordinator: per shard and per transfer, read-only, without `--repair`.
    Audit(audit::Args),
    /// Expire due reservations and pending transfers once (bounded batches) and print how many.
    Sweep(sweep::Args),
    /// The event feed: `saldo events tail` prints it (from its end, its start or a cursor;
    /// filtered; until caught up or following it).
    Events(events::Args),
    /// Rerun one of the lab's races against strategies side by side and check every invariant.
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

impl Command {
    /// The log filter when `RUST_LOG` is unset.
    fn default_log_filter(&self) -> &'static str {
        match self {
            // The race lab provokes CHECK violations and deadlocks on purpose: not one line each.
            Command::Race(_) => "warn,saldo::telemetry=off",
            _ => logging::DEFAULT_FILTER,
        }
    }
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

/// The flags, parsed; a refusal is printed (with the environment variable a value came from)
/// and exits with clap's status.
fn parse() -> (Cli, clap::ArgMatches) {
    let matches = Cli::command().try_get_matches().unwrap_or_else(|e| {
        let note = errors::env_source_note(&e, &Cli::command());
        let _ = e.print();
        if let Some(note) = note {
            eprintln!("{note}");
        }
        std::process::exit(e.exit_code())
    });
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    (cli, matches)
}

#[tokio::main]
async fn run() -> Result<ExitCode> {
    let (cli, matches) = parse();
    logging::init(cli.log_format, cli.command.default_log_filter());
    let global = Global {
        database_url: cli.database_url,
        embedded: EmbeddedOptions {
            data_dir: cli.data_dir,
            tcp: cli.embedded_tcp,
            port: cli.embedded_port,
        },
        // Bounded by the parser (1 ..= MAX_CITUS_WORKERS).
        citus_workers: cli.citus_workers.map(|n| n as usize),
    };
    match cli.command {
        Command::Db(args) => db::run(args, global).await,
        Command::Migrate(args) => migrate::run(args, global).await,
        Command::Audit(args) => audit::run(args, global).await,
        Command::Sweep(args) => sweep::run(args, global).await,
        Command::Events(args) => events::run(args, global).await,
        Command::Race(args) => race::run(args, global).await,
        Command::Serve(args) => {
            let matches = matches
                .subcommand_matches("serve")
                .context("serve: its arguments")?;
            serve::run(args, matches, global).await
        }
        Command::Locks(args) => locks::run(args, global).await,
        Command::Bench(args) => bench::run(args, global).await,
        Command::Token(args) => token::run(args, global),
    }
}
