//! The `ordered` transfer (seed 002): both account rows are locked by ONE
//! `SELECT … WHERE id = ANY($1) ORDER BY id FOR UPDATE` before any decision, so every transfer
//! takes its locks in ascending id and no two can wait on each other in a cycle. The balance
//! read is the locked balance, so the funds check cannot race the debit either.

use deadpool_postgres::Client;

use crate::domain::AccountId;
use crate::error::Error;
use crate::ledger::types::{checked_balance, Movement};

pub(super) const LOCK: &str =
    "SELECT id, balance FROM accounts WHERE id = ANY($1) ORDER BY id FOR UPDATE";
/// Both rows are already locked by this transaction: the statement order no longer matters.
pub(super) const MOVE: &str = "UPDATE accounts a SET balance = a.balance + d.delta \
     FROM unnest($1::bigint[], $2::bigint[]) AS d(id, delta) WHERE a.id = d.id";

pub(super) async fn move_funds(client: &Client, m: &Movement<'_>) -> Result<(), Error> {
    let ids = [m.from.get(), m.to.get()];
    let stmt = client.prepare_cached(LOCK).await?;
    let rows = client.query(&stmt, &[&&ids[..]]).await?;
    let mut from_balance = None;
    let mut to_balance = None;
    for row in &rows {
        let id: i64 = row.try_get("id")?;
        if id == m.from.get() {
            from_balance = Some(row.try_get::<_, i64>("balance")?);
        } else if id == m.to.get() {
            to_balance = Some(row.try_get::<_, i64>("balance")?);
        }
    }
    let Some(balance) = from_balance else {
        return Err(Error::UnknownAccount(m.from));
    };
    let Some(to_balance) = to_balance else {
        return Err(Error::UnknownAccount(m.to));
    };
    // Only the system account may go negative (it is minus everything ever put in).
    if m.from != AccountId::SYSTEM && balance < m.amount.get() {
        return Err(Error::InsufficientFunds {
            account: m.from,
            requested: m.amount.get(),
            balance,
        });
    }
    // Checked on the locked balances, so the refusal is typed and nothing is half written
    // (PostgreSQL would otherwise abort the UPDATE with 22003, a 500).
    checked_balance(m.from, balance.checked_sub(m.amount.get()))?;
    checked_balance(m.to, to_balance.checked_add(m.amount.get()))?;
    let deltas = [-m.amount.get(), m.amount.get()];
    let stmt = client.prepare_cached(MOVE).await?;
    client.execute(&stmt, &[&&ids[..], &&deltas[..]]).await?;
    Ok(())
}
