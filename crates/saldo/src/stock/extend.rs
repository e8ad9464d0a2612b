//! Hold extension (issue 15): move the expiry of an order's active reservations to now + ttl,
//! for a slow payment, never past the maximum hold since each reservation was made.
//!
//! It races the sweeper with exactly one winner. Both take the order's reservation rows with
//! `FOR UPDATE` (the sweeper with `SKIP LOCKED`) and decide on what they locked: a row the
//! sweeper expired first is seen expired here (409); a row this extension locked first is
//! skipped by the sweeper, which after the commit re-checks `expires_at` on the new version and
//! leaves it. A row past its expiry but not yet swept counts as expired, so the answer never
//! depends on how late the sweeper runs. No stock row is touched (units stay reserved), so
//! every strategy extends through this one transaction: `batched` included, whose queues only
//! carry takes and confirms.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::{MaxHold, OrderId, ProductId, Ttl};
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::layout;
use crate::stock::lifecycle::Row;
use crate::stock::types::{ReservedItem, Status};
use crate::store::handle::Store;
use crate::store::retry::in_transaction;

/// The transaction's clock: every comparison and the new expiry use the same `now()`.
const NOW: &str = "SELECT now() AS now";
/// Moves the expiry of rows this transaction holds locked and decided on.
const EXTEND_ROWS: &str = "UPDATE reservations \
     SET expires_at = now() + make_interval(secs => $2) \
     WHERE id = ANY($1) AND status = 'active' RETURNING id, expires_at";

/// What an extension did: the order's current items, the extended ones with their new expiry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ExtendOutcome {
    pub order_id: OrderId,
    /// The active items, now expiring at `now + ttl`.
    pub extended: Vec<ReservedItem>,
}

/// Which rows to extend, decided on the order's locked rows (pure, so it is tested alone).
///
/// Per product the latest row counts (a re-reserved product's new row, not its expired one).
/// Any latest row expired, or active but due, refuses the whole extension: the hold lapsed and
/// the caller must re-reserve. Nothing active at all (confirmed or released) is
/// [`Error::NothingToExtend`]. An active row that `now + ttl` would keep past
/// `created_at + max_hold` refuses with [`Error::HoldLimitExceeded`]. All or nothing.
pub(crate) fn plan(
    order_id: &OrderId,
    rows: &[Row],
    now: DateTime<Utc>,
    ttl: Ttl,
    max_hold: MaxHold,
) -> Result<Vec<Uuid>, Error> {
    if rows.is_empty() {
        return Err(Error::UnknownOrder(order_id.clone()));
    }
    let mut latest: BTreeMap<ProductId, &Row> = BTreeMap::new();
    for r in rows {
        latest.insert(r.item.product_id, r);
    }
    let mut ids = Vec::new();
    for (&product_id, row) in &latest {
        let lapsed = match row.item.status {
            Status::Expired => true,
            Status::Active => row.item.expires_at <= now,
            Status::Confirmed | Status::Released => false,
        };
        if lapsed {
            return Err(Error::ReservationExpired {
                order_id: order_id.clone(),
                product_id,
            });
        }
        if row.item.status != Status::Active {
            continue;
        }
        let until = now + ttl.as_duration();
        let limit = row.created_at + max_hold.as_duration();
        if until > limit {
            return Err(Error::HoldLimitExceeded {
                order_id: order_id.clone(),
                product_id,
                max_hold_s: max_hold.as_duration().as_secs(),
            });
        }
        ids.push(row.id);
    }
    if ids.is_empty() {
        return Err(Error::NothingToExtend(order_id.clone()));
    }
    Ok(ids)
}

