//! The sweeper: holds past their deadline expire in bounded batches, each its own transaction.
//! A batch reads due holds without locking them, locks their accounts with `SKIP LOCKED`
//! (never waiting, never in a cycle), expires only those whose two accounts it got (the rest
//! wait for the next round), and releases them through the state machine as a post or void of
//! a due hold would. No retry: the next round picks up whatever this one did not finish.
//!
//! The same batches run for one account on demand ([`reclaim`]): before a movement is refused
//! for want of funds (or of room under `max_balance`), the holds past their deadline that the
//! account is a side of are expired, so money held past a deadline is never refused because the
//! sweeper has not come round yet.

use std::collections::HashSet;
use std::future::Future;

use crate::domain::{AccountId, MAX_GROUP_TRANSFERS};
use crate::error::Error;
use crate::ledger::apply;
use crate::ledger::rows::{accounts, settles};
use crate::ledger::transitions::Settle;
use crate::operation::Operation;
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::{checkout, in_transaction, RetryPolicy, TxOptions};

/// Holds expired per sweeper transaction.
pub const EXPIRE_BATCH: i64 = 500;
/// Batches per sweeper round at most, so one round is bounded even under a flood of expiries.
pub const MAX_EXPIRE_BATCHES_PER_ROUND: usize = 1_000;

/// Expires due holds in batches of `batch` (clamped to 1..=[`EXPIRE_BATCH`]) until none are
/// due or the rest are locked by someone else; returns how many expired.
pub(crate) async fn expire_due(store: &Store, batch: i64) -> Result<u64, Error> {
    expire_rounds(store, batch, None).await
}

/// Expires the due holds `account` is a side of (a movement was just refused on it); returns
/// how many expired.
pub(crate) async fn reclaim(store: &Store, account: AccountId) -> Result<u64, Error> {
    // A probe first, outside any transaction: a refusal with nothing due costs two reads.
    let client = checkout(&store.pool, Operation::ExpireHolds).await?;
    let tx = Tx::new(&client, store.dialect());
    let now = settles::now(&tx).await?;
    let due = settles::due(&tx, 1, now, Some(account)).await?;
    drop(client);
    if due.is_empty() {
        return Ok(0);
    }
    expire_rounds(store, EXPIRE_BATCH, Some(account)).await
}

async fn expire_rounds(
    store: &Store,
    batch: i64,
    account: Option<AccountId>,
) -> Result<u64, Error> {
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
            |client| crate::write_tx!(client, writer => |tx| expire_batch(tx.clone(), batch, account)),
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

/// One batch: up to `batch` due holds whose accounts no one else holds locked expire. For one
/// account's reclaim, the accounts are locked waiting (ascending, by one statement, in a
/// transaction of its own that holds nothing else: no cycle): the caller was just refused on
/// that account and may be contending for it.
async fn expire_batch(tx: Tx<'_>, batch: i64, account: Option<AccountId>) -> Result<u64, Error> {
    let now = settles::now(&tx).await?;
    let due = settles::due(&tx, batch, now, account).await?;
    if due.is_empty() {
        return Ok(0);
    }
    let sides: Vec<_> = due.iter().flat_map(|(_, from, to)| [*from, *to]).collect();
    let mut locked = match account {
        None => accounts::lock_free(&tx, &sides).await?,
        Some(_) => accounts::lock(&tx, &sides).await?,
    };
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

/// The account a refusal was for want of funds or of room under `max_balance` (a group's
/// refusal: its refused transfer's).
fn short_account(e: &Error) -> Option<AccountId> {
    match e {
        Error::InsufficientFunds { account, .. } | Error::MaxBalanceExceeded { account, .. } => {
            Some(*account)
        }
        Error::GroupRefused { source, .. } => short_account(source),
        _ => None,
    }
}

/// Runs `operation`; while it is refused for want of funds or room on an account not reclaimed
/// yet, and expiring that account's due holds frees something, runs it again. Bounded: each
/// account at most once, at most as many as a group has sides. The refusal is the answer when
/// nothing was due (the common case: one indexed read) or when reclaiming fails (logged).
/// Running again is safe: a refused movement wrote nothing, so the next attempt is the same
/// request as a client's retry.
pub(crate) async fn reclaiming<T, F, Fut>(store: &Store, operation: F) -> Result<T, Error>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut reclaimed: HashSet<AccountId> = HashSet::new();
    loop {
        let result = operation().await;
        let Some(account) = result.as_ref().err().and_then(short_account) else {
            return result;
        };
        if reclaimed.len() >= 2 * MAX_GROUP_TRANSFERS || !reclaimed.insert(account) {
            return result;
        }
        match reclaim(store, account).await {
            Ok(0) => return result,
            Ok(expired) => {
                tracing::debug!(%account, expired, "expired due holds of a refused movement");
                metrics::counter!(crate::telemetry::TRANSFERS, "kind" => "expire", "outcome" => "applied")
                    .increment(expired);
            }
            Err(e) => {
                tracing::warn!(%account, error = %e, "could not expire due holds");
                return result;
            }
        }
    }
}
