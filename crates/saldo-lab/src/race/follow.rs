//! The `events-follow` scenario: a reader follows the event feed while writers commit, one of
//! them late (it took its event id first and commits last: the classic outbox bug's trigger).
//! At the end the reader must have seen every committed event exactly once, each stream in
//! position order.
//!
//! One run: stock `buyers` units of product 1; the late committer appends its event and waits;
//! `buyers` reservations commit meanwhile (their events take higher ids); once the reader has
//! polled twice more after they committed, the late transaction commits; the reader then reads
//! until it has as many events as were committed (or a bounded wait runs out). The contenders:
//! saldo's feed ([`saldo::events::read`], writers on each served strategy) and the naive
//! "highest id seen" reader (`crate::naive::follow`), which has read past the late event by
//! the time it commits, every run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use saldo::domain::{OrderId, OrderItems, ProductId, Ttl};
use saldo::error::Error;
use saldo::events::{self, Cursor, Filter};
use saldo::stock::{admin, ReserveRequest, Store};

use crate::naive::follow::{IdReader, LateCommit, Seen};
use crate::race::buyers::buy_all;
use crate::race::contender::{Contender, RunOutcome};
use crate::race::types::{bounded, LabError, Report};

/// Most concurrent writers per run.
pub const MAX_FOLLOW_BUYERS: u32 = 1_000;
/// Time between a reader's polls when it found nothing new.
const POLL: Duration = Duration::from_millis(2);
/// How long the run waits for the reader to poll after the writers committed, and for the
/// naive reader to catch up at the end (it reads committed rows directly: one poll after the
/// last commit shows all it will ever see; a reader that never sees an event stops there).
const READER_WAIT: Duration = Duration::from_secs(3);
/// How long saldo's feed reader may take to catch up at the end. The feed lags on purpose
/// behind the oldest transaction still running on the whole server (its horizon is the
/// server's, every database's): on CI the naive reader's test ran beside it on the same Citus
/// coordinator, its late transaction open for seconds, and the catch-up went past 3 s. A lag
/// is not a miss; bounded still: a feed that never catches up counts its missing events.
const FEED_CATCH_UP: Duration = Duration::from_secs(120);
/// Events one page of saldo's feed returns.
const PAGE: usize = 500;

/// What one run found.
#[derive(Debug, Clone, Default)]
pub struct FollowOutcome {
    pub committed: u64,
    pub seen: u64,
    /// Committed events the reader never saw.
    pub missed: u64,
    /// Events the reader saw more than once.
    pub duplicates: u64,
    /// Events seen before an earlier position of their stream.
    pub out_of_order: u64,
    pub audit_divergences: u64,
}

impl FollowOutcome {
    pub fn violated(&self) -> bool {
        self.missed > 0
            || self.duplicates > 0
            || self.out_of_order > 0
            || self.audit_divergences > 0
    }
}

/// Who reads: saldo's feed or the naive id reader.
enum Reader {
    Feed(Option<Cursor>),
    Naive(IdReader),
}

impl Reader {
    async fn poll(&mut self, store: &Store) -> Result<Vec<Seen>, Error> {
        match self {
            Reader::Feed(after) => {
                let page = events::read(store, *after, PAGE, &Filter::default()).await?;
                *after = Some(page.next.parse()?);
                Ok(page
                    .events
                    .into_iter()
                    .map(|e| (e.id, e.stream, e.position))
                    .collect())
            }
            Reader::Naive(reader) => reader.poll(&store.pool).await,
        }
    }
}

/// What the writers tell the reader, and the reader them.
#[derive(Default)]
struct Signals {
    polls: AtomicU64,
    stop: AtomicBool,
    committed: AtomicU64,
}

