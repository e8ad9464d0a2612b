//! The stock engine's shared vocabulary: the store, requests, rows, outcomes, strategy names and
//! the [`StockStrategy`] contract.
//!
//! A leaf of `stock`: every strategy and the lifecycle import from here, and nothing here
//! imports a strategy, so the strategies never depend (through `stock/mod.rs`) on the factory
//! that depends on all of them ([`super::engine`]).

use chrono::{DateTime, Utc};
use serde::Serialize;

use std::collections::BTreeMap;

use crate::domain::{
    AllocationMode, LocationId, MaxHold, OrderId, OrderItems, ProductId, RequestKey, Ttl,
};
use crate::error::Error;
use crate::store::handle::Store;

/// A request to reserve every item of an order, or none.
#[derive(Debug, Clone)]
pub struct ReserveRequest {
    pub order_id: OrderId,
    pub items: OrderItems,
    pub ttl: Ttl,
}

/// Where a reservation's units may come from: per item a pinned location (only there), else
/// the request's allocation mode over the product's locations. Only products stocked per
/// location look at it; the default (split, nothing pinned) is what a request that says
/// nothing means, and a request that says nothing never takes the located path unless one of
/// its products is located. Not part of the idempotency key: a replay answers what the first
/// request allocated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    pub allocation: AllocationMode,
    pub pinned: BTreeMap<ProductId, LocationId>,
}

impl Placement {
    pub fn is_default(&self) -> bool {
        self.allocation == AllocationMode::Split && self.pinned.is_empty()
    }
}

/// Units of one item at one location.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocationQuantity {
    pub location_id: LocationId,
    pub quantity: i32,
}

/// A product's stock at one location.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StockLocation {
    pub location_id: LocationId,
    pub available: i32,
    pub reserved: i32,
}

/// A request to take again what an order lost (expired or released before payment): seed 000's
/// "confirm reports the missing items, the caller may reserve them again", made explicit so that
/// a late retry of the order's reserve request never takes stock a second time.
#[derive(Debug, Clone)]
pub struct RereserveRequest {
    pub order_id: OrderId,
    /// This re-reserve's own idempotency key: a replay with the same key takes nothing again.
    pub rereserve_id: RequestKey,
    /// Which products, how many; `None` takes again every product the order lost, with the
    /// quantities it had. Each named product must be one the order lost.
    pub items: Option<OrderItems>,
    pub ttl: Ttl,
}

/// Status of one reservation row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Active,
    Confirmed,
    Released,
    Expired,
}

impl Status {
    /// The status column's text. The schema's CHECK allows only these four, so anything else
    /// means the schema and the code disagree: an error, never a guess.
    pub(crate) fn parse(s: &str) -> Result<Status, Error> {
        match s {
            "active" => Ok(Status::Active),
            "confirmed" => Ok(Status::Confirmed),
            "released" => Ok(Status::Released),
            "expired" => Ok(Status::Expired),
            other => Err(Error::invariant(format!(
                "reservation status {other:?} is not one the schema allows"
            ))),
        }
    }
    pub fn is_live(self) -> bool {
        matches!(self, Status::Active | Status::Confirmed)
    }
}

/// One product's part of an order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReservedItem {
    pub product_id: ProductId,
    pub quantity: i32,
    pub status: Status,
    pub expires_at: DateTime<Utc>,
    /// Of `quantity`, the units not on hand yet (a backorder; `stock::backorders`): filled
    /// oldest first when units arrive. Absent from the JSON when 0, so an order of a product
    /// without a backorder policy answers exactly as before backorders existed.
    #[serde(skip_serializing_if = "is_zero")]
    pub backordered: i32,
    /// Where the allocated units came from (products stocked per location only; empty
    /// otherwise). Backordered units have no location until a fill gives them one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<LocationQuantity>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// Units a confirmed order still waits for: its backorder, filled (straight to sold) when
/// units arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PendingItem {
    pub product_id: ProductId,
    pub quantity: i32,
}

/// An order's state after `reserve` or `rereserve`: per product, its latest reservation row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reservation {
    pub order_id: OrderId,
    pub items: Vec<ReservedItem>,
    /// True when the request had been made before and changed nothing now (its items show what
    /// became of it since: active, confirmed, released or expired).
    pub replayed: bool,
}

/// What `confirm` did: what the order now holds as sold, and what it lost before payment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfirmOutcome {
    pub order_id: OrderId,
    pub confirmed: Vec<ReservedItem>,
    /// Products whose reservation expired or was released before the confirm: re-reserve or refund.
    pub missing: Vec<ReservedItem>,
    /// Backordered units of the confirmed items: sold, but not on hand yet (distinct from
    /// `missing`: nothing to re-reserve or refund, they ship when they arrive). Absent from the
    /// JSON when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingItem>,
}

/// What `release` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReleaseOutcome {
    pub order_id: OrderId,
    pub released: Vec<ReservedItem>,
}

/// A product's stock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Stock {
    pub product_id: ProductId,
    pub available: i32,
    pub reserved: i32,
    pub version: i64,
    /// Most units that may be backordered (0: none, the default).
    pub backorder_limit: i32,
    /// Units backordered now: Σ backorders of live (active and confirmed) reservations.
    pub backordered: i32,
}

