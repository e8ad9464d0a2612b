//! The clients that record a history while faults are injected: each sends its own sessions —
//! a reservation and then its fate (confirm, release, both at once, or neither), a transfer,
//! a hold and then its fate (post, void, both at once, or neither) — one request at a time
//! except the two of a race, over products and accounts few enough that clients meet on rows.
//! Some requests are refused on purpose (more units than exist, more money than exists, a
//! post above its hold), so the history holds refusals whose "nothing written" is checked too.
//!
//! Follow-ups go out unless their reservation or hold was refused: after an unknown outcome
//! they race whatever is still in flight, which is the point. Bounded: sessions per client,
//! each request by its timeout, and a pause after every unknown outcome (the service is
//! likely down) so that clients do not spin.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::history::{verdict, Op, Record, Verdict};
use super::http;

/// One request in this many is refused on purpose (of its kind: reserve, transfer, post).
const REFUSED_ONE_IN: u32 = 8;
/// Units a refused reservation asks for: the domain's maximum, more than any product has here.
const TOO_MANY_UNITS: i32 = saldo::domain::MAX_QUANTITY;

/// What the clients work on and how hard.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub clients: usize,
    /// Products `1..=products`, each with fewer than [`saldo::domain::MAX_QUANTITY`] units.
    pub products: i64,
    /// Customer accounts `1..=accounts` (at least 2).
    pub accounts: i64,
    /// All the money there is: a transfer of more is refused.
    pub total_cents: i64,
    /// Sessions per client at most, whatever happens.
    pub max_sessions: usize,
    pub request_timeout: Duration,
    pub pause_after_unknown: Duration,
    /// Each client's choices come from `seed + client`.
    pub seed: u64,
}

/// A running load; [`Load::finish`] stops it and returns its history.
pub struct Load {
    acks: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    clients: Vec<tokio::task::JoinHandle<Vec<Record>>>,
}

/// What every client shares.
struct Shared {
    addr: String,
    token: String,
    config: LoadConfig,
    acks: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Load {
    /// Starts `config.clients` clients against the service at `addr` with the API `token`.
    pub fn start(addr: &str, token: &str, config: LoadConfig) -> Load {
        let acks = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared {
            addr: addr.to_owned(),
            token: token.to_owned(),
            config,
            acks: acks.clone(),
            stop: stop.clone(),
        });
        let clients = (0..shared.config.clients)
            .map(|c| {
                let shared = shared.clone();
                tokio::spawn(async move { shared.client(c).await })
            })
            .collect();
        Load {
            acks,
            stop,
            clients,
        }
    }

    /// Operations applied so far (2xx answers).
    pub fn acks(&self) -> usize {
        self.acks.load(Ordering::Relaxed)
    }

