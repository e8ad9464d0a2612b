//! The thin transactions around [`super::apply`]: lock the accounts (ONE
//! `SELECT … WHERE id = ANY($1) ORDER BY id FOR UPDATE`), let `apply` decide in memory, then
//! write each changed account once (one UPDATE for all) and the journal rows (one INSERT for
//! all, or the one conditional status UPDATE of a settle).
//!
//! Lock order, for every path: account rows first, in ascending id, all in one statement; a
//! transfer row is only ever written after the locks of both its accounts are held. So no two
//! ledger transactions wait on each other in a cycle, and the settles of one hold (post, void,
//! the sweeper's expiry) queue on the same account locks: the first one moves the hold out of
//! `pending` (`UPDATE … WHERE status = 'pending'`) and the others find the state it reached.
//! The sweeper locks with `SKIP LOCKED` and never waits.
//!
//! On Citus a `FOR UPDATE` may not span shards, so the lock is one `… WHERE id = $1 FOR
//! UPDATE` per account, issued one after the other in ascending id: the same order, now across
//! workers. A hold's settle moves both of its journal sides in one UPDATE, and the statements
//! that stamp a time take it as a parameter read once from the coordinator (`SELECT now()`):
//! each shard's own `now()` is its own transaction's start, and the two sides must agree.

use deadpool_postgres::Client;

use crate::domain::{AccountId, GroupId, TransferId, TransferStatus};
use crate::error::Error;
use crate::ledger::apply::{self, AccountRow, Locked, NewTransfer, Settle, Settled, TransferState};
use crate::ledger::journal;
use crate::ledger::types::{account_from_db, Group, Transfer};
use crate::store::schema::Layout;

const LOCK: &str = "SELECT id, balance, held, pending_credits, min_balance, max_balance \
     FROM accounts WHERE id = ANY($1) ORDER BY id FOR UPDATE";
const LOCK_SKIP: &str = "SELECT id, balance, held, pending_credits, min_balance, max_balance \
     FROM accounts WHERE id = ANY($1) ORDER BY id FOR UPDATE SKIP LOCKED";
/// Citus: one account per statement (a multi-shard `FOR UPDATE` is refused, 0A000).
const CITUS_LOCK: &str = "SELECT id, balance, held, pending_credits, min_balance, max_balance \
     FROM accounts WHERE id = $1 FOR UPDATE";
const CITUS_LOCK_SKIP: &str = "SELECT id, balance, held, pending_credits, min_balance, \
     max_balance FROM accounts WHERE id = $1 FOR UPDATE SKIP LOCKED";
/// Citus: for a transaction that modifies a reference table after a multi-shard statement.
const CITUS_SEQUENTIAL: &str = "SET LOCAL citus.multi_shard_modify_mode TO 'sequential'";
/// Citus: the transaction's time as the coordinator has it, for the settles' `settled_at`.
pub(crate) const CITUS_NOW: &str = "SELECT now() AS now";
/// Every row is locked by this transaction: the statement order no longer matters.
const WRITE: &str = "UPDATE accounts a \
     SET balance = d.balance, held = d.held, pending_credits = d.pending_credits \
     FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[]) \
          AS d(id, balance, held, pending_credits) WHERE a.id = d.id";
const SIDES: &str = "SELECT from_account, to_account FROM transfers WHERE id = $1";
const STATE: &str = "SELECT id, from_account, to_account, amount, status, posted_amount, \
     timeout_s IS NOT NULL AS was_pending FROM transfers WHERE id = $1";
/// The single-winner step: only a transfer still pending moves.
const SETTLE: &str = "UPDATE transfers SET status = $2, posted_amount = $3, settled_at = now() \
     WHERE id = $1 AND status = 'pending'";
/// Citus: the router row (the id's one shard), then the debit side on its account's shard.
pub(crate) const CITUS_SIDES: &str =
    "SELECT from_account, to_account FROM transfer_ids WHERE id = $1";
const CITUS_STATE: &str = "SELECT id, from_account, to_account, amount, status, \
     posted_amount, timeout_s IS NOT NULL AS was_pending \
     FROM transfers WHERE account_id = $2 AND id = $1";
/// Citus: both sides move, or neither.
const CITUS_SETTLE: &str = "UPDATE transfers \
     SET status = $2, posted_amount = $3, settled_at = $6 \
     WHERE account_id IN ($4, $5) AND id = $1 AND status = 'pending'";
/// Due holds, oldest deadline first. Not locked here: the account locks come first.
const DUE: &str = "SELECT id, from_account, to_account FROM transfers \
     WHERE status = 'pending' AND expires_at <= now() ORDER BY expires_at LIMIT $1";
