//! saldo's HTTP service: the API a shop's checkout calls, over the `saldo` library.
//!
//! [`app`] builds the whole router without a socket (tests drive it with `oneshot`); [`server`]
//! binds it, runs the in-process sweeper and shuts both down gracefully. Errors are RFC 9457
//! problem documents ([`error`]), admin and API tokens are checked in [`auth`] and persisted
//! hashed by [`tokens`], `/metrics` and request timing live in [`metrics`], one log line per
//! request in [`access_log`], and `/openapi.json` is generated from the handlers and
//! completed for the configuration by [`openapi`]; `/docs` renders it.

pub mod access_log;
pub mod auth;
pub mod body;
pub mod config;
pub mod connections;
pub mod credentials;
pub mod error;
pub mod event_streams;
pub mod feed_upkeep;
pub mod listener;
pub mod metrics;
pub mod openapi;
pub mod routes;
pub mod server;
pub mod starting;
pub mod startup;
pub mod state;
pub mod tokens;
pub mod webhooks;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::{middleware, Extension, Router};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

pub use config::{RawSettings, Settings};
pub use error::ApiError;
pub use state::{AppState, OpenApiJson};

/// How much later than a request's deadline plus [`routes::task::ANSWER_GRACE`] the whole-request
/// backstop timeout fires.
const BACKSTOP_SLACK: std::time::Duration = std::time::Duration::from_secs(1);

/// The router with every route, layer and the OpenAPI document, ready to serve.
pub fn app(state: AppState) -> Router {
    let timeout = state.settings.request_timeout;
    let body_deadline = body::BodyDeadline(state.settings.body_read_timeout);
    let (router, api) = OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(routes::router())
        .split_for_parts();
    // The document is rendered once, for this configuration (which routes need a token);
    // `/openapi.json` serves the same bytes every time.
    let document = openapi::render(&api, state.settings.credentials.api_required());
    let api_json = OpenApiJson(Arc::new(document.to_string()));
    // Router::layer wraps every route (so the matched path is known to `metrics::track`), and
    // each call converts its response back to axum's, so layers with their own body types stack.
    // Innermost first: body limits, the backstop timeout, the request's deadline, the body read
    // within its own timeout (408; outside the request deadline, which then times the handler
    // only), one shape for errors, timing, the access log (outermost: it sees the final status).
    router
        .fallback(|| async { ApiError::Bare(StatusCode::NOT_FOUND) })
        .layer(Extension(api_json))
        .layer(DefaultBodyLimit::max(config::MAX_BODY_BYTES))
        .layer(RequestBodyLimitLayer::new(config::MAX_BODY_BYTES))
        // A backstop only: library operations answer by the deadline (plus a COMMIT in flight),
        // and `routes::task::detached` turns a later answer into "outcome unknown". Firing first,
        // this would answer a bare 503 that says nothing of whether the write happened.
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            timeout + routes::task::ANSWER_GRACE + BACKSTOP_SLACK,
        ))
        .layer(middleware::from_fn(
            move |request, next: middleware::Next| {
                // The deadline starts once the body is in and travels with the operation into the
                // batched queue and the database (`saldo::deadline`).
                let deadline = tokio::time::Instant::now() + timeout;
                saldo::deadline::within(deadline, next.run(request))
            },
        ))
        .layer(middleware::from_fn_with_state(
            body_deadline,
            body::read_within,
        ))
        .layer(middleware::from_fn(error::problem_for_bare_errors))
        .layer(middleware::from_fn(metrics::track))
        .layer(middleware::from_fn(access_log::log))
        .with_state(state)
}
