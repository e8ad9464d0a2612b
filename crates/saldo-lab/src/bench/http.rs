//! HTTP mode (`--target URL`): the same load through a running `saldo serve`, with a small
//! hyper client (keep-alive pool, one connection per concurrent buyer at most). The server's
//! strategy is whatever it was started with; the bench works in a namespace of its own (products
//! [`PRODUCT_OFFSET`]` + 1 ..= `[`PRODUCT_OFFSET`]` + `[`MAX_BENCH_PRODUCTS`], order ids
//! `bench-<run>-…`) so it never touches anyone's stock, and checks the server's audit after each
//! run. What it writes, whom it refuses to write to and how it cleans up is `http_guard.rs`.
//! A request refused with 401 or 403 says which token (API or admin) was refused.
//!
//! A request that gets no answer (connection refused or reset, timeout) is a connection error:
//! the load counts it and goes on; the idempotent set-up and check calls (PUT a count, GET a
//! stock, GET the audit) are retried a bounded number of times before the run gives up.

use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use saldo::domain::OrderItems;

/// Every request gives up after this long (then it counts as an error).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest response body read.
const MAX_BODY_BYTES: usize = 64 * 1024;
/// Attempts of an idempotent set-up or check call that hits connection errors.
pub const CONNECT_ATTEMPTS: u32 = 5;
/// Pause before the second attempt; doubled for each further one.
const CONNECT_BACKOFF: Duration = Duration::from_millis(200);

/// The request got no answer at all.
#[derive(Debug, thiserror::Error)]
#[error("no answer from the server: {0}")]
pub struct ConnectionFailed(String);

/// The bench's products are `PRODUCT_OFFSET + 1 ..= PRODUCT_OFFSET + products`.
pub const PRODUCT_OFFSET: i64 = 7_000_000_000_000;
/// The bench's reserved product range ends at `PRODUCT_OFFSET + MAX_BENCH_PRODUCTS` (the most
/// `--products` accepts).
pub const MAX_BENCH_PRODUCTS: i64 = 1_000_000;
/// Every order id the bench sends starts with this, then its run's id.
pub const ORDER_PREFIX: &str = "bench-";

/// A client for one `saldo serve`.
pub struct HttpTarget {
    client: Client<HttpConnector, Full<Bytes>>,
    base: String,
    admin_token: Option<String>,
    api_token: Option<String>,
    /// `--target-allow-writes`: write into a service that already holds data.
    pub(crate) allow_writes: bool,
    /// This invocation's id in its order ids: `<pid>x<unix seconds>`.
    run: String,
    /// Orders that may hold a reservation, released by the clean-up.
    pub(crate) held: Held,
}

/// Most orders whose reservations the clean-up releases (their ids take ~20 bytes each).
pub const MAX_HELD_ORDERS: usize = 1_000_000;
/// Orders that may hold a reservation: granted and not confirmed, or whose answer was lost.
#[derive(Default)]
pub struct Held {
    inner: Mutex<HeldIds>,
}

#[derive(Default)]
struct HeldIds {
    /// The ids, one per line (one allocation for all of them).
    ids: String,
    count: usize,
    /// Orders past [`MAX_HELD_ORDERS`]: left to expire.
    untracked: u64,
}

impl Held {
    /// Remembers `order` for the clean-up.
    pub fn note(&self, order: &str) {
        let Ok(mut held) = self.inner.lock() else {
            return;
        };
        if held.count >= MAX_HELD_ORDERS {
            held.untracked += 1;
            return;
        }
        held.ids.push_str(order);
        held.ids.push('\n');
        held.count += 1;
    }

    /// Every remembered order, and how many were not remembered; forgets them.
    pub(crate) fn take(&self) -> (Vec<String>, u64) {
        let Ok(mut held) = self.inner.lock() else {
            return (Vec::new(), 0);
        };
        let held = std::mem::take(&mut *held);
        let ids = held.ids.lines().map(str::to_owned).collect();
        (ids, held.untracked)
    }
}

/// Which token a request carried, for the message when it is refused.
pub(crate) fn token_name(admin: bool) -> &'static str {
    if admin {
        "the admin token (--admin-token, SALDO_ADMIN_TOKEN)"
    } else {
        "the API token (--api-token, SALDO_API_TOKEN; the admin token when none is given)"
    }
}

/// A refusal of the token (401 or 403) said as such; other statuses as they are.
pub(crate) fn refused(what: &str, status: u16, body: &[u8], admin: bool) -> anyhow::Error {
    let body = String::from_utf8_lossy(&body[..body.len().min(300)]);
    if status == 401 || status == 403 {
        anyhow::anyhow!(
            "{what}: {status}: the service refused {} ({body})",
            token_name(admin)
        )
    } else {
        anyhow::anyhow!("{what}: {status} {body}")
    }
}

/// What the server answered to one reservation.
pub enum Answer {
    Ok,
    Refused,
    Overloaded,
    Error(String),
    /// No answer: the connection failed (see [`ConnectionFailed`]).
    ConnectionError(String),
}

impl HttpTarget {
    /// A client for the service at `base`; `allow_writes`: write into it even when it already
    /// holds data (`--target-allow-writes`).
    pub fn new(
        base: &str,
        admin_token: Option<String>,
        api_token: Option<String>,
        max_idle: usize,
        allow_writes: bool,
    ) -> Result<HttpTarget> {
        let base = base.trim_end_matches('/').to_owned();
        if !base.starts_with("http://") {
            bail!("--target must be an http:// URL, got {base:?}");
        }
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(max_idle)
            .build_http();
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Ok(HttpTarget {
            client,
            base,
            admin_token,
            api_token,
            allow_writes,
            run: format!("{}x{}", std::process::id(), since_epoch.as_secs()),
            held: Default::default(),
        })
    }

