//! The idempotency decision: given an order's existing rows, is a request a replay, a
//! conflict, or units to take? Idempotency is per request, for good: a request that already
//! wrote rows is a replay whatever those rows became since (confirmed, released, expired); the
//! same key with other items is a conflict; taking again what expired or was released is only
//! done by a re-reserve, a request of its own with its own key. Pure: tested without a
//! database, and the one decision every strategy (the batched one included) makes.

use std::collections::BTreeMap;

use crate::domain::{OrderId, OrderItems, ProductId, Quantity, Tags, Ttl};
use crate::error::Error;
use crate::stock::model::{Placement, RereserveRequest, ReserveRequest, ReservedItem, Row};

/// Whose rows a reserve-like request is about, and how to decide on them.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Intent<'a> {
    /// The order's own request, keyed by the order id.
    Reserve(&'a ReserveRequest),
    /// A re-reserve of what expired or was released, keyed by its own request key.
    Rereserve(&'a RereserveRequest),
    /// Lab only (`naive-replay`): the older rule under which an order id stopped being an
    /// idempotency key once the order was released or expired, so a late retry took the units
    /// again. Kept to show `saldo race late-retry` failing without per-request idempotency.
    ForgetfulReserve(&'a ReserveRequest),
}

impl Intent<'_> {
    pub fn order_id(&self) -> &OrderId {
        match self {
            Intent::Reserve(r) | Intent::ForgetfulReserve(r) => &r.order_id,
            Intent::Rereserve(r) => &r.order_id,
        }
    }
    pub fn ttl(&self) -> Ttl {
        match self {
            Intent::Reserve(r) | Intent::ForgetfulReserve(r) => r.ttl,
            Intent::Rereserve(r) => r.ttl,
        }
    }
    /// The order's reference and metadata this request writes: a reserve's own; none for a
    /// re-reserve (the order keeps its first request's).
    pub fn tags(&self) -> &Tags {
        static NONE: Tags = Tags::NONE;
        match self {
            Intent::Reserve(r) | Intent::ForgetfulReserve(r) => &r.tags,
            Intent::Rereserve(_) => &NONE,
        }
    }
    pub fn request_key(&self) -> Option<&str> {
        match self {
            Intent::Reserve(_) | Intent::ForgetfulReserve(_) => None,
            Intent::Rereserve(r) => Some(r.rereserve_id.as_str()),
        }
    }
}

/// What to do with a request, given the order's existing rows.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// The request was made before: answer with the order's current state, take nothing.
    Replay,
    /// Take these units and write a row for each.
    Take(Vec<(ProductId, Quantity)>),
}

/// The idempotency decision.
///
/// A request that already wrote rows is a replay whatever those rows became since (confirmed,
/// released, expired): it answers the order's current state and takes nothing. The same key
/// with other items, another reference or other metadata is a conflict. Taking again what expired or was released is only done by a
/// re-reserve, which is a request of its own with its own key.
pub(crate) fn plan(intent: Intent<'_>, existing: &[Row]) -> Result<Plan, Error> {
    match intent {
        Intent::Reserve(request) => plan_reserve(request, existing),
        Intent::Rereserve(request) => plan_rereserve(request, existing),
        Intent::ForgetfulReserve(request) => {
            let live: Vec<Row> = existing
                .iter()
                .filter(|r| r.item.status.is_live())
                .cloned()
                .collect();
            plan_reserve(request, &live)
        }
    }
}

fn plan_reserve(request: &ReserveRequest, existing: &[Row]) -> Result<Plan, Error> {
    if existing.is_empty() {
        return Ok(Plan::Take(request.items.iter().collect()));
    }
    let first = first_request_rows(existing);
    let original: BTreeMap<ProductId, i32> = first
        .iter()
        .map(|r| (r.item.product_id, r.item.quantity))
        .collect();
    let same_tags = first.iter().all(|r| r.tags == request.tags);
    if same_tags && same_items(&original, &request.items) {
        Ok(Plan::Replay)
    } else {
        Err(Error::IdempotencyConflict(request.order_id.clone()))
    }
}

/// The order's reference and metadata: those of its first request's rows (none when it has
/// no rows or its first request gave none).
pub(crate) fn order_tags(rows: &[Row]) -> Tags {
    first_request_rows(rows)
        .first()
        .map(|r| r.tags.clone())
        .unwrap_or_default()
}

/// The rows of the order's first request: no request key, the earliest transaction.
fn first_request_rows(rows: &[Row]) -> Vec<&Row> {
    let first_at = rows
        .iter()
        .filter(|r| r.request_key.is_none())
        .map(|r| r.created_at)
        .min();
    rows.iter()
        .filter(|r| r.request_key.is_none() && Some(r.created_at) == first_at)
        .collect()
}

