//! The HTTP client that delivers webhooks: one POST per batch, no redirect followed (a 3xx is a
//! failure), connect timeout [`CONNECT_TIMEOUT`], whole-request timeout [`REQUEST_TIMEOUT`], at
//! most [`MAX_RESPONSE_BYTES`] of a response body read and the rest dropped, no proxy, and a
//! resolver that checks every address of the target before any connection
//! ([`saldo::webhooks::target`]): the addresses connected to are the ones checked, so a name
//! that resolves differently at connect time than at registration (DNS rebinding) is refused.
//! An IP literal never reaches a resolver, so [`Sender::send`] checks it first.
//!
//! reqwest, without its default features and with rustls: the connection pool, timeouts,
//! redirect policy, pluggable resolver and TLS with the webpki roots, without OpenSSL.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::redirect::Policy;
use saldo::webhooks::target;

/// Connect and whole-request timeouts of one delivery.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Most of a response body read (then dropped unread).
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// Idle connections kept per receiver.
const MAX_IDLE_PER_HOST: usize = 2;
/// The User-Agent of every delivery.
pub const USER_AGENT: &str = concat!("saldo-webhooks/", env!("CARGO_PKG_VERSION"));

/// The headers of a delivery, besides the content type.
pub const WEBHOOK_ID: &str = "Saldo-Webhook-Id";
pub const DELIVERY_ID: &str = "Saldo-Delivery-Id";
pub const SIGNATURE: &str = "Saldo-Signature";

/// How one delivery went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// `ok`, `http_status`, `redirect`, `timeout`, `connect`, `target_refused`, `error`.
    pub outcome: &'static str,
    pub status: Option<u16>,
    /// What went wrong (no URL in it).
    pub error: Option<String>,
    pub duration: Duration,
}

impl Sent {
    pub fn ok(&self) -> bool {
        self.outcome == "ok"
    }
}

/// A refused target, so an error chain can be recognised as one.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// Resolves with the address rule of [`target`].
struct CheckedResolver {
    allow_private: bool,
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // Port 0: reqwest puts the URL's port in.
            match target::resolve(&host, 0, allow_private).await {
                Ok(addrs) => Ok(Box::new(addrs.into_iter()) as Addrs),
                Err(e) => Err(Box::new(Refused(e.to_string())) as _),
            }
        })
    }
}

/// Sends deliveries.
#[derive(Clone)]
pub struct Sender {
    client: reqwest::Client,
    allow_private: bool,
}

impl Sender {
    pub fn new(allow_private: bool) -> Result<Sender, reqwest::Error> {
        let client = reqwest::Client::builder()
            .redirect(Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .user_agent(USER_AGENT)
            .no_proxy()
            .pool_max_idle_per_host(MAX_IDLE_PER_HOST)
            .dns_resolver(Arc::new(CheckedResolver { allow_private }))
            .build()?;
        Ok(Sender {
            client,
            allow_private,
        })
    }

    /// POSTs `body` to `url` with `headers`; never fails, says how it went.
    pub async fn send(&self, url: &str, headers: &[(&str, String)], body: Vec<u8>) -> Sent {
        let started = Instant::now();
        let done = |outcome, status: Option<u16>, error: Option<String>| Sent {
            outcome,
            status,
            error,
            duration: started.elapsed(),
        };
        let parsed = match target::parse_url(url) {
            Ok(u) => u,
            Err(e) => return done("target_refused", None, Some(e.to_string())),
        };
        if let Some(ip) = literal_ip(&parsed) {
            let addr = SocketAddr::new(ip, 0);
            if let Err(e) = target::check_addresses(&[addr], self.allow_private) {
                return done("target_refused", None, Some(e.to_string()));
            }
        }
        let mut request = self
            .client
            .post(parsed)
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        match request.body(body).send().await {
            Ok(response) => {
                let status = response.status();
                drain(response).await;
                let code = Some(status.as_u16());
                if status.is_success() {
                    done("ok", code, None)
                } else if status.is_redirection() {
                    done(
                        "redirect",
                        code,
                        Some(format!("answered {status} (redirects are not followed)")),
                    )
                } else {
                    done("http_status", code, Some(format!("answered {status}")))
                }
            }
            Err(e) => {
                let (outcome, text) = classify(&e);
                done(outcome, None, Some(text))
            }
        }
    }
}

fn literal_ip(url: &url::Url) -> Option<std::net::IpAddr> {
    match url.host()? {
        url::Host::Ipv4(ip) => Some(ip.into()),
        url::Host::Ipv6(ip) => Some(ip.into()),
        url::Host::Domain(_) => None,
    }
}

/// Reads at most [`MAX_RESPONSE_BYTES`] of the body, then drops the rest.
async fn drain(mut response: reqwest::Response) {
    let mut read = 0;
    while read < MAX_RESPONSE_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => read += chunk.len(),
            Ok(None) | Err(_) => break,
        }
    }
}

/// The outcome of a failed request and its text, without the URL (its query may hold a secret).
fn classify(e: &reqwest::Error) -> (&'static str, String) {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(refused) = s.downcast_ref::<Refused>() {
            return ("target_refused", refused.0.clone());
        }
        source = s.source();
    }
    let outcome = if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connect"
    } else {
        "error"
    };
    // reqwest's own message names the URL: only its causes are kept.
    let mut text = String::from(outcome);
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    (outcome, text)
}
