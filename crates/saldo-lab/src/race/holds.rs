//! The races on the ledger's holds and linked groups, ordered (saldo's ledger) against
//! the naive variants of `naive::holds`:
//!
//! - `hold-settle`: `holds` holds fall due, then a post, a void and an expiry race for each at
//!   once. Exactly one may win per hold, every run: the winner's state is the hold's final
//!   status and the audit is clean.
//! - `hold-last-funds`: `holds` holds of [`HOLD_AMOUNT`] race for the [`LAST_FUNDS`] available
//!   of one account (min_balance 0). At most `LAST_FUNDS / HOLD_AMOUNT` may be placed: the live
//!   holds never take `balance - held` below `min_balance`, and `held` matches them.
//! - `hold-deadline`: `holds` holds of [`DEADLINE_TIMEOUT_S`] s, each posted at its own moment
//!   from [`DEADLINE_SPREAD`] before its deadline to as long after, with no sweeper running.
//!   A post past the deadline must be refused `expired`; the naive settle, which checks the
//!   status and never the deadline, posts the late half every run.
//! - `crossed-groups`: `holds` linked groups of two transfers between accounts 1 and 2, half
//!   naming 1 → 2 first and half 2 → 1 first, with no retry: no deadlock may reach a caller.
//! - `reversal-race`: `holds` reversals of 1 each race for one posted transfer of [`REVERSED`]
//!   from account 1 to 2: at most [`REVERSED`] of them may succeed, and the original counts
//!   exactly what they moved back. The naive reversal reads what is left, thinks, then writes
//!   the count it computed: concurrent copies all read the same amount left and together
//!   reverse more than was posted.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use saldo::domain::{AccountId, Amount, GroupId, TransferId, TransferStatus, TransferTimeout};
use saldo::error::Error;
use saldo::ledger::{
    GroupRequest, Ledger, LinkedTransfer, ReversalRequest, Settle, TransferRequest,
};
use saldo::retry::{RetryPolicy, TxOptions, TxStats};

use crate::naive::holds as naive;
use crate::race::types::{
    bounded, error_kind, join_bounded, LabError, OutOfRange, Report, Scenario, MAX_RUNS,
    MAX_THINK_MS,
};
use crate::scratch::Scratch;

/// Amount of each hold.
pub const HOLD_AMOUNT: i64 = 10;
/// What account 1 holds in `hold-last-funds`: room for ten holds.
pub const LAST_FUNDS: i64 = 100;
/// Account 1's opening balance in `hold-settle` and `crossed-groups`: enough for every hold.
pub const SETTLE_OPENING: i64 = 1_000_000;
/// Most holds (or groups) per run.
pub const MAX_HOLDS: u32 = 1_000;
/// The transfer `reversal-race` reverses, one unit per reversal.
pub const REVERSED: i64 = 10;
/// The holds' timeout in `hold-deadline`.
pub const DEADLINE_TIMEOUT_S: u32 = 1;
/// How far before and after its deadline the posts of `hold-deadline` are spread.
pub const DEADLINE_SPREAD: Duration = Duration::from_millis(500);

/// The implementations raced: saldo's ledger, or the naive holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabHolds {
    Ordered,
    Naive,
}

impl LabHolds {
    pub const ALL: &'static [LabHolds] = &[LabHolds::Ordered, LabHolds::Naive];

    pub fn parse(s: &str) -> Option<LabHolds> {
        LabHolds::ALL.iter().copied().find(|h| h.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LabHolds::Ordered => "ordered",
            LabHolds::Naive => "naive",
        }
    }

    pub fn is_safe(self) -> bool {
        self == LabHolds::Ordered
    }
}

/// A validated holds race.
#[derive(Debug, Clone)]
pub struct HoldRace {
    pub scenario: Scenario,
    /// Holds per run (groups for `crossed-groups`).
    pub holds: u32,
    pub runs: u32,
    /// The naive read–write window.
    pub think: Duration,
}

impl HoldRace {
    pub fn new(
        scenario: Scenario,
        holds: u32,
        runs: u32,
        think_ms: u64,
    ) -> Result<HoldRace, OutOfRange> {
        bounded("holds", holds.into(), 2, MAX_HOLDS.into())?;
        bounded("runs", runs.into(), 1, MAX_RUNS.into())?;
        bounded("think_ms", think_ms, 0, MAX_THINK_MS)?;
        Ok(HoldRace {
            scenario,
            holds,
            runs,
            think: Duration::from_millis(think_ms),
        })
    }
}

