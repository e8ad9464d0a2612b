//! Returns' rows: the `order_returns` row (the idempotency key), the conditional raise of a
//! confirmed line's `returned` count (the one step that keeps "never more than was confirmed"),
//! and the return's items (stamped `returned_at` while the stock rows are locked).

use chrono::{DateTime, Utc};

use crate::domain::{LocationId, OrderId, ProductId, ReturnId, StockState};
use crate::error::Error;
use crate::stock::model::{parse_status, Return, ReturnedItem, Row, Status};
use crate::stock::sql;
use crate::store::dialect::Tx;

/// The returns table's primary key: a unique violation on it is a concurrent copy that won (a
/// copy of the same return for another order, which holds none of this order's rows).
pub(crate) const RETURN_KEY: &str = "order_returns_pkey";

/// The return `return_id` as stored (`None`: no such return yet).
pub(crate) async fn find(tx: &Tx<'_>, return_id: &ReturnId) -> Result<Option<Return>, Error> {
    let rows = tx.query(&sql::RETURN_ITEMS, &[&return_id.as_str()]).await?;
    let Some(first) = rows.first() else {
        return Ok(None);
    };
    let order_id = OrderId::new(first.try_get::<_, String>("order_id")?)?;
    let reason: String = first.try_get("reason")?;
    return_of(return_id, &order_id, reason, &rows, true).map(Some)
}

fn return_of(
    return_id: &ReturnId,
    order_id: &OrderId,
    reason: String,
    rows: &[tokio_postgres::Row],
    replayed: bool,
) -> Result<Return, Error> {
    let mut items = Vec::with_capacity(rows.len());
    let mut returned_at: Option<DateTime<Utc>> = None;
    for r in rows {
        let location: Option<String> = r.try_get("location_id")?;
        items.push(ReturnedItem {
            product_id: ProductId::new(r.try_get("product_id")?)?,
            quantity: r.try_get("quantity")?,
            location_id: location.map(LocationId::new).transpose()?,
            state: StockState::parse(&r.try_get::<_, String>("state")?)?,
        });
        let at: DateTime<Utc> = r.try_get("returned_at")?;
        returned_at = Some(returned_at.map_or(at, |s| s.min(at)));
    }
    items.sort_by_key(|i| i.product_id);
    let returned_at =
        returned_at.ok_or_else(|| Error::invariant(format!("return {return_id} has no items")))?;
    Ok(Return {
        return_id: return_id.clone(),
        order_id: order_id.clone(),
        items,
        reason,
        returned_at,
        replayed,
    })
}

/// Writes the return's key row.
pub(crate) async fn insert(
    tx: &Tx<'_>,
    return_id: &ReturnId,
    order_id: &OrderId,
    reason: &str,
) -> Result<(), Error> {
    tx.execute(
        &sql::INSERT_RETURN,
        &[&return_id.as_str(), &order_id.as_str(), &reason],
    )
    .await?;
    Ok(())
}

/// Raises `line`'s returned count by `quantity` (the line's row held locked), writing the
/// order's event `position` on it; refused with what the line holds when that would pass what
/// was confirmed ([`Error::ReturnExceedsConfirmed`]).
pub(crate) async fn raise(
    tx: &Tx<'_>,
    line: &Row,
    quantity: i32,
    position: i64,
) -> Result<(), Error> {
    let product = line.item.product_id.get();
    let raised = tx
        .query_opt(
            &sql::RAISE_RETURNED,
            &[&line.id, &product, &quantity, &position],
        )
        .await?;
    if raised.is_some() {
        return Ok(());
    }
    let row = tx
        .query_one(&sql::LINE_RETURNS, &[&line.id, &product])
        .await?;
    let confirmed = if parse_status(&row.try_get::<_, String>("status")?)? == Status::Confirmed {
        row.try_get("confirmed")?
    } else {
        0
    };
    Err(Error::ReturnExceedsConfirmed {
        order_id: OrderId::new(line.order_id.clone())?,
        product_id: line.item.product_id,
        confirmed,
        returned: row.try_get("returned")?,
        requested: i64::from(quantity),
    })
}

/// Whether `product` is stocked at `location`.
pub(crate) async fn stocked_at(
    tx: &Tx<'_>,
    product: ProductId,
    location: &LocationId,
) -> Result<bool, Error> {
    let row = tx
        .query_one(&sql::STOCKED_AT, &[&product.get(), &location.as_str()])
        .await?;
    Ok(row.try_get("stocked")?)
}

/// Writes the return's items and answers the return.
pub(crate) async fn insert_items(
    tx: &Tx<'_>,
    return_id: &ReturnId,
    order_id: &OrderId,
    reason: &str,
    items: &[ReturnedItem],
) -> Result<Return, Error> {
    let products: Vec<i64> = items.iter().map(|i| i.product_id.get()).collect();
    let quantities: Vec<i32> = items.iter().map(|i| i.quantity).collect();
    let locations: Vec<Option<&str>> = items
        .iter()
        .map(|i| i.location_id.as_ref().map(LocationId::as_str))
        .collect();
    let states: Vec<&str> = items.iter().map(|i| i.state.as_str()).collect();
    let rows = tx
        .query(
            &sql::INSERT_RETURN_ITEMS,
            &[
                &return_id.as_str(),
                &products,
                &quantities,
                &locations,
                &states,
            ],
        )
        .await?;
    return_of(return_id, order_id, reason.to_owned(), &rows, false)
}
