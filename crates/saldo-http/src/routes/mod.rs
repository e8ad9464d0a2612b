//! The routes, one module per resource, and what they share: extractors whose rejections are
//! [`ApiError`]s, and the list of routes the OpenAPI document ([`crate::openapi`]) is collected
//! from.

pub mod accounts;
pub mod admin;
pub mod docs;
pub mod health;
pub mod lists;
pub(crate) mod numbers;
pub mod orders;
pub mod repair;
pub mod sales;
pub mod stock;
pub mod transfers;

use axum::extract::{FromRequest, FromRequestParts};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::error::ApiError;
use crate::AppState;

/// A JSON body; syntax errors answer 400, shape errors 422, wrong media type 415, too big 413.
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

/// Path parameters; a segment that does not parse answers 422.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

/// Query parameters; a value that does not parse answers 422.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

/// How long after the request's deadline a handler still waits for its operation: the library
/// answers by the deadline, except a COMMIT already in flight ([`saldo::deadline::COMMIT_GRACE`]).
pub const ANSWER_GRACE: std::time::Duration =
    std::time::Duration::from_secs(saldo::deadline::COMMIT_GRACE.as_secs() + 1);

/// Runs one library operation on its own task, under the request's deadline, and waits for it.
///
/// Why its own task: axum drops a handler's future when the client goes away. Dropped half-way,
/// a transaction would leave its connection inside `BEGIN …` and the pool would hand it to the
/// next request, whose `COMMIT` would commit the abandoned work too. On its own task the
/// operation always finishes, bounded by the deadline it carries (`saldo::deadline`): an
/// answer of "not applied" is then true. Should the operation outlive the deadline plus
/// [`ANSWER_GRACE`] (only a COMMIT in flight can), the answer is "outcome unknown": replay the
/// same request (same order or transfer id) to learn it.
pub(crate) async fn detached<T, F>(operation: F) -> Result<T, ApiError>
where
    F: std::future::Future<Output = Result<T, saldo::Error>> + Send + 'static,
    T: Send + 'static,
{
    let deadline = saldo::deadline::current();
    let task = tokio::spawn(saldo::deadline::within_opt(deadline, operation));
    let joined = match deadline {
        Some(deadline) => match tokio::time::timeout_at(deadline + ANSWER_GRACE, task).await {
            Ok(joined) => joined,
            Err(_) => {
                return Err(ApiError::Domain(saldo::Error::OutcomeUnknown {
                    operation: saldo::Operation::Request,
                    cause: "it was still running past the request's deadline".into(),
                }))
            }
        },
        None => task.await,
    };
    match joined {
        Ok(result) => result.map_err(ApiError::from),
        Err(e) => Err(ApiError::Internal(format!("operation task failed: {e}"))),
    }
}

/// Media type of error answers, for the `responses(...)` of every path.
pub(crate) use crate::openapi::PROBLEM;

/// Every route with its OpenAPI path.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(stock::set_count, stock::get_stock))
        .routes(routes!(stock::adjust))
        .routes(routes!(stock::set_policy))
        .routes(routes!(stock::set_location_count))
        .routes(routes!(stock::set_priority))
        .routes(routes!(orders::reserve))
        .routes(routes!(orders::rereserve))
        .routes(routes!(orders::extend))
        .routes(routes!(sales::sell))
        .routes(routes!(orders::confirm))
        .routes(routes!(orders::release))
        .routes(routes!(orders::get_order))
        .routes(routes!(accounts::open_account))
        .routes(routes!(accounts::get_account))
        .routes(routes!(accounts::list_transfers))
        .routes(routes!(accounts::deposit))
        .routes(routes!(accounts::withdraw))
        .routes(routes!(accounts::transfer))
        .routes(routes!(transfers::get_transfer))
        .routes(routes!(transfers::post_transfer))
        .routes(routes!(transfers::void_transfer))
        .routes(routes!(transfers::transfer_group))
        .routes(routes!(admin::sweep))
        .routes(routes!(admin::audit))
        .routes(routes!(repair::repair))
        .routes(routes!(admin::locks))
        .routes(routes!(admin::refusals))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::metrics))
        .routes(routes!(health::openapi))
        .routes(routes!(lists::list_products))
        .routes(routes!(lists::list_orders))
        .routes(routes!(lists::list_accounts))
        .routes(routes!(docs::page))
        // The page's own assets: not API operations, so not in the document.
        .route(docs::SCRIPT_PATH, axum::routing::get(docs::script))
        .route(docs::STYLE_PATH, axum::routing::get(docs::style))
}
