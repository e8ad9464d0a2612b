//! The contested step's contract: how a strategy takes an order's units from `available`, and
//! what it says when it cannot. The flows run it; the strategies implement it.

use async_trait::async_trait;

use crate::domain::{ProductId, Quantity};
use crate::error::Error;
use crate::stock::model::StockRow;
use crate::store::dialect::Tx;

/// What a strategy's take did with an order's items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Every item moved from `available` to `reserved`.
    All,
    /// The items before `index` were taken; the item at `index` was not (nothing of it moved),
    /// and the take stopped there. `seen` is what the strategy read of that product's row
    /// (`None`: no such product): the flow decides from it whether the item is refused or
    /// served by the locked path (a product stocked per location, or taking backorders).
    Declined {
        index: usize,
        seen: Option<StockRow>,
    },
}

/// How a strategy takes units from `available` into `reserved` inside the reserve transaction:
/// the contested step, and the only one the strategies differ in. `items` come in ascending
/// product id; the taker takes them in that order (the lock order) and never takes from a
/// product stocked per location (its units are allocated over its locations by the flow).
#[async_trait]
pub trait UnitTaker: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    async fn take(&self, tx: &Tx<'_>, items: &[(ProductId, Quantity)]) -> Result<Taken, Error>;
}

/// What a taker that declines an item reads of its product's row (unlocked; `None`: no such
/// product), for [`Taken::Declined`].
pub async fn seen(tx: &Tx<'_>, product: ProductId) -> Result<Option<StockRow>, Error> {
    crate::stock::rows::stock::seen(tx, product).await
}
