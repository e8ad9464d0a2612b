//! The service's validated settings: raw values (flags, environment) become a [`Settings`] once,
//! at start, so handlers never see an invalid token, TTL or timeout. Limits that are not
//! configurable are named constants here.
//!
//! Token rules (decided here, once): a token given by the environment (or a flag) or by a
//! token file wins and is never persisted (a file is followed: a new token written into it is
//! accepted within a second); otherwise, with a token directory, the stored token is used (generated, stored
//! hashed and returned to be printed once when there is none); without a directory a token is
//! generated for this process only. API authentication is on unless explicitly disabled.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use saldo::domain::{TransferTimeout, Ttl, DEFAULT_TRANSFER_TIMEOUT_S, DEFAULT_TTL_S};
use saldo::stock::StrategyName;

use crate::credentials::{Credentials, Source};
use crate::tokens::{self, StoreError, Token, TokenError, TokenFileError, TokenKind, TokenStore};
use crate::webhooks::key::{KeyError, WebhookKey};
use crate::webhooks::settings::{self as hooks, WebhookSettings};

/// Largest request body accepted (a 100-item order is about 5 KiB).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Default and bounds of the whole-request timeout.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
pub const MIN_REQUEST_TIMEOUT_MS: u64 = 100;
pub const MAX_REQUEST_TIMEOUT_MS: u64 = 300_000;
/// Bytes of randomness in a generated token (printed as hex).
pub const GENERATED_TOKEN_BYTES: usize = tokens::GENERATED_TOKEN_BYTES;

/// Whether the non-admin `/v1` routes need a bearer token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApiAuth {
    /// The default: the API token (or the admin token) is required.
    #[default]
    Required,
    /// `--insecure-no-api-token`: anyone who reaches the port may reserve stock and move money.
    Disabled,
}
/// Connection timeouts (ms): headers of a request must arrive within the header-read timeout of
/// its first byte (of the accept, for a new connection); a connection with no request in flight
/// is closed after the idle timeout; a body must arrive within the body-read timeout of its
/// headers (408 otherwise). Defaults stay at most 60 s; bounds shared by the three.
pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 10_000;
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 30_000;
pub const DEFAULT_BODY_READ_TIMEOUT_MS: u64 = 10_000;
pub const MIN_CONN_TIMEOUT_MS: u64 = 100;
pub const MAX_CONN_TIMEOUT_MS: u64 = 300_000;
/// Added to the request and body timeouts to bound the drain at shutdown and a response that
/// makes no progress ([`Settings::request_max`]).
pub const DRAIN_MARGIN: Duration = Duration::from_secs(5);
/// Largest `--max-connections`; the descriptor limit usually lowers the cap well below it.
pub const MAX_CONNECTIONS_LIMIT: u64 = 1_000_000;
/// Event streams (`GET /v1/events/stream`) open at once: default and largest.
pub const DEFAULT_MAX_EVENT_STREAMS: u64 = 64;
pub const MAX_EVENT_STREAMS_LIMIT: u64 = 10_000;
/// Events buffered per stream between the feed poller and the response: default and bounds.
pub const DEFAULT_EVENT_STREAM_BUFFER: u64 = 1_024;
pub const MAX_EVENT_STREAM_BUFFER: u64 = 65_536;
/// Life of one event stream before a clean close with its resume cursor (s): default, bounds.
pub const DEFAULT_EVENT_STREAM_LIFETIME_S: u64 = 3_600;
pub const MAX_EVENT_STREAM_LIFETIME_S: u64 = 86_400;
/// Retention of the event feed (s): default (7 days) and bounds (1 minute..=365 days).
pub const DEFAULT_EVENT_RETENTION_S: u64 = 7 * 86_400;
pub const MIN_EVENT_RETENTION_S: u64 = 60;
pub const MAX_EVENT_RETENTION_S: u64 = 365 * 86_400;

