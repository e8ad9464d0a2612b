//! The `transfers` journal and the account reads: finding a transfer id for the idempotency
//! decision, writing the rows once the balances moved (one statement for one transfer or a
//! whole group), listing an account's history, and opening an account with its limits (its
//! opening balance is the journal's first row for it).
//!
//! On Citus (`Layout::Citus`, migrations-citus/V2 and V5) a transfer is two rows, its debit
//! side on `from_account`'s shard and its credit side on `to_account`'s, plus its
//! `transfer_ids` row (the global key of the id and the router to its accounts) and, in a
//! group, its `transfer_group_positions` row. Each statement below that must differ there has
//! a `CITUS_` twin next to it; reads return the debit side, one row per transfer.

use deadpool_postgres::Client;

use crate::domain::{AccountId, BalanceLimits, GroupId, TransferId, TransferStatus};
use crate::error::Error;
use crate::ledger::apply::NewTransfer;
use crate::ledger::types::{
    account_from_db, checked_balance, Account, Movement, Transfer, TransferKind,
};
use crate::store::schema::Layout;

/// Every column a [`Transfer`] is read from, in every statement that returns one.
macro_rules! transfer_columns {
    () => {
        "id, from_account, to_account, amount, kind, created_at, status, posted_amount, \
         timeout_s, expires_at, settled_at, group_id"
    };
}

const FIND: &str = concat!(
    "SELECT ",
    transfer_columns!(),
    " FROM transfers WHERE id = $1"
);
/// Citus: the router row of an id (one shard), then its debit side (its account's shard).
const CITUS_ROUTE: &str = "SELECT from_account, to_account FROM transfer_ids WHERE id = $1";
const CITUS_FIND: &str = concat!(
    "SELECT ",
    transfer_columns!(),
    " FROM transfers WHERE account_id = $2 AND id = $1"
);
const FIND_MANY: &str = concat!(
    "SELECT ",
    transfer_columns!(),
    " FROM transfers WHERE id = ANY($1)"
);
/// Citus: every shard read (the ids' accounts are not known yet), the debit sides kept.
const CITUS_FIND_MANY: &str = concat!(
    "SELECT ",
    transfer_columns!(),
    " FROM transfers WHERE id = ANY($1) AND account_id = from_account"
);
const OF_GROUP: &str = concat!(
    "SELECT ",
    transfer_columns!(),
    " FROM transfers WHERE group_id = $1 ORDER BY group_position"
);
const CITUS_OF_GROUP: &str = concat!(
    "SELECT ",
    transfer_columns!(),
    " FROM transfers WHERE group_id = $1 AND account_id = from_account ORDER BY group_position"
);
/// One statement for one transfer or a whole group; a hold's deadline is the database's clock
/// plus its timeout, like every other timestamp of the journal.
const INSERT: &str = concat!(
    "INSERT INTO transfers (id, from_account, to_account, amount, kind, status, timeout_s, \
     expires_at, group_id, group_position) \
     SELECT t.id, t.from_account, t.to_account, t.amount, t.kind, t.status, t.timeout_s, \
            now() + make_interval(secs => t.timeout_s), $9, t.group_position \
       FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[], \
                   $6::text[], $7::int[], $8::smallint[]) \
            AS t(id, from_account, to_account, amount, kind, status, timeout_s, group_position) \
     RETURNING ",
    transfer_columns!()
);
/// Side rows per [`citus_insert_sides`] statement at most: 9 parameters each plus the group,
/// far under PostgreSQL's 65,535, and a bounded number of statement texts per connection.
const CITUS_SIDES_CHUNK: usize = 64;

