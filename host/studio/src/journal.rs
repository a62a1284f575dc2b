//! `GET /api/journal`: the routing journal's attempts, newest first.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use sandgraph_router::{JournalEntry, JournalError};
use serde_json::{Value, json};

use crate::api::{ApiError, Studio, blocking, json_body, limit};
use crate::bound;

/// Entries of a page when `limit` is not given.
const DEFAULT_ENTRIES: usize = 100;

/// Most entries of one page: each may carry a bounded outcome.
const MAX_ENTRIES: usize = 500;

/// `GET /api/journal?limit=N`.
pub(crate) async fn list(
    State(studio): State<Arc<Studio>>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let limit = limit(&uri, DEFAULT_ENTRIES, MAX_ENTRIES)?;
    let journal = studio.journal.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "no_journal",
            "this server shows no journal: it keeps none (start it with --store), or it \
             names several principals (--tokens) and the journal's rows have no owner",
        )
    })?;
    let entries =
        blocking(move || journal.entries(None, Some(limit)).map_err(journal_error)).await?;
    let entries: Vec<Value> = entries.iter().rev().map(entry).collect();
    Ok(json_body(&json!({ "entries": entries })))
}

/// A journal that cannot be read: `500 storage`.
fn journal_error(e: JournalError) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "storage",
        bound::error(&e.to_string()),
    )
}

/// One attempt, every text bounded.
fn entry(e: &JournalEntry) -> Value {
    json!({
        "seq": e.seq,
        "route_id": bound::name(&e.route_id),
        "attempt": e.attempt,
        "at_ms": e.at_ms,
        "request": bound::value(&Value::String(e.request.clone())),
        "tool": e.tool.as_deref().map(bound::name),
        "args": e.args.as_ref().map(bound::value),
        "decision": bound::name(&e.decision),
        "stage": e.stage.as_deref().map(bound::name),
        "reason": e.reason.as_deref().map(bound::error),
        "outcome": e.outcome.as_ref().map(bound::value),
        "model_ms": e.model_ms,
        "check_ms": e.check_ms,
        "run_ms": e.run_ms,
        "graph_digest": e.graph_digest.as_deref().map(bound::name),
    })
}
