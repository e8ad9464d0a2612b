//! The sweeper: holds past their deadline expire in bounded batches, each its own transaction.
//! A batch reads due holds without locking them, locks their accounts with `SKIP LOCKED`
//! (never waiting, never in a cycle), expires only those whose two accounts it got (the rest
//! wait for the next round), and releases them through the state machine as a post or void of
//! a due hold would. No retry: the next round picks up whatever this one did not finish.

use crate::error::Error;
use crate::ledger::apply;
use crate::ledger::rows::{accounts, settles};
use crate::ledger::transitions::Settle;
use crate::operation::Operation;
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::{in_transaction, RetryPolicy, TxOptions};

/// Holds expired per sweeper transaction.
pub const EXPIRE_BATCH: i64 = 500;
/// Batches per sweeper round at most, so one round is bounded even under a flood of expiries.
pub const MAX_EXPIRE_BATCHES_PER_ROUND: usize = 1_000;

/// Expires due holds in batches of `batch` (clamped to 1..=[`EXPIRE_BATCH`]) until none are
/// due or the rest are locked by someone else; returns how many expired.
pub(crate) async fn expire_due(store: &Store, batch: i64) -> Result<u64, Error> {
    let batch = batch.clamp(1, EXPIRE_BATCH);
    let options = TxOptions {
        retry: RetryPolicy::none(),
        ..store.tx.clone()
    };
    let writer = store.writer();
    let mut total = 0u64;
    for _ in 0..MAX_EXPIRE_BATCHES_PER_ROUND {
        let result = in_transaction(
            &store.pool,
            &options,
            Operation::ExpireHolds,
            |client| crate::write_tx!(client, writer => |tx| expire_batch(tx.clone(), batch)),
        )
        .await;
        match result {
            Ok(n) => {
                total += n;
                metrics::counter!(crate::telemetry::TRANSFERS, "kind" => "expire", "outcome" => "applied")
                    .increment(n);
                if n < batch as u64 {
                    break;
                }
            }
            Err(Error::RetriesExhausted { .. }) => break,
            Err(e) if e.is_retryable() => break,
            Err(e) => return Err(e),
        }
    }
    Ok(total)
}

/// One batch: up to `batch` due holds whose accounts no one else holds locked expire.
async fn expire_batch(tx: Tx<'_>, batch: i64) -> Result<u64, Error> {
    let now = settles::now(&tx).await?;
    let due = settles::due(&tx, batch, now).await?;
    if due.is_empty() {
        return Ok(0);
    }
    let sides: Vec<_> = due.iter().flat_map(|(_, from, to)| [*from, *to]).collect();
    let mut locked = accounts::lock_free(&tx, &sides).await?;
    let ids: Vec<String> = due
        .into_iter()
        .filter(|(_, from, to)| locked.get(*from).is_ok() && locked.get(*to).is_ok())
        .map(|(id, _, _)| id)
        .collect();
    // Moved from pending just now, under our locks, and due at `now` by the statement itself.
    let expired = settles::expire(&tx, &ids, now).await?;
    for mut state in expired.iter().cloned() {
        apply::settle(&mut locked, &mut state, Settle::Expire, now)?;
    }
    accounts::write(&tx, &locked).await?;
    Ok(expired.len() as u64)
}
