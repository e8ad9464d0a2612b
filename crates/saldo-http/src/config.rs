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
/// Connection timeouts (ms): headers of a request must arrive within the header-read timeout of
/// its first byte (of the accept, for a new connection); a connection with no request in flight
/// is closed after the idle timeout; a body must arrive within the body-read timeout of its
/// headers (408 otherwise). Defaults stay at most 60 s; bounds shared by the three.
pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 10_000;
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 30_000;
pub const DEFAULT_BODY_READ_TIMEOUT_MS: u64 = 10_000;
pub const MIN_CONN_TIMEOUT_MS: u64 = 100;
pub const MAX_CONN_TIMEOUT_MS: u64 = 300_000;
/// Largest `--max-connections`; the descriptor limit usually lowers the cap well below it.
pub const MAX_CONNECTIONS_LIMIT: u64 = 1_000_000;

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
    #[error("{name} {value} is outside {min}..={max}")]
    OutOfRange {
        name: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
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
    /// Time a request's headers may take to arrive (see [`DEFAULT_HEADER_READ_TIMEOUT_MS`]).
    pub header_read_timeout: Duration,
    /// Time a connection with no request in flight stays open.
    pub idle_timeout: Duration,
    /// Time a request's body may take to arrive after its headers (then 408).
    pub body_read_timeout: Duration,
    /// Cap on open connections asked for; the server lowers it to what RLIMIT_NOFILE allows.
    pub max_connections: Option<usize>,
}

/// The raw settings, as flags or environment variables give them.
#[derive(Debug, Clone)]
pub struct RawSettings {
    pub admin_token: Option<String>,
    pub api_token: Option<String>,
    pub reservation_ttl_s: u64,
    pub request_timeout_ms: u64,
    pub header_read_timeout_ms: u64,
    pub idle_timeout_ms: u64,
    pub body_read_timeout_ms: u64,
    pub max_connections: Option<u64>,
}

impl Default for RawSettings {
    fn default() -> Self {
        RawSettings {
            admin_token: None,
            api_token: None,
            reservation_ttl_s: DEFAULT_TTL_S,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            header_read_timeout_ms: DEFAULT_HEADER_READ_TIMEOUT_MS,
            idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
            body_read_timeout_ms: DEFAULT_BODY_READ_TIMEOUT_MS,
            max_connections: None,
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
        let conn_timeout = |name, value| {
            in_range(name, value, MIN_CONN_TIMEOUT_MS, MAX_CONN_TIMEOUT_MS)
                .map(Duration::from_millis)
        };
        let header_read_timeout =
            conn_timeout("header read timeout (ms)", self.header_read_timeout_ms)?;
        let idle_timeout = conn_timeout("idle timeout (ms)", self.idle_timeout_ms)?;
        let body_read_timeout = conn_timeout("body read timeout (ms)", self.body_read_timeout_ms)?;
        let max_connections = self
            .max_connections
            .map(|n| in_range("max connections", n, 1, MAX_CONNECTIONS_LIMIT))
            .transpose()?
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        Ok(Validated {
            settings: Settings {
                admin_token,
                api_token,
                default_ttl,
                request_timeout: Duration::from_millis(self.request_timeout_ms),
                header_read_timeout,
                idle_timeout,
                body_read_timeout,
                max_connections,
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

fn in_range(name: &'static str, value: u64, min: u64, max: u64) -> Result<u64, ConfigError> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::OutOfRange {
            name,
            value,
            min,
            max,
        })
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
        for raw in [
            RawSettings {
                header_read_timeout_ms: MAX_CONN_TIMEOUT_MS + 1,
                ..RawSettings::default()
            },
            RawSettings {
                idle_timeout_ms: 0,
                ..RawSettings::default()
            },
            RawSettings {
                body_read_timeout_ms: MIN_CONN_TIMEOUT_MS - 1,
                ..RawSettings::default()
            },
            RawSettings {
                max_connections: Some(0),
                ..RawSettings::default()
            },
        ] {
            assert!(matches!(
                raw.validate(),
                Err(ConfigError::OutOfRange { .. })
            ));
        }
        assert!(matches!(
            serving_strategy("nope"),
            Err(ConfigError::UnknownStrategy(_))
        ));
        assert!(serving_strategy("atomic").is_ok());
    }
}