fn plan_rereserve(request: &RereserveRequest, existing: &[Row]) -> Result<Plan, Error> {
    if existing.is_empty() {
        return Err(Error::UnknownOrder(request.order_id.clone()));
    }
    let key = request.rereserve_id.as_str();
    let mine: BTreeMap<ProductId, i32> = existing
        .iter()
        .filter(|r| r.request_key.as_deref() == Some(key))
        .map(|r| (r.item.product_id, r.item.quantity))
        .collect();
    if !mine.is_empty() {
        return match &request.items {
            Some(items) if !same_items(&mine, items) => {
                Err(Error::IdempotencyConflict(request.order_id.clone()))
            }
            _ => Ok(Plan::Replay),
        };
    }
    let missing = missing_items(existing);
    let take: Vec<(ProductId, Quantity)> = match &request.items {
        None => missing
            .iter()
            .map(|i| Ok((i.product_id, Quantity::new(i64::from(i.quantity))?)))
            .collect::<Result<_, Error>>()?,
        Some(items) => {
            for (product, _) in items.iter() {
                if !missing.iter().any(|m| m.product_id == product) {
                    let held = existing.iter().any(|r| r.item.product_id == product);
                    return Err(Error::NotRereservable {
                        order_id: request.order_id.clone(),
                        product_id: product,
                        why: if held {
                            "still held (active or confirmed)"
                        } else {
                            "not part of the order"
                        },
                    });
                }
            }
            items.iter().collect()
        }
    };
    if take.is_empty() {
        return Err(Error::NothingToRereserve(request.order_id.clone()));
    }
    Ok(Plan::Take(take))
}

fn same_items(rows: &BTreeMap<ProductId, i32>, items: &OrderItems) -> bool {
    rows.len() == items.len()
        && items
            .iter()
            .all(|(p, q)| rows.get(&p).copied() == Some(q.get()))
}

/// The order's current state: per product, its latest row (a re-reserved product shows the new
/// row, not the expired one). `rows` are in product order, each product's rows oldest first.
pub(crate) fn current_items(rows: &[Row]) -> Vec<ReservedItem> {
    let mut latest: BTreeMap<ProductId, &ReservedItem> = BTreeMap::new();
    for r in rows {
        latest.insert(r.item.product_id, &r.item);
    }
    latest.into_values().cloned().collect()
}

/// Products whose latest row is dead (expired or released): what a confirm reports missing and
/// what a re-reserve may take again.
pub(crate) fn missing_items(rows: &[Row]) -> Vec<ReservedItem> {
    current_items(rows)
        .into_iter()
        .filter(|i| !i.status.is_live())
        .collect()
}

