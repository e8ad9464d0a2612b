//! Answers while the service starts. The listener is bound first (a port in use is reported
//! before anything is created or migrated), so the kernel completes the handshake of every
//! client that connects while the settings are checked, the pool is built and the database is
//! migrated; with nothing accepting yet, their requests sat in the backlog for as long as that
//! took. [`Starting`] accepts them and answers at once: 503 `starting` (problem+json,
//! `Retry-After`, `"applied": false`, the connection closed), except `/healthz`, which says the
//! process is alive. [`Starting::stop`] hands the listener back to the real server.
//!
//! Bounded: at most [`MAX_STARTING_CONNECTIONS`] answered at once (the rest wait in the
//! backlog), each connection closed after its answer or [`STARTING_CONNECTION_TIMEOUT`].

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tower::ServiceExt;

use crate::error::ApiError;
use crate::routes::health;

/// Connections answered at once while starting.
pub const MAX_STARTING_CONNECTIONS: usize = 64;
/// Longest a connection may take to send its request and read the answer while starting.
pub const STARTING_CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause after an accept error (out of descriptors, …) before accepting again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// The listener while the service starts, answering every request 503 `starting`.
pub struct Starting {
    stop: oneshot::Sender<()>,
    task: JoinHandle<TcpListener>,
}

impl Starting {
    /// Starts answering on `listener` (on its own task) until [`Starting::stop`].
    pub fn answer(listener: TcpListener) -> Starting {
        let (stop, stopped) = oneshot::channel();
        Starting {
            stop,
            task: tokio::spawn(answer_until(listener, stopped)),
        }
    }

    /// Stops accepting and returns the listener; connections already accepted finish their
    /// answer on their own tasks.
    pub async fn stop(self) -> io::Result<TcpListener> {
        let _ = self.stop.send(());
        self.task.await.map_err(io::Error::other)
    }
}

/// `/healthz` as the running service answers it; everything else `starting`.
fn router() -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .fallback(|| async { ApiError::Starting })
}

async fn answer_until(listener: TcpListener, mut stopped: oneshot::Receiver<()>) -> TcpListener {
    let router = router();
    let slots = Arc::new(Semaphore::new(MAX_STARTING_CONNECTIONS));
    loop {
        let slot = tokio::select! {
            biased;
            _ = &mut stopped => break,
            slot = slots.clone().acquire_owned() => slot,
        };
        let Ok(slot) = slot else { break };
        let accepted = tokio::select! {
            biased;
            _ = &mut stopped => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _peer)) => {
                tokio::spawn(answer_one(stream, router.clone(), slot));
            }
            Err(e) => {
                tracing::debug!(error = %e, "accept failed while starting");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
            }
        }
    }
    listener
}

/// One connection: its request answered, then closed (no keep-alive: the next request should
/// reach the running service).
async fn answer_one(stream: TcpStream, router: Router, _slot: OwnedSemaphorePermit) {
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        router.clone().oneshot(request)
    });
    let mut http = http1::Builder::new();
    http.keep_alive(false)
        .max_buf_size(crate::connections::MAX_CONN_BUF_BYTES);
    let connection = http.serve_connection(TokioIo::new(stream), service);
    match tokio::time::timeout(STARTING_CONNECTION_TIMEOUT, connection).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "a connection made while starting failed"),
        Err(_) => tracing::debug!("a connection made while starting timed out"),
    }
}
