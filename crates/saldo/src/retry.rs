//! The one transaction-retry mechanism (seed 002) that every write path uses.
//!
//! The WHOLE transaction reruns from BEGIN, and only for SQLSTATE 40P01 (deadlock detected) and
//! 40001 (serialization failure): those leave no effect behind. Business refusals, unique
//! violations and syntax errors would fail the same way again, so they surface at once.
//! Attempts are bounded, backoff is exponential with full jitter, the connection goes back to
//! the pool before sleeping, and every retry and give-up is counted by SQLSTATE.

use std::time::Duration;

use deadpool_postgres::{Client, Pool};
use futures::future::BoxFuture;
use rand::Rng;

use crate::error::Error;
use crate::telemetry;

/// How a failed transaction is rerun.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Total attempts including the first (default 4, seed 002).
    pub max_attempts: u32,
    /// Backoff before attempt n is uniform in `0..min(max, base * 2^n)`.
    pub base_backoff_ms: u64,
    pub max_backoff_ms: u64,
}

/// Hard ceiling on attempts, whatever the configuration says.
pub const MAX_ATTEMPTS_LIMIT: u32 = 32;

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            base_backoff_ms: 5,
            max_backoff_ms: 500,
        }
    }
}

impl RetryPolicy {
    /// No retries: the lab uses this to show what a deadlock looks like to a caller.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let cap = self
            .base_backoff_ms
            .saturating_mul(1u64 << attempt.min(20))
            .min(self.max_backoff_ms);
        if cap == 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(rand::rng().random_range(0..=cap))
    }
}

/// Per-transaction settings.
#[derive(Debug, Clone)]
pub struct TxOptions {
    /// `SET LOCAL lock_timeout` (default 5 s, seed 002).
    pub lock_timeout_ms: u64,
    /// `SET LOCAL statement_timeout` (default 10 s).
    pub statement_timeout_ms: u64,
    pub retry: RetryPolicy,
}

impl Default for TxOptions {
    fn default() -> Self {
        TxOptions {
            lock_timeout_ms: 5_000,
            statement_timeout_ms: 10_000,
            retry: RetryPolicy::default(),
        }
    }
}

/// Runs `work` inside BEGIN … COMMIT, rerunning the whole transaction on 40P01/40001.
///
/// `work` must have no external effect: it may run several times.
/// The future a transaction body returns: it owns the connection for the duration of the
/// attempt and hands it back with its result (owning it avoids a higher-ranked borrow).
pub type TxFuture<'a, T> = BoxFuture<'a, (Client, Result<T, Error>)>;

/// Wraps a body written against `&Client` into a [`TxFuture`].
#[macro_export]
macro_rules! tx_body {
    ($client:ident => $body:expr) => {
        ::futures::FutureExt::boxed(async move {
            let result = {
                let $client = &$client;
                $body.await
            };
            ($client, result)
        })
    };
}

pub async fn in_transaction<'a, T, F>(
    pool: &Pool,
    options: &TxOptions,
    operation: &'static str,
    mut work: F,
) -> Result<T, Error>
where
    F: FnMut(Client) -> TxFuture<'a, T>,
{
    let max_attempts = options.retry.max_attempts.clamp(1, MAX_ATTEMPTS_LIMIT);
    let begin = format!(
        "BEGIN; SET LOCAL lock_timeout = {}; SET LOCAL statement_timeout = {}",
        options.lock_timeout_ms, options.statement_timeout_ms
    );
    let mut attempt = 1;
    loop {
        let result = {
            let client = pool.get().await.map_err(|e| Error::Pool(e.to_string()))?;
            let (client, result) = run_once(client, &begin, &mut work).await;
            if result.is_err() {
                // The transaction may be open or aborted; a failed ROLLBACK means the connection
                // is gone, and the pool drops closed connections on their next checkout.
                let _ = client.batch_execute("ROLLBACK").await;
            }
            result
            // The client is returned to the pool here, before any sleep.
        };
        match result {
            Err(e) if e.is_retryable() => {
                let sqlstate = e.sqlstate().map_or("", |s| s.code()).to_owned();
                if attempt >= max_attempts {
                    telemetry::tx_giveup(operation, &sqlstate);
                    return Err(match e {
                        Error::Database(source) => Error::RetriesExhausted {
                            attempts: attempt,
                            sqlstate,
                            source,
                        },
                        other => other,
                    });
                }
                telemetry::tx_retry(operation, &sqlstate);
                tracing::debug!(operation, attempt, sqlstate, "retrying transaction");
                tokio::time::sleep(options.retry.backoff(attempt)).await;
                attempt += 1;
            }
            other => {
                if let Err(e) = &other {
                    telemetry::observe_error(operation, e);
                }
                return other;
            }
        }
    }
}

async fn run_once<'a, T, F>(client: Client, begin: &str, work: &mut F) -> (Client, Result<T, Error>)
where
    F: FnMut(Client) -> TxFuture<'a, T>,
{
    if let Err(e) = client.batch_execute(begin).await {
        return (client, Err(e.into()));
    }
    let (client, result) = work(client).await;
    match result {
        Ok(value) => match client.batch_execute("COMMIT").await {
            Ok(()) => (client, Ok(value)),
            Err(e) => (client, Err(e.into())),
        },
        Err(e) => (client, Err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_bounded_by_the_cap() {
        let p = RetryPolicy {
            max_attempts: 4,
            base_backoff_ms: 10,
            max_backoff_ms: 50,
        };
        for attempt in 0..40 {
            assert!(p.backoff(attempt) <= Duration::from_millis(50));
        }
    }
}
