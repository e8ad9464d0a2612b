//! The façade callers hold: [`StockEngine`], one strategy on one store, every stock operation
//! of an order. [`build`] makes the engine of a served [`StrategyName`].
//!
//! The engine asks its strategy only what differs between strategies (how an order is reserved
//! and confirmed); everything else is the shared flows. It counts every reservation's outcome
//! once, whatever the strategy did inside.
//!
//! A bundle is taken as its components: a reserve or a sale that names one is refused on the
//! bundle's own empty row, and then run once more with the components in its place, or with
//! them at once when the engine has seen the product refused as a bundle before
//! ([`crate::stock::bundled`]); a return or a partial settle is rewritten before it runs.
//!
//! Expiry is exact for capacity too: an operation refused with `InsufficientStock` is tried
//! again after the refused product's lapsed reservations are expired ([`reclaiming`]), so units
//! held past their expiry go to the buyer who asks, not to whoever comes after the sweeper.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use crate::domain::{Lines, MaxHold, OrderId, ProductId, Tags, Ttl, MAX_ITEMS_PER_ORDER};
use crate::error::Error;
use crate::stock::bundled::{named_or_components, BundleHints};
use crate::stock::decide::plan::Intent;
use crate::stock::flows::{bundles, extend, moves, reserve, returns, sales, settle, sweeper};
use crate::stock::model::{
    ConfirmOutcome, ExtendOutcome, Move, MoveRequest, Placement, ReleaseOutcome, RereserveRequest,
    Reservation, ReserveRequest, ReservedItem, Return, ReturnRequest, Sale, SaleRequest,
    StrategyName,
};
use crate::stock::strategy::atomic::Atomic;
use crate::stock::strategy::batched::{Batched, BatchedConfig};
use crate::stock::strategy::optimistic::{Optimistic, OptimisticConfig};
use crate::stock::strategy::pessimistic::Pessimistic;
use crate::stock::strategy::trace::TraceSink;
use crate::stock::strategy::StockStrategy;
use crate::store::handle::Store;
use crate::telemetry;

/// Knobs a strategy may read when it is built. Each has a bounded default.
#[derive(Debug, Clone, Default)]
pub struct StrategyConfig {
    /// Attempts and backoff of the `optimistic` strategy before `VersionConflict`.
    pub optimistic: OptimisticConfig,
    /// Lab only: where the pessimistic and optimistic takers (and the lab's naive ones) record
    /// their reads and writes, for `saldo race --explain`. `None` in production.
    pub trace: Option<TraceSink>,
    /// Queues, batch size and partitions of the `batched` strategy.
    pub batched: BatchedConfig,
}

/// The engine of the named strategy over `store`. `batched` spawns its workers on the first
/// `reserve`, on the tokio runtime that calls it; they stop when the last clone is dropped.
pub fn build(name: StrategyName, store: Store, config: &StrategyConfig) -> StockEngine {
    let trace = config.trace.clone();
    let strategy: Arc<dyn StockStrategy> = match name {
        StrategyName::Atomic => Arc::new(Atomic),
        StrategyName::Pessimistic => Arc::new(Pessimistic { trace }),
        StrategyName::Optimistic => Arc::new(Optimistic {
            config: config.optimistic,
            trace,
        }),
        StrategyName::Batched => Arc::new(Batched::new(store.clone(), &config.batched)),
    };
    StockEngine::with(store, strategy)
}

/// One strategy on one store. Cheap to clone; clones share the strategy (the batched one's
/// queues and workers).
#[derive(Clone)]
pub struct StockEngine {
    store: Store,
    strategy: Arc<dyn StockStrategy>,
    /// Products seen refused as bundles (shared by clones).
    bundle_hints: Arc<BundleHints>,
}

impl StockEngine {
    /// The engine of `strategy` over `store` (the lab plugs its naive strategies in here; a
    /// `Batched` must be built on the same store).
    pub fn new(store: Store, strategy: impl StockStrategy + 'static) -> Self {
        StockEngine::with(store, Arc::new(strategy))
    }

    pub fn with(store: Store, strategy: Arc<dyn StockStrategy>) -> Self {
        StockEngine {
            store,
            strategy,
            bundle_hints: Arc::default(),
        }
    }

