//! Bearer-token authentication: the admin token guards the operator routes, the API token guards
//! the rest of `/v1` (reads included: order and account state is the shop's business data) unless
//! API authentication was explicitly disabled (`--insecure-no-api-token`). Which tokens are
//! accepted is [`crate::credentials`]'s business; this module reads the header and answers 401.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

pub use crate::credentials::{Credentials, Source, RELOAD_CHECK_INTERVAL_MS};
use crate::error::ApiError;
use crate::state::AppState;
pub use crate::tokens::{Token, MAX_TOKEN_LEN, MIN_TOKEN_LEN};

fn bearer(parts: &Parts) -> Option<&[u8]> {
    let value = parts.headers.get(AUTHORIZATION)?.as_bytes();
    let scheme = value.get(..7)?;
    if scheme.eq_ignore_ascii_case(b"bearer ") {
        value.get(7..)
    } else {
        None
    }
}

/// Extractor: the request carries the admin token.
pub struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match bearer(parts) {
            Some(t) if state.settings.credentials.is_admin(t) => Ok(Admin),
            Some(_) => Err(ApiError::Unauthorized(
                "the bearer token is not the admin token",
            )),
            None => Err(ApiError::Unauthorized(
                "this route needs Authorization: Bearer <admin token>",
            )),
        }
    }
}

/// Extractor: the request carries the API token unless API authentication is disabled. The
/// admin token is accepted too, so an operator can use every route with one token.
pub struct Client;

impl FromRequestParts<AppState> for Client {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let presented = bearer(parts);
        if state.settings.credentials.is_client(presented) {
            return Ok(Client);
        }
        Err(match presented {
            Some(_) => ApiError::Unauthorized("the bearer token is not valid"),
            None => ApiError::Unauthorized("this route needs Authorization: Bearer <api token>"),
        })
    }
}
