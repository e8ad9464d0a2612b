//! `saldo audit`: the divergence audits (stock and ledger), exit status 1 when anything
//! diverges. `--repair` prints what it would change per divergent product and account;
//! `--repair --apply` changes it (products and accounts that change meanwhile are left alone;
//! what no write can fix is named with why) and audits again. On a Citus coordinator: per
//! shard and per transfer, read-only, without `--repair`.

use std::process::ExitCode;

use anyhow::{Context, Result};
use deadpool_postgres::Pool;
use saldo::audit::{Divergence, LedgerDivergence};
use saldo::stock::Store;

use crate::commands::shared::{attached_store, Global};
use crate::database::Role;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print, per divergent product and account, what a repair would write (nothing is
    /// written).
    #[arg(long)]
    repair: bool,
    /// With --repair: write it (a `repair: …` movement per product, an `account_repairs` row
    /// per account) and re-audit.
    #[arg(long, requires = "repair")]
    apply: bool,
}

pub async fn run(args: Args, global: Global) -> Result<ExitCode> {
    global.no_citus_workers()?;
    let (_database, pool) = global.open_pool(Role::Tool).await?;
    // Never migrated: the schema must be this binary's (a repair writes rows, not schema).
    let store = attached_store(&pool).await?;
    if !args.repair && store.is_citus() {
        return citus_audit_exit(&pool).await;
    }
    let clean = audit(&store, &args).await?;
    pool.close();
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The repair when asked, then the audits; true when everything was repaired and is clean.
async fn audit(store: &Store, args: &Args) -> Result<bool> {
    if args.repair && !print_repair(store, args.apply).await? {
        return Ok(false);
    }
    if store.is_citus() {
        return citus_audit(&store.pool).await;
    }
    let stock = saldo::audit::audit_stock(&store.pool).await?;
    let ledger = saldo::audit::audit_ledger(&store.pool).await?;
    print_divergences(&stock, &ledger);
    if !stock.is_empty() || !ledger.is_empty() {
        return Ok(false);
    }
    println!("audit clean: every product matches its history");
    println!(
        "audit clean: balances sum to zero, every account matches its journal, every held and \
         pending credit matches the live pending transfers"
    );
    Ok(true)
}

/// One line per stock and per ledger divergence (both layouts' audits).
fn print_divergences(stock: &[Divergence], ledger: &[LedgerDivergence]) {
    for d in stock {
        println!(
            "product {} {:?}: expected {} actual {}",
            d.product_id, d.invariant, d.expected, d.actual
        );
    }
    for d in ledger {
        let account = d.account.map_or("all".to_owned(), |a| a.to_string());
        let subject = match &d.transfer {
            Some(t) if d.account.is_some() => format!("transfer {t} (side of account {account})"),
            Some(t) => format!("transfer {t}"),
            None => format!("account {account}"),
        };
        println!(
            "{subject} {:?}: expected {} actual {}",
            d.invariant, d.expected, d.actual
        );
    }
}

/// [`citus_audit`], then the pool closed and the exit status: failure unless clean.
async fn citus_audit_exit(pool: &Pool) -> Result<ExitCode> {
    let clean = citus_audit(pool).await?;
    pool.close();
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The audit on a Citus coordinator ([`saldo::audit::citus`]): one line per divergence and
/// per unresolved transfer; true when clean.
async fn citus_audit(pool: &Pool) -> Result<bool> {
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

/// `--repair [--apply]`: one line per divergent product and account, what it would change (or
/// what became of it), and one per thing no write can fix. False when anything was left alone
/// (changed meanwhile, or unrepairable): the exit status then says so.
async fn print_repair(store: &Store, apply: bool) -> Result<bool> {
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
                "LEFT ALONE (no counters agree with the history; count the product, or its locations):"
            }
        };
        println!("product {} {what} {}", p.product_id, p.describe());
        for l in &p.locations {
            println!(
                "  location {}: available {} -> {}, reserved {} -> {}",
                l.location_id,
                l.before.available,
                l.after.available,
                l.before.reserved,
                l.after.reserved
            );
        }
    }
    all_done &= print_ledger_repair(&report.ledger);
    let ledger = &report.ledger;
    if report.products.is_empty() && ledger.accounts.is_empty() && ledger.unrepairable.is_empty() {
        println!("repair: nothing to repair");
    } else if !apply {
        println!("repair: dry run, nothing written; add --apply to write it");
    }
    Ok(all_done)
}

/// The ledger's part of `--repair`; false when an account or a transfer was left alone.
fn print_ledger_repair(ledger: &saldo::ledger::repair::LedgerRepairReport) -> bool {
    use saldo::ledger::repair::AccountAction;
    let mut all_done = ledger.unrepairable.is_empty();
    for a in &ledger.accounts {
        let what = match a.action {
            AccountAction::Planned => "would set".to_owned(),
            AccountAction::Applied => "repaired:".to_owned(),
            AccountAction::Changed => {
                all_done = false;
                "LEFT ALONE (changed during the repair; run it again):".to_owned()
            }
            AccountAction::Unrepairable => {
                all_done = false;
                let why = a.reason.as_deref().unwrap_or("unrepairable");
                format!("LEFT ALONE ({why}):")
            }
        };
        println!("account {} {what} {}", a.account, a.describe());
    }
    for u in &ledger.unrepairable {
        println!(
            "{} CANNOT BE REPAIRED: {}; `{}` shows it",
            u.subject, u.why, u.shown_by
        );
    }
    all_done
}
