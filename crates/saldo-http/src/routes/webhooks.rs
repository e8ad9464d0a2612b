//! Webhook subscriptions (admin token only): create (the signing secret answered once, never
//! again: it is derived from the service's webhook key, not stored), list, get, delete, resume a
//! failing one, and the delivery log. The target's addresses are checked at creation (and again
//! at every connection by the worker): a loopback, private, link-local or unspecified address is
//! refused (422 `webhook-target-refused`) unless the service runs with
//! `--webhook-allow-private-targets`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use saldo::events::Cursor;
use saldo::webhooks::{
    self, admin, Delivery, NewSubscription, Subscription, DEFAULT_DELIVERIES_PAGE,
    MAX_DELIVERIES_PAGE, MAX_TYPES, MAX_URL_BYTES,
};
use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{Array, Object, Schema, SchemaType, Type};
use utoipa::{IntoParams, ToSchema};

use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::task::detached;
use crate::auth::Admin;
use crate::error::{ApiError, Problem, PROBLEM_JSON};
use crate::state::AppState;

/// A new subscription.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhookBody {
    #[schema(schema_with = webhook_url)]
    pub url: String,
    #[serde(default)]
    #[schema(schema_with = event_types)]
    pub types: Vec<String>,
    #[schema(schema_with = after_cursor)]
    pub after: Option<String>,
}

fn webhook_url() -> Schema {
    Object::builder()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(MAX_URL_BYTES))
        .description(Some(
            "Where to POST: an absolute http or https URL (https recommended), no userinfo, no \
             fragment, resolving to public addresses only (unless the service allows private \
             targets)",
        ))
        .examples(Some("https://192.0.2.10/hooks/saldo"))
        .build()
        .into()
}

fn event_types() -> Schema {
    let item = Object::builder()
        .schema_type(Type::String)
        .enum_values(Some(webhooks::event_types()))
        .build();
    let mut array = Array::new(item);
    array.max_items = Some(MAX_TYPES);
    array.description = Some("Event types to deliver; absent or empty: every type".to_owned());
    array.into()
}

fn after_cursor() -> Schema {
    Object::builder()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .pattern(Some("^e2\\.[0-9a-f]{1,15}$"))
        .description(Some(
            "Start after this feed cursor, at most the feed's end; absent: at the feed's end",
        ))
        .build()
        .into()
}

/// A subscription (never its secret).
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookView {
    pub id: String,
    pub url: String,
    pub types: Vec<String>,
    /// `active` or `failing` (attempts ran out: resume it).
    pub status: String,
    /// The last feed event delivered.
    pub cursor: String,
    /// Failed attempts of the batch now due.
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    /// The last failure (no URL query, no secret).
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl From<Subscription> for WebhookView {
    fn from(s: Subscription) -> Self {
        WebhookView {
            id: s.id.to_string(),
            url: s.url,
            types: s.types,
            status: s.status.as_str().to_owned(),
            cursor: s.cursor.to_string(),
            attempts: s.attempts,
            next_attempt_at: s.next_attempt_at,
            last_error: s.last_error,
            created_at: s.created_at,
        }
    }
}

/// A new subscription with its signing secret: shown this once.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedWebhookView {
    pub id: String,
    pub url: String,
    pub types: Vec<String>,
    pub status: String,
    pub cursor: String,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    /// The signing secret (64 hex characters): `Saldo-Signature: t=<unix s>,v1=<hex
    /// HMAC-SHA256(secret, "<t>.<body>")>`. Not retrievable later.
    pub secret: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WebhooksView {
    pub webhooks: Vec<WebhookView>,
}

/// One delivery attempt.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryView {
    pub id: String,
    pub at: DateTime<Utc>,
    pub first_cursor: String,
    pub last_cursor: String,
    pub events: i32,
    pub attempt: i32,
    /// `ok`, `http_status`, `redirect`, `timeout`, `connect`, `target_refused`,
    /// `cursor_expired`, `error`.
    pub outcome: String,
    pub http_status: Option<i32>,
    pub duration_ms: i64,
}

