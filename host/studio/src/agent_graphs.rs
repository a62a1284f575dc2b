//! `GET /api/agent-graphs` and `GET /api/agent-graphs/{id}`: the caller's
//! own agent graphs, read-only, through the server's controller (the
//! graphs whose root session is the caller, as MCP decides it).

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use sandgraph_controller::{SupervisorWake, ToolFailure};
use sandgraph_server::Principal;
use serde_json::{Value, json};

use crate::api::{ApiError, Studio, blocking, json_body, query_param};
use crate::bound;

/// Most graphs `GET /api/agent-graphs` lists.
const MAX_GRAPHS_LISTED: usize = 200;

/// Most wakes one graph's page lists (the newest).
const MAX_WAKES: usize = 100;

fn no_controller() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "no_controller",
        "this server has no controller: start it with --controller",
    )
}

fn failure(f: ToolFailure) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "agent_graph",
        bound::error(&f.to_string()),
    )
}

/// `GET /api/agent-graphs`: a summary of each graph of the caller, by id.
pub(crate) async fn list(
    State(studio): State<Arc<Studio>>,
    Extension(principal): Extension<Principal>,
) -> Result<Response, ApiError> {
    if !studio.server.has_controller() {
        return Err(no_controller());
    }
    let server = studio.server.clone();
    let graphs = blocking(move || {
        let ids = server
            .owned_agent_graphs(&principal, MAX_GRAPHS_LISTED)
            .map_err(failure)?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(g) = server.owned_agent_graph(&principal, &id).map_err(failure)? else {
                continue;
            };
            let p = &g.projection;
            out.push(json!({
                "id": bound::name(&id),
                "revision": p.revision(),
                "closed": p.closed(),
                "work": p.work().len(),
                "records": p.records().len(),
                "wakes": g.wakes.len(),
            }));
        }
        Ok(out)
    })
    .await?;
    Ok(json_body(&json!({ "graphs": graphs })))
}

/// `GET /api/agent-graphs/{id}[?cursor=…]`: the graph's view (as its root
/// sees it) and its wakes.
pub(crate) async fn detail(
    State(studio): State<Arc<Studio>>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    if !studio.server.has_controller() {
        return Err(no_controller());
    }
    let cursor = query_param(&uri, "cursor")?;
    let server = studio.server.clone();
    let graph_id = id.clone();
    let graph = blocking(move || {
        server
            .owned_agent_graph(&principal, &graph_id)
            .map_err(failure)
    })
    .await?
    .ok_or_else(|| ApiError::not_found("no agent graph of yours has that id"))?;
    let view = graph
        .projection
        .view_page(cursor.as_deref())
        .map_err(|f| ApiError::invalid(bound::error(&f.to_string())))?;
    let wakes: Vec<Value> = graph.wakes.iter().rev().take(MAX_WAKES).map(wake).collect();
    Ok(json_body(&json!({
        "id": bound::name(&id),
        "view": bound::value(&view.value),
        "wakes": wakes,
    })))
}

/// One wake, without its root session.
fn wake(w: &SupervisorWake) -> Value {
    let mut out = json!({
        "wakeId": bound::name(&w.wake_id),
        "status": w.status,
        "attemptCount": w.attempt_count,
        "createdAt": w.created_at,
        "updatedAt": w.updated_at,
    });
    if let Some(r) = &w.failure_reason {
        out["failureReason"] = json!(bound::error(r));
    }
    if let Some(r) = &w.superseded_reason {
        out["supersededReason"] = json!(bound::error(r));
    }
    out
}
