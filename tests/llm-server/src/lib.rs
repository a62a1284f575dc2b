//! A scripted OpenAI-compatible chat-completions server for tests.
//!
//! [`ScriptedLlm::start`] binds a real HTTP server on `127.0.0.1:0` and
//! answers `POST /chat/completions` (and `POST /v1/chat/completions`) with
//! the next [`Reply`] of its script, in order, recording every request it
//! receives. A test drives a real client against [`ScriptedLlm::base_url`],
//! then checks [`ScriptedLlm::requests`] and [`ScriptedLlm::remaining`].
//!
//! Replies are full OpenAI wire bodies (`id`, `object`, `created`, `model`,
//! `choices[{index, message{role, content, tool_calls}, finish_reason}]`,
//! `usage`) shaped like DeepSeek's, which also sends `logprobs`,
//! `system_fingerprint` and cache-hit token counts.
//!
//! Requests are numbered from 1 in arrival order. When the script is
//! exhausted the server answers 500 with
//! `{"error":{"message":"scripted llm: no reply left for request N"}}`, so a
//! test that makes one call too many fails with a clear message.
//!
//! ```no_run
//! # async fn demo() {
//! use sandgraph_test_llm::{Reply, ScriptedLlm};
//! let llm = ScriptedLlm::start([
//!     Reply::tool_call("search", r#"{"query":"rust"}"#),
//!     Reply::text("done"),
//! ])
//! .await;
//! // ... point a client at llm.base_url() ...
//! assert_eq!(llm.remaining(), 0);
//! assert_eq!(llm.requests()[0].tool_names(), ["search"]);
//! # }
//! ```

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod demo;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Size of the pieces a [`Reply::chunked`] body is sent in.
const CHUNK_BYTES: usize = 16 * 1024;

/// How many [`Reply::respond`] closures may return another `respond` reply
/// in a row before the server gives up (a closure that always defers would
/// otherwise loop forever).
const MAX_RESPOND_DEPTH: usize = 8;

/// A running scripted server. Dropping it shuts the server down.
pub struct ScriptedLlm {
    shared: Arc<Shared>,
    base_url: String,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

struct Shared {
    state: Mutex<ScriptState>,
}

#[derive(Default)]
struct ScriptState {
    replies: VecDeque<Reply>,
    requests: Vec<Recorded>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ScriptState> {
        // A panicking test thread must not hide the script from the others.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl ScriptedLlm {
    /// Binds `127.0.0.1:0`, starts serving in the background on the current
    /// tokio runtime and returns once the port is known.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound (test support: failing loudly is
    /// the useful behaviour).
    pub async fn start(replies: impl IntoIterator<Item = Reply>) -> ScriptedLlm {
        let shared = Arc::new(Shared {
            state: Mutex::new(ScriptState {
                replies: replies.into_iter().collect(),
                requests: Vec::new(),
            }),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("scripted llm: cannot bind 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("scripted llm: the listener has no local address");
        let app = Router::new()
            .route("/chat/completions", post(chat))
            .route("/v1/chat/completions", post(chat))
            .fallback(unrouted)
            .layer(DefaultBodyLimit::disable())
            .with_state(shared.clone());
        let (shutdown, signal) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = signal.await;
            });
            if let Err(error) = served.await {
                eprintln!("scripted llm: server stopped: {error}");
            }
        });
        ScriptedLlm {
            shared,
            base_url: format!("http://{addr}"),
            shutdown: Some(shutdown),
            task,
        }
    }

    /// The server's base URL, `http://127.0.0.1:PORT`, without a trailing
    /// slash. Clients append `/chat/completions` (or `/v1/chat/completions`).
    pub fn base_url(&self) -> String {
        self.base_url.clone()
    }

    /// Appends a reply to the end of the script.
    pub fn push(&self, reply: Reply) {
        self.shared.lock().replies.push_back(reply);
    }

    /// Every request received so far, in arrival order, including those
    /// answered from an exhausted script or to an unknown path.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().requests.clone()
    }

    /// How many replies of the script have not been served yet.
    pub fn remaining(&self) -> usize {
        self.shared.lock().replies.len()
    }
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        self.task.abort();
    }
}

impl fmt::Debug for ScriptedLlm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedLlm")
            .field("base_url", &self.base_url)
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

/// One request as the server received it.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    /// The request path, e.g. `/chat/completions`.
    pub path: String,
    /// Every header in arrival order; names are lowercase (HTTP/1 as parsed
    /// by hyper), values lossily decoded as UTF-8.
    pub headers: Vec<(String, String)>,
    /// The request body parsed as JSON; a body that is not JSON is kept as a
    /// JSON string holding its (lossily decoded) text.
    pub body: Value,
}

