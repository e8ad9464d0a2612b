//! Supervision of the embedded PostgreSQL under a long-running command (`saldo serve`,
//! `saldo db`): if the postmaster dies, start it again in place, a bounded number of times,
//! each attempt logged; past the bound, give up so that the command exits non-zero instead of
//! staying "alive" while every route fails. The pool needs nothing: deadpool drops connections
//! whose server went away and opens new ones, to the same socket and password, on demand.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Error};

/// How often the postmaster is checked.
pub const POLL_INTERVAL_MS: u64 = 250;
/// At most this many restart attempts within [`RESTART_WINDOW_S`]; one more and we give up.
pub const MAX_RESTARTS: usize = 5;
pub const RESTART_WINDOW_S: u64 = 300;
/// Pause before a restart attempt n (n from 0): base × 2^n, capped. Backends of a killed
/// postmaster hold its shared memory until they notice, usually within milliseconds.
const RESTART_BACKOFF_BASE_MS: u64 = 200;
const RESTART_BACKOFF_CAP_MS: u64 = 5_000;

/// Watches `cluster` until supervision gives up; returns why. Never returns while the cluster
/// runs or can be restarted (drop the future to stop watching).
pub async fn supervise(cluster: Arc<Mutex<pg_local::Cluster>>) -> Error {
    let window = Duration::from_secs(RESTART_WINDOW_S);
    let mut attempts: VecDeque<Instant> = VecDeque::new();
    let mut tick = tokio::time::interval(Duration::from_millis(POLL_INTERVAL_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failures_in_a_row: u32 = 0;
    loop {
        tick.tick().await;
        let exited = match cluster.lock() {
            Ok(c) => c.has_exited(),
            Err(_) => return anyhow!("the embedded PostgreSQL's state was poisoned by a panic"),
        };
        if !exited {
            failures_in_a_row = 0;
            continue;
        }
        let now = Instant::now();
        while attempts
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            attempts.pop_front();
        }
        if attempts.len() >= MAX_RESTARTS {
            tracing::error!(
                attempts = attempts.len(),
                window_s = RESTART_WINDOW_S,
                "embedded PostgreSQL keeps dying; giving up"
            );
            return anyhow!(
                "the embedded PostgreSQL died and {MAX_RESTARTS} restarts within {RESTART_WINDOW_S} s \
                 did not keep it up; see its log"
            );
        }
        let backoff_ms = RESTART_BACKOFF_BASE_MS
            .saturating_mul(1 << failures_in_a_row.min(16))
            .min(RESTART_BACKOFF_CAP_MS);
        tracing::warn!(
            attempt = attempts.len() + 1,
            max = MAX_RESTARTS,
            backoff_ms,
            "embedded PostgreSQL is not running; restarting it"
        );
        tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
        attempts.push_back(Instant::now());
        let c = Arc::clone(&cluster);
        let restarted = tokio::task::spawn_blocking(move || match c.lock() {
            Ok(mut c) => c.restart().map(|()| c.pid()).map_err(|e| e.to_string()),
            Err(_) => Err("state poisoned".to_owned()),
        })
        .await;
        match restarted {
            Ok(Ok(pid)) => {
                failures_in_a_row = 0;
                tracing::warn!(pid, "embedded PostgreSQL restarted");
            }
            Ok(Err(e)) => {
                failures_in_a_row += 1;
                tracing::error!(error = %e, "restarting the embedded PostgreSQL failed");
            }
            Err(e) => return anyhow!("the restart task failed: {e}"),
        }
    }
}

/// [`supervise`] for the embedded cluster of `database`; pending forever for a `--database-url`
/// (someone else runs that server).
pub async fn watch(database: &crate::database::Database) -> Error {
    match database.embedded() {
        Some(cluster) => supervise(cluster).await,
        None => std::future::pending().await,
    }
}
