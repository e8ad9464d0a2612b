//! How clients prove who they are: SCRAM-SHA-256 with a generated superuser password.
//!
//! The cluster listens on a Unix socket in a directory only its own user can enter (see
//! `dirs.rs`), and on top of that every connection, socket or TCP, must present the password.
//! The password is generated here, kept in a file of mode 0600 that only the process starting
//! the cluster reads, and never printed or logged ([`redact`] hides it in URLs).
//!
//! A cluster is initialised with `initdb --auth=trust`, but it never runs that way: before the
//! first start the superuser's password is set in single-user mode (no socket, no listener)
//! and `pg_hba.conf` is replaced by ours. The same step upgrades a cluster that an older
//! version initialised with `trust`, and re-keys a cluster whose password file was lost.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;

use crate::binaries::Binaries;
use crate::config::SUPERUSER;
use crate::error::{io, Error};
use crate::process::RunAs;

/// Random bytes in a generated password (hex-encoded: URL-safe, quote-safe, 256 bits).
const PASSWORD_BYTES: usize = 32;
/// Longest password file we read: anything bigger is not ours.
const MAX_PASSWORD_FILE_BYTES: u64 = 1024;
/// What replaces a password in anything shown to a person.
pub const REDACTED: &str = "***";

/// The `pg_hba.conf` of every pg-local cluster. The first line marks it as ours: a cluster
/// whose file differs (e.g. initdb's `trust` file) is re-keyed before it starts.
pub(crate) const HBA: &str = "\
# pg-local: every connection authenticates with SCRAM-SHA-256; nothing is trusted.
# TYPE  DATABASE  USER  ADDRESS       METHOD
local   all       all                 scram-sha-256
host    all       all   127.0.0.1/32  scram-sha-256
host    all       all   ::1/128       scram-sha-256
";

/// A superuser password (never `Debug`-printed).
pub(crate) struct Password(String);

impl Password {
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(REDACTED)
    }
}

/// The password stored in `file`, if there is one; refused if others may read the file.
pub(crate) fn load(file: &Path) -> Result<Option<Password>, Error> {
    let meta = match fs::metadata(file) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(format!("reading {}", file.display()))(e)),
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(Error::Insecure(format!(
            "the password file {} has mode {mode:04o}: others may read it; \
             `chmod 600 {}` and start again",
            file.display(),
            file.display()
        )));
    }
    let mut text = String::new();
    fs::File::open(file)
        .and_then(|f| f.take(MAX_PASSWORD_FILE_BYTES).read_to_string(&mut text))
        .map_err(io(format!("reading {}", file.display())))?;
    let password = text.trim().to_owned();
    if password.is_empty() || !password.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::Insecure(format!(
            "the password file {} does not hold a pg-local password; remove it to \
             generate a new one",
            file.display()
        )));
    }
    Ok(Some(Password(password)))
}

/// Stores `password` in `file`, created exclusively with mode 0600. Called only once the
/// cluster has the password, so a failure in between leaves no file and the next start
/// re-keys again (self-healing) instead of a file the cluster does not match.
pub(crate) fn store(file: &Path, password: &Password) -> Result<(), Error> {
    store_secret(file, &format!("{}\n", password.expose()))
}

/// Writes `text` (a secret) to `file`, created exclusively with mode 0600: never over an
/// existing file, never readable by others even for a moment.
pub(crate) fn store_secret(file: &Path, text: &str) -> Result<(), Error> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .map_err(io(format!("creating {}", file.display())))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io(format!("writing {}", file.display())))
}

/// A new random password.
pub(crate) fn generate() -> Result<Password, Error> {
    let mut bytes = [0u8; PASSWORD_BYTES];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(io("reading /dev/urandom"))?;
    Ok(Password(bytes.iter().map(|b| format!("{b:02x}")).collect()))
}

/// Whether `data_dir` already runs with our `pg_hba.conf`.
pub(crate) fn hba_is_ours(data_dir: &Path) -> bool {
    fs::read_to_string(data_dir.join("pg_hba.conf")).is_ok_and(|text| text == HBA)
}