impl Recorded {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The request's `messages` array, or an empty slice when it has none.
    pub fn messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The names of the tools offered (`tools[*].function.name`), in order.
    pub fn tool_names(&self) -> Vec<String> {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|tool| tool.pointer("/function/name").and_then(Value::as_str))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The content of the last message whose role is `role`, when it is a
    /// string; handy in [`Reply::respond`] closures.
    pub fn last_content(&self, role: &str) -> Option<&str> {
        self.messages()
            .iter()
            .rev()
            .find(|message| message.get("role").and_then(Value::as_str) == Some(role))
            .and_then(|message| message.get("content"))
            .and_then(Value::as_str)
    }
}

type Responder = Arc<dyn Fn(&Recorded) -> Reply + Send + Sync>;

/// One scripted answer. Build it with a constructor, then adjust it with
/// [`Reply::with_header`], [`Reply::delay`] or [`Reply::chunked`].
#[derive(Clone)]
pub struct Reply {
    kind: Kind,
    headers: Vec<(String, String)>,
    delay: Duration,
    chunked: bool,
}

#[derive(Clone)]
enum Kind {
    ToolCalls(Vec<(String, String)>),
    Text(String),
    Status(u16, String),
    Raw(String),
    Respond(Responder),
}

impl Reply {
    fn new(kind: Kind) -> Reply {
        Reply {
            kind,
            headers: Vec::new(),
            delay: Duration::ZERO,
            chunked: false,
        }
    }

    /// An assistant message with one tool call: id `call_N` where N is the
    /// request's number (from 1), `finish_reason` `"tool_calls"`, content
    /// `""` as DeepSeek sends it. `arguments` is sent verbatim as the JSON
    /// string the model produced (it need not be valid JSON).
    pub fn tool_call(name: &str, arguments: &str) -> Reply {
        Reply::tool_calls(&[(name, arguments)])
    }

    /// An assistant message with several tool calls, in order. With more
    /// than one call the ids are `call_N_0`, `call_N_1`, … (N is the
    /// request's number); a single call gets `call_N`.
    pub fn tool_calls(calls: &[(&str, &str)]) -> Reply {
        Reply::new(Kind::ToolCalls(
            calls
                .iter()
                .map(|(name, arguments)| ((*name).to_owned(), (*arguments).to_owned()))
                .collect(),
        ))
    }

    /// A plain assistant text message, `finish_reason` `"stop"`.
    pub fn text(content: &str) -> Reply {
        Reply::new(Kind::Text(content.to_owned()))
    }

    /// Any status with a raw body (sent as `application/json` when it parses
    /// as JSON, else `text/plain`).
    pub fn status(code: u16, body: &str) -> Reply {
        Reply::new(Kind::Status(code, body.to_owned()))
    }

    /// Status 200 with a raw body, sent as `application/json` whatever it
    /// holds (for malformed-response and recorded-fixture tests).
    pub fn raw(body: &str) -> Reply {
        Reply::new(Kind::Raw(body.to_owned()))
    }

    /// A reply computed from the request when it arrives, e.g. to echo a
    /// tool result back. The returned reply's headers and delay apply on top
    /// of this one's.
    pub fn respond(f: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Reply {
        Reply::new(Kind::Respond(Arc::new(f)))
    }

    /// Adds a response header, e.g. `Retry-After`.
    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sleeps this long before answering (for timeout tests).
    pub fn delay(mut self, delay: Duration) -> Reply {
        self.delay += delay;
        self
    }

    /// Sends the body in pieces without a `Content-Length` header
    /// (`Transfer-Encoding: chunked`), so a client cannot size it up front.
    pub fn chunked(mut self) -> Reply {
        self.chunked = true;
        self
    }
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("Reply");
        match &self.kind {
            Kind::ToolCalls(calls) => out.field("tool_calls", calls),
            Kind::Text(content) => out.field("text", content),
            Kind::Status(code, body) => out.field("status", code).field("body", body),
            Kind::Raw(body) => out.field("raw", body),
            Kind::Respond(_) => out.field("respond", &"<closure>"),
        };
        out.field("headers", &self.headers)
            .field("delay", &self.delay)
            .field("chunked", &self.chunked)
            .finish()
    }
}

fn record(uri: &Uri, headers: &HeaderMap, body: &Bytes) -> Recorded {
    let headers = headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
    Recorded {
        path: uri.path().to_owned(),
        headers,
        body,
    }
}

async fn chat(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let recorded = record(&uri, &headers, &body);
    let (number, reply) = {
        let mut state = shared.lock();
        state.requests.push(recorded.clone());
        (state.requests.len(), state.replies.pop_front())
    };
    match reply {
        Some(reply) => serve(reply, &recorded, number).await,
        None => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("scripted llm: no reply left for request {number}"),
        ),
    }
}

async fn unrouted(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let recorded = record(&uri, &headers, &body);
    shared.lock().requests.push(recorded);
    error_response(
        StatusCode::NOT_FOUND,
        &format!(
            "scripted llm: no route for {method} {}; use POST /chat/completions",
            uri.path()
        ),
    )
}