fn account(n: i64) -> Result<AccountId, Error> {
    Ok(AccountId::new(n)?)
}

fn tid(s: String) -> Result<TransferId, Error> {
    Ok(TransferId::new(s)?)
}

fn request(id: String, from: i64, to: i64, amount: i64) -> Result<TransferRequest, Error> {
    Ok(TransferRequest {
        id: tid(id)?,
        from: account(from)?,
        to: account(to)?,
        amount: Amount::new(amount)?,
        tags: Default::default(),
    })
}

/// What one run observed, before it is folded into the report.
#[derive(Debug, Default)]
pub struct RunOutcome {
    /// Holds settled by exactly one winner, holds placed, holds posted in time, or groups
    /// applied.
    pub done: u64,
    /// Holds refused for want of funds, or posts refused past the deadline.
    pub refused: u64,
    /// Errors that reached a caller (a deadlock, a CHECK violation…).
    pub errors: Vec<Error>,
    /// An invariant of the scenario itself broke (two winners, funds held twice, money drift).
    pub broken: bool,
    /// How far: extra winners of settled holds, or holds placed beyond the funds.
    pub excess: u64,
    /// Ledger audit divergences after the run.
    pub divergences: u64,
}

impl RunOutcome {
    /// Every invariant of the run held.
    pub fn held(&self) -> bool {
        !self.broken && self.errors.is_empty() && self.divergences == 0
    }
}

/// One run of `race` on an empty ledger (whose transactions should not retry, so that a
/// deadlock shows): the race, then the scenario's checks and the audit.
pub async fn one_run(
    ledger: &Ledger,
    race: &HoldRace,
    strategy: LabHolds,
    run: u32,
) -> Result<RunOutcome, LabError> {
    let tx = ledger.store().tx.clone();
    let mut outcome = match race.scenario {
        Scenario::HoldLastFunds => last_funds(ledger, &tx, race, strategy, run).await?,
        Scenario::CrossedGroups => crossed_groups(ledger, &tx, race, strategy, run).await?,
        Scenario::HoldDeadline => deadline_race(ledger, &tx, race, strategy, run).await?,
        Scenario::ReversalRace => reversal_race(ledger, &tx, race, strategy, run).await?,
        _ => settle_race(ledger, &tx, race, strategy, run).await?,
    };
    outcome.divergences = crate::checks::ledger_divergences(&ledger.store().pool).await?;
    Ok(outcome)
}

/// Runs every run of `race` for each implementation on `scratch`.
pub async fn run(
    scratch: &Scratch,
    race: &HoldRace,
    strategies: &[LabHolds],
) -> Result<Vec<Report>, LabError> {
    let mut reports = Vec::new();
    for &strategy in strategies {
        let started = Instant::now();
        let stats = TxStats::new();
        // No retry: a deadlock or serialization failure must show, not be absorbed.
        let tx = TxOptions::default()
            .with_retry(RetryPolicy::none())
            .with_stats(stats.clone());
        let mut report = Report {
            scenario: race.scenario.as_str().into(),
            strategy: strategy.as_str().into(),
            safe: strategy.is_safe(),
            runs: race.runs,
            buyers_per_run: race.holds,
            stock_per_run: match race.scenario {
                Scenario::HoldLastFunds => LAST_FUNDS,
                Scenario::ReversalRace => REVERSED,
                _ => SETTLE_OPENING,
            },
            money_drift: Some(0),
            ..Report::default()
        };
        for run in 0..race.runs {
            scratch.reset().await?;
            let ledger = Ledger::new(scratch.store(tx.clone()));
            let outcome = one_run(&ledger, race, strategy, run).await?;
            report.add_sold(run, outcome.done);
            report.oversold += outcome.excess;
            report.runs_oversold += u32::from(outcome.excess > 0);
            report.refused += outcome.refused;
            for e in &outcome.errors {
                *report.errors.entry(error_kind(e)).or_default() += 1;
                if e.sqlstate().is_some_and(|s| s.code() == "23514") {
                    report.check_violations += 1;
                }
            }
            let a = ledger.account(account(1)?).await?;
            report.final_available = a.available;
            report.final_reserved = a.held;
            report.audit_divergences += outcome.divergences;
            report.violations += u32::from(!outcome.held());
        }
        report.deadlock_retries = Some(stats.deadlock_retries());
        report.finish(started);
        reports.push(report);
    }
    Ok(reports)
}

