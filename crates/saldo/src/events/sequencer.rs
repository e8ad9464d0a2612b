//! The sequencer: moves committed events into the feed, numbering them `seq` 1, 2, … in an
//! order no later commit can contradict.
//!
//! One pass, in one transaction, serialized by the `feed_state` row (a pass that finds it
//! locked does nothing: another pass is running):
//!
//! 1. the horizon `h`: the oldest transaction still running (its snapshot's `xmin`). Every
//!    transaction below it has ended, so no event can still appear below it;
//! 2. the candidates: events held back by earlier passes (`feed_deferred`), and events after
//!    the frontier (the last `(xid, id)` a pass looked at) whose transaction is below `h`, at
//!    most [`MAX_PASS`] of each, in `(xid, id)` order;
//! 3. the decision ([`decide`], pure): a candidate goes into the feed when its stream's previous
//!    event is already there (or there is none), else it waits in `feed_deferred`. A
//!    transaction can take its id before another that then takes a row lock first and commits
//!    first; `(xid, id)` order alone would then put position 6 of a product before its 5;
//! 4. the writes: the feed rows, the deferred set, the frontier and the last `seq` given.
//!
//! The previous event of a stream always commits before the next one is written (it is
//! written under the same row lock), so when a candidate is below the horizon its predecessor
//! is visible: absent means there is none (or it was pruned after being sequenced).

use std::collections::HashMap;

use crate::error::Error;
use crate::operation::Operation;
use crate::store::dialect::{Sql, Tx};
use crate::store::handle::Store;
use crate::store::retry::in_transaction;
use crate::telemetry;

/// Candidates one pass looks at, at most, of each kind (deferred, fresh).
pub const MAX_PASS: i64 = 10_000;

/// An event's place in the outbox: its transaction id and its own id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub xid: u64,
    pub id: i64,
}

/// Where a candidate's stream predecessor stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Predecessor {
    /// None: the first event of its stream (or one pruned after it was sequenced).
    None,
    /// In the feed already.
    InFeed,
    /// Written and committed, not in the feed yet (a candidate of this pass, or not yet one).
    Waiting(Key),
}

/// One event the pass looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub key: Key,
    pub predecessor: Predecessor,
}

/// What one pass does: the events to put in the feed, in feed order, and those to hold back.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decision {
    pub sequenced: Vec<Key>,
    pub deferred: Vec<Key>,
}

/// Decides a pass: candidates in `(xid, id)` order, each sequenced as soon as its predecessor
/// is; one whose predecessor comes later in the same pass follows it directly.
pub fn decide(candidates: &[Candidate]) -> Decision {
    let mut sorted = candidates.to_vec();
    sorted.sort_by_key(|c| c.key);
    sorted.dedup_by_key(|c| c.key);
    // Candidates waiting on a predecessor, by that predecessor.
    let mut waiting: HashMap<Key, Key> = HashMap::new();
    let mut decision = Decision::default();
    for candidate in &sorted {
        match candidate.predecessor {
            Predecessor::None | Predecessor::InFeed => {
                release_chain(candidate.key, &mut waiting, &mut decision.sequenced)
            }
            Predecessor::Waiting(before) if decision.sequenced.contains(&before) => {
                release_chain(candidate.key, &mut waiting, &mut decision.sequenced)
            }
            Predecessor::Waiting(before) => {
                waiting.insert(before, candidate.key);
            }
        }
    }
    decision.deferred = waiting.into_values().collect();
    decision.deferred.sort();
    decision
}

/// Sequences `key`, then every candidate that waited on it, in stream order.
fn release_chain(key: Key, waiting: &mut HashMap<Key, Key>, sequenced: &mut Vec<Key>) {
    let mut next = Some(key);
    while let Some(key) = next {
        sequenced.push(key);
        next = waiting.remove(&key);
    }
}