    /// Waits until `more` further operations were applied, `within` at most; says how many
    /// came when they did not.
    pub async fn wait_acks(&self, more: usize, within: Duration) -> Result<(), String> {
        let (start, deadline) = (self.acks(), tokio::time::Instant::now() + within);
        while self.acks() < start + more {
            if tokio::time::Instant::now() >= deadline || self.finished() {
                return Err(format!(
                    "{} of {more} acknowledgements within {within:?}",
                    self.acks() - start
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Whether every client has run out of sessions.
    pub fn finished(&self) -> bool {
        self.clients.iter().all(|c| c.is_finished())
    }

    /// Stops the clients after their current session and returns everything they recorded,
    /// client by client in the order it was sent.
    pub async fn finish(self) -> Vec<Record> {
        self.stop.store(true, Ordering::Relaxed);
        let mut history = Vec::new();
        for client in self.clients {
            match client.await {
                Ok(records) => history.extend(records),
                Err(e) => panic!("a load client failed: {e}"),
            }
        }
        history
    }
}

impl Shared {
    async fn client(&self, c: usize) -> Vec<Record> {
        let mut rng = StdRng::seed_from_u64(self.config.seed.wrapping_add(c as u64));
        let mut records = Vec::new();
        for s in 0..self.config.max_sessions {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            self.session(c, s, &mut rng, &mut records).await;
        }
        records
    }

    async fn session(&self, c: usize, s: usize, rng: &mut StdRng, out: &mut Vec<Record>) {
        let order = format!("c{c}-o{s}");
        let reserve = Op::Reserve {
            order: order.clone(),
            items: self.items(rng),
        };
        if self.one(c, reserve, out).await != Verdict::NotApplied {
            let confirm = Op::Confirm {
                order: order.clone(),
            };
            let release = Op::Release { order };
            self.fate(c, rng, confirm, release, out).await;
        }

        let (from, to) = self.two_accounts(rng);
        let amount = if rng.random_ratio(1, REFUSED_ONE_IN) {
            self.config.total_cents + 1
        } else {
            rng.random_range(1..=500)
        };
        let transfer = Op::Transfer {
            id: format!("c{c}-t{s}"),
            from,
            to,
            amount,
        };
        self.one(c, transfer, out).await;

        let (from, to) = self.two_accounts(rng);
        let (id, held) = (format!("c{c}-h{s}"), rng.random_range(100..=1_000));
        let hold = Op::Hold {
            id: id.clone(),
            from,
            to,
            amount: held,
        };
        if self.one(c, hold, out).await != Verdict::NotApplied {
            let amount = if rng.random_ratio(1, REFUSED_ONE_IN) {
                held + 1
            } else {
                rng.random_range(1..=held)
            };
            let post = Op::Post {
                id: id.clone(),
                amount,
            };
            self.fate(c, rng, post, Op::Void { id }, out).await;
        }
    }

    /// One or two items; now and then more units than there are (refused).
    fn items(&self, rng: &mut StdRng) -> Vec<(i64, i32)> {
        let first = rng.random_range(1..=self.config.products);
        if rng.random_ratio(1, REFUSED_ONE_IN) {
            return vec![(first, TOO_MANY_UNITS)];
        }
        let mut items = vec![(first, rng.random_range(1..=3))];
        if rng.random_bool(0.5) && self.config.products > 1 {
            let second = first % self.config.products + 1;
            items.push((second, rng.random_range(1..=3)));
        }
        items
    }

    fn two_accounts(&self, rng: &mut StdRng) -> (i64, i64) {
        let n = self.config.accounts;
        let from = rng.random_range(1..=n);
        let to = (from - 1 + rng.random_range(1..n)) % n + 1;
        (from, to)
    }

    /// The fate of a reservation or a hold: the first op, the second, both at once, or neither.
    async fn fate(&self, c: usize, rng: &mut StdRng, a: Op, b: Op, out: &mut Vec<Record>) {
        match rng.random_range(0..4) {
            0 => {
                self.one(c, a, out).await;
            }
            1 => {
                self.one(c, b, out).await;
            }
            2 => {
                let (ra, rb) = tokio::join!(self.send(c, a), self.send(c, b));
                let unknown = [&ra, &rb]
                    .iter()
                    .any(|r| verdict(&r.answer) == Verdict::Unknown);
                out.extend([ra, rb]);
                if unknown {
                    tokio::time::sleep(self.config.pause_after_unknown).await;
                }
            }
            _ => {}
        }
    }

    /// Sends `op`, records it, and pauses after an unknown outcome.
    async fn one(&self, c: usize, op: Op, out: &mut Vec<Record>) -> Verdict {
        let record = self.send(c, op).await;
        let seen = verdict(&record.answer);
        out.push(record);
        if seen == Verdict::Unknown {
            tokio::time::sleep(self.config.pause_after_unknown).await;
        }
        seen
    }

    async fn send(&self, c: usize, op: Op) -> Record {
        let answer = http::send(
            &self.addr,
            &self.token,
            &op.request(),
            self.config.request_timeout,
        )
        .await;
        if verdict(&answer) == Verdict::Applied {
            self.acks.fetch_add(1, Ordering::Relaxed);
        }
        Record::new(c, op, answer)
    }
}
