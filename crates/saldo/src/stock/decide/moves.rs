//! A move's decisions (pure): whether a request replays the move stored under its id, whether
//! its ends fit the product (a location on each end exactly when the product is stocked per
//! location), and whether its source holds the units (the counts read under the row locks).

use crate::domain::{ProductId, StockState, MAX_STOCK_COUNT};
use crate::error::{Error, InputError};
use crate::stock::model::{Move, MoveRequest, Place};
use crate::stock::rows::moves::{Held, StateDeltas};

/// A move that would leave its units where they are is refused before any database work.
pub(crate) fn refuse_nowhere(request: &MoveRequest) -> Result<(), InputError> {
    if request.from == request.to {
        return Err(InputError::MoveGoesNowhere);
    }
    Ok(())
}

/// Whether `request` asks for what `done` did: the same quantity, places and reason.
pub(crate) fn same_request(done: &Move, request: &MoveRequest) -> bool {
    done.quantity == request.quantity.get()
        && done.from == request.from
        && done.to == request.to
        && done.reason == request.reason.as_str()
}

/// The ends' locations fit the product: both named when it is stocked per location (its units
/// are somewhere: [`Error::StockedByLocation`]), none otherwise (a location it is not stocked
/// at: [`Error::UnknownLocation`]).
pub(crate) fn check_places(
    product: ProductId,
    located: bool,
    request: &MoveRequest,
) -> Result<(), Error> {
    for place in [&request.from, &request.to] {
        match (located, &place.location_id) {
            (true, None) => return Err(Error::StockedByLocation(product)),
            (false, Some(location)) => {
                return Err(Error::UnknownLocation {
                    product_id: product,
                    location_id: location.clone(),
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// The deltas `quantity` units moving from `from` to `to` make on one row (zero when both are
/// the same state: a move between locations leaves the product's totals as they are).
pub(crate) fn deltas(from: StockState, to: StockState, quantity: i32) -> StateDeltas {
    let mut d = [0; 4];
    d[from.index()] -= quantity;
    d[to.index()] += quantity;
    d
}

/// The source holds `quantity` units in its state ([`Error::MoveShort`] naming what it holds),
/// and the destination stays within [`MAX_STOCK_COUNT`] ([`Error::StockWouldExceedLimit`]).
pub(crate) fn check_units(
    product: ProductId,
    from: &Place,
    source: &Held,
    destination: &Held,
    to: StockState,
    quantity: i32,
) -> Result<(), Error> {
    let held = source[from.state.index()];
    if held < quantity {
        return Err(Error::MoveShort {
            product_id: product,
            state: from.state,
            location_id: from.location_id.clone(),
            held,
            requested: quantity,
        });
    }
    let after = i64::from(destination[to.index()]) + i64::from(quantity);
    if after > i64::from(MAX_STOCK_COUNT) {
        return Err(Error::StockWouldExceedLimit {
            product_id: product,
            delta: quantity,
            on_hand_after: after,
            max: MAX_STOCK_COUNT,
        });
    }
    Ok(())
}
