//! Outgoing HTTP requests from a node, through the host's `wasi:http`.
//!
//! ```no_run
//! use sandgraph_sdk::serde_json::Value;
//! use sandgraph_sdk::{NodeError, Update, http};
//!
//! fn fetch(state: Value) -> Result<Update, NodeError> {
//!     let repo: Value = http::get("https://api.github.com/repos/rust-lang/rust")?
//!         .error_for_status()?
//!         .json()?;
//!     Ok(Update::new().set("stars", repo["stargazers_count"].clone()))
//! }
//! ```
//!
//! The operator grants the origins a graph may reach
//! (`[graphs.<name>.grants] http = { allow = ["https://api.github.com"] }`,
//! methods `GET` and `HEAD` unless more are granted); any other request
//! fails with [`HttpError::Denied`] and nothing leaves the host. The host
//! follows no redirect: a 3xx comes back as it is, and following it is a
//! new request, checked again. Bodies are capped by the host (1 MiB sent,
//! 8 MiB received by default: [`HttpError::TooLarge`]), and every wait ends
//! at the run's deadline. Every error converts into a node error, so `?`
//! ends the node with it; match on it to handle a case instead.
//!
//! A graph that never calls this module does not import `wasi:http`.

use std::fmt;
use std::time::Duration;

use serde::de::DeserializeOwned;

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The graph's grant does not allow this scheme, host, port or method
    /// (or there is no grant); nothing was sent.
    Denied(String),
    /// The host resolves to addresses the graph may not reach (loopback,
    /// private networks, ...); nothing was sent.
    Prohibited(String),
    /// The URL, method or a header is not valid.
    InvalidRequest(String),
    /// The request or the response body is over the host's cap.
    TooLarge(String),
    /// Resolution, connection or the response took too long, or the run's
    /// deadline came first.
    Timeout(String),
    /// The host could not be resolved or reached, or the connection broke.
    Connection(String),
    /// Anything else (TLS, protocol, a status turned into an error by
    /// [`Response::error_for_status`], a body that is not the expected
    /// text or JSON).
    Failed(String),
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Denied(m) => write!(f, "http request denied: {m}"),
            HttpError::Prohibited(m) => write!(f, "http destination prohibited: {m}"),
            HttpError::InvalidRequest(m) => write!(f, "invalid http request: {m}"),
            HttpError::TooLarge(m) => write!(f, "http body too large: {m}"),
            HttpError::Timeout(m) => write!(f, "http timeout: {m}"),
            HttpError::Connection(m) => write!(f, "http connection failed: {m}"),
            HttpError::Failed(m) => write!(f, "http request failed: {m}"),
        }
    }
}

impl std::error::Error for HttpError {}

impl HttpError {
    /// The case as a short name: `denied`, `prohibited`, `invalid_request`,
    /// `too_large`, `timeout`, `connection`, `failed`.
    pub fn kind(&self) -> &'static str {
        match self {
            HttpError::Denied(_) => "denied",
            HttpError::Prohibited(_) => "prohibited",
            HttpError::InvalidRequest(_) => "invalid_request",
            HttpError::TooLarge(_) => "too_large",
            HttpError::Timeout(_) => "timeout",
            HttpError::Connection(_) => "connection",
            HttpError::Failed(_) => "failed",
        }
    }
}

/// A response: status, headers and the whole body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code (a 3xx is returned as is: redirects are not followed).
    pub status: u16,
    /// The headers, names in lower case, in the order received.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (any case), if it is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    /// The body as UTF-8 text.
    ///
    /// # Errors
    ///
    /// [`HttpError::Failed`] when it is not UTF-8.
    pub fn text(&self) -> Result<&str, HttpError> {
        std::str::from_utf8(&self.body)
            .map_err(|e| HttpError::Failed(format!("the response body is not UTF-8: {e}")))
    }

    /// The body parsed as JSON.
    ///
    /// # Errors
    ///
    /// [`HttpError::Failed`] naming where it does not parse.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, HttpError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            HttpError::Failed(format!("the response body is not the JSON expected: {e}"))
        })
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The response if its status is 2xx.
    ///
    /// # Errors
    ///
    /// [`HttpError::Failed`] naming the status otherwise.
    pub fn error_for_status(self) -> Result<Self, HttpError> {
        if self.is_success() {
            Ok(self)
        } else {
            Err(HttpError::Failed(format!(
                "the server answered {}",
                self.status
            )))
        }
    }
}

