//! The load generators. Closed loop: `concurrency` buyers, each sending its next order when the
//! previous one is answered. Open loop: orders are due at a fixed `rate`; latency is measured
//! from the moment an order was DUE, not when it was sent, so a stalled engine cannot hide its
//! stall by slowing the generator down (coordinated omission). In-flight orders are capped by
//! `concurrency` in both modes, so memory stays bounded whatever the engine does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::SeedableRng;
use saldo::domain::{AccountId, Amount, OrderId, TransferId, TransferTimeout, Ttl};
use saldo::ledger::{Ledger, TransferRequest};
use saldo::stock::{ReserveRequest, StockEngine};
use saldo::Error;
use tokio::sync::Semaphore;

use super::http::{Answer, HttpTarget};
use super::scenario::Picker;
use crate::strategy::LabTransfer;

/// Largest latency the histograms hold (anything slower is recorded as this).
pub const MAX_LATENCY_US: u64 = 60_000_000;

/// How one run drives the engine.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    pub concurrency: u32,
    /// Open loop at this many orders per second; `None` is closed loop.
    pub rate: Option<u32>,
    pub warmup: Duration,
    pub duration: Duration,
    pub with_confirm: bool,
    /// Every operation carries a reference and metadata ([`bench_tags`]), as a payment or an
    /// order from a shop would: what tags cost the engines.
    pub tagged: bool,
}

/// The tags of a tagged operation: a provider's reference made of the operation's id and four
/// metadata pairs of realistic sizes (a payment's invoice, customer, channel and country).
pub fn bench_tags(id: &str) -> Result<saldo::domain::Tags, saldo::InputError> {
    use saldo::domain::{Metadata, Reference, Tags};
    let pairs = [
        ("invoice", format!("inv-{id}")),
        ("customer", format!("cus_{:016x}", fnv(id))),
        ("channel", "web".to_owned()),
        ("country", "PT".to_owned()),
    ];
    Ok(Tags {
        reference: Some(Reference::new(format!("psp_{id}"))?),
        metadata: Some(Metadata::new(
            pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        )?),
    })
}

/// A cheap, stable hash of an id (FNV-1a), so a customer id varies with the operation.
fn fnv(id: &str) -> u64 {
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// What one run saw.
pub struct Tally {
    /// Answers inside the measured window.
    pub measured_ok: u64,
    pub refused: u64,
    pub overloaded: u64,
    pub errors: u64,
    /// Of `errors`: the server could not be reached or the connection broke (HTTP mode); the
    /// load keeps going through them.
    pub connection_errors: u64,
    pub first_error: Option<String>,
    pub latency_us: Histogram<u64>,
    /// Over the whole run, warm-up included: what the database must now hold.
    pub units_granted: u64,
    /// From the start of the measured window to the last measured answer, at least the
    /// window: an engine that falls behind an open-loop rate answers after the window ends,
    /// and its throughput is what it served over this span, not the rate it was offered.
    pub measured_span: Duration,
    last_answer: Option<Instant>,
}

impl Tally {
    fn new() -> anyhow::Result<Tally> {
        Ok(Tally {
            measured_ok: 0,
            refused: 0,
            overloaded: 0,
            errors: 0,
            connection_errors: 0,
            first_error: None,
            latency_us: Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)?,
            units_granted: 0,
            measured_span: Duration::ZERO,
            last_answer: None,
        })
    }
}

enum Outcome {
    Ok(u64),
    Refused,
    Overloaded,
    Error(String),
    /// The request never got an answer: connection refused, reset or timed out.
    ConnectionError(String),
}

/// Latencies of the answers since a progress display last looked.
#[derive(Debug, Clone, Copy, Default)]
pub struct Window {
    pub answered: u64,
    pub p50_us: u64,
    pub p99_us: u64,
}

