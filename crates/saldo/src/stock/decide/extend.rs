//! Which rows an extension moves, decided on the order's locked rows: every latest row still
//! active, all or nothing, never past the maximum hold since it was made; a hold that already
//! lapsed (expired, or due and not yet swept) refuses the whole extension.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::{MaxHold, OrderId, ProductId, Ttl};
use crate::error::Error;
use crate::stock::model::{Row, Status};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stock::model::ReservedItem;

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
            lapsed: false,
            order_position: 0,
            tags: crate::domain::Tags::NONE,
            item: ReservedItem {
                product_id: ProductId::new(product).expect("id"),
                quantity: 1,
                status,
                expires_at: at(expires),
                backordered: 0,
                allocations: Vec::new(),
                returned: 0,
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
