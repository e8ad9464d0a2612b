//! The naive holds, for the race lab only (never safe, never served): the bugs the ledger's
//! holds and linked groups are designed against, written the way a first attempt would.
//!
//! - [`settle`]: read the hold's status without a lock, decide in the application, think, then
//!   write the new status unconditionally and move the account columns. A post, a void and the
//!   sweeper that all read `pending` all "win".
//! - [`hold`]: read the source's `balance - held` without a lock, decide, think, then write the
//!   `held` computed in the application (`SET held = <value>`): the lost update. Concurrent holds
//!   for the last funds all pass and the account is held beyond what it has.
//! - [`group`]: a linked group that locks each transfer's accounts as it reaches them, in the
//!   order the request names them: two groups that cross lock in opposite orders and deadlock.
//! - [`reverse`]: read what is left of the original without a lock, decide, think, then write
//!   the reversal, the balances and the original's counters as computed in the application
//!   (`SET reversed = <value>, reversals = <value>`): concurrent reversals all read the same amount left and
//!   together move back more than was posted.
//!
//! Like `naive::ledger`, their statements write the schema directly: the wrong SQL is the
//! demonstration.

use std::time::Duration;

use deadpool_postgres::Pool;

use saldo::domain::{TransferStatus, TransferTimeout};
use saldo::error::Error;
use saldo::ledger::{ReversalRequest, Settle, TransferRequest};
use saldo::retry::{in_transaction, TxOptions};

use crate::naive::stock::MAX_THINK;

const READ_HOLD: &str =
    "SELECT from_account, to_account, amount, status FROM transfers WHERE id = $1";
const WRITE_STATUS: &str = "UPDATE transfers SET status = $2, posted_amount = $3, \
     settled_at = now() WHERE id = $1";
const DEBIT_SIDE: &str =
    "UPDATE accounts SET held = held - $2, balance = balance - $3 WHERE id = $1";
const CREDIT_SIDE: &str = "UPDATE accounts SET pending_credits = pending_credits - $2, \
     balance = balance + $3 WHERE id = $1";
const READ_ACCOUNT: &str = "SELECT balance, held, coalesce(min_balance, 0) AS min_balance \
     FROM accounts WHERE id = $1";
const OVERWRITE_HELD: &str = "UPDATE accounts SET held = $2 WHERE id = $1";
const ADD_PENDING_CREDIT: &str =
    "UPDATE accounts SET pending_credits = pending_credits + $2 WHERE id = $1";
const INSERT_HOLD: &str = "INSERT INTO transfers \
     (id, from_account, to_account, amount, kind, status, timeout_s, expires_at) \
     VALUES ($1, $2, $3, $4, 'transfer', 'pending', $5::int, now() + make_interval(secs => $5::int))";
const READ_LEFT: &str =
    "SELECT from_account, to_account, coalesce(posted_amount, amount) AS posted, \
     reversed, reversals FROM transfers WHERE id = $1 AND status = 'posted'";
const INSERT_REVERSAL: &str = "INSERT INTO transfers \
     (id, from_account, to_account, amount, kind, reverses) VALUES ($1, $2, $3, $4, 'reversal', $5)";
const OVERWRITE_REVERSED: &str = "UPDATE transfers SET reversed = $2, reversals = $3 WHERE id = $1";
const LOCK_ONE: &str = "SELECT balance FROM accounts WHERE id = $1 FOR UPDATE";
const MOVE: &str = "UPDATE accounts SET balance = balance + $2 WHERE id = $1";
const INSERT_POSTED: &str = "INSERT INTO transfers (id, from_account, to_account, amount, kind) \
     VALUES ($1, $2, $3, $4, 'transfer')";

/// What a naive settle answers: it "won", or the status it read was not pending.
pub async fn settle(
    pool: &Pool,
    options: &TxOptions,
    id: &str,
    how: Settle,
    think: Duration,
) -> Result<TransferStatus, Error> {
    let client = saldo::retry::checkout(pool, saldo::Operation::Lab).await?;
    let Some(row) = client.query_opt(READ_HOLD, &[&id]).await? else {
        return Err(Error::Invariant(format!("no transfer {id}")));
    };
    let status: String = row.try_get("status")?;
    let status = TransferStatus::parse(&status).unwrap_or(TransferStatus::Posted);
    if status != TransferStatus::Pending {
        return Ok(status);
    }
    let (from, to, amount): (i64, i64, i64) = (
        row.try_get("from_account")?,
        row.try_get("to_account")?,
        row.try_get("amount")?,
    );
    drop(client);
    tokio::time::sleep(think.min(MAX_THINK)).await;
    let (target, posted) = match how {
        Settle::Post(n) => (TransferStatus::Posted, n.map_or(amount, |n| n.get())),
        Settle::Void => (TransferStatus::Voided, 0),
        Settle::Expire => (TransferStatus::Expired, 0),
    };
    in_transaction(pool, options, saldo::Operation::Lab, |client| {
        saldo::tx_body!(client => async {
            let posted_amount = (posted > 0).then_some(posted);
            client
                .execute(WRITE_STATUS, &[&id, &target.as_str(), &posted_amount])
                .await?;
            client.execute(DEBIT_SIDE, &[&from, &amount, &posted]).await?;
            client.execute(CREDIT_SIDE, &[&to, &amount, &posted]).await?;
            Ok::<_, Error>(())
        })
    })
    .await?;
    Ok(target)
}