/// A running load as a progress display sees it (every 100 ms).
pub struct Live<'a> {
    shared: &'a Shared,
    /// Since the run started, warm-up included.
    pub elapsed: Duration,
}

impl Live<'_> {
    /// Operations answered so far (errors included).
    pub fn answered(&self) -> u64 {
        self.shared.answered.load(Ordering::Relaxed)
    }

    /// Operations that failed so far, and of those the connection errors.
    pub fn errors(&self) -> (u64, u64) {
        (
            self.shared.errors.load(Ordering::Relaxed),
            self.shared.connection_errors.load(Ordering::Relaxed),
        )
    }

    /// The latencies recorded since the previous call (the window starts afresh).
    pub fn take_window(&self) -> Window {
        let Ok(mut h) = self.shared.window.lock() else {
            return Window::default();
        };
        let w = Window {
            answered: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p99_us: h.value_at_quantile(0.99),
        };
        h.reset();
        w
    }
}

/// What the operations run against.
pub enum Target {
    /// One reservation (or sale) per operation.
    Stock(StockEngine),
    /// One transfer of 1 between two accounts per operation.
    Ledger(Ledger, LabTransfer),
    /// One hold of 1 between two accounts, then its post, per operation (the ledger's served
    /// strategy).
    Holds(Ledger),
    /// One reservation (or sale) per operation through a running `saldo serve`.
    Http(Arc<HttpTarget>),
}

/// An error with its SQLSTATE and the server's message, which `Display` alone may hide.
fn describe(e: &Error) -> String {
    let db = match e {
        Error::Database(d) | Error::RetriesExhausted { source: d, .. } => d.as_db_error(),
        _ => None,
    };
    match db {
        Some(d) => format!("{e} [{}: {}]", d.code().code(), d.message()),
        None => e.to_string(),
    }
}

/// A ledger answer as the tally counts it: refusals (funds, a reused id) are expected answers.
fn ledger_outcome(answer: Result<saldo::ledger::Transfer, Error>) -> Outcome {
    match answer {
        Ok(_) => Outcome::Ok(1),
        Err(Error::InsufficientFunds { .. }) | Err(Error::TransferConflict(_)) => Outcome::Refused,
        Err(Error::Overloaded(_)) => Outcome::Overloaded,
        Err(e) => Outcome::Error(describe(&e)),
    }
}

/// Shared between the buyers of one run.
struct Shared {
    target: Target,
    picker: Arc<Picker>,
    tag: String,
    with_confirm: bool,
    tagged: bool,
    tally: Mutex<Tally>,
    /// Operations answered so far (for the progress display).
    answered: AtomicU64,
    errors: AtomicU64,
    connection_errors: AtomicU64,
    /// Latencies since the progress display last looked ([`Live::take_window`]).
    window: Mutex<Histogram<u64>>,
}

impl Shared {
    async fn operation(&self, id: String, rng: &mut rand::rngs::StdRng) -> Outcome {
        match &self.target {
            Target::Stock(engine) => self.reserve(engine, id, rng).await,
            Target::Http(target) => {
                let items = match self.picker.pick(rng) {
                    Ok(items) => items,
                    Err(e) => return Outcome::Error(e.to_string()),
                };
                let units = self.picker.units(&items);
                let mut answer = target.reserve(&id, &items).await;
                let reserved = matches!(answer, Answer::Ok);
                // Whether a reservation may be left on it for the clean-up to release:
                // granted and not sold, or the answer was lost.
                let maybe_unknown = matches!(answer, Answer::Error(_) | Answer::ConnectionError(_));
                if let (true, Answer::Ok) = (self.with_confirm, &answer) {
                    answer = target.confirm(&id).await;
                }
                let sold = self.with_confirm && reserved && matches!(answer, Answer::Ok);
                if (reserved && !sold) || maybe_unknown {
                    target.held.note(&id);
                }
                match answer {
                    Answer::Ok => Outcome::Ok(units),
                    Answer::Refused => Outcome::Refused,
                    Answer::Overloaded => Outcome::Overloaded,
                    Answer::Error(e) => Outcome::Error(e),
                    Answer::ConnectionError(e) => Outcome::ConnectionError(e),
                }
            }
            Target::Ledger(ledger, strategy) => {
                let request = match self.transfer_request(id, rng) {
                    Ok(r) => r,
                    Err(e) => return Outcome::Error(e.to_string()),
                };
                ledger_outcome(strategy.transfer(ledger, &request).await)
            }
            Target::Holds(ledger) => {
                let request = match self.transfer_request(id, rng) {
                    Ok(r) => r,
                    Err(e) => return Outcome::Error(e.to_string()),
                };
                match ledger.hold(&request, TransferTimeout::default()).await {
                    Ok(_) => ledger_outcome(ledger.post(&request.id, None).await),
                    Err(e) => ledger_outcome(Err(e)),
                }
            }
        }
    }

