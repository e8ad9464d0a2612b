//! The webhook key and the secrets derived from it. The database holds no signing secret: each
//! subscription's is HMAC-SHA256(key, subscription id), shown once when the subscription is
//! created and recomputed by the delivery worker for every request. The key is
//! [`KEY_BYTES`] random bytes in `webhook.key` beside the token files (created 0600 with
//! O_EXCL and linked into place, so two services starting at once agree on one key; refused
//! when others could read it or it is not ours), or, without a token directory, generated for
//! this process only. Never logged: its `Debug` says nothing of it.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hmac::{KeyInit, Mac};
use rand::Rng;
use sha2::Sha256;

/// Bytes of the key.
pub const KEY_BYTES: usize = 32;
/// The key file's name, in the token directory.
pub const KEY_FILE: &str = "webhook.key";
/// Mode of the key file and of its directory when created here.
const FILE_MODE: u32 = 0o600;
const DIR_MODE: u32 = 0o700;

type HmacSha256 = hmac::Hmac<Sha256>;

/// What the fingerprint is the HMAC of (never a UUID's text, so never a subscription's secret).
const FINGERPRINT_LABEL: &[u8] = b"saldo webhook key fingerprint v1";

/// Why the key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: must be a file owned by this user with mode 0600 or stricter")]
    Insecure { path: PathBuf },
    #[error("{path}: must hold exactly {KEY_BYTES} bytes")]
    Corrupt { path: PathBuf },
}

/// The service's webhook key.
#[derive(Clone)]
pub struct WebhookKey {
    bytes: [u8; KEY_BYTES],
}

impl fmt::Debug for WebhookKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookKey(<redacted>)")
    }
}

impl WebhookKey {
    /// A key for this process only.
    pub fn generate() -> WebhookKey {
        WebhookKey {
            bytes: rand::rng().random(),
        }
    }

    /// The key in `dir/webhook.key`, created when missing.
    pub fn in_dir(dir: &Path) -> Result<WebhookKey, KeyError> {
        let path = dir.join(KEY_FILE);
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| KeyError::Io { path, source }
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)
            .map_err(io(dir))?;
        match read(&path) {
            Err(KeyError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
            other => return other,
        }
        let key = WebhookKey::generate();
        let suffix: u64 = rand::rng().random();
        let tmp = dir.join(format!(
            ".{KEY_FILE}.{}.{suffix:016x}.tmp",
            std::process::id()
        ));
        let written = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(FILE_MODE)
                .open(&tmp)?;
            file.write_all(&key.bytes)?;
            file.sync_all()?;
            // A link never replaces: a key another service created first wins, and is read.
            fs::hard_link(&tmp, &path)
        })();
        let _ = fs::remove_file(&tmp);
        match written {
            Ok(()) => {
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(io(dir))?;
                Ok(key)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read(&path),
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// The key's fingerprint, recorded in the database so that every service on it signs with
    /// the same key: hex of HMAC-SHA256(key, a fixed label). Reveals nothing of the key.
    pub fn fingerprint(&self) -> String {
        let mut mac = HmacSha256::new_from_slice(&self.bytes).expect("HMAC takes any key length");
        mac.update(FINGERPRINT_LABEL);
        hex::encode(mac.finalize().into_bytes())
    }

    /// A subscription's signing secret: hex of HMAC-SHA256(key, id).
    pub fn secret(&self, subscription: &uuid::Uuid) -> String {
        let mut mac = HmacSha256::new_from_slice(&self.bytes).expect("HMAC takes any key length");
        mac.update(subscription.to_string().as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }
}

/// Reads the key file: ours, 0600 or stricter, exactly [`KEY_BYTES`] bytes, not a symlink.
fn read(path: &Path) -> Result<WebhookKey, KeyError> {
    let io = |source| KeyError::Io {
        path: path.to_owned(),
        source,
    };
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    let mode = meta.permissions().mode() & 0o777;
    if !meta.is_file() || meta.uid() != nix::unistd::geteuid().as_raw() || mode & 0o077 != 0 {
        return Err(KeyError::Insecure {
            path: path.to_owned(),
        });
    }
    let mut bytes = Vec::with_capacity(KEY_BYTES + 1);
    Read::by_ref(&mut file)
        .take(KEY_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    let bytes: [u8; KEY_BYTES] = bytes.try_into().map_err(|_| KeyError::Corrupt {
        path: path.to_owned(),
    })?;
    Ok(WebhookKey { bytes })
}

/// The `Saldo-Signature` header of a request body sent at `t` (unix seconds) with `secret`:
/// `t=<t>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
pub fn signature(secret: &str, t: i64, body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_file_is_created_private_once_and_read_back() {
        let dir = tempfile::tempdir().expect("dir");
        let first = WebhookKey::in_dir(dir.path()).expect("create");
        let path = dir.path().join(KEY_FILE);
        let mode = fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = WebhookKey::in_dir(dir.path()).expect("read");
        let id = uuid::Uuid::new_v4();
        assert_eq!(first.secret(&id), again.secret(&id));
        assert_ne!(first.secret(&id), first.secret(&uuid::Uuid::new_v4()));
        assert_eq!(format!("{first:?}"), "WebhookKey(<redacted>)");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(matches!(
            WebhookKey::in_dir(dir.path()),
            Err(KeyError::Insecure { .. })
        ));
    }

    #[test]
    fn a_signature_is_the_hmac_of_time_dot_body() {
        // Checked against Python: hmac.new(b"s", b"5.{}", sha256).hexdigest()
        assert_eq!(
            signature("s", 5, b"{}"),
            "t=5,v1=773bda493dbd21f7ba124152afde2ffc93155f8f6599511f49b7bf4641bda33e"
        );
    }
}
