//! Which tokens are accepted, as SHA-256 digests, never the secrets: a token given by the
//! environment or a flag is hashed at start; a stored one ([`crate::tokens`]) is re-read when
//! `tokens.json` changes, and a token file (`--admin-token-file`) when that file changes, both
//! checked at most once per [`RELOAD_CHECK_INTERVAL_MS`] on the request path, so `saldo token
//! rotate` (or a new token written into the file) takes effect in a running service without a
//! restart. A followed file that turns missing, unreadable or insecure accepts nothing until it
//! is fixed (fail closed). Digests are compared in constant time. [`crate::auth`]'s extractors
//! ask this module.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::tokens::{read_token_file, FileStamp, StoreError, TokenDigest, TokenKind, TokenStore};

/// How often, at most, a request checks whether `tokens.json` or a token file changed.
pub const RELOAD_CHECK_INTERVAL_MS: u64 = 1_000;

/// Where one kind's accepted digest comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Given at start (environment or flag), never persisted, never reloaded.
    Fixed(TokenDigest),
    /// `tokens.json`, followed while the service runs.
    Stored,
    /// A token file, followed while the service runs; `digest` is what it held at start and
    /// `name` the flag or variable that named it (for the log).
    File {
        name: &'static str,
        path: PathBuf,
        digest: TokenDigest,
    },
}

/// Every accepted token, as digests. Built once by [`crate::config::RawSettings::validate`].
pub struct Credentials {
    admin: Source,
    /// `None`: API authentication disabled (the insecure opt-out).
    api: Option<Source>,
    /// The store, when a kind is [`Source::Stored`].
    store: Option<TokenStore>,
    /// Whether anything is followed (a store or a file), and what was seen last.
    checked: Option<Mutex<Checked>>,
    current: RwLock<Current>,
}

/// The digests in force now. A followed kind whose file is unreadable has none: it fails closed.
#[derive(Debug, Clone, Copy)]
struct Current {
    admin: Option<TokenDigest>,
    api: Option<TokenDigest>,
}

/// When the followed files were last looked at, and which version of each the digests came
/// from.
struct Checked {
    at: Instant,
    store: Option<FileStamp>,
    admin_file: Option<FileStamp>,
    api_file: Option<FileStamp>,
}

impl Credentials {
    /// Credentials whose kinds are all [`Source::Fixed`] or disabled (no file to follow).
    pub fn fixed(admin: TokenDigest, api: Option<TokenDigest>) -> Credentials {
        Credentials {
            admin: Source::Fixed(admin),
            api: api.map(Source::Fixed),
            store: None,
            checked: None,
            current: RwLock::new(Current {
                admin: Some(admin),
                api,
            }),
        }
    }

    /// Credentials that read the [`Source::Stored`] kinds from `dir`'s token store now (the
    /// caller made sure they exist) and follow the store and the token files afterwards.
    pub fn following(
        admin: Source,
        api: Option<Source>,
        dir: Option<&Path>,
    ) -> Result<Credentials, StoreError> {
        let stored_kind = |s: Option<&Source>| matches!(s, Some(Source::Stored));
        let store = (stored_kind(Some(&admin)) || stored_kind(api.as_ref()))
            .then_some(dir)
            .flatten()
            .map(TokenStore::new);
        let (stamp, stored) = match &store {
            Some(store) => (store.stamp()?, store.read()?),
            None => (None, Default::default()),
        };
        let pick = |source: Option<&Source>, kind| match source {
            Some(Source::Fixed(d)) | Some(Source::File { digest: d, .. }) => Some(*d),
            Some(Source::Stored) => stored.get(kind).map(|t| t.digest),
            None => None,
        };
        let current = Current {
            admin: pick(Some(&admin), TokenKind::Admin),
            api: pick(api.as_ref(), TokenKind::Api),
        };
        let checked = Checked {
            at: Instant::now(),
            store: stamp,
            admin_file: file_stamp(Some(&admin)),
            api_file: file_stamp(api.as_ref()),
        };
        Ok(Credentials {
            admin,
            api,
            store,
            checked: Some(Mutex::new(checked)),
            current: RwLock::new(current),
        })
    }

