//! The event feed over HTTP: `GET /v1/events` (a page after a cursor) and
//! `GET /v1/events/stream` (the live tail as Server-Sent Events, see
//! [`crate::event_streams`]). Same auth as the other reads: the API token (or the admin token).
//!
//! Both take `after` (a cursor a page or an event handed out, `start` or `end`), `type` (may
//! repeat, or be comma-separated; known types only) and `stream` (`product:42`); the page also
//! takes `limit`. The query is read as a list of pairs, so a repeated `type` is kept and an
//! unknown parameter is refused (422) as the other lists do.

use std::convert::Infallible;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use saldo::events::{self, Cursor, Filter, Page};
use saldo::listing::PageLimit;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::extract::ApiQuery;
use super::schema;
use super::task::detached;
use crate::auth::Client;
use crate::error::{ApiError, Problem, PROBLEM_JSON};
use crate::event_streams::{Item, HEARTBEAT};
use crate::state::AppState;

/// Query pairs one request may carry at most (each `type` counts).
pub const MAX_QUERY_PAIRS: usize = 32;
/// The header a reconnecting `EventSource` sends: the `id` of the last event it received.
pub const LAST_EVENT_ID: &str = "last-event-id";

/// The parameters of `GET /v1/events` (for the document; read as pairs, see the module header).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Absent: from the oldest event kept.
    #[param(schema_with = schema::events_after)]
    pub after: Option<String>,
    #[param(schema_with = schema::page_limit)]
    pub limit: Option<i64>,
    #[serde(rename = "type")]
    #[param(rename = "type", schema_with = schema::event_types, style = Form, explode)]
    pub types: Option<Vec<String>>,
    #[param(schema_with = schema::event_stream)]
    pub stream: Option<String>,
}

/// The parameters of `GET /v1/events/stream`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// Absent: from the end. The `Last-Event-ID` header, when sent, wins.
    #[param(schema_with = schema::events_after)]
    pub after: Option<String>,
    #[serde(rename = "type")]
    #[param(rename = "type", schema_with = schema::event_types, style = Form, explode)]
    pub types: Option<Vec<String>>,
    #[param(schema_with = schema::event_stream)]
    pub stream: Option<String>,
}

/// One event of the feed.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventView {
    /// This event's cursor: pass it as `after` (or `Last-Event-ID`) to read what follows it.
    pub cursor: String,
    /// Its number in the feed (increasing, never reused).
    pub seq: i64,
    /// The event's own id (unique; not its place in the feed).
    pub id: i64,
    /// `stock.changed`, `reservation.created`, `reservation.confirmed`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// `product:42`, `order:o-1`, `sale:s-1`, `account:5`, `transfer:t-1`.
    pub stream: String,
    /// Its position in its stream: 1, 2, … without gaps.
    pub position: i64,
    pub at: DateTime<Utc>,
    /// The state after the change.
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
}

