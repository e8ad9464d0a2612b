//! Bearer-token authentication: the admin token guards the operator routes, the optional API
//! token guards the rest of `/v1`. Tokens are compared in constant time so response timing does
//! not reveal how many leading bytes of a guess were right.

use std::fmt;

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use crate::config::ConfigError;
use crate::error::ApiError;
use crate::AppState;

/// Shortest and longest accepted token.
pub const MIN_TOKEN_LEN: usize = 16;
pub const MAX_TOKEN_LEN: usize = 256;

/// A secret bearer token: printable ASCII, [`MIN_TOKEN_LEN`]..=[`MAX_TOKEN_LEN`] bytes.
/// Its `Debug` never prints it.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    pub fn new(name: &'static str, raw: String) -> Result<Self, ConfigError> {
        if !(MIN_TOKEN_LEN..=MAX_TOKEN_LEN).contains(&raw.len()) {
            return Err(ConfigError::Token {
                name,
                reason: format!("must be {MIN_TOKEN_LEN}..={MAX_TOKEN_LEN} characters"),
            });
        }
        if !raw.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ConfigError::Token {
                name,
                reason: "must be printable ASCII without spaces".into(),
            });
        }
        Ok(Token(raw))
    }

    /// The secret itself, to print once or to send.
    pub fn expose(&self) -> &str {
        &self.0
    }

    fn matches(&self, presented: &[u8]) -> bool {
        constant_time_eq(self.0.as_bytes(), presented)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(..)")
    }
}

/// Equality whose time depends only on the lengths, not on where the bytes differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // black_box keeps the optimiser from turning the fold into an early-exit comparison.
    std::hint::black_box(diff) == 0
}

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
            Some(t) if state.settings.admin_token.matches(t) => Ok(Admin),
            Some(_) => Err(ApiError::Unauthorized(
                "the bearer token is not the admin token",
            )),
            None => Err(ApiError::Unauthorized(
                "this route needs Authorization: Bearer <admin token>",
            )),
        }
    }
}

/// Extractor: the request carries the API token when one is configured. The admin token is
/// accepted too, so an operator can use every route with one token.
pub struct Client;

impl FromRequestParts<AppState> for Client {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Some(api) = &state.settings.api_token else {
            return Ok(Client);
        };
        match bearer(parts) {
            Some(t) if api.matches(t) || state.settings.admin_token.matches(t) => Ok(Client),
            Some(_) => Err(ApiError::Unauthorized("the bearer token is not valid")),
            None => Err(ApiError::Unauthorized(
                "this route needs Authorization: Bearer <api token>",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(constant_time_eq(b"", b""));
    }
}
