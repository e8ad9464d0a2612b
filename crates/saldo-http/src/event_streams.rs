//! The live tail of the event feed (`GET /v1/events/stream`): how many streams may be open
//! ([`EventStreams`], a semaphore of `--max-event-streams` slots), and the poller each stream
//! runs on its own task, feeding the response through a bounded channel.
//!
//! Memory per stream is bounded by the channel: the poller reads a page of the feed, and when
//! the page does not fit in the room the client left in its buffer, it fills that room, then
//! puts one final [`Item::Cut`] (in a slot kept free for it) saying the cursor to resume from,
//! and stops: a client that does not read is cut, never buffered for. The same final item
//! closes a stream at the end of its lifetime, at the service's shutdown, and when retention
//! pruned events the stream had not read yet. Idle, the poller reads the feed every
//! [`POLL_IDLE`]; a client that goes away closes the channel, which ends the poller and frees
//! its slot.

use std::sync::Arc;
use std::time::Duration;

use saldo::events::{self, Cursor, Event, Filter, Page};
use saldo::stock::Store;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::config::EventSettings;
use crate::error::ApiError;

/// How often an idle stream reads the feed.
pub const POLL_IDLE: Duration = Duration::from_millis(200);
/// Events one poll reads at most.
pub const STREAM_PAGE: usize = 100;
/// Comment line sent on a stream with no event for this long (keeps proxies from closing it).
pub const HEARTBEAT: Duration = Duration::from_secs(15);
/// Failed polls of one stream between two log lines about them.
const LOG_FAILURES_EVERY: u32 = 50;
/// Metric: event streams open now.
pub const STREAMS_OPEN: &str = "saldo_event_streams_open";
/// Metric: event streams closed by the server, by reason.
pub const STREAMS_CUT: &str = "saldo_event_streams_cut_total";

/// Why a stream was closed by the server (the `reason` of its final `cut` event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutReason {
    /// The client let its buffer fill.
    BufferFull,
    /// The stream reached its lifetime.
    Lifetime,
    /// The service is shutting down.
    Shutdown,
    /// Retention pruned events the stream had not read (resuming answers 410).
    CursorExpired,
}

impl CutReason {
    pub const ALL: [CutReason; 4] = [
        CutReason::BufferFull,
        CutReason::Lifetime,
        CutReason::Shutdown,
        CutReason::CursorExpired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CutReason::BufferFull => "buffer-full",
            CutReason::Lifetime => "lifetime",
            CutReason::Shutdown => "shutdown",
            CutReason::CursorExpired => "cursor-expired",
        }
    }
}

/// What the poller hands the response.
#[derive(Debug)]
pub enum Item {
    Event(Box<Event>),
    /// The last item: the stream ends; resume after `resume_after` (`None`: from the start).
    Cut {
        reason: CutReason,
        resume_after: Option<Cursor>,
    },
}

/// The open streams: their slots, their limits, and the shutdown signal they watch.
#[derive(Debug)]
pub struct EventStreams {
    slots: Arc<Semaphore>,
    settings: EventSettings,
    stop: watch::Sender<bool>,
}

impl EventStreams {
    pub fn new(settings: EventSettings) -> Self {
        EventStreams {
            slots: Arc::new(Semaphore::new(settings.max_streams)),
            settings,
            stop: watch::Sender::new(false),
        }
    }

