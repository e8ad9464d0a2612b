//! Showing that a naive strategy fails. A naive strategy breaks an invariant only when its
//! sessions happen to interleave badly, which a race with a wide read–write window makes likely
//! but never certain: a test that demands the failure from one run fails now and then for
//! nothing. [`until_caught`] runs such a demonstration again, a bounded number of times, until
//! the failure shows. The safe strategies' checks belong inside each attempt, so they still
//! hold in every run.

use std::fmt::Debug;
use std::future::Future;

/// Attempts at showing a naive failure before the test gives up. One attempt shows it almost
/// every time, so several that all miss mean the check can no longer fail.
pub const NAIVE_ATTEMPTS: u32 = 5;

/// Runs `attempt` (given its number, from 0) until `caught` holds for its outcome, at most
/// [`NAIVE_ATTEMPTS`] times, and returns that outcome. Panics naming `what` and showing the
/// last outcome when no attempt showed the failure.
pub async fn until_caught<T, F, Fut>(what: &str, mut attempt: F, caught: impl Fn(&T) -> bool) -> T
where
    T: Debug,
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = T>,
{
    let mut last = None;
    for n in 0..NAIVE_ATTEMPTS {
        let outcome = attempt(n).await;
        if caught(&outcome) {
            if n > 0 {
                eprintln!("{what}: shown at attempt {} of {NAIVE_ATTEMPTS}", n + 1);
            }
            return outcome;
        }
        last = Some(outcome);
    }
    panic!("{what}: not shown in {NAIVE_ATTEMPTS} attempts; the last one: {last:#?}");
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[tokio::test]
    async fn stops_at_the_first_attempt_that_shows_the_failure() {
        let runs = Cell::new(0);
        let shown = until_caught(
            "naive",
            |n| {
                runs.set(runs.get() + 1);
                async move { n }
            },
            |&n| n == 2,
        )
        .await;
        assert_eq!((shown, runs.get()), (2, 3));
    }

    #[tokio::test]
    #[should_panic(expected = "naive: not shown in 5 attempts; the last one: Some(\n    4,\n)")]
    async fn gives_up_after_the_last_attempt() {
        until_caught("naive", |n| async move { n }, |_| false).await;
    }
}