/// Citus: side rows as multi-row `VALUES`, `$1` the group, then per row its account, id, from,
/// to, amount, kind, status, timeout and group position. Citus routes each row to its
/// account's shard (an `INSERT … SELECT FROM unnest` ran through the coordinator, the slow
/// path that cost the reservation rows most of a multi-item order's time) and evaluates
/// `now()` on the coordinator, so both sides carry one `created_at` and one deadline.
/// `rows` in 1..=[`CITUS_SIDES_CHUNK`].
fn citus_insert_sides(rows: usize) -> String {
    let values: Vec<String> = (0..rows)
        .map(|i| {
            let p = 1 + 9 * i;
            format!(
                "(${a}::bigint, ${id}::text, ${f}::bigint, ${t}::bigint, ${m}::bigint, \
                 ${k}::text, ${s}::text, ${o}::int, now() + make_interval(secs => ${o}::int), \
                 $1::text, ${g}::smallint, now())",
                a = p + 1,
                id = p + 2,
                f = p + 3,
                t = p + 4,
                m = p + 5,
                k = p + 6,
                s = p + 7,
                o = p + 8,
                g = p + 9,
            )
        })
        .collect();
    format!(
        "INSERT INTO transfers (account_id, id, from_account, to_account, amount, kind, status, \
         timeout_s, expires_at, group_id, group_position, created_at) VALUES {} \
         RETURNING account_id, {}",
        values.join(", "),
        transfer_columns!()
    )
}
/// Citus: an id's global key and router, written after the account locks (ARCHITECTURE,
/// "Lock order across workers") and before the sides, so a second transfer under a taken id
/// fails here with 23505 on `transfer_ids_pkey`, as the primary key fails on one node. One row
/// per statement: Citus runs a multi-row `INSERT … SELECT` through COPY, which reports a
/// duplicate as XX000, not as the unique violation the replay path watches for.
const CITUS_INSERT_ID: &str =
    "INSERT INTO transfer_ids (id, from_account, to_account) VALUES ($1, $2, $3)";
/// Citus: the unique (group_id, group_position) the portable index keeps.
const CITUS_INSERT_POSITIONS: &str = "INSERT INTO transfer_group_positions \
     (group_id, group_position, transfer_id) \
     SELECT $1, p, id FROM unnest($2::smallint[], $3::text[]) AS t(p, id)";
const LIST: &str = concat!(
    "SELECT ",
    transfer_columns!(),
    " FROM transfers WHERE from_account = $1 OR to_account = $1 \
     ORDER BY created_at DESC, id DESC LIMIT $2"
);
/// Citus: an account's side of every transfer is on its own shard, one row per transfer.
const CITUS_LIST: &str = concat!(
    "SELECT ",
    transfer_columns!(),
    " FROM transfers WHERE account_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2"
);
const ACCOUNT: &str = "SELECT id, balance, held, pending_credits, min_balance, max_balance \
     FROM accounts WHERE id = $1";
const LOCK_SYSTEM: &str = "SELECT balance FROM accounts WHERE id = 0 FOR UPDATE";
const CREATE: &str = "INSERT INTO accounts (id, balance, min_balance, max_balance) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING RETURNING id";
const DEBIT_SYSTEM: &str = "UPDATE accounts SET balance = balance - $1 WHERE id = 0";
const INSERT_OPENING: &str = "INSERT INTO transfers (id, from_account, to_account, amount, kind) \
     VALUES ($1, $2, $3, $4, $5)";
const INSERT_GROUP: &str = "INSERT INTO transfer_groups (id, size) VALUES ($1, $2)";
const FIND_GROUP: &str = "SELECT size FROM transfer_groups WHERE id = $1";

pub(super) fn parse(row: &tokio_postgres::Row, replayed: bool) -> Result<Transfer, Error> {
    let kind: String = row.try_get("kind")?;
    // The table's CHECK admits only the four kinds: another one means the schema and the code
    // disagree, an error, never a guess.
    let Some(kind) = TransferKind::parse(&kind) else {
        return Err(Error::invariant(format!(
            "transfer kind {kind:?} is not one the schema allows"
        )));
    };
    let status: String = row.try_get("status")?;
    let Some(status) = TransferStatus::parse(&status) else {
        return Err(Error::invariant(format!(
            "transfer status {status:?} is not one the schema allows"
        )));
    };
    let amount: i64 = row.try_get("amount")?;
    // NULL on a posted row means the whole amount (every one-shot transfer).
    let posted_amount = (status == TransferStatus::Posted)
        .then(|| row.try_get::<_, Option<i64>>("posted_amount"))
        .transpose()?
        .map(|p| p.unwrap_or(amount));
    Ok(Transfer {
        id: TransferId::new(row.try_get::<_, String>("id")?)?,
        from: account_from_db(row.try_get("from_account")?)?,
        to: account_from_db(row.try_get("to_account")?)?,
        amount,
        kind,
        created_at: row.try_get("created_at")?,
        replayed,
        status,
        posted_amount,
        timeout_s: row
            .try_get::<_, Option<i32>>("timeout_s")?
            .map(|s| u32::try_from(s).map_err(|_| Error::invariant("negative timeout_s")))
            .transpose()?,
        expires_at: row.try_get("expires_at")?,
        settled_at: row.try_get("settled_at")?,
        group_id: row
            .try_get::<_, Option<String>>("group_id")?
            .map(GroupId::new)
            .transpose()?,
    })
}

