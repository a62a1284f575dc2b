//! The caller's durable threads: list, current state, history, fork and
//! update, over the server's thread store and keyed as MCP keys them
//! ([`sandgraph_server::thread_key`]), through the same store and runtime
//! calls as `sandgraph threads`.

use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::Uri;
use axum::response::Response;
use sandgraph_core::{Checkpoint, ThreadState};
use sandgraph_server::Principal;
use sandgraph_store::{ThreadInfo, ThreadStore};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::api::{
    ApiError, Studio, blocking, json_body, limit, no_threads, parse_body, run_error, store_error,
    thread_id,
};
use crate::bound;
use crate::graphs::served;
use crate::runs::{interrupt, names};

/// Most threads `GET /api/threads` lists (the newest).
const MAX_THREADS_LISTED: usize = 1000;

/// Checkpoints of a history page when `limit` is not given.
const DEFAULT_HISTORY: usize = 50;

/// Most checkpoints of one history page: each carries a whole state.
const MAX_HISTORY: usize = 200;

/// The thread store, or `409 no_threads`.
fn store(studio: &Studio) -> Result<ThreadStore, ApiError> {
    studio.server.threads().cloned().ok_or_else(no_threads)
}

/// `GET /api/threads`: the caller's threads, newest first.
pub(crate) async fn list(
    State(studio): State<Arc<Studio>>,
    Extension(principal): Extension<Principal>,
) -> Result<Response, ApiError> {
    let store = store(&studio)?;
    let all = blocking(move || store.list().map_err(store_error)).await?;
    let owner = sandgraph_server::thread_owner(Some(&principal));
    let mut mine: Vec<(ThreadInfo, String)> = all
        .into_iter()
        .filter_map(|t| {
            let name =
                t.id.strip_prefix(&owner)?
                    .strip_suffix(&t.graph)?
                    .strip_suffix('/')?
                    .to_owned();
            Some((t, name))
        })
        .collect();
    mine.sort_by_key(|t| std::cmp::Reverse(t.0.updated_at_ms));
    let threads: Vec<Value> = mine
        .iter()
        .take(MAX_THREADS_LISTED)
        .map(|(t, name)| {
            json!({
                "graph": bound::name(&t.graph),
                "thread": bound::name(name),
                "created_at": t.created_at_ms,
                "updated_at": t.updated_at_ms,
                "checkpoints": t.checkpoints,
                "step": t.step,
                "interrupted": t.pending_interrupts > 0,
            })
        })
        .collect();
    Ok(json_body(&json!({ "threads": threads })))
}

/// The stored id of the caller's thread in the path, and the store.
fn thread(
    studio: &Studio,
    principal: &Principal,
    graph: &str,
    name: &str,
) -> Result<(String, ThreadStore), ApiError> {
    let id = thread_id(studio, principal, name, graph)?;
    Ok((id, store(studio)?))
}

/// The thread's state, or `404`.
async fn load(store: ThreadStore, id: String) -> Result<ThreadState, ApiError> {
    blocking(move || store.load(&id).map_err(store_error))
        .await?
        .ok_or_else(|| ApiError::not_found("no such thread"))
}

