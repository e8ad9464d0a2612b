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

use deadpool_postgres::Client;

use crate::domain::{AccountId, GroupId, TransferId, TransferStatus};
use crate::error::Error;
use crate::ledger::apply::{self, AccountRow, Locked, NewTransfer, Settle, Settled, TransferState};
use crate::ledger::journal;
use crate::ledger::types::{account_from_db, Group, Transfer};

const LOCK: &str = "SELECT id, balance, held, pending_credits, min_balance, max_balance \
     FROM accounts WHERE id = ANY($1) ORDER BY id FOR UPDATE";
const LOCK_SKIP: &str = "SELECT id, balance, held, pending_credits, min_balance, max_balance \
     FROM accounts WHERE id = ANY($1) ORDER BY id FOR UPDATE SKIP LOCKED";
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
/// Due holds, oldest deadline first. Not locked here: the account locks come first.
const DUE: &str = "SELECT id, from_account, to_account FROM transfers \
     WHERE status = 'pending' AND expires_at <= now() ORDER BY expires_at LIMIT $1";
const EXPIRE: &str = "UPDATE transfers SET status = 'expired', settled_at = now() \
     WHERE id = ANY($1) AND status = 'pending' AND expires_at <= now() \
     RETURNING id, from_account, to_account, amount";

/// Locks `ids` (any order, repeats allowed) in ascending id with one statement.
pub(crate) async fn lock(client: &Client, ids: &[AccountId]) -> Result<Locked, Error> {
    lock_with(client, LOCK, ids).await
}

async fn lock_with(client: &Client, sql: &str, ids: &[AccountId]) -> Result<Locked, Error> {
    let mut raw: Vec<i64> = ids.iter().map(|a| a.get()).collect();
    raw.sort_unstable();
    raw.dedup();
    let stmt = client.prepare_cached(sql).await?;
    let rows = client.query(&stmt, &[&raw]).await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
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
pub(super) async fn place_one(client: &Client, t: NewTransfer<'_>) -> Result<Transfer, Error> {
    let mut locked = lock(client, &[t.movement.from, t.movement.to]).await?;
    if let Some(existing) = journal::find(client, t.movement.id).await? {
        return journal::replay(existing, &t);
    }
    apply::place(&mut locked, &t)?;
    write(client, &locked).await?;
    let mut rows = journal::insert_many(client, &[t], None).await?;
    rows.pop()
        .ok_or_else(|| Error::invariant("INSERT … RETURNING gave no row"))
}

/// A linked group: all transfers placed on one set of locks, in request order, or none.
pub(super) async fn place_group(
    client: &Client,
    group: &GroupId,
    ts: &[NewTransfer<'_>],
) -> Result<Group, Error> {
    // Locked first, then the ids looked up: see `place_one`.
    let accounts: Vec<AccountId> = ts
        .iter()
        .flat_map(|t| [t.movement.from, t.movement.to])
        .collect();
    let mut locked = lock(client, &accounts).await?;
    if let Some(existing) = journal::find_group(client, group).await? {
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
    let taken = journal::find_many(client, &ids).await?;
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
    let transfers = journal::insert_many(client, ts, Some(group)).await?;
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
    id: &TransferId,
    how: Settle,
) -> Result<Transfer, Error> {
    let stmt = client.prepare_cached(SIDES).await?;
    let Some(sides) = client.query_opt(&stmt, &[&id.as_str()]).await? else {
        return Err(Error::UnknownTransfer(id.clone()));
    };
    let from = account_from_db(sides.try_get("from_account")?)?;
    let to = account_from_db(sides.try_get("to_account")?)?;
    let mut locked = lock(client, &[from, to]).await?;
    let mut state = read_state(client, id).await?;
    let outcome = apply::settle(&mut locked, &mut state, how)?;
    match outcome {
        Settled::Replayed => {}
        Settled::Applied => {
            let stmt = client.prepare_cached(SETTLE).await?;
            let moved = client
                .execute(
                    &stmt,
                    &[&id.as_str(), &state.status.as_str(), &state.posted_amount],
                )
                .await?;
            // Both accounts are locked and every settle locks them first: the row we read as
            // pending is still pending. (Under REPEATABLE READ or SERIALIZABLE a concurrent
            // settle surfaces as 40001 on the UPDATE instead, and the transaction reruns.)
            if moved != 1 {
                return Err(Error::invariant(format!(
                    "transfer {id} read pending under its account locks but not updated"
                )));
            }
            write(client, &locked).await?;
        }
    }
    let mut transfer = journal::find(client, id)
        .await?
        .ok_or_else(|| Error::invariant(format!("transfer {id} vanished")))?;
    transfer.replayed = outcome == Settled::Replayed;
    Ok(transfer)
}

async fn read_state(client: &Client, id: &TransferId) -> Result<TransferState, Error> {
    let stmt = client.prepare_cached(STATE).await?;
    let row = client
        .query_opt(&stmt, &[&id.as_str()])
        .await?
        .ok_or_else(|| Error::UnknownTransfer(id.clone()))?;
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

/// One sweeper batch: up to `batch` due holds whose accounts no one else holds locked expire;
/// the rest wait for the next round. Returns how many expired.
pub(super) async fn expire_batch(client: &Client, batch: i64) -> Result<u64, Error> {
    let stmt = client.prepare_cached(DUE).await?;
    let due = client.query(&stmt, &[&batch]).await?;
    if due.is_empty() {
        return Ok(0);
    }
    let mut accounts = Vec::with_capacity(due.len() * 2);
    for r in &due {
        accounts.push(account_from_db(r.try_get("from_account")?)?);
        accounts.push(account_from_db(r.try_get("to_account")?)?);
    }
    let mut locked = lock_with(client, LOCK_SKIP, &accounts).await?;
    let mut ids = Vec::with_capacity(due.len());
    for r in &due {
        let from = account_from_db(r.try_get("from_account")?)?;
        let to = account_from_db(r.try_get("to_account")?)?;
        if locked.get(from).is_ok() && locked.get(to).is_ok() {
            ids.push(r.try_get::<_, String>("id")?);
        }
    }
    let stmt = client.prepare_cached(EXPIRE).await?;
    let expired = client.query(&stmt, &[&ids]).await?;
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