/// A request to build and [`send`](Request::send).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    timeout: Option<Duration>,
}

impl Request {
    /// A request with `method` (`"GET"`, `"POST"`, ...) to `url`
    /// (`https://host[:port]/path?query`).
    pub fn new(method: &str, url: &str) -> Self {
        Request {
            method: method.to_owned(),
            url: url.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: None,
        }
    }

    /// Adds a header (`host`, `connection` and the like are set by the host
    /// and refused here).
    pub fn header(mut self, name: &str, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.to_ascii_lowercase(), value.into()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets a JSON body and `content-type: application/json`.
    ///
    /// # Errors
    ///
    /// [`HttpError::InvalidRequest`] when `value` does not serialize.
    pub fn json(self, value: &impl serde::Serialize) -> Result<Self, HttpError> {
        let body = serde_json::to_vec(value)
            .map_err(|e| HttpError::InvalidRequest(format!("cannot serialize the body: {e}")))?;
        Ok(self.header("content-type", "application/json").body(body))
    }

    /// Lowers the connect, first-byte and between-bytes timeouts to `t`
    /// (the host's own are the most a request gets).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// Sends the request and reads the whole response.
    ///
    /// # Errors
    ///
    /// See [`HttpError`].
    pub fn send(self) -> Result<Response, HttpError> {
        imp::send(self)
    }
}

/// `GET url`.
///
/// # Errors
///
/// See [`HttpError`].
pub fn get(url: &str) -> Result<Response, HttpError> {
    Request::new("GET", url).send()
}

/// `method url` with `headers` and `body`.
///
/// # Errors
///
/// See [`HttpError`].
pub fn request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Vec<u8>>,
) -> Result<Response, HttpError> {
    let mut r = Request::new(method, url).body(body);
    for (name, value) in headers {
        r = r.header(name, *value);
    }
    r.send()
}

