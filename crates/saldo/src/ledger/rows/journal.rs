//! The `transfers` journal: finding a transfer id for the idempotency decision, writing the rows
//! of transfers placed in this transaction (one statement for one transfer or a whole group on
//! one node), linked groups, and an account's history.
//!
//! On Citus a transfer is written as its `transfer_ids` row (the id's key, first: a taken id
//! fails there), its group position if any, then both of its sides as multi-row `VALUES`
//! ([`sql::CITUS_INSERT_SIDES`]); reads return the debit side, one row per transfer.

use std::collections::HashMap;

use crate::domain::AccountId;
use crate::domain::{GroupId, Tags, TransferId, TransferStatus};
use crate::error::Error;
use crate::ledger::apply::NewTransfer;
use crate::ledger::currency::Currency;
use crate::ledger::rows::events;
use crate::ledger::sql;
use crate::ledger::types::{account_from_db, currency_from_db, Transfer, TransferKind};
use crate::store::dialect::{Param, Tx};

/// A [`Transfer`] from a row with the transfer columns.
pub(crate) fn parse(row: &tokio_postgres::Row, replayed: bool) -> Result<Transfer, Error> {
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
    let posted: Option<i64> = row.try_get("posted_amount")?;
    Ok(Transfer {
        id: TransferId::new(row.try_get::<_, String>("id")?)?,
        from: account_from_db(row.try_get("from_account")?)?,
        to: account_from_db(row.try_get("to_account")?)?,
        amount,
        currency: currency_from_db(&row.try_get::<_, String>("currency")?)?,
        kind,
        created_at: row.try_get("created_at")?,
        replayed,
        status,
        posted_amount: crate::ledger::transitions::effective_posted(status, amount, posted),
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
        tags: crate::store::tags::from_row(row)?,
        reverses: row
            .try_get::<_, Option<String>>("reverses")?
            .map(TransferId::new)
            .transpose()?,
        reversed_amount: row.try_get("reversed")?,
        reversals: Vec::new(),
    })
}

fn parse_all(rows: &[tokio_postgres::Row], replayed: bool) -> Result<Vec<Transfer>, Error> {
    rows.iter().map(|r| parse(r, replayed)).collect()
}

/// The journalled transfer with this id, if any (as found: not marked replayed).
pub(crate) async fn find(tx: &Tx<'_>, id: &TransferId) -> Result<Option<Transfer>, Error> {
    let id = id.as_str();
    let row = if tx.dialect().is_citus() {
        // The router row first (the id's shard), then the debit side (its account's shard).
        let Some(route) = tx.query_opt(&sql::SIDES, &[&id]).await? else {
            return Ok(None);
        };
        let from: i64 = route.try_get("from_account")?;
        tx.query_opt(&sql::CITUS_FIND, &[&id, &from]).await?
    } else {
        tx.query_opt(&sql::FIND, &[&id]).await?
    };
    row.map(|r| parse(&r, false)).transpose()
}

/// The journalled transfers among `ids` (any order), by id.
pub(crate) async fn find_many(
    tx: &Tx<'_>,
    ids: &[&str],
) -> Result<HashMap<String, Transfer>, Error> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = tx.query(&sql::FIND_MANY, &[&ids]).await?;
    Ok(parse_all(&rows, false)?
        .into_iter()
        .map(|t| (t.id.as_str().to_owned(), t))
        .collect())
}

/// The group's own reference and metadata and its transfers in request order, if the group
/// exists.
pub(crate) async fn find_group(
    tx: &Tx<'_>,
    id: &GroupId,
) -> Result<Option<(Tags, Vec<Transfer>)>, Error> {
    let Some(group) = tx.query_opt(&sql::FIND_GROUP, &[&id.as_str()]).await? else {
        return Ok(None);
    };
    let rows = tx.query(&sql::OF_GROUP, &[&id.as_str()]).await?;
    Ok(Some((
        crate::store::tags::from_row(&group)?,
        parse_all(&rows, false)?,
    )))
}