fn error_response(status: StatusCode, message: &str) -> Response {
    let body = json!({ "error": { "message": message, "type": "scripted_llm", "code": null } });
    build(status, body.to_string(), "application/json", &[], false)
}

async fn serve(reply: Reply, recorded: &Recorded, number: usize) -> Response {
    let Some(reply) = resolve(reply, recorded) else {
        return error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "scripted llm: respond closures nested too deeply",
        );
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let model = recorded
        .body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("scripted-llm");
    let prompt_tokens = estimate_tokens(&recorded.body.to_string());
    let (status, body, content_type) = match reply.kind {
        Kind::ToolCalls(calls) => {
            let body = tool_calls_completion(&calls, number, model, prompt_tokens);
            (StatusCode::OK, body.to_string(), "application/json")
        }
        Kind::Text(content) => {
            let completion_tokens = estimate_tokens(&content);
            let message = json!({ "role": "assistant", "content": content });
            let body = completion(
                number,
                model,
                message,
                "stop",
                prompt_tokens,
                completion_tokens,
            );
            (StatusCode::OK, body.to_string(), "application/json")
        }
        Kind::Status(code, body) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let content_type = if serde_json::from_str::<Value>(&body).is_ok() {
                "application/json"
            } else {
                "text/plain; charset=utf-8"
            };
            (status, body, content_type)
        }
        Kind::Raw(body) => (StatusCode::OK, body, "application/json"),
        Kind::Respond(_) => unreachable!("resolve returns no respond reply"),
    };
    build(status, body, content_type, &reply.headers, reply.chunked)
}

/// Follows `respond` closures to the reply they make, adding up the headers,
/// delays and chunking of every reply on the way; `None` when they nest
/// deeper than `MAX_RESPOND_DEPTH`.
fn resolve(mut reply: Reply, recorded: &Recorded) -> Option<Reply> {
    let mut headers = Vec::new();
    let mut delay = Duration::ZERO;
    let mut chunked = false;
    let mut depth = 0;
    loop {
        headers.append(&mut reply.headers);
        delay += reply.delay;
        chunked |= reply.chunked;
        match reply.kind {
            Kind::Respond(f) if depth < MAX_RESPOND_DEPTH => {
                depth += 1;
                reply = f(recorded);
            }
            Kind::Respond(_) => return None,
            kind => {
                return Some(Reply {
                    kind,
                    headers,
                    delay,
                    chunked,
                });
            }
        }
    }
}

/// The completion body of an assistant message that makes `calls`: ids
/// `call_N` for a single call, `call_N_I` for several.
fn tool_calls_completion(
    calls: &[(String, String)],
    number: usize,
    model: &str,
    prompt_tokens: u64,
) -> Value {
    let single = calls.len() == 1;
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(index, (name, arguments))| {
            let id = if single {
                format!("call_{number}")
            } else {
                format!("call_{number}_{index}")
            };
            json!({
                "index": index,
                "id": id,
                "type": "function",
                "function": { "name": name, "arguments": arguments },
            })
        })
        .collect();
    let completion_tokens = calls
        .iter()
        .map(|(name, arguments)| estimate_tokens(name) + estimate_tokens(arguments))
        .sum();
    let message = json!({ "role": "assistant", "content": "", "tool_calls": tool_calls });
    completion(
        number,
        model,
        message,
        "tool_calls",
        prompt_tokens,
        completion_tokens,
    )
}

fn completion(
    number: usize,
    model: &str,
    message: Value,
    finish_reason: &str,
    prompt_tokens: u64,
    completion_tokens: u64,
) -> Value {
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0);
    json!({
        "id": format!("scripted-{number}"),
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason,
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": { "cached_tokens": 0 },
            "prompt_cache_hit_tokens": 0,
            "prompt_cache_miss_tokens": prompt_tokens,
        },
        "system_fingerprint": "fp_scripted",
    })
}

/// A rough token count (four bytes a token, at least one), deterministic so
/// tests can rely on usage being present and non-zero.
fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4).max(1)
}

fn build(
    status: StatusCode,
    body: String,
    content_type: &str,
    headers: &[(String, String)],
    chunked: bool,
) -> Response {
    let body = if chunked {
        let bytes = Bytes::from(body);
        let pieces: Vec<Result<Bytes, Infallible>> = (0..bytes.len())
            .step_by(CHUNK_BYTES)
            .map(|start| Ok(bytes.slice(start..(start + CHUNK_BYTES).min(bytes.len()))))
            .collect();
        Body::from_stream(futures::stream::iter(pieces))
    } else {
        Body::from(body)
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let map = response.headers_mut();
    map.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_str(content_type).expect("content types are valid header values"),
    );
    for (name, value) in headers {
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            (Ok(name), Ok(value)) => {
                map.append(name, value);
            }
            _ => panic!("scripted llm: invalid reply header {name}: {value}"),
        }
    }
    response
}