/// Extends the order's active reservations to now + `ttl`, all or nothing (see [`plan`]).
pub async fn extend(
    store: &Store,
    order_id: &OrderId,
    ttl: Ttl,
    max_hold: MaxHold,
) -> Result<ExtendOutcome, Error> {
    let layout = store.layout();
    let result = in_transaction(&store.pool, &store.tx, Operation::Extend, move |client| {
        crate::tx_body!(client => async {
            let rows = layout::lock_order_rows(client, layout, order_id).await?;
            let now: DateTime<Utc> = client.query_one(NOW, &[]).await?.try_get("now")?;
            let ids = plan(order_id, &rows, now, ttl, max_hold)?;
            let ttl_s = ttl.as_duration().as_secs_f64();
            let stmt = client.prepare_cached(EXTEND_ROWS).await?;
            let updated = client.query(&stmt, &[&ids, &ttl_s]).await?;
            if updated.len() != ids.len() {
                // The rows were locked and active: nothing can have moved them.
                return Err(Error::invariant(format!(
                    "extended {} of {} locked active rows of order {order_id}",
                    updated.len(),
                    ids.len()
                )));
            }
            let mut new_expiry = BTreeMap::new();
            for r in &updated {
                let id: Uuid = r.try_get("id")?;
                let at: DateTime<Utc> = r.try_get("expires_at")?;
                new_expiry.insert(id, at);
            }
            let extended = rows
                .iter()
                .filter_map(|r| {
                    new_expiry.get(&r.id).map(|&expires_at| ReservedItem {
                        expires_at,
                        ..r.item.clone()
                    })
                })
                .collect();
            Ok(ExtendOutcome {
                order_id: order_id.clone(),
                extended,
            })
        })
    })
    .await;
    crate::telemetry::extension_outcome(match &result {
        Ok(_) => "extended",
        Err(Error::ReservationExpired { .. }) => "expired",
        Err(Error::HoldLimitExceeded { .. }) => "hold_limit",
        Err(Error::NothingToExtend(_)) => "nothing_to_extend",
        Err(Error::UnknownOrder(_)) => "unknown_order",
        Err(_) => "error",
    });
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ProductId;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_700_000_000 + seconds, 0).expect("time")
    }

    fn row(product: i64, status: Status, created: i64, expires: i64) -> Row {
        Row {
            id: Uuid::new_v4(),
            order_id: "o1".into(),
            request_key: None,
            created_at: at(created),
            allocated: false,
            item: ReservedItem {
                product_id: ProductId::new(product).expect("id"),
                quantity: 1,
                status,
                expires_at: at(expires),
                backordered: 0,
                allocations: Vec::new(),
            },
        }
    }

    fn o() -> OrderId {
        OrderId::new("o1").expect("id")
    }

    fn hold(s: u64) -> MaxHold {
        MaxHold::from_secs(s).expect("hold")
    }

    #[test]
    fn extends_every_active_row_within_the_hold_limit() {
        use Status::*;
        let ttl = Ttl::from_secs(600).expect("ttl");
        let rows = [
            row(1, Active, 0, 900),
            row(2, Confirmed, 0, 900),
            row(3, Active, 0, 900),
        ];
        let ids = plan(&o(), &rows, at(100), ttl, hold(3600)).expect("plan");
        assert_eq!(ids, vec![rows[0].id, rows[2].id]);
        // now + ttl exactly at the limit is allowed; one second past it is not.
        assert!(plan(&o(), &rows, at(3000), ttl, hold(3600))
            .is_err_and(|e| matches!(e, Error::ReservationExpired { .. })));
        let fresh = [row(1, Active, 0, 4000)];
        assert!(plan(&o(), &fresh, at(3000), ttl, hold(3600)).is_ok());
        assert!(matches!(
            plan(&o(), &fresh, at(3001), ttl, hold(3600)),
            Err(Error::HoldLimitExceeded {
                max_hold_s: 3600,
                ..
            })
        ));
    }

    #[test]
    fn a_lapsed_hold_is_expired_whether_or_not_it_was_swept() {
        use Status::*;
        let ttl = Ttl::from_secs(60).expect("ttl");
        for rows in [
            vec![row(1, Expired, 0, 10)],
            vec![row(1, Active, 0, 10)],
            vec![row(1, Active, 0, 900), row(2, Expired, 0, 10)],
        ] {
            assert!(
                matches!(
                    plan(&o(), &rows, at(10), ttl, hold(3600)),
                    Err(Error::ReservationExpired { .. })
                ),
                "{rows:?}"
            );
        }
        // A re-reserved product counts by its new row, not the expired one.
        let rereserved = [row(1, Expired, 0, 10), row(1, Active, 20, 900)];
        assert_eq!(
            plan(&o(), &rereserved, at(30), ttl, hold(3600)).expect("plan"),
            vec![rereserved[1].id]
        );
    }

    #[test]
    fn nothing_active_or_no_rows_is_refused() {
        use Status::*;
        let ttl = Ttl::from_secs(60).expect("ttl");
        let done = [row(1, Confirmed, 0, 900), row(2, Released, 0, 900)];
        assert!(matches!(
            plan(&o(), &done, at(10), ttl, hold(3600)),
            Err(Error::NothingToExtend(_))
        ));
        assert!(matches!(
            plan(&o(), &[], at(10), ttl, hold(3600)),
            Err(Error::UnknownOrder(_))
        ));
    }
}