    /// A transfer of 1 between the next pair of accounts.
    fn transfer_request(
        &self,
        id: String,
        rng: &mut rand::rngs::StdRng,
    ) -> Result<TransferRequest, saldo::InputError> {
        let (from, to) = self.picker.pick_pair(rng);
        let tags = match self.tagged {
            true => bench_tags(&id)?,
            false => Default::default(),
        };
        Ok(TransferRequest {
            id: TransferId::new(id)?,
            from: AccountId::new(from)?,
            to: AccountId::new(to)?,
            amount: Amount::new(1)?,
            tags,
        })
    }

    async fn reserve(
        &self,
        engine: &StockEngine,
        order: String,
        rng: &mut rand::rngs::StdRng,
    ) -> Outcome {
        let items = match self.picker.pick(rng) {
            Ok(items) => items,
            Err(e) => return Outcome::Error(e.to_string()),
        };
        let order_id = match OrderId::new(order) {
            Ok(id) => id,
            Err(e) => return Outcome::Error(e.to_string()),
        };
        let units = self.picker.units(&items);
        let tags = match self.tagged {
            true => match bench_tags(order_id.as_str()) {
                Ok(tags) => tags,
                Err(e) => return Outcome::Error(e.to_string()),
            },
            false => saldo::domain::Tags::NONE,
        };
        let request = ReserveRequest {
            order_id,
            items,
            ttl: Ttl::default(),
            tags,
        };
        let outcome = match engine.reserve(&request).await {
            Ok(_) => Outcome::Ok(units),
            Err(Error::InsufficientStock { .. })
            | Err(Error::UnknownProduct(_))
            | Err(Error::IdempotencyConflict(_)) => Outcome::Refused,
            Err(Error::Overloaded(_)) => Outcome::Overloaded,
            Err(e) => Outcome::Error(describe(&e)),
        };
        if let (true, Outcome::Ok(_)) = (self.with_confirm, &outcome) {
            if let Err(e) = engine.confirm(&request.order_id).await {
                return Outcome::Error(format!("confirm: {}", describe(&e)));
            }
        }
        outcome
    }

    fn record(&self, measured: bool, latency: Duration, outcome: Outcome) {
        self.answered.fetch_add(1, Ordering::Relaxed);
        let us = (latency.as_micros() as u64).clamp(1, MAX_LATENCY_US);
        match &outcome {
            Outcome::Error(_) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
            Outcome::ConnectionError(_) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                self.connection_errors.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                if let Ok(mut w) = self.window.lock() {
                    w.saturating_record(us);
                }
            }
        }
        let Ok(mut t) = self.tally.lock() else {
            return;
        };
        match outcome {
            Outcome::Ok(units) => {
                t.units_granted += units;
                if measured {
                    t.measured_ok += 1;
                    t.last_answer = Some(Instant::now());
                    t.latency_us.saturating_record(us);
                }
            }
            Outcome::Refused => t.refused += 1,
            Outcome::Overloaded => t.overloaded += 1,
            Outcome::Error(e) => {
                t.errors += 1;
                t.first_error.get_or_insert(e);
            }
            Outcome::ConnectionError(e) => {
                t.errors += 1;
                t.connection_errors += 1;
                t.first_error.get_or_insert(e);
            }
        }
    }
}

