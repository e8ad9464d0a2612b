//! The expiry job: active reservations past `expires_at` become `expired` and their units
//! return to `available`. `FOR UPDATE SKIP LOCKED` lets many sweepers run at once and skips
//! rows a confirm is holding; the `status = 'active'` condition gives a confirm racing an
//! expiry exactly one winner. A deadlock or serialization failure simply ends the round.

use crate::error::Error;
use crate::operation::Operation;
use crate::stock::decide::settle::{moves, Settling};
use crate::stock::flows::settle::settle;
use crate::stock::rows::reservations;
use crate::store::handle::Store;
use crate::store::retry::{in_transaction, RetryPolicy, TxOptions};

/// Rows expired per transaction.
pub const SWEEP_BATCH: i64 = 500;
/// Batches per round at most, so one round is bounded even under a flood of expiries.
pub const MAX_BATCHES_PER_ROUND: usize = 1_000;

/// Expires due reservations in bounded batches until none are due; returns how many expired.
pub async fn sweep(store: &Store) -> Result<u64, Error> {
    sweep_with_batch(store, SWEEP_BATCH).await
}

pub async fn sweep_with_batch(store: &Store, batch: i64) -> Result<u64, Error> {
    let batch = batch.clamp(1, SWEEP_BATCH);
    // No retry here: the next round picks up whatever this one did not finish.
    // Settling up to 500 ids by `id = ANY($1)`: see `TxOptions::index_paths_only`.
    let options = TxOptions {
        retry: RetryPolicy::none(),
        index_paths_only: true,
        ..store.tx.clone()
    };
    let writer = store.writer();
    let mut total = 0u64;
    for _ in 0..MAX_BATCHES_PER_ROUND {
        let result = in_transaction(&store.pool, &options, Operation::Sweep, move |client| {
            crate::write_tx!(client, writer => |tx| async {
                let rows = reservations::lock_due(&tx, batch).await?;
                let moves = moves(&rows, Settling::Expire);
                // The other rows of these orders are not locked here: their last positions are
                // read (a concurrent writer of the same order meets this one on the events'
                // unique index; see `order_events`).
                let mut orders: Vec<&str> = rows.iter().map(|r| r.order_id.as_str()).collect();
                orders.sort_unstable();
                orders.dedup();
                let last = reservations::positions(&tx, &orders).await?;
                settle(&tx, &moves, &last).await?;
                Ok(rows.len() as u64)
            })
        })
        .await;
        match result {
            Ok(n) => {
                total += n;
                crate::telemetry::settled("expired", n);
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
