//! The `transfers` journal and the account reads: finding a transfer id for the idempotency
//! decision, writing the row once the balances moved, listing an account's history, and opening
//! an account (its opening balance is the journal's first row for it).

use deadpool_postgres::Client;

use crate::domain::{AccountId, TransferId};
use crate::error::Error;
use crate::ledger::types::{
    account_from_db, checked_balance, Account, Movement, Transfer, TransferKind,
};

const FIND: &str =
    "SELECT id, from_account, to_account, amount, kind, created_at FROM transfers WHERE id = $1";
const INSERT: &str = "INSERT INTO transfers (id, from_account, to_account, amount, kind) \
     VALUES ($1, $2, $3, $4, $5) RETURNING id, from_account, to_account, amount, kind, created_at";
const LIST: &str = "SELECT id, from_account, to_account, amount, kind, created_at FROM transfers \
     WHERE from_account = $1 OR to_account = $1 ORDER BY created_at DESC, id DESC LIMIT $2";
const ACCOUNT: &str = "SELECT id, balance FROM accounts WHERE id = $1";
const LOCK_SYSTEM: &str = "SELECT balance FROM accounts WHERE id = 0 FOR UPDATE";
const CREATE: &str = "INSERT INTO accounts (id, balance) VALUES ($1, $2) \
     ON CONFLICT (id) DO NOTHING RETURNING id, balance";
const DEBIT_SYSTEM: &str = "UPDATE accounts SET balance = balance - $1 WHERE id = 0";

pub(super) fn parse(row: &tokio_postgres::Row, replayed: bool) -> Result<Transfer, Error> {
    let kind: String = row.try_get("kind")?;
    // The table's CHECK admits only the four kinds: another one means the schema and the code
    // disagree, an error, never a guess.
    let Some(kind) = TransferKind::parse(&kind) else {
        return Err(Error::invariant(format!(
            "transfer kind {kind:?} is not one the schema allows"
        )));
    };
    Ok(Transfer {
        id: TransferId::new(row.try_get::<_, String>("id")?)?,
        from: account_from_db(row.try_get("from_account")?)?,
        to: account_from_db(row.try_get("to_account")?)?,
        amount: row.try_get("amount")?,
        kind,
        created_at: row.try_get("created_at")?,
        replayed,
    })
}

/// The journalled transfer with this id, if any.
pub(super) async fn find(client: &Client, id: &TransferId) -> Result<Option<Transfer>, Error> {
    let stmt = client.prepare_cached(FIND).await?;
    match client.query_opt(&stmt, &[&id.as_str()]).await? {
        Some(row) => Ok(Some(parse(&row, true)?)),
        None => Ok(None),
    }
}

/// Same payload → the original result marked as a replay; anything else is a conflict.
pub(super) fn replay(existing: Transfer, m: &Movement<'_>) -> Result<Transfer, Error> {
    if existing.from == m.from
        && existing.to == m.to
        && existing.amount == m.amount.get()
        && existing.kind == m.kind
    {
        Ok(existing)
    } else {
        Err(Error::TransferConflict(m.id.clone()))
    }
}

/// Journals a movement whose balances were just moved in this transaction.
pub(super) async fn insert(client: &Client, m: &Movement<'_>) -> Result<Transfer, Error> {
    let stmt = client.prepare_cached(INSERT).await?;
    let row = client
        .query_one(
            &stmt,
            &[
                &m.id.as_str(),
                &m.from.get(),
                &m.to.get(),
                &m.amount.get(),
                &m.kind.as_str(),
            ],
        )
        .await?;
    parse(&row, false)
}

pub(super) async fn account(client: &Client, id: AccountId) -> Result<Account, Error> {
    let stmt = client.prepare_cached(ACCOUNT).await?;
    match client.query_opt(&stmt, &[&id.get()]).await? {
        Some(row) => Ok(Account {
            id,
            balance: row.try_get("balance")?,
        }),
        None => Err(Error::UnknownAccount(id)),
    }
}

pub(super) async fn list(
    client: &Client,
    id: AccountId,
    limit: i64,
) -> Result<Vec<Transfer>, Error> {
    let stmt = client.prepare_cached(LIST).await?;
    client
        .query(&stmt, &[&id.get(), &limit])
        .await?
        .iter()
        .map(|r| parse(r, false))
        .collect()
}

/// Creates the account and journals its opening balance against the system account. The system
/// row (id 0) is locked first, keeping the ascending-id lock order of every ledger path.
pub(super) async fn open(
    client: &Client,
    id: AccountId,
    opening_balance: i64,
    opening_id: &TransferId,
) -> Result<Account, Error> {
    let stmt = client.prepare_cached(LOCK_SYSTEM).await?;
    let system_balance: i64 = client.query_one(&stmt, &[]).await?.try_get("balance")?;
    // Decided on the locked system balance before the account row exists, so a refusal leaves
    // nothing behind (the UPDATE would otherwise fail with 22003 after the INSERT).
    checked_balance(
        AccountId::SYSTEM,
        system_balance.checked_sub(opening_balance),
    )?;
    let stmt = client.prepare_cached(CREATE).await?;
    if client
        .query_opt(&stmt, &[&id.get(), &opening_balance])
        .await?
        .is_none()
    {
        return Err(Error::AccountExists(id));
    }
    if opening_balance > 0 {
        let stmt = client.prepare_cached(DEBIT_SYSTEM).await?;
        client.execute(&stmt, &[&opening_balance]).await?;
        let stmt = client.prepare_cached(INSERT).await?;
        client
            .execute(
                &stmt,
                &[
                    &opening_id.as_str(),
                    &AccountId::SYSTEM.get(),
                    &id.get(),
                    &opening_balance,
                    &TransferKind::Opening.as_str(),
                ],
            )
            .await?;
    }
    Ok(Account {
        id,
        balance: opening_balance,
    })
}
