//! Reading request bodies with a deadline. hyper has no body timeout: a client that sends its
//! headers and then trickles (or never sends) the body held a handler until the whole-request
//! timeout answered 503 after 30 s. This middleware reads the body first, within the body-read
//! timeout and the size limit, and answers 408 (problem+json, `Connection: close`) when it does
//! not arrive in time; handlers then see a body that is already in memory.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::config::MAX_BODY_BYTES;
use crate::error::ApiError;

/// The body-read timeout, as the middleware's state.
#[derive(Debug, Clone, Copy)]
pub struct BodyDeadline(pub Duration);

/// Middleware: buffers the request body within the deadline and [`MAX_BODY_BYTES`].
pub async fn read_within(
    State(BodyDeadline(deadline)): State<BodyDeadline>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    if hyper::body::Body::is_end_stream(&body) {
        return next.run(Request::from_parts(parts, body)).await;
    }
    match tokio::time::timeout(deadline, Limited::new(body, MAX_BODY_BYTES).collect()).await {
        Err(_) => ApiError::BodyTimeout(deadline).into_response(),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            ApiError::PayloadTooLarge.into_response()
        }
        Ok(Err(e)) => ApiError::UnreadableBody(e.to_string()).into_response(),
        Ok(Ok(collected)) => {
            let body = Body::from(collected.to_bytes());
            next.run(Request::from_parts(parts, body)).await
        }
    }
}
