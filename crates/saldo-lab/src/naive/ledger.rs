//! The `naive` transfer, for the race lab only: debit `from`, then credit `to`, each UPDATE locking
//! its row as it goes, so the lock order is whatever order the caller named the accounts in. Two
//! crossed transfers lock in opposite orders and PostgreSQL aborts one with 40P01 after
//! `deadlock_timeout` (the crossed-transfers deadlock). Each step is still conditional, so naive
//! can fail but never corrupts a balance: the only defect it shows is the deadlock.

use deadpool_postgres::Client;
use tokio_postgres::error::SqlState;

use saldo::domain::AccountId;
use saldo::error::Error;
use saldo::ledger::{MoveFunds, Movement};
use saldo::schema::Layout;

const DEBIT: &str = "UPDATE accounts SET balance = balance - $2 \
     WHERE id = $1 AND (min_balance IS NULL OR balance - held - $2 >= min_balance)";
const CREDIT: &str = "UPDATE accounts SET balance = balance + $2 WHERE id = $1";
const BALANCE: &str = "SELECT balance, held, min_balance FROM accounts WHERE id = $1";

/// The naive transfer strategy: debit, then credit, in the order the caller named the accounts.
#[derive(Debug, Clone, Copy, Default)]
pub struct NaiveTransfer;

#[async_trait::async_trait]
impl MoveFunds for NaiveTransfer {
    // The same two UPDATEs on both layouts: each names one account (its distribution value on
    // Citus), so Citus routes each to one shard, in the caller's order: still naive there.
    async fn move_funds(
        &self,
        client: &Client,
        _layout: Layout,
        m: &Movement<'_>,
    ) -> Result<(), Error> {
        move_funds(client, m).await
    }
}

async fn move_funds(client: &Client, m: &Movement<'_>) -> Result<(), Error> {
    let amount = m.amount.get();
    let stmt = client.prepare_cached(DEBIT).await?;
    let debited = client
        .execute(&stmt, &[&m.from.get(), &amount])
        .await
        .map_err(|e| out_of_range_as(e, m.from))?;
    if debited == 0 {
        let stmt = client.prepare_cached(BALANCE).await?;
        return Err(match client.query_opt(&stmt, &[&m.from.get()]).await? {
            None => Error::UnknownAccount(m.from),
            Some(row) => Error::InsufficientFunds {
                account: m.from,
                requested: amount,
                balance: row.try_get("balance")?,
                held: row.try_get("held")?,
                min_balance: row.try_get::<_, Option<i64>>("min_balance")?.unwrap_or(0),
            },
        });
    }
    let stmt = client.prepare_cached(CREDIT).await?;
    let credited = client
        .execute(&stmt, &[&m.to.get(), &amount])
        .await
        .map_err(|e| out_of_range_as(e, m.to))?;
    if credited == 0 {
        return Err(Error::UnknownAccount(m.to));
    }
    Ok(())
}

/// Naive reads no balance before it writes, so an overflow shows up as PostgreSQL's 22003;
/// it is the same refusal the ordered strategy decides up front.
fn out_of_range_as(e: tokio_postgres::Error, account: AccountId) -> Error {
    if e.code() == Some(&SqlState::NUMERIC_VALUE_OUT_OF_RANGE) {
        Error::BalanceOutOfRange { account }
    } else {
        Error::Database(e)
    }
}
