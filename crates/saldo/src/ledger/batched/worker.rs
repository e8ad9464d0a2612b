//! One ledger partition's batches, run by the shared worker (`crate::batch::worker`: its
//! loop, and the preamble that answers late jobs and runs the rest under their deadlines):
//! a lone operation as the ledger's own one-operation transaction, several as one batch
//! transaction (`super::batch`), every waiter answered.
//!
//! Business refusals are per-operation answers inside a committed batch, so one bad transfer
//! never fails its batch-mates. Only a database failure fails a batch: 40P01/40001 rerun it
//! whole (`retry::in_transaction`), the unique violation of a concurrent copy reruns it as a
//! replay (`in_idempotent_transaction`), anything else replays its operations one by one as
//! their own transactions, in arrival order, each under its own deadline.

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::batch::apply_batch;
use super::job::{Job, Op};
use crate::batch::lane::Counters;
use crate::batch::worker::Worker;
use crate::error::Error;
use crate::ledger::flows::{place, settle};
use crate::ledger::sql;
use crate::ledger::types::Transfer;
use crate::operation::Operation;
use crate::store::deadline;
use crate::store::handle::Store;
use crate::store::retry::in_idempotent_transaction;

/// A batch of one: the ledger's own one-operation transaction.
pub(super) async fn run_alone(worker: &Worker, job: Job) {
    let answer = apply_alone(&worker.store, &worker.counters, &job.op).await;
    // The caller may have gone; its answer has nowhere to go.
    let _ = job.reply.send(answer);
}

/// Several operations in one transaction, each answered.
pub(super) async fn run_batch(worker: &Worker, jobs: Vec<Job>) {
    let started = Instant::now();
    let ops: Vec<&Op> = jobs.iter().map(|j| &j.op).collect();
    let ops = &ops[..];
    let dialect = worker.store.dialect();
    let writer = worker.store.writer();
    let result = in_idempotent_transaction(
        &worker.store.pool,
        &worker.tx,
        Operation::LedgerBatch,
        sql::transfers_key(dialect),
        move |client| crate::write_tx!(client, writer => |tx| apply_batch(tx.clone(), ops)),
    )
    .await;
    record_batch(started, jobs.len());
    match result {
        Ok(outcomes) if outcomes.len() == jobs.len() => {
            worker.counters.committed(jobs.len());
            for (job, outcome) in jobs.into_iter().zip(outcomes) {
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
        Err(e) => one_by_one(worker, jobs, &e).await,
    }
}

/// A failed batch: each operation as its own transaction, in arrival order (so each finds what
/// it would have found in the batch), under its own deadline.
async fn one_by_one(worker: &Worker, jobs: Vec<Job>, e: &Error) {
    tracing::warn!(
        partition = worker.partition,
        operations = jobs.len(),
        error = %e,
        "ledger batch failed; answering its operations one by one"
    );
    worker.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
    for job in jobs {
        let alone = one_transaction(&worker.store, &job.op);
        let _ = job
            .reply
            .send(deadline::within_opt(job.deadline, alone).await);
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
        (_, Some(t)) => place::place_alone(store, operation, t).await,
        (Op::Settle { id, how, .. }, None) => {
            settle::settle_alone(store, operation, id, *how).await
        }
        (Op::Place { .. }, None) => Err(Error::invariant("a placement without its transfer")),
    }
}

fn record_batch(started: Instant, operations: usize) {
    metrics::histogram!(crate::telemetry::LEDGER_BATCH_SECONDS)
        .record(started.elapsed().as_secs_f64());
    metrics::histogram!(crate::telemetry::LEDGER_BATCH_OPERATIONS).record(operations as f64);
}
