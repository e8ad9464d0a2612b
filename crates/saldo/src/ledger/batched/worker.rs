//! One ledger partition's worker: drain the queue into a batch, apply the batch's movements in
//! one transaction, answer every waiter.
//!
//! The batch transaction locks every account of the batch once, in ascending id, with ONE
//! `SELECT … ORDER BY id FOR UPDATE` (the ledger's lock order, so batches of different
//! partitions, `ordered` transfers and other processes can never wait on each other in a
//! cycle), reads the batch's transfer ids from the journal under those locks, then decides each
//! movement in arrival order against the locked balances in memory — replay, conflict, refusal
//! (unknown account, insufficient funds, overflow) or applied — exactly as `ordered` would one
//! after the other. One multi-row INSERT journals what was applied and one
//! `UPDATE … FROM unnest(…)` moves each touched account once by its net amount.
//!
//! Business refusals are per-movement answers inside a committed batch, so one bad transfer
//! never fails its batch-mates. Only a database failure fails a batch: 40P01/40001 rerun it
//! whole (`retry::in_transaction`), the unique violation of a concurrent copy reruns it as a
//! replay (`in_idempotent_transaction`), anything else replays its movements one by one through
//! `ordered`, in arrival order, each under its own deadline.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use deadpool_postgres::Client;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_postgres::types::ToSql;

use super::job::{Job, Op};
use crate::batch::lane::Counters;
use crate::batch::schedule::{drive, Pace, Shared};
use crate::deadline;
use crate::domain::AccountId;
use crate::error::Error;
use crate::ledger::journal;
use crate::ledger::ordered::{LOCK, MOVE};
use crate::ledger::types::{checked_balance, Movement, Transfer};
use crate::ledger::TRANSFERS_KEY;
use crate::retry::{in_idempotent_transaction, TxOptions};
use crate::stock::Store;

/// Duration of one ledger batch transaction (retries included) and movements per batch.
pub const LEDGER_BATCH_SECONDS: &str = "saldo_ledger_batch_seconds";
pub const LEDGER_BATCH_MOVEMENTS: &str = "saldo_ledger_batch_movements";

/// The journal rows of the batch's transfer ids (read under the account locks).
const FIND_MANY: &str = "SELECT id, from_account, to_account, amount, kind, created_at \
     FROM transfers WHERE id = ANY($1)";
/// Every movement the batch applied, in one statement.
const INSERT_MANY: &str = "INSERT INTO transfers (id, from_account, to_account, amount, kind) \
     SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[])";
/// The journal's `created_at` of this transaction's rows (`now()` is the transaction's start).
const NOW: &str = "SELECT now() AS now";

pub(super) struct Worker {
    pub partition: usize,
    pub store: Store,
    /// The store's transaction options with `index_paths_only`: every statement of a batch has
    /// an index path, and a sequential scan is never the right plan for it.
    pub tx: TxOptions,
    pub pace: Pace,
    pub shared: Arc<Shared>,
    pub counters: Arc<Counters>,
    /// Dropped when the task ends: lets tests prove the workers stopped.
    pub _alive: Arc<()>,
}

impl Worker {
    /// Runs until every sender is dropped, the queue is drained and every batch has ended.
    pub async fn run(self, rx: mpsc::Receiver<Job>) {
        drive(&self.shared, rx, self.pace, |jobs| self.process(jobs)).await;
        tracing::debug!(partition = self.partition, "batched ledger worker stopped");
    }

    /// Runs one batch. Jobs whose deadline passed before the batch began are answered "not
    /// applied" and never run; the rest run under the earliest of their deadlines.
    async fn process(&self, jobs: Vec<Job>) {
        let mut runnable = Vec::with_capacity(jobs.len());
        for job in jobs {
            if job.deadline.is_some_and(|d| d <= Instant::now()) {
                let _ = job.reply.send(Err(Error::DeadlineExceeded {
                    operation: job.op.kind.as_str(),
                }));
            } else if job.ticket.start() {
                runnable.push(job);
            }
        }
        let deadline = runnable.iter().filter_map(|j| j.deadline).min();
        deadline::within_opt(deadline, self.run_batch(runnable)).await;
    }

