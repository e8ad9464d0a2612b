//! What every handler shares ([`AppState`]: the stock strategy, the ledger on the same store,
//! the validated settings, the metrics handle, the refusal counts and the open event streams) and the rendered OpenAPI
//! document. A leaf: the routes, the auth extractors and the server take it from here, and it
//! imports nothing of theirs.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;
use saldo::ledger::{Ledger, TransferStrategy};
use saldo::stock::batched::BatchedConfig;
use saldo::stock::{StockEngine, Store};

use crate::config::Settings;
use crate::error::ApiError;
use crate::event_streams::EventStreams;
use crate::metrics::Refusals;

/// The rendered OpenAPI document, shared by the `/openapi.json` handler.
#[derive(Clone)]
pub struct OpenApiJson(pub Arc<String>);

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub stock: StockEngine,
    /// Accounts and transfers, on the same store as the stock strategy.
    pub ledger: Arc<Ledger>,
    pub settings: Arc<Settings>,
    pub prometheus: PrometheusHandle,
    pub refusals: Arc<Refusals>,
    /// The open event streams and their limits.
    pub streams: Arc<EventStreams>,
}

impl AppState {
    pub fn new(stock: StockEngine, settings: Settings, prometheus: PrometheusHandle) -> Self {
        AppState {
            ledger: Arc::new(Ledger::new(stock.store().clone())),
            streams: Arc::new(EventStreams::new(settings.events)),
            stock,
            settings: Arc::new(settings),
            prometheus,
            refusals: Arc::new(Refusals::default()),
        }
    }

    /// The same state with the ledger serving `strategy` (its deposits, withdrawals, holds,
    /// posts and voids too); `ordered` otherwise.
    pub fn with_transfer_strategy(mut self, strategy: TransferStrategy) -> Self {
        let store = self.stock.store().clone();
        let config = BatchedConfig::default();
        self.ledger = Arc::new(Ledger::serving(store, strategy, &config));
        self
    }

    /// The database the strategy runs on.
    pub fn store(&self) -> &Store {
        self.stock.store()
    }

    /// Counts a refusal for lack of stock in the per-product refusal counts (reservations and
    /// direct sales alike); any other outcome is not a refusal.
    pub fn note_refusal(&self, e: &ApiError) {
        if let ApiError::Domain(saldo::Error::InsufficientStock {
            product_id,
            requested,
            available,
        }) = e
        {
            self.refusals.record(*product_id, *requested, *available);
        }
    }
}
