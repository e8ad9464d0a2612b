//! The token store: the admin and API bearer tokens, persisted across restarts as SHA-256
//! digests in `<data dir>/tokens.json` (mode 0600), so the secret itself is never on disk and is
//! shown only once, when it is generated (first start or `saldo token rotate`).
//!
//! Why digests: a copy of the file (a backup, a support bundle) does not let anyone in. Why the
//! checks on read: a token file another user could write would let them choose the tokens, one
//! they could read would leak which tokens exist; like ssh with its keys, the store refuses a
//! file that is not owned by the current user or is accessible to group or others.
//!
//! A token may also be given as a file of its own (`--admin-token-file`, [`read_token_file`]):
//! one line holding the token, under the same rules (owned by the current user, not accessible
//! to group or others), so it never appears in `ps` or in the environment.
//!
//! Writes are atomic (a temp file created 0600 with O_EXCL in the same directory, fsynced, then
//! renamed over the old file, then the directory fsynced) and serialised by an exclusive `flock`
//! on `tokens.lock`, so a rotation racing a first start cannot lose either write, and a reader
//! (the running service, once a second) sees the old file or the new one, never half of one.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use rand::Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// A token refused at start: too short or long, or not printable ASCII.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}: {reason}")]
pub struct TokenError {
    pub name: &'static str,
    pub reason: String,
}

/// Shortest and longest accepted token.
pub const MIN_TOKEN_LEN: usize = 16;
pub const MAX_TOKEN_LEN: usize = 256;

/// A secret bearer token: printable ASCII, [`MIN_TOKEN_LEN`]..=[`MAX_TOKEN_LEN`] bytes.
/// Its `Debug` never prints it.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    pub fn new(name: &'static str, raw: String) -> Result<Self, TokenError> {
        if !(MIN_TOKEN_LEN..=MAX_TOKEN_LEN).contains(&raw.len()) {
            return Err(TokenError {
                name,
                reason: format!("must be {MIN_TOKEN_LEN}..={MAX_TOKEN_LEN} characters"),
            });
        }
        if !raw.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError {
                name,
                reason: "must be printable ASCII without spaces".into(),
            });
        }
        Ok(Token(raw))
    }

    /// A token the store generated (always valid: 64 hex characters).
    pub(crate) fn generated(hex: String) -> Self {
        debug_assert!((MIN_TOKEN_LEN..=MAX_TOKEN_LEN).contains(&hex.len()));
        Token(hex)
    }

    /// The secret itself, to print once or to send.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn digest(&self) -> TokenDigest {
        TokenDigest::of(self.0.as_bytes())
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(..)")
    }
}

/// Equality whose time depends only on the lengths, not on where the bytes differ.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // black_box keeps the optimiser from turning the fold into an early-exit comparison.
    std::hint::black_box(diff) == 0
}

/// The file, inside the data directory.
pub const TOKENS_FILE: &str = "tokens.json";
/// The lock file that serialises writers.
pub const LOCK_FILE: &str = "tokens.lock";
/// A token file larger than this is refused unread (it holds two small entries).
pub const MAX_TOKENS_FILE_BYTES: u64 = 64 * 1024;
/// Bytes of randomness in a generated token (printed as hex: 64 characters, 256 bits).
pub const GENERATED_TOKEN_BYTES: usize = 32;
/// Mode of the token file and of the directory the store creates.
pub const FILE_MODE: u32 = 0o600;
pub const DIR_MODE: u32 = 0o700;
/// Format version written in the file; other versions are refused, not guessed at.
const FORMAT_VERSION: u32 = 1;

/// Which token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenKind {
    /// Operator routes (stocking, accounts, deposits, audit…), and every other route too.
    Admin,
    /// Every non-admin `/v1` route (reservations, orders, transfers, reads).
    Api,
}

impl TokenKind {
    pub const ALL: [TokenKind; 2] = [TokenKind::Admin, TokenKind::Api];

    pub fn as_str(self) -> &'static str {
        match self {
            TokenKind::Admin => "admin",
            TokenKind::Api => "api",
        }
    }

    pub fn parse(s: &str) -> Option<TokenKind> {
        TokenKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The environment variable that overrides the stored token.
    pub fn env_var(self) -> &'static str {
        match self {
            TokenKind::Admin => "SALDO_ADMIN_TOKEN",
            TokenKind::Api => "SALDO_API_TOKEN",
        }
    }

    /// The environment variable naming a file that holds the token (overrides the stored one).
    pub fn file_env_var(self) -> &'static str {
        match self {
            TokenKind::Admin => "SALDO_ADMIN_TOKEN_FILE",
            TokenKind::Api => "SALDO_API_TOKEN_FILE",
        }
    }
}