const EXPIRE: &str = "UPDATE transfers SET status = 'expired', settled_at = now() \
     WHERE id = ANY($1) AND status = 'pending' AND expires_at <= now() \
     RETURNING id, from_account, to_account, amount";
/// Citus: due holds, one row per transfer (the debit side), every shard read unlocked.
const CITUS_DUE: &str = "SELECT id, from_account, to_account FROM transfers \
     WHERE status = 'pending' AND expires_at <= $2 AND account_id = from_account \
     ORDER BY expires_at LIMIT $1";
/// Citus: both sides of each; `$2` is the coordinator's `now()`.
const CITUS_EXPIRE: &str = "UPDATE transfers SET status = 'expired', settled_at = $2 \
     WHERE id = ANY($1) AND status = 'pending' AND expires_at <= $2 \
     RETURNING account_id, id, from_account, to_account, amount";

/// Locks `ids` (any order, repeats allowed) in ascending id: one statement on one node, one
/// per account on Citus.
pub(crate) async fn lock(
    client: &Client,
    layout: Layout,
    ids: &[AccountId],
) -> Result<Locked, Error> {
    match layout {
        Layout::Single => lock_with(client, LOCK, ids).await,
        Layout::Citus => lock_each(client, CITUS_LOCK, ids).await,
    }
}

fn ascending(ids: &[AccountId]) -> Vec<i64> {
    let mut raw: Vec<i64> = ids.iter().map(|a| a.get()).collect();
    raw.sort_unstable();
    raw.dedup();
    raw
}

async fn lock_with(client: &Client, sql: &str, ids: &[AccountId]) -> Result<Locked, Error> {
    let raw = ascending(ids);
    let stmt = client.prepare_cached(sql).await?;
    rows_locked(&client.query(&stmt, &[&raw]).await?)
}

/// One statement per account, each awaited before the next is sent: the order of the waits is
/// the ascending order (a missing or skipped account gives no row, as on one node).
async fn lock_each(client: &Client, sql: &str, ids: &[AccountId]) -> Result<Locked, Error> {
    let stmt = client.prepare_cached(sql).await?;
    let mut rows = Vec::new();
    for id in ascending(ids) {
        rows.extend(client.query_opt(&stmt, &[&id]).await?);
    }
    rows_locked(&rows)
}

fn rows_locked(rows: &[tokio_postgres::Row]) -> Result<Locked, Error> {
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(AccountRow {
            id: account_from_db(r.try_get("id")?)?,
            balance: r.try_get("balance")?,
            held: r.try_get("held")?,
            pending_credits: r.try_get("pending_credits")?,
            min_balance: r.try_get("min_balance")?,
            max_balance: r.try_get("max_balance")?,
        });
    }
    Ok(Locked::new(out))
}

/// Writes every changed row once, in one statement.
pub(crate) async fn write(client: &Client, locked: &Locked) -> Result<(), Error> {
    let rows: Vec<&AccountRow> = locked.changed().collect();
    if rows.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = rows.iter().map(|r| r.id.get()).collect();
    let balances: Vec<i64> = rows.iter().map(|r| r.balance).collect();
    let held: Vec<i64> = rows.iter().map(|r| r.held).collect();
    let credits: Vec<i64> = rows.iter().map(|r| r.pending_credits).collect();
    let stmt = client.prepare_cached(WRITE).await?;
    client
        .execute(&stmt, &[&ids, &balances, &held, &credits])
        .await?;
    Ok(())
}

/// One new transfer (posted or held): lock, replay if its id is journalled, else place, write.
/// The id is looked up under the account locks: a concurrent copy of the same request that
/// committed while we waited for them is found and answered as a replay, never refused for the
/// funds it took itself.
pub(super) async fn place_one(
    client: &Client,
    layout: Layout,
    t: NewTransfer<'_>,
) -> Result<Transfer, Error> {
    let mut locked = lock(client, layout, &[t.movement.from, t.movement.to]).await?;
    if let Some(existing) = journal::find(client, layout, t.movement.id).await? {
        return journal::replay(existing, &t);
    }
    apply::place(&mut locked, &t)?;
    write(client, &locked).await?;
    let mut rows = journal::insert_many(client, layout, &[t], None).await?;
    rows.pop()
        .ok_or_else(|| Error::invariant("INSERT … RETURNING gave no row"))
}

