//! One ledger partition's worker: drain the queue into a batch, apply the batch's operations in
//! one transaction, answer every waiter.
//!
//! The batch transaction reads which accounts its settles (posts, voids) touch, then locks
//! every account of the batch once, in ascending id, with ONE `SELECT … ORDER BY id FOR UPDATE`
//! (the ledger's lock order, so batches of different partitions, `ordered` transactions and
//! other processes can never wait on each other in a cycle), reads the batch's transfers from
//! the journal under those locks, then decides each operation in arrival order on the locked
//! rows in memory through the ledger's own [`apply::place`] and [`apply::settle`] — replay,
//! conflict, refusal (limits with what is held, unknown account, overflow, not pending) or
//! applied — exactly as the one-operation transactions would one after the other. Then one
//! multi-row INSERT journals the new transfers, one `UPDATE … FROM unnest(…)` writes each
//! changed account once, and one more moves the settled holds out of `pending`.
//!
//! Business refusals are per-operation answers inside a committed batch, so one bad transfer
//! never fails its batch-mates. Only a database failure fails a batch: 40P01/40001 rerun it
//! whole (`retry::in_transaction`), the unique violation of a concurrent copy reruns it as a
//! replay (`in_idempotent_transaction`), anything else replays its operations one by one as
//! their own transactions, in arrival order, each under its own deadline.
//!
//! On Citus (`store.layout()`) the same steps with `holds`' and `journal`'s Citus statements: the
//! locks one account per statement in ascending id, the settles' accounts from `transfer_ids`,
//! the states from the debit sides, and the settle UPDATE moving both sides of each hold.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use deadpool_postgres::Client;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::job::{Job, Op};
use crate::batch::lane::Counters;
use crate::batch::schedule::{drive, Pace, Shared};
use crate::domain::{AccountId, TransferId, TransferStatus};
use crate::error::Error;
use crate::ledger::apply::{self, Locked, NewTransfer, Settled, TransferState};
use crate::ledger::types::{account_from_db, Transfer};
use crate::ledger::{holds, journal, transfers_key};
use crate::operation::Operation;
use crate::store::deadline;
use crate::store::handle::Store;
use crate::store::retry::{in_idempotent_transaction, TxOptions};
use crate::store::schema::Layout;

/// What a settle needs before the locks: the two accounts of each transfer (read unlocked; the
/// state is read again under the locks).
const SIDES_MANY: &str = "SELECT id, from_account, to_account FROM transfers WHERE id = ANY($1)";
/// The settle state of the batch's transfers, under the account locks (as `holds` reads one).
const STATE_MANY: &str = "SELECT id, from_account, to_account, amount, status, posted_amount, \
     timeout_s IS NOT NULL AS was_pending FROM transfers WHERE id = ANY($1)";
/// Citus: the router rows of the ids.
const CITUS_SIDES_MANY: &str =
    "SELECT id, from_account, to_account FROM transfer_ids WHERE id = ANY($1)";
/// Citus: the debit sides, one row per transfer.
const CITUS_STATE_MANY: &str = "SELECT id, from_account, to_account, amount, status, \
     posted_amount, timeout_s IS NOT NULL AS was_pending FROM transfers \
     WHERE id = ANY($1) AND account_id = from_account";
/// Citus: both sides of each hold (`$1` the side's account), joined on the distribution
/// column; `$5` is the coordinator's `now()` (see `holds`).
const CITUS_SETTLE_MANY: &str = "UPDATE transfers t \
     SET status = d.status, posted_amount = d.posted_amount, settled_at = $5 \
     FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[]) \
          AS d(account_id, id, status, posted_amount) \
     WHERE t.account_id = d.account_id AND t.id = d.id AND t.status = 'pending'";
