//! `saldo db`: run the database (the embedded cluster by default) migrated, and sweep expired
//! reservations and holds every `--sweep-interval-s` until Ctrl-C. It owns the embedded
//! cluster (`Role::Owner`): other commands attach to it while it runs, and a cluster that
//! dies is restarted (bounded) or ends the command with an error.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use saldo::stock::{sweeper, Store};

use crate::commands::shared::{serving_store, Global};
use crate::database::Role;
use crate::{duration, supervise};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Time between sweeper rounds (plain number: seconds; or 30s, 5m), 1 s ..= 1 h.
    #[arg(long, env = "SALDO_SWEEP_INTERVAL_S", default_value_t = 30,
          value_parser = duration::secs(1, 3600))]
    sweep_interval_s: u64,
}

pub async fn run(args: Args, global: Global) -> Result<ExitCode> {
    global.no_citus_workers()?;
    let (database, pool) = global.open_pool(Role::Owner).await?;
    let store = serving_store(&pool).await?;
    println!("saldo database ready at {}", database.shown_url);
    println!("sweeping every {}s; Ctrl-C to stop", args.sweep_interval_s);
    let mut tick = tokio::time::interval(Duration::from_secs(args.sweep_interval_s));
    // One watcher for the whole loop: it counts restarts across ticks.
    let watch = supervise::watch(&database);
    tokio::pin!(watch);
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            gave_up = &mut watch => return Err(gave_up),
            _ = tick.tick() => sweep_once(&store).await,
        }
    }
    println!("stopping");
    pool.close();
    Ok(ExitCode::SUCCESS)
}

/// One round: expired reservations, then due pending transfers; failures are logged and the
/// next round tries again.
async fn sweep_once(store: &Store) {
    match sweeper::sweep(store).await {
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
