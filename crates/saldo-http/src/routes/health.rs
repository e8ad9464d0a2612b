//! Liveness, readiness, Prometheus metrics and the OpenAPI document: unauthenticated, so
//! orchestrators and scrapers need no token.

use std::time::Duration;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use serde::Serialize;
use utoipa::ToSchema;

use super::PROBLEM;
use crate::error::{ApiError, Problem};
use crate::{AppState, OpenApiJson};

/// How long readiness waits for the database before saying no.
pub const READY_TIMEOUT: Duration = Duration::from_secs(2);

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

/// Readiness: the database answers a query within a bounded time.
#[utoipa::path(get, path = "/readyz", tag = "ops",
    responses(
        (status = 200, description = "Ready", body = HealthView),
        (status = 503, description = "The database does not answer", body = Problem, content_type = PROBLEM),
    ))]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<HealthView>, ApiError> {
    let pool = state.store().pool.clone();
    let check = async move {
        let client = pool.get().await.map_err(|e| e.to_string())?;
        client
            .simple_query("SELECT 1")
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(())
    };
    match tokio::time::timeout(READY_TIMEOUT, check).await {
        Ok(Ok(())) => Ok(Json(HealthView { status: "ready" })),
        Ok(Err(e)) => Err(ApiError::NotReady(e)),
        Err(_) => Err(ApiError::NotReady("timed out".into())),
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
