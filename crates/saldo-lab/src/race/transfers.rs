//! The `crossed-transfers` scenario (the deadlock of crossed transfers): accounts 1 and 2 open
//! with the same balance and `transfers` transfers of 10 fire at once, half 1 → 2 and half
//! 2 → 1. With the `naive` strategy (locks in arrival order) crossed pairs deadlock and
//! PostgreSQL kills one of each cycle with 40P01 — with `--no-retry` the victims reach the
//! caller; with the retry on they are rerun from BEGIN and counted. `ordered` (one `SELECT …
//! ORDER BY id FOR UPDATE`) cannot form a cycle: zero failures, zero deadlock retries. Every
//! run ends with the money checks.
//!
//! On Citus the second account is the first one whose shard lives on another worker than
//! account 1's ([`saldo::ops::citus_key_elsewhere`]): the crossing is across workers, where
//! only the distributed deadlock detector can see a cycle.

use std::time::Instant;

use saldo::domain::{AccountId, Amount, TransferId};
use saldo::error::Error;
use saldo::ledger::{Ledger, Transfer, TransferRequest};
use saldo::retry::{RetryPolicy, TxOptions, TxStats};

use crate::race::types::RunDone;
use crate::race::types::{
    bounded, error_kind, join_bounded, LabError, OutOfRange, Report, Scenario, MAX_RUNS,
    MAX_TRANSFERS,
};
use crate::scratch::Scratch;
use crate::strategy::LabTransfer;

/// Opening balance of each account (as in the crossed-transfers article: 100,000).
pub const OPENING_BALANCE: i64 = 100_000;
/// Amount of each transfer (as in the crossed-transfers article: 10).
pub const TRANSFER_AMOUNT: i64 = 10;

/// The crossed-transfers race on `ledger` (empty): opens account 1 and [`second_account`] (2 on one
/// node) with [`OPENING_BALANCE`] each, then fires `transfers` transfers of [`TRANSFER_AMOUNT`] at
/// once, half each way, with ids `{id_prefix}-{i}`. Every answer, in order; bounded by the lab's
/// run timeout. The race below and the ledger test suites run it.
pub async fn crossed(
    ledger: &Ledger,
    strategy: LabTransfer,
    transfers: u32,
    id_prefix: &str,
) -> Result<Vec<Result<Transfer, Error>>, LabError> {
    let accounts = (account(1)?, account(second_account(ledger).await?)?);
    crossed_between(ledger, strategy, accounts, transfers, id_prefix).await
}

/// [`crossed`] between two chosen accounts (on Citus: accounts whose shards are on different
/// workers, so every transfer is a 2PC and the lock cycle, if any, spans nodes).
pub async fn crossed_between(
    ledger: &Ledger,
    strategy: LabTransfer,
    (a, b): (AccountId, AccountId),
    transfers: u32,
    id_prefix: &str,
) -> Result<Vec<Result<Transfer, Error>>, LabError> {
    ledger.open_account(a, OPENING_BALANCE).await?;
    ledger.open_account(b, OPENING_BALANCE).await?;
    let amount = Amount::new(TRANSFER_AMOUNT).map_err(Error::from)?;
    let mut tasks = Vec::new();
    for i in 0..transfers {
        let (from, to) = if i % 2 == 0 { (a, b) } else { (b, a) };
        let request = TransferRequest {
            id: TransferId::new(format!("{id_prefix}-{i}")).map_err(Error::from)?,
            from,
            to,
            amount,
            tags: Default::default(),
        };
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            strategy.transfer(&ledger, &request).await
        }));
    }
    join_bounded(tasks).await
}

/// A validated crossed-transfers race.
#[derive(Debug, Clone)]
pub struct TransferRace {
    pub transfers: u32,
    pub runs: u32,
    /// Rerun deadlock victims from BEGIN (the default), or let them reach the caller.
    pub retry: bool,
}