/// Why the settings were refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{name}: {reason}")]
    Token { name: &'static str, reason: String },
    #[error(
        "an API token is given (SALDO_API_TOKEN or SALDO_API_TOKEN_FILE) and API authentication \
         is disabled: choose one"
    )]
    ApiTokenWithAuthDisabled,
    #[error(
        "the {kind} token is given twice ({} and {}): choose one",
        kind.env_var(),
        kind.file_env_var()
    )]
    TwoTokenSources { kind: TokenKind },
    #[error(transparent)]
    TokenFile(#[from] TokenFileError),
    #[error("token store: {0}")]
    TokenStore(#[from] StoreError),
    #[error("webhook key: {0}")]
    WebhookKey(#[from] KeyError),
    #[error("reservation ttl: {0}")]
    Ttl(saldo::InputError),
    #[error("transfer timeout: {0}")]
    TransferTimeout(saldo::InputError),
    #[error("maximum hold: {0}")]
    MaxHold(saldo::InputError),
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
    /// Not a served strategy; the race lab's naive ones (`saldo-lab`) are not served.
    #[error(
        "unknown strategy {0:?} (the naive strategies exist only in saldo race and saldo bench)"
    )]
    UnknownStrategy(String),
}

/// Settings every request reads.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The accepted admin and API tokens (digests), followed in the token store.
    pub credentials: Arc<Credentials>,
    /// TTL of a reservation whose request gives none.
    pub default_ttl: Ttl,
    /// Life of a pending transfer whose request gives no `timeout_s`.
    pub default_transfer_timeout: TransferTimeout,
    /// Longest a reservation may be held since it was made, extensions included.
    pub max_hold: saldo::domain::MaxHold,
    pub request_timeout: Duration,
    /// Time a request's headers may take to arrive (see [`DEFAULT_HEADER_READ_TIMEOUT_MS`]).
    pub header_read_timeout: Duration,
    /// Time a connection with no request in flight stays open.
    pub idle_timeout: Duration,
    /// Time a request's body may take to arrive after its headers (then 408).
    pub body_read_timeout: Duration,
    /// Cap on open connections asked for; the server lowers it to what RLIMIT_NOFILE allows.
    pub max_connections: Option<usize>,
    /// The event feed's streams and retention.
    pub events: EventSettings,
    /// Webhook delivery: the key, the target rule, backoff and attempts.
    pub webhooks: Arc<WebhookSettings>,
}

impl Settings {
    /// The longest a request may stay in flight without writing a byte of its response (and
    /// the drain at shutdown): past it the connection is dropped as stalled.
    pub fn request_max(&self) -> Duration {
        self.request_timeout + self.body_read_timeout + DRAIN_MARGIN
    }
}

/// The event feed's limits, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventSettings {
    /// Streams open at once; one more is answered 503 `too-many-streams`.
    pub max_streams: usize,
    /// Events buffered per stream; a client that lets it fill is cut (`event: cut`).
    pub stream_buffer: usize,
    /// Life of one stream; then a clean close with its resume cursor.
    pub stream_lifetime: Duration,
    /// Events older than this are pruned from the feed.
    pub retention: Duration,
}

