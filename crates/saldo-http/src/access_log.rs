//! The access log: one `info` event per request under its own target ([`TARGET`], so
//! `RUST_LOG=saldo_http::access=off` silences it and `…=info` keeps only it), with the method,
//! the matched route template (never the raw path or query), the status, the latency and the
//! order, transfer, product or account id when the request has one.
//!
//! What it never records: headers (the bearer token lives in `Authorization`), query strings,
//! request or response bodies. Path ids are logged only when they look like ids (the domain's
//! alphabet, bounded length): a path is client input, and a log line is no place for whatever a
//! client typed. Ids that travel in a body (a reservation's order id, a transfer's id) are noted
//! by their handler once validated ([`note_order_id`], [`note_transfer_id`], [`note_sale_id`]), through a
//! task-local the middleware scopes around the request: the body itself is never read here.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, RawPathParams, Request};
use axum::middleware::Next;
use axum::response::Response;
use axum::RequestExt;

/// The tracing target of access-log events.
pub const TARGET: &str = "saldo_http::access";
/// Longest path id logged as given; a longer one is logged as [`NOT_AN_ID`].
pub const MAX_LOGGED_ID_CHARS: usize = 64;
/// What is logged in place of a path id that is not one.
pub const NOT_AN_ID: &str = "(not an id)";

/// The ids of one request: from its path, or noted by its handler.
#[derive(Debug, Default, Clone)]
struct Ids {
    order_id: Option<String>,
    transfer_id: Option<String>,
    sale_id: Option<String>,
    product_id: Option<String>,
    account_id: Option<String>,
}

tokio::task_local! {
    /// The request's ids, for its handler to complete (handlers run on the request's task).
    static NOTED: Arc<Mutex<Ids>>;
}

/// Records the (validated) order id of a request that carries it in its body.
pub fn note_order_id(id: &saldo::domain::OrderId) {
    note(|ids| ids.order_id = Some(id.as_str().to_owned()));
}

/// Records the (validated) transfer id of a request that carries it in its body.
pub fn note_transfer_id(id: &saldo::domain::TransferId) {
    note(|ids| ids.transfer_id = Some(id.as_str().to_owned()));
}

/// Records the (validated) sale id of a direct sale (`POST /v1/sales`).
pub fn note_sale_id(id: &saldo::domain::SaleId) {
    note(|ids| ids.sale_id = Some(id.as_str().to_owned()));
}

fn note(set: impl FnOnce(&mut Ids)) {
    // Outside a request (a handler called directly) there is nothing to note.
    let _ = NOTED.try_with(|ids| set(&mut ids.lock().unwrap_or_else(|p| p.into_inner())));
}

/// Middleware: logs the request once its response is ready. Installed with `Router::layer`,
/// so the matched route and the path parameters are known.
pub async fn log(mut request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = request.method().clone();
    let ids = match request.extract_parts::<RawPathParams>().await {
        Ok(params) => path_ids(&params),
        Err(_) => Ids::default(),
    };
    let noted = Arc::new(Mutex::new(ids));
    let start = Instant::now();
    let response = NOTED.scope(noted.clone(), next.run(request)).await;
    let latency_us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
    let ids = noted.lock().unwrap_or_else(|p| p.into_inner()).clone();
    tracing::info!(
        target: TARGET,
        method = %method,
        route,
        status = response.status().as_u16(),
        latency_us,
        order_id = ids.order_id.as_deref(),
        transfer_id = ids.transfer_id.as_deref(),
        sale_id = ids.sale_id.as_deref(),
        product_id = ids.product_id.as_deref(),
        account_id = ids.account_id.as_deref(),
        "request"
    );
    response
}

fn path_ids(params: &RawPathParams) -> Ids {
    let mut ids = Ids::default();
    for (name, value) in params {
        let slot = match name {
            "order_id" => &mut ids.order_id,
            "product_id" => &mut ids.product_id,
            // `/v1/accounts/{id}/…` is the only route with a bare `id`.
            "id" => &mut ids.account_id,
            _ => continue,
        };
        *slot = Some(loggable(value).to_owned());
    }
    ids
}

/// `value` if it looks like an id (the alphabet of `OrderId`, digits for the numeric ids).
fn loggable(value: &str) -> &str {
    let looks_like_id = !value.is_empty()
        && value.len() <= MAX_LOGGED_ID_CHARS
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    if looks_like_id {
        value
    } else {
        NOT_AN_ID
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_id_shaped_values_are_logged() {
        assert_eq!(loggable("order-42:a.b_c"), "order-42:a.b_c");
        assert_eq!(loggable(""), NOT_AN_ID);
        assert_eq!(loggable("a b"), NOT_AN_ID);
        assert_eq!(loggable("x\ny"), NOT_AN_ID);
        assert_eq!(loggable(&"9".repeat(MAX_LOGGED_ID_CHARS + 1)), NOT_AN_ID);
    }
}