pub(super) fn parse_all(
    rows: &[tokio_postgres::Row],
    replayed: bool,
) -> Result<Vec<Transfer>, Error> {
    rows.iter().map(|r| parse(r, replayed)).collect()
}

/// The journalled transfer with this id, if any.
pub(super) async fn find(
    client: &Client,
    layout: Layout,
    id: &TransferId,
) -> Result<Option<Transfer>, Error> {
    let row = match layout {
        Layout::Single => {
            let stmt = client.prepare_cached(FIND).await?;
            client.query_opt(&stmt, &[&id.as_str()]).await?
        }
        Layout::Citus => {
            let stmt = client.prepare_cached(CITUS_ROUTE).await?;
            let Some(route) = client.query_opt(&stmt, &[&id.as_str()]).await? else {
                return Ok(None);
            };
            let from: i64 = route.try_get("from_account")?;
            let stmt = client.prepare_cached(CITUS_FIND).await?;
            client.query_opt(&stmt, &[&id.as_str(), &from]).await?
        }
    };
    match row {
        Some(row) => Ok(Some(parse(&row, true)?)),
        None => Ok(None),
    }
}

/// The journalled transfers among `ids` (any order).
pub(super) async fn find_many(
    client: &Client,
    layout: Layout,
    ids: &[&str],
) -> Result<Vec<Transfer>, Error> {
    let sql = match layout {
        Layout::Single => FIND_MANY,
        Layout::Citus => CITUS_FIND_MANY,
    };
    let stmt = client.prepare_cached(sql).await?;
    parse_all(&client.query(&stmt, &[&ids]).await?, true)
}

/// True when a journalled transfer is what `t` asks for: same accounts, amount, kind, the same
/// timeout (or none) and the same group (or none).
pub(super) fn same_request(
    existing: &Transfer,
    t: &NewTransfer<'_>,
    group: Option<&GroupId>,
) -> bool {
    let m = &t.movement;
    existing.from == m.from
        && existing.to == m.to
        && existing.amount == m.amount.get()
        && existing.kind == m.kind
        && existing.timeout_s == t.pending.map(|p| p.secs())
        && existing.group_id.as_ref() == group
}

/// Same payload → the original result marked as a replay; anything else is a conflict.
pub(super) fn replay(existing: Transfer, t: &NewTransfer<'_>) -> Result<Transfer, Error> {
    if same_request(&existing, t, None) {
        Ok(existing)
    } else {
        Err(Error::TransferConflict(t.movement.id.clone()))
    }
}

/// Journals a movement whose balances were just moved in this transaction.
pub(super) async fn insert(
    client: &Client,
    layout: Layout,
    m: &Movement<'_>,
) -> Result<Transfer, Error> {
    let t = NewTransfer {
        movement: *m,
        pending: None,
    };
    let mut rows = insert_many(client, layout, &[t], None).await?;
    rows.pop()
        .ok_or_else(|| Error::invariant("INSERT … RETURNING gave no row"))
}