    pub fn name(&self) -> &'static str {
        self.strategy.name()
    }

    /// The database and transaction settings the engine runs on.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Reserves all items or none. A replay (the order's rows exist) takes nothing and returns
    /// the order's current state, whatever happened to it since; other items are a conflict.
    pub async fn reserve(&self, request: &ReserveRequest) -> Result<Reservation, Error> {
        let result = named_or_components(
            &self.store,
            &self.bundle_hints,
            (&request.items, &Placement::default()),
            |components| async move {
                match components {
                    None => self.reserve_as_named(request).await,
                    Some((items, _)) => {
                        let request = ReserveRequest {
                            items,
                            ..request.clone()
                        };
                        self.reserve_as_named(&request).await
                    }
                }
            },
        )
        .await;
        telemetry::reservation_outcome(reserve::outcome(&result));
        result
    }

    async fn reserve_as_named(&self, request: &ReserveRequest) -> Result<Reservation, Error> {
        reclaiming(&self.store, || self.strategy.reserve(&self.store, request)).await
    }

    /// [`StockEngine::reserve`] with a placement (pinned locations, single or split
    /// allocation): every item takes the locked path, whatever the strategy.
    pub async fn reserve_placed(
        &self,
        request: &ReserveRequest,
        placement: &Placement,
    ) -> Result<Reservation, Error> {
        if placement.is_default() {
            return self.reserve(request).await;
        }
        let result = named_or_components(
            &self.store,
            &self.bundle_hints,
            (&request.items, placement),
            |components| async move {
                match components {
                    None => self.reserve_placed_as_named(request, placement).await,
                    Some((items, placement)) => {
                        let request = ReserveRequest {
                            items,
                            ..request.clone()
                        };
                        self.reserve_placed_as_named(&request, &placement).await
                    }
                }
            },
        )
        .await;
        telemetry::reservation_outcome(reserve::outcome(&result));
        result
    }

    async fn reserve_placed_as_named(
        &self,
        request: &ReserveRequest,
        placement: &Placement,
    ) -> Result<Reservation, Error> {
        let taker = self.strategy.taker();
        reclaiming(&self.store, || {
            reserve::reserve(&self.store, taker, Intent::Reserve(request), placement)
        })
        .await
    }

    /// Takes again, all or nothing, what the order lost (expired or released); idempotent by
    /// `rereserve_id`. Same refusals as `reserve`.
    pub async fn rereserve(&self, request: &RereserveRequest) -> Result<Reservation, Error> {
        let taker = self.strategy.taker();
        let placement = Placement::default();
        let result = reclaiming(&self.store, || {
            reserve::reserve(&self.store, taker, Intent::Rereserve(request), &placement)
        })
        .await;
        telemetry::reservation_outcome(reserve::outcome(&result));
        result
    }

    /// For the race lab only (`saldo-lab`'s `naive-replay`): reserve under the older rule under
    /// which an order id stopped being an idempotency key once the order was released or
    /// expired, so a late retry takes the units again. The rule itself stays in the shared
    /// idempotency decision; this is its one public door, so the lab can show `saldo race
    /// late-retry` failing without per-request idempotency. Never used by the service.
    pub async fn reserve_forgetting_released(
        &self,
        request: &ReserveRequest,
    ) -> Result<Reservation, Error> {
        let intent = Intent::ForgetfulReserve(request);
        let taker = self.strategy.taker();
        reserve::reserve(&self.store, taker, intent, &Placement::default()).await
    }

    /// active → confirmed; returns what was confirmed and what was missing. Idempotent.
    pub async fn confirm(&self, order_id: &OrderId) -> Result<ConfirmOutcome, Error> {
        self.confirm_lines(order_id, None).await
    }

    /// [`StockEngine::confirm`] of the named lines only (`None`: the whole order); the answer
    /// is about those lines. A product the order has no line of is [`Error::NotInOrder`],
    /// nothing confirmed.
    pub async fn confirm_lines(
        &self,
        order_id: &OrderId,
        lines: Option<&Lines>,
    ) -> Result<ConfirmOutcome, Error> {
        let lines = match lines {
            Some(lines) => Some(bundles::expand_lines(&self.store, lines).await?),
            None => None,
        };
        self.strategy
            .confirm(&self.store, order_id, lines.as_ref())
            .await
    }

    /// active → released, units back to available. Idempotent.
    pub async fn release(&self, order_id: &OrderId) -> Result<ReleaseOutcome, Error> {
        self.release_lines(order_id, None).await
    }

    /// [`StockEngine::release`] of the named lines only (`None`: the whole order). A named line
    /// that is sold or expired is [`Error::NotReleasable`] naming its state, nothing released.
    pub async fn release_lines(
        &self,
        order_id: &OrderId,
        lines: Option<&Lines>,
    ) -> Result<ReleaseOutcome, Error> {
        let lines = match lines {
            Some(lines) => Some(bundles::expand_lines(&self.store, lines).await?),
            None => None,
        };
        settle::release(&self.store, order_id, lines.as_ref()).await
    }

    /// Every reservation row of an order.
    pub async fn order(&self, order_id: &OrderId) -> Result<Vec<ReservedItem>, Error> {
        Ok(settle::order(&self.store, order_id).await?.0)
    }

    /// Every reservation row of an order, with the order's reference and metadata (its first
    /// request's).
    pub async fn order_with_tags(
        &self,
        order_id: &OrderId,
    ) -> Result<(Vec<ReservedItem>, Tags), Error> {
        settle::order(&self.store, order_id).await
    }

    /// Moves the expiry of the order's active reservations to now + `ttl`, never past
    /// `max_hold` since each was made; what already expired is
    /// [`Error::ReservationExpired`].
    pub async fn extend(
        &self,
        order_id: &OrderId,
        ttl: Ttl,
        max_hold: MaxHold,
    ) -> Result<ExtendOutcome, Error> {
        extend::extend(&self.store, order_id, ttl, max_hold).await
    }

    /// Brings confirmed units of an order back into `available`, every item or none, never
    /// more of a line than was confirmed ([`Error::ReturnExceedsConfirmed`]); idempotent by
    /// `return_id`. One shared flow under every strategy (it meets the others on the order's
    /// reservation rows and the stock rows, in the global lock order).
    pub async fn record_return(&self, request: &ReturnRequest) -> Result<Return, Error> {
        match bundles::expand_returns(&self.store, &request.items).await? {
            None => returns::record(&self.store, request).await,
            Some(items) => {
                let request = ReturnRequest {
                    items,
                    ..request.clone()
                };
                returns::record(&self.store, &request).await
            }
        }
    }

    /// Moves units of a product between `available` and its non-sellable states, and between
    /// its locations, all or nothing, idempotent by `move_id` (per product): never more than
    /// the source holds ([`Error::MoveShort`]; reserved units are never a source), another
    /// payload under a used id is [`Error::MoveConflict`]. One shared flow under every strategy:
    /// it meets the takes on the product's stock row, which it holds while it checks and writes.
    pub async fn move_units(&self, request: &MoveRequest) -> Result<Move, Error> {
        moves::record(&self.store, request).await
    }

    /// Sells every item straight from `available`, or none; idempotent by `sale_id`.
    pub async fn sell(&self, request: &SaleRequest) -> Result<Sale, Error> {
        self.sell_placed(request, &Placement::default()).await
    }

    /// [`StockEngine::sell`] with a placement (pinned locations, single or split allocation),
    /// as [`StockEngine::reserve_placed`] takes one.
    pub async fn sell_placed(
        &self,
        request: &SaleRequest,
        placement: &Placement,
    ) -> Result<Sale, Error> {
        named_or_components(
            &self.store,
            &self.bundle_hints,
            (&request.items, placement),
            |components| async move {
                match components {
                    None => self.sell_as_named(request, placement).await,
                    Some((items, placement)) => {
                        let request = SaleRequest {
                            items,
                            ..request.clone()
                        };
                        self.sell_as_named(&request, &placement).await
                    }
                }
            },
        )
        .await
    }

    async fn sell_as_named(
        &self,
        request: &SaleRequest,
        placement: &Placement,
    ) -> Result<Sale, Error> {
        reclaiming(&self.store, || {
            sales::sell_placed(&self.store, request, placement)
        })
        .await
    }
}