/// A linked group: all transfers placed on one set of locks, in request order, or none.
pub(super) async fn place_group(
    client: &Client,
    layout: Layout,
    group: &GroupId,
    ts: &[NewTransfer<'_>],
) -> Result<Group, Error> {
    // Locked first, then the ids looked up: see `place_one`.
    let accounts: Vec<AccountId> = ts
        .iter()
        .flat_map(|t| [t.movement.from, t.movement.to])
        .collect();
    if layout == Layout::Citus {
        // The group writes reference tables (transfer_groups, its positions) after reading
        // every journal shard; Citus allows that only over one connection per node.
        client.batch_execute(CITUS_SEQUENTIAL).await?;
    }
    let mut locked = lock(client, layout, &accounts).await?;
    if let Some(existing) = journal::find_group(client, layout, group).await? {
        let same = existing.len() == ts.len()
            && existing
                .iter()
                .zip(ts)
                .all(|(e, t)| e.id == *t.movement.id && journal::same_request(e, t, Some(group)));
        return if same {
            Ok(Group {
                id: group.clone(),
                transfers: existing,
                replayed: true,
            })
        } else {
            Err(Error::GroupConflict(group.clone()))
        };
    }
    let refused = |index: usize, source: Error| Error::GroupRefused {
        group: group.clone(),
        index,
        transfer: ts[index].movement.id.clone(),
        source: Box::new(source),
    };
    let ids: Vec<&str> = ts.iter().map(|t| t.movement.id.as_str()).collect();
    let taken = journal::find_many(client, layout, &ids).await?;
    if let Some(index) = ts
        .iter()
        .position(|t| taken.iter().any(|e| e.id == *t.movement.id))
    {
        let id = ts[index].movement.id.clone();
        return Err(refused(index, Error::TransferConflict(id)));
    }
    for (index, t) in ts.iter().enumerate() {
        apply::place(&mut locked, t).map_err(|e| refused(index, e))?;
    }
    journal::insert_group(client, group, ts.len()).await?;
    let transfers = journal::insert_many(client, layout, ts, Some(group)).await?;
    write(client, &locked).await?;
    Ok(Group {
        id: group.clone(),
        transfers,
        replayed: false,
    })
}

/// Post or void one hold: its accounts locked first, then its state read and settled.
pub(super) async fn settle_one(
    client: &Client,
    layout: Layout,
    id: &TransferId,
    how: Settle,
) -> Result<Transfer, Error> {
    let sides = match layout {
        Layout::Single => SIDES,
        Layout::Citus => CITUS_SIDES,
    };
    let stmt = client.prepare_cached(sides).await?;
    let Some(sides) = client.query_opt(&stmt, &[&id.as_str()]).await? else {
        return Err(Error::UnknownTransfer(id.clone()));
    };
    let from = account_from_db(sides.try_get("from_account")?)?;
    let to = account_from_db(sides.try_get("to_account")?)?;
    // Citus: the coordinator's `now()` for both sides, read before the locks (it is the
    // transaction's start, the same value whenever read).
    let now = match layout {
        Layout::Single => None,
        Layout::Citus => Some(coordinator_now(client).await?),
    };
    let mut locked = lock(client, layout, &[from, to]).await?;
    let mut state = read_state(client, layout, id, from).await?;
    let outcome = apply::settle(&mut locked, &mut state, how)?;
    match outcome {
        Settled::Replayed => {}
        Settled::Applied => {
            let (id_s, status) = (id.as_str(), state.status.as_str());
            let (moved, sides) = match layout {
                Layout::Single => {
                    let stmt = client.prepare_cached(SETTLE).await?;
                    let moved = client
                        .execute(&stmt, &[&id_s, &status, &state.posted_amount])
                        .await?;
                    (moved, 1)
                }
                Layout::Citus => {
                    let now = now.ok_or_else(|| Error::invariant("Citus settle without a time"))?;
                    let stmt = client.prepare_cached(CITUS_SETTLE).await?;
                    let (f, t) = (from.get(), to.get());
                    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] =
                        [&id_s, &status, &state.posted_amount, &f, &t, &now];
                    (client.execute(&stmt, &params).await?, 2)
                }
            };
            // Both accounts are locked and every settle locks them first: the row we read as
            // pending is still pending. (Under REPEATABLE READ or SERIALIZABLE a concurrent
            // settle surfaces as 40001 on the UPDATE instead, and the transaction reruns.)
            if moved != sides {
                return Err(Error::invariant(format!(
                    "transfer {id} read pending under its account locks but not updated"
                )));
            }
            write(client, &locked).await?;
        }
    }
    let mut transfer = journal::find(client, layout, id)
        .await?
        .ok_or_else(|| Error::invariant(format!("transfer {id} vanished")))?;
    transfer.replayed = outcome == Settled::Replayed;
    Ok(transfer)
}

