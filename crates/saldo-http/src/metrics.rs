//! The Prometheus side of telemetry. The library counts through the `metrics` facade; this module
//! installs the one process-wide recorder (no HTTP listener of its own: `/metrics` is a route of
//! the service), times every request by matched route and status, samples the pool and
//! PostgreSQL's deadlock counter at scrape time, and keeps per-product refusal counts in a
//! bounded map served by an admin endpoint instead of as metric labels (bounded cardinality).
//!
//! [`install`] also registers every family once (`describe`): HELP text, counters at zero
//! with their known label values (the library's through `saldo::telemetry::describe`), the
//! process metrics (`process_*`, read from `/proc` by `metrics-process` at each scrape) and
//! `saldo_build_info`. A new metric of the service is named here and described in
//! `describe`; one of the library in `saldo::telemetry`.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use deadpool_postgres::Pool;
use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
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
/// Insufficient-stock refusals, labelled `stock` by what the refusal saw (see [`StockAtRefusal`]).
pub const REFUSALS: &str = "saldo_refusals_total";
/// Always 1; the labels carry the build (`version`).
pub const BUILD_INFO: &str = "saldo_build_info";

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
/// Reads `/proc/self` at each scrape (no thread of its own).
static PROCESS: OnceLock<metrics_process::Collector> = OnceLock::new();

/// Installs the process-wide Prometheus recorder once, registers every family (`describe`)
/// and returns its handle; later calls return the same handle (the recorder is global: one per
/// process, tests included).
pub fn install() -> Result<PrometheusHandle, String> {
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets(BUCKETS_S)
                .map_err(|e| e.to_string())?
                .install_recorder()
                .map_err(|e| e.to_string())?;
            describe();
            Ok(handle)
        })
        .clone()
}

/// HELP text for every family of the service, its counters at zero (with their known labels),
/// the library's families, the process metrics and the build-info gauge. Needs the recorder:
/// [`install`] calls it once; public so that a test can list every family the service describes
/// under a recorder of its own (`metrics::with_local_recorder`).
pub fn describe() {
    saldo::telemetry::describe();
    describe_requests_and_pool();
    describe_refusals();
    describe_connections();
    describe_event_streams();
    describe_gauge!(
        BUILD_INFO,
        "Always 1; the version label is saldo's version."
    );
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    let process = PROCESS.get_or_init(metrics_process::Collector::default);
    process.describe();
    process.collect();
}

/// Request timing, the pool sampled at scrape and PostgreSQL's deadlock counter.
fn describe_requests_and_pool() {
    describe_histogram!(
        HTTP_DURATION,
        Unit::Seconds,
        "HTTP request duration by method, matched route and status."
    );
    describe_gauge!(
        POOL_IN_USE,
        Unit::Count,
        "Database connections checked out of the pool."
    );
    describe_gauge!(
        POOL_WAITING,
        Unit::Count,
        "Requests waiting for a pooled database connection."
    );
    describe_gauge!(
        POOL_SIZE,
        Unit::Count,
        "Database connections open in the pool."
    );
    describe_gauge!(
        POOL_MAX_SIZE,
        Unit::Count,
        "Most database connections the pool may open."
    );
    describe_counter!(
        DEADLOCKS,
        Unit::Count,
        "Deadlocks PostgreSQL detected in this database (pg_stat_database, read at scrape)."
    );
}

/// Insufficient-stock refusals, at zero for every `stock` label.
fn describe_refusals() {
    describe_counter!(
        REFUSALS,
        Unit::Count,
        "Insufficient-stock refusals by the stock the refusal saw: sold_out, short, enough."
    );
    for stock in StockAtRefusal::ALL {
        metrics::counter!(REFUSALS, "stock" => stock.label()).increment(0);
    }
}

