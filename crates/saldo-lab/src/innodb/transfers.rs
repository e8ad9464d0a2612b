//! `crossed-transfers` on InnoDB: accounts 1 and 2 open with [`OPENING_BALANCE`] each and
//! `transfers` transfers of [`TRANSFER_AMOUNT`] fire at once, half 1 → 2 and half 2 → 1.
//!
//! - `naive` locks in request order: debit `from` (an UPDATE locks its row), a pause, credit
//!   `to`; crossed pairs wait on each other and InnoDB's deadlock detector rolls one back with
//!   1213, at once (`innodb_deadlock_detect`, on by default; PostgreSQL waits `deadlock_timeout`
//!   first);
//! - `ordered` first locks both rows with one `SELECT … WHERE id IN (?, ?) ORDER BY id FOR
//!   UPDATE`: every transaction locks in the same order, so no cycle can form.
//!
//! Both run inside the bounded, jittered whole-transaction retry on 1213/1205 unless `retry` is
//! off (then the victims reach the caller). Each applied transfer writes its id into
//! `transfers` (the primary key makes a second application fail), and every run ends with the
//! money checks: the total unchanged, each balance what the applied transfers say, one row per
//! applied transfer.

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;

use crate::innodb::db::{with_retry, InnoDbError, Isolation, Lab, Retries, OP_TIMEOUT};
use crate::innodb::report::InnoReport;
use crate::innodb::stock::MAX_RUNS;
use crate::race::types::bounded;

pub const OPENING_BALANCE: i64 = 100_000;
pub const TRANSFER_AMOUNT: i64 = 10;
pub const MAX_TRANSFERS: u32 = 5_000;
/// `naive`'s pause between its two UPDATEs (widens the window in which pairs cross).
pub const NAIVE_PAUSE: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferStrategy {
    Naive,
    Ordered,
}

impl TransferStrategy {
    pub const ALL: &'static [TransferStrategy] =
        &[TransferStrategy::Ordered, TransferStrategy::Naive];

    pub fn as_str(self) -> &'static str {
        match self {
            TransferStrategy::Naive => "naive",
            TransferStrategy::Ordered => "ordered",
        }
    }

    /// `all`, or a comma list of names.
    pub fn parse_list(text: &str) -> Result<Vec<TransferStrategy>, InnoDbError> {
        if text == "all" {
            return Ok(TransferStrategy::ALL.to_vec());
        }
        text.split(',')
            .map(|name| match name.trim() {
                "naive" => Ok(TransferStrategy::Naive),
                "ordered" => Ok(TransferStrategy::Ordered),
                other => Err(InnoDbError::Input(format!(
                    "strategy {other:?} for crossed-transfers on InnoDB: expected ordered, naive or all"
                ))),
            })
            .collect()
    }
}

/// A validated crossed-transfers race.
#[derive(Debug, Clone)]
pub struct TransferRace {
    pub transfers: u32,
    pub runs: u32,
    pub retry: bool,
    pub isolation: Isolation,
}

impl TransferRace {
    pub fn new(
        transfers: u32,
        runs: u32,
        retry: bool,
        isolation: Isolation,
    ) -> Result<TransferRace, InnoDbError> {
        bounded("transfers", transfers.into(), 2, MAX_TRANSFERS.into())?;
        bounded("runs", runs.into(), 1, MAX_RUNS.into())?;
        Ok(TransferRace {
            transfers,
            runs,
            retry,
            isolation,
        })
    }
}

