//! The one transaction-retry mechanism every write path uses.
//!
//! The WHOLE transaction reruns from BEGIN, and only for SQLSTATE 40P01 (deadlock detected) and
//! 40001 (serialization failure): those leave no effect behind. Business refusals, unique
//! violations and syntax errors would fail the same way again, so they surface at once.
//! Attempts are bounded, backoff is exponential with full jitter, the connection goes back to
//! the pool before sleeping, and every retry and give-up is counted by SQLSTATE (the
//! `saldo_tx_retries_total` / `saldo_tx_giveups_total` counters, and optionally a [`TxStats`]
//! the caller can read, because a retry that works silently hides a deadlock).
//!
//! Defaults ([`TxOptions::default`]): 4 attempts in all, backoff before retry n uniform in
//! `0..=min(500 ms, 5 ms × 2^n)`, `lock_timeout` 5 s, `statement_timeout` 10 s. Change them with
//! the builders, e.g. `TxOptions::default().with_lock_timeout_ms(2_000)
//! .with_retry(RetryPolicy::default().with_max_attempts(8))`; [`RetryPolicy::none`] disables
//! retries (the race lab uses it to show the bare deadlock).
//!
//! [`in_idempotent_transaction`] also reruns, bounded, when a concurrent copy of the same
//! idempotent request won the insert race (a unique violation of its key), and [`checkout`] is
//! the one way a connection is taken outside a transaction.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Client, Pool};
use futures::future::BoxFuture;
use rand::Rng;
use tokio_postgres::error::SqlState;

use crate::error::Error;
use crate::operation::Operation;
use crate::store::deadline;
use crate::telemetry;

/// Default total attempts, the first included.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 4;
/// Default base of the exponential backoff.
pub const DEFAULT_BASE_BACKOFF_MS: u64 = 5;
/// Default ceiling of one backoff.
pub const DEFAULT_MAX_BACKOFF_MS: u64 = 500;
/// Default per-transaction `lock_timeout`: fail fast instead of waiting forever on a
/// row held by a forgotten transaction.
pub const DEFAULT_LOCK_TIMEOUT_MS: u64 = 5_000;
/// Default per-transaction `statement_timeout`.
pub const DEFAULT_STATEMENT_TIMEOUT_MS: u64 = 10_000;
/// Hard ceiling on attempts, whatever the configuration says.
pub const MAX_ATTEMPTS_LIMIT: u32 = 32;
/// Hard ceiling on one backoff, whatever the configuration says.
pub const MAX_BACKOFF_LIMIT_MS: u64 = 10_000;
/// Hard ceiling on both timeouts (0 would mean "no timeout" to PostgreSQL, so it is refused too).
pub const MAX_TIMEOUT_MS: u64 = 600_000;

/// How a failed transaction is rerun.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts including the first (default [`DEFAULT_MAX_ATTEMPTS`]); clamped to
    /// `1..=`[`MAX_ATTEMPTS_LIMIT`] when used.
    pub max_attempts: u32,
    /// Backoff before retry n is uniform in `0..=min(max, base * 2^n)` (full jitter).
    pub base_backoff_ms: u64,
    /// Ceiling of one backoff; clamped to [`MAX_BACKOFF_LIMIT_MS`] when used.
    pub max_backoff_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            base_backoff_ms: DEFAULT_BASE_BACKOFF_MS,
            max_backoff_ms: DEFAULT_MAX_BACKOFF_MS,
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

    /// Total attempts, the first included (1 = no retry).
    pub fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Base and ceiling of the exponential backoff.
    pub fn with_backoff_ms(mut self, base_ms: u64, max_ms: u64) -> Self {
        self.base_backoff_ms = base_ms;
        self.max_backoff_ms = max_ms;
        self
    }

    /// The attempts actually made at most.
    pub fn effective_max_attempts(&self) -> u32 {
        self.max_attempts.clamp(1, MAX_ATTEMPTS_LIMIT)
    }

    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let cap = self
            .base_backoff_ms
            .saturating_mul(1u64 << attempt.min(20))
            .min(self.max_backoff_ms)
            .min(MAX_BACKOFF_LIMIT_MS);
        if cap == 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(rand::rng().random_range(0..=cap))
    }
}

