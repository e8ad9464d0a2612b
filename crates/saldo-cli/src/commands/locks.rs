//! `saldo locks`: the crossed-transfers deadlock's `pg_blocking_pids` view in the terminal — who
//! waits on a lock, who blocks them, and how long their transaction has been open. `GET
//! /v1/admin/locks` reads the same query (`saldo::ops::locks`).

use std::process::ExitCode;

use anyhow::Result;
use deadpool_postgres::Pool;

use crate::commands::shared::{attached_store, Global};
use crate::database::Role;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(_args: Args, global: Global) -> Result<ExitCode> {
    global.no_citus_workers()?;
    let (_database, pool) = global.open_pool(Role::Tool).await?;
    // A known schema (this binary's), never migrated by a tool that looks.
    attached_store(&pool).await?;
    print_locks(&pool).await?;
    pool.close();
    Ok(ExitCode::SUCCESS)
}

async fn print_locks(pool: &Pool) -> Result<()> {
    let sessions = saldo::ops::locks(pool).await?;
    if sessions.is_empty() {
        println!("no session is waiting on a lock");
        return Ok(());
    }
    println!(
        "{:>8}  {:<16}  {:<10}  {:>10}  query",
        "pid", "blocked_by", "wait", "tx_age_ms"
    );
    for s in sessions {
        let blocked_by: Vec<String> = s.blocked_by.iter().map(i32::to_string).collect();
        println!(
            "{:>8}  {:<16}  {:<10}  {:>10}  {}",
            s.pid,
            blocked_by.join(","),
            s.wait_event_type.as_deref().unwrap_or("-"),
            s.transaction_age_ms
                .map_or_else(|| "-".to_owned(), |a| a.to_string()),
            s.query.as_deref().unwrap_or("").replace('\n', " ")
        );
    }
    Ok(())
}