/// Sets the superuser's password in single-user mode (the cluster must be stopped), then
/// replaces `pg_hba.conf` by [`HBA`]. The password goes through stdin, never the command line.
pub(crate) fn rekey(
    binaries: &Binaries,
    run_as: &RunAs,
    data_dir: &Path,
    password: &Password,
) -> Result<(), Error> {
    let mut cmd = run_as.command(&binaries.postgres());
    cmd.arg("--single")
        .arg("-D")
        .arg(data_dir)
        .args(["-c", "password_encryption=scram-sha-256"])
        .arg("postgres")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(io("starting postgres --single"))?;
    if let Some(mut stdin) = child.stdin.take() {
        // Hex only: nothing in the password needs quoting.
        writeln!(
            stdin,
            "ALTER ROLE {SUPERUSER} PASSWORD '{}';",
            password.expose()
        )
        .map_err(io("writing to postgres --single"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(io("waiting for postgres --single"))?;
    let output = String::from_utf8_lossy(&[out.stdout, out.stderr].concat())
        .replace(password.expose(), REDACTED);
    // Single-user mode reports a failed statement in its output and still exits 0.
    if !out.status.success() || output.contains("ERROR") || output.contains("FATAL") {
        return Err(Error::Rekey(output));
    }
    let hba = data_dir.join("pg_hba.conf");
    // Truncating in place keeps initdb's owner and mode (the server's user, 0600).
    fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&hba)
        .and_then(|mut f| f.write_all(HBA.as_bytes()).and_then(|()| f.sync_all()))
        .map_err(io(format!("writing {}", hba.display())))?;
    Ok(())
}

/// `url` with any password replaced by [`REDACTED`]: `scheme://user:pw@…` and `password=…`.
pub fn redact(url: &str) -> String {
    if let Some(scheme_end) = url.find("://") {
        let rest = &url[scheme_end + 3..];
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                return format!(
                    "{}{}:{REDACTED}{}",
                    &url[..scheme_end + 3],
                    &rest[..colon],
                    &rest[at..]
                );
            }
        }
        // A password can also ride in the query string.
        return redact_pairs(url, '&');
    }
    redact_pairs(url, ' ')
}

fn redact_pairs(s: &str, separator: char) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, part) in s.split(separator).enumerate() {
        if i > 0 {
            out.push(separator);
        }
        let key_at = part.rfind(['?', ' ']).map_or(0, |p| p + 1);
        if part[key_at..].starts_with("password=") {
            out.push_str(&part[..key_at]);
            out.push_str("password=");
            out.push_str(REDACTED);
        } else {
            out.push_str(part);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_passwords_in_every_form() {
        assert_eq!(
            redact("postgresql://postgres:s3cret@%2Ftmp%2Fx:5432/db"),
            "postgresql://postgres:***@%2Ftmp%2Fx:5432/db"
        );
        assert_eq!(
            redact("postgres://u@127.0.0.1:5432/db"),
            "postgres://u@127.0.0.1:5432/db"
        );
        assert_eq!(
            redact("postgres://u@h/db?password=s3cret&sslmode=disable"),
            "postgres://u@h/db?password=***&sslmode=disable"
        );
        assert_eq!(
            redact("host=/tmp user=postgres password=s3cret dbname=x"),
            "host=/tmp user=postgres password=*** dbname=x"
        );
    }

    #[test]
    fn a_generated_password_is_stored_0600_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("pw");
        assert!(load(&file).expect("absent").is_none());
        let first = generate().expect("generate");
        assert_eq!(first.expose().len(), PASSWORD_BYTES * 2);
        store(&file, &first).expect("store");
        let mode = fs::metadata(&file).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let again = load(&file).expect("read").expect("present");
        assert_eq!(again.expose(), first.expose());
        assert_eq!(format!("{again:?}"), REDACTED);
        assert!(store(&file, &first).is_err(), "never overwritten");
    }

    #[test]
    fn a_password_file_others_can_read_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("pw");
        store(&file, &generate().expect("generate")).expect("store");
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).expect("chmod");
        let err = load(&file).expect_err("0644 refused");
        assert!(err.to_string().contains("chmod 600"), "{err}");
    }
}
