//! `saldo token`: rotate or list the service's stored bearer tokens. The store keeps only their
//! SHA-256 digests (`<data dir>/tokens.json`, 0600), so a new token is printed exactly once, here;
//! a running `saldo serve` notices the file changed within a second, accepts the new token and
//! refuses the old one, without a restart. Needs no database.

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Subcommand;
use saldo_http::tokens::{TokenKind, TokenStore};

use crate::commands::shared::Global;
use crate::database;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: TokenCommand,
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// Replace the admin or API token with a new random one, printed once on stdout.
    Rotate {
        /// `admin` or `api`.
        #[arg(value_parser = kind)]
        kind: TokenKind,
    },
    /// Which tokens are stored and when they were made (never the secrets).
    Status,
}

fn kind(s: &str) -> Result<TokenKind, String> {
    TokenKind::parse(s).ok_or_else(|| format!("{s:?}: expected `admin` or `api`"))
}

/// Tokens live in saldo's data directory, not in the database: nothing is started.
pub fn run(args: Args, global: Global) -> Result<ExitCode> {
    global.no_citus_workers()?;
    let dir = database::try_state_dir(global.embedded.data_dir.as_deref())?;
    let store = TokenStore::new(&dir);
    match args.command {
        TokenCommand::Rotate { kind } => {
            let token = store
                .rotate(kind)
                .with_context(|| format!("rotating the {kind} token"))?;
            eprintln!(
                "new {kind} token below (shown once; only its SHA-256 is kept in {}). A running \
                 `saldo serve` on this data directory accepts it and refuses the old one within \
                 a second.",
                store.path().display()
            );
            for var in [kind.env_var(), kind.file_env_var()] {
                if std::env::var_os(var).is_some() {
                    eprintln!(
                        "note: {var} is set in this environment; a service started with it \
                         uses that token instead of the stored one"
                    );
                }
            }
            // The one place a stored token is ever shown: stdout, alone on its line, for scripts.
            println!("{}", token.expose());
        }
        TokenCommand::Status => {
            let stored = store
                .read()
                .with_context(|| format!("reading {}", store.path().display()))?;
            println!("token file: {}", store.path().display());
            for kind in TokenKind::ALL {
                let name = kind.as_str();
                match stored.get(kind) {
                    Some(t) => println!("{name:<6} stored, created {}", t.created_at.to_rfc3339()),
                    None => println!("{name:<6} none (generated at the next `saldo serve`)"),
                }
                for var in [kind.env_var(), kind.file_env_var()] {
                    if std::env::var_os(var).is_some() {
                        println!("{name:<6} overridden here by {var}");
                    }
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