    /// A slot for one more stream, or 503 `too-many-streams`.
    pub fn admit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        self.slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| ApiError::TooManyStreams {
                limit: self.settings.max_streams,
            })
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.settings.max_streams - self.slots.available_permits()
    }

    /// Tells every stream to close (with its resume cursor): the service is stopping.
    pub fn shut(&self) {
        self.stop.send_replace(true);
    }

    /// Starts the poller of one stream that has read `first` after `after`; the response reads
    /// the receiver. The slot is held until the poller ends.
    pub fn spawn(
        &self,
        slot: OwnedSemaphorePermit,
        store: Store,
        filter: Filter,
        after: Option<Cursor>,
        first: Page,
    ) -> mpsc::Receiver<Item> {
        // One slot more than the buffer: the final `cut` always has room.
        let (tx, rx) = mpsc::channel(self.settings.stream_buffer + 1);
        let poller = Poller {
            store,
            filter,
            after,
            tx,
            stop: self.stop.subscribe(),
            until: Instant::now() + self.settings.stream_lifetime,
        };
        metrics::gauge!(STREAMS_OPEN).increment(1.0);
        tokio::spawn(async move {
            poller.run(first).await;
            metrics::gauge!(STREAMS_OPEN).decrement(1.0);
            drop(slot);
        });
        rx
    }
}

/// One stream's poller.
struct Poller {
    store: Store,
    filter: Filter,
    /// The last event handed to the response, or where the stream started (`None`: the oldest
    /// event kept).
    after: Option<Cursor>,
    tx: mpsc::Sender<Item>,
    stop: watch::Receiver<bool>,
    until: Instant,
}

/// What handing a page to the response did.
enum Pushed {
    /// All of it; `moved`: the cursor went forward.
    All { moved: bool },
    /// The client's buffer could not take it all.
    Full,
    /// The client went away.
    Gone,
}

impl Poller {
    async fn run(mut self, first: Page) {
        let mut page = Some(first);
        let mut failures: u32 = 0;
        loop {
            let read = match page.take() {
                Some(p) => Ok(p),
                None => events::read(&self.store, self.after, STREAM_PAGE, &self.filter).await,
            };
            let moved = match read {
                Ok(p) => {
                    failures = 0;
                    match self.push(p) {
                        Pushed::All { moved } => moved,
                        Pushed::Full => return self.cut(CutReason::BufferFull),
                        Pushed::Gone => return,
                    }
                }
                Err(saldo::Error::CursorExpired { .. }) => {
                    return self.cut(CutReason::CursorExpired)
                }
                Err(e) => {
                    // Logged once, then every LOG_FAILURES_EVERY polls: a database that is down
                    // for a minute is a few lines per stream, not five a second.
                    if failures % LOG_FAILURES_EVERY == 0 {
                        tracing::warn!(error = %e, failures, "event stream: reading the feed failed");
                    }
                    failures = failures.saturating_add(1);
                    false
                }
            };
            if *self.stop.borrow() {
                return self.cut(CutReason::Shutdown);
            }
            if Instant::now() >= self.until {
                return self.cut(CutReason::Lifetime);
            }
            if moved {
                continue;
            }
            tokio::select! {
                () = self.tx.closed() => return,
                _ = self.stop.changed() => return self.cut(CutReason::Shutdown),
                () = tokio::time::sleep_until(self.until) => return self.cut(CutReason::Lifetime),
                () = tokio::time::sleep(POLL_IDLE) => {}
            }
        }
    }

    /// Hands `page` to the response: all of it when it fits in the room the client left (the
    /// room is read once, and only this poller sends, so what is decided is what happens), else
    /// as much as fits.
    fn push(&mut self, page: Page) -> Pushed {
        let start = self.after;
        let room = self.tx.capacity().saturating_sub(1);
        let fits = page.events.len() <= room;
        let next: Option<Cursor> = page.next.parse().ok();
        for event in page.events.into_iter().take(room) {
            let cursor = event.cursor.parse().ok();
            if self.tx.try_send(Item::Event(Box::new(event))).is_err() {
                return Pushed::Gone;
            }
            if cursor.is_some() {
                self.after = cursor;
            }
        }
        if !fits {
            return Pushed::Full;
        }
        self.after = self.after.max(next);
        Pushed::All {
            moved: self.after != start,
        }
    }

    /// Sends the final item (its slot is always free) and ends.
    fn cut(self, reason: CutReason) {
        metrics::counter!(STREAMS_CUT, "reason" => reason.as_str()).increment(1);
        let _ = self.tx.try_send(Item::Cut {
            reason,
            resume_after: self.after,
        });
    }
}
