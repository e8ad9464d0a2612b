//! Direct sales' rows: the `sales` row (the idempotency key), the sale's fast take from
//! `available`, its items (stamped `sold_at` while the stock rows are locked).

use chrono::{DateTime, Utc};

use crate::domain::{LocationId, ProductId, Quantity, SaleId, Tags};
use crate::error::Error;
use crate::stock::model::{LocationQuantity, Sale, SoldItem};
use crate::stock::sql;
use crate::store::dialect::Tx;
use crate::store::tags;

/// The sales table's primary key: a unique violation on it is a concurrent copy that won.
pub(crate) const SALE_KEY: &str = "sales_pkey";

/// The items of `sale_id` as a [`Sale`] (`None`: no such sale yet).
pub(crate) async fn find(tx: &Tx<'_>, sale_id: &SaleId) -> Result<Option<Sale>, Error> {
    let rows = tx.query(&sql::SALE_ITEMS, &[&sale_id.as_str()]).await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let tags = tags::from_row(&rows[0])?;
    let mut sale = sale_of(sale_id, &rows, tags, true)?;
    let allocated = tx
        .query(&sql::SALE_ALLOCATIONS, &[&sale_id.as_str()])
        .await?;
    for r in &allocated {
        let product = ProductId::new(r.try_get("product_id")?)?;
        let part = LocationQuantity {
            location_id: LocationId::new(r.try_get::<_, String>("location_id")?)?,
            quantity: r.try_get("quantity")?,
        };
        match sale.items.iter_mut().find(|i| i.product_id == product) {
            Some(item) => item.allocations.push(part),
            None => {
                return Err(Error::invariant(format!(
                    "sale {sale_id} has allocations of product {product}, not one of its items"
                )))
            }
        }
    }
    Ok(Some(sale))
}

fn sale_of(
    sale_id: &SaleId,
    rows: &[tokio_postgres::Row],
    tags: Tags,
    replayed: bool,
) -> Result<Sale, Error> {
    let mut items = Vec::with_capacity(rows.len());
    let mut sold_at: Option<DateTime<Utc>> = None;
    for r in rows {
        items.push(SoldItem {
            product_id: ProductId::new(r.try_get("product_id")?)?,
            quantity: r.try_get("quantity")?,
            allocations: Vec::new(),
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
        tags,
    })
}

/// Starts a sale: the executor mode Citus needs (nothing on one node), then the `sales` row.
pub(crate) async fn begin(tx: &Tx<'_>) -> Result<(), Error> {
    tx.batch(&sql::SALE_MODE).await
}

/// Writes the `sales` row, the sale's idempotency key, with its reference and metadata.
pub(crate) async fn insert(tx: &Tx<'_>, sale_id: &SaleId, tags: &Tags) -> Result<(), Error> {
    let reference = tags.reference.as_ref().map(|r| r.as_str());
    let metadata = tags.metadata.as_ref().map(|m| m.to_json());
    tx.execute(
        &sql::INSERT_SALE,
        &[&sale_id.as_str(), &reference, &metadata],
    )
    .await?;
    Ok(())
}

/// The sale's fast take of one item: from `available` if there is enough and the product is
/// not stocked per location. True when taken.
pub(crate) async fn sell_units(
    tx: &Tx<'_>,
    product: ProductId,
    quantity: Quantity,
) -> Result<bool, Error> {
    let rows =
        crate::stock::rows::stock::write(tx, &sql::SELL_UNITS, &[&product.get(), &quantity.get()])
            .await?;
    Ok(rows.len() == 1)
}

/// Writes the sale's items and answers the sale (with the `tags` its `sales` row was written
/// with).
pub(crate) async fn insert_items(
    tx: &Tx<'_>,
    sale_id: &SaleId,
    items: &[(ProductId, Quantity)],
    tags: &Tags,
) -> Result<Sale, Error> {
    let (products, quantities): (Vec<i64>, Vec<i32>) =
        items.iter().map(|(p, q)| (p.get(), q.get())).unzip();
    let rows = tx
        .query(
            &sql::INSERT_SALE_ITEMS,
            &[&sale_id.as_str(), &products, &quantities],
        )
        .await?;
    sale_of(sale_id, &rows, tags.clone(), false)
}