/// Records a linked group's id (its transfers carry it).
pub(crate) async fn insert_group(
    tx: &Tx<'_>,
    id: &GroupId,
    size: usize,
    tags: &Tags,
) -> Result<(), Error> {
    // Bounded by MAX_GROUP_TRANSFERS (100).
    let size = i16::try_from(size).unwrap_or(i16::MAX);
    let reference = tags.reference.as_ref().map(|r| r.as_str());
    let metadata = tags.metadata_json();
    tx.execute(
        &sql::INSERT_GROUP,
        &[&id.as_str(), &size, &reference, &metadata],
    )
    .await?;
    Ok(())
}

/// An account's latest transfers, newest first.
pub(crate) async fn list(tx: &Tx<'_>, id: AccountId, limit: i64) -> Result<Vec<Transfer>, Error> {
    let rows = tx.query(&sql::LIST, &[&id.get(), &limit]).await?;
    parse_all(&rows, false)
}

/// The columns of transfers to journal, one vector each, in the order given.
struct Columns<'t> {
    ids: Vec<&'t str>,
    from: Vec<i64>,
    to: Vec<i64>,
    amounts: Vec<i64>,
    kinds: Vec<&'static str>,
    statuses: Vec<&'static str>,
    timeouts: Vec<Option<i32>>,
    positions: Vec<Option<i16>>,
    currencies: Vec<&'t str>,
    references: Vec<Option<&'t str>>,
    metadata: Vec<Option<serde_json::Value>>,
    reverses: Vec<Option<&'t str>>,
    group: Option<&'t str>,
}

impl<'t> Columns<'t> {
    fn of(
        ts: &'t [NewTransfer<'t>],
        currencies: &'t [Currency],
        group: Option<&'t GroupId>,
    ) -> Self {
        Columns {
            currencies: currencies.iter().map(Currency::as_str).collect(),
            ids: ts.iter().map(|t| t.movement.id.as_str()).collect(),
            from: ts.iter().map(|t| t.movement.from.get()).collect(),
            to: ts.iter().map(|t| t.movement.to.get()).collect(),
            amounts: ts.iter().map(|t| t.movement.amount.get()).collect(),
            kinds: ts.iter().map(|t| t.movement.kind.as_str()).collect(),
            statuses: ts.iter().map(|t| t.status().as_str()).collect(),
            // Bounded by MAX_TRANSFER_TIMEOUT_S (30 days), far inside i32.
            timeouts: ts
                .iter()
                .map(|t| {
                    t.pending
                        .map(|p| i32::try_from(p.secs()).unwrap_or(i32::MAX))
                })
                .collect(),
            // Bounded by MAX_GROUP_TRANSFERS (100).
            positions: (0..ts.len())
                .map(|i| group.map(|_| i16::try_from(i).unwrap_or(i16::MAX)))
                .collect(),
            references: ts
                .iter()
                .map(|t| t.tags.reference.as_ref().map(|r| r.as_str()))
                .collect(),
            metadata: ts.iter().map(|t| t.tags.metadata_json()).collect(),
            reverses: ts
                .iter()
                .map(|t| t.reverses.map(TransferId::as_str))
                .collect(),
            group: group.map(GroupId::as_str),
        }
    }
}

