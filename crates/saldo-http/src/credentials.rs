//! Which tokens are accepted, as SHA-256 digests, never the secrets: a token given by the
//! environment is hashed at start; a stored one ([`crate::tokens`]) is re-read when
//! `tokens.json` changes, checked at most once per [`RELOAD_CHECK_INTERVAL_MS`] on the request
//! path, so `saldo token rotate` takes effect in a running service without a restart. Digests
//! are compared in constant time. [`crate::auth`]'s extractors ask this module.

use std::fmt;
use std::path::Path;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::tokens::{FileStamp, StoreError, TokenDigest, TokenKind, TokenStore};

/// How often, at most, a request checks whether `tokens.json` changed.
pub const RELOAD_CHECK_INTERVAL_MS: u64 = 1_000;

/// Where one kind's accepted digest comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Given at start (environment or flag), never persisted, never reloaded.
    Fixed(TokenDigest),
    /// `tokens.json`, followed while the service runs.
    Stored,
}

/// Every accepted token, as digests. Built once by [`crate::config::RawSettings::validate`].
pub struct Credentials {
    admin: Source,
    /// `None`: API authentication disabled (the insecure opt-out).
    api: Option<Source>,
    store: Option<Reload>,
    current: RwLock<Current>,
}

/// The digests in force now. A stored kind whose file is unreadable has none: it fails closed.
#[derive(Debug, Clone, Copy)]
struct Current {
    admin: Option<TokenDigest>,
    api: Option<TokenDigest>,
}

struct Reload {
    store: TokenStore,
    /// When the file was last looked at, and which version of it the digests came from.
    checked: Mutex<(Instant, Option<FileStamp>)>,
}

impl Credentials {
    /// Credentials whose kinds are all [`Source::Fixed`] or disabled (no file to follow).
    pub fn fixed(admin: TokenDigest, api: Option<TokenDigest>) -> Credentials {
        Credentials {
            admin: Source::Fixed(admin),
            api: api.map(Source::Fixed),
            store: None,
            current: RwLock::new(Current {
                admin: Some(admin),
                api,
            }),
        }
    }

    /// Credentials that read the [`Source::Stored`] kinds from `dir`'s token store now (the
    /// caller made sure they exist) and follow the file afterwards.
    pub fn with_store(
        admin: Source,
        api: Option<Source>,
        dir: &Path,
    ) -> Result<Credentials, StoreError> {
        let store = TokenStore::new(dir);
        let stamp = store.stamp()?;
        let stored = store.read()?;
        let pick = |source: Option<Source>, kind| match source {
            Some(Source::Fixed(d)) => Some(d),
            Some(Source::Stored) => stored.get(kind).map(|t| t.digest),
            None => None,
        };
        let current = Current {
            admin: pick(Some(admin), TokenKind::Admin),
            api: pick(api, TokenKind::Api),
        };
        Ok(Credentials {
            admin,
            api,
            store: Some(Reload {
                store,
                checked: Mutex::new((Instant::now(), stamp)),
            }),
            current: RwLock::new(current),
        })
    }

    /// True unless API authentication was disabled.
    pub fn api_required(&self) -> bool {
        self.api.is_some()
    }

    /// Where the admin and API digests come from (for the start-up log).
    pub fn sources(&self) -> (Source, Option<Source>) {
        (self.admin, self.api)
    }

    /// True for the admin token.
    pub fn is_admin(&self, presented: &[u8]) -> bool {
        self.refresh();
        let current = self.current();
        current.admin.is_some_and(|d| d.matches(presented))
    }

    /// True for the API token or the admin token; always true when API auth is disabled.
    pub fn is_client(&self, presented: Option<&[u8]>) -> bool {
        if self.api.is_none() {
            return true;
        }
        let Some(presented) = presented else {
            return false;
        };
        self.refresh();
        let current = self.current();
        // Both compared, so timing does not tell which one matched.
        let api = current.api.is_some_and(|d| d.matches(presented));
        let admin = current.admin.is_some_and(|d| d.matches(presented));
        api | admin
    }

    fn current(&self) -> Current {
        match self.current.read() {
            Ok(c) => *c,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }

    /// Re-reads the stored digests when the file changed, at most once per interval. One
    /// request does the check; the others meanwhile use the digests in force (`try_lock`).
    fn refresh(&self) {
        let Some(reload) = &self.store else { return };
        let Ok(mut checked) = reload.checked.try_lock() else {
            return;
        };
        if checked.0.elapsed() < Duration::from_millis(RELOAD_CHECK_INTERVAL_MS) {
            return;
        }
        checked.0 = Instant::now();
        let stamp = match reload.store.stamp() {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "token store: cannot stat the token file");
                return;
            }
        };
        if stamp == checked.1 {
            return;
        }
        checked.1 = stamp;
        // Fail closed: a stored kind whose file is missing, unreadable or insecure accepts
        // nothing until the file is fixed (`saldo token rotate`), rather than a stale token.
        let (stored, refused) = match reload.store.read() {
            Ok(stored) => (stored, None),
            Err(e) => (Default::default(), Some(e)),
        };
        let fresh = |source: Option<Source>, kind, old: Option<TokenDigest>| match source {
            Some(Source::Stored) => stored.get(kind).map(|t| t.digest),
            _ => old,
        };
        let mut current = match self.current.write() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        current.admin = fresh(Some(self.admin), TokenKind::Admin, current.admin);
        current.api = fresh(self.api, TokenKind::Api, current.api);
        // One line per change, saying what it did: reloaded, or refused (nothing was reloaded).
        match refused {
            None => tracing::info!(
                file = %reload.store.path().display(),
                "token store changed: stored tokens reloaded"
            ),
            Some(e) => {
                tracing::error!(error = %e, "token store: refusing stored tokens until fixed")
            }
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("admin", &self.admin)
            .field("api", &self.api)
            .field("store", &self.store.as_ref().map(|r| r.store.path()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// What a subscriber wrote, line by line.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        /// The lines written since the last call.
        fn take(&self) -> Vec<String> {
            let bytes = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
            String::from_utf8_lossy(&bytes)
                .lines()
                .map(str::to_owned)
                .collect()
        }
    }

    /// Lets the next request look at the file again.
    fn after_the_check_interval() {
        std::thread::sleep(Duration::from_millis(RELOAD_CHECK_INTERVAL_MS + 100));
    }

    /// One change of the file logs one line saying what happened: a file turned insecure is
    /// refused (and nothing says "reloaded"), the file fixed again is reloaded.
    #[test]
    fn a_changed_token_file_logs_what_happened_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = TokenStore::new(dir.path());
        let (_, admin) = store.ensure(TokenKind::Admin).expect("admin token");
        let admin = admin.expect("generated now");
        let credentials =
            Credentials::with_store(Source::Stored, None, dir.path()).expect("credentials");
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let file = store.path();

        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        after_the_check_interval();
        assert!(
            !credentials.is_admin(admin.expose().as_bytes()),
            "fails closed"
        );
        let lines = captured.take();
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(lines[0].contains("refusing"), "{lines:#?}");

        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        after_the_check_interval();
        assert!(
            credentials.is_admin(admin.expose().as_bytes()),
            "trusted again"
        );
        let lines = captured.take();
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(lines[0].contains("reloaded"), "{lines:#?}");
    }
}