    /// True unless API authentication was disabled.
    pub fn api_required(&self) -> bool {
        self.api.is_some()
    }

    /// Where the admin and API digests come from (for the start-up log).
    pub fn sources(&self) -> (&Source, Option<&Source>) {
        (&self.admin, self.api.as_ref())
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

    /// Re-reads the stored digests and the token files that changed, at most once per
    /// interval. One request does the check; the others meanwhile use the digests in force
    /// (`try_lock`).
    fn refresh(&self) {
        let Some(checked) = &self.checked else { return };
        let Ok(mut guard) = checked.try_lock() else {
            return;
        };
        let checked = &mut *guard;
        if checked.at.elapsed() < Duration::from_millis(RELOAD_CHECK_INTERVAL_MS) {
            return;
        }
        checked.at = Instant::now();
        let mut fresh = self.current();
        let mut changed = false;
        if let Some(store) = &self.store {
            changed |= self.refresh_store(store, &mut checked.store, &mut fresh);
        }
        for (kind, source, seen) in [
            (TokenKind::Admin, Some(&self.admin), &mut checked.admin_file),
            (TokenKind::Api, self.api.as_ref(), &mut checked.api_file),
        ] {
            let Some(Source::File { name, path, .. }) = source else {
                continue;
            };
            let stamp = FileStamp::of_path(path);
            if stamp == *seen {
                continue;
            }
            *seen = stamp;
            changed = true;
            let digest = match read_token_file(name, path) {
                Ok(token) => {
                    tracing::info!(file = %path.display(), %kind, "token file changed: reloaded");
                    Some(token.digest())
                }
                Err(e) => {
                    tracing::error!(error = %e, %kind, "token file: refusing this token until fixed");
                    None
                }
            };
            match kind {
                TokenKind::Admin => fresh.admin = digest,
                TokenKind::Api => fresh.api = digest,
            }
        }
        if changed {
            match self.current.write() {
                Ok(mut c) => *c = fresh,
                Err(poisoned) => *poisoned.into_inner() = fresh,
            }
        }
    }

    /// The stored kinds' digests into `fresh` when `tokens.json` changed since `seen`; true
    /// when it did.
    fn refresh_store(
        &self,
        store: &TokenStore,
        seen: &mut Option<FileStamp>,
        fresh: &mut Current,
    ) -> bool {
        let stamp = match store.stamp() {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "token store: cannot stat the token file");
                return false;
            }
        };
        if stamp == *seen {
            return false;
        }
        *seen = stamp;
        // Fail closed: a stored kind whose file is missing, unreadable or insecure accepts
        // nothing until the file is fixed (`saldo token rotate`), rather than a stale token.
        // One line per change, saying what it did: reloaded, or refused (nothing was reloaded).
        let stored = match store.read() {
            Ok(s) => {
                tracing::info!(
                    file = %store.path().display(),
                    "token store changed: stored tokens reloaded"
                );
                s
            }
            Err(e) => {
                tracing::error!(error = %e, "token store: refusing stored tokens until fixed");
                Default::default()
            }
        };
        if matches!(self.admin, Source::Stored) {
            fresh.admin = stored.get(TokenKind::Admin).map(|t| t.digest);
        }
        if matches!(self.api, Some(Source::Stored)) {
            fresh.api = stored.get(TokenKind::Api).map(|t| t.digest);
        }
        true
    }
}

/// The stamp of a [`Source::File`]'s file, `None` for other sources.
fn file_stamp(source: Option<&Source>) -> Option<FileStamp> {
    match source {
        Some(Source::File { path, .. }) => FileStamp::of_path(path),
        _ => None,
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("admin", &self.admin)
            .field("api", &self.api)
            .field("store", &self.store.as_ref().map(TokenStore::path))
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
            Credentials::following(Source::Stored, None, Some(dir.path())).expect("credentials");
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