/// Journals transfers placed in this transaction (pending or posted), each in its currency
/// (`currencies[i]` is `ts[i]`'s, as [`crate::ledger::apply::place`] decided it), with their
/// group and position in it if any; returned in the order given.
pub(crate) async fn insert_many(
    tx: &Tx<'_>,
    ts: &[NewTransfer<'_>],
    currencies: &[Currency],
    group: Option<&GroupId>,
) -> Result<Vec<Transfer>, Error> {
    if currencies.len() != ts.len() {
        return Err(Error::invariant(format!(
            "{} transfers to journal with {} currencies",
            ts.len(),
            currencies.len()
        )));
    }
    let c = Columns::of(ts, currencies, group);
    let rows = if tx.dialect().is_citus() {
        insert_citus(tx, &c).await?
    } else {
        let params: [Param<'_>; 13] = [
            &c.ids,
            &c.from,
            &c.to,
            &c.amounts,
            &c.kinds,
            &c.statuses,
            &c.timeouts,
            &c.positions,
            &c.group,
            &c.currencies,
            &c.references,
            &c.metadata,
            &c.reverses,
        ];
        tx.query(&sql::INSERT_TRANSFERS, &params).await?
    };
    let mut by_id: HashMap<String, Transfer> = parse_all(&rows, false)?
        .into_iter()
        .map(|t| (t.id.as_str().to_owned(), t))
        .collect();
    let inserted = c
        .ids
        .iter()
        .map(|id| {
            by_id
                .remove(*id)
                .ok_or_else(|| Error::invariant(format!("transfer {id} inserted but not returned")))
        })
        .collect::<Result<Vec<Transfer>, Error>>()?;
    events::transfers_created(tx, &inserted)?;
    Ok(inserted)
}

/// Citus: the ids' rows (each awaited, so the first taken id fails), the group positions, then
/// every debit side (on `from`'s shard) and every credit side (on `to`'s), in bounded chunks.
/// Returns the debit sides.
async fn insert_citus(tx: &Tx<'_>, c: &Columns<'_>) -> Result<Vec<tokio_postgres::Row>, Error> {
    for ((id, f), t) in c.ids.iter().zip(&c.from).zip(&c.to) {
        tx.execute(&sql::CITUS_INSERT_ID, &[id, f, t]).await?;
    }
    if let Some(group) = &c.group {
        tx.execute(&sql::CITUS_INSERT_POSITIONS, &[group, &c.positions, &c.ids])
            .await?;
    }
    let (n, sides) = (c.ids.len(), 2 * c.ids.len());
    let width = sql::CITUS_INSERT_SIDES.width();
    let mut rows = Vec::with_capacity(sides);
    for start in (0..sides).step_by(sql::CITUS_SIDES_CHUNK) {
        let end = (start + sql::CITUS_SIDES_CHUNK).min(sides);
        let mut params: Vec<Param<'_>> = Vec::with_capacity(width * (end - start));
        for i in start..end {
            let t = i % n;
            params.extend_from_slice(&[
                if i < n { &c.from[t] } else { &c.to[t] },
                &c.ids[t],
                &c.from[t],
                &c.to[t],
                &c.amounts[t],
                &c.kinds[t],
                &c.statuses[t],
                &c.currencies[t],
                &c.references[t],
                &c.metadata[t],
                &c.reverses[t],
                &c.timeouts[t],
                &c.timeouts[t],
                &c.group,
                &c.positions[t],
            ]);
        }
        // One statement text per chunk size: at most CITUS_SIDES_CHUNK of them.
        let text = sql::CITUS_INSERT_SIDES.statement(end - start);
        let stmt = tx.client().prepare_cached(&text).await?;
        rows.extend(tx.client().query(&stmt, &params).await?);
    }
    debit_sides(rows)
}

/// Rows a write returned, one per transfer: on Citus it returned both sides of each, and the
/// debit sides are kept ([`debit_sides`]).
pub(crate) fn one_per_transfer(
    tx: &Tx<'_>,
    rows: Vec<tokio_postgres::Row>,
) -> Result<Vec<tokio_postgres::Row>, Error> {
    if tx.dialect().is_citus() {
        debit_sides(rows)
    } else {
        Ok(rows)
    }
}

/// The debit side of each transfer among both sides' rows (with `account_id`); a transfer
/// written or moved without both of its sides is an error, never half an answer.
fn debit_sides(rows: Vec<tokio_postgres::Row>) -> Result<Vec<tokio_postgres::Row>, Error> {
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