/// The raw settings, as flags or environment variables give them.
#[derive(Debug, Clone)]
pub struct RawSettings {
    /// `SALDO_ADMIN_TOKEN`: overrides the stored admin token; never persisted.
    pub admin_token: Option<String>,
    /// `SALDO_API_TOKEN`: overrides the stored API token; never persisted.
    pub api_token: Option<String>,
    /// `SALDO_ADMIN_TOKEN_FILE`: a file holding the admin token (owned by this user, mode 0600
    /// or stricter), read at start and followed while the service runs; instead of
    /// `admin_token`, never with it.
    pub admin_token_file: Option<PathBuf>,
    /// `SALDO_API_TOKEN_FILE`: the same for the API token.
    pub api_token_file: Option<PathBuf>,
    pub api_auth: ApiAuth,
    /// Where `tokens.json` lives (saldo's data directory). `None`: tokens not given are
    /// generated for this process only (embedders, tests).
    pub token_dir: Option<PathBuf>,
    pub reservation_ttl_s: u64,
    /// `--transfer-timeout`: a hold's life when its request names none.
    pub transfer_timeout_s: u64,
    pub max_hold_s: u64,
    pub request_timeout_ms: u64,
    pub header_read_timeout_ms: u64,
    pub idle_timeout_ms: u64,
    pub body_read_timeout_ms: u64,
    pub max_connections: Option<u64>,
    /// `--max-event-streams`.
    pub max_event_streams: u64,
    /// Events buffered per event stream (not a flag: tests make it tiny).
    pub event_stream_buffer: u64,
    pub event_stream_lifetime_s: u64,
    /// `--event-retention`.
    pub event_retention_s: u64,
    /// `--webhook-allow-private-targets`: webhooks may target loopback, private and link-local
    /// addresses (tests; receivers on the operator's own network).
    pub webhook_allow_private_targets: bool,
    /// First retry's backoff ceiling (full jitter; doubles per attempt, capped at 5 min).
    pub webhook_backoff_base_ms: u64,
    /// Attempts of one batch before the subscription turns `failing`.
    pub webhook_max_attempts: u32,
    /// How often the delivery worker looks for due subscriptions.
    pub webhook_poll_ms: u64,
}

impl Default for RawSettings {
    fn default() -> Self {
        RawSettings {
            admin_token: None,
            api_token: None,
            admin_token_file: None,
            api_token_file: None,
            api_auth: ApiAuth::Required,
            token_dir: None,
            reservation_ttl_s: DEFAULT_TTL_S,
            transfer_timeout_s: u64::from(DEFAULT_TRANSFER_TIMEOUT_S),
            max_hold_s: saldo::domain::DEFAULT_MAX_HOLD_S,
            request_timeout_ms: DEFAULT_REQUEST_TIMEOUT_MS,
            header_read_timeout_ms: DEFAULT_HEADER_READ_TIMEOUT_MS,
            idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
            body_read_timeout_ms: DEFAULT_BODY_READ_TIMEOUT_MS,
            max_connections: None,
            max_event_streams: DEFAULT_MAX_EVENT_STREAMS,
            event_stream_buffer: DEFAULT_EVENT_STREAM_BUFFER,
            event_stream_lifetime_s: DEFAULT_EVENT_STREAM_LIFETIME_S,
            event_retention_s: DEFAULT_EVENT_RETENTION_S,
            webhook_allow_private_targets: false,
            webhook_backoff_base_ms: hooks::DEFAULT_BACKOFF_BASE_MS,
            webhook_max_attempts: hooks::DEFAULT_MAX_ATTEMPTS,
            webhook_poll_ms: hooks::DEFAULT_POLL_MS,
        }
    }
}

/// A token generated by this start, to be shown exactly once.
#[derive(Debug)]
pub struct Generated {
    pub kind: TokenKind,
    pub token: Token,
    /// True when only its digest was stored (it survives restarts); false when it lives in
    /// this process only.
    pub stored: bool,
}

/// The settings and the tokens generated on the way (the caller prints each once).
#[derive(Debug)]
pub struct Validated {
    pub settings: Settings,
    pub generated: Vec<Generated>,
}

impl Validated {
    /// True when the admin token was generated now.
    pub fn generated_admin_token(&self) -> bool {
        self.generated.iter().any(|g| g.kind == TokenKind::Admin)
    }
}

impl From<TokenError> for ConfigError {
    fn from(e: TokenError) -> Self {
        ConfigError::Token {
            name: e.name,
            reason: e.reason,
        }
    }
}

