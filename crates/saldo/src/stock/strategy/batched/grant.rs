//! A batch's grants, decided in memory on the rows its transaction locked: each order in
//! arrival order through the shared idempotency [`plan`] and, per item, the shared take
//! decision ([`take::grant`]) on the in-memory rows, all or nothing per order, a refusal never
//! touching its batch-mates. An order whose items need backorders is not the batch's: it is
//! answered [`Decision::Alone`] and runs as its own transaction. Pure: no database here.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::{AllocationMode, LocationId, OrderId, ProductId, Quantity, Tags};
use crate::error::Error;
use crate::stock::decide::allocate::Source;
use crate::stock::decide::plan::{plan, Intent, Plan};
use crate::stock::decide::settle::LocationDeltas;
use crate::stock::decide::take::{self, Backorders, Grant, Want};
use crate::stock::model::{ReserveRequest, ReservedItem, Row, Status, StockRow};
use crate::stock::rows::reservations::{NewRows, OrderLines};

/// A batch grants new orders only (an order with rows is a replay or a conflict, or, for a
/// re-reserve, never queued): their first event.
pub(super) const FIRST_POSITION: i64 = 1;

/// What one order of the batch came to, before the insert tells the new rows' expiry.
#[derive(Debug)]
pub(super) enum Decision {
    Refused(Error),
    /// Not the batch's to grant (backorders): run alone.
    Alone,
    /// The order's live rows are the first `rows` rows of its list (a later duplicate in the
    /// same batch may append more).
    Live {
        rows: usize,
        replayed: bool,
    },
}

/// What the batch transaction read under its locks.
pub(super) struct Locked {
    /// Every locked stock row (the batch's products that exist), `available` decremented as
    /// orders are granted.
    pub stock: HashMap<i64, StockRow>,
    /// The location rows of the batch's products stocked per location, locked after the stock
    /// rows, their `available` decremented as orders are granted.
    pub sources: HashMap<i64, Vec<Source>>,
    /// The existing rows of the batch's orders; granted rows are appended as they are decided.
    pub by_order: HashMap<String, Vec<Row>>,
}

/// What the batch grants: one decision per request in arrival order, the rows to write, the
/// units taken per product and per location, and where each granted row's units came from.
pub(super) struct Grants<'a> {
    pub decisions: Vec<Decision>,
    pub new_rows: NewRows<'a>,
    pub taken: BTreeMap<i64, i32>,
    pub location_taken: LocationDeltas,
    pub allocations: HashMap<Uuid, (ProductId, Vec<(LocationId, i32)>)>,
}

/// Grants in arrival order against the in-memory rows (see the module header).
pub(super) fn grant_all<'a>(
    requests: &[&'a ReserveRequest],
    locked: &mut Locked,
) -> Result<Grants<'a>, Error> {
    let mut grants = Grants {
        decisions: Vec::with_capacity(requests.len()),
        new_rows: NewRows::default(),
        taken: BTreeMap::new(),
        location_taken: LocationDeltas::new(),
        allocations: HashMap::new(),
    };
    for &request in requests {
        let existing = locked
            .by_order
            .get(request.order_id.as_str())
            .map_or(&[][..], |v| &v[..]);
        let decision = match plan(Intent::Reserve(request), existing) {
            Ok(Plan::Replay) => Decision::Live {
                rows: existing.len(),
                replayed: true,
            },
            Err(refusal) => Decision::Refused(refusal),
            Ok(Plan::Take(take)) => match decide_items(&take, locked) {
                Ok(Some(items)) => grant_order(request, &take, &items, locked, &mut grants)?,
                Ok(None) => Decision::Alone,
                Err(refusal) => Decision::Refused(refusal),
            },
        };
        grants.decisions.push(decision);
    }
    Ok(grants)
}

/// Each item's grant on the in-memory rows, nothing applied yet; `None` when an item needs
/// backorders (the order is not the batch's).
fn decide_items(
    take: &[(ProductId, Quantity)],
    locked: &Locked,
) -> Result<Option<Vec<Grant>>, Error> {
    let mut items = Vec::with_capacity(take.len());
    for &(product, quantity) in take {
        let want = Want {
            product,
            quantity,
            pinned: None,
            mode: AllocationMode::Split,
            backorders: Backorders::Allowed,
        };
        let sources = locked
            .sources
            .get(&product.get())
            .map_or(&[][..], |s| &s[..]);
        match take::grant(want, locked.stock.get(&product.get()), sources)? {
            Grant::Backordered { .. } | Grant::LocatedBackordered { .. } => return Ok(None),
            grant => items.push(grant),
        }
    }
    Ok(Some(items))
}

