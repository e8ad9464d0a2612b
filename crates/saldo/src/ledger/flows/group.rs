//! A linked group, all or none: every account of every transfer locked once, in ascending id,
//! by one statement; the group id and then the transfer ids looked up under those locks; the
//! transfers placed in request order on the locked rows ([`apply::place`]: each leg within one
//! currency; an exchange is one leg per currency); the first refusal refuses the group ([`Error::GroupRefused`] names it) and nothing is written. Idempotent by
//! group id ([`Error::GroupConflict`] for another payload).

use std::collections::BTreeSet;

use crate::domain::{AccountId, GroupId, InputError as In, Tags, MAX_GROUP_TRANSFERS};
use crate::error::Error;
use crate::ledger::apply::{self, NewTransfer};
use crate::ledger::rows::{accounts, journal};
use crate::ledger::sql;
use crate::ledger::types::{Group, GroupRequest, Transfer};
use crate::operation::Operation;
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::{in_idempotent_transaction, REPLAY_RACE_ATTEMPTS};

/// Checks the request (size, distinct ids, each transfer's own checks), then applies it.
pub(crate) async fn transfer_group(store: &Store, request: &GroupRequest) -> Result<Group, Error> {
    let len = request.transfers.len();
    if !(1..=MAX_GROUP_TRANSFERS).contains(&len) {
        return Err(In::GroupSize {
            len,
            max: MAX_GROUP_TRANSFERS,
        }
        .into());
    }
    let ts: Vec<NewTransfer<'_>> = request
        .transfers
        .iter()
        .map(|l| NewTransfer {
            movement: l.transfer.movement(),
            pending: l.pending,
            tags: &l.transfer.tags,
            reverses: None,
        })
        .collect();
    let mut seen = BTreeSet::new();
    for (index, t) in ts.iter().enumerate() {
        if !seen.insert(t.movement.id.as_str()) {
            return Err(In::GroupDuplicateTransfer(t.movement.id.to_string()).into());
        }
        apply::validate(&t.movement).map_err(|e| refused(&request.id, &ts, index, e.into()))?;
    }
    apply_group(store, &request.id, &request.tags, &ts).await
}

/// The group as one transaction, rerun as a replay when a concurrent copy of it committed
/// first (its key) or a lone transfer took one of its ids meanwhile (the rerun names it).
async fn apply_group(
    store: &Store,
    group: &GroupId,
    tags: &Tags,
    ts: &[NewTransfer<'_>],
) -> Result<Group, Error> {
    let dialect = store.dialect();
    let writer = store.writer();
    let mut run = 1;
    loop {
        let result = in_idempotent_transaction(
            &store.pool,
            &store.tx,
            Operation::TransferGroup,
            sql::GROUPS_KEY,
            |client| crate::write_tx!(client, writer => |tx| place_group(tx.clone(), group, tags, ts)),
        )
        .await;
        match result {
            Err(e)
                if e.may_be_unique_violation_of(sql::transfers_key(dialect))
                    && run < REPLAY_RACE_ATTEMPTS =>
            {
                run += 1;
            }
            other => return other,
        }
    }
}

fn refused(group: &GroupId, ts: &[NewTransfer<'_>], index: usize, source: Error) -> Error {
    Error::GroupRefused {
        group: group.clone(),
        index,
        transfer: ts[index].movement.id.clone(),
        source: Box::new(source),
    }
}

async fn place_group(
    tx: Tx<'_>,
    group: &GroupId,
    tags: &Tags,
    ts: &[NewTransfer<'_>],
) -> Result<Group, Error> {
    let accounts: Vec<AccountId> = ts
        .iter()
        .flat_map(|t| [t.movement.from, t.movement.to])
        .collect();
    // The group writes reference tables (transfer_groups, its positions) after reading every
    // journal shard; Citus allows that only over one connection per node.
    tx.batch(&sql::SEQUENTIAL).await?;
    let mut locked = accounts::lock(&tx, &accounts).await?;
    if let Some((stored, existing)) = journal::find_group(&tx, group).await? {
        if stored != *tags {
            return Err(Error::GroupConflict(group.clone()));
        }
        return replay(group, stored, existing, ts);
    }
    let ids: Vec<&str> = ts.iter().map(|t| t.movement.id.as_str()).collect();
    let taken = journal::find_many(&tx, &ids).await?;
    if let Some(index) = ids.iter().position(|id| taken.contains_key(*id)) {
        let id = ts[index].movement.id.clone();
        return Err(refused(group, ts, index, Error::TransferConflict(id)));
    }
    let mut currencies = Vec::with_capacity(ts.len());
    for (index, t) in ts.iter().enumerate() {
        currencies.push(apply::place(&mut locked, t).map_err(|e| refused(group, ts, index, e))?);
    }
    journal::insert_group(&tx, group, ts.len(), tags).await?;
    let transfers = journal::insert_many(&tx, ts, &currencies, Some(group)).await?;
    accounts::write(&tx, &locked).await?;
    Ok(Group {
        id: group.clone(),
        transfers,
        replayed: false,
        tags: tags.clone(),
    })
}

/// The group id is taken (with the same reference and metadata): the same transfers answer the group as it was, anything else is a
/// conflict.
fn replay(
    group: &GroupId,
    tags: Tags,
    existing: Vec<Transfer>,
    ts: &[NewTransfer<'_>],
) -> Result<Group, Error> {
    let same = existing.len() == ts.len()
        && existing
            .iter()
            .zip(ts)
            .all(|(e, t)| e.id == *t.movement.id && t.same_as(e, Some(group)));
    if !same {
        return Err(Error::GroupConflict(group.clone()));
    }
    Ok(Group {
        id: group.clone(),
        transfers: existing
            .into_iter()
            .map(|t| Transfer {
                replayed: true,
                ..t
            })
            .collect(),
        replayed: true,
        tags,
    })
}