/// The connection layer's families ([`crate::connections`]), counters at zero for every close
/// reason.
fn describe_connections() {
    use crate::connections as c;
    describe_gauge!(c::CONNECTIONS_OPEN, Unit::Count, "HTTP connections open.");
    describe_gauge!(
        c::CONNECTIONS_CAP,
        Unit::Count,
        "Most HTTP connections open at once (from RLIMIT_NOFILE or --max-connections)."
    );
    describe_counter!(
        c::CONNECTIONS_ACCEPTED,
        Unit::Count,
        "HTTP connections accepted."
    );
    describe_counter!(
        c::CONNECTIONS_CLOSED,
        Unit::Count,
        "HTTP connections closed, by reason."
    );
    describe_counter!(
        c::ACCEPT_ERRORS,
        Unit::Count,
        "Errors accepting HTTP connections (EMFILE, ENFILE, ...)."
    );
    metrics::counter!(c::CONNECTIONS_ACCEPTED).increment(0);
    metrics::counter!(c::ACCEPT_ERRORS).increment(0);
    for reason in c::CloseReason::ALL {
        metrics::counter!(c::CONNECTIONS_CLOSED, "reason" => reason.label()).increment(0);
    }
}

/// The event streams' families ([`crate::event_streams`]), cuts at zero for every reason.
fn describe_event_streams() {
    use crate::event_streams as e;
    describe_gauge!(
        e::STREAMS_OPEN,
        Unit::Count,
        "Event streams (GET /v1/events/stream) open."
    );
    describe_counter!(
        e::STREAMS_CUT,
        Unit::Count,
        "Event streams the server closed with a final cut event, by reason."
    );
    metrics::gauge!(e::STREAMS_OPEN).set(0.0);
    for reason in e::CutReason::ALL {
        metrics::counter!(e::STREAMS_CUT, "reason" => reason.as_str()).increment(0);
    }
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

/// Samples what is not counted as it happens: pool occupancy, PostgreSQL's deadlock counter
/// and the process metrics. A database that does not answer leaves the last deadlock value in
/// place.
pub async fn sample(pool: &Pool) {
    if let Some(process) = PROCESS.get() {
        process.collect();
    }
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

/// What an insufficient-stock refusal saw of its product's stock: the `stock` label of
/// [`REFUSALS`]. Three values instead of a product label (a product id per series would grow
/// without bound); the per-product counts are in [`Refusals`], served by an admin endpoint.
/// `sold_out` refusals are a campaign ending; `short` (some left, fewer than asked) and above
/// all `enough` (the read after the refusal found enough: a race with a release, or a bug) on a
/// product that has stock are what to alert on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StockAtRefusal {
    SoldOut,
    Short,
    Enough,
}

impl StockAtRefusal {
    pub const ALL: [StockAtRefusal; 3] = [Self::SoldOut, Self::Short, Self::Enough];

    pub fn of(requested: i32, available: i32) -> Self {
        if available <= 0 {
            Self::SoldOut
        } else if available < requested {
            Self::Short
        } else {
            Self::Enough
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::SoldOut => "sold_out",
            Self::Short => "short",
            Self::Enough => "enough",
        }
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
    /// Counts one insufficient-stock refusal of `product`, which saw `available` units when
    /// `requested` were asked for.
    pub fn record(&self, product: ProductId, requested: i32, available: i32) {
        let stock = StockAtRefusal::of(requested, available);
        metrics::counter!(REFUSALS, "stock" => stock.label()).increment(1);
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

    #[test]
    fn a_refusal_is_labelled_by_the_stock_it_saw() {
        assert_eq!(StockAtRefusal::of(1, 0), StockAtRefusal::SoldOut);
        assert_eq!(StockAtRefusal::of(3, 2), StockAtRefusal::Short);
        assert_eq!(StockAtRefusal::of(2, 2), StockAtRefusal::Enough);
    }

    fn p(n: i64) -> ProductId {
        ProductId::new(n).expect("positive")
    }

    #[test]
    fn refusals_are_ranked_and_bounded() {
        let r = Refusals::default();
        for _ in 0..3 {
            r.record(p(7), 1, 0);
        }
        r.record(p(2), 1, 0);
        let top = r.top(1);
        assert_eq!(top.products.len(), 1);
        assert_eq!(top.products[0].product_id, p(7));
        assert_eq!(top.products[0].refusals, 3);
        for n in 100..(100 + MAX_TRACKED_PRODUCTS as i64) {
            r.record(p(n), 1, 0);
        }
        let top = r.top(MAX_TOP + 5);
        assert_eq!(top.tracked_products, MAX_TRACKED_PRODUCTS);
        assert_eq!(top.untracked, 2, "the last two products found the map full");
        assert_eq!(top.products.len(), MAX_TOP);
    }
}