/// Runs `operation`; while it is refused for want of stock on a product not reclaimed yet, and
/// expiring that product's lapsed reservations frees something, runs it again. Bounded: each
/// product at most once, at most [`MAX_ITEMS_PER_ORDER`] of them. The refusal is the answer
/// when nothing lapsed (the common case: one indexed read), or when reclaiming fails (logged).
/// Running again is safe: a refused reserve or sale wrote nothing, so the next attempt is the
/// same request as a client's retry.
async fn reclaiming<T, F, Fut>(store: &Store, operation: F) -> Result<T, Error>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut reclaimed: HashSet<ProductId> = HashSet::new();
    loop {
        let result = operation().await;
        let Err(Error::InsufficientStock { product_id, .. }) = &result else {
            return result;
        };
        let product_id = *product_id;
        if reclaimed.len() >= MAX_ITEMS_PER_ORDER || !reclaimed.insert(product_id) {
            return result;
        }
        match sweeper::reclaim(store, &[product_id]).await {
            Ok(0) => return result,
            Ok(expired) => {
                tracing::debug!(%product_id, expired, "expired lapsed reservations of a refused take");
                telemetry::settled("expired", expired);
            }
            Err(e) => {
                tracing::warn!(%product_id, error = %e, "could not expire lapsed reservations");
                return result;
            }
        }
    }
}