    async fn run_batch(&self, mut jobs: Vec<Job>) {
        if jobs.len() == 1 {
            let Some(job) = jobs.pop() else { return };
            let _ = job
                .reply
                .send(apply_alone(&self.store, &self.counters, &job.op.movement()).await);
            return;
        }
        let started = Instant::now();
        let ops: Vec<&Op> = jobs.iter().map(|j| &j.op).collect();
        let ops = &ops[..];
        let result = in_idempotent_transaction(
            &self.store.pool,
            &self.tx,
            "transfer_batch",
            TRANSFERS_KEY,
            move |client| crate::tx_body!(client => apply_batch(client, ops)),
        )
        .await;
        record_batch(started, jobs.len());
        match result {
            Ok(outcomes) if outcomes.len() == jobs.len() => {
                self.counters.committed(jobs.len());
                for (job, outcome) in jobs.into_iter().zip(outcomes) {
                    // The caller may have gone; its answer has nowhere to go.
                    let _ = job.reply.send(outcome);
                }
            }
            Ok(outcomes) => {
                let broken = format!(
                    "a transfer batch of {} movements answered {} outcomes",
                    jobs.len(),
                    outcomes.len()
                );
                let broken = Error::invariant(broken).to_string();
                for job in jobs {
                    let _ = job.reply.send(Err(Error::Invariant(broken.clone())));
                }
            }
            Err(Error::OutcomeUnknown { cause, .. }) => {
                for job in jobs {
                    let _ = job.reply.send(Err(Error::OutcomeUnknown {
                        operation: job.op.kind.as_str(),
                        cause: cause.clone(),
                    }));
                }
            }
            Err(e) => {
                tracing::warn!(
                    partition = self.partition,
                    movements = jobs.len(),
                    error = %e,
                    "ledger batch failed; answering its movements one by one"
                );
                self.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
                // In arrival order, so the funds each one finds are those `ordered` would.
                for job in jobs {
                    let m = job.op.movement();
                    let alone = crate::ledger::apply_ordered(&self.store, &m);
                    let _ = job
                        .reply
                        .send(deadline::within_opt(job.deadline, alone).await);
                }
            }
        }
    }
}

/// A movement that meets no other in flight runs alone, as one `ordered` transaction: a lone
/// transfer pays what `ordered` pays. Timed and counted like a batch of one. Used by the worker
/// for a batch of one and by callers on an idle partition.
pub(super) async fn apply_alone(
    store: &Store,
    counters: &Counters,
    m: &Movement<'_>,
) -> Result<Transfer, Error> {
    let started = Instant::now();
    let outcome = crate::ledger::apply_ordered(store, m).await;
    record_batch(started, 1);
    counters.committed(1);
    outcome
}

fn record_batch(started: Instant, movements: usize) {
    metrics::histogram!(LEDGER_BATCH_SECONDS).record(started.elapsed().as_secs_f64());
    metrics::histogram!(LEDGER_BATCH_MOVEMENTS).record(movements as f64);
}

/// What one movement of the batch came to, before the insert tells `created_at`.
enum Decision {
    /// Answered without writing: a replay of a journalled transfer, a conflict, a refusal.
    Done(Result<Transfer, Error>),
    /// Applied: journal row number `n` of this batch.
    Applied(usize),
    /// The same id as journal row `n` of this batch, with the same payload: a replay of it.
    ReplayOf(usize),
}

