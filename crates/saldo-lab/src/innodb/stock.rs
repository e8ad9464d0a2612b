//! `last-unit` and `oversubscribed` on InnoDB: `buyers` buyers at once for `stock` units of one
//! product, each strategy run after run from a fresh state, then the books checked: units sold
//! never above the stock, one reservation row per sale, `available + reserved` equal to the
//! stock.
//!
//! - `naive` (lab only): a plain `SELECT available`, a pause, then `UPDATE … SET available = <what
//!   was read − 1>`. A plain SELECT locks nothing under READ COMMITTED or REPEATABLE READ, and
//!   InnoDB lets a REPEATABLE READ transaction update a row another one changed since its
//!   snapshot (PostgreSQL would fail it with 40001), so both sessions sell the last unit;
//! - `atomic`: `UPDATE … SET available = available − 1 WHERE product_id = ? AND available >= 1`;
//!   the UPDATE reads the current, locked row (a "current read"), and one row affected means sold;
//! - `pessimistic`: `SELECT … FOR UPDATE` (a current, locking read), then the UPDATE;
//! - `optimistic`: read `available, version`, then `UPDATE … WHERE version = ?`; every attempt is
//!   a transaction of its own, because under REPEATABLE READ a reread inside the same
//!   transaction returns the same snapshot and would conflict forever; bounded attempts.
//!
//! Every strategy runs inside the whole-transaction retry on 1213/1205 (`db::with_retry`).

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use rand::Rng;

use crate::innodb::db::{with_retry, InnoDbError, Isolation, Lab, Retries, OP_TIMEOUT};
use crate::innodb::report::InnoReport;
use crate::race::types::StockBounds;

/// Attempts of one optimistic buyer before it gives up with a conflict.
pub const OPTIMISTIC_ATTEMPTS: u32 = 200;
/// Tighter than PostgreSQL's (`race::types::STOCK_BOUNDS`): one private server, a connection
/// per buyer.
pub const INNODB_STOCK_BOUNDS: StockBounds = StockBounds {
    buyers: 5_000,
    stock: 1_000_000,
    runs: MAX_RUNS,
    think_ms: 1_000,
};
/// Most runs of an InnoDB race, stock or transfers.
pub const MAX_RUNS: u32 = 100;

/// The stock strategies of the InnoDB lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InnoStrategy {
    Naive,
    Atomic,
    Pessimistic,
    Optimistic,
}

impl InnoStrategy {
    pub const ALL: &'static [InnoStrategy] = &[
        InnoStrategy::Atomic,
        InnoStrategy::Pessimistic,
        InnoStrategy::Optimistic,
        InnoStrategy::Naive,
    ];
    pub const SAFE: &'static [InnoStrategy] = &[
        InnoStrategy::Atomic,
        InnoStrategy::Pessimistic,
        InnoStrategy::Optimistic,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InnoStrategy::Naive => "naive",
            InnoStrategy::Atomic => "atomic",
            InnoStrategy::Pessimistic => "pessimistic",
            InnoStrategy::Optimistic => "optimistic",
        }
    }

    pub fn is_safe(self) -> bool {
        self != InnoStrategy::Naive
    }

    /// `all`, or a comma list of names.
    pub fn parse_list(text: &str) -> Result<Vec<InnoStrategy>, InnoDbError> {
        if text == "all" {
            return Ok(InnoStrategy::ALL.to_vec());
        }
        text.split(',')
            .map(|name| {
                InnoStrategy::ALL
                    .iter()
                    .copied()
                    .find(|s| s.as_str() == name.trim())
                    .ok_or_else(|| {
                        InnoDbError::Input(format!(
                            "strategy {name:?} on InnoDB: expected atomic, pessimistic, \
                             optimistic, naive or all"
                        ))
                    })
            })
            .collect()
    }
}

/// A validated stock race.
#[derive(Debug, Clone)]
pub struct StockRace {
    pub scenario: &'static str,
    pub buyers: u32,
    pub stock: u32,
    pub runs: u32,
    /// The naive strategy's pause between its read and its write.
    pub think: Duration,
    pub isolation: Isolation,
}

impl StockRace {
    pub fn new(
        scenario: &'static str,
        (buyers, stock, runs): (u32, u32, u32),
        think_ms: u64,
        isolation: Isolation,
    ) -> Result<StockRace, InnoDbError> {
        INNODB_STOCK_BOUNDS.check(buyers, stock, runs, think_ms)?;
        Ok(StockRace {
            scenario,
            buyers,
            stock,
            runs,
            think: Duration::from_millis(think_ms),
            isolation,
        })
    }
}

