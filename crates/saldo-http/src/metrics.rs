//! The Prometheus side of telemetry. The library counts through the `metrics` facade; this module
//! installs the one process-wide recorder (no HTTP listener of its own: `/metrics` is a route of
//! the service), times every request by matched route and status, samples the pool and
//! PostgreSQL's deadlock counter at scrape time, and keeps per-product refusal counts in a
//! bounded map served by an admin endpoint instead of as metric labels (bounded cardinality).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use deadpool_postgres::Pool;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use saldo::domain::ProductId;
use serde::Serialize;
use utoipa::ToSchema;

pub const HTTP_DURATION: &str = "saldo_http_request_duration_seconds";
pub const POOL_IN_USE: &str = "saldo_pool_connections_in_use";
pub const POOL_WAITING: &str = "saldo_pool_waiting_requests";
pub const POOL_SIZE: &str = "saldo_pool_connections";
pub const POOL_MAX_SIZE: &str = "saldo_pool_max_connections";
pub const DEADLOCKS: &str = "saldo_pg_deadlocks_total";
pub const REFUSALS: &str = "saldo_refusals_total";

/// Histogram buckets (seconds) for every histogram: fine below 10 ms where most requests and
/// lock waits land, coarse up to the request timeout, so p50/p99/p999 can be told apart.
pub const BUCKETS_S: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 30.0,
];
/// Products whose refusals are counted one by one; past this, refusals go to `untracked`.
pub const MAX_TRACKED_PRODUCTS: usize = 10_000;
/// How long a scrape waits for the deadlock counter: a busy pool must not stall `/metrics`.
pub const SCRAPE_DB_TIMEOUT: Duration = Duration::from_secs(1);
/// Largest `top` the refusals endpoint answers.
pub const MAX_TOP: usize = 1_000;

static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();

/// Installs the process-wide Prometheus recorder once and returns its handle; later calls
/// return the same handle (the recorder is global: one per process, tests included).
pub fn install() -> Result<PrometheusHandle, String> {
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .set_buckets(BUCKETS_S)
                .map_err(|e| e.to_string())?
                .install_recorder()
                .map_err(|e| e.to_string())
        })
        .clone()
}

/// Middleware: request duration by method, matched route (never the raw path: ids would make
/// the label set unbounded) and status.
pub async fn track(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = request.method().as_str().to_owned();
    let start = Instant::now();
    let response = next.run(request).await;
    metrics::histogram!(HTTP_DURATION,
        "method" => method, "route" => route, "status" => response.status().as_u16().to_string())
    .record(start.elapsed().as_secs_f64());
    response
}

/// Samples what is not counted as it happens: pool occupancy and PostgreSQL's deadlock counter.
/// A database that does not answer leaves the last deadlock value in place.
pub async fn sample(pool: &Pool) {
    let status = pool.status();
    let in_use = status.size.saturating_sub(status.available);
    metrics::gauge!(POOL_IN_USE).set(in_use as f64);
    metrics::gauge!(POOL_WAITING).set(status.waiting as f64);
    metrics::gauge!(POOL_SIZE).set(status.size as f64);
    metrics::gauge!(POOL_MAX_SIZE).set(status.max_size as f64);
    match tokio::time::timeout(SCRAPE_DB_TIMEOUT, saldo::ops::deadlocks(pool)).await {
        Ok(Ok(n)) => metrics::counter!(DEADLOCKS).absolute(u64::try_from(n).unwrap_or(0)),
        Ok(Err(e)) => tracing::warn!(error = %e, "could not read pg_stat_database.deadlocks"),
        Err(_) => tracing::warn!("reading pg_stat_database.deadlocks timed out"),
    }
}

/// Per-product refusal counts, bounded to [`MAX_TRACKED_PRODUCTS`] entries.
#[derive(Debug, Default)]
pub struct Refusals {
    inner: Mutex<RefusalsInner>,
}

#[derive(Debug, Default)]
struct RefusalsInner {
    by_product: HashMap<ProductId, u64>,
    untracked: u64,
}

/// One product's refusals.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProductRefusals {
    #[schema(value_type = i64)]
    pub product_id: ProductId,
    pub refusals: u64,
}

/// The top N refused products.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RefusalsReport {
    pub products: Vec<ProductRefusals>,
    /// Refusals of products seen after the map was full.
    pub untracked: u64,
    pub tracked_products: usize,
}

impl Refusals {
    /// Counts one insufficient-stock refusal of `product`.
    pub fn record(&self, product: ProductId) {
        metrics::counter!(REFUSALS).increment(1);
        // A poisoned lock only means another thread panicked mid-increment: keep counting.
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let len = inner.by_product.len();
        match inner.by_product.get_mut(&product) {
            Some(n) => *n += 1,
            None if len < MAX_TRACKED_PRODUCTS => {
                inner.by_product.insert(product, 1);
            }
            None => inner.untracked += 1,
        }
    }

    /// The `top` most refused products, most refused first (ties by product id).
    pub fn top(&self, top: usize) -> RefusalsReport {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut products: Vec<ProductRefusals> = inner
            .by_product
            .iter()
            .map(|(p, n)| ProductRefusals {
                product_id: *p,
                refusals: *n,
            })
            .collect();
        products.sort_by(|a, b| {
            b.refusals
                .cmp(&a.refusals)
                .then(a.product_id.cmp(&b.product_id))
        });
        products.truncate(top.min(MAX_TOP));
        RefusalsReport {
            products,
            untracked: inner.untracked,
            tracked_products: inner.by_product.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: i64) -> ProductId {
        ProductId::new(n).expect("positive")
    }

    #[test]
    fn refusals_are_ranked_and_bounded() {
        let r = Refusals::default();
        for _ in 0..3 {
            r.record(p(7));
        }
        r.record(p(2));
        let top = r.top(1);
        assert_eq!(top.products.len(), 1);
        assert_eq!(top.products[0].product_id, p(7));
        assert_eq!(top.products[0].refusals, 3);
        for n in 100..(100 + MAX_TRACKED_PRODUCTS as i64) {
            r.record(p(n));
        }
        let top = r.top(MAX_TOP + 5);
        assert_eq!(top.tracked_products, MAX_TRACKED_PRODUCTS);
        assert_eq!(top.untracked, 2, "the last two products found the map full");
        assert_eq!(top.products.len(), MAX_TOP);
    }
}
