//! Interrupted graph tool calls over MCP, and what else a `tools/call`'s
//! `_meta` may carry.
//!
//! A graph that stops at an interrupt on a durable thread
//! ([`crate::THREAD_META_KEY`]) can be answered two ways:
//!
//! * **Within the call**, when the client declared the `elicitation`
//!   capability (form mode): the server sends each pending interrupt's
//!   payload as an `elicitation/create` request with one string field,
//!   `answer` (JSON, else taken as plain text), resumes the thread with the
//!   answers and repeats, at most [`MAX_ELICITATION_ROUNDS`] times. A
//!   declined or cancelled elicitation ends the call with the interrupt
//!   result, which stays resumable.
//! * **On a later call** of the same tool on the same thread, whose `_meta`
//!   holds [`RESUME_META_KEY`]: the answer (a bare value when one interrupt
//!   is pending, else an object mapping interrupt ids to values). The
//!   call's arguments are not used then: the thread keeps its state.
//!
//! [`CONFIGURABLE_META_KEY`] passes extra configurable keys to every node
//! (the seed's `configurable` pass-through).

use rmcp::model::{
    CallToolRequestParams, ElicitRequestParams, ElicitationAction, ElicitationSchema,
};
use rmcp::service::{ElicitationMode, RequestContext};
use rmcp::{Peer, RoleServer};
use sandgraph_core::text::guest_text;
use serde_json::{Map, Value};

/// The `_meta` key of a `tools/call` that answers the pending interrupt(s)
/// of its thread instead of starting the graph again: any JSON value.
pub const RESUME_META_KEY: &str = "sandgraph/resume";

/// The `_meta` key of a `tools/call` with extra configurable keys for every
/// node: a JSON object. A `thread_id` key is dropped: only
/// [`crate::THREAD_META_KEY`] names a thread.
pub const CONFIGURABLE_META_KEY: &str = "sandgraph/configurable";

/// Most elicitation rounds within one call: a graph that interrupts again
/// after every answer must not hold a call (and its run slot) forever.
pub const MAX_ELICITATION_ROUNDS: usize = 8;

/// Most bytes of an interrupt payload quoted in an elicitation message: the
/// payload is guest output, shown to a person.
const MAX_PAYLOAD_BYTES: usize = 4096;

/// Most interrupts asked about in one round; more are left to a later
/// `RESUME_META_KEY` call (the runtime bounds the count anyway).
const MAX_INTERRUPTS_PER_ROUND: usize = 16;

/// What a graph tool call's `_meta` adds to its arguments.
#[derive(Debug, Default)]
pub(crate) struct CallMeta {
    /// Extra configurable keys.
    pub configurable: Map<String, Value>,
    /// The answer to the thread's pending interrupt(s).
    pub resume: Option<Value>,
}

fn meta_value<'a>(
    params: &'a CallToolRequestParams,
    ctx: &'a RequestContext<RoleServer>,
    key: &str,
) -> Option<&'a Value> {
    params
        .meta
        .as_ref()
        .and_then(|m| m.0.0.get(key))
        .or_else(|| ctx.meta.0.0.get(key))
}

/// The configurable keys and resume value of a call, or why they are
/// refused (the message of an `[invalid_input]` error). `on_thread`: the
/// call names a durable thread.
pub(crate) fn call_meta(
    params: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
    on_thread: bool,
) -> Result<CallMeta, String> {
    let configurable = match meta_value(params, ctx, CONFIGURABLE_META_KEY) {
        None => Map::new(),
        Some(Value::Object(map)) => {
            let mut map = map.clone();
            map.remove("thread_id");
            map
        }
        Some(_) => return Err(format!("_meta {CONFIGURABLE_META_KEY:?} must be an object")),
    };
    let resume = meta_value(params, ctx, RESUME_META_KEY).cloned();
    if resume.is_some() && !on_thread {
        return Err(format!(
            "_meta {RESUME_META_KEY:?} answers the interrupt of a durable thread: \
             name the thread with {:?}",
            crate::THREAD_META_KEY
        ));
    }
    Ok(CallMeta {
        configurable,
        resume,
    })
}

/// The client can answer form elicitations.
pub(crate) fn can_elicit(peer: &Peer<RoleServer>) -> bool {
    peer.supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
}

/// The schema of every elicitation: one required string, `answer`.
fn answer_schema() -> Option<ElicitationSchema> {
    ElicitationSchema::builder()
        .required_string_property("answer", |s| {
            s.description("your answer: JSON (such as \"yes\", true or an object), else plain text")
        })
        .build()
        .ok()
}

/// The person-facing message for one interrupt of `tool`: its payload as
/// JSON, bounded and with control characters escaped.
fn message(tool: &str, interrupt: &Value) -> String {
    let payload = interrupt.get("value").unwrap_or(interrupt);
    let text = serde_json::to_string(payload).unwrap_or_default();
    format!(
        "the graph tool {} is waiting for an answer:\n{}",
        guest_text(tool, 200),
        guest_text(&text, MAX_PAYLOAD_BYTES)
    )
}

/// An accepted answer: JSON when it parses, else the text itself.
fn answer_value(content: Option<&Value>) -> Option<Value> {
    let text = content?.get("answer")?.as_str()?;
    Some(
        sandgraph_core::json::parse_lossless(text, "the answer")
            .unwrap_or_else(|_| Value::String(text.to_owned())),
    )
}

/// Asks the client for the answers to the interrupts of `report` (an
/// interrupted call's value): the resume value, or `None` when the client
/// declines, cancels, fails, or the report lists no interrupt.
pub(crate) async fn elicit_answers(
    peer: &Peer<RoleServer>,
    tool: &str,
    report: &Value,
) -> Option<Value> {
    let interrupts = report.get("interrupts")?.as_array()?;
    if interrupts.is_empty() || interrupts.len() > MAX_INTERRUPTS_PER_ROUND {
        return None;
    }
    let schema = answer_schema()?;
    let mut answers = Map::new();
    for interrupt in interrupts {
        let request = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message(tool, interrupt),
            requested_schema: schema.clone(),
        };
        let result = peer.create_elicitation(request).await.ok()?;
        if result.action != ElicitationAction::Accept {
            return None;
        }
        let value = answer_value(result.content.as_ref())?;
        let id = interrupt
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        answers.insert(id.to_owned(), value);
    }
    if answers.len() == 1 {
        answers.into_iter().next().map(|(_, v)| v)
    } else {
        Some(Value::Object(answers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_is_json_when_it_parses_else_text() {
        assert_eq!(
            answer_value(Some(&json!({"answer": "true"}))),
            Some(json!(true))
        );
        assert_eq!(
            answer_value(Some(&json!({"answer": "\"yes\""}))),
            Some(json!("yes"))
        );
        assert_eq!(
            answer_value(Some(&json!({"answer": "yes"}))),
            Some(json!("yes"))
        );
        assert_eq!(answer_value(Some(&json!({"other": "yes"}))), None);
        assert_eq!(answer_value(None), None);
    }

    #[test]
    fn the_message_quotes_the_payload_bounded_and_escaped() {
        let m = message(
            "approval_graph",
            &json!({"id": "i1", "value": {"q": "ok?\u{1b}[2J"}}),
        );
        assert!(
            m.starts_with("the graph tool approval_graph is waiting"),
            "{m}"
        );
        assert!(!m.contains('\u{1b}'), "{m}");
        let big = "x".repeat(MAX_PAYLOAD_BYTES * 2);
        let m = message("t", &json!({"value": big}));
        assert!(m.len() < MAX_PAYLOAD_BYTES + 200, "{}", m.len());
    }
}
