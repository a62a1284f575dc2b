//! Extra routes the HTTP server mounts next to `/mcp` (the studio web app
//! of `sandgraph-studio`): public routes for a static shell that carries
//! no data, and `/api` routes that are authenticated exactly like `/mcp`.
//!
//! Both pass the same Host and Origin allow-lists as `/mcp` (the checks
//! rmcp applies to its own endpoint, repeated here because these routes
//! are not rmcp's), the connection limits of the listener, and the body
//! limit. The API routes also get the caller's [`Principal`] as a request
//! extension and are counted as running requests for the graceful
//! shutdown. None of the MCP session bookkeeping applies to them.

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::uri::Authority;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use crate::http::{Guard, principal_of};
use crate::principal::Principal;

/// Routes served beside `/mcp` when [`HttpOptions::ui`](crate::HttpOptions)
/// is set. Paths are absolute (`/`, `/assets/app.js`, `/api/graphs`); the
/// two routers must not overlap each other or `/mcp`.
#[derive(Debug, Clone, Default)]
pub struct UiRoutes {
    /// Served to anyone who passes the Host/Origin checks: no token is
    /// asked for (a browser navigation cannot send one), so these routes
    /// must serve no data.
    pub public: Router,
    /// Served only to authenticated callers when the server has tokens
    /// (401 otherwise, with a JSON error); handlers find the caller's
    /// [`Principal`] in the request extensions.
    pub api: Router,
}

/// The `Host` and `Origin` values accepted: the same lists as `/mcp`'s.
#[derive(Debug, Clone)]
pub(crate) struct Allowed {
    pub(crate) hosts: Vec<String>,
    pub(crate) origins: Vec<String>,
}

/// `ui`'s routers behind the Host/Origin check, the API routes also behind
/// the bearer authentication of `guard` and the body limit.
pub(crate) fn mount(ui: UiRoutes, allowed: Allowed, guard: Guard, max_body: usize) -> Router {
    let api = ui
        .api
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn_with_state(guard, authenticate));
    ui.public.merge(api).layer(middleware::from_fn_with_state(
        std::sync::Arc::new(allowed),
        check_origin,
    ))
}

/// A JSON error in the studio API's shape:
/// `{"error": {"code": "...", "message": "..."}}`.
pub(crate) fn json_error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = serde_json::json!({"error": {"code": code, "message": message}});
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Refuses a request whose `Host` is not allowed or whose `Origin`, when
/// present, is not (DNS rebinding, cross-site requests).
async fn check_origin(
    State(allowed): State<std::sync::Arc<Allowed>>,
    req: Request,
    next: Next,
) -> Response {
    if let Err(why) = allowed.check(req.headers(), req.uri()) {
        return json_error(StatusCode::FORBIDDEN, "forbidden", why);
    }
    next.run(req).await
}

/// Authenticates an API request as `/mcp` does, puts its [`Principal`] in
/// its extensions, and counts it until its response body is sent.
async fn authenticate(State(g): State<Guard>, mut req: Request, next: Next) -> Response {
    let principal: Principal = match principal_of(&g, &req) {
        Ok(p) => p,
        Err(why) => {
            let mut resp = json_error(StatusCode::UNAUTHORIZED, "unauthorized", why);
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"sandgraph\""),
            );
            return resp;
        }
    };
    req.extensions_mut().insert(principal);
    let counted = g.requests.enter();
    let (parts, body) = next.run(req).await.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        let _ = &counted;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}

impl Allowed {
    /// Why `headers` are refused, if they are.
    fn check(&self, headers: &HeaderMap, uri: &axum::http::Uri) -> Result<(), &'static str> {
        let host = match headers.get(header::HOST) {
            Some(h) => h
                .to_str()
                .ok()
                .and_then(|h| Authority::try_from(h).ok())
                .ok_or("the Host header is malformed")?,
            None => uri
                .authority()
                .cloned()
                .ok_or("the request has no Host header")?,
        };
        let host = (normalize_host(host.host()), host.port_u16());
        if !self.hosts.iter().any(|a| host_matches(a, &host)) {
            return Err("the Host header is not allowed");
        }
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let origin = origin
            .to_str()
            .ok()
            .and_then(parse_origin)
            .ok_or("the Origin header is malformed")?;
        if !self.origins.iter().any(|a| origin_matches(a, &origin)) {
            return Err("the Origin header is not allowed");
        }
        Ok(())
    }
}

fn normalize_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// Whether the allow-list entry `allowed` (`name` for any port, or
/// `name:port`) accepts `host`.
fn host_matches(allowed: &str, host: &(String, Option<u16>)) -> bool {
    let allowed = allowed.trim();
    let (name, port) = match Authority::try_from(allowed) {
        Ok(a) => (normalize_host(a.host()), a.port_u16()),
        Err(_) => (normalize_host(allowed), None),
    };
    name == host.0 && port.is_none_or(|p| host.1 == Some(p))
}

/// An origin: scheme, host and port (`None`: the scheme's default).
type Origin = (String, String, Option<u16>);

fn parse_origin(value: &str) -> Option<Origin> {
    let uri = axum::http::Uri::try_from(value.trim()).ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let authority = uri.authority()?;
    Some((
        scheme,
        normalize_host(authority.host()),
        authority.port_u16(),
    ))
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// Whether the allow-list entry `allowed` (`scheme://host:port`,
/// `scheme://host:*` for any port, or without a port: any port, as rmcp
/// still accepts) accepts `origin`.
fn origin_matches(allowed: &str, origin: &Origin) -> bool {
    let allowed = allowed.trim();
    let (base, any_port) = match allowed.strip_suffix(":*") {
        Some(base) => (base, true),
        None => (allowed, false),
    };
    let Some((scheme, host, port)) = parse_origin(base) else {
        return false;
    };
    if any_port && port.is_some() {
        return false;
    }
    let port_ok = match port {
        None => true,
        Some(p) => origin.2.or_else(|| default_port(&origin.0)) == Some(p),
    };
    scheme == origin.0 && host == origin.1 && port_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed() -> Allowed {
        Allowed {
            hosts: vec![
                "localhost:8808".into(),
                "127.0.0.1:8808".into(),
                "[::1]:8808".into(),
                "studio.internal".into(),
            ],
            origins: vec![
                "http://localhost:8808".into(),
                "https://app.example:*".into(),
            ],
        }
    }

    fn check(host: &str, origin: Option<&str>) -> Result<(), &'static str> {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        if let Some(o) = origin {
            h.insert(header::ORIGIN, HeaderValue::from_str(o).unwrap());
        }
        allowed().check(&h, &axum::http::Uri::from_static("/"))
    }

    #[test]
    fn hosts_match_on_name_and_port() {
        assert!(check("localhost:8808", None).is_ok());
        assert!(check("[::1]:8808", None).is_ok());
        assert!(check("LOCALHOST:8808", None).is_ok());
        assert!(check("studio.internal:1", None).is_ok());
        assert!(check("localhost:8809", None).is_err());
        assert!(check("evil.example:8808", None).is_err());
    }

    #[test]
    fn origins_match_on_scheme_host_and_port() {
        assert!(check("localhost:8808", Some("http://localhost:8808")).is_ok());
        assert!(check("localhost:8808", Some("https://app.example:9")).is_ok());
        assert!(check("localhost:8808", Some("https://app.example")).is_ok());
        assert!(check("localhost:8808", Some("http://localhost:8809")).is_err());
        assert!(check("localhost:8808", Some("https://evil.example")).is_err());
        assert!(check("localhost:8808", Some("null")).is_err());
    }
}