/// What one buyer got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bought {
    Sold,
    Refused,
    /// Optimistic attempts exhausted.
    Conflict,
}

/// One buyer: `strategy`'s transaction for one unit of product 1, rerun on 1213/1205.
pub async fn buy(
    lab: &Lab,
    strategy: InnoStrategy,
    race: &StockRace,
    order_id: &str,
) -> (Result<Bought, InnoDbError>, Retries) {
    let iso = race.isolation;
    with_retry(true, || async move {
        match strategy {
            InnoStrategy::Naive => naive(lab, iso, race.think, order_id).await,
            InnoStrategy::Atomic => atomic(lab, iso, order_id).await,
            InnoStrategy::Pessimistic => pessimistic(lab, iso, order_id).await,
            InnoStrategy::Optimistic => optimistic(lab, iso, order_id).await,
        }
    })
    .await
}

const RESERVE: &str = "INSERT INTO reservations (order_id, product_id, quantity) VALUES (?, 1, 1)";

async fn naive(
    lab: &Lab,
    iso: Isolation,
    think: Duration,
    order_id: &str,
) -> Result<Bought, InnoDbError> {
    let mut conn = lab.conn().await?;
    let mut tx = conn.start_transaction(iso.tx()).await?;
    let available: Option<i64> = tx
        .query_first("SELECT available FROM stock WHERE product_id = 1")
        .await?;
    let available = available.unwrap_or(0);
    tokio::time::sleep(think).await;
    if available < 1 {
        tx.rollback().await?;
        return Ok(Bought::Refused);
    }
    tx.exec_drop(
        "UPDATE stock SET available = ?, reserved = reserved + 1 WHERE product_id = 1",
        (available - 1,),
    )
    .await?;
    tx.exec_drop(RESERVE, (order_id,)).await?;
    tx.commit().await?;
    Ok(Bought::Sold)
}

async fn atomic(lab: &Lab, iso: Isolation, order_id: &str) -> Result<Bought, InnoDbError> {
    let mut conn = lab.conn().await?;
    let mut tx = conn.start_transaction(iso.tx()).await?;
    tx.query_drop(
        "UPDATE stock SET available = available - 1, reserved = reserved + 1 \
         WHERE product_id = 1 AND available >= 1",
    )
    .await?;
    // The UPDATE changes every row it matches, so "changed" (the default count) is "matched".
    if tx.affected_rows() != 1 {
        tx.rollback().await?;
        return Ok(Bought::Refused);
    }
    tx.exec_drop(RESERVE, (order_id,)).await?;
    tx.commit().await?;
    Ok(Bought::Sold)
}

async fn pessimistic(lab: &Lab, iso: Isolation, order_id: &str) -> Result<Bought, InnoDbError> {
    let mut conn = lab.conn().await?;
    let mut tx = conn.start_transaction(iso.tx()).await?;
    let available: Option<i64> = tx
        .query_first("SELECT available FROM stock WHERE product_id = 1 FOR UPDATE")
        .await?;
    if available.unwrap_or(0) < 1 {
        tx.rollback().await?;
        return Ok(Bought::Refused);
    }
    tx.query_drop(
        "UPDATE stock SET available = available - 1, reserved = reserved + 1 WHERE product_id = 1",
    )
    .await?;
    tx.exec_drop(RESERVE, (order_id,)).await?;
    tx.commit().await?;
    Ok(Bought::Sold)
}