const HORIZON: Sql = Sql::same("SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS h");
const STATE: Sql = Sql::same(
    "SELECT next_xid::text AS next_xid, next_id, last_seq FROM feed_state \
     FOR UPDATE SKIP LOCKED",
);
/// The candidates and their predecessors' standing.
const CANDIDATES: Sql = Sql::same(
    "WITH c AS ( \
       (SELECT d.xid, d.id FROM feed_deferred d ORDER BY d.xid, d.id LIMIT $4) \
       UNION ALL \
       (SELECT e.xid, e.id FROM events e \
         WHERE (e.xid, e.id) > ($1::text::xid8, $2) AND e.xid < $3::text::xid8 \
         ORDER BY e.xid, e.id LIMIT $4)) \
     SELECT e.xid::text AS xid, e.id, p.xid::text AS p_xid, p.id AS p_id, \
            (f.seq IS NOT NULL) AS p_in_feed, (d.xid IS NULL) AS fresh \
       FROM c JOIN events e ON e.xid = c.xid AND e.id = c.id \
       LEFT JOIN events p ON p.stream_type = e.stream_type AND p.stream_id = e.stream_id \
                         AND p.position = e.position - 1 \
       LEFT JOIN feed f ON f.xid = p.xid AND f.id = p.id \
       LEFT JOIN feed_deferred d ON d.xid = e.xid AND d.id = e.id",
);
const INSERT_FEED: Sql = Sql::same(
    "INSERT INTO feed (seq, xid, id) \
     SELECT s, x::xid8, i FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS u(s, x, i)",
);
const UNDEFER: Sql = Sql::same(
    "DELETE FROM feed_deferred d USING unnest($1::text[], $2::bigint[]) AS u(x, i) \
      WHERE d.xid = u.x::xid8 AND d.id = u.i",
);
const DEFER: Sql = Sql::same(
    "INSERT INTO feed_deferred (xid, id) \
     SELECT x::xid8, i FROM unnest($1::text[], $2::bigint[]) AS u(x, i) \
     ON CONFLICT DO NOTHING",
);
const ADVANCE: Sql =
    Sql::same("UPDATE feed_state SET next_xid = $1::text::xid8, next_id = $2, last_seq = $3");

/// Runs one pass (see the module header); answers how many events it put in the feed (0 also
/// when another pass held the state row).
pub async fn pass(store: &Store) -> Result<usize, Error> {
    let dialect = store.dialect();
    let sequenced = in_transaction(
        &store.pool,
        &store.tx,
        Operation::SequenceEvents,
        move |client| crate::tx_body!(client => pass_in(&Tx::new(client, dialect))),
    )
    .await?;
    telemetry::events_sequenced(sequenced);
    Ok(sequenced)
}

fn parse_xid(text: &str) -> Result<u64, Error> {
    text.parse()
        .map_err(|_| Error::invariant(format!("a transaction id that is not a number: {text}")))
}

async fn pass_in(tx: &Tx<'_>) -> Result<usize, Error> {
    let horizon: String = tx.query_one(&HORIZON, &[]).await?.try_get("h")?;
    let Some(state) = tx.query_opt(&STATE, &[]).await? else {
        return Ok(0);
    };
    let frontier = Key {
        xid: parse_xid(state.try_get::<_, &str>("next_xid")?)?,
        id: state.try_get("next_id")?,
    };
    let last_seq: i64 = state.try_get("last_seq")?;
    let frontier_xid = frontier.xid.to_string();
    let rows = tx
        .query(
            &CANDIDATES,
            &[&frontier_xid, &frontier.id, &horizon, &MAX_PASS],
        )
        .await?;
    let mut candidates = Vec::with_capacity(rows.len());
    let mut new_frontier = frontier;
    for row in &rows {
        let key = Key {
            xid: parse_xid(row.try_get::<_, &str>("xid")?)?,
            id: row.try_get("id")?,
        };
        let predecessor = match row.try_get::<_, Option<&str>>("p_xid")? {
            None => Predecessor::None,
            Some(_) if row.try_get::<_, bool>("p_in_feed")? => Predecessor::InFeed,
            Some(p_xid) => Predecessor::Waiting(Key {
                xid: parse_xid(p_xid)?,
                id: row.try_get("p_id")?,
            }),
        };
        if row.try_get::<_, bool>("fresh")? {
            new_frontier = new_frontier.max(key);
        }
        candidates.push(Candidate { key, predecessor });
    }
    let decision = decide(&candidates);
    write(tx, &decision, new_frontier, last_seq).await?;
    Ok(decision.sequenced.len())
}