/// Names of the strategies the service may run: every one keeps every invariant under
/// concurrency. The race lab's naive strategies are not here: they live in `saldo-lab`
/// (`LabStrategy`), so nothing in this crate can build or serve them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StrategyName {
    Atomic,
    Pessimistic,
    Optimistic,
    Batched,
}

impl StrategyName {
    /// Every strategy, in the order the lab prints them.
    pub const ALL: &'static [StrategyName] = &[
        StrategyName::Atomic,
        StrategyName::Pessimistic,
        StrategyName::Optimistic,
        StrategyName::Batched,
    ];

    pub fn parse(s: &str) -> Option<StrategyName> {
        StrategyName::ALL.iter().copied().find(|n| n.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            StrategyName::Atomic => "atomic",
            StrategyName::Pessimistic => "pessimistic",
            StrategyName::Optimistic => "optimistic",
            StrategyName::Batched => "batched",
        }
    }
}

impl std::fmt::Display for StrategyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The one contract every stock strategy keeps (and the contract suite checks): reserve all
/// items or none without overselling, confirm, release, read an order.
#[async_trait::async_trait]
pub trait StockStrategy: Send + Sync {
    fn name(&self) -> &'static str;
    /// The database and transaction settings the strategy runs on.
    fn store(&self) -> &Store;
    /// Reserves all items or none. A replay (the order's rows exist) takes nothing and returns
    /// the order's current state, whatever happened to it since; other items are a conflict.
    async fn reserve(&self, request: &ReserveRequest) -> Result<Reservation, Error>;
    /// `reserve` with a placement (pinned locations, single or split allocation). The default
    /// placement is plain `reserve`; any other runs the one located path
    /// ([`super::locations::reserve`]) that every strategy shares (`batched` included: it
    /// routes such an order there instead of queueing it).
    async fn reserve_placed(
        &self,
        request: &ReserveRequest,
        placement: &Placement,
    ) -> Result<Reservation, Error> {
        if placement.is_default() {
            return self.reserve(request).await;
        }
        let intent = super::lifecycle::Intent::Reserve(request);
        let result = super::locations::reserve(self.store(), intent, placement).await;
        telemetry_outcome(&result);
        result
    }
    /// Takes again, all or nothing, what the order lost (expired or released); idempotent by
    /// `rereserve_id`. Same refusals as `reserve`.
    async fn rereserve(&self, request: &RereserveRequest) -> Result<Reservation, Error>;
    /// active → confirmed; returns what was confirmed and what was missing. Idempotent.
    async fn confirm(&self, order_id: &OrderId) -> Result<ConfirmOutcome, Error>;
    /// active → released, units back to available. Idempotent.
    async fn release(&self, order_id: &OrderId) -> Result<ReleaseOutcome, Error>;
    /// Every reservation row of an order.
    async fn order(&self, order_id: &OrderId) -> Result<Vec<ReservedItem>, Error>;
    /// Moves the expiry of the order's active reservations to now + `ttl`, never past
    /// `max_hold` since each was made; what already expired is
    /// [`Error::ReservationExpired`]. No stock row moves, so every strategy (`batched`
    /// included: its queues carry takes and confirms only) runs the one shared transaction of
    /// [`super::extend::extend`].
    async fn extend(
        &self,
        order_id: &OrderId,
        ttl: Ttl,
        max_hold: MaxHold,
    ) -> Result<super::extend::ExtendOutcome, Error> {
        super::extend::extend(self.store(), order_id, ttl, max_hold).await
    }
    /// Sells every item straight from `available`, or none; idempotent by `sale_id`. Every
    /// strategy (`batched` included: a sale is never queued) runs the one transaction of
    /// [`super::sales::sell`], whose take is `atomic`'s conditional UPDATE.
    async fn sell(&self, request: &super::sales::SaleRequest) -> Result<super::sales::Sale, Error> {
        super::sales::sell(self.store(), request).await
    }
}

/// Counts a reservation outcome; shared by every strategy so the metric means the same thing.
pub(crate) fn telemetry_outcome(result: &Result<Reservation, Error>) {
    let outcome = match result {
        Ok(r) if r.replayed => "replayed",
        Ok(_) => "reserved",
        Err(Error::InsufficientStock { .. }) => "insufficient_stock",
        Err(Error::IdempotencyConflict(_)) => "idempotency_conflict",
        Err(Error::NothingToRereserve(_) | Error::NotRereservable { .. }) => "not_rereservable",
        Err(Error::UnknownOrder(_)) => "unknown_order",
        Err(Error::DeadlineExceeded { .. }) => "deadline_exceeded",
        Err(Error::ProductLocked(_)) => "product_locked",
        Err(Error::OutcomeUnknown { .. }) => "outcome_unknown",
        Err(Error::VersionConflict { .. }) => "version_conflict",
        Err(Error::UnknownProduct(_)) => "unknown_product",
        Err(Error::UnknownLocation { .. }) => "unknown_location",
        Err(Error::Input(_)) => "invalid",
        Err(_) => "error",
    };
    crate::telemetry::reservation_outcome(outcome);
}
