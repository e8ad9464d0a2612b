//! The one error type of the service. Every failure a handler, an extractor or a middleware can
//! produce becomes an RFC 9457 `application/problem+json` answer with a stable `type` URI per
//! kind of error, so clients branch on `type`, never on the wording of `detail`.
//!
//! Database and pool failures answer 503 (try again) or 500 without their internals: the full
//! error goes to the log, the client gets the kind and, for contention, the SQLSTATE.
//!
//! What each error answers is a table: `library` for the library's errors, [`ApiError`]'s own
//! below; both build `Parts`, rendered once by `into_response`.

mod library;
mod parts;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::Request;
use axum::http::header::{ALLOW, CONNECTION, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use saldo::Error;
use serde::Serialize;
use serde_json::{Map, Value};
use tokio_postgres::error::SqlState;
use utoipa::ToSchema;

use parts::Parts;

/// Media type of every error answer.
pub const PROBLEM_JSON: &str = "application/problem+json";
/// Prefix of every problem `type`: a URN, stable and never dereferenced.
pub const TYPE_PREFIX: &str = "urn:saldo:problem:";
/// Seconds a client is told to wait before retrying a 503.
pub const RETRY_AFTER_S: u32 = 1;

/// An RFC 9457 problem document, as the OpenAPI document describes it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Problem {
    /// Stable identifier of the kind of error, e.g. `urn:saldo:problem:insufficient-stock`.
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    /// Extension members name the subject: `product_id`, `order_id`, `account`, `transfer_id`…
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub extensions: Map<String, Value>,
}

/// Everything that can go wrong in a request.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Domain(#[from] Error),
    #[error("{0}")]
    Unauthorized(&'static str),
    /// The body is not JSON at all (400).
    #[error("{0}")]
    MalformedJson(String),
    /// JSON of the wrong shape: wrong types, missing or unknown fields (422).
    #[error("{0}")]
    InvalidBody(String),
    /// A path segment or query parameter that does not parse (422).
    #[error("{0}")]
    InvalidParameter(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("request body larger than the limit")]
    PayloadTooLarge,
    /// The body did not arrive within the body-read timeout (408).
    #[error("the request body did not arrive within {} ms", .0.as_millis())]
    BodyTimeout(std::time::Duration),
    /// The body could not be read: the client went away or broke the framing (400).
    #[error("the request body could not be read: {0}")]
    UnreadableBody(String),
    #[error("not ready: {0:?}")]
    NotReady(NotReady),
    /// A response a layer produced without a body (404 no route, 405, timeout…).
    #[error("{0}")]
    Bare(StatusCode),
    /// The service is still starting (migrating its database): nothing was applied (503).
    #[error("the service is starting")]
    Starting,
    /// Every event stream slot is taken (`--max-event-streams`): 503 with `Retry-After`.
    #[error("{limit} event streams are open, the most this service serves")]
    TooManyStreams { limit: usize },
    #[error("{0}")]
    Internal(String),
}

/// Why the service is not ready: the two need different operator action (a database to bring
/// back, or load to shed / a pool to enlarge), so they answer different problem types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReady {
    /// Every pooled connection is in use and none came free in [`crate::routes::health::READY_POOL_WAIT`] (a doc link only: error imports nothing from routes).
    PoolBusy,
    /// The database refused, failed or did not answer (the cause is for the log).
    DatabaseUnavailable(String),
}

impl ApiError {
    /// This error's entry: the library's errors by [`library`], the service's own here.
    fn parts(&self) -> Parts {
        use StatusCode as S;
        match self {
            ApiError::Domain(e) => library::parts(e),
            ApiError::Unauthorized(d) => {
                Parts::new(S::UNAUTHORIZED, "unauthorized", "Unauthorized").detail(*d)
            }
            ApiError::MalformedJson(d) => {
                Parts::new(S::BAD_REQUEST, "malformed-json", "Malformed JSON").detail(d)
            }
            ApiError::InvalidBody(d) => {
                Parts::invalid("invalid-body", "Invalid request body").detail(d)
            }
            ApiError::InvalidParameter(d) => {
                Parts::invalid("invalid-input", "Invalid input").detail(d)
            }
            ApiError::UnsupportedMediaType(d) => Parts::new(
                S::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                "Unsupported media type",
            )
            .detail(d),
            ApiError::PayloadTooLarge => payload_too_large(),
            ApiError::BodyTimeout(t) => Parts::new(
                S::REQUEST_TIMEOUT,
                "request-timeout",
                "Request body timed out",
            )
            .detail(self.to_string())
            .with(
                "timeout_ms",
                u64::try_from(t.as_millis()).unwrap_or(u64::MAX),
            ),
            ApiError::UnreadableBody(_) => {
                Parts::new(S::BAD_REQUEST, "unreadable-body", "Unreadable request body")
                    .detail("the request body could not be read")
            }
            ApiError::NotReady(NotReady::PoolBusy) => Parts::unavailable("pool-busy", "Pool busy")
                .detail("every database connection is in use; the database itself may be fine"),
            ApiError::NotReady(NotReady::DatabaseUnavailable(_)) => {
                library::database_unavailable("the database does not answer")
            }
            ApiError::Bare(status) => bare(*status),
            ApiError::Starting => Parts::unavailable("starting", "Starting, try again")
                .detail("the service is starting (migrating its database); nothing was applied")
                .with("applied", false),
            ApiError::TooManyStreams { limit } => {
                Parts::unavailable("too-many-streams", "Too many event streams")
                    .detail(format!(
                        "{self}; try again later, or page with GET /v1/events instead"
                    ))
                    .with("limit", *limit)
            }
            ApiError::Internal(_) => Parts::internal(),
        }
    }

