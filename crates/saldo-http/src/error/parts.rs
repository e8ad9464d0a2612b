//! One problem before it is rendered: its status, `type` slug, title, detail, the extension
//! members that name its subject, and whether a retry may succeed (`Retry-After`). The tables
//! in [`super::library`] and [`super::ApiError`] build one per error; [`super`] renders it.

use axum::http::StatusCode;
use serde::Serialize;
use serde_json::{Map, Value};

/// A problem document's parts. Built by status (`invalid`, `not_found`, `conflict`,
/// `unavailable`), then given its fields with [`Parts::with`].
#[derive(Debug)]
pub(super) struct Parts {
    pub(super) status: StatusCode,
    /// The `type` without [`super::TYPE_PREFIX`], e.g. `insufficient-stock`.
    pub(super) kind: &'static str,
    pub(super) title: &'static str,
    /// `None` until set: a library error's own message fills it ([`Parts::or_detail`]).
    pub(super) detail: Option<String>,
    pub(super) extensions: Map<String, Value>,
    /// Answer with `Retry-After`: the same request may succeed later.
    pub(super) retry_after: bool,
}

impl Parts {
    pub(super) fn new(status: StatusCode, kind: &'static str, title: &'static str) -> Self {
        Parts {
            status,
            kind,
            title,
            detail: None,
            extensions: Map::new(),
            retry_after: false,
        }
    }

    /// 422: the request names something the service cannot take as it is.
    pub(super) fn invalid(kind: &'static str, title: &'static str) -> Self {
        Parts::new(StatusCode::UNPROCESSABLE_ENTITY, kind, title)
    }

    /// 404: the request names something that does not exist.
    pub(super) fn not_found(kind: &'static str, title: &'static str) -> Self {
        Parts::new(StatusCode::NOT_FOUND, kind, title)
    }

    /// 409: the request conflicts with the state it found.
    pub(super) fn conflict(kind: &'static str, title: &'static str) -> Self {
        Parts::new(StatusCode::CONFLICT, kind, title)
    }

    /// 503 with `Retry-After`: not now; the same request may succeed later.
    pub(super) fn unavailable(kind: &'static str, title: &'static str) -> Self {
        Parts::new(StatusCode::SERVICE_UNAVAILABLE, kind, title).retry()
    }

    /// 500: a bug or a broken deployment. The detail says only where to look: the cause is for
    /// the log, never for the client.
    pub(super) fn internal() -> Self {
        Parts::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
        )
        .detail("the server failed; the error is in its log")
    }

    /// An extension member. Every value the tables give serializes (ids, numbers, strings).
    pub(super) fn with(mut self, key: &str, value: impl Serialize) -> Self {
        let value = serde_json::to_value(value).unwrap_or(Value::Null);
        self.extensions.insert(key.to_owned(), value);
        self
    }

    pub(super) fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// The detail, unless one was set.
    pub(super) fn or_detail(mut self, detail: impl FnOnce() -> String) -> Self {
        if self.detail.is_none() {
            self.detail = Some(detail());
        }
        self
    }

    pub(super) fn retry(mut self) -> Self {
        self.retry_after = true;
        self
    }
}