/// Every hold the batch settled, in one statement; only a transfer still pending moves.
const SETTLE_MANY: &str = "UPDATE transfers t \
     SET status = d.status, posted_amount = d.posted_amount, settled_at = now() \
     FROM unnest($1::text[], $2::text[], $3::bigint[]) AS d(id, status, posted_amount) \
     WHERE t.id = d.id AND t.status = 'pending'";

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
                let operation = job.op.operation();
                let _ = job.reply.send(Err(Error::DeadlineExceeded { operation }));
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
                .send(apply_alone(&self.store, &self.counters, &job.op).await);
            return;
        }
        let started = Instant::now();
        let ops: Vec<&Op> = jobs.iter().map(|j| &j.op).collect();
        let ops = &ops[..];
        let layout = self.store.layout();
        let result = in_idempotent_transaction(
            &self.store.pool,
            &self.tx,
            Operation::LedgerBatch,
            transfers_key(layout),
            move |client| crate::tx_body!(client => apply_batch(client, layout, ops)),
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
                    "a ledger batch of {} operations answered {} outcomes",
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
                        operation: job.op.operation(),
                        cause: cause.clone(),
                    }));
                }
            }
            Err(e) => {
                tracing::warn!(
                    partition = self.partition,
                    operations = jobs.len(),
                    error = %e,
                    "ledger batch failed; answering its operations one by one"
                );
                self.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
                // In arrival order, so each one finds what it would have found in the batch.
                for job in jobs {
                    let alone = one_transaction(&self.store, &job.op);
                    let _ = job
                        .reply
                        .send(deadline::within_opt(job.deadline, alone).await);
                }
            }
        }
    }
}

/// An operation that meets no other in flight runs alone, as the ledger's own one-operation
/// transaction (`ordered`): a lone transfer pays what `ordered` pays. Timed and counted like a
/// batch of one. Used by the worker for a batch of one and by callers on an idle partition.
pub(super) async fn apply_alone(
    store: &Store,
    counters: &Counters,
    op: &Op,
) -> Result<Transfer, Error> {
    let started = Instant::now();
    let outcome = one_transaction(store, op).await;
    record_batch(started, 1);
    counters.committed(1);
    outcome
}

async fn one_transaction(store: &Store, op: &Op) -> Result<Transfer, Error> {
    let operation = op.operation();
    match (op, op.new_transfer()) {
        (_, Some(t)) => crate::ledger::place_alone(store, operation, t).await,
        (Op::Settle { id, how, .. }, None) => {
            crate::ledger::settle_alone(store, operation, id, *how).await
        }
        (Op::Place { .. }, None) => Err(Error::invariant("a placement without its transfer")),
    }
}

fn record_batch(started: Instant, operations: usize) {
    metrics::histogram!(crate::telemetry::LEDGER_BATCH_SECONDS)
        .record(started.elapsed().as_secs_f64());
    metrics::histogram!(crate::telemetry::LEDGER_BATCH_OPERATIONS).record(operations as f64);
}

/// What one operation of the batch came to, before the writes tell the rows.
#[derive(Debug)]
enum Decision {
    /// Answered without writing: a replay of a journalled transfer, a conflict, a refusal.
    Done(Result<Transfer, Error>),
    /// Placed: new journal row `n` of this batch; `replayed` for a copy of it later in the
    /// batch.
    Placed { n: usize, replayed: bool },
    /// A settle that applied now, or the same post or void again: the transfer as it is after
    /// the batch.
    Settled { id: String, replayed: bool },
}

/// A settle's transfer as the batch knows it: read under the locks, or placed in this batch.
type States = HashMap<String, TransferState>;

/// The batch decided in memory: one decision per operation, the transfers to journal (indexes
/// into the batch, in order) and the holds whose status moves.
struct Plan {
    decisions: Vec<Decision>,
    placed: Vec<usize>,
    settled: BTreeMap<String, (TransferStatus, Option<i64>)>,
}

