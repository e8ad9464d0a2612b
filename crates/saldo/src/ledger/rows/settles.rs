//! What a post, void or expiry reads and writes of a hold: the transaction's clock, a
//! transfer's two accounts (before the locks), its settle state (under them), the single-winner
//! status move, and the sweeper's due holds and expiry.
//!
//! On Citus a settle moves both journal sides in one statement and stamps them with the
//! coordinator's clock, read once ([`now`]); a settle that moved one side only is an error.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};

use crate::domain::{AccountId, TransferId, TransferStatus};
use crate::error::Error;
use crate::ledger::apply::TransferState;
use crate::ledger::rows::{events, journal};
use crate::ledger::sql;
use crate::ledger::types::{account_from_db, currency_from_db};
use crate::store::dialect::{Param, Tx};

/// The transaction's time (the coordinator's on Citus): what "due" is decided against and what
/// `settled_at` says.
pub(crate) async fn now(tx: &Tx<'_>) -> Result<DateTime<Utc>, Error> {
    Ok(tx.query_one(&sql::NOW, &[]).await?.try_get("now")?)
}

/// Journal rows written per transfer: one, or its two sides on Citus.
pub(crate) fn rows_per_transfer(tx: &Tx<'_>) -> u64 {
    if tx.dialect().is_citus() {
        2
    } else {
        1
    }
}

/// A transfer id's two accounts (read unlocked: transfer rows never change accounts).
pub(crate) async fn sides(
    tx: &Tx<'_>,
    id: &TransferId,
) -> Result<Option<(AccountId, AccountId)>, Error> {
    let Some(row) = tx.query_opt(&sql::SIDES, &[&id.as_str()]).await? else {
        return Ok(None);
    };
    Ok(Some((
        account_from_db(row.try_get("from_account")?)?,
        account_from_db(row.try_get("to_account")?)?,
    )))
}

/// [`sides`] of many ids: (id, from, to) for those journalled.
pub(crate) async fn sides_many(
    tx: &Tx<'_>,
    ids: &[&str],
) -> Result<Vec<(String, AccountId, AccountId)>, Error> {
    let rows = tx.query(&sql::SIDES_MANY, &[&ids]).await?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get("id")?,
                account_from_db(r.try_get("from_account")?)?,
                account_from_db(r.try_get("to_account")?)?,
            ))
        })
        .collect()
}

/// A transfer's settle state from a row with the state columns.
pub(crate) fn state_of(row: &tokio_postgres::Row) -> Result<TransferState, Error> {
    let status: String = row.try_get("status")?;
    let status = TransferStatus::parse(&status)
        .ok_or_else(|| Error::invariant(format!("transfer status {status:?} unknown")))?;
    Ok(TransferState {
        id: TransferId::new(row.try_get::<_, String>("id")?)?,
        from: account_from_db(row.try_get("from_account")?)?,
        to: account_from_db(row.try_get("to_account")?)?,
        amount: row.try_get("amount")?,
        status,
        posted_amount: row.try_get("posted_amount")?,
        was_pending: row.try_get("was_pending")?,
        expires_at: row.try_get("expires_at")?,
        currency: currency_from_db(&row.try_get::<_, String>("currency")?)?,
    })
}

/// The settle state of transfer `id` from `from` (its accounts held locked by the caller).
pub(crate) async fn state(
    tx: &Tx<'_>,
    id: &TransferId,
    from: AccountId,
) -> Result<TransferState, Error> {
    let row = tx
        .query_opt(&sql::STATE, &[&id.as_str(), &from.get()])
        .await?
        .ok_or_else(|| Error::UnknownTransfer(id.clone()))?;
    state_of(&row)
}

/// The settle states of `ids`, by id (those journalled).
pub(crate) async fn states(
    tx: &Tx<'_>,
    ids: &[&str],
) -> Result<HashMap<String, TransferState>, Error> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = tx.query(&sql::STATE_MANY, &[&ids]).await?;
    rows.iter()
        .map(|r| state_of(r).map(|s| (s.id.as_str().to_owned(), s)))
        .collect()
}

