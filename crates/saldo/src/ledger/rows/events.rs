//! The events of the ledger's writes, recorded in the writing transaction's outbox: an
//! account's `account.changed` (its state after the write, at the account's next position,
//! counted by its row's `event_position` under the row lock), and a transfer's
//! `transfer.created` (position 1) and `transfer.posted|voided|expired` (position 2: a hold
//! settles once, the transition table sees to it), and `transfer.reversed` for each reversal
//! of a posted transfer (after those, counted by the original's `reversals` under the locks of
//! its accounts). A reversal is a transfer itself: its own stream starts with its
//! `transfer.created`, which names the original (`reverses`).

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::domain::{TransferId, TransferStatus};
use crate::error::Error;
use crate::ledger::apply::{Original, TransferState};
use crate::ledger::types::Transfer;
use crate::store::dialect::Tx;
use crate::store::outbox::{NewEvent, StreamType};

pub(crate) const ACCOUNT_CHANGED: &str = "account.changed";
pub(crate) const TRANSFER_CREATED: &str = "transfer.created";
pub(crate) const TRANSFER_POSTED: &str = "transfer.posted";
pub(crate) const TRANSFER_VOIDED: &str = "transfer.voided";
pub(crate) const TRANSFER_EXPIRED: &str = "transfer.expired";
pub(crate) const TRANSFER_REVERSED: &str = "transfer.reversed";

/// Every event type the ledger writes.
pub const LEDGER_EVENT_TYPES: &[&str] = &[
    ACCOUNT_CHANGED,
    TRANSFER_CREATED,
    TRANSFER_POSTED,
    TRANSFER_VOIDED,
    TRANSFER_EXPIRED,
    TRANSFER_REVERSED,
];

/// Records `account.changed` for each account row a write returned (columns `id`, `balance`,
/// `held`, `pending_credits`, `event_position`, `currency`: NULL for the system account).
pub(crate) fn accounts_changed(tx: &Tx<'_>, rows: &[tokio_postgres::Row]) -> Result<(), Error> {
    if !tx.records_events() {
        return Ok(());
    }
    for row in rows {
        let id: i64 = row.try_get("id")?;
        let balance: i64 = row.try_get("balance")?;
        let held: i64 = row.try_get("held")?;
        let data = json!({
            "account_id": id,
            "balance": balance,
            "held": held,
            "available": balance.checked_sub(held),
            "pending_credits": row.try_get::<_, i64>("pending_credits")?,
            "currency": row.try_get::<_, Option<String>>("currency")?,
        });
        tx.emit(NewEvent {
            stream_type: StreamType::Account,
            stream_id: id.to_string(),
            position: row.try_get("event_position")?,
            kind: ACCOUNT_CHANGED,
            data,
        });
    }
    Ok(())
}

/// Records `transfer.created` for transfers just journalled.
pub(crate) fn transfers_created(tx: &Tx<'_>, transfers: &[Transfer]) -> Result<(), Error> {
    if !tx.records_events() {
        return Ok(());
    }
    for t in transfers {
        tx.emit(NewEvent {
            stream_type: StreamType::Transfer,
            stream_id: t.id.as_str().to_owned(),
            position: 1,
            kind: TRANSFER_CREATED,
            data: serde_json::to_value(t)
                .map_err(|e| Error::invariant(format!("a transfer as JSON: {e}")))?,
        });
    }
    Ok(())
}

/// Records the settle of a hold: `t` carries the status it moved to (posted, voided, expired).
pub(crate) fn transfer_settled(tx: &Tx<'_>, t: &TransferState, at: DateTime<Utc>) {
    if !tx.records_events() {
        return;
    }
    let kind = match t.status {
        TransferStatus::Posted => TRANSFER_POSTED,
        TransferStatus::Voided => TRANSFER_VOIDED,
        // A settle never moves a hold back to pending (the transition table).
        TransferStatus::Expired | TransferStatus::Pending => TRANSFER_EXPIRED,
    };
    tx.emit(NewEvent {
        stream_type: StreamType::Transfer,
        stream_id: t.id.as_str().to_owned(),
        position: 2,
        kind,
        data: json!({
            "id": t.id.as_str(),
            "from": t.from.get(),
            "to": t.to.get(),
            "amount": t.amount,
            "currency": t.currency,
            "status": t.status.as_str(),
            "posted_amount": t.posted_amount,
            "settled_at": at,
        }),
    });
}

/// Records a reversal of `original` (as read before it: its position follows its earlier
/// reversals) in the original's stream: this reversal's id and amount, and the total reversed
/// after it.
pub(crate) fn transfer_reversed(
    tx: &Tx<'_>,
    original: &Original,
    reversal: &TransferId,
    amount: i64,
    reversed: i64,
) {
    if !tx.records_events() {
        return;
    }
    tx.emit(NewEvent {
        stream_type: StreamType::Transfer,
        stream_id: original.state.id.as_str().to_owned(),
        position: original.next_event_position(),
        kind: TRANSFER_REVERSED,
        data: json!({
            "id": original.state.id.as_str(),
            "from": original.state.from.get(),
            "to": original.state.to.get(),
            "currency": original.state.currency,
            "posted_amount": original.posted(),
            "reversal_id": reversal.as_str(),
            "amount": amount,
            "reversed_amount": reversed,
        }),
    });
}
