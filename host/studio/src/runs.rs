//! Runs started from the studio: `POST /api/graphs/{name}/runs`, `POST
//! /api/threads/{graph}/{thread}/resume` and `POST
//! /api/runs/{run_id}/cancel`. A run streams one JSON line per event
//! (`started`, one `step` per superstep, one final line) as
//! `application/x-ndjson`; it holds a run permit of the server's admission, so
//! studio runs and MCP calls share the run limits; closing the connection
//! cancels it. Lines wait for the client in a bounded [`Outbox`]: a client
//! that falls too far behind is cut off, and the run is never held back.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Extension;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sandgraph_core::{ErrorCode, RunError, Start, StepEvent};
use sandgraph_registry::{CallOptions, GraphTool, ToolOutput};
use sandgraph_server::{BUSY, Principal, RunPermit};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::api::{ApiError, Studio, blocking, parse_body, store_error, thread_id};
use crate::bound;
use crate::graphs::served;
use crate::outbox::Outbox;

/// The runs in flight, by run id: who started each, and how to stop it.
#[derive(Default)]
pub(crate) struct Runs {
    live: Mutex<HashMap<String, LiveRun>>,
}

struct LiveRun {
    /// The principal that started it (its key).
    owner: String,
    cancel: CancellationToken,
    /// Set when its owner cancelled it.
    cancelled: Arc<AtomicBool>,
}

impl Runs {
    fn add(&self, id: &str, owner: &Principal, cancel: CancellationToken) -> Arc<AtomicBool> {
        let cancelled = Arc::new(AtomicBool::new(false));
        self.lock().insert(
            id.to_owned(),
            LiveRun {
                owner: owner.to_string(),
                cancel,
                cancelled: cancelled.clone(),
            },
        );
        cancelled
    }

    fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Cancels run `id` when `principal` started it.
    fn cancel(&self, id: &str, principal: &Principal) -> bool {
        let runs = self.lock();
        match runs.get(id) {
            Some(run) if run.owner == principal.to_string() => {
                run.cancelled.store(true, Ordering::Release);
                run.cancel.cancel();
                true
            }
            _ => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, LiveRun>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The body of `POST /api/graphs/{name}/runs`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunBody {
    input: Option<Value>,
    #[serde(default)]
    thread: Option<String>,
    #[serde(default)]
    configurable: Option<Map<String, Value>>,
}

/// The body of `POST /api/threads/{graph}/{thread}/resume`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResumeBody {
    value: Option<Value>,
    #[serde(default)]
    configurable: Option<Map<String, Value>>,
}

/// One run to stream.
struct Run {
    tool: Arc<GraphTool>,
    /// How it starts: the arguments of a call, or the answer of a resume.
    start: Start,
    /// The thread's name, as the caller gave it.
    thread: Option<String>,
    /// The stored thread id.
    thread_id: Option<String>,
    configurable: Map<String, Value>,
    /// The nodes of the first superstep.
    entry: Vec<String>,
}

/// `POST /api/graphs/{name}/runs`.
pub(crate) async fn start(
    State(studio): State<Arc<Studio>>,
    Extension(principal): Extension<Principal>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let body: RunBody = parse_body(&body)?;
    let input = match body.input {
        Some(v @ Value::Object(_)) => v,
        _ => {
            return Err(ApiError::invalid(
                "input must be an object of the graph's arguments",
            ));
        }
    };
    let tool = served(&studio, &principal, &name)?;
    let thread_id = match &body.thread {
        Some(t) => Some(thread_id(&studio, &principal, t, tool.name())?),
        None => None,
    };
    let entry = tool.spec().entry_points.clone();
    let run = Run {
        tool,
        start: Start::Input(input),
        thread: body.thread,
        thread_id,
        configurable: body.configurable.unwrap_or_default(),
        entry,
    };
    Ok(stream(&studio, &principal, run))
}

/// `POST /api/threads/{graph}/{thread}/resume`.
pub(crate) async fn resume(
    State(studio): State<Arc<Studio>>,
    Extension(principal): Extension<Principal>,
    Path((graph, thread)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let body: ResumeBody = parse_body(&body)?;
    let value = body
        .value
        .ok_or_else(|| ApiError::invalid("value (the answer to the interrupt) is required"))?;
    let tool = served(&studio, &principal, &graph)?;
    let id = thread_id(&studio, &principal, &thread, tool.name())?;
    let store = studio
        .server
        .threads()
        .cloned()
        .ok_or_else(crate::api::no_threads)?;
    let key = id.clone();
    let state = blocking(move || store.load(&key).map_err(store_error)).await?;
    let state = state.ok_or_else(|| ApiError::not_found("no such thread"))?;
    let run = Run {
        tool,
        start: Start::Resume(value),
        thread: Some(thread),
        thread_id: Some(id),
        configurable: body.configurable.unwrap_or_default(),
        entry: state.checkpoint.next_nodes(),
    };
    Ok(stream(&studio, &principal, run))
}

/// `POST /api/runs/{run_id}/cancel`: `204`, or `404` when no run of the
/// caller has that id.
pub(crate) async fn cancel(
    State(studio): State<Arc<Studio>>,
    Extension(principal): Extension<Principal>,
    Path(run_id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if studio.runs.cancel(&run_id, &principal) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("no run of yours has that id"))
    }
}

/// Admits `run` under the server's run limits and streams it: a `busy`
/// line alone when refused.
fn stream(studio: &Arc<Studio>, principal: &Principal, run: Run) -> Response {
    let permit = match studio.server.admit_run(principal) {
        Ok(p) => p,
        Err(why) => {
            let message = bound::error(&why.to_string());
            let line = json!({"type": "error", "code": BUSY, "message": message});
            return ndjson(Body::from(format!("{line}\n")));
        }
    };
    let run_id = new_run_id();
    let cancel = permit.cancel_token().clone();
    let cancelled = studio.runs.add(&run_id, principal, cancel.clone());
    let outbox = Outbox::new();
    let started = json!({
        "type": "started",
        "run_id": run_id,
        "graph": bound::name(run.tool.name()),
        "thread": run.thread.as_deref().map(bound::name),
        "entry": names(&run.entry),
    });
    outbox.push(format!("{started}\n"));
    tokio::spawn(drive(
        studio.clone(),
        run_id,
        permit,
        run,
        outbox.clone(),
        cancelled,
    ));
    // A closed connection cancels the run; a client cut off for falling
    // behind does not.
    ndjson(Body::from_stream(outbox.body(cancel)))
}

fn ndjson(body: Body) -> Response {
    let mut resp = body.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    resp
}

/// Runs `run` to its end, sending a `step` line per superstep of the
/// graph itself and the final line, then forgets it.
async fn drive(
    studio: Arc<Studio>,
    run_id: String,
    permit: RunPermit,
    run: Run,
    outbox: Arc<Outbox>,
    cancelled: Arc<AtomicBool>,
) {
    let opts = CallOptions {
        cancel: permit.cancel_token().clone(),
        threads: run.thread_id.as_ref().and(studio.server.threads().cloned()),
        thread_id: run.thread_id,
        configurable: run.configurable,
        ..CallOptions::default()
    };
    let steps = outbox.clone();
    let mut on_step = move |ev: &StepEvent| {
        // Steps of graphs it called through `tools` are another drawing.
        if ev.sub_run.is_empty() {
            steps.push(format!("{}\n", step_line(ev)));
        }
    };
    // Boxed: the run's future nests the executor's deeply.
    let outcome = Box::pin(run.tool.run(run.start, opts, &mut on_step)).await;
    let by_caller = cancelled.load(Ordering::Acquire);
    let last = final_line(outcome, run.thread.as_deref(), by_caller);
    outbox.push(format!("{last}\n"));
    outbox.finish();
    studio.runs.remove(&run_id);
    drop(permit);
}

/// The `step` line of a superstep.
fn step_line(ev: &StepEvent) -> Value {
    let updates: Vec<Value> = ev
        .updates
        .iter()
        .map(|u| json!({"node": bound::name(&u.node), "update": bound::value(&u.update)}))
        .collect();
    json!({"type": "step", "step": ev.step, "updates": updates, "next": names(&ev.next)})
}

/// The final line of a run; `thread` is the name the caller gave, and
/// `by_caller` says its owner cancelled it.
fn final_line(
    outcome: Result<ToolOutput, RunError>,
    thread: Option<&str>,
    by_caller: bool,
) -> Value {
    match outcome {
        Ok(out) if out.interrupted => {
            let interrupts: Vec<Value> = out.value["interrupts"]
                .as_array()
                .map(|list| list.iter().map(interrupt).collect())
                .unwrap_or_default();
            json!({"type": "interrupted", "thread": thread.map(bound::name), "interrupts": interrupts})
        }
        Ok(out) => json!({"type": "completed", "state": bound::value(&out.value)}),
        Err(e) => {
            let code = if by_caller && e.code == ErrorCode::Timeout {
                "cancelled".to_owned()
            } else {
                e.code.as_str().to_ascii_lowercase()
            };
            json!({"type": "error", "code": code, "message": bound::error(&e.message)})
        }
    }
}

/// One pending interrupt, bounded: `{id, node, value}`.
pub(crate) fn interrupt(i: &Value) -> Value {
    json!({
        "id": bound::name(i["id"].as_str().unwrap_or_default()),
        "node": bound::name(i["node"].as_str().unwrap_or_default()),
        "value": bound::value(&i["value"]),
    })
}

/// Node names, bounded.
pub(crate) fn names(nodes: &[String]) -> Vec<String> {
    nodes.iter().map(|n| bound::name(n)).collect()
}

/// A run id no one can guess: 128 bits from the process's random hasher
/// keys.
fn new_run_id() -> String {
    let half = || RandomState::new().build_hasher().finish();
    format!("{:016x}{:016x}", half(), half())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_cancelled_by_its_owner_only() {
        let runs = Runs::default();
        let alice = Principal::Named(Arc::from("alice"));
        let bob = Principal::Named(Arc::from("bob"));
        let token = CancellationToken::new();
        let flag = runs.add("r1", &alice, token.clone());
        assert!(!runs.cancel("r1", &bob));
        assert!(!token.is_cancelled());
        assert!(!runs.cancel("r2", &alice));
        assert!(runs.cancel("r1", &alice));
        assert!(token.is_cancelled() && flag.load(Ordering::Acquire));
        runs.remove("r1");
        assert!(!runs.cancel("r1", &alice));
    }

    #[test]
    fn run_ids_differ() {
        let (a, b) = (new_run_id(), new_run_id());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }

    #[test]
    fn a_cancel_by_the_caller_is_named_so() {
        let e = || {
            Err(RunError::new(
                ErrorCode::Timeout,
                "run cancelled by the caller",
            ))
        };
        assert_eq!(final_line(e(), None, true)["code"], "cancelled");
        assert_eq!(final_line(e(), None, false)["code"], "timeout");
        let args = Err(RunError::new(ErrorCode::InvalidArgs, "x"));
        assert_eq!(final_line(args, None, false)["code"], "invalid_args");
    }
}