/// Moves a hold the caller read pending under its account locks to `t`'s status. It must move
/// (every settle locks those accounts first; under REPEATABLE READ or SERIALIZABLE a concurrent
/// settle surfaces as 40001 here instead, and the transaction reruns).
pub(crate) async fn settle(
    tx: &Tx<'_>,
    t: &TransferState,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    let (id, status) = (t.id.as_str(), t.status.as_str());
    let (from, to) = (t.from.get(), t.to.get());
    let params: [Param<'_>; 6] = [&id, &status, &t.posted_amount, &from, &to, &now];
    let moved = tx.execute(&sql::SETTLE, &params).await?;
    if moved != rows_per_transfer(tx) {
        return Err(Error::invariant(format!(
            "transfer {id} read pending under its account locks but {moved} rows moved"
        )));
    }
    events::transfer_settled(tx, t, now);
    Ok(())
}

/// Moves every hold a batch settled (`settled`: id → (status, posted amount), each read pending
/// under its account locks, so each must move), in one statement.
pub(crate) async fn settle_many(
    tx: &Tx<'_>,
    settled: &BTreeMap<String, (TransferStatus, Option<i64>)>,
    states: &HashMap<String, TransferState>,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    if settled.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = settled.keys().map(String::as_str).collect();
    let statuses: Vec<&str> = settled.values().map(|(s, _)| s.as_str()).collect();
    let posted: Vec<Option<i64>> = settled.values().map(|(_, p)| *p).collect();
    let moved = if tx.dialect().is_citus() {
        // Debit sides first, then credit sides: every array twice, in the same order.
        let mut accounts = Vec::with_capacity(ids.len() * 2);
        for debit in [true, false] {
            for id in &ids {
                let state = states
                    .get(*id)
                    .ok_or_else(|| Error::invariant(format!("settled hold {id} has no state")))?;
                accounts.push(if debit { state.from } else { state.to }.get());
            }
        }
        let twice = |v: &[_]| v.iter().chain(v).cloned().collect::<Vec<_>>();
        let params: [Param<'_>; 5] = [
            &accounts,
            &twice(&ids),
            &twice(&statuses),
            &posted.iter().chain(&posted).cloned().collect::<Vec<_>>(),
            &now,
        ];
        tx.execute(&sql::CITUS_SETTLE_MANY, &params).await?
    } else {
        tx.execute(&sql::SETTLE_MANY, &[&ids, &statuses, &posted, &now])
            .await?
    };
    let rows = ids.len() as u64 * rows_per_transfer(tx);
    if moved != rows {
        return Err(Error::invariant(format!(
            "a ledger batch settled {moved} of {rows} hold rows it read pending under their locks"
        )));
    }
    for (id, (status, posted_amount)) in settled {
        if let Some(state) = states.get(id) {
            let moved = TransferState {
                status: *status,
                posted_amount: *posted_amount,
                ..state.clone()
            };
            events::transfer_settled(tx, &moved, now);
        }
    }
    Ok(())
}

/// Up to `limit` holds due at `now`, oldest deadline first: (id, from, to), unlocked. With
/// `account`, only the holds it is a side of.
pub(crate) async fn due(
    tx: &Tx<'_>,
    limit: i64,
    now: DateTime<Utc>,
    account: Option<AccountId>,
) -> Result<Vec<(String, AccountId, AccountId)>, Error> {
    let rows = match account {
        None => tx.query(&sql::DUE, &[&limit, &now]).await?,
        Some(a) => tx.query(&sql::DUE_OF, &[&limit, &now, &a.get()]).await?,
    };
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get("id")?,
                account_from_db(r.try_get("from_account")?)?,
                account_from_db(r.try_get("to_account")?)?,
            ))
        })
        .collect()
}

/// Moves those of `ids` still pending and due at `now` to `expired` (both sides on Citus) and
/// returns each one's state as it was: pending, for the books to be released.
pub(crate) async fn expire(
    tx: &Tx<'_>,
    ids: &[String],
    now: DateTime<Utc>,
) -> Result<Vec<TransferState>, Error> {
    let rows = journal::one_per_transfer(tx, tx.query(&sql::EXPIRE, &[&ids, &now]).await?)?;
    let expired = rows
        .iter()
        .map(|r| {
            Ok(TransferState {
                id: TransferId::new(r.try_get::<_, String>("id")?)?,
                from: account_from_db(r.try_get("from_account")?)?,
                to: account_from_db(r.try_get("to_account")?)?,
                amount: r.try_get("amount")?,
                status: TransferStatus::Pending,
                posted_amount: None,
                was_pending: true,
                expires_at: r.try_get("expires_at")?,
                currency: currency_from_db(&r.try_get::<_, String>("currency")?)?,
            })
        })
        .collect::<Result<Vec<TransferState>, Error>>()?;
    for t in &expired {
        let moved = TransferState {
            status: TransferStatus::Expired,
            ..t.clone()
        };
        events::transfer_settled(tx, &moved, now);
    }
    Ok(expired)
}
