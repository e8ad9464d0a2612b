//! Liveness, readiness, Prometheus metrics and the OpenAPI document: unauthenticated, so
//! orchestrators and scrapers need no token.

use std::time::Duration;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::{ApiError, NotReady, Problem, PROBLEM_JSON};
use crate::state::{AppState, OpenApiJson};

/// How long readiness waits for a free pooled connection before answering "pool busy".
pub const READY_POOL_WAIT: Duration = Duration::from_secs(1);
/// How long opening (or checking) a connection and running `SELECT 1` may each take before
/// readiness answers "database unavailable".
pub const READY_DATABASE_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Serialize, ToSchema)]
pub struct HealthView {
    pub status: &'static str,
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "ops",
    responses((status = 200, description = "Alive", body = HealthView)))]
pub async fn healthz() -> Json<HealthView> {
    Json(HealthView { status: "ok" })
}

/// Readiness: a pooled connection is free and the database answers a query, in bounded time.
#[utoipa::path(get, path = "/readyz", tag = "ops",
    responses(
        (status = 200, description = "Ready", body = HealthView),
        (status = 503, description = "`database-unavailable`: the database does not answer; \
            `pool-busy`: every connection is in use; `starting`: the service is still migrating \
            its database", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<HealthView>, ApiError> {
    match check(&state.store().pool).await {
        Ok(()) => Ok(Json(HealthView { status: "ready" })),
        Err(e) => Err(ApiError::NotReady(e)),
    }
}

async fn check(pool: &deadpool_postgres::Pool) -> Result<(), NotReady> {
    use deadpool_postgres::{PoolError, TimeoutType, Timeouts};
    let timeouts = Timeouts {
        wait: Some(READY_POOL_WAIT),
        create: Some(READY_DATABASE_TIMEOUT),
        recycle: Some(READY_DATABASE_TIMEOUT),
    };
    let client = match pool.timeout_get(&timeouts).await {
        Ok(client) => client,
        // Only the wait for a free slot timing out means "busy": a slot was never free.
        Err(PoolError::Timeout(TimeoutType::Wait)) => return Err(NotReady::PoolBusy),
        Err(e) => return Err(NotReady::DatabaseUnavailable(e.to_string())),
    };
    match tokio::time::timeout(READY_DATABASE_TIMEOUT, client.simple_query("SELECT 1")).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(NotReady::DatabaseUnavailable(e.to_string())),
        Err(_) => Err(NotReady::DatabaseUnavailable(
            "SELECT 1 did not answer in time".into(),
        )),
    }
}

/// Prometheus text exposition of every metric.
#[utoipa::path(get, path = "/metrics", tag = "ops",
    responses((status = 200, description = "Prometheus text format", body = String,
               content_type = "text/plain; version=0.0.4")))]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    crate::metrics::sample(&state.store().pool).await;
    state.prometheus.run_upkeep();
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        state.prometheus.render(),
    )
}

/// This document (OpenAPI 3.1).
#[utoipa::path(get, path = "/openapi.json", tag = "ops",
    responses((status = 200, description = "The OpenAPI document", body = Object)))]
pub async fn openapi(Extension(api): Extension<OpenApiJson>) -> impl IntoResponse {
    (
        [(CONTENT_TYPE, "application/json")],
        api.0.as_str().to_owned(),
    )
}