/// One transfer of [`TRANSFER_AMOUNT`] from `from` to `to` under `strategy`, with its id.
async fn transfer_once(
    lab: &Lab,
    strategy: TransferStrategy,
    iso: Isolation,
    (from, to): (i64, i64),
    id: &str,
) -> Result<(), InnoDbError> {
    let mut conn = lab.conn().await?;
    let mut tx = conn.start_transaction(iso.tx()).await?;
    if strategy == TransferStrategy::Ordered {
        let locked: Vec<(i64, i64)> = tx
            .exec(
                "SELECT id, balance FROM accounts WHERE id IN (?, ?) ORDER BY id FOR UPDATE",
                (from, to),
            )
            .await?;
        if locked.len() != 2 {
            return Err(InnoDbError::Input(format!(
                "accounts {from} and {to} must exist"
            )));
        }
    }
    let debit = "UPDATE accounts SET balance = balance - ? WHERE id = ?";
    tx.exec_drop(debit, (TRANSFER_AMOUNT, from)).await?;
    if strategy == TransferStrategy::Naive {
        tokio::time::sleep(NAIVE_PAUSE).await;
    }
    tx.exec_drop(debit, (-TRANSFER_AMOUNT, to)).await?;
    tx.exec_drop(
        "INSERT INTO transfers (id, from_id, to_id, amount) VALUES (?, ?, ?, ?)",
        (id, from, to, TRANSFER_AMOUNT),
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// What one run left behind.
#[derive(Debug, Clone, Default)]
pub struct RunOutcome {
    pub applied: u64,
    pub failed: u64,
    pub retries: Retries,
    /// Sum of balances minus the money opened.
    pub drift: i64,
    /// Whether each balance matches the transfers recorded, and one row per applied transfer.
    pub books_agree: bool,
}

/// One run: reset, open both accounts, fire every transfer at once, check the money.
pub async fn run_once(
    lab: &Lab,
    race: &TransferRace,
    strategy: TransferStrategy,
    report: &mut InnoReport,
) -> Result<RunOutcome, InnoDbError> {
    lab.reset_stock(0).await?;
    lab.conn()
        .await?
        .exec_drop(
            "INSERT INTO accounts (id, balance) VALUES (1, ?), (2, ?)",
            (OPENING_BALANCE, OPENING_BALANCE),
        )
        .await?;
    let mut tasks = Vec::new();
    for i in 0..race.transfers {
        let (lab, race) = (lab.clone(), race.clone());
        let pair = if i % 2 == 0 { (1, 2) } else { (2, 1) };
        tasks.push(tokio::spawn(async move {
            let id = format!("x-{i}");
            let work = with_retry(race.retry, || {
                transfer_once(&lab, strategy, race.isolation, pair, &id)
            });
            tokio::time::timeout(2 * OP_TIMEOUT, work).await
        }));
    }
    let mut outcome = RunOutcome::default();
    for task in tasks {
        let (result, retries) = task
            .await?
            .map_err(|_| InnoDbError::Timeout { what: "a transfer" })?;
        outcome.retries.deadlocks += retries.deadlocks;
        outcome.retries.lock_timeouts += retries.lock_timeouts;
        match result {
            Ok(()) => outcome.applied += 1,
            Err(e) => {
                outcome.failed += 1;
                report.add_error(&e);
            }
        }
    }
    check_books(lab, &mut outcome).await?;
    Ok(outcome)
}

/// Fills `drift` and `books_agree` from the database.
async fn check_books(lab: &Lab, outcome: &mut RunOutcome) -> Result<(), InnoDbError> {
    let mut conn = lab.conn().await?;
    let balances: Vec<(i64, i64)> = conn
        .query("SELECT id, balance FROM accounts ORDER BY id")
        .await?;
    let total: i64 = balances.iter().map(|(_, b)| b).sum();
    outcome.drift = total - 2 * OPENING_BALANCE;
    // Each balance as the recorded transfers say it must be.
    let expected: Vec<(i64, i64)> = conn
        .exec(
            "SELECT a.id, CAST(? - COALESCE(SUM(CASE WHEN t.from_id = a.id THEN t.amount \
             ELSE -t.amount END), 0) AS SIGNED) FROM accounts a \
             LEFT JOIN transfers t ON a.id IN (t.from_id, t.to_id) GROUP BY a.id ORDER BY a.id",
            (OPENING_BALANCE,),
        )
        .await?;
    let rows: Option<i64> = conn.query_first("SELECT COUNT(*) FROM transfers").await?;
    outcome.books_agree = balances == expected && i64::try_from(outcome.applied).ok() == rows;
    Ok(())
}

/// Every run of `race` for each strategy.
pub async fn run(
    lab: &Lab,
    race: &TransferRace,
    strategies: &[TransferStrategy],
) -> Result<Vec<InnoReport>, InnoDbError> {
    let mut reports = Vec::new();
    for &strategy in strategies {
        let started = Instant::now();
        let name = if race.retry {
            strategy.as_str().to_owned()
        } else {
            format!("{}/no-retry", strategy.as_str())
        };
        let mut report = InnoReport::new("crossed-transfers", &name, race.isolation, true);
        report.safe = strategy == TransferStrategy::Ordered;
        report.per_run = race.transfers;
        report.stock = 2 * OPENING_BALANCE;
        for _ in 0..race.runs {
            let outcome = run_once(lab, race, strategy, &mut report).await?;
            report.runs += 1;
            report.add_done(outcome.applied);
            report.add_retries(outcome.retries);
            let broke = outcome.failed > 0 || outcome.drift != 0 || !outcome.books_agree;
            report.violations += u32::from(broke);
        }
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        reports.push(report);
    }
    Ok(reports)
}