/// Counts what [`in_transaction`] did for every transaction run with the [`TxOptions`] that carry
/// it: the per-store, per-test view of the global retry counters.
#[derive(Debug, Default)]
pub struct TxStats {
    attempts: AtomicU64,
    deadlock_retries: AtomicU64,
    serialization_retries: AtomicU64,
    giveups: AtomicU64,
}

impl TxStats {
    pub fn new() -> Arc<Self> {
        Arc::new(TxStats::default())
    }
    /// Transaction attempts started (first runs and reruns).
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }
    /// Reruns after 40P01.
    pub fn deadlock_retries(&self) -> u64 {
        self.deadlock_retries.load(Ordering::Relaxed)
    }
    /// Reruns after 40001.
    pub fn serialization_retries(&self) -> u64 {
        self.serialization_retries.load(Ordering::Relaxed)
    }
    /// All reruns.
    pub fn retries(&self) -> u64 {
        self.deadlock_retries() + self.serialization_retries()
    }
    /// Transactions that failed with 40P01/40001 on their last allowed attempt.
    pub fn giveups(&self) -> u64 {
        self.giveups.load(Ordering::Relaxed)
    }

    fn retried(&self, sqlstate: &str) {
        if sqlstate == SqlState::T_R_DEADLOCK_DETECTED.code() {
            self.deadlock_retries.fetch_add(1, Ordering::Relaxed);
        } else {
            self.serialization_retries.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Per-transaction settings. Build with [`TxOptions::default`] and the `with_*` methods.
#[derive(Debug, Clone)]
pub struct TxOptions {
    /// `SET LOCAL lock_timeout` (default [`DEFAULT_LOCK_TIMEOUT_MS`]); clamped to
    /// `1..=`[`MAX_TIMEOUT_MS`].
    pub lock_timeout_ms: u64,
    /// `SET LOCAL statement_timeout` (default [`DEFAULT_STATEMENT_TIMEOUT_MS`]); clamped likewise.
    pub statement_timeout_ms: u64,
    pub retry: RetryPolicy,
    /// `SET LOCAL enable_seqscan = off`, for transactions that look rows up by batches of keys
    /// (`= ANY($1)` with hundreds of elements), where a sequential scan is never the right plan.
    /// Until autovacuum has analysed `reservations` (the first minute or two of a fresh
    /// deployment) the planner prices 128 keys at 128 × 0.5% of the table and picks a parallel
    /// sequential scan whose cost grows with every insert: a fresh service was measured falling
    /// from 7.7k to 4k reservations/s through HTTP until autoanalyze ran, then 13.8k/s
    /// (BENCHMARKS.md). Default off.
    pub index_paths_only: bool,
    /// On a Citus coordinator: `SET LOCAL citus.propagate_set_commands = 'local'` first, so the
    /// timeouts below reach the workers' sessions too (a statement routed to a worker waits for
    /// its row lock there, where the coordinator's `lock_timeout` does not apply). And one
    /// connection per worker (`citus.max_adaptive_executor_pool_size = 1`): a multi-shard
    /// write then has one 2PC participant per worker, not one per shard (a batch's 32 router
    /// rows: 26 ms → 6 ms; its reservation INSERT: 11 → 3 ms, on the 2-worker cluster). Set by
    /// `stock::Store::with_layout`; default off.
    pub citus: bool,
    /// Optional per-caller counters (tests, the race lab); the metrics are recorded regardless.
    pub stats: Option<Arc<TxStats>>,
}

impl Default for TxOptions {
    fn default() -> Self {
        TxOptions {
            lock_timeout_ms: DEFAULT_LOCK_TIMEOUT_MS,
            statement_timeout_ms: DEFAULT_STATEMENT_TIMEOUT_MS,
            retry: RetryPolicy::default(),
            index_paths_only: false,
            citus: false,
            stats: None,
        }
    }
}

impl TxOptions {
    pub fn with_lock_timeout_ms(mut self, ms: u64) -> Self {
        self.lock_timeout_ms = ms;
        self
    }
    pub fn with_statement_timeout_ms(mut self, ms: u64) -> Self {
        self.statement_timeout_ms = ms;
        self
    }
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }
    pub fn with_index_paths_only(mut self) -> Self {
        self.index_paths_only = true;
        self
    }
    pub fn with_stats(mut self, stats: Arc<TxStats>) -> Self {
        self.stats = Some(stats);
        self
    }
}

/// The future a transaction body returns: it owns the connection for the duration of the
/// attempt and hands it back with its result (owning it avoids a higher-ranked borrow).
pub type TxFuture<'a, T> = BoxFuture<'a, (TxClient, Result<T, Error>)>;

/// A pooled connection with a transaction open on it. It derefs to [`Client`], so bodies use it
/// like one.
///
/// Why it exists: when the future running a transaction is dropped part-way (an HTTP client hung
/// up, a timeout or `select!` fired), a plain pooled client would go back to the pool with the
/// transaction still open, and the next user of that connection would COMMIT the abandoned half
/// (units taken with no reservation row). Dropped before `TxClient::finish`, this guard
/// detaches the connection from the pool instead, which closes it; the server then rolls the
/// transaction back and releases its row locks.
pub struct TxClient {
    /// `Some` from creation until `finish` or drop.
    client: Option<Client>,
    /// The events the body made, appended in the COMMIT's round trip.
    events: Vec<crate::store::outbox::NewEvent>,
    /// The stock movements the body made (V22), appended with them, and the layout they are
    /// written for.
    moves: Vec<crate::store::journal::NewMovement>,
    citus: bool,
}

impl TxClient {
    fn new(client: Client) -> Self {
        TxClient {
            client: Some(client),
            events: Vec::new(),
            moves: Vec::new(),
            citus: false,
        }
    }

    /// Hands a body's events to its COMMIT (`write_tx!` calls this once the body succeeded).
    #[doc(hidden)]
    pub fn append_at_commit(
        &mut self,
        (events, moves, citus): (
            Vec<crate::store::outbox::NewEvent>,
            Vec<crate::store::journal::NewMovement>,
            bool,
        ),
    ) {
        self.events = events;
        self.moves = moves;
        self.citus = citus;
    }

    /// The transaction has ended (COMMIT or ROLLBACK ran): the connection may be reused.
    fn finish(mut self) -> Option<Client> {
        self.client.take()
    }
}

impl std::ops::Deref for TxClient {
    type Target = Client;

    fn deref(&self) -> &Client {
        // Invariant: `client` is only taken by `finish` (which consumes self) or by `drop`.
        self.client
            .as_ref()
            .expect("TxClient holds its connection until finish or drop")
    }
}

impl Drop for TxClient {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            tracing::warn!("transaction abandoned mid-flight: closing its connection");
            // Taking the object out of the pool and dropping it closes the socket.
            drop(deadpool_postgres::Object::take(client));
        }
    }
}

