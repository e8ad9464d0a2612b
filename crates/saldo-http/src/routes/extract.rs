//! The extractors every route takes its input with: JSON bodies, path segments and query
//! parameters whose rejections are [`ApiError`]s (so a bad input answers a problem document,
//! never axum's plain-text rejection).

use axum::extract::{FromRequest, FromRequestParts};

use crate::error::ApiError;

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

/// An optional JSON body: no body at all (an empty one) or `null` is `None`, so a route that
/// takes a body only for its options keeps answering clients that send none; anything else is
/// read exactly as [`ApiJson`] reads it (same 400/413/415/422 answers).
pub struct OptionalJson<T>(pub Option<T>);

impl<S, T> FromRequest<S> for OptionalJson<T>
where
    S: Send + Sync,
    T: serde::de::DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        let again = axum::extract::Request::from_parts(parts.clone(), body);
        let bytes = axum::body::Bytes::from_request(again, state)
            .await
            .map_err(|r| {
                if r.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::PayloadTooLarge
                } else {
                    ApiError::MalformedJson(r.body_text())
                }
            })?;
        if bytes.is_empty() {
            return Ok(OptionalJson(None));
        }
        let req = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
        let ApiJson(value) = ApiJson::<Option<T>>::from_request(req, state).await?;
        Ok(OptionalJson(value))
    }
}