impl fmt::Display for TokenKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The SHA-256 digest of a token. Comparing digests in constant time makes the comparison's
/// timing independent of the secret, and of the presented guess's length too.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TokenDigest([u8; 32]);

impl TokenDigest {
    pub fn of(token: &[u8]) -> TokenDigest {
        TokenDigest(Sha256::digest(token).into())
    }

    /// True when `presented` hashes to this digest.
    pub fn matches(&self, presented: &[u8]) -> bool {
        constant_time_eq(&self.0, &TokenDigest::of(presented).0)
    }

    fn to_hex(self) -> String {
        hex(&self.0)
    }

    fn from_hex(s: &str) -> Option<TokenDigest> {
        if s.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(TokenDigest(out))
    }
}

impl fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenDigest(..)")
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A new random token: [`GENERATED_TOKEN_BYTES`] bytes as lowercase hex.
pub fn generate() -> Token {
    let bytes: [u8; GENERATED_TOKEN_BYTES] = rand::rng().random();
    // 64 hex characters always satisfy Token's rules.
    Token::generated(hex(&bytes))
}

/// One stored token: its digest and when it was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredToken {
    pub digest: TokenDigest,
    pub created_at: DateTime<Utc>,
}

/// What the file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stored {
    pub tokens: BTreeMap<TokenKind, StoredToken>,
}

impl Stored {
    pub fn get(&self, kind: TokenKind) -> Option<&StoredToken> {
        self.tokens.get(&kind)
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFormat {
    version: u32,
    tokens: BTreeMap<TokenKind, FileEntry>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    /// Lowercase hex SHA-256 of the token.
    sha256: String,
    created_at: DateTime<Utc>,
}

/// Why the store could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} has mode {mode:o}: a token file must not be accessible to group or others \
         (chmod 600 it after checking nobody changed it)"
    )]
    Insecure { path: PathBuf, mode: u32 },
    #[error("{path} is owned by uid {owner}, not by this user (uid {me}): refusing to trust it")]
    NotOwner { path: PathBuf, owner: u32, me: u32 },
    #[error("{path} is not a regular file")]
    NotAFile { path: PathBuf },
    #[error("{path} is larger than {MAX_TOKENS_FILE_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("{path} is not a token file this version understands: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Identity of one version of the file: a rename gives a new inode, so a rotation is seen
/// even when it lands within the file system's mtime granularity; the change time and mode
/// catch a chmod or chown (a file turned insecure must stop being trusted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mode: u32,
    uid: u32,
    modified: Option<SystemTime>,
    changed_s: i64,
    changed_ns: i64,
}

impl FileStamp {
    fn of(m: &fs::Metadata) -> FileStamp {
        FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mode: m.mode(),
            uid: m.uid(),
            modified: m.modified().ok(),
            changed_s: m.ctime(),
            changed_ns: m.ctime_nsec(),
        }
    }

    /// The stamp of the file `path` leads to (symlinks followed: a secret mounted by an
    /// orchestrator is a symlink swapped on update), `None` when it cannot be read.
    pub fn of_path(path: &Path) -> Option<FileStamp> {
        fs::metadata(path).ok().map(|m| FileStamp::of(&m))
    }
}

/// Largest token file read: a token of [`MAX_TOKEN_LEN`] and a CR LF.
pub const MAX_TOKEN_FILE_BYTES: u64 = MAX_TOKEN_LEN as u64 + 2;

/// A token file that cannot be used; `name` is how the user gave it (flag or variable).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}: {reason}")]
pub struct TokenFileError {
    pub name: &'static str,
    pub reason: String,
}