/// Accounts 1 (`opening`) and 2 (empty).
async fn two_accounts(ledger: &Ledger, opening: i64) -> Result<(), Error> {
    ledger.open_account(account(1)?, opening).await?;
    ledger.open_account(account(2)?, 0).await?;
    Ok(())
}

/// Post, void and expiry racing for each of `race.holds` due holds.
async fn settle_race(
    ledger: &Ledger,
    tx: &TxOptions,
    race: &HoldRace,
    strategy: LabHolds,
    run: u32,
) -> Result<RunOutcome, LabError> {
    let ids = due_holds(ledger, race.holds, run).await?;
    let mut tasks = Vec::new();
    for id in &ids {
        for how in [Settle::Post(None), Settle::Void, Settle::Expire] {
            let (ledger, tx, id, think) = (ledger.clone(), tx.clone(), id.clone(), race.think);
            tasks.push(tokio::spawn(async move {
                let won = settle(&ledger, &tx, strategy, &id, how, think).await;
                (id, won)
            }));
        }
    }
    let mut outcome = RunOutcome::default();
    let mut wins: BTreeMap<String, Vec<TransferStatus>> = BTreeMap::new();
    for (id, won) in join_bounded(tasks).await? {
        match won {
            Ok(Some(status)) => wins.entry(id).or_default().push(status),
            Ok(None) => {}
            Err(e) => outcome.errors.push(e),
        }
    }
    for id in &ids {
        let status = ledger.get_transfer(&tid(id.clone())?).await?.status;
        let mut won = wins.remove(id).unwrap_or_default();
        // The ordered sweeper reports a count, not which hold: an expired hold is its win.
        if strategy == LabHolds::Ordered && status == TransferStatus::Expired {
            won.push(TransferStatus::Expired);
        }
        if won.len() == 1 && won[0] == status {
            outcome.done += 1;
        } else {
            outcome.broken = true;
            outcome.excess += won.len().saturating_sub(1) as u64;
        }
    }
    Ok(outcome)
}

/// `holds` holds from account 1 (opened with [`SETTLE_OPENING`]) to account 2, all due: their
/// ids.
async fn due_holds(ledger: &Ledger, holds: u32, run: u32) -> Result<Vec<String>, LabError> {
    two_accounts(ledger, SETTLE_OPENING).await?;
    let timeout = TransferTimeout::from_secs(60).map_err(Error::from)?;
    let mut ids = Vec::new();
    for i in 0..holds {
        let id = format!("s-{run}-{i}");
        ledger
            .hold(&request(id.clone(), 1, 2, HOLD_AMOUNT)?, timeout)
            .await?;
        ids.push(id);
    }
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    saldo::fixtures::make_holds_due(&ledger.store().pool, &refs).await?;
    Ok(ids)
}

