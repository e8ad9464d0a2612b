//! One ledger batch as one transaction. It reads which accounts its settles (posts, voids)
//! touch, then locks every account of the batch once, in ascending id (the ledger's lock order,
//! so batches of different partitions, `ordered` transactions and other processes can never
//! wait on each other in a cycle), reads the batch's transfers from the journal under those
//! locks, decides each operation in arrival order in memory (`super::plan`), then writes once:
//! one INSERT journals the new transfers, one UPDATE writes each changed account once, and one
//! more moves the settled (or expired) holds out of `pending`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::job::Op;
use super::plan::{decide, Decision, Plan, States};
use crate::domain::AccountId;
use crate::error::Error;
use crate::ledger::apply::{Locked, NewTransfer};
use crate::ledger::rows::{accounts, journal, settles};
use crate::ledger::types::Transfer;
use crate::store::dialect::Tx;

/// What the batch read before deciding: its accounts locked, the journal rows of its
/// placements' ids, its settles' states, and the transaction's clock.
struct Read {
    locked: Locked,
    found: HashMap<String, Transfer>,
    states: States,
    now: DateTime<Utc>,
}

/// The batch transaction: read and lock, decide, write once, per-operation answers.
pub(super) async fn apply_batch(
    tx: Tx<'_>,
    ops: &[&Op],
) -> Result<Vec<Result<Transfer, Error>>, Error> {
    let Read {
        mut locked,
        found,
        mut states,
        now,
    } = read(&tx, ops).await?;
    let plan = decide(ops, &mut locked, &found, &mut states, now);
    let inserted = write(&tx, ops, &plan, &locked, &states, now).await?;
    answers(&tx, plan, inserted).await
}

/// The settles' accounts (known before the locks: from the engine's memory of the holds it
/// placed, else from the journal; an id without a row then is unknown to this batch, whatever
/// commits meanwhile), the locks, the journal under them, the states.
async fn read(tx: &Tx<'_>, ops: &[&Op]) -> Result<Read, Error> {
    let mut sides: Vec<AccountId> = Vec::new();
    let mut known: Vec<&str> = Vec::new();
    let mut unrouted: Vec<&str> = Vec::new();
    let mut placing: Vec<&str> = Vec::new();
    for op in ops {
        match op {
            Op::Place { id, from, to, .. } => {
                sides.extend([*from, *to]);
                placing.push(id.as_str());
            }
            Op::Settle {
                id,
                sides: Some((from, to)),
                ..
            } => {
                sides.extend([*from, *to]);
                known.push(id.as_str());
            }
            Op::Settle { id, .. } => unrouted.push(id.as_str()),
        }
    }
    let routed = if unrouted.is_empty() {
        Vec::new()
    } else {
        settles::sides_many(tx, &unrouted).await?
    };
    let mut known: Vec<String> = known.into_iter().map(str::to_owned).collect();
    for (id, from, to) in routed {
        sides.extend([from, to]);
        known.push(id);
    }
    // Pipelined: the clock (the transaction's start, the same whenever read) and the lock go
    // out first and the server runs one connection's statements in order, so the journal is
    // read under the locks. (Were it read before them, a concurrent copy committing in between
    // would make our INSERT hit the key, and the batch would rerun as a replay: still
    // correct.) On Citus the locks are several statements, each awaited: the read follows them.
    let (now, locked, found) = futures::try_join!(
        settles::now(tx),
        accounts::lock(tx, &sides),
        journal::find_many(tx, &placing)
    )?;
    let known: Vec<&str> = known.iter().map(String::as_str).collect();
    let states = settles::states(tx, &known).await?;
    Ok(Read {
        locked,
        found,
        states,
        now,
    })
}

/// The new transfers journalled, the changed accounts written, the settled holds moved.
/// Returns the journal rows of the placements, in plan order.
async fn write(
    tx: &Tx<'_>,
    ops: &[&Op],
    plan: &Plan,
    locked: &Locked,
    states: &States,
    now: DateTime<Utc>,
) -> Result<Vec<Transfer>, Error> {
    let placed: Vec<NewTransfer<'_>> = plan
        .placed
        .iter()
        .filter_map(|&i| ops.get(i).and_then(|o| o.new_transfer()))
        .collect();
    let (inserted, ()) = futures::try_join!(
        async {
            if placed.is_empty() {
                Ok(Vec::new())
            } else {
                journal::insert_many(tx, &placed, &plan.currencies, None).await
            }
        },
        accounts::write(tx, locked)
    )?;
    if inserted.len() != placed.len() {
        return Err(Error::invariant(format!(
            "a ledger batch journalled {} of {} transfers",
            inserted.len(),
            placed.len()
        )));
    }
    // After the INSERT: a hold placed and settled in this batch is a row by now.
    settles::settle_many(tx, &plan.settled, states, now).await?;
    Ok(inserted)
}

/// Each operation's answer: a settled transfer as the journal has it after the batch.
async fn answers(
    tx: &Tx<'_>,
    plan: Plan,
    inserted: Vec<Transfer>,
) -> Result<Vec<Result<Transfer, Error>>, Error> {
    let answered: Vec<&str> = plan
        .decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Settled { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    let settled = journal::find_many(tx, &answered).await?;
    let with = |t: Option<&Transfer>, replayed: bool, missing: String| match t {
        Some(t) => Ok(Transfer {
            replayed,
            ..t.clone()
        }),
        None => Err(Error::invariant(missing)),
    };
    Ok(plan
        .decisions
        .into_iter()
        .map(|d| match d {
            Decision::Done(outcome) => outcome,
            Decision::Placed { n, replayed } => with(
                inserted.get(n),
                replayed,
                format!("journal row {n} of a batch missing"),
            ),
            Decision::Settled { id, replayed } => with(
                settled.get(&id),
                replayed,
                format!("settled transfer {id} missing"),
            ),
        })
        .collect())
}