async fn read_state(
    client: &Client,
    layout: Layout,
    id: &TransferId,
    from: AccountId,
) -> Result<TransferState, Error> {
    let row = match layout {
        Layout::Single => {
            let stmt = client.prepare_cached(STATE).await?;
            client.query_opt(&stmt, &[&id.as_str()]).await?
        }
        Layout::Citus => {
            let stmt = client.prepare_cached(CITUS_STATE).await?;
            client
                .query_opt(&stmt, &[&id.as_str(), &from.get()])
                .await?
        }
    };
    let row = row.ok_or_else(|| Error::UnknownTransfer(id.clone()))?;
    state_of(&row, id.clone())
}

/// A transfer's settle state from a row of `STATE`'s columns (the batched engine reads many).
pub(crate) fn state_of(row: &tokio_postgres::Row, id: TransferId) -> Result<TransferState, Error> {
    let status: String = row.try_get("status")?;
    let status = TransferStatus::parse(&status)
        .ok_or_else(|| Error::invariant(format!("transfer status {status:?} unknown")))?;
    Ok(TransferState {
        id,
        from: account_from_db(row.try_get("from_account")?)?,
        to: account_from_db(row.try_get("to_account")?)?,
        amount: row.try_get("amount")?,
        status,
        posted_amount: row.try_get("posted_amount")?,
        was_pending: row.try_get("was_pending")?,
    })
}

/// The coordinator's `now()` (Citus): one timestamp for both sides of a settle.
pub(crate) async fn coordinator_now(
    client: &Client,
) -> Result<chrono::DateTime<chrono::Utc>, Error> {
    let stmt = client.prepare_cached(CITUS_NOW).await?;
    Ok(client.query_one(&stmt, &[]).await?.try_get("now")?)
}

/// One sweeper batch: up to `batch` due holds whose accounts no one else holds locked expire;
/// the rest wait for the next round. Returns how many expired.
pub(super) async fn expire_batch(
    client: &Client,
    layout: Layout,
    batch: i64,
) -> Result<u64, Error> {
    let now = match layout {
        Layout::Single => None,
        Layout::Citus => Some(coordinator_now(client).await?),
    };
    let due = match now {
        None => {
            let stmt = client.prepare_cached(DUE).await?;
            client.query(&stmt, &[&batch]).await?
        }
        Some(now) => {
            let stmt = client.prepare_cached(CITUS_DUE).await?;
            client.query(&stmt, &[&batch, &now]).await?
        }
    };
    if due.is_empty() {
        return Ok(0);
    }
    let mut accounts = Vec::with_capacity(due.len() * 2);
    for r in &due {
        accounts.push(account_from_db(r.try_get("from_account")?)?);
        accounts.push(account_from_db(r.try_get("to_account")?)?);
    }
    let mut locked = match layout {
        Layout::Single => lock_with(client, LOCK_SKIP, &accounts).await?,
        Layout::Citus => lock_each(client, CITUS_LOCK_SKIP, &accounts).await?,
    };
    let mut ids = Vec::with_capacity(due.len());
    for r in &due {
        let from = account_from_db(r.try_get("from_account")?)?;
        let to = account_from_db(r.try_get("to_account")?)?;
        if locked.get(from).is_ok() && locked.get(to).is_ok() {
            ids.push(r.try_get::<_, String>("id")?);
        }
    }
    let expired = match now {
        None => {
            let stmt = client.prepare_cached(EXPIRE).await?;
            client.query(&stmt, &[&ids]).await?
        }
        Some(now) => {
            let stmt = client.prepare_cached(CITUS_EXPIRE).await?;
            let sides = client.query(&stmt, &[&ids, &now]).await?;
            journal::debit_sides(sides)?
        }
    };
    for r in &expired {
        let mut state = TransferState {
            id: TransferId::new(r.try_get::<_, String>("id")?)?,
            from: account_from_db(r.try_get("from_account")?)?,
            to: account_from_db(r.try_get("to_account")?)?,
            amount: r.try_get("amount")?,
            // The UPDATE moved it from pending just now, under our locks.
            status: TransferStatus::Pending,
            posted_amount: None,
            was_pending: true,
        };
        apply::settle(&mut locked, &mut state, Settle::Expire)?;
    }
    write(client, &locked).await?;
    Ok(expired.len() as u64)
}