/// The parts of an absolute URL: scheme, authority, path with query.
fn split_url(url: &str) -> Result<(&str, &str, &str), HttpError> {
    let invalid = |why: &str| HttpError::InvalidRequest(format!("url {url:?}: {why}"));
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| invalid("no scheme (write https://host/path)"))?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(invalid("the scheme is not http or https"));
    }
    let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.is_empty() {
        return Err(invalid("no host"));
    }
    Ok((scheme, authority, if path.is_empty() { "/" } else { path }))
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use super::{HttpError, Request, Response};

    pub(super) fn send(r: Request) -> Result<Response, HttpError> {
        super::split_url(&r.url)?;
        Err(HttpError::Failed(
            "http requests are only served inside the sandgraph host".to_owned(),
        ))
    }
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{
        ErrorCode, Fields, FutureIncomingResponse, IncomingBody, Method, OutgoingBody,
        OutgoingRequest, RequestOptions, Scheme,
    };
    use wasip2::io::streams::StreamError;

    use super::{HttpError, Request, Response};

    pub(super) fn send(r: Request) -> Result<Response, HttpError> {
        let (scheme, authority, path) = super::split_url(&r.url)?;
        let mut headers = r.headers;
        if !r.body.is_empty() || !matches!(r.method.as_str(), "GET" | "HEAD") {
            // A declared length lets the host refuse an oversized body
            // before it is written.
            headers.push(("content-length".to_owned(), r.body.len().to_string().into()));
        }
        let fields = Fields::from_list(&headers)
            .map_err(|e| HttpError::InvalidRequest(format!("headers refused: {e:?}")))?;
        let req = OutgoingRequest::new(fields);
        let invalid = |what: &str| HttpError::InvalidRequest(format!("{what} of {:?}", r.url));
        req.set_method(&method(&r.method))
            .map_err(|()| invalid("the method"))?;
        let scheme = if scheme.eq_ignore_ascii_case("https") {
            Scheme::Https
        } else {
            Scheme::Http
        };
        req.set_scheme(Some(&scheme))
            .map_err(|()| invalid("the scheme"))?;
        req.set_authority(Some(authority))
            .map_err(|()| invalid("the host"))?;
        req.set_path_with_query(Some(path))
            .map_err(|()| invalid("the path"))?;
        let options = r.timeout.map(|t| {
            let ns = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
            let o = RequestOptions::new();
            let _ = o.set_connect_timeout(Some(ns));
            let _ = o.set_first_byte_timeout(Some(ns));
            let _ = o.set_between_bytes_timeout(Some(ns));
            o
        });
        let out_body = req
            .body()
            .map_err(|()| HttpError::Failed("the request body was taken twice".to_owned()))?;
        let future = outgoing_handler::handle(req, options).map_err(from_code)?;
        // The host reads the body while the request waits; if it refuses
        // the request, the write fails and the response says why.
        let written = write_body(out_body, &r.body);
        let response = wait(&future)?;
        written?;
        let status = response.status();
        let headers = response
            .headers()
            .entries()
            .into_iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v))
            .collect();
        let body = response
            .consume()
            .map_err(|()| HttpError::Failed("the response body was taken twice".to_owned()))?;
        let body = read_body(body)?;
        Ok(Response {
            status,
            headers,
            body,
        })
    }

    fn method(m: &str) -> Method {
        match m {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "CONNECT" => Method::Connect,
            "OPTIONS" => Method::Options,
            "TRACE" => Method::Trace,
            "PATCH" => Method::Patch,
            other => Method::Other(other.to_owned()),
        }
    }

    fn write_body(body: OutgoingBody, bytes: &[u8]) -> Result<(), HttpError> {
        let failed = |e: String| HttpError::Connection(format!("sending the body failed: {e}"));
        {
            let stream = body
                .write()
                .map_err(|()| failed("no body stream".to_owned()))?;
            let mut rest = bytes;
            while !rest.is_empty() {
                let n = match stream.check_write() {
                    Ok(0) => {
                        stream.subscribe().block();
                        continue;
                    }
                    Ok(n) => usize::try_from(n).unwrap_or(usize::MAX).min(rest.len()),
                    Err(e) => return Err(failed(stream_error(e))),
                };
                stream
                    .write(&rest[..n])
                    .map_err(|e| failed(stream_error(e)))?;
                rest = &rest[n..];
            }
            stream
                .blocking_flush()
                .map_err(|e| failed(stream_error(e)))?;
        }
        OutgoingBody::finish(body, None).map_err(from_code)
    }

    fn wait(
        future: &FutureIncomingResponse,
    ) -> Result<wasip2::http::types::IncomingResponse, HttpError> {
        loop {
            match future.get() {
                Some(Ok(Ok(response))) => return Ok(response),
                Some(Ok(Err(code))) => return Err(from_code(code)),
                Some(Err(())) => {
                    return Err(HttpError::Failed("the response was taken twice".to_owned()));
                }
                None => future.subscribe().block(),
            }
        }
    }

    fn read_body(body: IncomingBody) -> Result<Vec<u8>, HttpError> {
        let mut out = Vec::new();
        {
            let stream = body
                .stream()
                .map_err(|()| HttpError::Failed("no response body stream".to_owned()))?;
            loop {
                match stream.blocking_read(64 * 1024) {
                    Ok(chunk) => out.extend_from_slice(&chunk),
                    Err(StreamError::Closed) => break,
                    Err(e) => return Err(body_error(e)),
                }
            }
        }
        let _ = IncomingBody::finish(body);
        Ok(out)
    }

    fn stream_error(e: StreamError) -> String {
        match e {
            StreamError::Closed => "the stream was closed".to_owned(),
            StreamError::LastOperationFailed(e) => io_error(&e).to_string(),
        }
    }

    fn body_error(e: StreamError) -> HttpError {
        match e {
            StreamError::LastOperationFailed(e) => io_error(&e),
            StreamError::Closed => HttpError::Connection("the body ended early".to_owned()),
        }
    }

    /// A stream error as an `HttpError`: its `wasi:http` code when it has
    /// one; otherwise (the host's body errors carry none) classified by its
    /// text's first line, which is all that is kept.
    fn io_error(e: &wasip2::io::error::Error) -> HttpError {
        if let Some(code) = wasip2::http::types::http_error_code(e) {
            return from_code(code);
        }
        let text = e.to_debug_string();
        let line = text.lines().next().unwrap_or_default();
        let line = &line[..line.floor_char_boundary(200)];
        let lower = line.to_ascii_lowercase();
        if lower.contains("body size exceeds limit") {
            HttpError::TooLarge(format!("the host stopped the body: {line}"))
        } else if lower.contains("timeout") {
            HttpError::Timeout(line.to_owned())
        } else {
            HttpError::Connection(format!("reading the body failed: {line}"))
        }
    }

    fn from_code(code: ErrorCode) -> HttpError {
        use ErrorCode as C;
        match code {
            C::HttpRequestDenied => HttpError::Denied(
                "not allowed by this graph's http grant (the host log says why)".to_owned(),
            ),
            C::DestinationIpProhibited => HttpError::Prohibited(
                "the host resolves to addresses this graph may not reach".to_owned(),
            ),
            C::HttpRequestBodySize(n) => HttpError::TooLarge(match n {
                Some(n) => format!("a request body of {n} bytes is over the host's cap"),
                None => "the request body is over the host's cap".to_owned(),
            }),
            C::HttpResponseBodySize(n) => HttpError::TooLarge(match n {
                Some(n) => format!("a response body of {n} bytes is over the host's cap"),
                None => "the response body is over the host's cap".to_owned(),
            }),
            C::HttpRequestUriInvalid
            | C::HttpRequestUriTooLong
            | C::HttpRequestMethodInvalid
            | C::HttpRequestHeaderSectionSize(_)
            | C::HttpRequestHeaderSize(_) => HttpError::InvalidRequest(format!("{code:?}")),
            C::DnsTimeout
            | C::ConnectionTimeout
            | C::ConnectionReadTimeout
            | C::ConnectionWriteTimeout
            | C::HttpResponseTimeout => HttpError::Timeout(format!("{code:?}")),
            C::DnsError(_)
            | C::DestinationNotFound
            | C::DestinationUnavailable
            | C::DestinationIpUnroutable
            | C::ConnectionRefused
            | C::ConnectionTerminated
            | C::ConnectionLimitReached
            | C::HttpResponseIncomplete => HttpError::Connection(format!("{code:?}")),
            other => HttpError::Failed(format!("{other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_scheme_authority_and_path() {
        assert_eq!(
            split_url("https://api.github.com/repos?x=1#frag").unwrap(),
            ("https", "api.github.com", "/repos?x=1")
        );
        assert_eq!(
            split_url("http://127.0.0.1:8080").unwrap(),
            ("http", "127.0.0.1:8080", "/")
        );
        assert_eq!(split_url("http://h?q").unwrap(), ("http", "h", "?q"));
        assert_eq!(
            split_url("api.github.com").unwrap_err().kind(),
            "invalid_request"
        );
        assert_eq!(split_url("ftp://x").unwrap_err().kind(), "invalid_request");
        assert_eq!(
            split_url("https:///p").unwrap_err().kind(),
            "invalid_request"
        );
    }
}