/// The batch transaction: lock, read, decide in arrival order, write once, per-movement answers.
async fn apply_batch(client: &Client, ops: &[&Op]) -> Result<Vec<Result<Transfer, Error>>, Error> {
    let mut accounts: Vec<i64> = ops
        .iter()
        .flat_map(|o| [o.from.get(), o.to.get()])
        .collect();
    accounts.sort_unstable();
    accounts.dedup();
    let mut ids: Vec<&str> = ops.iter().map(|o| o.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();

    // Pipelined: both go out at once and the server runs them in order, so the journal read
    // happens under the account locks.
    let lock = client.prepare_cached(LOCK).await?;
    let find = client.prepare_cached(FIND_MANY).await?;
    let lock_params: [&(dyn ToSql + Sync); 1] = [&accounts];
    let find_params: [&(dyn ToSql + Sync); 1] = [&ids];
    let (locked, found) = futures::try_join!(
        client.query(&lock, &lock_params),
        client.query(&find, &find_params)
    )?;
    let mut balances: HashMap<i64, i64> = HashMap::with_capacity(locked.len());
    for row in &locked {
        balances.insert(row.try_get("id")?, row.try_get("balance")?);
    }
    let mut journalled: HashMap<String, Transfer> = HashMap::with_capacity(found.len());
    for row in &found {
        let t = journal::parse(row, true)?;
        journalled.insert(t.id.as_str().to_owned(), t);
    }

    let plan = decide(ops, &mut balances, &journalled);
    if plan.applied.is_empty() {
        return Ok(plan
            .decisions
            .into_iter()
            .map(|d| match d {
                Decision::Done(outcome) => outcome,
                Decision::Applied(_) | Decision::ReplayOf(_) => Err(Error::invariant(
                    "a batch decided a movement applied but wrote nothing",
                )),
            })
            .collect());
    }
    let created_at = write(client, ops, &plan).await?;
    Ok(plan
        .decisions
        .into_iter()
        .map(|d| match d {
            Decision::Done(outcome) => outcome,
            Decision::Applied(n) => Ok(journal_row(ops, &plan.applied, n, created_at, false)?),
            Decision::ReplayOf(n) => Ok(journal_row(ops, &plan.applied, n, created_at, true)?),
        })
        .collect())
}

/// The batch decided in memory: one decision per movement, the movements applied (indexes into
/// the batch, in order) and the net change of every touched account.
struct Plan {
    decisions: Vec<Decision>,
    applied: Vec<usize>,
    deltas: BTreeMap<i64, i64>,
}

/// Decides every movement in arrival order against the locked balances, as `ordered` would one
/// after the other: replay or conflict by id, unknown accounts (source first), insufficient
/// funds (the system account may go negative), `i64` overflow on either side.
fn decide(
    ops: &[&Op],
    balances: &mut HashMap<i64, i64>,
    found: &HashMap<String, Transfer>,
) -> Plan {
    let mut plan = Plan {
        decisions: Vec::with_capacity(ops.len()),
        applied: Vec::with_capacity(ops.len()),
        deltas: BTreeMap::new(),
    };
    // Ids applied earlier in this batch → their row number.
    let mut in_batch: HashMap<&str, usize> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        let m = op.movement();
        let decision = if let Some(existing) = found.get(op.id.as_str()) {
            Decision::Done(journal::replay(existing.clone(), &m))
        } else if let Some(&n) = in_batch.get(op.id.as_str()) {
            let first = ops[plan.applied[n]];
            if (first.from, first.to, first.amount, first.kind)
                == (op.from, op.to, op.amount, op.kind)
            {
                Decision::ReplayOf(n)
            } else {
                Decision::Done(Err(Error::TransferConflict(op.id.clone())))
            }
        } else {
            match apply_in_memory(op, balances) {
                Err(refusal) => Decision::Done(Err(refusal)),
                Ok(()) => {
                    *plan.deltas.entry(op.from.get()).or_default() -= op.amount.get();
                    *plan.deltas.entry(op.to.get()).or_default() += op.amount.get();
                    in_batch.insert(op.id.as_str(), plan.applied.len());
                    plan.applied.push(i);
                    Decision::Applied(plan.applied.len() - 1)
                }
            }
        };
        plan.decisions.push(decision);
    }
    plan
}

/// One movement against the locked balances: the same checks, in the same order, as
/// `ordered::move_funds`; nothing changes on a refusal.
fn apply_in_memory(op: &Op, balances: &mut HashMap<i64, i64>) -> Result<(), Error> {
    let Some(&from) = balances.get(&op.from.get()) else {
        return Err(Error::UnknownAccount(op.from));
    };
    let Some(&to) = balances.get(&op.to.get()) else {
        return Err(Error::UnknownAccount(op.to));
    };
    let amount = op.amount.get();
    if op.from != AccountId::SYSTEM && from < amount {
        return Err(Error::InsufficientFunds {
            account: op.from,
            requested: amount,
            balance: from,
        });
    }
    let from = checked_balance(op.from, from.checked_sub(amount))?;
    let to = checked_balance(op.to, to.checked_add(amount))?;
    balances.insert(op.from.get(), from);
    balances.insert(op.to.get(), to);
    Ok(())
}