/// The token in the file at `path` (`name`: the flag or variable that named it, for errors).
/// The file follows the token store's rules (a regular file, owned by this user, not
/// accessible to group or others); it holds the token and at most one trailing newline.
/// Symlinks are followed and the file they lead to is checked.
pub fn read_token_file(name: &'static str, path: &Path) -> Result<Token, TokenFileError> {
    let refuse = |reason: String| TokenFileError {
        name,
        reason: format!("{}: {reason}", path.display()),
    };
    let file = File::open(path).map_err(|e| refuse(format!("cannot open it: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| refuse(format!("cannot read it: {e}")))?;
    // Its messages name the path already.
    check_private(path, &meta).map_err(|e| TokenFileError {
        name,
        reason: e.to_string(),
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_TOKEN_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refuse(format!("cannot read it: {e}")))?;
    if bytes.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(refuse(format!(
            "longer than a token ({MAX_TOKEN_LEN} characters and a newline at most)"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| refuse("not text".into()))?;
    let token = text
        .strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(&text);
    if token.is_empty() {
        return Err(refuse("empty: write the token into it".into()));
    }
    Token::new(name, token.to_owned()).map_err(|e| refuse(e.reason))
}

/// The token store of one data directory.
#[derive(Debug, Clone)]
pub struct TokenStore {
    dir: PathBuf,
}

impl TokenStore {
    /// The store in `dir` (created 0700 on the first write if missing; an existing directory's
    /// owner and mode are never changed).
    pub fn new(dir: &Path) -> TokenStore {
        TokenStore {
            dir: dir.to_owned(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<dir>/tokens.json`.
    pub fn path(&self) -> PathBuf {
        self.dir.join(TOKENS_FILE)
    }

    /// The current file's stamp, `None` when there is no file.
    pub fn stamp(&self) -> Result<Option<FileStamp>, StoreError> {
        let path = self.path();
        match fs::symlink_metadata(&path) {
            Ok(m) => Ok(Some(FileStamp::of(&m))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// What the file holds; empty when there is no file yet.
    pub fn read(&self) -> Result<Stored, StoreError> {
        let path = self.path();
        // O_NOFOLLOW: a symlink planted in place of the file is refused, not followed.
        let mut file = match OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Stored::default()),
            Err(e) => return Err(io(&path)(e)),
        };
        let meta = file.metadata().map_err(io(&path))?;
        check_private(&path, &meta)?;
        if meta.len() > MAX_TOKENS_FILE_BYTES {
            return Err(StoreError::TooLarge { path });
        }
        let mut text = String::new();
        Read::by_ref(&mut file)
            .take(MAX_TOKENS_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(io(&path))?;
        parse(&path, &text)
    }

    /// The stored digest of `kind`, generating, storing and returning a new token when there is
    /// none (the caller prints it once: it cannot be recovered from the file).
    pub fn ensure(&self, kind: TokenKind) -> Result<(TokenDigest, Option<Token>), StoreError> {
        let _lock = self.lock()?;
        let mut stored = self.read()?;
        if let Some(t) = stored.get(kind) {
            return Ok((t.digest, None));
        }
        let token = generate();
        let digest = TokenDigest::of(token.expose().as_bytes());
        stored.tokens.insert(
            kind,
            StoredToken {
                digest,
                created_at: Utc::now(),
            },
        );
        self.write(&stored)?;
        Ok((digest, Some(token)))
    }

    /// Replaces `kind` with a new token and returns it (shown once). A running service stops
    /// accepting the old one within a second ([`crate::credentials::Credentials`]).
    pub fn rotate(&self, kind: TokenKind) -> Result<Token, StoreError> {
        let _lock = self.lock()?;
        let mut stored = self.read()?;
        let token = generate();
        stored.tokens.insert(
            kind,
            StoredToken {
                digest: TokenDigest::of(token.expose().as_bytes()),
                created_at: Utc::now(),
            },
        );
        self.write(&stored)?;
        Ok(token)
    }

    fn ensure_dir(&self) -> Result<(), StoreError> {
        match fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&self.dir)
        {
            Ok(()) => Ok(()),
            Err(e) => Err(io(&self.dir)(e)),
        }
    }

    /// An exclusive lock held until the returned value drops.
    fn lock(&self) -> Result<nix::fcntl::Flock<File>, StoreError> {
        self.ensure_dir()?;
        let path = self.dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(FILE_MODE)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&path)
            .map_err(io(&path))?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, errno)| io(&path)(std::io::Error::from(errno)))
    }

    /// Atomic replace: temp file (O_EXCL, 0600) → write → fsync → rename → fsync directory.
    fn write(&self, stored: &Stored) -> Result<(), StoreError> {
        let path = self.path();
        let format = FileFormat {
            version: FORMAT_VERSION,
            tokens: stored
                .tokens
                .iter()
                .map(|(k, t)| {
                    (
                        *k,
                        FileEntry {
                            sha256: t.digest.to_hex(),
                            created_at: t.created_at,
                        },
                    )
                })
                .collect(),
        };
        let mut bytes = serde_json::to_vec_pretty(&format).map_err(|e| StoreError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        bytes.push(b'\n');
        let suffix: u64 = rand::rng().random();
        let tmp = self.dir.join(format!(
            ".{TOKENS_FILE}.{}.{suffix:016x}.tmp",
            std::process::id()
        ));
        let result = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(FILE_MODE)
                .open(&tmp)
                .map_err(io(&tmp))?;
            file.write_all(&bytes).map_err(io(&tmp))?;
            file.sync_all().map_err(io(&tmp))?;
            fs::rename(&tmp, &path).map_err(io(&path))?;
            File::open(&self.dir)
                .and_then(|d| d.sync_all())
                .map_err(io(&self.dir))
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }
}

/// Owned by us and not accessible to group or others.
fn check_private(path: &Path, meta: &fs::Metadata) -> Result<(), StoreError> {
    if !meta.is_file() {
        return Err(StoreError::NotAFile {
            path: path.to_owned(),
        });
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(StoreError::NotOwner {
            path: path.to_owned(),
            owner: meta.uid(),
            me,
        });
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(StoreError::Insecure {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

fn parse(path: &Path, text: &str) -> Result<Stored, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        path: path.to_owned(),
        reason,
    };
    let format: FileFormat = serde_json::from_str(text).map_err(|e| corrupt(e.to_string()))?;
    if format.version != FORMAT_VERSION {
        return Err(corrupt(format!("version {}", format.version)));
    }
    let mut stored = Stored::default();
    for (kind, entry) in format.tokens {
        let digest = TokenDigest::from_hex(&entry.sha256)
            .ok_or_else(|| corrupt(format!("the {kind} digest is not 64 hex characters")))?;
        stored.tokens.insert(
            kind,
            StoredToken {
                digest,
                created_at: entry.created_at,
            },
        );
    }
    Ok(stored)
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

    #[test]
    fn digests_round_trip_and_match_only_their_token() {
        let d = TokenDigest::of(b"secret-token-0123456789");
        assert_eq!(TokenDigest::from_hex(&d.to_hex()), Some(d));
        assert!(d.matches(b"secret-token-0123456789"));
        assert!(!d.matches(b"secret-token-012345678"));
        assert!(!d.matches(b""));
        assert_eq!(TokenDigest::from_hex("zz"), None);
        assert_eq!(TokenDigest::from_hex(&"g".repeat(64)), None);
        assert!(!format!("{d:?}").contains(&d.to_hex()));
    }

    #[test]
    fn generated_tokens_are_long_random_hex() {
        let (a, b) = (generate(), generate());
        assert_eq!(a.expose().len(), GENERATED_TOKEN_BYTES * 2);
        assert!(a.expose().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.expose(), b.expose());
    }

    #[test]
    fn kinds_round_trip() {
        for k in TokenKind::ALL {
            assert_eq!(TokenKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(TokenKind::parse("root"), None);
    }

    /// Writes `content` to a new file of `mode` in `dir`.
    fn token_file(dir: &Path, name: &str, content: &[u8], mode: u32) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, content).expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod");
        path
    }

    #[test]
    fn a_token_file_holds_one_token_and_at_most_one_newline() {
        let dir = tempfile::tempdir().expect("tempdir");
        let token = "file-token-0123456789abcdef";
        for content in [
            token.to_owned(),
            format!("{token}\n"),
            format!("{token}\r\n"),
        ] {
            let path = token_file(dir.path(), "t", content.as_bytes(), 0o600);
            let read = read_token_file("--admin-token-file", &path).expect("read");
            assert_eq!(read.expose(), token, "{content:?}");
        }
        // Followed through a symlink (how orchestrators mount secrets).
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("t"), &link).expect("symlink");
        assert!(read_token_file("x", &link).is_ok());
        for (content, says) in [
            (String::new(), "empty"),
            ("\n".to_owned(), "empty"),
            (format!("{token}\n\n"), "printable"),
            (format!("{token}\nsecond-line"), "printable"),
            ("short\n".to_owned(), "characters"),
            ("x".repeat(MAX_TOKEN_LEN + 3), "longer than a token"),
        ] {
            let path = token_file(dir.path(), "bad", content.as_bytes(), 0o600);
            let e = read_token_file("SALDO_API_TOKEN_FILE", &path).expect_err("refused");
            let text = e.to_string();
            assert!(text.starts_with("SALDO_API_TOKEN_FILE: "), "{text}");
            assert!(text.contains(says), "{content:?}: {text}");
            assert!(!text.contains(token), "the message shows the token: {text}");
        }
        let missing = read_token_file("x", &dir.path().join("missing")).expect_err("refused");
        assert!(missing.to_string().contains("cannot open"), "{missing}");
        assert!(read_token_file("x", dir.path()).is_err(), "a directory");
    }

    #[test]
    fn a_token_file_others_could_read_or_that_is_not_ours_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let token = b"file-token-0123456789abcdef\n";
        for mode in [0o640, 0o604, 0o644] {
            let path = token_file(dir.path(), "t", token, mode);
            let e = read_token_file("--api-token-file", &path).expect_err("refused");
            assert!(e.to_string().contains("group or others"), "{mode:o}: {e}");
        }
        assert!(read_token_file("x", &token_file(dir.path(), "t", token, 0o400)).is_ok());
        if nix::unistd::geteuid().is_root() {
            let path = token_file(dir.path(), "theirs", token, 0o600);
            std::os::unix::fs::chown(&path, Some(65534), Some(65534)).expect("chown");
            let e = read_token_file("x", &path).expect_err("refused");
            assert!(e.to_string().contains("not by this user"), "{e}");
        }
    }
}