/// Journals transfers placed in this transaction (pending or posted), with their group and
/// position in it if any; returned in the order given.
pub(super) async fn insert_many(
    client: &Client,
    layout: Layout,
    ts: &[NewTransfer<'_>],
    group: Option<&GroupId>,
) -> Result<Vec<Transfer>, Error> {
    let ids: Vec<&str> = ts.iter().map(|t| t.movement.id.as_str()).collect();
    let from: Vec<i64> = ts.iter().map(|t| t.movement.from.get()).collect();
    let to: Vec<i64> = ts.iter().map(|t| t.movement.to.get()).collect();
    let amounts: Vec<i64> = ts.iter().map(|t| t.movement.amount.get()).collect();
    let kinds: Vec<&str> = ts.iter().map(|t| t.movement.kind.as_str()).collect();
    let statuses: Vec<&str> = ts.iter().map(|t| t.status().as_str()).collect();
    // Bounded by MAX_TRANSFER_TIMEOUT_S (30 days), far inside i32.
    let timeouts: Vec<Option<i32>> = ts
        .iter()
        .map(|t| {
            t.pending
                .map(|p| i32::try_from(p.secs()).unwrap_or(i32::MAX))
        })
        .collect();
    // Bounded by MAX_GROUP_TRANSFERS (100).
    let positions: Vec<Option<i16>> = (0..ts.len())
        .map(|i| group.map(|_| i16::try_from(i).unwrap_or(i16::MAX)))
        .collect();
    let group = group.map(GroupId::as_str);
    let rows = match layout {
        Layout::Single => {
            let stmt = client.prepare_cached(INSERT).await?;
            client
                .query(
                    &stmt,
                    &[
                        &ids, &from, &to, &amounts, &kinds, &statuses, &timeouts, &positions,
                        &group,
                    ],
                )
                .await?
        }
        Layout::Citus => {
            // Bounded by the batch or group size; each awaited, so the first taken id fails.
            let stmt = client.prepare_cached(CITUS_INSERT_ID).await?;
            for ((id, f), t) in ids.iter().zip(&from).zip(&to) {
                client.execute(&stmt, &[id, f, t]).await?;
            }
            if let Some(group) = group {
                let stmt = client.prepare_cached(CITUS_INSERT_POSITIONS).await?;
                client.execute(&stmt, &[&group, &positions, &ids]).await?;
            }
            // Every debit side (on `from`'s shard), then every credit side (on `to`'s).
            let (n, sides) = (ts.len(), 2 * ts.len());
            let mut rows = Vec::with_capacity(sides);
            for start in (0..sides).step_by(CITUS_SIDES_CHUNK) {
                let end = (start + CITUS_SIDES_CHUNK).min(sides);
                let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                    Vec::with_capacity(1 + 9 * (end - start));
                params.push(&group);
                for i in start..end {
                    let t = i % n;
                    params.push(if i < n { &from[t] } else { &to[t] });
                    params.push(&ids[t]);
                    params.push(&from[t]);
                    params.push(&to[t]);
                    params.push(&amounts[t]);
                    params.push(&kinds[t]);
                    params.push(&statuses[t]);
                    params.push(&timeouts[t]);
                    params.push(&positions[t]);
                }
                // One statement text per chunk size: at most CITUS_SIDES_CHUNK of them.
                let stmt = client
                    .prepare_cached(&citus_insert_sides(end - start))
                    .await?;
                rows.extend(client.query(&stmt, &params).await?);
            }
            debit_sides(rows)?
        }
    };
    let mut by_id: std::collections::HashMap<String, Transfer> = parse_all(&rows, false)?
        .into_iter()
        .map(|t| (t.id.as_str().to_owned(), t))
        .collect();
    ids.iter()
        .map(|id| {
            by_id
                .remove(*id)
                .ok_or_else(|| Error::invariant(format!("transfer {id} inserted but not returned")))
        })
        .collect()
}

/// A column of the two side rows of each transfer on Citus, in the order their accounts are listed:
/// every debit side, then every credit side.
pub(super) fn twice<T: Clone>(column: &[T]) -> Vec<T> {
    column.iter().chain(column).cloned().collect()
}

/// The debit side of each transfer among both sides' rows (with `account_id`); a transfer
/// written without both of its sides is an error, never half an answer.
pub(super) fn debit_sides(
    rows: Vec<tokio_postgres::Row>,
) -> Result<Vec<tokio_postgres::Row>, Error> {
    let total = rows.len();
    let mut debits = Vec::with_capacity(total / 2);
    for row in rows {
        let account: i64 = row.try_get("account_id")?;
        if account == row.try_get::<_, i64>("from_account")? {
            debits.push(row);
        }
    }
    if debits.len() * 2 != total {
        return Err(Error::invariant(format!(
            "{total} journal sides written for {} transfers",
            debits.len()
        )));
    }
    Ok(debits)
}

/// Records a linked group's id (its transfers carry it).
pub(super) async fn insert_group(client: &Client, id: &GroupId, size: usize) -> Result<(), Error> {
    let stmt = client.prepare_cached(INSERT_GROUP).await?;
    // Bounded by MAX_GROUP_TRANSFERS (100).
    let size = i16::try_from(size).unwrap_or(i16::MAX);
    client.execute(&stmt, &[&id.as_str(), &size]).await?;
    Ok(())
}

/// The group's transfers in request order, if the group exists.
pub(super) async fn find_group(
    client: &Client,
    layout: Layout,
    id: &GroupId,
) -> Result<Option<Vec<Transfer>>, Error> {
    let stmt = client.prepare_cached(FIND_GROUP).await?;
    if client.query_opt(&stmt, &[&id.as_str()]).await?.is_none() {
        return Ok(None);
    }
    let sql = match layout {
        Layout::Single => OF_GROUP,
        Layout::Citus => CITUS_OF_GROUP,
    };
    let stmt = client.prepare_cached(sql).await?;
    Ok(Some(parse_all(
        &client.query(&stmt, &[&id.as_str()]).await?,
        true,
    )?))
}

/// An account from a row with the columns of `ACCOUNT` (balance, held, pending_credits,
/// min_balance, max_balance); the account list reads the same ones.
pub(crate) fn account_from_row(id: AccountId, row: &tokio_postgres::Row) -> Result<Account, Error> {
    let balance: i64 = row.try_get("balance")?;
    let held: i64 = row.try_get("held")?;
    Ok(Account {
        id,
        balance,
        held,
        // In range: the schema keeps `balance - held >= min_balance >= -MAX_LIMIT` for
        // customers, and the system account holds nothing.
        available: balance
            .checked_sub(held)
            .ok_or_else(|| Error::invariant(format!("available of account {id} overflows")))?,
        pending_credits: row.try_get("pending_credits")?,
        min_balance: row.try_get("min_balance")?,
        max_balance: row.try_get("max_balance")?,
    })
}

pub(super) async fn account(client: &Client, id: AccountId) -> Result<Account, Error> {
    let stmt = client.prepare_cached(ACCOUNT).await?;
    match client.query_opt(&stmt, &[&id.get()]).await? {
        Some(row) => account_from_row(id, &row),
        None => Err(Error::UnknownAccount(id)),
    }
}

pub(super) async fn list(
    client: &Client,
    layout: Layout,
    id: AccountId,
    limit: i64,
) -> Result<Vec<Transfer>, Error> {
    let sql = match layout {
        Layout::Single => LIST,
        Layout::Citus => CITUS_LIST,
    };
    let stmt = client.prepare_cached(sql).await?;
    parse_all(&client.query(&stmt, &[&id.get(), &limit]).await?, false)
}

/// Creates the account with its limits and journals its opening balance against the system
/// account. The system row (id 0) is locked first, keeping the ascending-id lock order of every
/// ledger path. The caller checked that the opening balance is within the limits.
pub(super) async fn open(
    client: &Client,
    layout: Layout,
    id: AccountId,
    opening_balance: i64,
    limits: BalanceLimits,
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
        .query_opt(
            &stmt,
            &[
                &id.get(),
                &opening_balance,
                &limits.min_balance(),
                &limits.max_balance(),
            ],
        )
        .await?
        .is_none()
    {
        return Err(Error::AccountExists(id));
    }
    if opening_balance > 0 {
        let stmt = client.prepare_cached(DEBIT_SYSTEM).await?;
        client.execute(&stmt, &[&opening_balance]).await?;
        match layout {
            Layout::Single => {
                let stmt = client.prepare_cached(INSERT_OPENING).await?;
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
            Layout::Citus => {
                // Both sides and the id's router, as every transfer writes them there.
                let movement = Movement {
                    id: opening_id,
                    from: AccountId::SYSTEM,
                    to: id,
                    amount: crate::domain::Amount::new(opening_balance)?,
                    kind: TransferKind::Opening,
                };
                insert(client, layout, &movement).await?;
            }
        }
    }
    Ok(Account {
        id,
        balance: opening_balance,
        held: 0,
        available: opening_balance,
        pending_credits: 0,
        min_balance: Some(limits.min_balance()),
        max_balance: limits.max_balance(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Citus sides write the columns the single node's INSERT writes, plus the side's
    /// account and `created_at`; row `i` takes parameters 2 + 9i ..= 10 + 9i, the group is `$1`.
    #[test]
    fn the_citus_sides_number_their_parameters_per_row() {
        let two = citus_insert_sides(2);
        assert!(two.starts_with("INSERT INTO transfers (account_id, id, from_account"));
        assert!(two.contains("VALUES ($2::bigint, $3::text,"));
        assert!(two.contains("$1::text, $10::smallint, now()), ($11::bigint, $12::text,"));
        assert!(two.contains("$1::text, $19::smallint, now()) RETURNING account_id, "));
        assert!(!two.contains("$20"));
    }
}