/// The batch transaction: (settles' accounts), lock, read, decide in arrival order, write
/// once, per-operation answers.
async fn apply_batch(
    client: &Client,
    layout: Layout,
    ops: &[&Op],
) -> Result<Vec<Result<Transfer, Error>>, Error> {
    let mut accounts: Vec<AccountId> = ops
        .iter()
        .filter_map(|o| o.new_transfer())
        .flat_map(|t| [t.movement.from, t.movement.to])
        .collect();
    // Settles: which accounts, known before the locks (the state is read again under them),
    // from the engine's memory of the holds it placed or else from the journal. An id without
    // a row then is unknown to this batch, whatever commits meanwhile.
    let mut known: Vec<String> = Vec::new();
    let mut settle_ids: Vec<&str> = Vec::new();
    for op in ops {
        match op {
            Op::Settle {
                id,
                sides: Some((from, to)),
                ..
            } => {
                accounts.extend([*from, *to]);
                known.push(id.as_str().to_owned());
            }
            Op::Settle {
                id, sides: None, ..
            } => settle_ids.push(id.as_str()),
            Op::Place { .. } => {}
        }
    }
    if !settle_ids.is_empty() {
        let sql = match layout {
            Layout::Single => SIDES_MANY,
            Layout::Citus => CITUS_SIDES_MANY,
        };
        let stmt = client.prepare_cached(sql).await?;
        for row in client.query(&stmt, &[&settle_ids]).await? {
            accounts.push(account_from_db(row.try_get("from_account")?)?);
            accounts.push(account_from_db(row.try_get("to_account")?)?);
            known.push(row.try_get("id")?);
        }
    }
    let place_ids: Vec<&str> = ops
        .iter()
        .filter(|o| matches!(o, Op::Place { .. }))
        .map(|o| o.id().as_str())
        .collect();
    // Pipelined: the lock goes out first and the server runs one connection's statements in
    // order, so the journal is read under the locks. (Were it read before them, a concurrent
    // copy committing in between would make our INSERT hit the key, and the batch would rerun
    // as a replay: still correct.)
    // (On Citus the locks are several statements, each awaited: the read follows them all.)
    // On Citus a settle stamps both sides with the coordinator's `now()`: the transaction's
    // start, the same value whenever read, so it is read here, before the locks, not while
    // they are held.
    let settled_at = match layout {
        Layout::Citus if ops.iter().any(|o| matches!(o, Op::Settle { .. })) => {
            Some(holds::coordinator_now(client).await?)
        }
        _ => None,
    };
    let (mut locked, found) = futures::try_join!(holds::lock(client, layout, &accounts), async {
        if place_ids.is_empty() {
            Ok(Vec::new())
        } else {
            journal::find_many(client, layout, &place_ids).await
        }
    })?;
    let found: HashMap<String, Transfer> = found
        .into_iter()
        .map(|t| (t.id.as_str().to_owned(), t))
        .collect();
    let mut states = if known.is_empty() {
        States::new()
    } else {
        read_states(client, layout, &known).await?
    };

    let plan = decide(ops, &mut locked, &found, &mut states);

    let placed: Vec<NewTransfer<'_>> = plan
        .placed
        .iter()
        .filter_map(|&i| ops.get(i).and_then(|o| o.new_transfer()))
        .collect();
    let (inserted, ()) = futures::try_join!(
        async {
            if placed.is_empty() {
                Ok(Vec::new())
            } else {
                journal::insert_many(client, layout, &placed, None).await
            }
        },
        holds::write(client, &locked)
    )?;
    if inserted.len() != placed.len() {
        return Err(Error::invariant(format!(
            "a ledger batch journalled {} of {} transfers",
            inserted.len(),
            placed.len()
        )));
    }
    // After the INSERT: a hold placed and settled in this batch is a row by now.
    write_settles(client, layout, &plan.settled, &states, settled_at).await?;
    let answered: Vec<&str> = plan
        .decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Settled { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    let settled: HashMap<String, Transfer> = if answered.is_empty() {
        HashMap::new()
    } else {
        journal::find_many(client, layout, &answered)
            .await?
            .into_iter()
            .map(|t| (t.id.as_str().to_owned(), t))
            .collect()
    };
    Ok(plan
        .decisions
        .into_iter()
        .map(|d| match d {
            Decision::Done(outcome) => outcome,
            Decision::Placed { n, replayed } => match inserted.get(n) {
                Some(t) => Ok(Transfer {
                    replayed,
                    ..t.clone()
                }),
                None => Err(Error::invariant(format!(
                    "journal row {n} of a batch missing"
                ))),
            },
            Decision::Settled { id, replayed } => match settled.get(&id) {
                Some(t) => Ok(Transfer {
                    replayed,
                    ..t.clone()
                }),
                None => Err(Error::invariant(format!("settled transfer {id} missing"))),
            },
        })
        .collect())
}

/// Decides every operation in arrival order on the locked rows, as the one-operation
/// transactions would one after the other: placements replay, conflict, are refused or placed
/// ([`apply::place`]); settles are refused, replayed or applied ([`apply::settle`]) on the
/// transfer's state as the batch left it. A refusal changes nothing.
fn decide(
    ops: &[&Op],
    locked: &mut Locked,
    found: &HashMap<String, Transfer>,
    states: &mut States,
) -> Plan {
    let mut plan = Plan {
        decisions: Vec::with_capacity(ops.len()),
        placed: Vec::new(),
        settled: BTreeMap::new(),
    };
    // Ids placed earlier in this batch → their new row number.
    let mut in_batch: HashMap<&str, usize> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        let decision = match op {
            Op::Place { id, .. } => {
                let Some(t) = op.new_transfer() else {
                    plan.decisions.push(Decision::Done(Err(Error::invariant(
                        "a placement without its transfer",
                    ))));
                    continue;
                };
                if let Some(existing) = found.get(id.as_str()) {
                    Decision::Done(journal::replay(existing.clone(), &t))
                } else if let Some(&n) = in_batch.get(id.as_str()) {
                    same_as_placed(ops, &plan.placed, n, &t)
                } else {
                    match apply::place(locked, &t) {
                        Err(refusal) => Decision::Done(Err(refusal)),
                        Ok(()) => {
                            in_batch.insert(id.as_str(), plan.placed.len());
                            states.insert(id.as_str().to_owned(), placed_state(&t));
                            plan.placed.push(i);
                            Decision::Placed {
                                n: plan.placed.len() - 1,
                                replayed: false,
                            }
                        }
                    }
                }
            }
            Op::Settle { id, how, .. } => match states.get_mut(id.as_str()) {
                None => Decision::Done(Err(Error::UnknownTransfer(id.clone()))),
                Some(state) => match apply::settle(locked, state, *how) {
                    Err(refusal) => Decision::Done(Err(refusal)),
                    Ok(outcome) => {
                        if outcome == Settled::Applied {
                            let change = (state.status, state.posted_amount);
                            plan.settled.insert(id.as_str().to_owned(), change);
                        }
                        Decision::Settled {
                            id: id.as_str().to_owned(),
                            replayed: outcome == Settled::Replayed,
                        }
                    }
                },
            },
        };
        plan.decisions.push(decision);
    }
    plan
}

