//! A TCP proxy for fault tests, on 127.0.0.1 and to 127.0.0.1 only, that sits between a client
//! (the service) and a server (PostgreSQL) and, on command ([`Proxy::set`]):
//!
//! - [`Mode::Pass`]: forwards both ways as bytes arrive;
//! - [`Mode::Drop`]: cuts every connection at both ends, with an RST ([`Cut::Reset`]) or a FIN
//!   ([`Cut::Close`]), and cuts every new one the moment it is accepted, for as long as the
//!   mode lasts (the listener stays bound, so the port stays ours and comes back unchanged);
//! - [`Mode::Delay`]: forwards every chunk, in order, no sooner than the delay after it was
//!   read (both directions: a round trip costs twice the delay);
//! - [`Mode::Blackhole`]: accepts and forwards nothing. What was read waits in the proxy and a
//!   new connection is not opened upstream; when the mode changes, the held bytes go on, in
//!   order, as TCP would deliver them once a partition heals (a cut discards them).
//!
//! Everything is bounded ([`Limits`]): connections (one over the limit is reset at once), the
//! bytes a connection may hold per direction (`chunk_bytes × queued_chunks`, after which the
//! proxy stops reading and the sender's own buffers fill), the upstream connect and the delay.
//! Dropping the [`Proxy`] ends every connection it relays.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// Pause after a failed `accept` (out of file descriptors, say) before the next one.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Drop(Cut),
    Delay(Duration),
    Blackhole,
}

/// How a connection is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// An RST to both ends (`SO_LINGER` 0): the peers read "connection reset".
    Reset,
    /// A FIN to both ends: the peers read end-of-stream.
    Close,
}

/// The proxy's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections relayed at once; one more is reset as it is accepted.
    pub max_connections: usize,
    /// Largest chunk read at once.
    pub chunk_bytes: usize,
    /// Chunks a connection holds per direction (delayed or blackholed) before it stops reading.
    pub queued_chunks: usize,
    /// How long opening the upstream connection may take; past it the client is reset.
    pub connect_timeout: Duration,
    /// The longest [`Mode::Delay`] accepted.
    pub max_delay: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            chunk_bytes: 16 * 1024,
            queued_chunks: 64,
            connect_timeout: Duration::from_secs(5),
            max_delay: Duration::from_secs(30),
        }
    }
}

/// What went wrong starting or commanding the proxy.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("the proxy forwards to loopback addresses only, not {0}")]
    NotLoopback(SocketAddr),
    #[error("proxy limit {0} must be at least 1")]
    ZeroLimit(&'static str),
    #[error("a delay of {asked:?} is above the proxy's limit of {max:?}")]
    DelayTooLong { asked: Duration, max: Duration },
    #[error("binding 127.0.0.1: {0}")]
    Bind(#[source] io::Error),
}

/// What the proxy has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections accepted (relayed, cut or refused).
    pub accepted: u64,
    /// Connections reset because [`Limits::max_connections`] were relayed already.
    pub refused: u64,
    /// Connections cut by a [`Mode::Drop`], live ones and new ones alike.
    pub cut: u64,
    /// Bytes delivered, both directions.
    pub forwarded_bytes: u64,
}