impl RawSettings {
    /// The settings every request reads, and the tokens generated on the way (see the module's
    /// header for the token rules).
    pub fn validate(self) -> Result<Validated, ConfigError> {
        let admin = given(
            TokenKind::Admin,
            self.admin_token.clone(),
            self.admin_token_file.as_deref(),
        )?;
        let api = given(
            TokenKind::Api,
            self.api_token.clone(),
            self.api_token_file.as_deref(),
        )?;
        if self.api_auth == ApiAuth::Disabled && api.is_some() {
            return Err(ConfigError::ApiTokenWithAuthDisabled);
        }
        let default_ttl = Ttl::from_secs(self.reservation_ttl_s).map_err(ConfigError::Ttl)?;
        let default_transfer_timeout =
            TransferTimeout::from_secs(i64::try_from(self.transfer_timeout_s).unwrap_or(i64::MAX))
                .map_err(ConfigError::TransferTimeout)?;
        let max_hold =
            saldo::domain::MaxHold::from_secs(self.max_hold_s).map_err(ConfigError::MaxHold)?;
        if !(MIN_REQUEST_TIMEOUT_MS..=MAX_REQUEST_TIMEOUT_MS).contains(&self.request_timeout_ms) {
            return Err(ConfigError::RequestTimeout(self.request_timeout_ms));
        }
        let mut generated = Vec::new();
        let credentials = self.credentials(admin, api, &mut generated)?;
        let connections = self.connection_limits()?;
        let events = self.event_settings()?;
        let webhooks = Arc::new(self.webhooks()?);
        Ok(Validated {
            settings: Settings {
                credentials: Arc::new(credentials),
                default_ttl,
                default_transfer_timeout,
                max_hold,
                request_timeout: Duration::from_millis(self.request_timeout_ms),
                header_read_timeout: connections.header_read_timeout,
                idle_timeout: connections.idle_timeout,
                body_read_timeout: connections.body_read_timeout,
                max_connections: connections.max_connections,
                events,
                webhooks,
            },
            generated,
        })
    }

    /// The webhook settings, each within its bounds; the key from the token directory (created
    /// there when missing), else one for this process.
    fn webhooks(&self) -> Result<WebhookSettings, ConfigError> {
        let base = in_range(
            "webhook backoff base (ms)",
            self.webhook_backoff_base_ms,
            hooks::MIN_BACKOFF_BASE_MS,
            hooks::MAX_BACKOFF_BASE_MS,
        )?;
        let attempts = in_range(
            "webhook max attempts",
            u64::from(self.webhook_max_attempts),
            1,
            u64::from(hooks::MAX_MAX_ATTEMPTS),
        )?;
        let poll = in_range(
            "webhook poll interval (ms)",
            self.webhook_poll_ms,
            hooks::MIN_POLL_MS,
            hooks::MAX_POLL_MS,
        )?;
        let key = match &self.token_dir {
            Some(dir) => WebhookKey::in_dir(dir)?,
            None => WebhookKey::generate(),
        };
        Ok(WebhookSettings {
            key,
            allow_private_targets: self.webhook_allow_private_targets,
            backoff_base: Duration::from_millis(base),
            max_attempts: u32::try_from(attempts).unwrap_or(hooks::MAX_MAX_ATTEMPTS),
            poll: Duration::from_millis(poll),
        })
    }

    /// The connection timeouts and cap, each within its bounds.
    fn connection_limits(&self) -> Result<ConnectionLimits, ConfigError> {
        let timeout = |name, value| {
            in_range(name, value, MIN_CONN_TIMEOUT_MS, MAX_CONN_TIMEOUT_MS)
                .map(Duration::from_millis)
        };
        Ok(ConnectionLimits {
            header_read_timeout: timeout("header read timeout (ms)", self.header_read_timeout_ms)?,
            idle_timeout: timeout("idle timeout (ms)", self.idle_timeout_ms)?,
            body_read_timeout: timeout("body read timeout (ms)", self.body_read_timeout_ms)?,
            max_connections: self
                .max_connections
                .map(|n| in_range("max connections", n, 1, MAX_CONNECTIONS_LIMIT))
                .transpose()?
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        })
    }
}