/// A placement whose id was placed earlier in this batch: a replay of it, or a conflict.
fn same_as_placed(ops: &[&Op], placed: &[usize], n: usize, t: &NewTransfer<'_>) -> Decision {
    let first = placed
        .get(n)
        .and_then(|&i| ops.get(i))
        .and_then(|o| o.new_transfer());
    let same = first.is_some_and(|f| {
        let (a, b) = (&f.movement, &t.movement);
        (a.from, a.to, a.amount, a.kind) == (b.from, b.to, b.amount, b.kind)
            && f.pending.map(|p| p.secs()) == t.pending.map(|p| p.secs())
    });
    if same {
        Decision::Placed { n, replayed: true }
    } else {
        Decision::Done(Err(Error::TransferConflict(t.movement.id.clone())))
    }
}

/// The settle state of a transfer this batch placed (as `holds` would read it back).
fn placed_state(t: &NewTransfer<'_>) -> TransferState {
    TransferState {
        id: t.movement.id.clone(),
        from: t.movement.from,
        to: t.movement.to,
        amount: t.movement.amount.get(),
        status: t.status(),
        posted_amount: None,
        was_pending: t.pending.is_some(),
    }
}

/// The settle state of `ids` under the account locks.
async fn read_states(client: &Client, layout: Layout, ids: &[String]) -> Result<States, Error> {
    let sql = match layout {
        Layout::Single => STATE_MANY,
        Layout::Citus => CITUS_STATE_MANY,
    };
    let stmt = client.prepare_cached(sql).await?;
    let mut states = States::with_capacity(ids.len());
    for row in client.query(&stmt, &[&ids]).await? {
        let id: String = row.try_get("id")?;
        let state = holds::state_of(&row, TransferId::new(id.clone())?)?;
        states.insert(id, state);
    }
    Ok(states)
}