/// Reads until told to stop and caught up with what committed (or until its catch-up wait,
/// [`FEED_CATCH_UP`] or [`READER_WAIT`], runs out after the stop).
async fn follow(
    store: Store,
    mut reader: Reader,
    signals: Arc<Signals>,
) -> Result<Vec<Seen>, Error> {
    let catch_up = match reader {
        Reader::Feed(_) => FEED_CATCH_UP,
        Reader::Naive(_) => READER_WAIT,
    };
    let mut seen = Vec::new();
    let mut stopped_at = None;
    loop {
        let page = reader.poll(&store).await?;
        signals.polls.fetch_add(1, Ordering::SeqCst);
        let empty = page.is_empty();
        seen.extend(page);
        if signals.stop.load(Ordering::SeqCst) {
            let since = *stopped_at.get_or_insert_with(tokio::time::Instant::now);
            let caught_up = seen.len() as u64 >= signals.committed.load(Ordering::SeqCst);
            if caught_up || since.elapsed() > catch_up {
                return Ok(seen);
            }
        }
        if empty {
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Waits (bounded) until the reader has polled `more` times after now.
async fn polled(signals: &Signals, more: u64) {
    let target = signals.polls.load(Ordering::SeqCst) + more;
    let started = tokio::time::Instant::now();
    while signals.polls.load(Ordering::SeqCst) < target && started.elapsed() < READER_WAIT {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// One run for `contender` on a reset scratch database behind `store`.
pub async fn run_on(
    store: &Store,
    buyers: u32,
    contender: Contender,
    run: u32,
) -> Result<FollowOutcome, LabError> {
    bounded("buyers", buyers.into(), 1, MAX_FOLLOW_BUYERS.into())?;
    let product = ProductId::new(1).map_err(Error::from)?;
    admin::set_count(store, product, buyers.into()).await?;
    let reader = match contender {
        Contender::Served(_) => Reader::Feed(None),
        Contender::Naive(_) => Reader::Naive(IdReader::default()),
    };
    let signals = Arc::new(Signals::default());
    let follower = tokio::spawn(follow(store.clone(), reader, signals.clone()));

    let late = LateCommit::begin(&store.pool, &format!("late-{run}")).await?;
    let orders: Vec<ReserveRequest> = (0..buyers)
        .map(|b| {
            Ok(ReserveRequest {
                order_id: OrderId::new(format!("follow-{run}-{b}"))?,
                items: OrderItems::new([(1, 1)])?,
                ttl: Ttl::default(),
                tags: saldo::domain::Tags::NONE,
            })
        })
        .collect::<Result<_, Error>>()?;
    buy_all(&contender.build(store), &orders).await?;
    polled(&signals, 2).await;
    late.commit().await?;

    let committed = committed_ids(store).await?;
    signals
        .committed
        .store(committed.len() as u64, Ordering::SeqCst);
    signals.stop.store(true, Ordering::SeqCst);
    let seen = follower
        .await
        .map_err(|e| LabError::Join(e.to_string()))??;
    let audit_divergences = crate::checks::stock_divergences(&store.pool).await?;
    Ok(judge(&committed, &seen, audit_divergences))
}

async fn committed_ids(store: &Store) -> Result<BTreeSet<i64>, Error> {
    let client = saldo::retry::checkout(&store.pool, saldo::Operation::Lab).await?;
    let rows = client.query("SELECT id FROM events", &[]).await?;
    rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
}

/// Compares what the reader saw with what committed.
fn judge(committed: &BTreeSet<i64>, seen: &[Seen], audit_divergences: u64) -> FollowOutcome {
    let unique: BTreeSet<i64> = seen.iter().map(|(id, _, _)| *id).collect();
    let mut last_position: BTreeMap<&str, i64> = BTreeMap::new();
    let mut out_of_order = 0;
    for (_, stream, position) in seen {
        let last = last_position.entry(stream.as_str()).or_insert(0);
        if *position < *last {
            out_of_order += 1;
        }
        *last = (*last).max(*position);
    }
    FollowOutcome {
        committed: committed.len() as u64,
        seen: seen.len() as u64,
        missed: committed.difference(&unique).count() as u64,
        duplicates: (seen.len() - unique.len()) as u64,
        out_of_order,
        audit_divergences,
    }
}

impl RunOutcome for FollowOutcome {
    fn add_to(&self, report: &mut Report, run: u32) {
        // "Sold" here is the events the reader saw.
        report.add_sold(run, self.seen);
        let add = |field: &mut Option<u64>, n: u64| *field = Some(field.unwrap_or(0) + n);
        add(&mut report.missed_events, self.missed);
        add(&mut report.duplicate_events, self.duplicates);
        add(&mut report.out_of_order_events, self.out_of_order);
        report.audit_divergences += self.audit_divergences;
        report.violations += u32::from(self.violated());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(id: i64, stream: &str, position: i64) -> Seen {
        (id, stream.to_owned(), position)
    }

    #[test]
    fn a_missed_a_repeated_and_an_inverted_event_are_each_counted() {
        let committed: BTreeSet<i64> = [1, 2, 3, 4].into();
        let reader = [
            seen(2, "product:1", 2),
            seen(1, "product:1", 1),
            seen(2, "product:1", 2),
        ];
        let o = judge(&committed, &reader, 0);
        assert_eq!((o.missed, o.duplicates, o.out_of_order), (2, 1, 1));
        assert!(o.violated());
        let exact = [
            seen(1, "a:1", 1),
            seen(2, "a:1", 2),
            seen(3, "b:1", 1),
            seen(4, "a:1", 3),
        ];
        assert!(!judge(&committed, &exact, 0).violated());
    }
}
