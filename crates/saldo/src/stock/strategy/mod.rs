//! The strategies, and the contract each keeps: only what differs between them.
//!
//! What differs is how an item's units are taken from `available` when they are contested
//! ([`UnitTaker`]): `atomic` puts the check inside the UPDATE, `pessimistic` locks the row with
//! the condition first, `optimistic` checks a version; `batched` instead grants many orders in
//! one transaction and batches confirms ([`StockStrategy`], which every taker has through a
//! blanket implementation). Everything else (idempotency, the locked path for backorders and
//! locations, confirm, release, expiry, extension, sales) is one flow shared by all of them
//! ([`super::flows`]), and the engine ([`super::engine::StockEngine`]) is the one façade that
//! callers hold.

pub mod atomic;
pub mod batched;
pub mod optimistic;
pub mod pessimistic;
pub mod trace;

use async_trait::async_trait;

use crate::domain::{Lines, OrderId};
use crate::error::Error;
use crate::stock::decide::plan::Intent;
use crate::stock::flows;
use crate::stock::model::{ConfirmOutcome, Placement, Reservation, ReserveRequest};
use crate::stock::taker::UnitTaker;
use crate::store::handle::Store;

/// A served strategy: how it reserves an order and confirms one. A [`UnitTaker`] runs each as
/// one transaction of the shared flows; `batched` queues them into batch transactions.
#[async_trait]
pub trait StockStrategy: Send + Sync {
    fn name(&self) -> &'static str;

    /// The take an order run as its own transaction uses (every re-reserve; `batched`: an
    /// order its batch hands over).
    fn taker(&self) -> &dyn UnitTaker;

    /// Reserves every item of `request` or none (default placement).
    async fn reserve(&self, store: &Store, request: &ReserveRequest) -> Result<Reservation, Error> {
        let intent = Intent::Reserve(request);
        flows::reserve::reserve(store, self.taker(), intent, &Placement::default()).await
    }

    /// active → confirmed, of the named lines (`None`: the whole order).
    async fn confirm(
        &self,
        store: &Store,
        order_id: &OrderId,
        lines: Option<&Lines>,
    ) -> Result<ConfirmOutcome, Error> {
        flows::settle::confirm(store, order_id, lines).await
    }
}

#[async_trait]
impl<T: UnitTaker> StockStrategy for T {
    fn name(&self) -> &'static str {
        UnitTaker::name(self)
    }

    fn taker(&self) -> &dyn UnitTaker {
        self
    }
}