/// Runs one load against `target`; `on_tick` sees it every 100 ms.
pub async fn drive(
    target: Target,
    picker: Arc<Picker>,
    plan: &LoadPlan,
    tag: String,
    on_tick: impl Fn(&Live<'_>),
) -> anyhow::Result<Tally> {
    let shared = Arc::new(Shared {
        target,
        picker,
        tag,
        with_confirm: plan.with_confirm,
        tagged: plan.tagged,
        tally: Mutex::new(Tally::new()?),
        answered: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        connection_errors: AtomicU64::new(0),
        window: Mutex::new(Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)?),
    });
    let start = Instant::now();
    let measure_from = start + plan.warmup;
    let end = measure_from + plan.duration;
    let load = {
        let shared = shared.clone();
        let plan = plan.clone();
        tokio::spawn(async move {
            match plan.rate {
                None => closed_loop(shared, plan.concurrency, measure_from, end).await,
                Some(rate) => {
                    open_loop(shared, plan.concurrency, rate, start, measure_from, end).await
                }
            }
        })
    };
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tokio::pin!(load);
    loop {
        tokio::select! {
            _ = &mut load => break,
            _ = tick.tick() => on_tick(&Live { shared: &shared, elapsed: start.elapsed() }),
        }
    }
    let fresh = Tally::new()?;
    let mut tally = match shared.tally.lock() {
        Ok(mut t) => std::mem::replace(&mut *t, fresh),
        Err(_) => anyhow::bail!("a buyer panicked while recording"),
    };
    let served = tally.last_answer.map_or(Duration::ZERO, |at| {
        at.saturating_duration_since(measure_from)
    });
    tally.measured_span = served.max(plan.duration);
    Ok(tally)
}

async fn closed_loop(shared: Arc<Shared>, concurrency: u32, measure_from: Instant, end: Instant) {
    let mut buyers = tokio::task::JoinSet::new();
    for buyer in 0..concurrency {
        let shared = shared.clone();
        buyers.spawn(async move {
            let mut rng = rand::rngs::StdRng::from_rng(&mut rand::rng());
            for seq in 0u64.. {
                let sent = Instant::now();
                if sent >= end {
                    break;
                }
                let order = format!("{}-{buyer}-{seq}", shared.tag);
                let outcome = shared.operation(order, &mut rng).await;
                shared.record(sent >= measure_from, sent.elapsed(), outcome);
            }
        });
    }
    while buyers.join_next().await.is_some() {}
}

async fn open_loop(
    shared: Arc<Shared>,
    concurrency: u32,
    rate: u32,
    start: Instant,
    measure_from: Instant,
    end: Instant,
) {
    let in_flight = Arc::new(Semaphore::new(concurrency as usize));
    let mut rng = rand::rngs::StdRng::from_rng(&mut rand::rng());
    for seq in 0u64.. {
        let due = start + Duration::from_secs_f64(seq as f64 / f64::from(rate));
        if due >= end {
            break;
        }
        tokio::time::sleep_until(due.into()).await;
        // Waiting here for a free slot is part of the latency: it is measured from `due`.
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            break;
        };
        let shared = shared.clone();
        let mut rng = rand::rngs::StdRng::from_rng(&mut rng);
        tokio::spawn(async move {
            let _permit = permit;
            let order = format!("{}-{seq}", shared.tag);
            let outcome = shared.operation(order, &mut rng).await;
            shared.record(due >= measure_from, due.elapsed(), outcome);
        });
    }
    // Every slot back means every order answered.
    let _ = in_flight.acquire_many(concurrency).await;
}
