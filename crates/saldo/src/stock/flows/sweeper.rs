//! The expiry job: active reservations past `expires_at` become `expired` and their units
//! return to `available`. `FOR UPDATE SKIP LOCKED` lets many sweepers run at once and skips
//! rows a confirm is holding; the `status = 'active'` condition gives a confirm racing an
//! expiry exactly one winner. A deadlock or serialization failure simply ends the round.
//!
//! The same rounds run for a few products on demand ([`reclaim`]): before a take is refused for
//! want of stock, what lapsed on its product is expired, so a unit held by a reservation past
//! its expiry is never refused to a buyer because the job has not come round yet.

use crate::domain::ProductId;
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::decide::settle::{moves, Settling};
use crate::stock::flows::settle::settle;
use crate::stock::movements::MoveKind;
use crate::stock::rows::reservations;
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::{checkout, in_transaction, RetryPolicy, TxOptions};

/// Rows expired per transaction.
pub const SWEEP_BATCH: i64 = 500;
/// Batches per round at most, so one round is bounded even under a flood of expiries.
pub const MAX_BATCHES_PER_ROUND: usize = 1_000;

/// Expires due reservations in bounded batches until none are due; returns how many expired.
pub async fn sweep(store: &Store) -> Result<u64, Error> {
    sweep_with_batch(store, SWEEP_BATCH).await
}

pub async fn sweep_with_batch(store: &Store, batch: i64) -> Result<u64, Error> {
    sweep_rounds(store, batch, Due::All).await
}

/// Expires the due reservations of `products` (a take was just refused on one of them), in
/// bounded batches; returns how many expired. Capacity held by a reservation past its expiry
/// is free whether or not the sweeper has run: the engine calls this before it answers
/// "insufficient stock", then tries once more.
pub(crate) async fn reclaim(store: &Store, products: &[ProductId]) -> Result<u64, Error> {
    let mut products: Vec<i64> = products.iter().map(|p| p.get()).collect();
    products.sort_unstable();
    products.dedup();
    let client = checkout(&store.pool, Operation::Sweep).await?;
    let due = reservations::any_due_of(&Tx::new(&client, store.dialect()), &products).await?;
    drop(client);
    if !due {
        return Ok(0);
    }
    sweep_rounds(store, SWEEP_BATCH, Due::Of(&products)).await
}

/// Which due rows a round takes.
#[derive(Clone, Copy)]
enum Due<'a> {
    /// Any product's, oldest expiry first.
    All,
    /// Those of these products (ascending).
    Of(&'a [i64]),
}

async fn sweep_rounds(store: &Store, batch: i64, due: Due<'_>) -> Result<u64, Error> {
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
                tx.cause(MoveKind::Expire.cause());
                let rows = match due {
                    Due::All => reservations::lock_due(&tx, batch).await?,
                    Due::Of(products) => reservations::lock_due_of(&tx, products, batch).await?,
                };
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