/// Applies an order's item grants to the in-memory rows and records its new rows.
fn grant_order<'a>(
    request: &'a ReserveRequest,
    take: &[(ProductId, Quantity)],
    items: &[Grant],
    locked: &mut Locked,
    grants: &mut Grants<'a>,
) -> Result<Decision, Error> {
    let rows = locked
        .by_order
        .entry(request.order_id.as_str().to_owned())
        .or_default();
    for (&(product, quantity), item) in take.iter().zip(items) {
        let Some(row) = locked.stock.get_mut(&product.get()) else {
            // `take::grant` just found the product among the locked rows.
            return Err(Error::invariant(format!(
                "product {product} granted in a batch but not among its locked rows"
            )));
        };
        row.available -= quantity.get();
        *grants.taken.entry(product.get()).or_default() += quantity.get();
        let id = Uuid::now_v7();
        let lines = OrderLines {
            order_id: &request.order_id,
            ttl: request.ttl,
            request_key: None,
            position: FIRST_POSITION,
            tags: &request.tags,
        };
        grants.new_rows.push(id, &lines, product, quantity);
        if let Grant::Located(parts) = item {
            grants.new_rows.mark_allocated();
            take_at_locations(&mut locked.sources, grants, id, product, parts);
        }
        rows.push(placeholder_row(id, &request.order_id, product, quantity));
    }
    Ok(Decision::Live {
        rows: rows.len(),
        replayed: false,
    })
}

/// Takes a granted row's allocated units from the in-memory location rows and records them.
fn take_at_locations(
    sources: &mut HashMap<i64, Vec<Source>>,
    grants: &mut Grants<'_>,
    id: Uuid,
    product: ProductId,
    parts: &[(LocationId, i32)],
) {
    if let Some(from) = sources.get_mut(&product.get()) {
        for (location, quantity) in parts {
            if let Some(source) = from.iter_mut().find(|s| &s.location_id == location) {
                source.available -= quantity;
            }
            let d = grants
                .location_taken
                .entry((product.get(), location.clone()))
                .or_default();
            d.0 -= quantity;
            d.1 += quantity;
        }
    }
    grants.allocations.insert(id, (product, parts.to_vec()));
}

/// A granted row before the insert returns it: the database's clock gives `created_at` and
/// `expires_at`, so both stay at a placeholder until [`patch_written`] replaces the whole row
/// (a row left unpatched is an invariant failure, never answered).
fn placeholder_row(id: Uuid, order_id: &OrderId, product: ProductId, quantity: Quantity) -> Row {
    Row {
        id,
        order_id: order_id.as_str().to_owned(),
        request_key: None,
        created_at: DateTime::<Utc>::MIN_UTC,
        allocated: false,
        lapsed: false,
        order_position: FIRST_POSITION,
        tags: Tags::NONE,
        item: ReservedItem {
            product_id: product,
            quantity: quantity.get(),
            status: Status::Active,
            expires_at: DateTime::<Utc>::MIN_UTC,
            backordered: 0,
            allocations: Vec::new(),
            returned: 0,
        },
    }
}

/// Replaces every placeholder with the row the insert returned.
pub(super) fn patch_written(
    by_order: &mut HashMap<String, Vec<Row>>,
    mut written: HashMap<Uuid, Row>,
) -> Result<(), Error> {
    let expected = written.len();
    for row in by_order.values_mut().flatten() {
        if let Some(stored) = written.remove(&row.id) {
            *row = stored;
        }
    }
    if !written.is_empty() {
        return Err(Error::invariant(format!(
            "{} of {expected} inserted reservation rows match no granted row",
            written.len()
        )));
    }
    let unpatched = by_order
        .values()
        .flatten()
        .filter(|r| r.created_at == DateTime::<Utc>::MIN_UTC)
        .count();
    if unpatched > 0 {
        return Err(Error::invariant(format!(
            "{unpatched} granted reservation rows kept their placeholder timestamps"
        )));
    }
    Ok(())
}