impl From<events::Event> for EventView {
    fn from(e: events::Event) -> Self {
        EventView {
            cursor: e.cursor,
            seq: e.seq,
            id: e.id,
            kind: e.kind,
            stream: e.stream,
            position: e.position,
            at: e.at,
            data: e.data,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EventsPage {
    /// In feed order; each stream's in position order. Fewer than `limit` (even none) when the
    /// reader is at the end, or when a filter skipped events (a page looks at a bounded number).
    pub events: Vec<EventView>,
    /// Pass as `after` for the next page (the same cursor when nothing new was readable yet).
    pub next: String,
}

/// Where to start: after a cursor, from the oldest event kept, or from the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    After(Cursor),
    Oldest,
    End,
}

fn start(raw: &str) -> Result<Start, ApiError> {
    Ok(match raw {
        "start" => Start::Oldest,
        "end" => Start::End,
        cursor => Start::After(cursor.parse()?),
    })
}

/// A request's parameters, checked.
struct Params {
    after: Option<Start>,
    limit: Option<PageLimit>,
    filter: Filter,
}

/// Reads the query pairs: `limit` only where `with_limit`; unknown or repeated (but `type`)
/// parameters refused.
fn params(pairs: Vec<(String, String)>, with_limit: bool) -> Result<Params, ApiError> {
    if pairs.len() > MAX_QUERY_PAIRS {
        return Err(ApiError::InvalidParameter(format!(
            "at most {MAX_QUERY_PAIRS} query parameters"
        )));
    }
    let mut out = Params {
        after: None,
        limit: None,
        filter: Filter::default(),
    };
    let mut types: Vec<String> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for (key, value) in pairs {
        if key != "type" && seen.contains(&key) {
            return Err(ApiError::InvalidParameter(format!("`{key}` given twice")));
        }
        match key.as_str() {
            "after" => out.after = Some(start(&value)?),
            "limit" if with_limit => {
                let n: i64 = value.parse().map_err(|_| {
                    ApiError::InvalidParameter(format!("limit {value:?} is not an integer"))
                })?;
                out.limit = Some(PageLimit::new(n)?);
            }
            "type" => types.extend(value.split(',').map(str::to_owned)),
            "stream" => out.filter.stream = Some(events::parse_stream(&value)?),
            _ => {
                let known = if with_limit {
                    "after, limit, type, stream"
                } else {
                    "after, type, stream"
                };
                return Err(ApiError::InvalidParameter(format!(
                    "unknown parameter `{}`; known: {known}",
                    key.chars().take(64).collect::<String>()
                )));
            }
        }
        seen.push(key);
    }
    out.filter.types = events::parse_types(types.iter().map(String::as_str))?;
    Ok(out)
}

/// Reads one page after `start`; answers where it read from (`None`: the oldest kept).
async fn read(
    state: &AppState,
    start: Start,
    limit: usize,
    filter: Filter,
) -> Result<(Option<Cursor>, Page), ApiError> {
    let store = state.store().clone();
    detached(async move {
        let after = match start {
            Start::After(c) => Some(c),
            Start::Oldest => None,
            Start::End => Some(events::end(&store).await?),
        };
        let page = events::read(&store, after, limit, &filter).await?;
        Ok((after, page))
    })
    .await
}

/// A page of the event feed after a cursor.
#[utoipa::path(get, path = "/v1/events", tag = "events",
    params(EventsQuery),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "One page of the feed", body = EventsPage),
        (status = 410, description = "The cursor is older than the events kept: resynchronise from the list endpoints, then follow from `after=end`", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "A cursor this feed did not hand out, `limit` out of range, an unknown type or parameter, a malformed stream", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn list_events(
    _: Client,
    State(state): State<AppState>,
    ApiQuery(pairs): ApiQuery<Vec<(String, String)>>,
) -> Result<Json<EventsPage>, ApiError> {
    let p = params(pairs, true)?;
    let limit = p.limit.unwrap_or_default().get() as usize;
    let (_, page) = read(&state, p.after.unwrap_or(Start::Oldest), limit, p.filter).await?;
    Ok(Json(EventsPage {
        events: page.events.into_iter().map(Into::into).collect(),
        next: page.next,
    }))
}

/// The live tail of the feed, as Server-Sent Events.
///
/// Each event: `id:` its cursor, `event:` its type, `data:` the event as JSON (an `EventView`).
/// A comment line every 15 s when nothing happens (more often with short request timeouts). The server may end the stream with a last
/// `event: cut` whose data is `{"reason": …, "resume_after": cursor}` (its `id` is that cursor,
/// so an `EventSource` resumes by itself): `buffer-full` (the client read too slowly),
/// `lifetime`, `shutdown`, `cursor-expired` (resuming answers 410).
#[utoipa::path(get, path = "/v1/events/stream", tag = "events",
    params(StreamQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this cursor (wins over `after`)")),
    security(("api_token" = []), ("admin_token" = [])),
    responses(
        (status = 200, description = "The stream of events", content_type = "text/event-stream", body = String),
        (status = 410, description = "The cursor is older than the events kept", body = Problem, content_type = PROBLEM_JSON),
        (status = 422, description = "A cursor this feed did not hand out, an unknown type or parameter, a malformed stream", body = Problem, content_type = PROBLEM_JSON),
        (status = 503, description = "`too-many-streams`: every stream slot is taken (`Retry-After`)", body = Problem, content_type = PROBLEM_JSON),
    ))]
pub async fn stream_events(
    _: Client,
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(pairs): ApiQuery<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let p = params(pairs, false)?;
    // Often enough that the connection layer never takes a quiet stream for a stalled one.
    let heartbeat = HEARTBEAT.min(state.settings.request_max() / 2);
    let from_header = match headers.get(LAST_EVENT_ID) {
        Some(v) => Some(start(
            v.to_str()
                .map_err(|_| saldo::InputError::CursorInvalid { list: "events" })?
                .trim(),
        )?),
        None => None,
    };
    let start = from_header.or(p.after).unwrap_or(Start::End);
    let slot = state.streams.admit()?;
    let (after, first) = read(
        &state,
        start,
        crate::event_streams::STREAM_PAGE,
        p.filter.clone(),
    )
    .await?;
    let rx = state
        .streams
        .spawn(slot, state.store().clone(), p.filter, after, first);
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        let item = rx.recv().await?;
        Some((Ok::<_, Infallible>(sse_event(item)), rx))
    });
    Ok(Sse::new(body)
        .keep_alive(KeepAlive::new().interval(heartbeat).text("heartbeat"))
        .into_response())
}

/// One item as an SSE message.
fn sse_event(item: Item) -> SseEvent {
    match item {
        Item::Event(e) => {
            let id = e.cursor.clone();
            let kind = e.kind.clone();
            let data = serde_json::to_string(&EventView::from(*e)).unwrap_or_default();
            SseEvent::default().id(id).event(kind).data(data)
        }
        Item::Cut {
            reason,
            resume_after,
        } => {
            let resume = resume_after.map_or_else(|| "start".to_owned(), |c| c.to_string());
            SseEvent::default().id(resume.clone()).event("cut").data(
                serde_json::json!({ "reason": reason.as_str(), "resume_after": resume })
                    .to_string(),
            )
        }
    }
}