impl From<Delivery> for DeliveryView {
    fn from(d: Delivery) -> Self {
        DeliveryView {
            id: d.id.to_string(),
            at: d.at,
            first_cursor: d.first_cursor.to_string(),
            last_cursor: d.last_cursor.to_string(),
            events: d.events,
            attempt: d.attempt,
            outcome: d.outcome,
            http_status: d.http_status,
            duration_ms: d.duration_ms,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveriesView {
    /// Newest first.
    pub deliveries: Vec<DeliveryView>,
}

/// The subscription a route names.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct WebhookPath {
    /// Subscription id (a UUID).
    #[param(
        min_length = 36,
        max_length = 36,
        pattern = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
    )]
    pub id: String,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeliveriesQuery {
    /// Rows (default 50, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// Subscribe a URL to the event feed.
#[utoipa::path(post, path = "/v1/admin/webhooks", tag = "admin",
    request_body = CreateWebhookBody,
    security(("admin_token" = [])),
    responses(
        (status = 201, description = "Created; `secret` is shown this once", body = CreatedWebhookView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 409, description = "At most 100 subscriptions (`too-many-webhooks`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 410, description = "`after` is older than the events kept", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Bad URL, unknown type, bad cursor, or a refused target (`webhook-target-refused`)", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "This service's webhook key is not the database's (`webhook-key-mismatch`)", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn create_webhook(
    _: Admin,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateWebhookBody>,
) -> Result<(StatusCode, Json<CreatedWebhookView>), ApiError> {
    let after = body
        .after
        .as_deref()
        .map(str::parse::<Cursor>)
        .transpose()
        .map_err(saldo::Error::from)?;
    let new = NewSubscription {
        url: body.url,
        types: body.types,
        after,
    };
    let store = state.store().clone();
    let hooks = state.settings.webhooks.clone();
    let allow_private = hooks.allow_private_targets;
    let fingerprint = hooks.key.fingerprint();
    let created =
        detached(async move { admin::create(&store, new, allow_private, &fingerprint).await })
            .await?;
    let secret = hooks.key.secret(&created.id);
    let w = WebhookView::from(created);
    Ok((
        StatusCode::CREATED,
        Json(CreatedWebhookView {
            id: w.id,
            url: w.url,
            types: w.types,
            status: w.status,
            cursor: w.cursor,
            attempts: w.attempts,
            next_attempt_at: w.next_attempt_at,
            last_error: w.last_error,
            created_at: w.created_at,
            secret,
        }),
    ))
}

/// Every subscription, oldest first.
#[utoipa::path(get, path = "/v1/admin/webhooks", tag = "admin",
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The subscriptions (no secrets)", body = WebhooksView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn list_webhooks(
    _: Admin,
    State(state): State<AppState>,
) -> Result<Json<WebhooksView>, ApiError> {
    let store = state.store().clone();
    let all = detached(async move { admin::list(&store).await }).await?;
    Ok(Json(WebhooksView {
        webhooks: all.into_iter().map(Into::into).collect(),
    }))
}

/// One subscription (without its secret).
#[utoipa::path(get, path = "/v1/admin/webhooks/{id}", tag = "admin",
    params(WebhookPath),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The subscription", body = WebhookView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown webhook", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Bad id", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn get_webhook(
    _: Admin,
    State(state): State<AppState>,
    ApiPath(WebhookPath { id }): ApiPath<WebhookPath>,
) -> Result<Json<WebhookView>, ApiError> {
    let id = webhooks::parse_id(&id).map_err(saldo::Error::from)?;
    let store = state.store().clone();
    let found = detached(async move { admin::get(&store, id).await }).await?;
    Ok(Json(found.into()))
}

/// Delete a subscription and its delivery log (a batch in flight may still arrive).
#[utoipa::path(delete, path = "/v1/admin/webhooks/{id}", tag = "admin",
    params(WebhookPath),
    security(("admin_token" = [])),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown webhook", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Bad id", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn delete_webhook(
    _: Admin,
    State(state): State<AppState>,
    ApiPath(WebhookPath { id }): ApiPath<WebhookPath>,
) -> Result<StatusCode, ApiError> {
    let id = webhooks::parse_id(&id).map_err(saldo::Error::from)?;
    let store = state.store().clone();
    detached(async move { admin::delete(&store, id).await }).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Back to `active` with the attempts reset: the batch due is sent again at once.
#[utoipa::path(post, path = "/v1/admin/webhooks/{id}/resume", tag = "admin",
    params(WebhookPath),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "Resumed", body = WebhookView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown webhook", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Bad id", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn resume_webhook(
    _: Admin,
    State(state): State<AppState>,
    ApiPath(WebhookPath { id }): ApiPath<WebhookPath>,
) -> Result<Json<WebhookView>, ApiError> {
    let id = webhooks::parse_id(&id).map_err(saldo::Error::from)?;
    let store = state.store().clone();
    let resumed = detached(async move { admin::resume(&store, id).await }).await?;
    Ok(Json(resumed.into()))
}

/// A subscription's delivery attempts, newest first (the last 1000 are kept).
#[utoipa::path(get, path = "/v1/admin/webhooks/{id}/deliveries", tag = "admin",
    params(WebhookPath, DeliveriesQuery),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "Newest first", body = DeliveriesView),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = PROBLEM_JSON),
        (status = 404, description = "Unknown webhook", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "Bad id or limit", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn list_webhook_deliveries(
    _: Admin,
    State(state): State<AppState>,
    ApiPath(WebhookPath { id }): ApiPath<WebhookPath>,
    ApiQuery(query): ApiQuery<DeliveriesQuery>,
) -> Result<Json<DeliveriesView>, ApiError> {
    let id = webhooks::parse_id(&id).map_err(saldo::Error::from)?;
    let limit = query.limit.unwrap_or(DEFAULT_DELIVERIES_PAGE as i64);
    if !(1..=MAX_DELIVERIES_PAGE as i64).contains(&limit) {
        return Err(ApiError::InvalidParameter(format!(
            "limit must be 1..={MAX_DELIVERIES_PAGE}, got {limit}"
        )));
    }
    let store = state.store().clone();
    let log = detached(async move { admin::deliveries(&store, id, limit as usize).await }).await?;
    Ok(Json(DeliveriesView {
        deliveries: log.into_iter().map(Into::into).collect(),
    }))
}
