//! What the HTTP mode may do to the service it measures. It writes only in its own namespace
//! (products [`PRODUCT_OFFSET`]` + 1 ..`, order ids `bench-<run>-…`, see `http.rs`),
//! and only:
//! - after both tokens were tried with reads ([`HttpTarget::preflight`]), so a wrong token is
//!   named before anything is written;
//! - into a service that holds nothing of anyone else's (no product outside the bench's range,
//!   no account), unless `--target-allow-writes` says so;
//! - and it cleans up after itself ([`HttpTarget::clean_up`]): it releases every reservation it
//!   may hold and sets its products' counts to 0. What the API cannot remove stays: the
//!   products themselves (there is no delete) and their history (stock movements, released and
//!   confirmed reservation rows: the audit is checked against them), and reservations past the
//!   [`super::http::MAX_HELD_ORDERS`] it keeps track of, which the service's sweeper expires at their TTL
//!   (their products then keep a count: it cannot go below what is reserved).

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hyper::Method;
use saldo::listing::{Cursor, ListKind};

use super::http::{refused, HttpTarget, MAX_BENCH_PRODUCTS, PRODUCT_OFFSET};

/// Clean-up requests in flight.
const CLEANUP_CONCURRENCY: usize = 32;
/// The clean-up stops after this long and says what it left.
pub const CLEANUP_DEADLINE: Duration = Duration::from_secs(10 * 60);

/// What the clean-up did and what it left.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Cleanup {
    pub released: u64,
    /// Orders whose release failed (no answer, or an error other than "unknown order").
    pub release_failed: u64,
    /// Orders not tracked (past [`super::http::MAX_HELD_ORDERS`]) or not tried (the deadline passed).
    pub untracked: u64,
    pub zeroed: u64,
    /// Products whose count could not be set to 0 (reservations still on them, or an error).
    pub not_zeroed: u64,
    /// The first error met, if any.
    pub first_error: Option<String>,
}

impl Cleanup {
    /// One line for the operator, saying what remains and why.
    pub fn describe(&self) -> String {
        let mut line = format!(
            "cleanup: released {} reservations, set {} bench products to count 0; left: the \
             products themselves and their history (the API deletes neither)",
            self.released, self.zeroed
        );
        let held = self.release_failed + self.untracked;
        if held > 0 {
            line.push_str(&format!(
                ", {held} orders not released (they expire at their TTL)"
            ));
        }
        if self.not_zeroed > 0 {
            line.push_str(&format!(
                ", {} products with units (count cannot go below what is reserved)",
                self.not_zeroed
            ));
        }
        if let Some(e) = &self.first_error {
            line.push_str(&format!("; first error: {e}"));
        }
        line
    }
}

impl HttpTarget {
    /// Before anything is written: both tokens work (each tried with a read, and named when
    /// refused), and the service holds nothing of anyone else's unless writes were allowed.
    pub async fn preflight(&self) -> Result<()> {
        let first = self
            .first_id("/v1/products?limit=1", "products", "product_id", false)
            .await
            .context("checking the API token before writing anything")?;
        let (status, body) = self
            .call_idempotent(Method::GET, "/v1/admin/locks", None, true)
            .await?;
        if status != 200 {
            return Err(refused("GET /v1/admin/locks", status, &body, true))
                .context("checking the admin token before writing anything");
        }
        if self.allow_writes {
            return Ok(());
        }
        let mut found = Vec::new();
        if let Some(id) = first.filter(|id| *id <= PRODUCT_OFFSET) {
            found.push(format!("product {id}"));
        }
        let past = Cursor::Numeric(ListKind::Products, PRODUCT_OFFSET + MAX_BENCH_PRODUCTS);
        let path = format!("/v1/products?limit=1&cursor={past}");
        if let Some(id) = self
            .first_id(&path, "products", "product_id", false)
            .await?
        {
            found.push(format!("product {id}"));
        }
        let accounts = "/v1/accounts?limit=1";
        if let Some(id) = self.first_id(accounts, "accounts", "id", false).await? {
            found.push(format!("account {id}"));
        }
        if !found.is_empty() {
            bail!(
                "{} already holds data ({}): the bench writes into the service it measures \
                 (products {}..={} stocked with a billion units each, and reservations), so it \
                 runs only against a service of its own unless --target-allow-writes is given \
                 (it cleans up after itself as far as the API allows)",
                self.base(),
                found.join(", "),
                PRODUCT_OFFSET + 1,
                PRODUCT_OFFSET + MAX_BENCH_PRODUCTS
            );
        }
        Ok(())
    }

    /// The id of the first item of the list at `path` (`field` of each of `list`'s items).
    async fn first_id(
        &self,
        path: &str,
        list: &str,
        field: &str,
        admin: bool,
    ) -> Result<Option<i64>> {
        let (status, body) = self.call_idempotent(Method::GET, path, None, admin).await?;
        if status != 200 {
            return Err(refused(&format!("GET {path}"), status, &body, admin));
        }
        let page: serde_json::Value =
            serde_json::from_slice(&body).with_context(|| format!("GET {path}: not JSON"))?;
        let items = page
            .get(list)
            .and_then(serde_json::Value::as_array)
            .with_context(|| format!("GET {path}: no `{list}` in {page}"))?;
        Ok(items
            .first()
            .and_then(|item| item.get(field))
            .and_then(serde_json::Value::as_i64))
    }

    /// Releases the bench's reservations and sets its `products` to count 0, within
    /// [`CLEANUP_DEADLINE`]; never fails: what it could not do is in the report.
    pub async fn clean_up(&self, products: &[i64]) -> Cleanup {
        let deadline = Instant::now() + CLEANUP_DEADLINE;
        let (orders, untracked) = self.held.take();
        let mut report = Cleanup {
            untracked,
            ..Cleanup::default()
        };
        for chunk in orders.chunks(CLEANUP_CONCURRENCY) {
            if Instant::now() > deadline {
                report.untracked += chunk.len() as u64;
                continue;
            }
            let releases = chunk.iter().map(|order| {
                let path = format!("/v1/orders/{order}/release");
                async move {
                    let answer = self.call_idempotent(Method::POST, &path, None, false).await;
                    (path, answer)
                }
            });
            for (path, answer) in futures::future::join_all(releases).await {
                match answer {
                    Ok((200, _)) => report.released += 1,
                    // Its reservation was refused after all (the answer was lost): nothing held.
                    Ok((404, _)) => {}
                    Ok((status, body)) => {
                        report.release_failed += 1;
                        let e = refused(&format!("POST {path}"), status, &body, false);
                        report.first_error.get_or_insert(e.to_string());
                    }
                    Err(e) => {
                        report.release_failed += 1;
                        report.first_error.get_or_insert(format!("{e:#}"));
                    }
                }
            }
        }
        for chunk in products.chunks(CLEANUP_CONCURRENCY) {
            let zeroes = chunk.iter().map(|p| self.put_count(*p, 0));
            for answer in futures::future::join_all(zeroes).await {
                match answer {
                    Ok((200..=299, _)) => report.zeroed += 1,
                    Ok((status, body)) => {
                        report.not_zeroed += 1;
                        if status != 409 {
                            let e = refused("PUT count 0", status, &body, true);
                            report.first_error.get_or_insert(e.to_string());
                        }
                    }
                    Err(e) => {
                        report.not_zeroed += 1;
                        report.first_error.get_or_insert(format!("{e:#}"));
                    }
                }
            }
        }
        report
    }
}
