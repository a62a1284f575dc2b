//! The JSON API under `/api`: its shared state, errors, request checks
//! (the CSRF rule) and routes.

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Extension, Router};
use sandgraph_core::RunError;
use sandgraph_router::Journal;
use sandgraph_server::{Context, Principal};
use sandgraph_store::StoreError;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::assets::security_headers;
use crate::runs::Runs;
use crate::{StudioOptions, agent_graphs, bound, graphs, journal, runs, threads};

/// The header every state-changing request must carry (with value `1`): a
/// cross-site form cannot set it, and a cross-origin script that sets it
/// must first pass a CORS preflight, which the server never grants.
pub(crate) const STUDIO_HEADER: &str = "x-sandgraph-studio";

/// What every handler shares.
pub(crate) struct Studio {
    pub(crate) server: Context,
    pub(crate) journal: Option<Journal>,
    pub(crate) runs: Runs,
    /// The principal keys of [`StudioOptions::operators`].
    pub(crate) operators: HashSet<String>,
}

impl Studio {
    /// Whether `principal` is a studio operator (sees every mounted
    /// graph).
    pub(crate) fn is_operator(&self, principal: &Principal) -> bool {
        self.operators.contains(&principal.to_string())
    }
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

    /// `400 invalid_request`.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
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
pub(crate) fn router(server: Context, options: StudioOptions) -> Router {
    let studio = Arc::new(Studio {
        server,
        journal: options.journal,
        runs: Runs::default(),
        operators: options.operators.into_iter().collect(),
    });
    let thread = "/api/threads/{graph}/{thread}";
    Router::new()
        .route("/api/session", get(session))
        .route("/api/graphs", get(graphs::list))
        .route("/api/graphs/{name}", get(graphs::detail))
        .route("/api/graphs/{name}/runs", post(runs::start))
        .route("/api/runs/{run_id}/cancel", post(runs::cancel))
        .route("/api/threads", get(threads::list))
        .route(thread, get(threads::state))
        .route(&format!("{thread}/history"), get(threads::history))
        .route(&format!("{thread}/fork"), post(threads::fork))
        .route(&format!("{thread}/state"), post(threads::update))
        .route(&format!("{thread}/resume"), post(runs::resume))
        .route("/api/journal", get(journal::list))
        .route("/api/agent-graphs", get(agent_graphs::list))
        .route("/api/agent-graphs/{id}", get(agent_graphs::detail))
        .route("/api/{*rest}", any(no_route))
        .with_state(studio)
        .layer(middleware::from_fn(check_request))
}

/// A JSON request body: `T`, with an empty body read as `{}`.
pub(crate) fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        &b"{}"[..]
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(format!(
            "the request body: {}",
            bound::error(&e.to_string())
        ))
    })
}

/// The value of `key` in the query of `uri`, percent-decoded; `None` when
/// absent.
pub(crate) fn query_param(uri: &Uri, key: &str) -> Result<Option<String>, ApiError> {
    let Some(query) = uri.query() else {
        return Ok(None);
    };
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == key {
            return percent_decode(v).map(Some).ok_or_else(|| {
                ApiError::invalid(format!(
                    "the query parameter {key} is not valid percent-encoded utf-8"
                ))
            });
        }
    }
    Ok(None)
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// `?limit=N` of `uri`: `default` when absent, at most `max`.
pub(crate) fn limit(uri: &Uri, default: usize, max: usize) -> Result<usize, ApiError> {
    match query_param(uri, "limit")? {
        None => Ok(default),
        Some(n) => match n.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n.min(max)),
            _ => Err(ApiError::invalid(format!(
                "limit must be a whole number from 1 to {max}"
            ))),
        },
    }
}

/// Runs the store call `f` on a blocking thread.
pub(crate) async fn blocking<T, F>(f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ApiError> + Send + 'static,
{
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the store task failed: {e}"),
        )
    })?
}

/// A store failure as an API error; unknown threads and checkpoints are
/// `404`, a thread a run is writing `409`.
pub(crate) fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::UnknownThread { .. } => ApiError::not_found("no such thread"),
        StoreError::UnknownCheckpoint { id, .. } => ApiError::not_found(format!(
            "the thread has no checkpoint \"{}\"",
            bound::name(&id)
        )),
        StoreError::InvalidCheckpointId { .. } => {
            ApiError::invalid("a checkpoint id is 16 lowercase hex digits")
        }
        StoreError::ThreadBusy { .. } => ApiError::new(
            StatusCode::CONFLICT,
            "thread_busy",
            "a run is writing the thread; try again when it ends",
        ),
        StoreError::StaleCheckpoint { .. } | StoreError::GraphMismatch { .. } => ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            bound::error(&e.to_string()),
        ),
        other => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "storage",
            bound::error(&other.to_string()),
        ),
    }
}

/// A failed graph operation (load, update) as an API error with the run's
/// code: `400` for a refused input, else `500`.
pub(crate) fn run_error(e: RunError) -> ApiError {
    let code = e.code.as_str().to_ascii_lowercase();
    let status = match code.as_str() {
        "invalid_input" | "invalid_args" | "invalid_update" | "validation" => {
            StatusCode::BAD_REQUEST
        }
        "thread_busy" => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError::new(status, &code, bound::error(&e.message))
}

/// The stored id of the caller's thread `name` of `graph`, on a server
/// that keeps threads.
pub(crate) fn thread_id(
    studio: &Studio,
    principal: &Principal,
    name: &str,
    graph: &str,
) -> Result<String, ApiError> {
    if studio.server.threads().is_none() {
        return Err(no_threads());
    }
    sandgraph_server::thread_key(Some(principal), name, graph)
        .map_err(|e| ApiError::invalid(e.to_string()))
}

/// `409 no_threads`.
pub(crate) fn no_threads() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "no_threads",
        "this server keeps no durable threads: start it with --store",
    )
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
    fn query_parameters_are_percent_decoded_and_limits_bounded() {
        let uri: Uri = "/api/x?cursor=a%2Fb+c&limit=900".parse().unwrap();
        assert_eq!(
            query_param(&uri, "cursor").unwrap().as_deref(),
            Some("a/b c")
        );
        assert_eq!(query_param(&uri, "other").unwrap(), None);
        assert_eq!(limit(&uri, 10, 500).unwrap(), 500);
        assert_eq!(limit(&"/api/x".parse().unwrap(), 10, 500).unwrap(), 10);
        for bad in ["/api/x?limit=0", "/api/x?limit=-1", "/api/x?limit=%zz"] {
            assert!(limit(&bad.parse().unwrap(), 10, 500).is_err(), "{bad}");
        }
        assert!(query_param(&"/api/x?cursor=%ff".parse().unwrap(), "cursor").is_err());
    }

    #[test]
    fn an_empty_body_is_an_empty_object() {
        let v: Value = parse_body(b"  ").unwrap();
        assert_eq!(v, json!({}));
        let e = parse_body::<Value>(b"{").unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn cross_site_requests_are_refused() {
        let h = headers(&[("sec-fetch-site", "cross-site")]);
        assert!(refusal(&Method::GET, &h).is_some());
        let h = headers(&[("sec-fetch-site", "same-origin")]);
        assert_eq!(refusal(&Method::GET, &h), None);
    }
}