/// Moves every hold the batch settled out of `pending` in one statement: each was read
/// pending under its account locks, so each must move (both of its sides on Citus).
async fn write_settles(
    client: &Client,
    layout: Layout,
    settled: &BTreeMap<String, (TransferStatus, Option<i64>)>,
    states: &States,
    settled_at: Option<chrono::DateTime<chrono::Utc>>,
) -> Result<(), Error> {
    if settled.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = settled.keys().map(String::as_str).collect();
    let statuses: Vec<&str> = settled.values().map(|(s, _)| s.as_str()).collect();
    let posted: Vec<Option<i64>> = settled.values().map(|(_, p)| *p).collect();
    let (moved, rows) = match layout {
        Layout::Single => {
            let stmt = client.prepare_cached(SETTLE_MANY).await?;
            let moved = client.execute(&stmt, &[&ids, &statuses, &posted]).await?;
            (moved, ids.len())
        }
        Layout::Citus => {
            // Debit sides first, then credit sides: every array twice, in the same order.
            let mut accounts = Vec::with_capacity(ids.len() * 2);
            for side in [true, false] {
                for id in &ids {
                    let state = states.get(*id).ok_or_else(|| {
                        Error::invariant(format!("settled hold {id} has no state"))
                    })?;
                    accounts.push(if side { state.from } else { state.to }.get());
                }
            }
            let now = settled_at
                .ok_or_else(|| Error::invariant("a Citus batch settled holds without a time"))?;
            let stmt = client.prepare_cached(CITUS_SETTLE_MANY).await?;
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] = [
                &accounts,
                &journal::twice(&ids),
                &journal::twice(&statuses),
                &journal::twice(&posted),
                &now,
            ];
            (client.execute(&stmt, &params).await?, ids.len() * 2)
        }
    };
    if moved != rows as u64 {
        return Err(Error::invariant(format!(
            "a ledger batch settled {moved} of {rows} hold rows it read pending under their locks"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Amount, TransferTimeout};
    use crate::ledger::apply::{AccountRow, Settle};
    use crate::ledger::types::TransferKind;

    fn account(n: i64) -> AccountId {
        if n == 0 {
            AccountId::SYSTEM
        } else {
            AccountId::new(n).expect("account")
        }
    }

    fn row(n: i64, balance: i64) -> AccountRow {
        AccountRow {
            id: account(n),
            balance,
            held: 0,
            pending_credits: 0,
            min_balance: (n != 0).then_some(0),
            max_balance: None,
        }
    }

    fn place(id: &str, from: i64, to: i64, amount: i64, pending: bool) -> Op {
        let kind = match (from, to) {
            (0, _) => TransferKind::Deposit,
            (_, 0) => TransferKind::Withdrawal,
            _ => TransferKind::Transfer,
        };
        Op::Place {
            id: TransferId::new(id).expect("id"),
            from: account(from),
            to: account(to),
            amount: Amount::new(amount).expect("amount"),
            kind,
            pending: pending.then(TransferTimeout::default),
        }
    }

    fn settle(id: &str, how: Settle) -> Op {
        Op::Settle {
            id: TransferId::new(id).expect("id"),
            how,
            sides: None,
        }
    }

    fn shapes(plan: &Plan) -> Vec<String> {
        plan.decisions
            .iter()
            .map(|d| match d {
                Decision::Placed { n, replayed } => format!("placed {n} {replayed}"),
                Decision::Settled { id, replayed } => format!("settled {id} {replayed}"),
                Decision::Done(Err(e)) => format!("{e:?}")
                    .split([' ', '(', '{'])
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
                Decision::Done(Ok(_)) => "found".to_owned(),
            })
            .collect()
    }

    #[test]
    fn operations_are_decided_in_arrival_order_and_a_refusal_spares_the_rest() {
        let ops = [
            place("a", 1, 2, 60, false),
            place("b", 1, 2, 60, false), // 40 left: refused
            place("c", 2, 1, 10, false),
            place("a", 1, 2, 60, false), // a replay of "a" inside the batch
            place("a", 1, 2, 61, false), // the same id, another payload
            place("d", 1, 9, 1, false),  // unknown account
            place("e", 0, 1, 5, false),  // the system account may go negative
            place("h", 1, 2, 50, true),  // a hold of the last 55 but 5
            place("i", 1, 2, 6, false),  // 5 available: refused
            settle("h", Settle::Void),   // placed in this batch: void it
            place("i", 1, 2, 6, false),  // released: now it goes through
            settle("h", Settle::Void),   // the same void again
            settle("h", Settle::Post(None)),
            settle("zz", Settle::Void), // unknown
        ];
        let ops: Vec<&Op> = ops.iter().collect();
        let mut locked = Locked::new([row(0, 0), row(1, 100), row(2, 0)]);
        let plan = decide(&ops, &mut locked, &HashMap::new(), &mut States::new());
        assert_eq!(
            shapes(&plan),
            [
                "placed 0 false",
                "InsufficientFunds",
                "placed 1 false",
                "placed 0 true",
                "TransferConflict",
                "UnknownAccount",
                "placed 2 false",
                "placed 3 false",
                "InsufficientFunds",
                "settled h false",
                "placed 4 false",
                "settled h true",
                "TransferNotPending",
                "UnknownTransfer",
            ]
        );
        assert_eq!(plan.placed, [0, 2, 6, 7, 10]);
        let balance = |n| locked.get(account(n)).map(|r| (r.balance, r.held));
        assert_eq!(balance(0).ok(), Some((-5, 0)));
        assert_eq!(balance(1).ok(), Some((100 - 60 + 10 + 5 - 6, 0)));
        assert_eq!(balance(2).ok(), Some((60 - 10 + 6, 0)));
        assert_eq!(plan.settled.get("h"), Some(&(TransferStatus::Voided, None)));
    }

    #[test]
    fn overflow_is_refused_typed_and_leaves_the_rows_alone() {
        let ops = [place("a", 0, 1, 10, false)];
        let ops: Vec<&Op> = ops.iter().collect();
        let mut locked = Locked::new([row(0, 0), row(1, i64::MAX - 5)]);
        let plan = decide(&ops, &mut locked, &HashMap::new(), &mut States::new());
        assert!(plan.placed.is_empty());
        assert!(matches!(
            plan.decisions[0],
            Decision::Done(Err(Error::BalanceOutOfRange { .. }))
        ));
        assert_eq!(locked.changed().count(), 0);
    }
}
