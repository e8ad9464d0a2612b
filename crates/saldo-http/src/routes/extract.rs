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
