//! `/docs`: the interactive API reference. A small hand-written page (`assets/docs/`, compiled
//! into the binary: nothing is fetched at build or run time) that renders `/openapi.json` and
//! sends "Try it" requests with a token typed into the page. Descriptions show their inline
//! code as code; operations whose only security requirement is the admin token carry an
//! `admin` mark. No token is needed to read it: the document is public. Served with a CSP that
//! allows only this origin, and `nosniff`.

use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::response::IntoResponse;

const PAGE: &str = include_str!("../../assets/docs/index.html");
const SCRIPT: &str = include_str!("../../assets/docs/docs.js");
const STYLE: &str = include_str!("../../assets/docs/docs.css");

/// Scripts, styles and requests from this origin only; no inline code, no frames, no forms.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                       connect-src 'self'; img-src 'self'; base-uri 'none'; \
                       form-action 'none'; frame-ancestors 'none'";

/// Where the page loads its script and style from (the page names them).
pub const SCRIPT_PATH: &str = "/docs/docs.js";
pub const STYLE_PATH: &str = "/docs/docs.css";

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (CONTENT_TYPE, content_type),
            (CONTENT_SECURITY_POLICY, CSP),
            (X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (X_FRAME_OPTIONS, "DENY"),
            (REFERRER_POLICY, "no-referrer"),
            // Small and part of the binary: revalidating costs little and a new version shows.
            (CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

/// This API's interactive reference (HTML; renders `/openapi.json`).
#[utoipa::path(get, path = "/docs", tag = "ops",
    responses((status = 200, description = "The reference page", body = String,
               content_type = "text/html")))]
pub async fn page() -> impl IntoResponse {
    asset("text/html; charset=utf-8", PAGE)
}

/// The page's script.
pub async fn script() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// The page's style sheet.
pub async fn style() -> impl IntoResponse {
    asset("text/css; charset=utf-8", STYLE)
}