/// `GET /api/threads/{graph}/{thread}`: the head's values, next nodes and
/// pending interrupts.
pub(crate) async fn state(
    State(studio): State<Arc<Studio>>,
    Extension(principal): Extension<Principal>,
    Path((graph, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (id, store) = thread(&studio, &principal, &graph, &name)?;
    let t = load(store, id).await?;
    let interrupts: Vec<Value> = t
        .pending_interrupts()
        .iter()
        .map(|i| interrupt(&json!({"id": i.id, "node": i.node, "value": i.value})))
        .collect();
    Ok(json_body(&json!({
        "graph": bound::name(&graph),
        "thread": bound::name(&name),
        "checkpoint_id": t.checkpoint.id,
        "step": t.checkpoint.step,
        "values": bound::object(&t.checkpoint.values),
        "next": names(&t.checkpoint.next_nodes()),
        "interrupts": interrupts,
    })))
}

/// `GET /api/threads/{graph}/{thread}/history?limit=N`: checkpoints,
/// newest first, each with what it wrote.
pub(crate) async fn history(
    State(studio): State<Arc<Studio>>,
    Extension(principal): Extension<Principal>,
    Path((graph, name)): Path<(String, String)>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let limit = limit(&uri, DEFAULT_HISTORY, MAX_HISTORY)?;
    let (id, store) = thread(&studio, &principal, &graph, &name)?;
    let entries = blocking(move || {
        let list = store.history(&id, Some(limit)).map_err(store_error)?;
        let mut out = Vec::with_capacity(list.len());
        for c in &list {
            let parent = match c.parent.as_deref() {
                None => None,
                Some(p) => match list.iter().find(|o| o.id == p) {
                    Some(found) => Some(found.clone()),
                    None => store.checkpoint(&id, p).map_err(store_error)?,
                },
            };
            out.push(entry(c, parent.as_ref()));
        }
        Ok(out)
    })
    .await?;
    Ok(json_body(&json!({ "checkpoints": entries })))
}

/// A checkpoint as history lists it; `writes` against `parent`.
fn entry(c: &Checkpoint, parent: Option<&Checkpoint>) -> Value {
    json!({
        "id": c.id,
        "parent_id": c.parent,
        "step": c.step,
        "source": c.source,
        "created_at": c.created_at_ms,
        "values": bound::object(&c.values),
        "writes": bound::object(&writes(c, parent)),
        "next": names(&c.next_nodes()),
    })
}

/// The channels whose version changed from `parent` (every channel
/// without one), with their values in `c`.
fn writes(c: &Checkpoint, parent: Option<&Checkpoint>) -> Map<String, Value> {
    c.values
        .iter()
        .filter(|(k, _)| {
            parent.is_none_or(|p| p.channel_versions.get(*k) != c.channel_versions.get(*k))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// `checkpoint` as an entry, read with its parent.
async fn head_entry(store: ThreadStore, id: String, c: Checkpoint) -> Result<Value, ApiError> {
    blocking(move || {
        let parent = match c.parent.as_deref() {
            Some(p) => store.checkpoint(&id, p).map_err(store_error)?,
            None => None,
        };
        Ok(entry(&c, parent.as_ref()))
    })
    .await
}

/// The body of a fork.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkBody {
    checkpoint_id: Option<String>,
}

/// `POST /api/threads/{graph}/{thread}/fork`: a copy of an earlier
/// checkpoint becomes the head.
pub(crate) async fn fork(
    State(studio): State<Arc<Studio>>,
    Extension(principal): Extension<Principal>,
    Path((graph, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let body: ForkBody = parse_body(&body)?;
    let from = body
        .checkpoint_id
        .ok_or_else(|| ApiError::invalid("checkpoint_id is required"))?;
    let (id, store) = thread(&studio, &principal, &graph, &name)?;
    let (s, i) = (store.clone(), id.clone());
    let c = blocking(move || s.fork(&i, &from).map_err(store_error)).await?;
    Ok(json_body(&head_entry(store, id, c).await?))
}

/// The body of a state update.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateBody {
    values: Option<Value>,
    #[serde(default)]
    as_node: Option<String>,
}

/// `POST /api/threads/{graph}/{thread}/state`: the state as if `as_node`
/// had written `values`, as `sandgraph threads update` computes it.
pub(crate) async fn update(
    State(studio): State<Arc<Studio>>,
    Extension(principal): Extension<Principal>,
    Path((graph, name)): Path<(String, String)>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let body: UpdateBody = parse_body(&body)?;
    let values = match body.values {
        Some(v @ Value::Object(_)) => v,
        _ => return Err(ApiError::invalid("values must be an object")),
    };
    let tool = served(&studio, &principal, &graph)?;
    let (id, store) = thread(&studio, &principal, tool.name(), &name)?;
    let loaded = tool.graph().await.map_err(run_error)?;
    let t = load(store.clone(), id.clone()).await?;
    let c = studio
        .server
        .registry()
        .runtime()
        .update_state(&loaded, t, values, body.as_node.as_deref())
        .await
        .map_err(run_error)?;
    let (s, i, written) = (store.clone(), id.clone(), c.clone());
    blocking(move || s.put_update(&i, &written).map_err(store_error)).await?;
    Ok(json_body(&head_entry(store, id, c).await?))
}
