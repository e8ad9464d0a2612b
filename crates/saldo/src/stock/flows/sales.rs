//! Direct sales (the path for slow payment methods): nothing is reserved, and when the money
//! clears the units go from `available` straight to sold, all items or none, if they are still
//! there. Idempotent by `sale_id`: the same items (and the same reference and metadata) again
//! answer the original result and take nothing; anything else under the same id is
//! [`Error::SaleConflict`].
//!
//! One transaction: the `sales` row first (the idempotency key: a concurrent copy of the same
//! sale waits on its unique index and, once the first commits, reruns as a replay), then the
//! items taken the way a reservation takes them ([`super::taking`], with the sale's own fast
//! take: the condition inside the UPDATE, from `available` only), then the items, stamped while
//! the rows are locked so the audit orders them against counts. Every strategy sells through
//! this path (a sale is never queued), so a sale racing reservations for the last unit meets
//! them on the same row lock and the same condition.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::domain::{LocationId, OrderItems, ProductId, Quantity};
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::flows::order_events;
use crate::stock::flows::taking::{take_items, Destination};
use crate::stock::model::{LocationQuantity, Placement};
pub use crate::stock::model::{Sale, SaleRequest, SoldItem};
use crate::stock::movements::MoveKind;
use crate::stock::rows::{locations, sales};
use crate::stock::taker::{seen, Taken, UnitTaker};
use crate::store::dialect::Tx;
use crate::store::handle::Store;
use crate::store::retry::in_idempotent_transaction;

/// The sale's fast take: `available` straight to sold, the condition inside the UPDATE.
struct SellUnits;

#[async_trait]
impl UnitTaker for SellUnits {
    fn name(&self) -> &'static str {
        "sale"
    }

    async fn take(&self, tx: &Tx<'_>, items: &[(ProductId, Quantity)]) -> Result<Taken, Error> {
        for (index, &(product, quantity)) in items.iter().enumerate() {
            if !sales::sell_units(tx, product, quantity).await? {
                let seen = seen(tx, product).await?;
                return Ok(Taken::Declined { index, seen });
            }
        }
        Ok(Taken::All)
    }
}

/// Whether `request` asks for what `sale` did: the same items and the same tags.
fn same_request(sale: &Sale, request: &SaleRequest) -> bool {
    sale.tags == request.tags && same_items(sale, &request.items)
}

fn same_items(sale: &Sale, items: &OrderItems) -> bool {
    let sold: BTreeMap<ProductId, i32> = sale
        .items
        .iter()
        .map(|i| (i.product_id, i.quantity))
        .collect();
    sold.len() == items.len()
        && items
            .iter()
            .all(|(p, q)| sold.get(&p).copied() == Some(q.get()))
}

/// Sells every item or none (see the module header).
pub async fn sell(store: &Store, request: &SaleRequest) -> Result<Sale, Error> {
    sell_placed(store, request, &Placement::default()).await
}

/// [`sell`] with a placement, as a reservation takes one: an item of a located product may be
/// pinned to one location (sold from there or refused, naming it), the others are taken by
/// `placement.allocation`. The placement is how, not what: a replay answers the original sale
/// whatever placement it names. On a layout without stock per location (Citus) a placement
/// other than the default is [`Error::UnsupportedOnCitus`], before anything is locked.
pub async fn sell_placed(
    store: &Store,
    request: &SaleRequest,
    placement: &Placement,
) -> Result<Sale, Error> {
    let result = if placement.is_default() || store.dialect().offers_locations_and_backorders() {
        let writer = store.writer();
        in_idempotent_transaction(
            &store.pool,
            &store.tx,
            Operation::Sell,
            sales::SALE_KEY,
            move |client| crate::write_tx!(client, writer => |tx| sell_tx(&tx, request, placement)),
        )
        .await
    } else {
        Err(Error::UnsupportedOnCitus("stock per location"))
    };
    crate::telemetry::sale_outcome(match &result {
        Ok(s) if s.replayed => "replayed",
        Ok(_) => "sold",
        Err(Error::InsufficientStock { .. }) => "insufficient_stock",
        Err(Error::UnknownProduct(_)) => "unknown_product",
        Err(Error::UnknownLocation { .. }) => "unknown_location",
        Err(Error::SaleConflict(_)) => "idempotency_conflict",
        Err(_) => "error",
    });
    result
}

/// Puts on each sold item where its units came from, by location id (as a replay reads them).
fn attach_allocations(sale: &mut Sale, located: &BTreeMap<ProductId, Vec<(LocationId, i32)>>) {
    for item in &mut sale.items {
        if let Some(parts) = located.get(&item.product_id) {
            let mut parts: Vec<LocationQuantity> = parts
                .iter()
                .map(|(location_id, quantity)| LocationQuantity {
                    location_id: location_id.clone(),
                    quantity: *quantity,
                })
                .collect();
            parts.sort_by(|a, b| a.location_id.as_str().cmp(b.location_id.as_str()));
            item.allocations = parts;
        }
    }
}

async fn sell_tx(tx: &Tx<'_>, request: &SaleRequest, placement: &Placement) -> Result<Sale, Error> {
    sales::begin(tx).await?;
    let sale_id = &request.sale_id;
    tx.cause(MoveKind::Sale.cause().sale(sale_id.as_str()));
    if let Some(sale) = sales::find(tx, sale_id).await? {
        return if same_request(&sale, request) {
            Ok(sale)
        } else {
            Err(Error::SaleConflict(sale_id.clone()))
        };
    }
    sales::insert(tx, sale_id, &request.tags).await?;
    let items: Vec<(ProductId, Quantity)> = request.items.iter().collect();
    let taken = take_items(tx, &SellUnits, &items, placement, Destination::Sold).await?;
    let mut sale = sales::insert_items(tx, sale_id, &items, &request.tags).await?;
    let located: BTreeMap<ProductId, Vec<_>> = items
        .iter()
        .zip(&taken)
        .filter_map(|((product, _), item)| item.locations().map(|parts| (*product, parts.to_vec())))
        .collect();
    if !located.is_empty() {
        locations::record_sale(tx, sale_id.as_str(), &located).await?;
        attach_allocations(&mut sale, &located);
    }
    order_events::emit_sale(tx, &sale);
    Ok(sale)
}