    /// The HTTP status this error answers with.
    pub fn status(&self) -> StatusCode {
        self.parts().status
    }
}

fn payload_too_large() -> Parts {
    let limit = crate::config::MAX_BODY_BYTES;
    Parts::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload-too-large",
        "Payload too large",
    )
    .detail(format!("the body is larger than {limit} bytes"))
    .with("limit_bytes", limit)
}

/// A status a layer answered without a body (no route, wrong method, over the limit, the
/// backstop timeout).
fn bare(status: StatusCode) -> Parts {
    use StatusCode as S;
    let reason = status.canonical_reason().unwrap_or("error");
    match status {
        S::NOT_FOUND => Parts::new(status, "not-found", "No such route"),
        S::METHOD_NOT_ALLOWED => Parts::new(status, "method-not-allowed", "Method not allowed"),
        S::PAYLOAD_TOO_LARGE => Parts::new(status, "payload-too-large", "Payload too large"),
        S::SERVICE_UNAVAILABLE => Parts::unavailable("timeout", "Request timed out")
            .detail("the request did not finish within the server's timeout"),
        _ if status.is_server_error() => Parts::internal(),
        _ => Parts::new(status, "http-error", "HTTP error"),
    }
    .or_detail(|| reason.to_owned())
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let parts = self.parts();
        if parts.status.is_server_error() {
            log_server_error(&self, parts.status);
        } else {
            tracing::debug!(error = %self, status = parts.status.as_u16(), "request refused");
        }
        let problem = Problem {
            kind: format!("{TYPE_PREFIX}{}", parts.kind),
            title: parts.title.to_owned(),
            status: parts.status.as_u16(),
            detail: parts.detail.unwrap_or_default(),
            extensions: parts.extensions,
        };
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut response = (parts.status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if parts.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"saldo\""),
            );
        }
        if parts.retry_after {
            headers.insert(RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
        }
        if parts.status == StatusCode::REQUEST_TIMEOUT {
            // RFC 9110 §15.5.9: the rest of the body may still come; do not read it as a request.
            headers.insert(CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// Logs a 5xx with what an operator needs to find its cause. For a database error: the
/// SQLSTATE and, when PostgreSQL names them, the constraint, schema, table, column and data type,
/// plus the server's primary message (`db_message`). Never the bind parameters, and never
/// PostgreSQL's DETAIL (it can quote row values).
fn log_server_error(e: &ApiError, status: StatusCode) {
    let status = status.as_u16();
    let source = match e {
        ApiError::Domain(Error::Database(db)) => Some(db),
        ApiError::Domain(Error::RetriesExhausted { source, .. }) => Some(source),
        _ => None,
    };
    let Some(db) = source else {
        tracing::error!(error = %e, status, "request failed");
        return;
    };
    let sqlstate = db.code().map_or("none", SqlState::code);
    match db.as_db_error() {
        Some(d) => tracing::error!(
            status,
            sqlstate,
            severity = d.severity(),
            // Not `message`: that key is the event's own, and a JSON log line would carry it twice.
            db_message = d.message(),
            constraint = d.constraint(),
            schema = d.schema(),
            table = d.table(),
            column = d.column(),
            datatype = d.datatype(),
            "request failed: database error"
        ),
        // No server-side error: the connection itself failed (closed, refused, I/O).
        None => {
            tracing::error!(status, sqlstate, error = %db, "request failed: database connection")
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        match r {
            JsonRejection::JsonDataError(e) => ApiError::InvalidBody(e.body_text()),
            JsonRejection::JsonSyntaxError(e) => ApiError::MalformedJson(e.body_text()),
            JsonRejection::MissingJsonContentType(e) => {
                ApiError::UnsupportedMediaType(e.body_text())
            }
            other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge,
            other if other.status().is_client_error() => ApiError::MalformedJson(other.body_text()),
            other => ApiError::Internal(other.body_text()),
        }
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        match r {
            PathRejection::FailedToDeserializePathParams(e) => {
                ApiError::InvalidParameter(e.body_text())
            }
            other => ApiError::Internal(other.body_text()),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::InvalidParameter(r.body_text())
    }
}

impl From<saldo::InputError> for ApiError {
    fn from(e: saldo::InputError) -> Self {
        ApiError::Domain(Error::Input(e))
    }
}

/// Middleware: an error answer a layer produced without a problem body (no route, wrong method,
/// body over the limit, timeout) is rewritten as problem+json, so every error has one shape.
pub async fn problem_for_bare_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_problem = response
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(PROBLEM_JSON.as_bytes()));
    if !(status.is_client_error() || status.is_server_error()) || is_problem {
        return response;
    }
    let allow = response.headers().get(ALLOW).cloned();
    let mut rewritten = ApiError::Bare(status).into_response();
    if let Some(allow) = allow {
        rewritten.headers_mut().insert(ALLOW, allow);
    }
    rewritten
}

#[cfg(test)]
mod tests {
    use super::*;
    use saldo::domain::{AccountId, OrderId, ProductId, TransferId};
    use saldo::InputError;

    fn kind_of(e: ApiError) -> (u16, String, bool, Map<String, Value>) {
        let parts = e.parts();
        (
            parts.status.as_u16(),
            parts.kind.to_owned(),
            parts.retry_after,
            parts.extensions,
        )
    }

    #[test]
    fn every_domain_error_has_a_status_and_a_stable_kind() {
        let p = ProductId::new(7).expect("id");
        let o = OrderId::new("o-1").expect("id");
        let a = AccountId::new(3).expect("id");
        let t = TransferId::new("t-1").expect("id");
        let cases: Vec<(Error, u16, &str, Option<&str>)> = vec![
            (InputError::EmptyOrder.into(), 422, "invalid-input", None),
            (
                InputError::CursorInvalid { list: "transfers" }.into(),
                422,
                "cursor-invalid",
                Some("list"),
            ),
            (
                Error::UnknownProduct(p),
                404,
                "unknown-product",
                Some("product_id"),
            ),
            (
                Error::InsufficientStock {
                    product_id: p,
                    requested: 2,
                    available: 1,
                },
                409,
                "insufficient-stock",
                Some("product_id"),
            ),
            (
                Error::IdempotencyConflict(o.clone()),
                409,
                "idempotency-conflict",
                Some("order_id"),
            ),
            (
                Error::UnknownOrder(o),
                404,
                "unknown-order",
                Some("order_id"),
            ),
            (
                Error::CountBelowReserved {
                    product_id: p,
                    count: 1,
                    reserved: 2,
                },
                409,
                "count-below-reserved",
                Some("reserved"),
            ),
            (
                Error::BackorderLimitBelowBackordered {
                    product_id: p,
                    limit: 1,
                    backordered: 2,
                },
                409,
                "backorder-limit-below-backordered",
                Some("backordered"),
            ),
            (
                Error::UnsupportedOnCitus("direct sale"),
                409,
                "unsupported-on-citus",
                Some("operation"),
            ),
            (
                Error::AdjustmentWouldGoNegative {
                    product_id: p,
                    delta: -5,
                    available: 1,
                },
                409,
                "would-go-negative",
                Some("available"),
            ),
            (
                Error::StockWouldExceedLimit {
                    product_id: p,
                    delta: 5,
                    on_hand_after: 1_000_000_001,
                    max: 1_000_000_000,
                },
                409,
                "stock-limit",
                Some("on_hand_after"),
            ),
            (
                Error::VersionConflict {
                    product_id: p,
                    attempts: 4,
                },
                409,
                "version-conflict",
                Some("attempts"),
            ),
            (
                Error::Overloaded("queue full".into()),
                503,
                "overloaded",
                None,
            ),
            (
                Error::UnknownAccount(a),
                404,
                "unknown-account",
                Some("account"),
            ),
            (
                Error::AccountExists(a),
                409,
                "account-exists",
                Some("account"),
            ),
            (
                Error::InsufficientFunds {
                    account: a,
                    requested: 5,
                    balance: 1,
                    held: 0,
                    min_balance: 0,
                },
                409,
                "insufficient-funds",
                Some("balance"),
            ),
            (
                Error::TransferConflict(t.clone()),
                409,
                "idempotency-conflict",
                Some("transfer_id"),
            ),
            (
                Error::MaxBalanceExceeded {
                    account: a,
                    requested: 5,
                    balance: 1,
                    pending_credits: 2,
                    max_balance: 3,
                },
                409,
                "max-balance-exceeded",
                Some("pending_credits"),
            ),
            (
                Error::UnknownTransfer(t.clone()),
                404,
                "unknown-transfer",
                Some("transfer_id"),
            ),
            (
                Error::TransferNotPending {
                    id: t.clone(),
                    status: saldo::domain::TransferStatus::Voided,
                    posted_amount: None,
                },
                409,
                "transfer-not-pending",
                Some("transfer_status"),
            ),
            (
                Error::PostExceedsHold {
                    id: t.clone(),
                    requested: 2,
                    held: 1,
                },
                422,
                "post-exceeds-hold",
                Some("held"),
            ),
            (
                Error::TransferNotPosted {
                    id: t.clone(),
                    status: saldo::domain::TransferStatus::Pending,
                },
                409,
                "transfer-not-posted",
                Some("transfer_status"),
            ),
            (
                Error::ReversalExceedsPosted {
                    id: t.clone(),
                    posted: 10,
                    reversed: 4,
                    requested: Some(7),
                },
                409,
                "reversal-exceeds-posted",
                Some("reversed_amount"),
            ),
            (
                Error::GroupRefused {
                    group: saldo::domain::GroupId::new("g").expect("group id"),
                    index: 3,
                    transfer: t.clone(),
                    source: Box::new(Error::UnknownAccount(a)),
                },
                404,
                "unknown-account",
                Some("failed_index"),
            ),
            (
                pool_error("secret host:5432 refused"),
                503,
                "database-unavailable",
                None,
            ),
            (
                Error::BalanceOutOfRange { account: a },
                409,
                "balance-out-of-range",
                Some("account"),
            ),
            (
                Error::CurrencyMismatch {
                    from: a,
                    to: a,
                    from_currency: saldo::ledger::Currency::DEFAULT,
                    to_currency: saldo::ledger::Currency::new("USD").expect("code"),
                    from_scale: saldo::ledger::Scale::DEFAULT,
                    to_scale: saldo::ledger::Scale::DEFAULT,
                },
                409,
                "currency-mismatch",
                Some("to_currency"),
            ),
            (
                Error::ReservationExpired {
                    order_id: OrderId::new("o-2").expect("id"),
                    product_id: p,
                },
                409,
                "reservation-expired",
                Some("product_id"),
            ),
            (
                Error::SaleConflict(saldo::domain::SaleId::new("s-1").expect("id")),
                409,
                "idempotency-conflict",
                Some("sale_id"),
            ),
            (
                Error::NothingToExtend(OrderId::new("o-3").expect("id")),
                409,
                "nothing-to-extend",
                Some("order_id"),
            ),
            (
                Error::HoldLimitExceeded {
                    order_id: OrderId::new("o-4").expect("id"),
                    product_id: p,
                    max_hold_s: 86_400,
                },
                422,
                "hold-limit",
                Some("max_hold_s"),
            ),
            (Error::Migration("V9 failed".into()), 500, "internal", None),
        ];
        for (error, status, kind, extension) in cases {
            let (s, k, retry, ext) = kind_of(ApiError::Domain(error));
            assert_eq!((s, k.as_str()), (status, kind));
            assert_eq!(retry, status == 503 || kind == "version-conflict", "{kind}");
            if let Some(name) = extension {
                assert!(ext.contains_key(name), "{kind} names its {name}");
            }
        }
    }

    /// A pool failure whose message carries what must stay in the log.
    fn pool_error(message: &'static str) -> Error {
        let hook = deadpool_postgres::HookError::message(message);
        deadpool_postgres::PoolError::PostCreateHook(hook).into()
    }

    #[test]
    fn internals_stay_in_the_log() {
        let parts = ApiError::Domain(pool_error("secret host:5432 refused")).parts();
        assert!(!parts.detail.unwrap_or_default().contains("secret"));
        let parts = ApiError::Internal("stack trace".into()).parts();
        assert!(!parts.detail.unwrap_or_default().contains("stack"));
    }

    #[test]
    fn problems_render_as_problem_json_with_headers() {
        let r = ApiError::Unauthorized("no").into_response();
        assert_eq!(
            r.headers().get(CONTENT_TYPE).map(|v| v.as_bytes()),
            Some(PROBLEM_JSON.as_bytes())
        );
        assert!(r.headers().contains_key(WWW_AUTHENTICATE));
        let r = ApiError::Domain(Error::Overloaded("full".into())).into_response();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(r.headers().contains_key(RETRY_AFTER));
    }
}