/// One of the racers for hold `id`, settling it `how`: the status it made the hold reach when
/// it won, None when it lost.
async fn settle(
    ledger: &Ledger,
    tx: &TxOptions,
    strategy: LabHolds,
    id: &str,
    how: Settle,
    think: Duration,
) -> Result<Option<TransferStatus>, Error> {
    match (strategy, how) {
        // The real sweeper: it expires whatever is due, this hold among them.
        (LabHolds::Ordered, Settle::Expire) => ledger.expire_due().await.map(|_| None),
        (LabHolds::Ordered, how) => {
            let id = TransferId::new(id.to_owned())?;
            let settled = if how == Settle::Void {
                ledger.void(&id).await
            } else {
                ledger.post(&id, None).await
            };
            match settled {
                Ok(t) => Ok(Some(t.status)),
                Err(Error::TransferNotPending { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        }
        (LabHolds::Naive, how) => naive::settle(&ledger.store().pool, tx, id, how, think)
            .await
            .map(|s| (s == how.target()).then_some(s)),
    }
}

/// `race.holds` holds of [`DEADLINE_TIMEOUT_S`], posted from [`DEADLINE_SPREAD`] before their
/// deadline to as long after it, no sweeper running: a hold posted after its deadline breaks
/// the run, and every answer must name the hold's final status.
async fn deadline_race(
    ledger: &Ledger,
    tx: &TxOptions,
    race: &HoldRace,
    strategy: LabHolds,
    run: u32,
) -> Result<RunOutcome, LabError> {
    two_accounts(ledger, SETTLE_OPENING).await?;
    let timeout = TransferTimeout::from_secs(DEADLINE_TIMEOUT_S.into()).map_err(Error::from)?;
    let mut tasks = Vec::new();
    let step = 2 * DEADLINE_SPREAD / race.holds.max(2).saturating_sub(1);
    for i in 0..race.holds {
        let id = format!("d-{run}-{i}");
        ledger
            .hold(&request(id.clone(), 1, 2, HOLD_AMOUNT)?, timeout)
            .await?;
        // Hold i's deadline is one timeout after it was placed; its post comes at a point
        // between DEADLINE_SPREAD before and DEADLINE_SPREAD after that deadline.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout.secs().into());
        let at = deadline - DEADLINE_SPREAD + step * i;
        let (ledger, tx) = (ledger.clone(), tx.clone());
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let told = post_once(&ledger, &tx, strategy, &id).await;
            (id, told)
        }));
    }
    let mut outcome = RunOutcome::default();
    for (id, told) in join_bounded(tasks).await? {
        let told = match told {
            Ok(status) => status,
            Err(e) => {
                outcome.errors.push(e);
                continue;
            }
        };
        let hold = ledger.get_transfer(&tid(id)?).await?;
        let late = hold.status == TransferStatus::Posted
            && matches!((hold.settled_at, hold.expires_at), (Some(s), Some(e)) if s > e);
        if late || told != hold.status {
            outcome.broken = true;
            outcome.excess += u64::from(late);
        } else if told == TransferStatus::Posted {
            outcome.done += 1;
        } else {
            outcome.refused += 1;
        }
    }
    Ok(outcome)
}

/// One post of hold `id`: the status it answered (`posted`, or the state it was refused in).
async fn post_once(
    ledger: &Ledger,
    tx: &TxOptions,
    strategy: LabHolds,
    id: &str,
) -> Result<TransferStatus, Error> {
    match strategy {
        LabHolds::Ordered => match ledger.post(&TransferId::new(id.to_owned())?, None).await {
            Ok(t) => Ok(t.status),
            Err(Error::TransferNotPending { status, .. }) => Ok(status),
            Err(e) => Err(e),
        },
        // No think (`hold-deadline` takes none): the naive settle's fault here is what it
        // checks, not when it writes.
        LabHolds::Naive => {
            naive::settle(
                &ledger.store().pool,
                tx,
                id,
                Settle::Post(None),
                Duration::ZERO,
            )
            .await
        }
    }
}

/// `race.holds` holds racing for [`LAST_FUNDS`].
async fn last_funds(
    ledger: &Ledger,
    tx: &TxOptions,
    race: &HoldRace,
    strategy: LabHolds,
    run: u32,
) -> Result<RunOutcome, LabError> {
    two_accounts(ledger, LAST_FUNDS).await?;
    let timeout = TransferTimeout::from_secs(60).map_err(Error::from)?;
    let mut tasks = Vec::new();
    for i in 0..race.holds {
        let r = request(format!("l-{run}-{i}"), 1, 2, HOLD_AMOUNT)?;
        let (ledger, tx, think) = (ledger.clone(), tx.clone(), race.think);
        tasks.push(tokio::spawn(async move {
            match strategy {
                LabHolds::Ordered => ledger.hold(&r, timeout).await.map(|_| ()),
                LabHolds::Naive => naive::hold(&ledger.store().pool, &tx, &r, timeout, think).await,
            }
        }));
    }
    let mut outcome = RunOutcome::default();
    for r in join_bounded(tasks).await? {
        match r {
            Ok(()) => outcome.done += 1,
            Err(Error::InsufficientFunds { .. }) => outcome.refused += 1,
            Err(e) => outcome.errors.push(e),
        }
    }
    // Never below min_balance (0), counting every live hold, whatever `held` says.
    let a = ledger.account(account(1)?).await?;
    let live = i64::try_from(outcome.done).unwrap_or(i64::MAX) * HOLD_AMOUNT;
    let room = a.balance - a.min_balance.unwrap_or(0);
    outcome.broken = live > room;
    outcome.excess = u64::try_from((live - room).max(0) / HOLD_AMOUNT).unwrap_or(0);
    Ok(outcome)
}