impl TransferRace {
    pub fn new(transfers: u32, runs: u32, retry: bool) -> Result<TransferRace, OutOfRange> {
        bounded("transfers", transfers.into(), 2, MAX_TRANSFERS.into())?;
        bounded("runs", runs.into(), 1, MAX_RUNS.into())?;
        Ok(TransferRace {
            transfers,
            runs,
            retry,
        })
    }
}

fn account(n: i64) -> Result<AccountId, Error> {
    Ok(AccountId::new(n)?)
}

/// Account 2 on one node; on Citus the first account on another worker than account 1 (still
/// account 2 on a cluster of one worker).
pub async fn second_account(ledger: &Ledger) -> Result<i64, Error> {
    let store = ledger.store();
    if !store.is_citus() {
        return Ok(2);
    }
    Ok(
        saldo::ops::citus_key_elsewhere(&store.pool, saldo::ops::DistributedBy::Account)
            .await?
            .unwrap_or(2),
    )
}

/// The name a strategy is reported under: the retry setting changes what the caller sees.
pub fn label(strategy: LabTransfer, retry: bool) -> String {
    if retry {
        strategy.as_str().to_owned()
    } else {
        format!("{}/no-retry", strategy.as_str())
    }
}

/// Runs every run of `race` for each strategy on `scratch`.
pub async fn run(
    scratch: &Scratch,
    race: &TransferRace,
    strategies: &[LabTransfer],
) -> Result<Vec<Report>, LabError> {
    run_with_progress(scratch, race, strategies, &|_| {}).await
}

/// [`run`], telling `on_run` after every run.
pub async fn run_with_progress(
    scratch: &Scratch,
    race: &TransferRace,
    strategies: &[LabTransfer],
    on_run: &(dyn Fn(RunDone<'_>) + Sync),
) -> Result<Vec<Report>, LabError> {
    let mut reports = Vec::new();
    for &strategy in strategies {
        let started = Instant::now();
        let stats = TxStats::new();
        let retry = if race.retry {
            RetryPolicy::default()
        } else {
            RetryPolicy::none()
        };
        let tx = TxOptions::default()
            .with_retry(retry)
            .with_stats(stats.clone());
        let mut report = Report {
            scenario: Scenario::CrossedTransfers.as_str().into(),
            strategy: label(strategy, race.retry),
            safe: strategy.is_safe(),
            runs: race.runs,
            buyers_per_run: race.transfers,
            stock_per_run: 2 * OPENING_BALANCE,
            money_drift: Some(0),
            ..Report::default()
        };
        for run in 0..race.runs {
            scratch.reset().await?;
            let ledger = Ledger::new(scratch.store(tx.clone()));
            let (a, b) = (account(1)?, account(second_account(&ledger).await?)?);
            let joined = crossed(&ledger, strategy, race.transfers, &format!("x-{run}")).await?;
            let mut done = 0u64;
            let mut failed = false;
            for j in joined {
                match j {
                    Ok(_) => done += 1,
                    Err(Error::InsufficientFunds { .. }) => report.refused += 1,
                    Err(e) => {
                        failed = true;
                        *report.errors.entry(error_kind(&e)).or_default() += 1;
                    }
                }
            }
            report.add_sold(run, done);
            let total = ledger.account(a).await?.balance + ledger.account(b).await?.balance;
            let drift = total - 2 * OPENING_BALANCE;
            report.money_drift = Some(report.money_drift.unwrap_or(0) + drift);
            report.final_available = total;
            let divergences = crate::checks::ledger_divergences(scratch.pool()).await?;
            report.audit_divergences += divergences;
            // The crossed-transfers test: no transfer may fail and the total must not change.
            report.violations += u32::from(failed || drift != 0 || divergences > 0);
            on_run(RunDone {
                strategy: &report.strategy,
                run: run + 1,
                runs: race.runs,
                elapsed: started.elapsed(),
            });
        }
        report.deadlock_retries = Some(stats.deadlock_retries());
        report.finish(started);
        reports.push(report);
    }
    Ok(reports)
}
