//! The service's validated settings: raw values (flags, environment) become a [`Settings`] once,
//! at start, so handlers never see an invalid token, TTL or timeout. Limits that are not
//! configurable are named constants here.

use std::time::Duration;

use rand::Rng;
use saldo::domain::{Ttl, DEFAULT_TTL_S};
use saldo::stock::StrategyName;

use crate::auth::Token;

/// Largest request body accepted (a 100-item order is about 5 KiB).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Default and bounds of the whole-request timeout.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
pub const MIN_REQUEST_TIMEOUT_MS: u64 = 100;
pub const MAX_REQUEST_TIMEOUT_MS: u64 = 300_000;
/// Bytes of randomness in a generated admin token (printed as hex).
pub const GENERATED_TOKEN_BYTES: usize = 32;

/// Why the settings were refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{name}: {reason}")]
    Token { name: &'static str, reason: String },
    #[error("reservation ttl: {0}")]
    Ttl(saldo::InputError),
    #[error(
        "request timeout {0} ms is outside {MIN_REQUEST_TIMEOUT_MS}..={MAX_REQUEST_TIMEOUT_MS}"
    )]
    RequestTimeout(u64),
    #[error("unknown strategy {0:?}")]
    UnknownStrategy(String),
    #[error("strategy {0} does not keep the invariants under concurrency; serve refuses it")]
    UnsafeStrategy(StrategyName),
}

/// Settings every request reads.
#[derive(Debug, Clone)]
pub struct Settings {
    pub admin_token: Token,
    /// When set, every `/v1` route that is not admin needs it (admin routes need the admin token).
    pub api_token: Option<Token>,
    /// TTL of a reservation whose request gives none.
    pub default_ttl: Ttl,
    pub request_timeout: Duration,
}

/// The raw settings, as flags or environment variables give them.
#[derive(Debug, Clone)]
pub struct RawSettings {
    pub admin_token: Option<String>,
    pub api_token: Option<String>,
    pub reservation_ttl_s: u64,
    pub request_timeout_ms: u64,
}

impl Default for RawSettings {
    fn default() -> Self {
        RawSettings {
            admin_token: None,
            api_token: None,
            reservation_ttl_s: DEFAULT_TTL_S,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
        }
    }
}

/// The settings and whether the admin token was generated (the caller prints it once).
#[derive(Debug)]
pub struct Validated {
    pub settings: Settings,
    pub generated_admin_token: bool,
}

impl RawSettings {
    pub fn validate(self) -> Result<Validated, ConfigError> {
        let (admin_token, generated_admin_token) = match self.admin_token {
            Some(raw) => (Token::new("SALDO_ADMIN_TOKEN", raw)?, false),
            None => (Token::new("SALDO_ADMIN_TOKEN", generate_token())?, true),
        };
        let api_token = self
            .api_token
            .map(|raw| Token::new("SALDO_API_TOKEN", raw))
            .transpose()?;
        let default_ttl = Ttl::from_secs(self.reservation_ttl_s).map_err(ConfigError::Ttl)?;
        if !(MIN_REQUEST_TIMEOUT_MS..=MAX_REQUEST_TIMEOUT_MS).contains(&self.request_timeout_ms) {
            return Err(ConfigError::RequestTimeout(self.request_timeout_ms));
        }
        Ok(Validated {
            settings: Settings {
                admin_token,
                api_token,
                default_ttl,
                request_timeout: Duration::from_millis(self.request_timeout_ms),
            },
            generated_admin_token,
        })
    }
}

/// Parses a strategy name for the service: unknown and unsafe (lab-only) strategies are refused.
pub fn serving_strategy(name: &str) -> Result<StrategyName, ConfigError> {
    let parsed =
        StrategyName::parse(name).ok_or_else(|| ConfigError::UnknownStrategy(name.to_owned()))?;
    if parsed.is_safe() {
        Ok(parsed)
    } else {
        Err(ConfigError::UnsafeStrategy(parsed))
    }
}

fn generate_token() -> String {
    let bytes: [u8; GENERATED_TOKEN_BYTES] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_admin_token_is_generated_and_flagged() {
        let v = RawSettings::default().validate().expect("valid");
        assert!(v.generated_admin_token);
        assert_eq!(
            v.settings.admin_token.expose().len(),
            GENERATED_TOKEN_BYTES * 2
        );
    }

    #[test]
    fn bad_values_are_refused() {
        let short = RawSettings {
            admin_token: Some("short".into()),
            ..RawSettings::default()
        };
        assert!(matches!(short.validate(), Err(ConfigError::Token { .. })));
        let ttl = RawSettings {
            reservation_ttl_s: 0,
            ..RawSettings::default()
        };
        assert!(matches!(ttl.validate(), Err(ConfigError::Ttl(_))));
        let timeout = RawSettings {
            request_timeout_ms: 1,
            ..RawSettings::default()
        };
        assert!(matches!(
            timeout.validate(),
            Err(ConfigError::RequestTimeout(1))
        ));
        assert!(matches!(
            serving_strategy("nope"),
            Err(ConfigError::UnknownStrategy(_))
        ));
        assert!(serving_strategy("atomic").is_ok());
    }
}
