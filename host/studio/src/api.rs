//! The JSON API under `/api`: its shared state, errors, request checks
//! (the CSRF rule) and routes.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Router};
use sandgraph_mcp::{McpServer, Principal};
use sandgraph_store::Journal;
use serde_json::{Value, json};

use crate::StudioOptions;
use crate::assets::security_headers;

/// The header every state-changing request must carry (with value `1`): a
/// cross-site form cannot set it, and a cross-origin script that sets it
/// must first pass a CORS preflight, which the server never grants.
pub(crate) const STUDIO_HEADER: &str = "x-sandgraph-studio";

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct Studio {
    pub(crate) server: McpServer,
    pub(crate) journal: Option<Journal>,
}

/// An API failure: `{"error": {"code", "message"}}` with `status`.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: String,
    pub(crate) message: String,
}

impl ApiError {
    /// A failure with `status` and `code`.
    pub(crate) fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code: code.to_owned(),
            message: message.into(),
        }
    }

    /// `404 not_found`.
    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        (self.status, json_body(&body)).into_response()
    }
}

/// `value` as an `application/json` response.
pub(crate) fn json_body(value: &Value) -> Response {
    let mut resp = value.to_string().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The API's routes over `server`, behind [`check_request`].
pub(crate) fn router(server: McpServer, options: StudioOptions) -> Router {
    let studio = Arc::new(Studio {
        server,
        journal: options.journal,
    });
    Router::new()
        .route("/api/session", get(session))
        .route("/api/{*rest}", axum::routing::any(no_route))
        .with_state(studio)
        .layer(middleware::from_fn(check_request))
}

/// The CSRF rule, and the headers of every API response: a request a
/// browser marks as cross-site is refused; a `POST` needs
/// [`STUDIO_HEADER`] `1` and a JSON content type. Answers are never
/// cached.
async fn check_request(req: Request, next: Next) -> Response {
    let mut resp = match refusal(req.method(), req.headers()) {
        Some(why) => ApiError::new(StatusCode::FORBIDDEN, "forbidden", why).into_response(),
        None => next.run(req).await,
    };
    let h = resp.headers_mut();
    security_headers(h);
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// Why a request is refused by the CSRF rule, if it is.
fn refusal(method: &Method, headers: &HeaderMap) -> Option<&'static str> {
    let cross_site = headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"));
    if cross_site {
        return Some("cross-site requests are refused");
    }
    if method != Method::POST {
        return None;
    }
    if headers
        .get(STUDIO_HEADER)
        .is_none_or(|v| v.as_bytes() != b"1")
    {
        return Some("a state-changing request needs the header X-Sandgraph-Studio: 1");
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Some("a state-changing request needs Content-Type: application/json");
    }
    None
}

/// `GET /api/session`: who the caller is and what the server keeps.
async fn session(
    axum::extract::State(studio): axum::extract::State<Arc<Studio>>,
    Extension(principal): Extension<Principal>,
) -> Response {
    json_body(&json!({
        "principal": principal.to_string(),
        "version": env!("CARGO_PKG_VERSION"),
        "threads": studio.server.threads().is_some(),
        "controller": studio.server.has_controller(),
        "journal": studio.journal.is_some(),
    }))
}

/// Any other path under `/api`.
async fn no_route() -> ApiError {
    ApiError::not_found("no such studio api route")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn a_post_needs_the_studio_header_and_json() {
        let ok = [
            (STUDIO_HEADER, "1"),
            ("content-type", "application/json; charset=utf-8"),
        ];
        assert_eq!(refusal(&Method::POST, &headers(&ok)), None);
        assert!(refusal(&Method::POST, &headers(&ok[1..])).is_some());
        let form = [(STUDIO_HEADER, "1"), ("content-type", "text/plain")];
        assert!(refusal(&Method::POST, &headers(&form)).is_some());
        assert!(refusal(&Method::POST, &headers(&[(STUDIO_HEADER, "1")])).is_some());
        assert_eq!(refusal(&Method::GET, &headers(&[])), None);
    }

    #[test]
    fn cross_site_requests_are_refused() {
        let h = headers(&[("sec-fetch-site", "cross-site")]);
        assert!(refusal(&Method::GET, &h).is_some());
        let h = headers(&[("sec-fetch-site", "same-origin")]);
        assert_eq!(refusal(&Method::GET, &h), None);
    }
}
