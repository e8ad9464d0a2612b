//! The event feed's background work in `saldo serve`: a sequencer pass every [`PASS_EVERY`]
//! (so the feed stays close behind what committed even when nobody reads it), the feed's lag
//! measured after each pass (`saldo_event_feed_lag_seconds`), and retention
//! (`saldo::events::prune`) every [`PRUNE_EVERY`]. Errors are logged, never fatal; the task
//! stops with the service.

use std::time::Duration;

use saldo::events;
use saldo::stock::Store;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};

/// Time between sequencer passes.
pub const PASS_EVERY: Duration = Duration::from_millis(250);
/// Time between retention rounds.
pub const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Failures in a row after which they are logged at most once per [`PRUNE_EVERY`].
const QUIET_AFTER: u32 = 3;

/// Runs the passes and retention until `stop` turns true (or its sender is dropped).
pub fn spawn(store: Store, retention: Duration, mut stop: watch::Receiver<bool>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut pass = tokio::time::interval(PASS_EVERY);
        pass.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut prune = tokio::time::interval(PRUNE_EVERY);
        prune.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut failures = Failures::default();
        loop {
            tokio::select! {
                changed = stop.changed() => if changed.is_err() || *stop.borrow() { break },
                _ = pass.tick() => {
                    let done = async {
                        events::sequencer::pass(&store).await?;
                        events::lag(&store).await
                    };
                    match done.await {
                        Ok(_) => failures.ok(),
                        Err(e) => failures.log(&e, "event sequencer pass failed"),
                    }
                }
                _ = prune.tick() => match events::prune(&store, retention).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(pruned = n, "event retention"),
                    Err(e) => tracing::warn!(error = %e, "event retention failed"),
                },
            }
        }
        tracing::info!("event feed upkeep stopped");
    })
}

/// Consecutive pass failures, so a database that is down for a minute logs a few lines, not
/// four a second.
#[derive(Default)]
struct Failures {
    in_a_row: u32,
    last_logged: Option<Instant>,
}

impl Failures {
    fn ok(&mut self) {
        if self.in_a_row >= QUIET_AFTER {
            tracing::info!(
                failures = self.in_a_row,
                "event sequencer passes succeed again"
            );
        }
        self.in_a_row = 0;
    }

    fn log(&mut self, e: &saldo::Error, what: &str) {
        self.in_a_row += 1;
        let quiet = self.in_a_row > QUIET_AFTER
            && self
                .last_logged
                .is_some_and(|at| at.elapsed() < PRUNE_EVERY);
        if !quiet {
            tracing::warn!(error = %e, failures = self.in_a_row, "{what}");
            self.last_logged = Some(Instant::now());
        }
    }
}
