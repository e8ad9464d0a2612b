//! Tokens through the real binary: `saldo serve` requires an API token by default, prints each
//! generated token exactly once (stdout, never the log, even at debug level), finds the same
//! tokens after a restart on the same data directory, and a `saldo token rotate` reaches the
//! running service; `--insecure-no-api-token` opens the API routes and says so loudly.
//!
//! Every wait is bounded; the server listens on 127.0.0.1 only and is killed by its pid.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use saldo_lab::testing::test_db;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// Start-up (migrations included) and each request get this long at most; a local Citus
/// cluster (three postmasters, its schema distributed) takes the longest on a busy machine.
const START_TIMEOUT: Duration = Duration::from_secs(180);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `saldo serve` and everything it printed so far (also used by `operator.rs` and `logs.rs`).
pub(crate) struct Serve {
    pub(crate) child: Child,
    pub(crate) addr: String,
    lines: mpsc::UnboundedReceiver<String>,
    pub(crate) output: Vec<String>,
}

/// The binary with a clean environment: `data_dir` as its data directory, no tokens, no URL.
pub(crate) fn saldo(data_dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_saldo"));
    cmd.env("SALDO_DATA_DIR", data_dir)
        .env_remove("SALDO_ADMIN_TOKEN")
        .env_remove("SALDO_API_TOKEN")
        .env_remove("SALDO_INSECURE_NO_API_TOKEN")
        .env_remove("DATABASE_URL")
        .kill_on_drop(true);
    cmd
}

impl Serve {
    pub(crate) async fn start(url: &str, data_dir: &Path, extra: &[&str]) -> Serve {
        Serve::launch(data_dir, &["--database-url", url], extra, &[]).await
    }

    /// `saldo serve` on the embedded cluster of `data_dir`.
    pub(crate) async fn start_embedded(data_dir: &Path, extra: &[&str]) -> Serve {
        Serve::launch(data_dir, &[], extra, &[]).await
    }