/// A naive hold: refused with [`Error::InsufficientFunds`] when what it read does not cover it.
pub async fn hold(
    pool: &Pool,
    options: &TxOptions,
    request: &TransferRequest,
    timeout: TransferTimeout,
    think: Duration,
) -> Result<(), Error> {
    let client = saldo::retry::checkout(pool, saldo::Operation::Lab).await?;
    let row = client
        .query_one(READ_ACCOUNT, &[&request.from.get()])
        .await?;
    let (balance, held, min): (i64, i64, i64) = (
        row.try_get("balance")?,
        row.try_get("held")?,
        row.try_get("min_balance")?,
    );
    drop(client);
    let amount = request.amount.get();
    if balance - held - amount < min {
        return Err(Error::InsufficientFunds {
            account: request.from,
            requested: amount,
            balance,
            held,
            min_balance: min,
        });
    }
    tokio::time::sleep(think.min(MAX_THINK)).await;
    let timeout_s = i32::try_from(timeout.secs()).unwrap_or(i32::MAX);
    in_transaction(pool, options, saldo::Operation::Lab, |client| {
        saldo::tx_body!(client => async {
            client
                .execute(OVERWRITE_HELD, &[&request.from.get(), &(held + amount)])
                .await?;
            client
                .execute(ADD_PENDING_CREDIT, &[&request.to.get(), &amount])
                .await?;
            client
                .execute(
                    INSERT_HOLD,
                    &[
                        &request.id.as_str(),
                        &request.from.get(),
                        &request.to.get(),
                        &amount,
                        &timeout_s,
                    ],
                )
                .await?;
            Ok::<_, Error>(())
        })
    })
    .await
}

/// A naive linked group of posted transfers: each account locked when its transfer reaches it,
/// in request order, with `think` between the two locks of a transfer.
pub async fn group(
    pool: &Pool,
    options: &TxOptions,
    transfers: &[TransferRequest],
    think: Duration,
) -> Result<(), Error> {
    let think = think.min(MAX_THINK);
    in_transaction(pool, options, saldo::Operation::Lab, |client| {
        saldo::tx_body!(client => async {
            for t in transfers {
                let balance: i64 = client
                    .query_one(LOCK_ONE, &[&t.from.get()])
                    .await?
                    .try_get("balance")?;
                tokio::time::sleep(think).await;
                client.query_one(LOCK_ONE, &[&t.to.get()]).await?;
                let amount = t.amount.get();
                if balance < amount {
                    return Err(Error::InsufficientFunds {
                        account: t.from,
                        requested: amount,
                        balance,
                        held: 0,
                        min_balance: 0,
                    });
                }
                client.execute(MOVE, &[&t.from.get(), &-amount]).await?;
                client.execute(MOVE, &[&t.to.get(), &amount]).await?;
                client
                    .execute(
                        INSERT_POSTED,
                        &[&t.id.as_str(), &t.from.get(), &t.to.get(), &amount],
                    )
                    .await?;
            }
            Ok::<_, Error>(())
        })
    })
    .await
}

/// A naive reversal: refused with [`Error::ReversalExceedsPosted`] when what it read is not
/// left.
pub async fn reverse(
    pool: &Pool,
    options: &TxOptions,
    request: &ReversalRequest,
    think: Duration,
) -> Result<(), Error> {
    let client = saldo::retry::checkout(pool, saldo::Operation::Lab).await?;
    let original = request.original.as_str();
    let Some(row) = client.query_opt(READ_LEFT, &[&original]).await? else {
        return Err(Error::Invariant(format!("no posted transfer {original}")));
    };
    let (from, to, posted, reversed): (i64, i64, i64, i64) = (
        row.try_get("from_account")?,
        row.try_get("to_account")?,
        row.try_get("posted")?,
        row.try_get("reversed")?,
    );
    let reversals: i32 = row.try_get("reversals")?;
    drop(client);
    let amount = request.amount.map_or(posted - reversed, |a| a.get());
    if amount < 1 || reversed + amount > posted {
        return Err(Error::ReversalExceedsPosted {
            id: request.original.clone(),
            posted,
            reversed,
            requested: request.amount.map(|a| a.get()),
        });
    }
    tokio::time::sleep(think.min(MAX_THINK)).await;
    in_transaction(pool, options, saldo::Operation::Lab, |client| {
        saldo::tx_body!(client => async {
            let id = request.id.as_str();
            client
                .execute(INSERT_REVERSAL, &[&id, &to, &from, &amount, &original])
                .await?;
            client.execute(MOVE, &[&to, &-amount]).await?;
            client.execute(MOVE, &[&from, &amount]).await?;
            client
                .execute(
                    OVERWRITE_REVERSED,
                    &[&original, &(reversed + amount), &(reversals + 1)],
                )
                .await?;
            Ok::<_, Error>(())
        })
    })
    .await
}