async fn write(
    tx: &Tx<'_>,
    decision: &Decision,
    frontier: Key,
    last_seq: i64,
) -> Result<(), Error> {
    let columns = |keys: &[Key]| -> (Vec<String>, Vec<i64>) {
        keys.iter().map(|k| (k.xid.to_string(), k.id)).unzip()
    };
    let (xids, ids) = columns(&decision.sequenced);
    let seqs: Vec<i64> = (last_seq + 1..).take(ids.len()).collect();
    if !ids.is_empty() {
        tx.execute(&INSERT_FEED, &[&seqs, &xids, &ids]).await?;
        tx.execute(&UNDEFER, &[&xids, &ids]).await?;
    }
    let (xids, ids) = columns(&decision.deferred);
    if !ids.is_empty() {
        tx.execute(&DEFER, &[&xids, &ids]).await?;
    }
    let last_seq = seqs.last().copied().unwrap_or(last_seq);
    tx.execute(
        &ADVANCE,
        &[&frontier.xid.to_string(), &frontier.id, &last_seq],
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(xid: u64, id: i64) -> Key {
        Key { xid, id }
    }

    fn first(k: Key) -> Candidate {
        Candidate {
            key: k,
            predecessor: Predecessor::None,
        }
    }

    fn after(k: Key, before: Key) -> Candidate {
        Candidate {
            key: k,
            predecessor: Predecessor::Waiting(before),
        }
    }

    #[test]
    fn a_successor_with_the_lower_id_follows_its_predecessor() {
        // Transaction 100 took its id first but waited on the row lock of 105, which wrote
        // position 5; 100 wrote position 6.
        let p5 = key(105, 2);
        let p6 = key(100, 1);
        let d = decide(&[after(p6, p5), first(p5)]);
        assert_eq!(d.sequenced, vec![p5, p6]);
        assert!(d.deferred.is_empty());
    }

    #[test]
    fn a_successor_whose_predecessor_is_not_a_candidate_waits() {
        let p5 = key(105, 2);
        let p6 = key(100, 1);
        let other = key(101, 1);
        let d = decide(&[after(p6, p5), first(other)]);
        assert_eq!(d.sequenced, vec![other]);
        assert_eq!(d.deferred, vec![p6]);
    }

    #[test]
    fn a_predecessor_in_the_feed_frees_its_successor() {
        let k = key(7, 1);
        let d = decide(&[Candidate {
            key: k,
            predecessor: Predecessor::InFeed,
        }]);
        assert_eq!(d.sequenced, vec![k]);
    }

    proptest! {
        /// Whatever the commit order of a stream's writers: every event is either sequenced or
        /// deferred, once; a stream's sequenced events come in position order and form a
        /// prefix of the stream.
        #[test]
        fn streams_come_out_in_position_order(
            xids in proptest::collection::vec(1u64..50, 1..20),
            streams in proptest::collection::vec(0usize..3, 1..20),
        ) {
            let n = xids.len().min(streams.len());
            // Event i is the next position of stream streams[i], written by xids[i].
            let mut last: HashMap<usize, Key> = HashMap::new();
            let mut position_of = HashMap::new();
            let mut candidates = Vec::new();
            for i in 0..n {
                let k = key(xids[i], i as i64);
                let predecessor = match last.insert(streams[i], k) {
                    None => Predecessor::None,
                    Some(before) => Predecessor::Waiting(before),
                };
                position_of.insert(k, (streams[i], i));
                candidates.push(Candidate { key: k, predecessor });
            }
            let d = decide(&candidates);
            prop_assert_eq!(d.sequenced.len() + d.deferred.len(), n);
            let mut seen: HashMap<usize, usize> = HashMap::new();
            for k in &d.sequenced {
                let (stream, at) = position_of[k];
                if let Some(previous) = seen.insert(stream, at) {
                    prop_assert!(previous < at);
                }
            }
            // All of a stream's candidates up to its first deferred one are sequenced.
            for k in &d.deferred {
                let (stream, at) = position_of[k];
                let before_it = |s: &Key| {
                    let (st, a) = position_of[s];
                    st != stream || a < at
                };
                prop_assert!(d.sequenced.iter().all(before_it));
            }
        }
    }
}