    /// The service's address, as given.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The order ids of `round` start with this (then `-<buyer>-<seq>` or `-<seq>`).
    pub fn order_tag(&self, round: u32) -> String {
        format!("{ORDER_PREFIX}{}-r{round}", self.run)
    }

    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
        admin: bool,
    ) -> Result<(u16, Bytes)> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        let token = if admin {
            self.admin_token.as_ref()
        } else {
            self.api_token.as_ref()
        };
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let body = match body {
            Some(json) => {
                request = request.header("content-type", "application/json");
                Full::new(Bytes::from(serde_json::to_vec(&json)?))
            }
            None => Full::new(Bytes::new()),
        };
        let request = request.body(body)?;
        let response = tokio::time::timeout(REQUEST_TIMEOUT, self.client.request(request))
            .await
            .map_err(|_| ConnectionFailed(format!("no response within {REQUEST_TIMEOUT:?}")))?
            .map_err(|e| ConnectionFailed(saldo::error::chain(&e)))?;
        let status = response.status().as_u16();
        let bytes = http_body_util::Limited::new(response.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
            .map_err(|e| ConnectionFailed(format!("reading the response: {e}")))?
            .to_bytes();
        Ok((status, bytes))
    }

    /// [`HttpTarget::call`] for an idempotent request, retried on connection errors
    /// ([`CONNECT_ATTEMPTS`] in all, backing off).
    pub(crate) async fn call_idempotent(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
        admin: bool,
    ) -> Result<(u16, Bytes)> {
        let mut pause = CONNECT_BACKOFF;
        for attempt in 1.. {
            match self.call(method.clone(), path, body.clone(), admin).await {
                Err(e) if attempt < CONNECT_ATTEMPTS && e.is::<ConnectionFailed>() => {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                done => {
                    return done.with_context(|| {
                        format!("{method} {}{path} (attempt {attempt})", self.base)
                    })
                }
            }
        }
        unreachable!("the loop returns by its last attempt")
    }

    /// Sets a product's physical count (admin).
    pub async fn set_count(&self, product: i64, count: i32) -> Result<()> {
        let path = format!("/v1/products/{product}/stock");
        let (status, body) = self.put_count(product, count).await?;
        if !(200..300).contains(&status) {
            return Err(refused(&format!("PUT {path}"), status, &body, true));
        }
        Ok(())
    }

    /// `PUT` a product's count; the status and body as answered.
    pub(crate) async fn put_count(&self, product: i64, count: i32) -> Result<(u16, Bytes)> {
        let path = format!("/v1/products/{product}/stock");
        self.call_idempotent(
            Method::PUT,
            &path,
            Some(serde_json::json!({ "count": count })),
            true,
        )
        .await
    }

    /// (available, reserved) of a product.
    pub async fn stock(&self, product: i64) -> Result<(i64, i64)> {
        let path = format!("/v1/products/{product}/stock");
        let (status, body) = self
            .call_idempotent(Method::GET, &path, None, false)
            .await?;
        if status != 200 {
            return Err(refused(&format!("GET {path}"), status, &body, false));
        }
        let v: serde_json::Value = serde_json::from_slice(&body)?;
        let field = |name: &str| v.get(name).and_then(serde_json::Value::as_i64);
        match (field("available"), field("reserved")) {
            (Some(a), Some(r)) => Ok((a, r)),
            _ => bail!("GET {path}: unexpected body {v}"),
        }
    }

    /// The server's audit (admin): true when clean.
    pub async fn audit(&self) -> Result<bool> {
        let (status, body) = self
            .call_idempotent(Method::GET, "/v1/admin/audit", None, true)
            .await?;
        if status != 200 {
            return Err(refused("GET /v1/admin/audit", status, &body, true));
        }
        let v: serde_json::Value = serde_json::from_slice(&body)?;
        Ok(v.get("ok").and_then(serde_json::Value::as_bool) == Some(true))
    }

    /// Reserves `items` (bench product numbers, offset here) for `order`.
    pub async fn reserve(&self, order: &str, items: &OrderItems) -> Answer {
        let items: Vec<serde_json::Value> = items
            .iter()
            .map(|(p, q)| {
                serde_json::json!({ "product_id": PRODUCT_OFFSET + p.get(), "quantity": q.get() })
            })
            .collect();
        let body = serde_json::json!({ "order_id": order, "items": items });
        answer(
            self.call(Method::POST, "/v1/reservations", Some(body), false)
                .await,
        )
    }

    pub async fn confirm(&self, order: &str) -> Answer {
        let path = format!("/v1/orders/{order}/confirm");
        answer(self.call(Method::POST, &path, None, false).await)
    }
}

fn answer(result: Result<(u16, Bytes)>) -> Answer {
    match result {
        Ok((200..=201, _)) => Answer::Ok,
        Ok((404 | 409, _)) => Answer::Refused,
        Ok((503, _)) => Answer::Overloaded,
        Ok((status @ (401 | 403), body)) => {
            Answer::Error(refused("HTTP", status, &body, false).to_string())
        }
        Ok((status, body)) => Answer::Error(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        )),
        Err(e) if e.is::<ConnectionFailed>() => Answer::ConnectionError(e.to_string()),
        Err(e) => Answer::Error(e.to_string()),
    }
}
