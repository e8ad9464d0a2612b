//! The factory: [`build`] turns a [`StrategyName`] into a running strategy, and
//! [`StockEngine`] wraps a [`UnitTaker`] in the shared lifecycle.
//!
//! Kept apart from [`super::types`] because it imports every strategy: the strategies import
//! the types, the engine imports the strategies, and nothing points back.

use std::sync::Arc;

use super::lifecycle::{self, UnitTaker};
use super::types::{
    telemetry_outcome, ConfirmOutcome, ReleaseOutcome, RereserveRequest, Reservation,
    ReserveRequest, ReservedItem, StockStrategy, StrategyName,
};
use super::{atomic, batched, optimistic, pessimistic, trace};
use crate::domain::OrderId;
use crate::error::Error;
use crate::store::handle::Store;

/// Knobs a strategy may read when it is built. Each has a bounded default.
#[derive(Debug, Clone, Default)]
pub struct StrategyConfig {
    /// Attempts and backoff of the `optimistic` strategy before `VersionConflict`.
    pub optimistic: optimistic::OptimisticConfig,
    /// Lab only: where the pessimistic and optimistic takers (and the lab's naive ones) record
    /// their reads and writes, for `saldo race --explain`. `None` in production.
    pub trace: Option<trace::TraceSink>,
    /// Queues, batch size and partitions of the `batched` strategy.
    pub batched: batched::BatchedConfig,
}

/// Builds the named strategy over `store`. `batched` spawns its workers on the first `reserve`,
/// on the tokio runtime that calls it; they stop when the returned value is dropped.
pub fn build(name: StrategyName, store: Store, config: &StrategyConfig) -> Arc<dyn StockStrategy> {
    let trace = config.trace.clone();
    match name {
        StrategyName::Atomic => Arc::new(StockEngine::new(store, atomic::Atomic)),
        StrategyName::Pessimistic => {
            Arc::new(StockEngine::new(store, pessimistic::Pessimistic { trace }))
        }
        StrategyName::Optimistic => Arc::new(StockEngine::new(
            store,
            optimistic::Optimistic {
                config: config.optimistic,
                trace,
            },
        )),
        StrategyName::Batched => Arc::new(batched::Batched::new(store, &config.batched)),
    }
}

/// The stock engine: one strategy for the contested step, the shared lifecycle around it.
#[derive(Clone)]
pub struct StockEngine<T: UnitTaker> {
    store: Store,
    taker: T,
}

impl<T: UnitTaker> StockEngine<T> {
    pub fn new(store: Store, taker: T) -> Self {
        StockEngine { store, taker }
    }

    /// For the race lab only (`saldo-lab`'s `naive-replay`): reserve under the idempotency rule
    /// before issue 11, under which an order id stopped being a key once the order was released
    /// or expired, so a late retry takes the units again. The rule itself stays in `lifecycle`
    /// (one `plan` for every intent); this is its one public door, so the lab can show
    /// `saldo race late-retry` failing without it. Never used by the service.
    pub async fn reserve_forgetting_released(
        &self,
        request: &ReserveRequest,
    ) -> Result<Reservation, Error> {
        let intent = lifecycle::Intent::ForgetfulReserve(request);
        lifecycle::reserve(&self.store, &self.taker, intent).await
    }
}

#[async_trait::async_trait]
impl<T: UnitTaker> StockStrategy for StockEngine<T> {
    fn name(&self) -> &'static str {
        self.taker.name()
    }

    fn store(&self) -> &Store {
        &self.store
    }

    async fn reserve(&self, request: &ReserveRequest) -> Result<Reservation, Error> {
        let intent = lifecycle::Intent::Reserve(request);
        let result = lifecycle::reserve(&self.store, &self.taker, intent).await;
        telemetry_outcome(&result);
        result
    }

    async fn rereserve(&self, request: &RereserveRequest) -> Result<Reservation, Error> {
        let intent = lifecycle::Intent::Rereserve(request);
        let result = lifecycle::reserve(&self.store, &self.taker, intent).await;
        telemetry_outcome(&result);
        result
    }

    async fn confirm(&self, order_id: &OrderId) -> Result<ConfirmOutcome, Error> {
        lifecycle::confirm(&self.store, order_id).await
    }

    async fn release(&self, order_id: &OrderId) -> Result<ReleaseOutcome, Error> {
        lifecycle::release(&self.store, order_id).await
    }

    async fn order(&self, order_id: &OrderId) -> Result<Vec<ReservedItem>, Error> {
        lifecycle::order(&self.store, order_id).await
    }
}
