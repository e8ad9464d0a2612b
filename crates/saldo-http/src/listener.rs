//! The accept loop: how many connections may be open at once, what happens at that cap, and how
//! accept errors are survived.
//!
//! - **Cap**: at most [`connection_cap`] connections are served at once: the RLIMIT_NOFILE soft
//!   limit minus a reserve for the database pool and the process's own files, lowered further by
//!   `--max-connections`. Running out of descriptors is what made the service unreachable
//!   (accept failing with EMFILE every second while idle connections held every descriptor).
//! - **At the cap** the newly accepted connection waits for a slot while the longest-idle
//!   connections with no request in flight are asked to close, a batch per scan (as nginx
//!   reclaims keep-alive connections). If none frees within [`CAP_WAIT`] the new connection is
//!   closed unserved. While it waits nothing else is accepted: the kernel's backlog holds the
//!   rest, so the loop never spins.
//! - **Accept errors** that concern one connection (reset, aborted) are skipped; the others
//!   (EMFILE, ENFILE, ENOBUFS, ENOMEM) reclaim idle connections and back off exponentially, and
//!   are logged at most once per [`ACCEPT_ERROR_LOG_INTERVAL`] with a count.
//! - **Shutdown**: stop accepting, let requests in flight finish (bounded by the drain time the
//!   caller gives), then close what is left.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::connections::{
    CloseReason, Serving, Stage, ACCEPT_ERRORS, CONNECTIONS_ACCEPTED, CONNECTIONS_CAP,
    CONNECTIONS_CLOSED,
};

/// Descriptors kept for everything that is not a client connection: the listener, stdio, the
/// log, the embedded cluster's pipes, tokio's own, a connection accepted while waiting at the
/// cap, files opened by handlers. The database pool comes on top (see [`connection_cap`]).
pub const FD_RESERVE: u64 = 64;
/// Smallest cap derived from the descriptor limit before the server warns that it is too low.
pub const MIN_DERIVED_CAP: usize = 16;
/// Connections asked to close per reclaim scan.
pub const RECLAIM_BATCH: usize = 32;
/// How often a connection waiting at the cap asks again for idle connections to close.
pub const RECLAIM_RETRY: Duration = Duration::from_millis(50);
/// How long a connection accepted at the cap waits for a slot before it is closed unserved.
pub const CAP_WAIT: Duration = Duration::from_secs(2);
/// First and longest pause after an accept error that is not about one connection.
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Accept errors are logged at most once per interval (with how many were not).
pub const ACCEPT_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);
/// After the drain, how long closing the remaining connections may take.
pub const ABORT_WAIT: Duration = Duration::from_secs(5);

/// Connections the kernel may hold completed but not yet accepted (the kernel caps it at
/// `net.core.somaxconn`). std's 128 overflows in a burst, and a full queue drops new SYNs and
/// completed handshakes silently.
pub const LISTEN_BACKLOG: u32 = 1_024;

/// Binds `addr` for [`serve`] with [`LISTEN_BACKLOG`].
pub fn bind(addr: std::net::SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As std does: a restarted server can bind while old connections sit in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// The cap on open connections: RLIMIT_NOFILE's soft limit minus [`FD_RESERVE`] and the pool,
/// lowered to `asked` when given. Also returns the soft limit, for the log.
pub fn connection_cap(asked: Option<usize>, pool_max: usize) -> (usize, u64) {
    let soft = soft_nofile_limit();
    let reserve = FD_RESERVE.saturating_add(u64::try_from(pool_max).unwrap_or(u64::MAX));
    let from_limit = usize::try_from(soft.saturating_sub(reserve)).unwrap_or(usize::MAX);
    let from_limit = if from_limit < MIN_DERIVED_CAP {
        let half = usize::try_from(soft / 2).unwrap_or(1).max(1);
        tracing::warn!(
            soft_limit = soft,
            reserve,
            cap = half,
            "RLIMIT_NOFILE is too low for a connection reserve; raise it (ulimit -n)"
        );
        half
    } else {
        from_limit
    };
    let cap = match asked {
        Some(n) => n.min(from_limit),
        None => from_limit,
    };
    // The semaphore and `acquire_many` count in u32.
    (cap.clamp(1, u32::MAX as usize), soft)
}

/// RLIMIT_NOFILE's soft limit (u64::MAX when unlimited or unknown).
fn soft_nofile_limit() -> u64 {
    match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE) {
        Ok((soft, _hard)) => soft,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read RLIMIT_NOFILE");
            u64::MAX
        }
    }
}

/// Accepts on `listener` until `stop` turns true, serving each connection with `serving`, at
/// most `cap` at once; then drains for at most `drain`.
pub async fn serve(
    listener: TcpListener,
    serving: Serving,
    cap: usize,
    drain: Duration,
    mut stop: watch::Receiver<bool>,
) -> io::Result<()> {
    metrics::gauge!(CONNECTIONS_CAP).set(cap as f64);
    let slots = Arc::new(Semaphore::new(cap));
    let (stage_tx, stage_rx) = watch::channel(Stage::Running);
    let mut accepting = Accepting {
        errors: ErrorLog::default(),
        backoff: ACCEPT_BACKOFF_MIN,
    };
    loop {
        let stream = match accepting.next(&listener, &serving, &mut stop).await {
            Accepted::Stream(stream) => stream,
            Accepted::Again => continue,
            Accepted::Stopped => break,
        };
        let permit = match slots.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => match wait_for_slot(&slots, &serving, &mut stop).await {
                Some(permit) => permit,
                None => {
                    metrics::counter!(CONNECTIONS_CLOSED, "reason" => CloseReason::Refused.label())
                        .increment(1);
                    drop(stream);
                    continue;
                }
            },
        };
        let serving = serving.clone();
        let stage = stage_rx.clone();
        tokio::spawn(async move {
            let _slot = permit;
            serving.serve(stream, stage).await;
        });
    }
    drop(listener);
    drain_connections(&slots, cap, drain, &stage_tx).await;
    Ok(())
}

