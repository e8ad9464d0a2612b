//! `saldo migrate`: apply the migrations and exit, on the running serve/db's cluster when
//! there is one. On a Citus coordinator (the `citus` extension installed) the schema is laid
//! out distributed; `--citus` requires that layout.

use std::process::ExitCode;

use anyhow::{Context, Result};
use saldo::db;

use crate::commands::shared::Global;
use crate::database::Role;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Require the distributed (Citus) layout: refused unless the database has the Citus
    /// extension (without it, the layout follows the database).
    #[arg(long)]
    citus: bool,
}

pub async fn run(args: Args, global: Global) -> Result<ExitCode> {
    global.no_citus_workers()?;
    let (_database, pool) = global.open_pool(Role::Tool).await?;
    let layout = if args.citus {
        db::migrate_as(&pool, db::Layout::Citus)
            .await
            .map(|()| db::Layout::Citus)
    } else {
        db::migrate(&pool).await
    };
    let layout = layout.context("migrating the database")?;
    println!("migrations applied ({} layout)", layout.as_str());
    pool.close();
    Ok(ExitCode::SUCCESS)
}