    /// [`Serve::start_embedded`] with these environment variables set.
    pub(crate) async fn start_embedded_with_env(
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Serve {
        Serve::launch(data_dir, &[], extra, env).await
    }

    /// `saldo serve --citus-workers <workers>`: on a local Citus cluster.
    pub(crate) async fn start_citus(data_dir: &Path, workers: u32, extra: &[&str]) -> Serve {
        let workers = workers.to_string();
        Serve::launch(data_dir, &["--citus-workers", &workers], extra, &[]).await
    }

    async fn launch(
        data_dir: &Path,
        global: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Serve {
        let mut child = saldo(data_dir)
            .envs(env.iter().copied())
            // Debug logs too: a token must not leak at any level.
            .env("RUST_LOG", "debug")
            .args(global)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(["--strategy", "atomic", "--pool-size", "4"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn saldo serve");
        let (tx, lines) = mpsc::unbounded_channel();
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        for (stream, tx) in [
            (
                Box::new(stdout) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
                tx.clone(),
            ),
            (Box::new(stderr), tx),
        ] {
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let mut serve = Serve {
            child,
            addr: String::new(),
            lines,
            output: Vec::new(),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        while serve.addr.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = tokio::time::timeout(left, serve.lines.recv())
                .await
                .unwrap_or_else(|_| panic!("no listening line in time: {:#?}", serve.output))
                .unwrap_or_else(|| panic!("saldo serve exited: {:#?}", serve.output));
            if let Some(rest) = line.strip_prefix("saldo listening on http://") {
                serve.addr = rest.split_whitespace().next().unwrap_or("").to_owned();
            }
            serve.output.push(line);
        }
        serve
    }

    /// The token a `<kind> token (generated…): <token>` line printed, if any.
    pub(crate) fn generated(&self, kind: &str) -> Option<String> {
        let prefix = format!("{kind} token (generated");
        self.output
            .iter()
            .find(|l| l.starts_with(&prefix))
            .and_then(|l| l.rsplit(": ").next())
            .map(str::to_owned)
    }

    /// One HTTP/1.1 request on a fresh connection; the status code.
    pub(crate) async fn status(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &str,
    ) -> u16 {
        let answer = self.request(method, path, token, body).await;
        answer
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status line: {answer}"))
    }

    /// One HTTP/1.1 request on a fresh connection; the whole answer, head and body.
    pub(crate) async fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &str,
    ) -> String {
        let request = async {
            let mut stream = tokio::net::TcpStream::connect(&self.addr)
                .await
                .expect("connect");
            let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
            let head = format!(
                "{method} {path} HTTP/1.1\r\nHost: saldo\r\n{auth}Content-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(head.as_bytes()).await.expect("write");
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await.expect("read");
            answer
        };
        tokio::time::timeout(REQUEST_TIMEOUT, request)
            .await
            .expect("answer in time")
    }

    /// Kills the server and returns everything it printed.
    pub(crate) async fn stop(mut self) -> String {
        self.child.kill().await.expect("kill saldo serve");
        // The readers end when the pipes close; drain what is left, bounded.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.lines.recv()).await {
                Ok(Some(line)) => self.output.push(line),
                Ok(None) | Err(_) => break,
            }
        }
        self.output.join("\n")
    }
}

const RESERVE: &str = r#"{"order_id": "o-1", "items": [{"product_id": 1, "quantity": 1}]}"#;

#[tokio::test]
async fn serve_requires_and_persists_tokens_prints_them_once_and_follows_a_rotation() {
    let db = test_db().await;
    let data = tempfile_dir("tokens");

    let first = Serve::start(&db.url, &data, &[]).await;
    let admin = first.generated("admin").expect("admin token printed");
    let api = first.generated("api").expect("api token printed");
    assert_eq!(
        first
            .status(
                "PUT",
                "/v1/products/1/stock",
                Some(&admin),
                r#"{"count": 5}"#
            )
            .await,
        200
    );
    assert_eq!(
        first
            .status("POST", "/v1/reservations", None, RESERVE)
            .await,
        401
    );
    assert_eq!(
        first
            .status(
                "POST",
                "/v1/reservations",
                Some("not-the-token-0123456789"),
                RESERVE
            )
            .await,
        401
    );
    assert_eq!(
        first.status("GET", "/v1/products/1/stock", None, "").await,
        401
    );
    assert_eq!(
        first
            .status("POST", "/v1/reservations", Some(&api), RESERVE)
            .await,
        201
    );
    let output = first.stop().await;
    for token in [&admin, &api] {
        assert_eq!(
            output.matches(token.as_str()).count(),
            1,
            "printed exactly once, never logged:\n{output}"
        );
    }

    // A restart on the same data directory: the same tokens, none printed.
    let second = Serve::start(&db.url, &data, &[]).await;
    assert_eq!(second.generated("admin"), None);
    assert_eq!(second.generated("api"), None);
    assert_eq!(
        second
            .status("GET", "/v1/admin/audit", Some(&admin), "")
            .await,
        200
    );
    assert_eq!(
        second.status("GET", "/v1/orders/o-1", Some(&api), "").await,
        200
    );

    // Rotation while it runs: the old API token stops working, the new one works.
    let rotate = saldo(&data)
        .args(["token", "rotate", "api"])
        .output()
        .await
        .expect("saldo token rotate");
    assert!(rotate.status.success(), "{rotate:?}");
    let new_api = String::from_utf8_lossy(&rotate.stdout).trim().to_owned();
    assert_eq!(new_api.len(), 64, "{rotate:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while second.status("GET", "/v1/orders/o-1", Some(&api), "").await != 401 {
        assert!(
            Instant::now() < deadline,
            "old API token still accepted after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        second
            .status("GET", "/v1/orders/o-1", Some(&new_api), "")
            .await,
        200
    );
    let status = saldo(&data)
        .args(["token", "status"])
        .output()
        .await
        .expect("saldo token status");
    let text = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(status.status.success(), "{status:?}");
    assert!(
        text.contains("admin  stored") && text.contains("api    stored"),
        "{text}"
    );
    for token in [&admin, &api, &new_api] {
        assert!(
            !text.contains(token.as_str()),
            "status shows no secret: {text}"
        );
    }
    let output = second.stop().await;
    for token in [&admin, &api, &new_api] {
        assert!(!output.contains(token.as_str()), "never logged:\n{output}");
    }
    std::fs::remove_dir_all(&data).expect("clean up");
}

#[tokio::test]
async fn insecure_no_api_token_opens_the_api_routes_and_warns() {
    let db = test_db().await;
    let data = tempfile_dir("insecure");
    let serve = Serve::start(&db.url, &data, &["--insecure-no-api-token"]).await;
    let admin = serve.generated("admin").expect("admin token printed");
    assert_eq!(
        serve.generated("api"),
        None,
        "no API token in insecure mode"
    );
    assert_eq!(
        serve
            .status(
                "PUT",
                "/v1/products/1/stock",
                Some(&admin),
                r#"{"count": 5}"#
            )
            .await,
        200
    );
    assert_eq!(
        serve
            .status("POST", "/v1/reservations", None, RESERVE)
            .await,
        201
    );
    assert_eq!(serve.status("GET", "/v1/admin/audit", None, "").await, 401);
    let output = serve.stop().await;
    assert!(
        output.contains("WARN") && output.contains("API AUTHENTICATION DISABLED"),
        "{output}"
    );
    std::fs::remove_dir_all(&data).expect("clean up");
}

/// A fresh directory under the system temp dir (no tempfile crate in this package).
pub(crate) fn tempfile_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "saldo-cli-test-{tag}-{}-{}",
        std::process::id(),
        rand::random::<u64>()
    ));
    std::fs::create_dir(&dir).expect("temp dir");
    dir
}

/// `path` holding `token` and a newline, mode 0600 (or `mode`).
fn write_token_file(path: &Path, token: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("{token}\n")).expect("write token file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Tokens from files: neither in `ps` nor in the environment. The service uses them (nothing
/// is generated), says once where each token comes from and never shows one; a token given on
/// the command line is used too, with a warning naming the file option; a file others could
/// read is refused before anything is created.
#[tokio::test]
async fn tokens_come_from_files_and_every_start_says_where_tokens_come_from() {
    let db = test_db().await;
    let data = tempfile_dir("token-files");
    let secrets = tempfile_dir("token-files-secrets");
    let (admin_file, api_file) = (secrets.join("admin"), secrets.join("api"));
    let (admin, api) = (
        "admin-token-from-a-file-0123",
        "api-token-from-a-file-01234",
    );
    write_token_file(&admin_file, admin, 0o600);
    write_token_file(&api_file, api, 0o400);
    let admin_arg = admin_file.to_string_lossy().into_owned();
    let api_arg = api_file.to_string_lossy().into_owned();
    let serve = Serve::launch(
        &data,
        &["--database-url", &db.url],
        &["--admin-token-file", &admin_arg],
        &[("SALDO_API_TOKEN_FILE", &api_arg)],
    )
    .await;
    assert_eq!(serve.generated("admin"), None, "nothing generated");
    assert_eq!(serve.generated("api"), None);
    assert_eq!(
        serve
            .status(
                "PUT",
                "/v1/products/1/stock",
                Some(admin),
                r#"{"count": 5}"#
            )
            .await,
        200
    );
    assert_eq!(
        serve
            .status("POST", "/v1/reservations", Some(api), RESERVE)
            .await,
        201
    );
    assert_eq!(
        serve.status("GET", "/v1/admin/locks", Some(api), "").await,
        401
    );
    let output = serve.stop().await;
    assert!(
        output.contains(&format!(
            "tokens: admin from --admin-token-file={admin_arg} (write a new token into the file \
             to replace it); api from SALDO_API_TOKEN_FILE={api_arg}"
        )),
        "{output}"
    );
    assert!(
        !output.contains(admin) && !output.contains(api),
        "a token was shown"
    );
    assert!(!data.join("tokens.json").exists(), "nothing stored");

    // The default: stored tokens, and where to get new ones.
    let serve = Serve::start(&db.url, &data, &[]).await;
    let output = serve.stop().await;
    assert!(
        output.contains(&format!(
            "tokens: stored hashed in {}; `saldo token rotate admin|api` prints new ones",
            data.join("tokens.json").display()
        )),
        "{output}"
    );

    // A flag still works, with a warning naming the file option.
    let serve = Serve::start(&db.url, &data, &["--admin-token", admin]).await;
    assert_eq!(
        serve
            .status("GET", "/v1/admin/locks", Some(admin), "")
            .await,
        200
    );
    let output = serve.stop().await;
    assert!(
        output.contains("--admin-token is visible to every local user in `ps`")
            && output.contains("--admin-token-file PATH (or SALDO_ADMIN_TOKEN_FILE)"),
        "{output}"
    );

    // A file others may read: refused, naming the option, before anything is created.
    write_token_file(&admin_file, admin, 0o644);
    let fresh = secrets.join("fresh-data");
    let out = tokio::time::timeout(
        START_TIMEOUT,
        saldo(&fresh)
            .args([
                "--database-url",
                &db.url,
                "serve",
                "--listen",
                "127.0.0.1:0",
            ])
            .args(["--admin-token-file", &admin_arg])
            .output(),
    )
    .await
    .expect("in time")
    .expect("run saldo");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--admin-token-file: ") && stderr.contains("group or others"),
        "{stderr}"
    );
    assert!(!fresh.exists(), "the data directory was created");
    assert!(out.stdout.is_empty());
    std::fs::remove_dir_all(&data).expect("clean up");
    std::fs::remove_dir_all(&secrets).expect("clean up");
}