/// What one accept gave.
enum Accepted {
    Stream(TcpStream),
    /// An error, handled: accept again.
    Again,
    /// `stop` turned true.
    Stopped,
}

/// The accept side of the loop: what it remembers between accepts.
struct Accepting {
    errors: ErrorLog,
    backoff: Duration,
}

impl Accepting {
    /// The next accepted connection, or [`Accepted::Again`] after an error: one connection's
    /// is skipped; exhaustion (EMFILE, ENFILE, …) reclaims idle connections and backs off.
    async fn next(
        &mut self,
        listener: &TcpListener,
        serving: &Serving,
        stop: &mut watch::Receiver<bool>,
    ) -> Accepted {
        let accepted = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => return Accepted::Stopped,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _peer)) => {
                metrics::counter!(CONNECTIONS_ACCEPTED).increment(1);
                self.backoff = ACCEPT_BACKOFF_MIN;
                Accepted::Stream(stream)
            }
            Err(e) if is_per_connection(&e) => Accepted::Again,
            Err(e) => {
                metrics::counter!(ACCEPT_ERRORS).increment(1);
                self.errors.record(&e, serving.registry.len());
                // Out of descriptors or memory: idle connections are what we can give back.
                serving.registry.reclaim(RECLAIM_BATCH);
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => return Accepted::Stopped,
                    _ = tokio::time::sleep(self.backoff) => {}
                }
                self.backoff = (self.backoff * 2).min(ACCEPT_BACKOFF_MAX);
                Accepted::Again
            }
        }
    }
}

/// After the last accept: lets requests in flight finish (every slot back) within `drain`,
/// then tells the connections left to close now and waits [`ABORT_WAIT`] at most.
async fn drain_connections(
    slots: &Arc<Semaphore>,
    cap: usize,
    drain: Duration,
    stage_tx: &watch::Sender<Stage>,
) {
    let open = cap - slots.available_permits().min(cap);
    tracing::info!(
        open,
        "stopped accepting; finishing requests in flight on open connections"
    );
    let _ = stage_tx.send(Stage::Draining);
    let all = u32::try_from(cap).unwrap_or(u32::MAX);
    if tokio::time::timeout(drain, slots.acquire_many(all))
        .await
        .is_ok()
    {
        return;
    }
    tracing::warn!(
        drain_s = drain.as_secs(),
        "connections still open after the drain time; closing them"
    );
    let _ = stage_tx.send(Stage::Abort);
    if tokio::time::timeout(ABORT_WAIT, slots.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!("some connections did not close in time");
    }
}

/// At the cap: asks idle connections to close and waits for one of them to free its slot,
/// for at most [`CAP_WAIT`] (None: no slot, or the server is stopping).
async fn wait_for_slot(
    slots: &Arc<Semaphore>,
    serving: &Serving,
    stop: &mut watch::Receiver<bool>,
) -> Option<OwnedSemaphorePermit> {
    let give_up = Instant::now() + CAP_WAIT;
    loop {
        serving.registry.reclaim(RECLAIM_BATCH);
        let retry_at = (Instant::now() + RECLAIM_RETRY).min(give_up);
        tokio::select! {
            permit = slots.clone().acquire_owned() => return permit.ok(),
            _ = stop.wait_for(|s| *s) => return None,
            _ = tokio::time::sleep_until(retry_at.into()) => {
                if Instant::now() >= give_up {
                    tracing::debug!("no connection could be reclaimed in time; closing a new one");
                    return None;
                }
            }
        }
    }
}

/// Errors that concern only the connection being accepted: the next accept may succeed at once.
fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

/// Logs accept errors at most once per [`ACCEPT_ERROR_LOG_INTERVAL`].
#[derive(Debug, Default)]
struct ErrorLog {
    last: Option<Instant>,
    suppressed: u64,
}

impl ErrorLog {
    fn record(&mut self, e: &io::Error, open: usize) {
        let now = Instant::now();
        match self.last {
            Some(at) if now.duration_since(at) < ACCEPT_ERROR_LOG_INTERVAL => {
                self.suppressed += 1;
            }
            _ => {
                tracing::warn!(
                    error = %e,
                    open_connections = open,
                    similar_errors_not_logged = self.suppressed,
                    "accept failed; backing off"
                );
                self.last = Some(now);
                self.suppressed = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_a_reserve_and_honours_a_lower_request() {
        let (cap, soft) = connection_cap(None, 10);
        if soft != u64::MAX {
            assert!(cap as u64 <= soft.saturating_sub(FD_RESERVE + 10).max(soft / 2));
        }
        let (lower, _) = connection_cap(Some(5), 10);
        assert_eq!(lower, 5.min(cap));
        let (one, _) = connection_cap(Some(0), 10);
        assert_eq!(one, 1, "never zero");
    }

    #[test]
    fn accept_errors_are_logged_once_per_interval() {
        let mut log = ErrorLog::default();
        let emfile = io::Error::from_raw_os_error(nix::libc::EMFILE);
        for _ in 0..100 {
            log.record(&emfile, 1);
        }
        assert_eq!(log.suppressed, 99, "one logged, the rest counted");
    }

    #[test]
    fn per_connection_errors_are_told_apart_from_exhaustion() {
        assert!(is_per_connection(&io::Error::from(
            io::ErrorKind::ConnectionAborted
        )));
        let emfile = io::Error::from_raw_os_error(nix::libc::EMFILE);
        assert!(!is_per_connection(&emfile));
    }
}