/// `race.holds` reversals of 1 racing for transfer `t` of [`REVERSED`] from account 1 to 2
/// (which holds enough for every copy: the excess is the point, not the funds).
async fn reversal_race(
    ledger: &Ledger,
    tx: &TxOptions,
    race: &HoldRace,
    strategy: LabHolds,
    run: u32,
) -> Result<RunOutcome, LabError> {
    two_accounts(ledger, SETTLE_OPENING).await?;
    let original = format!("t-{run}");
    ledger
        .transfer(
            saldo::ledger::TransferStrategy::Ordered,
            &request(original.clone(), 1, 2, REVERSED)?,
        )
        .await?;
    ledger
        .deposit(
            tid(format!("d-{run}"))?,
            account(2)?,
            Amount::new(SETTLE_OPENING).map_err(Error::from)?,
        )
        .await?;
    let mut tasks = Vec::new();
    for i in 0..race.holds {
        let r = ReversalRequest {
            id: tid(format!("r-{run}-{i}"))?,
            original: tid(original.clone())?,
            amount: Some(Amount::new(1).map_err(Error::from)?),
            tags: Default::default(),
        };
        let (ledger, tx, think) = (ledger.clone(), tx.clone(), race.think);
        tasks.push(tokio::spawn(async move {
            match strategy {
                LabHolds::Ordered => ledger.reverse(&r).await.map(|_| ()),
                LabHolds::Naive => naive::reverse(&ledger.store().pool, &tx, &r, think).await,
            }
        }));
    }
    let mut outcome = RunOutcome::default();
    for r in join_bounded(tasks).await? {
        match r {
            Ok(()) => outcome.done += 1,
            Err(Error::ReversalExceedsPosted { .. }) => outcome.refused += 1,
            Err(e) => outcome.errors.push(e),
        }
    }
    // Never more than was posted, and the original counts exactly what moved back.
    let t = ledger.get_transfer(&tid(original)?).await?;
    let moved = i64::try_from(outcome.done).unwrap_or(i64::MAX);
    outcome.broken = moved > REVERSED || t.reversed_amount != moved;
    outcome.excess = u64::try_from(moved - REVERSED).unwrap_or(0);
    Ok(outcome)
}

/// `race.holds` two-transfer groups crossing between accounts 1 and 2.
async fn crossed_groups(
    ledger: &Ledger,
    tx: &TxOptions,
    race: &HoldRace,
    strategy: LabHolds,
    run: u32,
) -> Result<RunOutcome, LabError> {
    ledger.open_account(account(1)?, SETTLE_OPENING).await?;
    ledger.open_account(account(2)?, SETTLE_OPENING).await?;
    let mut tasks = Vec::new();
    for i in 0..race.holds {
        let (a, b) = if i % 2 == 0 { (1, 2) } else { (2, 1) };
        let transfers = vec![
            request(format!("c-{run}-{i}-a"), a, b, HOLD_AMOUNT)?,
            request(format!("c-{run}-{i}-b"), b, a, HOLD_AMOUNT)?,
        ];
        let group = GroupId::new(format!("c-{run}-{i}")).map_err(Error::from)?;
        let (ledger, tx, think) = (ledger.clone(), tx.clone(), race.think);
        tasks.push(tokio::spawn(async move {
            match strategy {
                LabHolds::Ordered => {
                    let request = GroupRequest {
                        id: group,
                        transfers: transfers
                            .into_iter()
                            .map(|transfer| LinkedTransfer {
                                transfer,
                                pending: None,
                            })
                            .collect(),
                        tags: Default::default(),
                    };
                    ledger.transfer_group(&request).await.map(|_| ())
                }
                LabHolds::Naive => naive::group(&ledger.store().pool, &tx, &transfers, think).await,
            }
        }));
    }
    let mut outcome = RunOutcome::default();
    for r in join_bounded(tasks).await? {
        match r {
            Ok(()) => outcome.done += 1,
            Err(e) => outcome.errors.push(e),
        }
    }
    let total =
        ledger.account(account(1)?).await?.balance + ledger.account(account(2)?).await?.balance;
    outcome.broken = total != 2 * SETTLE_OPENING;
    Ok(outcome)
}
