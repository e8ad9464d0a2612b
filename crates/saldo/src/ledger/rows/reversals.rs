//! What a reversal reads and writes of its original: its state under the locks of its two
//! accounts, the counters each reversal moves (`reversed`, `reversals`; both journal sides on
//! Citus) with the original's `transfer.reversed` event, and the ids of its reversals for a
//! read. The reversal's own row is a transfer like any other ([`super::journal`]).

use crate::domain::{AccountId, TransferId};
use crate::error::Error;
use crate::ledger::apply::Original;
use crate::ledger::rows::{events, settles};
use crate::ledger::sql;
use crate::store::dialect::{Param, Tx};

/// Transfer `id` from `from` (its debit side on Citus), as a reversal needs it; the caller
/// holds the locks of its two accounts.
pub(crate) async fn original(
    tx: &Tx<'_>,
    id: &TransferId,
    from: AccountId,
) -> Result<Original, Error> {
    let row = tx
        .query_opt(&sql::ORIGINAL, &[&id.as_str(), &from.get()])
        .await?
        .ok_or_else(|| Error::UnknownTransfer(id.clone()))?;
    Ok(Original {
        state: settles::state_of(&row)?,
        reversed: row.try_get("reversed")?,
        reversals: row.try_get("reversals")?,
    })
}

/// Counts reversal `reversal` of `amount` on `original` (read under its accounts' locks, so it
/// must move, on each side: the statement's own condition and the schema's CHECK stand behind
/// the decision), and records the original's `transfer.reversed`.
pub(crate) async fn record(
    tx: &Tx<'_>,
    original: &Original,
    reversal: &TransferId,
    amount: i64,
) -> Result<(), Error> {
    let id = original.state.id.as_str();
    let (from, to) = (original.state.from.get(), original.state.to.get());
    let params: [Param<'_>; 4] = [&id, &amount, &from, &to];
    let rows = tx.query(&sql::REVERSE_ORIGINAL, &params).await?;
    let expected = (
        original.reversed.checked_add(amount),
        original.reversals.checked_add(1),
    );
    let mut reversed = None;
    for row in &rows {
        let now: (i64, i32) = (row.try_get("reversed")?, row.try_get("reversals")?);
        if (Some(now.0), Some(now.1)) != expected {
            return Err(Error::invariant(format!(
                "transfer {id} counted {now:?} reversed after a reversal of {amount} read under \
                 its account locks ({expected:?} expected)"
            )));
        }
        reversed = Some(now.0);
    }
    let moved = rows.len() as u64;
    let (Some(reversed), true) = (reversed, moved == settles::rows_per_transfer(tx)) else {
        return Err(Error::invariant(format!(
            "transfer {id} read reversible under its account locks but {moved} rows counted \
             its reversal"
        )));
    };
    events::transfer_reversed(tx, original, reversal, amount, reversed);
    Ok(())
}

/// The ids of `original`'s reversals (each moved from its destination `to`), oldest first, at
/// most `limit`.
pub(crate) async fn of(
    tx: &Tx<'_>,
    original: &TransferId,
    to: AccountId,
    limit: i64,
) -> Result<Vec<TransferId>, Error> {
    let rows = tx
        .query(&sql::REVERSALS_OF, &[&original.as_str(), &to.get(), &limit])
        .await?;
    rows.iter()
        .map(|r| Ok(TransferId::new(r.try_get::<_, String>("id")?)?))
        .collect()
}