impl RawSettings {
    /// The event feed's limits, each within its bounds.
    fn event_settings(&self) -> Result<EventSettings, ConfigError> {
        let count = |name, value, max| {
            in_range(name, value, 1, max).map(|n| usize::try_from(n).unwrap_or(usize::MAX))
        };
        let secs = |name, value, min, max| in_range(name, value, min, max).map(Duration::from_secs);
        Ok(EventSettings {
            max_streams: count(
                "max event streams",
                self.max_event_streams,
                MAX_EVENT_STREAMS_LIMIT,
            )?,
            stream_buffer: count(
                "event stream buffer",
                self.event_stream_buffer,
                MAX_EVENT_STREAM_BUFFER,
            )?,
            stream_lifetime: secs(
                "event stream lifetime (s)",
                self.event_stream_lifetime_s,
                1,
                MAX_EVENT_STREAM_LIFETIME_S,
            )?,
            retention: secs(
                "event retention (s)",
                self.event_retention_s,
                MIN_EVENT_RETENTION_S,
                MAX_EVENT_RETENTION_S,
            )?,
        })
    }
}

/// The validated connection settings.
struct ConnectionLimits {
    header_read_timeout: Duration,
    idle_timeout: Duration,
    body_read_timeout: Duration,
    max_connections: Option<usize>,
}

/// One kind's token as given: a value (environment or flag), a file (read now), or `None`.
fn given(
    kind: TokenKind,
    value: Option<String>,
    file: Option<&Path>,
) -> Result<Option<Source>, ConfigError> {
    match (value, file) {
        (Some(_), Some(_)) => Err(ConfigError::TwoTokenSources { kind }),
        (Some(raw), None) => Ok(Some(Source::Fixed(
            Token::new(kind.env_var(), raw)?.digest(),
        ))),
        (None, Some(path)) => {
            let name = kind.file_env_var();
            let token = tokens::read_token_file(name, path)?;
            Ok(Some(Source::File {
                name,
                path: path.to_owned(),
                digest: token.digest(),
            }))
        }
        (None, None) => Ok(None),
    }
}

impl RawSettings {
    /// The accepted tokens: each kind as given, else the stored one (generated and stored when
    /// there is none) with a token directory, else one generated for this process; the
    /// generated ones are added to `generated`, to be shown once.
    fn credentials(
        &self,
        admin: Option<Source>,
        api: Option<Source>,
        generated: &mut Vec<Generated>,
    ) -> Result<Credentials, ConfigError> {
        let mut fill = |given: Option<Source>, kind| -> Result<Source, ConfigError> {
            if let Some(source) = given {
                return Ok(source);
            }
            let Some(dir) = &self.token_dir else {
                let token = tokens::generate();
                let digest = token.digest();
                generated.push(Generated {
                    kind,
                    token,
                    stored: false,
                });
                return Ok(Source::Fixed(digest));
            };
            let (_, new) = TokenStore::new(dir).ensure(kind)?;
            if let Some(token) = new {
                generated.push(Generated {
                    kind,
                    token,
                    stored: true,
                });
            }
            Ok(Source::Stored)
        };
        let admin = fill(admin, TokenKind::Admin)?;
        let api = match self.api_auth {
            ApiAuth::Required => Some(fill(api, TokenKind::Api)?),
            ApiAuth::Disabled => None,
        };
        match (&admin, &api) {
            (Source::Fixed(a), None) => Ok(Credentials::fixed(*a, None)),
            (Source::Fixed(a), Some(Source::Fixed(b))) => Ok(Credentials::fixed(*a, Some(*b))),
            _ => Ok(Credentials::following(
                admin,
                api,
                self.token_dir.as_deref(),
            )?),
        }
    }
}

/// Parses a strategy name for the service. Every [`StrategyName`] keeps the invariants under
/// concurrency; anything else, the lab-only naive names included, is refused.
pub fn serving_strategy(name: &str) -> Result<StrategyName, ConfigError> {
    StrategyName::parse(name).ok_or_else(|| ConfigError::UnknownStrategy(name.to_owned()))
}