/// One INSERT of the applied movements and one UPDATE of the touched accounts (net deltas),
/// pipelined with the read of the transaction's clock; returns the journal's `created_at`. The
/// accounts are held since [`apply_batch`] locked them, so the UPDATE must find each of them.
async fn write(client: &Client, ops: &[&Op], plan: &Plan) -> Result<DateTime<Utc>, Error> {
    let applied = plan.applied.iter().map(|&i| ops[i]);
    let ids: Vec<&str> = applied.clone().map(|o| o.id.as_str()).collect();
    let from: Vec<i64> = applied.clone().map(|o| o.from.get()).collect();
    let to: Vec<i64> = applied.clone().map(|o| o.to.get()).collect();
    let amounts: Vec<i64> = applied.clone().map(|o| o.amount.get()).collect();
    let kinds: Vec<&str> = applied.map(|o| o.kind.as_str()).collect();
    // Accounts whose movements cancelled out are not written at all.
    let (accounts, deltas): (Vec<i64>, Vec<i64>) = plan
        .deltas
        .iter()
        .filter(|(_, d)| **d != 0)
        .map(|(a, d)| (*a, *d))
        .unzip();
    let insert = client.prepare_cached(INSERT_MANY).await?;
    let update = client.prepare_cached(MOVE).await?;
    let now = client.prepare_cached(NOW).await?;
    let insert_params: [&(dyn ToSql + Sync); 5] = [&ids, &from, &to, &amounts, &kinds];
    let update_params: [&(dyn ToSql + Sync); 2] = [&accounts, &deltas];
    let (inserted, updated, now) = futures::try_join!(
        client.execute(&insert, &insert_params),
        client.execute(&update, &update_params),
        client.query_one(&now, &[]),
    )?;
    if inserted != ids.len() as u64 || updated != accounts.len() as u64 {
        return Err(Error::invariant(format!(
            "a transfer batch wrote {inserted} of {} journal rows and {updated} of {} accounts",
            ids.len(),
            accounts.len()
        )));
    }
    Ok(now.try_get("now")?)
}

/// The answer for journal row `n` of the batch (applied now, or a replay of it in the batch).
fn journal_row(
    ops: &[&Op],
    applied: &[usize],
    n: usize,
    created_at: DateTime<Utc>,
    replayed: bool,
) -> Result<Transfer, Error> {
    let Some(op) = applied.get(n).and_then(|&i| ops.get(i)) else {
        return Err(Error::invariant(format!(
            "journal row {n} of a batch of {} is not among its movements",
            ops.len()
        )));
    };
    Ok(Transfer {
        id: op.id.clone(),
        from: op.from,
        to: op.to,
        amount: op.amount.get(),
        kind: op.kind,
        created_at,
        replayed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Amount, TransferId};
    use crate::ledger::types::TransferKind;

    fn op(id: &str, from: i64, to: i64, amount: i64) -> Op {
        let account = |n| {
            if n == 0 {
                AccountId::SYSTEM
            } else {
                AccountId::new(n).expect("account")
            }
        };
        Op {
            id: TransferId::new(id).expect("id"),
            from: account(from),
            to: account(to),
            amount: Amount::new(amount).expect("amount"),
            kind: if from == 0 {
                TransferKind::Deposit
            } else {
                TransferKind::Transfer
            },
        }
    }

    #[test]
    fn movements_are_decided_in_arrival_order_and_a_refusal_spares_the_rest() {
        let ops = [
            op("a", 1, 2, 60),
            op("b", 1, 2, 60), // 40 left: refused
            op("c", 2, 1, 10),
            op("a", 1, 2, 60), // replay of "a" in the same batch
            op("a", 1, 2, 61), // same id, other payload
            op("d", 1, 9, 1),  // unknown account
            op("e", 0, 1, 5),  // the system account may go negative
        ];
        let ops: Vec<&Op> = ops.iter().collect();
        let mut balances = HashMap::from([(0, 0), (1, 100), (2, 0)]);
        let plan = decide(&ops, &mut balances, &HashMap::new());
        assert_eq!(plan.applied, [0, 2, 6]);
        assert_eq!(balances, HashMap::from([(0, -5), (1, 55), (2, 50)]));
        assert_eq!(plan.deltas, BTreeMap::from([(0, -5), (1, -45), (2, 50)]));
        let shape: Vec<String> = plan
            .decisions
            .iter()
            .map(|d| match d {
                Decision::Applied(n) => format!("applied {n}"),
                Decision::ReplayOf(n) => format!("replay {n}"),
                Decision::Done(Err(e)) => format!("{e:?}")
                    .split([' ', '(', '{'])
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
                Decision::Done(Ok(_)) => "found".to_owned(),
            })
            .collect();
        assert_eq!(
            shape,
            [
                "applied 0",
                "InsufficientFunds",
                "applied 1",
                "replay 0",
                "TransferConflict",
                "UnknownAccount",
                "applied 2"
            ]
        );
    }

    #[test]
    fn overflow_is_refused_typed_and_leaves_the_balances_alone() {
        let ops = [op("a", 0, 1, 10)];
        let ops: Vec<&Op> = ops.iter().collect();
        let mut balances = HashMap::from([(0, 0), (1, i64::MAX - 5)]);
        let plan = decide(&ops, &mut balances, &HashMap::new());
        assert!(plan.applied.is_empty());
        assert!(matches!(
            plan.decisions[0],
            Decision::Done(Err(Error::BalanceOutOfRange { .. }))
        ));
        assert_eq!(balances[&1], i64::MAX - 5);
    }
}
