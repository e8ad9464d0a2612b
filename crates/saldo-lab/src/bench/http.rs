//! HTTP mode (`--target URL`): the same load through a running `saldo serve`, with a small
//! hyper client (keep-alive pool, one connection per concurrent buyer at most). The server's
//! strategy is whatever it was started with; the bench stocks its own product range (far from
//! ids people use) so it never touches anyone's stock, and checks the server's audit after each
//! run.

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
/// The bench's products are `PRODUCT_OFFSET + 1 ..= PRODUCT_OFFSET + products`.
pub const PRODUCT_OFFSET: i64 = 7_000_000_000_000;

/// A client for one `saldo serve`.
pub struct HttpTarget {
    client: Client<HttpConnector, Full<Bytes>>,
    base: String,
    admin_token: Option<String>,
    api_token: Option<String>,
}

/// What the server answered to one reservation.
pub enum Answer {
    Ok,
    Refused,
    Overloaded,
    Error(String),
}

impl HttpTarget {
    pub fn new(
        base: &str,
        admin_token: Option<String>,
        api_token: Option<String>,
        max_idle: usize,
    ) -> Result<HttpTarget> {
        let base = base.trim_end_matches('/').to_owned();
        if !base.starts_with("http://") {
            bail!("--target must be an http:// URL, got {base:?}");
        }
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(max_idle)
            .build_http();
        Ok(HttpTarget {
            client,
            base,
            admin_token,
            api_token,
        })
    }

    async fn call(
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
            .context("request timed out")??;
        let status = response.status().as_u16();
        let bytes = http_body_util::Limited::new(response.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
            .map_err(|e| anyhow::anyhow!("reading the response: {e}"))?
            .to_bytes();
        Ok((status, bytes))
    }

    /// Sets a product's physical count (admin).
    pub async fn set_count(&self, product: i64, count: i32) -> Result<()> {
        let path = format!("/v1/products/{product}/stock");
        let (status, body) = self
            .call(
                Method::PUT,
                &path,
                Some(serde_json::json!({ "count": count })),
                true,
            )
            .await?;
        if !(200..300).contains(&status) {
            bail!("PUT {path}: {status} {}", String::from_utf8_lossy(&body));
        }
        Ok(())
    }

    /// (available, reserved) of a product.
    pub async fn stock(&self, product: i64) -> Result<(i64, i64)> {
        let path = format!("/v1/products/{product}/stock");
        let (status, body) = self.call(Method::GET, &path, None, false).await?;
        if status != 200 {
            bail!("GET {path}: {status} {}", String::from_utf8_lossy(&body));
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
            .call(Method::GET, "/v1/admin/audit", None, true)
            .await?;
        if status != 200 {
            bail!(
                "GET /v1/admin/audit: {status} {}",
                String::from_utf8_lossy(&body)
            );
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
        Ok((status, body)) => Answer::Error(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        )),
        Err(e) => Answer::Error(e.to_string()),
    }
}
