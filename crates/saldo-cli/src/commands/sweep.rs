//! `saldo sweep`: expire due reservations and pending transfers once (bounded batches, as the
//! service's sweeper does) and print how many.

use std::process::ExitCode;

use anyhow::Result;
use saldo::stock::sweeper;

use crate::commands::shared::{attached_store, Global};
use crate::database::Role;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(_args: Args, global: Global) -> Result<ExitCode> {
    global.no_citus_workers()?;
    let (_database, pool) = global.open_pool(Role::Tool).await?;
    let store = attached_store(&pool).await?;
    let expired = sweeper::sweep(&store).await?;
    let holds = saldo::ledger::Ledger::new(store).expire_due().await?;
    println!("expired {expired} reservations and {holds} pending transfers");
    pool.close();
    Ok(ExitCode::SUCCESS)
}