/// Parses a listen address as people write it:
/// - `IP:PORT` or `[IPv6]:PORT`, as given;
/// - `:PORT`: every IPv4 interface (`0.0.0.0:PORT`), the meaning it has in Go and nginx;
/// - `HOST:PORT` (e.g. `localhost:8080`): the host name is resolved once, now, and the first
///   IPv4 address it resolves to is used (else its first address): one listener, one address.
///
/// Anything else (no port, a bad port, a name that does not resolve) is refused with the reason.
pub fn parse_listen(raw: &str) -> Result<SocketAddr, String> {
    let raw = raw.trim();
    if let Ok(addr) = raw.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let Some((host, port)) = raw.rsplit_once(':') else {
        return Err(format!(
            "{raw:?} has no port: write HOST:PORT, IP:PORT or :PORT (e.g. 127.0.0.1:8080)"
        ));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{raw:?}: {port:?} is not a port (0..=65535)"))?;
    if host.is_empty() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    if host.contains(':') && !host.starts_with('[') {
        return Err(format!(
            "{raw:?}: write an IPv6 address in brackets, e.g. [::1]:{port}"
        ));
    }
    let resolved: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{raw:?}: cannot resolve {host:?}: {e}"))?
        .collect();
    resolved
        .iter()
        .find(|a| a.is_ipv4())
        .or(resolved.first())
        .copied()
        .ok_or_else(|| format!("{raw:?}: {host:?} resolves to no address"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_as_people_write_them() {
        let ok = |raw: &str| parse_listen(raw).unwrap_or_else(|e| panic!("{raw}: {e}"));
        assert_eq!(
            ok("127.0.0.1:8080"),
            SocketAddr::from(([127, 0, 0, 1], 8080))
        );
        assert_eq!(ok("[::1]:8080"), "[::1]:8080".parse().expect("v6"));
        assert_eq!(ok(":8080"), SocketAddr::from(([0, 0, 0, 0], 8080)));
        assert_eq!(ok(" :0 "), SocketAddr::from(([0, 0, 0, 0], 0)));
        let local = ok("localhost:8080");
        assert!(local.ip().is_loopback(), "{local}");
        assert_eq!(local.port(), 8080);
        for bad in [
            "8080",
            "localhost",
            ":http",
            ":65536",
            "::1:80",
            "",
            "no-such-host.invalid:80",
        ] {
            assert!(parse_listen(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn absent_tokens_are_generated_and_flagged() {
        let v = RawSettings::default().validate().expect("valid");
        assert!(v.generated_admin_token());
        let kinds: Vec<TokenKind> = v.generated.iter().map(|g| g.kind).collect();
        assert_eq!(kinds, [TokenKind::Admin, TokenKind::Api]);
        for g in &v.generated {
            assert_eq!(g.token.expose().len(), GENERATED_TOKEN_BYTES * 2);
            assert!(!g.stored);
        }
        let creds = &v.settings.credentials;
        assert!(creds.is_admin(v.generated[0].token.expose().as_bytes()));
        assert!(creds.is_client(Some(v.generated[1].token.expose().as_bytes())));
        assert!(!creds.is_client(None));
        assert!(!creds.is_admin(v.generated[1].token.expose().as_bytes()));
    }

    #[test]
    fn api_auth_disabled_needs_no_token_and_refuses_one() {
        let raw = RawSettings {
            api_auth: ApiAuth::Disabled,
            ..RawSettings::default()
        };
        let v = raw.clone().validate().expect("valid");
        assert_eq!(v.generated.len(), 1, "only the admin token");
        assert!(v.settings.credentials.is_client(None));
        let both = RawSettings {
            api_token: Some("x".repeat(32)),
            ..raw
        };
        assert!(matches!(
            both.validate(),
            Err(ConfigError::ApiTokenWithAuthDisabled)
        ));
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
            RawSettings {
                max_event_streams: 0,
                ..RawSettings::default()
            },
            RawSettings {
                event_stream_buffer: MAX_EVENT_STREAM_BUFFER + 1,
                ..RawSettings::default()
            },
            RawSettings {
                event_retention_s: MIN_EVENT_RETENTION_S - 1,
                ..RawSettings::default()
            },
            RawSettings {
                event_retention_s: MAX_EVENT_RETENTION_S + 1,
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
        assert!(matches!(
            serving_strategy("naive-overwrite"),
            Err(ConfigError::UnknownStrategy(_))
        ));
    }

    /// Replaces the file at `path` with `content` (0600) the way a secret is rotated: a new
    /// file renamed over the old one.
    fn write_token(path: &Path, content: &str) {
        use std::os::unix::fs::PermissionsExt;
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, content).expect("write");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        std::fs::rename(&tmp, path).expect("rename");
    }

    #[test]
    fn token_files_are_read_at_start_and_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (admin_file, api_file) = (dir.path().join("admin"), dir.path().join("api"));
        let (admin, api) = ("admin-from-file-0123456789", "api-from-file-0123456789ab");
        write_token(&admin_file, &format!("{admin}\n"));
        write_token(&api_file, &format!("{api}\n"));
        let raw = RawSettings {
            admin_token_file: Some(admin_file.clone()),
            api_token_file: Some(api_file.clone()),
            token_dir: Some(dir.path().join("store")),
            ..RawSettings::default()
        };
        let v = raw.clone().validate().expect("valid");
        assert!(v.generated.is_empty(), "nothing generated: both are given");
        assert!(
            !crate::tokens::TokenStore::new(&dir.path().join("store"))
                .path()
                .exists(),
            "and no token stored (the store keeps only the webhook signing key)"
        );
        let creds = &v.settings.credentials;
        assert!(creds.is_admin(admin.as_bytes()));
        assert!(creds.is_client(Some(api.as_bytes())));
        assert!(!creds.is_admin(api.as_bytes()));

        // A new token written into the file is accepted after the next check, the old one
        // refused; a file turned unreadable accepts nothing (fail closed).
        let rotated = "admin-rotated-0123456789abc";
        write_token(&admin_file, rotated);
        std::thread::sleep(Duration::from_millis(
            crate::credentials::RELOAD_CHECK_INTERVAL_MS + 100,
        ));
        assert!(creds.is_admin(rotated.as_bytes()));
        assert!(!creds.is_admin(admin.as_bytes()));
        std::fs::remove_file(&admin_file).expect("remove");
        std::thread::sleep(Duration::from_millis(
            crate::credentials::RELOAD_CHECK_INTERVAL_MS + 100,
        ));
        assert!(!creds.is_admin(rotated.as_bytes()));
        assert!(
            creds.is_client(Some(api.as_bytes())),
            "the API file still serves"
        );
    }

    #[test]
    fn a_token_file_is_refused_when_bad_or_given_twice() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("admin");
        write_token(&file, "admin-from-file-0123456789");
        let twice = RawSettings {
            admin_token: Some("admin-from-env-0123456789".into()),
            admin_token_file: Some(file.clone()),
            ..RawSettings::default()
        };
        let e = twice.validate().expect_err("refused");
        assert!(matches!(
            e,
            ConfigError::TwoTokenSources {
                kind: TokenKind::Admin
            }
        ));
        assert!(e.to_string().contains("SALDO_ADMIN_TOKEN_FILE"), "{e}");
        let disabled = RawSettings {
            api_token_file: Some(file.clone()),
            api_auth: ApiAuth::Disabled,
            ..RawSettings::default()
        };
        assert!(matches!(
            disabled.validate(),
            Err(ConfigError::ApiTokenWithAuthDisabled)
        ));
        write_token(&file, "");
        let empty = RawSettings {
            admin_token_file: Some(file),
            ..RawSettings::default()
        };
        let e = empty.validate().expect_err("refused");
        assert!(matches!(e, ConfigError::TokenFile(_)));
        assert!(e.to_string().starts_with("SALDO_ADMIN_TOKEN_FILE: "), "{e}");
    }
}