async fn optimistic(lab: &Lab, iso: Isolation, order_id: &str) -> Result<Bought, InnoDbError> {
    for attempt in 0..OPTIMISTIC_ATTEMPTS {
        let mut conn = lab.conn().await?;
        let mut tx = conn.start_transaction(iso.tx()).await?;
        let row: Option<(i64, i64)> = tx
            .query_first("SELECT available, version FROM stock WHERE product_id = 1")
            .await?;
        let (available, version) = row.unwrap_or((0, 0));
        if available < 1 {
            tx.rollback().await?;
            return Ok(Bought::Refused);
        }
        tx.exec_drop(
            "UPDATE stock SET available = available - 1, reserved = reserved + 1, \
             version = version + 1 WHERE product_id = 1 AND version = ?",
            (version,),
        )
        .await?;
        if tx.affected_rows() == 1 {
            tx.exec_drop(RESERVE, (order_id,)).await?;
            tx.commit().await?;
            return Ok(Bought::Sold);
        }
        // Someone else moved the version: a new transaction (a new snapshot), after a pause.
        tx.rollback().await?;
        let cap = 1u64 << attempt.min(4);
        let pause = rand::rng().random_range(0..=cap);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    Ok(Bought::Conflict)
}

/// What one run left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunOutcome {
    pub sold: u64,
    pub refused: u64,
    pub conflicts: u64,
    pub errors: u64,
    pub retries: Retries,
    pub available: i64,
    pub reserved: i64,
    pub reservation_rows: i64,
}

impl RunOutcome {
    /// Units sold beyond `stock`.
    pub fn oversold(&self, stock: u32) -> u64 {
        self.sold.saturating_sub(stock.into())
    }

    /// Whether any invariant broke: oversold, a sale without its row (or the reverse), or the
    /// counters not adding up to the stock.
    pub fn violated(&self, stock: u32) -> bool {
        self.oversold(stock) > 0
            || i64::try_from(self.sold).ok() != Some(self.reservation_rows)
            || self.available + self.reserved != i64::from(stock)
            || self.available < 0
    }
}

/// One run of `race` for `strategy`: reset, every buyer at once, the books read.
pub async fn run_once(
    lab: &Lab,
    race: &StockRace,
    strategy: InnoStrategy,
    report: &mut InnoReport,
) -> Result<RunOutcome, InnoDbError> {
    lab.reset_stock(race.stock.into()).await?;
    let mut tasks = Vec::with_capacity(race.buyers as usize);
    for i in 0..race.buyers {
        let (lab, race) = (lab.clone(), race.clone());
        tasks.push(tokio::spawn(async move {
            let order = format!("o-{i}");
            tokio::time::timeout(2 * OP_TIMEOUT, buy(&lab, strategy, &race, &order)).await
        }));
    }
    let mut outcome = RunOutcome::default();
    for task in tasks {
        let (result, retries) = task
            .await?
            .map_err(|_| InnoDbError::Timeout { what: "a buyer" })?;
        outcome.retries.deadlocks += retries.deadlocks;
        outcome.retries.lock_timeouts += retries.lock_timeouts;
        match result {
            Ok(Bought::Sold) => outcome.sold += 1,
            Ok(Bought::Refused) => outcome.refused += 1,
            Ok(Bought::Conflict) => outcome.conflicts += 1,
            Err(e) => {
                outcome.errors += 1;
                report.add_error(&e);
            }
        }
    }
    let mut conn = lab.conn().await?;
    let books: Option<(i64, i64)> = conn
        .query_first("SELECT available, reserved FROM stock WHERE product_id = 1")
        .await?;
    (outcome.available, outcome.reserved) = books.unwrap_or((0, 0));
    let rows: Option<i64> = conn
        .query_first("SELECT COUNT(*) FROM reservations")
        .await?;
    outcome.reservation_rows = rows.unwrap_or(0);
    Ok(outcome)
}

/// Every run of `race` for each strategy, one strategy after the other.
pub async fn run(
    lab: &Lab,
    race: &StockRace,
    strategies: &[InnoStrategy],
) -> Result<Vec<InnoReport>, InnoDbError> {
    let mut reports = Vec::with_capacity(strategies.len());
    for &strategy in strategies {
        let started = Instant::now();
        let mut report = InnoReport::new(
            race.scenario,
            strategy.as_str(),
            race.isolation,
            strategy.is_safe(),
        );
        report.per_run = race.buyers;
        report.stock = race.stock.into();
        for _ in 0..race.runs {
            let outcome = run_once(lab, race, strategy, &mut report).await?;
            report.runs += 1;
            report.add_done(outcome.sold);
            report.refused += outcome.refused;
            report.conflicts += outcome.conflicts;
            report.add_retries(outcome.retries);
            report.oversold += outcome.oversold(race.stock);
            report.runs_oversold += u32::from(outcome.oversold(race.stock) > 0);
            // An error that reached a buyer (a CHECK violated, retries exhausted) breaks the run too.
            report.violations += u32::from(outcome.violated(race.stock) || outcome.errors > 0);
        }
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        reports.push(report);
    }
    Ok(reports)
}
