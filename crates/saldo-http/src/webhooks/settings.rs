//! The delivery worker's settings, validated by [`crate::config`]: the key, whether private
//! targets are allowed, the backoff and the attempts. A leaf.

use std::time::Duration;

use super::key::WebhookKey;

/// Defaults and bounds of the configurable ones.
pub const DEFAULT_BACKOFF_BASE_MS: u64 = 1_000;
pub const MIN_BACKOFF_BASE_MS: u64 = 1;
pub const MAX_BACKOFF_BASE_MS: u64 = 60_000;
/// The longest wait between two attempts (full jitter draws below it).
pub const BACKOFF_CAP: Duration = Duration::from_secs(300);
pub const DEFAULT_MAX_ATTEMPTS: u32 = 12;
pub const MAX_MAX_ATTEMPTS: u32 = 100;
/// How often the worker looks for due subscriptions.
pub const DEFAULT_POLL_MS: u64 = 1_000;
pub const MIN_POLL_MS: u64 = 10;
pub const MAX_POLL_MS: u64 = 60_000;

/// What the worker and the admin routes need.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    pub key: WebhookKey,
    /// `--webhook-allow-private-targets`: loopback and private addresses allowed (tests, a
    /// receiver on the same network).
    pub allow_private_targets: bool,
    pub backoff_base: Duration,
    pub max_attempts: u32,
    pub poll: Duration,
}

impl WebhookSettings {
    /// Full jitter: a random wait in 0..=min(cap, base × 2^(attempt − 1)).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(30);
        let ceiling = self
            .backoff_base
            .saturating_mul(1u32 << exp)
            .min(BACKOFF_CAP);
        let ms = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(rand::random_range(0..=ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_jittered_below_a_doubling_ceiling_and_the_cap() {
        let s = WebhookSettings {
            key: WebhookKey::generate(),
            allow_private_targets: false,
            backoff_base: Duration::from_secs(1),
            max_attempts: 12,
            poll: Duration::from_secs(1),
        };
        for attempt in 1..=40 {
            let ceiling = Duration::from_secs(1 << (attempt - 1).min(20)).min(BACKOFF_CAP);
            for _ in 0..20 {
                assert!(s.backoff(attempt) <= ceiling, "attempt {attempt}");
            }
        }
    }
}
