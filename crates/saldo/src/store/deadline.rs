//! Deadlines that travel with an operation: a timeout tells the truth.
//!
//! A caller that will stop waiting at some instant (an HTTP request with a timeout) runs the
//! operation inside [`within`]. Everything the operation does on its way to PostgreSQL reads
//! the deadline from here: [`crate::store::retry::in_transaction`] refuses to start a transaction
//! whose deadline has passed, waits for a pooled connection no longer than what is left, and
//! sets `lock_timeout` and `statement_timeout` to no more than what is left; the batched engine
//! carries it in each queued job and drops a job whose deadline passed before its batch began.
//! So an answer of "not applied" ([`crate::Error::DeadlineExceeded`], or a lock or statement
//! timeout) is true: the transaction never committed. Only a COMMIT already sent when time ran
//! out has an unknown outcome, and it says so ([`crate::Error::OutcomeUnknown`]).
//!
//! Why task-local and not a parameter: the deadline must reach every transaction of every
//! strategy, the ledger and the sweeper through one mechanism, without widening each of their
//! signatures; a caller that sets none gets the configured timeouts unchanged. It does not
//! cross `tokio::spawn` by itself: code that moves work to another task captures [`current`]
//! and re-enters [`within`] there (as the HTTP layer and the batched engine do).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

tokio::task_local! {
    static DEADLINE: Instant;
}

/// How long a COMMIT already sent may take past the deadline before its outcome is declared
/// unknown: the deadline bounds the work, not the acknowledgement of work already done.
pub const COMMIT_GRACE: Duration = Duration::from_secs(2);

/// Runs `work` with `deadline` (or the enclosing one, whichever is earlier).
pub async fn within<F: Future>(deadline: Instant, work: F) -> F::Output {
    let deadline = current().map_or(deadline, |outer| outer.min(deadline));
    DEADLINE.scope(deadline, work).await
}

/// Runs `work` with `deadline` when there is one, as is otherwise.
pub async fn within_opt<F: Future>(deadline: Option<Instant>, work: F) -> F::Output {
    match deadline {
        Some(d) => within(d, work).await,
        None => work.await,
    }
}

/// The deadline of the running operation, if its caller set one.
pub fn current() -> Option<Instant> {
    DEADLINE.try_with(|d| *d).ok()
}

/// Time left before the deadline: `None` without a deadline, `Some(ZERO)` once it passed.
pub fn remaining() -> Option<Duration> {
    current().map(|d| d.saturating_duration_since(Instant::now()))
}

/// True when a deadline is set and has passed.
pub fn passed() -> bool {
    remaining().is_some_and(|r| r.is_zero())
}

/// `configured_ms` capped by the time left (at least 1 ms: 0 means "no timeout" to PostgreSQL).
pub(crate) fn cap_ms(configured_ms: u64) -> u64 {
    match remaining() {
        Some(left) => {
            let left_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
            configured_ms.min(left_ms).max(1)
        }
        None => configured_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_earlier_deadline_wins_and_none_leaves_settings_alone() {
        assert_eq!(current(), None);
        assert_eq!(cap_ms(5_000), 5_000);
        let soon = Instant::now() + Duration::from_millis(200);
        let later = soon + Duration::from_secs(60);
        within(soon, async {
            assert_eq!(current(), Some(soon));
            within(later, async { assert_eq!(current(), Some(soon)) }).await;
            let capped = cap_ms(5_000);
            assert!((1..=200).contains(&capped), "{capped}");
            assert!(!passed());
        })
        .await;
        within(Instant::now(), async {
            assert!(passed());
            assert_eq!(cap_ms(5_000), 1);
        })
        .await;
    }
}