#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    refused: AtomicU64,
    cut: AtomicU64,
    forwarded_bytes: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// A running proxy: listening on [`Proxy::addr`], relaying to its upstream.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    counters: Arc<Counters>,
    limits: Limits,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and relays to `upstream` (a loopback address), in
    /// [`Mode::Pass`].
    pub async fn start(upstream: SocketAddr, limits: Limits) -> Result<Proxy, ProxyError> {
        if !upstream.ip().is_loopback() {
            return Err(ProxyError::NotLoopback(upstream));
        }
        for (name, value) in [
            ("max_connections", limits.max_connections),
            ("chunk_bytes", limits.chunk_bytes),
            ("queued_chunks", limits.queued_chunks),
        ] {
            if value == 0 {
                return Err(ProxyError::ZeroLimit(name));
            }
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(ProxyError::Bind)?;
        let addr = listener.local_addr().map_err(ProxyError::Bind)?;
        let (mode, watching) = watch::channel(Mode::Pass);
        let counters = Arc::new(Counters::default());
        let accept = tokio::spawn(accept_loop(
            listener,
            upstream,
            watching,
            counters.clone(),
            limits,
        ));
        Ok(Proxy {
            addr,
            mode,
            counters,
            limits,
            accept,
        })
    }

    /// Where clients connect (127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Switches every connection, live and future, to `mode`.
    pub fn set(&self, mode: Mode) -> Result<(), ProxyError> {
        if let Mode::Delay(asked) = mode {
            if asked > self.limits.max_delay {
                return Err(ProxyError::DelayTooLong {
                    asked,
                    max: self.limits.max_delay,
                });
            }
        }
        self.mode.send_replace(mode);
        Ok(())
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    pub fn stats(&self) -> Stats {
        let c = &self.counters;
        Stats {
            accepted: c.accepted.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            cut: c.cut.load(Ordering::Relaxed),
            forwarded_bytes: c.forwarded_bytes.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // The accept task owns the connections' JoinSet: aborting it aborts them all.
        self.accept.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    mode: watch::Receiver<Mode>,
    counters: Arc<Counters>,
    limits: Limits,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((inbound, _)) = accepted else {
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                };
                bump(&counters.accepted, 1);
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    bump(&counters.refused, 1);
                    cut(inbound, Cut::Reset).await;
                    continue;
                };
                let (mode, counters) = (mode.clone(), counters.clone());
                connections.spawn(async move {
                    relay(inbound, upstream, mode, &counters, limits).await;
                    drop(slot);
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn cut(mut stream: TcpStream, how: Cut) {
    match how {
        // Closing a socket whose linger is 0 sends an RST instead of a FIN.
        Cut::Reset => drop(stream.set_zero_linger()),
        Cut::Close => drop(stream.shutdown().await),
    }
}

/// How a relayed connection ended.
enum Ended {
    /// Both directions reached end-of-stream and passed it on.
    Finished,
    /// One side failed (reset, say): the other is reset too.
    Broken,
    /// A [`Mode::Drop`] came.
    Cut(Cut),
}

async fn relay(
    inbound: TcpStream,
    upstream: SocketAddr,
    mut mode: watch::Receiver<Mode>,
    counters: &Counters,
    limits: Limits,
) {
    // A connection that arrives in a blackhole is not opened upstream (its SYN went nowhere).
    let now = match mode.wait_for(|m| *m != Mode::Blackhole).await {
        Ok(m) => *m,
        Err(_) => return,
    };
    if let Mode::Drop(how) = now {
        bump(&counters.cut, 1);
        return cut(inbound, how).await;
    }
    let outbound =
        match tokio::time::timeout(limits.connect_timeout, TcpStream::connect(upstream)).await {
            Ok(Ok(stream)) => stream,
            _ => return cut(inbound, Cut::Reset).await,
        };
    // Chunks are forwarded as they come: no Nagle delay on top of ours.
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (mut inbound, mut outbound) = (inbound, outbound);
    let ended = {
        let (in_read, in_write) = inbound.split();
        let (out_read, out_write) = outbound.split();
        let up = pump(in_read, out_write, mode.clone(), counters, limits);
        let down = pump(out_read, in_write, mode.clone(), counters, limits);
        tokio::select! {
            both = async { tokio::try_join!(up, down) } => match both {
                Ok(_) => Ended::Finished,
                Err(_) => Ended::Broken,
            },
            how = dropped(&mut mode) => Ended::Cut(how),
        }
    };
    match ended {
        Ended::Finished => {}
        Ended::Broken => {
            cut(inbound, Cut::Reset).await;
            cut(outbound, Cut::Reset).await;
        }
        Ended::Cut(how) => {
            bump(&counters.cut, 1);
            cut(inbound, how).await;
            cut(outbound, how).await;
        }
    }
}

/// Resolves when the mode becomes [`Mode::Drop`]; never once the proxy is gone (its drop
/// aborts this task anyway).
async fn dropped(mode: &mut watch::Receiver<Mode>) -> Cut {
    let cut = match mode.wait_for(|m| matches!(m, Mode::Drop(_))).await {
        Ok(m) => match *m {
            Mode::Drop(how) => Some(how),
            _ => None,
        },
        Err(_) => None,
    };
    match cut {
        Some(how) => how,
        None => std::future::pending().await,
    }
}

/// One direction's unit in flight: bytes, or the end of the stream, with when it may go on.
enum Piece {
    Bytes(Instant, Vec<u8>),
    End(Instant),
}

/// Copies one direction, `from` → `to`: a reader that stamps each chunk with its due time
/// (now, or now + the delay) into a bounded queue, and a writer that delivers them in order,
/// holding them while the mode is [`Mode::Blackhole`]. Ends after passing end-of-stream on.
async fn pump(
    mut from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    mode: watch::Receiver<Mode>,
    counters: &Counters,
    limits: Limits,
) -> io::Result<()> {
    let (queue, mut queued) = mpsc::channel::<Piece>(limits.queued_chunks);
    let read_mode = mode.clone();
    let reading = async move {
        loop {
            let mut buf = vec![0u8; limits.chunk_bytes];
            let n = from.read(&mut buf).await?;
            let due = match *read_mode.borrow() {
                Mode::Delay(d) => Instant::now() + d,
                _ => Instant::now(),
            };
            let piece = if n == 0 {
                Piece::End(due)
            } else {
                buf.truncate(n);
                Piece::Bytes(due, buf)
            };
            if queue.send(piece).await.is_err() || n == 0 {
                return Ok::<(), io::Error>(());
            }
        }
    };
    let mut write_mode = mode;
    let writing = async move {
        while let Some(piece) = queued.recv().await {
            if write_mode
                .wait_for(|m| *m != Mode::Blackhole)
                .await
                .is_err()
            {
                return Ok(());
            }
            match piece {
                Piece::Bytes(due, bytes) => {
                    tokio::time::sleep_until(due).await;
                    to.write_all(&bytes).await?;
                    bump(&counters.forwarded_bytes, bytes.len() as u64);
                }
                Piece::End(due) => {
                    tokio::time::sleep_until(due).await;
                    return to.shutdown().await;
                }
            }
        }
        Ok(())
    };
    tokio::try_join!(reading, writing).map(|_| ())
}

#[cfg(test)]
mod tests;
