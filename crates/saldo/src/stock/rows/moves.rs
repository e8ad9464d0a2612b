//! Moves' rows (migration V21): the `stock_moves` row (the idempotency key, per product), the
//! state columns of a product's row and of its location rows, and the conditional writes that
//! move units between them (never below zero: the condition is inside each UPDATE). Every write
//! of the product's row goes through [`stock::write`], so it records its `stock.changed`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::domain::{LocationId, MoveId, ProductId, StockState};
use crate::error::Error;
use crate::stock::model::{Move, Place, States, Stock};
use crate::stock::rows::stock;
use crate::stock::sql;
use crate::store::dialect::Tx;

/// Signed changes of `available` and of each state, by [`StockState::index`].
pub(crate) type StateDeltas = [i32; 4];

/// A location row's units by state ([`StockState::index`]), read under its lock.
pub(crate) type Held = [i32; 4];

/// The units of a [`States`] and `available`, by [`StockState::index`].
pub(crate) fn held(available: i32, states: &States) -> Held {
    [
        available,
        states.damaged,
        states.safety_stock,
        states.incoming,
    ]
}

/// The move `move_id` of `product` as stored (`None`: not made yet).
pub(crate) async fn find(
    tx: &Tx<'_>,
    product: ProductId,
    move_id: &MoveId,
) -> Result<Option<Move>, Error> {
    let row = tx
        .query_opt(&sql::FIND_MOVE, &[&product.get(), &move_id.as_str()])
        .await?;
    row.map(|r| move_of(product, &r, true)).transpose()
}

fn place_of(row: &tokio_postgres::Row, end: &str) -> Result<Place, Error> {
    let state: String = row.try_get(format!("{end}_state").as_str())?;
    let location: Option<String> = row.try_get(format!("{end}_location").as_str())?;
    Ok(Place {
        state: StockState::parse(&state)?,
        location_id: location.map(LocationId::new).transpose()?,
    })
}

fn move_of(product: ProductId, row: &tokio_postgres::Row, replayed: bool) -> Result<Move, Error> {
    let moved_at: DateTime<Utc> = row.try_get("moved_at")?;
    Ok(Move {
        move_id: MoveId::new(row.try_get::<_, String>("move_id")?)?,
        product_id: product,
        quantity: row.try_get("quantity")?,
        from: place_of(row, "from")?,
        to: place_of(row, "to")?,
        reason: row.try_get("reason")?,
        moved_at,
        replayed,
    })
}

/// Records the move and answers it.
pub(crate) async fn insert(
    tx: &Tx<'_>,
    product: ProductId,
    move_id: &MoveId,
    quantity: i32,
    from: &Place,
    to: &Place,
    reason: &str,
) -> Result<Move, Error> {
    let from_location = from.location_id.as_ref().map(LocationId::as_str);
    let to_location = to.location_id.as_ref().map(LocationId::as_str);
    let row = tx
        .query_one(
            &sql::INSERT_MOVE,
            &[
                &product.get(),
                &move_id.as_str(),
                &quantity,
                &from.state.as_str(),
                &from_location,
                &to.state.as_str(),
                &to_location,
                &reason,
            ],
        )
        .await?;
    move_of(product, &row, false)
}

/// The state columns of `product`'s row.
pub(crate) async fn states(tx: &Tx<'_>, product: ProductId) -> Result<States, Error> {
    let row = tx.query_one(&sql::STOCK_STATES, &[&product.get()]).await?;
    States::of_row(&row, "")
}

/// Locks the rows of `product` at `locations` (in location order; the product's stock row is
/// held) and answers what each holds; a location it is not stocked at is absent.
pub(crate) async fn lock_locations(
    tx: &Tx<'_>,
    product: ProductId,
    locations: &[&str],
) -> Result<BTreeMap<String, Held>, Error> {
    let rows = tx
        .query(&sql::LOCK_LOCATIONS_FOR_MOVE, &[&product.get(), &locations])
        .await?;
    rows.iter()
        .map(|r| {
            let states = States::of_row(r, "")?;
            Ok((
                r.try_get("location_id")?,
                held(r.try_get("available")?, &states),
            ))
        })
        .collect()
}

/// Applies `deltas` to `product`'s row (held locked) and answers the row as written; refused
/// by the UPDATE's condition (zero rows) only if a count would go negative, which the caller
/// decided against under the same lock: an invariant error then.
pub(crate) async fn write_product(
    tx: &Tx<'_>,
    product: ProductId,
    deltas: &StateDeltas,
) -> Result<Stock, Error> {
    let [a, d, s, i] = deltas;
    let rows = stock::write(tx, &sql::MOVE_STOCK, &[&product.get(), a, d, s, i]).await?;
    match rows.as_slice() {
        [row] => stock::stock_of(product, row),
        _ => Err(Error::invariant(format!(
            "the move of product {product} wrote {} rows",
            rows.len()
        ))),
    }
}

/// Applies `deltas` to `product`'s row at `location` (held locked).
pub(crate) async fn write_location(
    tx: &Tx<'_>,
    product: ProductId,
    location: &str,
    deltas: &StateDeltas,
) -> Result<(), Error> {
    let [a, d, s, i] = deltas;
    let rows = tx
        .query(
            &sql::MOVE_AT_LOCATION,
            &[&product.get(), &location, a, d, s, i],
        )
        .await?;
    if rows.len() != 1 {
        return Err(Error::invariant(format!(
            "the move of product {product} at {location} wrote {} rows",
            rows.len()
        )));
    }
    Ok(())
}
