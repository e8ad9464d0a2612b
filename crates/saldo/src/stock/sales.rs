//! Direct sales (issue 15; seed 000's path for slow payment methods): nothing is reserved, and
//! when the money clears the units go from `available` straight to sold, all items or none, if
//! they are still there. Idempotent by `sale_id`: the same items again answer the original
//! result and take nothing; other items under the same id are [`Error::SaleConflict`].
//!
//! One transaction: the `sales` row first (the idempotency key: a concurrent copy of the same
//! sale waits on its unique index and, once the first commits, reruns as a replay), then the
//! stock rows in ascending product id with the condition inside the UPDATE (`atomic`'s take,
//! refused the same way as a reservation), then the items, stamped while the rows are locked so
//! the audit orders them against counts. Every strategy sells through this one path (`batched`
//! included: a sale is one short transaction of its own, never queued), so a sale racing
//! reservations for the last unit meets them on the same row lock and the same condition.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::domain::{OrderItems, ProductId, SaleId};
use crate::error::Error;
use crate::operation::Operation;
use crate::stock::lifecycle::refusal;
use crate::stock::locations::{self, Destination};
use crate::stock::types::Placement;
use crate::store::handle::Store;
use crate::store::retry::in_idempotent_transaction;

/// The sales table's primary key: a unique violation on it is a concurrent copy that won.
const SALE_KEY: &str = "sales_pkey";
const SALE_ITEMS: &str = "SELECT product_id, quantity, sold_at FROM sale_items \
     WHERE sale_id = $1 ORDER BY product_id";
/// See [`sell_tx`] (Citus only).
const CITUS_SEQUENTIAL: &str = "SET LOCAL citus.multi_shard_modify_mode TO 'sequential'";
const INSERT_SALE: &str = "INSERT INTO sales (sale_id) VALUES ($1)";
/// `available` only: sold units were never reserved.
const SELL_UNITS: &str = crate::stock_update!(
    "available = available - $2",
    "WHERE product_id = $1 AND available >= $2 AND NOT located"
);
const INSERT_ITEMS: &str = "INSERT INTO sale_items (sale_id, product_id, quantity) \
     SELECT $1, g.product_id, g.quantity FROM unnest($2::bigint[], $3::int[]) \
     AS g(product_id, quantity) RETURNING product_id, quantity, sold_at";

/// A request to sell every item, or none.
#[derive(Debug, Clone)]
pub struct SaleRequest {
    pub sale_id: SaleId,
    pub items: OrderItems,
}

/// One product of a sale.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SoldItem {
    pub product_id: ProductId,
    pub quantity: i32,
}

/// What a sale did (or, replayed, what it did the first time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sale {
    pub sale_id: SaleId,
    /// Per product, ascending.
    pub items: Vec<SoldItem>,
    pub sold_at: DateTime<Utc>,
    /// True when the sale had been made before: nothing was taken now.
    pub replayed: bool,
}

fn sale_of(sale_id: &SaleId, rows: &[tokio_postgres::Row], replayed: bool) -> Result<Sale, Error> {
    let mut items = Vec::with_capacity(rows.len());
    let mut sold_at: Option<DateTime<Utc>> = None;
    for r in rows {
        items.push(SoldItem {
            product_id: ProductId::new(r.try_get("product_id")?)?,
            quantity: r.try_get("quantity")?,
        });
        let at: DateTime<Utc> = r.try_get("sold_at")?;
        sold_at = Some(sold_at.map_or(at, |s| s.min(at)));
    }
    items.sort_by_key(|i| i.product_id);
    let sold_at =
        sold_at.ok_or_else(|| Error::invariant(format!("sale {sale_id} has no items")))?;
    Ok(Sale {
        sale_id: sale_id.clone(),
        items,
        sold_at,
        replayed,
    })
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
    let result = match sell_tx(store, request, false).await {
        // A product stocked per location: the whole sale again on the located path.
        Err(Error::StockedByLocation(_)) => sell_tx(store, request, true).await,
        other => other,
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

/// The sale's one transaction; `located`: take through the located path (every item, located
/// or not, under its lock order) and record where the units came from.
async fn sell_tx(store: &Store, request: &SaleRequest, located: bool) -> Result<Sale, Error> {
    let citus = store.is_citus();
    in_idempotent_transaction(
        &store.pool,
        &store.tx,
        Operation::Sell,
        SALE_KEY,
        move |client| {
            crate::tx_body!(client => async {
                if citus {
                    // `sale_items` refers to `sales`, a reference table: Citus writes it only in a
                    // transaction that reached the shards over one connection per node, which the
                    // multi-shard read of the sale's items below would not do in parallel mode.
                    client.batch_execute(CITUS_SEQUENTIAL).await?;
                }
                let sale_id = &request.sale_id;
                let stmt = client.prepare_cached(SALE_ITEMS).await?;
                let existing = client.query(&stmt, &[&sale_id.as_str()]).await?;
                if !existing.is_empty() {
                    let sale = sale_of(sale_id, &existing, true)?;
                    return if same_items(&sale, &request.items) {
                        Ok(sale)
                    } else {
                        Err(Error::SaleConflict(sale_id.clone()))
                    };
                }
                client.execute(INSERT_SALE, &[&sale_id.as_str()]).await?;
                let taken = if located {
                    let items: Vec<_> = request.items.iter().collect();
                    let placement = Placement::default();
                    locations::take_units(client, &items, &placement, Destination::Sold).await?
                } else {
                    let stmt = client.prepare_cached(SELL_UNITS).await?;
                    for (product, quantity) in request.items.iter() {
                        let rows = client
                            .execute(&stmt, &[&product.get(), &quantity.get()])
                            .await?;
                        if rows == 0 {
                            return Err(refusal(client, product, quantity).await);
                        }
                    }
                    locations::Taken::new()
                };
                let (products, quantities): (Vec<i64>, Vec<i32>) = request
                    .items
                    .iter()
                    .map(|(p, q)| (p.get(), q.get()))
                    .unzip();
                let stmt = client.prepare_cached(INSERT_ITEMS).await?;
                let rows = client
                    .query(&stmt, &[&sale_id.as_str(), &products, &quantities])
                    .await?;
                if !taken.is_empty() {
                    locations::record_sale(client, sale_id.as_str(), &taken).await?;
                }
                sale_of(sale_id, &rows, false)
            })
        },
    )
    .await
}