/// Where a re-reserve takes each lost line again: a line that was held at one location is
/// pinned to it (taken there or refused, naming it: an order pinned to a store is not quietly
/// served by another); a line that was split over several locations is split again by
/// priority, as every unpinned line is. `rows` carry their allocations
/// ([`crate::stock::rows::locations::attach`]); a product without locations has none, so it
/// is taken as before.
pub(crate) fn kept_placement(rows: &[Row]) -> Placement {
    // A line that was backordered is split again (a pinned placement takes no backorders).
    let pinned = missing_items(rows)
        .into_iter()
        .filter(|item| item.backordered == 0)
        .filter_map(|item| match item.allocations.as_slice() {
            [only] => Some((item.product_id, only.location_id.clone())),
            _ => None,
        })
        .collect();
    Placement {
        pinned,
        ..Placement::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::RequestKey;
    use crate::stock::model::Status;
    use chrono::{DateTime, Utc};
    use uuid::Uuid;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_700_000_000 + seconds, 0).expect("time")
    }

    /// A row of the order's own request (written at time 0) or of re-reserve `key` (time 1).
    fn row(product: i64, quantity: i32, status: Status, key: Option<&str>) -> Row {
        Row {
            id: Uuid::new_v4(),
            order_id: "o1".into(),
            request_key: key.map(str::to_owned),
            created_at: at(if key.is_some() { 1 } else { 0 }),
            allocated: false,
            lapsed: false,
            order_position: 0,
            tags: crate::domain::Tags::NONE,
            item: ReservedItem {
                product_id: ProductId::new(product).expect("id"),
                quantity,
                status,
                expires_at: Utc::now(),
                backordered: 0,
                allocations: Vec::new(),
                returned: 0,
            },
        }
    }

    fn req(items: &[(i64, i64)]) -> ReserveRequest {
        ReserveRequest {
            order_id: OrderId::new("o1").expect("id"),
            items: OrderItems::new(items.iter().copied()).expect("items"),
            ttl: Ttl::default(),
            tags: Tags::NONE,
        }
    }

    fn rereq(key: &str, items: Option<&[(i64, i64)]>) -> RereserveRequest {
        RereserveRequest {
            order_id: OrderId::new("o1").expect("id"),
            rereserve_id: RequestKey::new(key).expect("key"),
            items: items.map(|i| OrderItems::new(i.iter().copied()).expect("items")),
            ttl: Ttl::default(),
        }
    }

    fn p(product: i64, quantity: i64) -> (ProductId, Quantity) {
        (
            ProductId::new(product).expect("id"),
            Quantity::new(quantity).expect("q"),
        )
    }

    #[test]
    fn a_reserve_request_is_a_replay_whatever_its_rows_became() {
        use Status::*;
        let plan_of = |r: &ReserveRequest, rows: &[Row]| plan(Intent::Reserve(r), rows);
        assert_eq!(
            plan_of(&req(&[(1, 1)]), &[]).ok(),
            Some(Plan::Take(vec![p(1, 1)]))
        );
        for status in [Active, Confirmed, Released, Expired] {
            assert_eq!(
                plan_of(&req(&[(1, 1)]), &[row(1, 1, status, None)]).ok(),
                Some(Plan::Replay),
                "{status:?}"
            );
        }
        // Other items under the same order id: a conflict, live or not.
        for status in [Active, Released, Expired] {
            let rows = [row(1, 1, status, None)];
            for items in [&[(1, 2)][..], &[(2, 1)], &[(1, 1), (2, 1)]] {
                assert!(matches!(
                    plan_of(&req(items), &rows),
                    Err(Error::IdempotencyConflict(_))
                ));
            }
        }
        // After a re-reserve, the order's own request is still recognised by its first rows.
        let rows = [
            row(1, 1, Expired, None),
            row(1, 1, Active, Some("k1")),
            row(2, 1, Confirmed, None),
        ];
        assert_eq!(
            plan_of(&req(&[(1, 1), (2, 1)]), &rows).ok(),
            Some(Plan::Replay)
        );
    }

    /// A lost line held at one location is pinned there again; one split over several, a live
    /// line and a line without locations are not pinned.
    #[test]
    fn a_rereserve_keeps_a_lost_lines_one_location() {
        use crate::domain::LocationId;
        use crate::stock::model::LocationQuantity;
        use Status::*;
        let at = |row: Row, parts: &[(&str, i32)]| Row {
            item: ReservedItem {
                allocations: parts
                    .iter()
                    .map(|(l, q)| LocationQuantity {
                        location_id: LocationId::new(*l).expect("location"),
                        quantity: *q,
                    })
                    .collect(),
                ..row.item
            },
            ..row
        };
        let rows = [
            at(row(1, 2, Expired, None), &[("south", 2)]),
            at(row(2, 3, Released, None), &[("north", 1), ("south", 2)]),
            at(row(3, 1, Active, None), &[("north", 1)]),
            row(4, 1, Expired, None),
        ];
        let kept = kept_placement(&rows);
        assert_eq!(
            kept.pinned.into_iter().collect::<Vec<_>>(),
            vec![(
                ProductId::new(1).expect("id"),
                LocationId::new("south").expect("location")
            )]
        );
        assert_eq!(kept.allocation, crate::domain::AllocationMode::Split);
    }

    #[test]
    fn a_rereserve_takes_only_what_was_lost_and_only_once() {
        use Status::*;
        let plan_of = |r: &RereserveRequest, rows: &[Row]| plan(Intent::Rereserve(r), rows);
        assert!(matches!(
            plan_of(&rereq("k1", None), &[]),
            Err(Error::UnknownOrder(_))
        ));
        let lost = [row(1, 2, Expired, None), row(2, 1, Confirmed, None)];
        assert_eq!(
            plan_of(&rereq("k1", None), &lost).ok(),
            Some(Plan::Take(vec![p(1, 2)]))
        );
        assert_eq!(
            plan_of(&rereq("k1", Some(&[(1, 1)])), &lost).ok(),
            Some(Plan::Take(vec![p(1, 1)]))
        );
        assert!(matches!(
            plan_of(&rereq("k1", Some(&[(2, 1)])), &lost),
            Err(Error::NotRereservable { .. })
        ));
        assert!(matches!(
            plan_of(&rereq("k1", Some(&[(3, 1)])), &lost),
            Err(Error::NotRereservable { .. })
        ));
        let held = [row(1, 2, Active, None)];
        assert!(matches!(
            plan_of(&rereq("k1", None), &held),
            Err(Error::NothingToRereserve(_))
        ));
        // Its own rows exist: a replay, even after they expired again.
        for status in [Active, Expired, Released, Confirmed] {
            let rows = [row(1, 2, Expired, None), row(1, 2, status, Some("k1"))];
            assert_eq!(
                plan_of(&rereq("k1", None), &rows).ok(),
                Some(Plan::Replay),
                "{status:?}"
            );
            assert!(matches!(
                plan_of(&rereq("k1", Some(&[(1, 1)])), &rows),
                Err(Error::IdempotencyConflict(_))
            ));
            // Another key may take again what its predecessor lost.
            if !status.is_live() {
                assert_eq!(
                    plan_of(&rereq("k2", None), &rows).ok(),
                    Some(Plan::Take(vec![p(1, 2)]))
                );
            }
        }
    }
}