/// Wraps a body written against `&Client` (really `&TxClient`, which derefs to it) into a
/// [`TxFuture`].
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

/// Wraps a write transaction's body, written against a [`crate::store::dialect::Tx`] with an
/// outbox, into a [`TxFuture`]: once the body succeeds its events go to the COMMIT, which
/// appends them in the same transaction and round trip. `writer` is the store's
/// [`crate::store::dialect::Writer`].
#[macro_export]
macro_rules! write_tx {
    ($client:ident, $writer:expr => |$tx:ident| $body:expr) => {
        ::futures::FutureExt::boxed(async move {
            let mut $client = $client;
            let result = {
                let $tx = $crate::store::dialect::Tx::writing(&$client, $writer);
                $body.await.map(|value| (value, $tx.take_appended()))
            };
            let result = result.map(|(value, events)| {
                $client.append_at_commit(events);
                value
            });
            ($client, result)
        })
    };
}

/// Runs `work` inside BEGIN … COMMIT, rerunning the whole transaction on 40P01/40001 at most
/// `options.retry` allows; when attempts run out the last error comes back as
/// [`Error::RetriesExhausted`] with its SQLSTATE. Any other error returns at once.
///
/// Under a [`deadline`] (set by the caller with [`deadline::within`]) no attempt starts after
/// it, the wait for a connection, `lock_timeout` and `statement_timeout` are capped by what is
/// left, and the body as a whole is abandoned (its connection closed, so the server rolls it
/// back) when time runs out: [`Error::DeadlineExceeded`], nothing applied. A COMMIT whose
/// answer is lost (deadline plus [`deadline::COMMIT_GRACE`], or the connection) is
/// [`Error::OutcomeUnknown`].
///
/// `work` must have no external effect: it may run several times.
pub async fn in_transaction<'a, T, F>(
    pool: &Pool,
    options: &TxOptions,
    operation: Operation,
    mut work: F,
) -> Result<T, Error>
where
    F: FnMut(TxClient) -> TxFuture<'a, T>,
{
    telemetry::transaction(operation);
    let max_attempts = options.retry.effective_max_attempts();
    let mut attempt = 1;
    loop {
        if deadline::passed() {
            return Err(deadline_exceeded(operation));
        }
        if let Some(stats) = &options.stats {
            stats.attempts.fetch_add(1, Ordering::Relaxed);
        }
        let result = attempt_once(pool, options, operation, &mut work).await;
        match result {
            Err(e) if e.is_retryable() => {
                let sqlstate = e.sqlstate().map_or("", |s| s.code()).to_owned();
                if attempt >= max_attempts {
                    return Err(give_up(options, operation, attempt, sqlstate, e));
                }
                telemetry::tx_retry(operation, &sqlstate);
                if let Some(stats) = &options.stats {
                    stats.retried(&sqlstate);
                }
                tracing::debug!(
                    operation = operation.as_str(),
                    attempt,
                    sqlstate,
                    "retrying transaction"
                );
                let backoff = options.retry.backoff(attempt);
                if deadline::remaining().is_some_and(|left| left <= backoff) {
                    // The failed attempt rolled back; there is no time for another.
                    return Err(deadline_exceeded(operation));
                }
                tokio::time::sleep(backoff).await;
                attempt += 1;
            }
            Err(e) if e.is_timeout() && deadline::passed() => {
                // The capped lock or statement timeout fired because the deadline came: the
                // same truth ("not applied") under the name the caller knows it by.
                telemetry::observe_error(operation, &e);
                return Err(deadline_exceeded(operation));
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

/// Most runs of an idempotent transaction lost to a concurrent copy of itself (see
/// [`in_idempotent_transaction`]). Twice is enough; the bound is a guard.
pub const REPLAY_RACE_ATTEMPTS: u32 = 3;

/// [`in_transaction`] for a write keyed by an idempotency key that a unique `constraint` (or
/// index) enforces: a unique violation of it means a concurrent copy of the same request
/// committed first, so the transaction reruns (at most [`REPLAY_RACE_ATTEMPTS`] runs in all)
/// and, seeing that copy's rows, answers as a replay. Any other unique violation surfaces at
/// once, as in [`in_transaction`]; after the last run the violation itself is returned.
pub async fn in_idempotent_transaction<'a, T, F>(
    pool: &Pool,
    options: &TxOptions,
    operation: Operation,
    constraint: &str,
    mut work: F,
) -> Result<T, Error>
where
    F: FnMut(TxClient) -> TxFuture<'a, T>,
{
    let mut run = 1;
    loop {
        match in_transaction(pool, options, operation, &mut work).await {
            Err(e) if e.may_be_unique_violation_of(constraint) && run < REPLAY_RACE_ATTEMPTS => {
                tracing::debug!(
                    operation = operation.as_str(),
                    constraint,
                    run,
                    "lost to a concurrent copy; rerunning"
                );
                run += 1;
            }
            other => return other,
        }
    }
}

/// One attempt: a connection, BEGIN, the body, COMMIT; ROLLBACK on failure. The connection is
/// back in the pool (or closed) when this returns, so the caller may sleep before the next.
async fn attempt_once<'a, T, F>(
    pool: &Pool,
    options: &TxOptions,
    operation: Operation,
    work: &mut F,
) -> Result<T, Error>
where
    F: FnMut(TxClient) -> TxFuture<'a, T>,
{
    let client = checkout(pool, operation).await?;
    let begin = begin_statements(options);
    let attempt = crate::store::outbox::counting_committed(
        run_once(TxClient::new(client), &begin, work, operation),
        |a| matches!(a, Attempt::Ended(_, Ok(_))),
    );
    match attempt.await {
        Attempt::Ended(client, result) => {
            let result = match result {
                // The transaction may be open or aborted; a failed ROLLBACK means the
                // connection is gone (the pool drops closed connections on their next
                // checkout), and a database error just before it was the server going away.
                Err(e) => match client.batch_execute("ROLLBACK").await {
                    Err(gone) if gone.code().is_none() && matches!(e, Error::Database(_)) => {
                        Err(Error::ConnectionLost {
                            operation,
                            cause: e.to_string(),
                        })
                    }
                    _ => Err(e),
                },
                ok => ok,
            };
            // The transaction has ended: the client goes back to the pool here, before any
            // sleep.
            drop(client.finish());
            result
        }
        // The connection was closed with the transaction: nothing to give back.
        Attempt::Abandoned(e) => Err(*e),
    }
}

/// The last allowed attempt failed with 40P01/40001: counted, and named with its SQLSTATE.
fn give_up(
    options: &TxOptions,
    operation: Operation,
    attempts: u32,
    sqlstate: String,
    e: Error,
) -> Error {
    telemetry::tx_giveup(operation, &sqlstate);
    if let Some(stats) = &options.stats {
        stats.giveups.fetch_add(1, Ordering::Relaxed);
    }
    match e {
        Error::Database(source) => Error::RetriesExhausted {
            attempts,
            sqlstate,
            source,
        },
        other => other,
    }
}

fn deadline_exceeded(operation: Operation) -> Error {
    metrics::counter!(telemetry::DEADLINE_EXCEEDED, "operation" => operation.as_str()).increment(1);
    Error::DeadlineExceeded { operation }
}

/// A pooled connection, waiting no longer than the deadline allows: the one way the library
/// takes a connection (transactions here, single reads elsewhere), so every caller honours the
/// deadline and keeps the pool's error as the source of [`Error::Pool`].
pub async fn checkout(pool: &Pool, operation: Operation) -> Result<Client, Error> {
    let got = match deadline::remaining() {
        Some(left) => match tokio::time::timeout(left, pool.get()).await {
            Ok(got) => got,
            Err(_) => return Err(deadline_exceeded(operation)),
        },
        None => pool.get().await,
    };
    Ok(got?)
}

/// BEGIN with this transaction's settings; the timeouts capped by the deadline's time left.
/// One query string on one node. On Citus one query per statement, sent pipelined (one round
/// trip still): Citus replays each `SET LOCAL`'s whole query string on the worker connections
/// it opens when `citus.propagate_set_commands = 'local'`, so a single string would replay its
/// `BEGIN` there too, and every worker would answer "there is already a transaction in
/// progress", relayed to us as a WARNING (logged once per transaction).
fn begin_statements(options: &TxOptions) -> Vec<String> {
    // Integers bounded by the clamp: nothing from a caller is spliced into the SQL as text.
    let mut statements = vec!["BEGIN".to_owned()];
    if options.citus {
        statements.push("SET LOCAL citus.propagate_set_commands = 'local'".to_owned());
        statements.push("SET LOCAL citus.max_adaptive_executor_pool_size = 1".to_owned());
    }
    statements.push(format!(
        "SET LOCAL lock_timeout = {}",
        deadline::cap_ms(options.lock_timeout_ms.clamp(1, MAX_TIMEOUT_MS))
    ));
    statements.push(format!(
        "SET LOCAL statement_timeout = {}",
        deadline::cap_ms(options.statement_timeout_ms.clamp(1, MAX_TIMEOUT_MS))
    ));
    if options.index_paths_only {
        statements.push("SET LOCAL enable_seqscan = off".to_owned());
    }
    if options.citus {
        statements
    } else {
        vec![statements.join("; ")]
    }
}

/// How one attempt ended. Lives on the stack for one match; its size does not matter.
#[allow(clippy::large_enum_variant)]
enum Attempt<T> {
    /// BEGIN, the body and COMMIT ran (or one failed with an answer from the server): the
    /// connection is in a known state.
    Ended(TxClient, Result<T, Error>),
    /// The attempt was given up mid-flight and its connection closed: before COMMIT that means
    /// rolled back (`DeadlineExceeded`); during COMMIT, unknown (`OutcomeUnknown`).
    Abandoned(Box<Error>),
}

async fn run_once<'a, T, F>(
    client: TxClient,
    begin: &[String],
    work: &mut F,
    operation: Operation,
) -> Attempt<T>
where
    F: FnMut(TxClient) -> TxFuture<'a, T>,
{
    // Pipelined: every statement is sent before the first answer is awaited.
    let began =
        futures::future::try_join_all(begin.iter().map(|sql| client.batch_execute(sql))).await;
    if let Err(e) = began {
        return Attempt::Ended(client, Err(e.into()));
    }
    let body = work(client);
    let (client, result) = match deadline::remaining() {
        // Dropping the body drops its TxClient, which closes the connection: the server rolls
        // the transaction back, and COMMIT was never sent.
        Some(left) => match tokio::time::timeout(left, body).await {
            Ok(ended) => ended,
            Err(_) => return Attempt::Abandoned(Box::new(deadline_exceeded(operation))),
        },
        None => body.await,
    };
    let value = match result {
        Ok(value) => value,
        Err(e) => return Attempt::Ended(client, Err(e)),
    };
    let mut client = client;
    let events = std::mem::take(&mut client.events);
    let moves = std::mem::take(&mut client.moves);
    if let Err(e) = crate::store::outbox::within_bound(&events, moves.len()) {
        return Attempt::Ended(client, Err(e));
    }
    let commit = crate::store::outbox::append_and_commit(&client, &events, &moves, client.citus);
    let committed = match deadline::remaining() {
        Some(left) => match tokio::time::timeout(left + deadline::COMMIT_GRACE, commit).await {
            Ok(committed) => committed,
            Err(_) => {
                drop(client);
                let unknown = outcome_unknown(operation, "the deadline passed");
                return Attempt::Abandoned(Box::new(unknown));
            }
        },
        None => commit.await,
    };
    match committed {
        Ok(()) => Attempt::Ended(client, Ok(value)),
        // A refusal that proves the rollback (a coded error of the events INSERT; 40001 or a
        // deferred constraint at COMMIT): not committed, and the connection is still usable.
        Err(failure) if failure.proves_rollback() => {
            Attempt::Ended(client, Err(failure.into_error().into()))
        }
        // No answer, a server going away, or any other error at COMMIT: on Citus the
        // coordinator writes its commit record before it sends COMMIT PREPARED, and an error
        // raised then (its postmaster killed, say) still reaches us. It may have committed.
        Err(failure) => {
            drop(client);
            let e = failure.into_error();
            Attempt::Abandoned(Box::new(outcome_unknown(
                operation,
                &format!("no proof of a rollback at COMMIT ({e})"),
            )))
        }
    }
}

fn outcome_unknown(operation: Operation, cause: &str) -> Error {
    metrics::counter!(telemetry::OUTCOME_UNKNOWN, "operation" => operation.as_str()).increment(1);
    tracing::warn!(
        operation = operation.as_str(),
        cause,
        "commit outcome unknown"
    );
    Error::OutcomeUnknown {
        operation,
        cause: cause.to_owned(),
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

    /// On Citus every setting is its own query, so the string Citus replays on the workers for
    /// a `SET LOCAL` holds no `BEGIN` (see `begin_statements`); one node keeps one string.
    #[test]
    fn citus_begins_with_one_statement_per_query() {
        let options = TxOptions::default().with_lock_timeout_ms(300);
        let single = begin_statements(&options);
        assert_eq!(single.len(), 1);
        assert!(single[0].starts_with("BEGIN; ") && single[0].contains("lock_timeout = 300"));

        let citus = begin_statements(&TxOptions {
            citus: true,
            ..options
        });
        assert_eq!(citus[0], "BEGIN");
        assert_eq!(citus[1], "SET LOCAL citus.propagate_set_commands = 'local'");
        assert!(citus
            .iter()
            .skip(1)
            .all(|q| q.starts_with("SET LOCAL ") && !q.contains(';')));
        assert!(citus.iter().any(|q| q == "SET LOCAL lock_timeout = 300"));
    }
}
