//! What the routing agent writes to the audit journal: one entry per
//! attempt, its decision and stage as typed values spelled as the journal
//! has always stored them, every text a model or a graph shaped bounded and
//! escaped.

use crate::journal_table::{Journal, JournalEntry};
use sandgraph_core::RunError;
use sandgraph_core::text::{MAX_GUEST_NAME_BYTES, guest_text};
use serde_json::{Value, json};

/// The largest outcome the journal keeps whole, in bytes of JSON text. A
/// final state may be up to 16 MiB; the journal is an audit trail, not a
/// second copy of every result, so bigger outcomes are kept as their first
/// bytes plus their size.
pub const MAX_JOURNAL_OUTCOME_BYTES: usize = 64 * 1024;

/// The longest `reason` the journal keeps, in bytes of input text. A reason
/// quotes a graph's error or `validate` reason (capped by the runtime at
/// 4 KiB) or a model's plain-text answer (unbounded); 16 KiB keeps the
/// host's prefix and the quoted text whole while a flood cannot fill the
/// journal. The kept text is escaped: one inert line.
pub const MAX_JOURNAL_REASON_BYTES: usize = 16 * 1024;

/// How an attempt ended: the journal's `decision`, and the `stage` that
/// goes with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The graph ran and its outcome (or a `post-execute` replacement) was
    /// returned.
    Accepted,
    /// The choice was rejected at this stage; the reason went back to the
    /// model.
    Rejected(Stage),
    /// The graph failed and its error propagated.
    Failed,
    /// The model answered in plain text and the fallback ran.
    Fallback,
    /// The model call failed (stage `model`).
    ModelFailed,
}

impl Decision {
    /// The journal's `decision` text.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Decision::Accepted => "accepted",
            Decision::Rejected(_) => "rejected",
            Decision::Failed => "failed",
            Decision::Fallback => "fallback",
            Decision::ModelFailed => "error",
        }
    }

    /// The step that decided the attempt, when one did.
    pub(crate) fn stage(self) -> Option<Stage> {
        match self {
            Decision::Rejected(stage) => Some(stage),
            Decision::ModelFailed => Some(Stage::Model),
            Decision::Accepted | Decision::Failed | Decision::Fallback => None,
        }
    }
}

/// The step of a routing attempt that decided it: the journal's `stage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// The model call.
    Model,
    /// The model named a tool that is not a candidate.
    UnknownTool,
    /// The arguments are not JSON.
    InvalidJson,
    /// The arguments do not pass the tool's schema.
    InvalidArgs,
    /// The graph's `validate` refused the request.
    Validate,
    /// A `pre-execute` listener denied the run.
    PreExecute,
    /// A `post-execute` listener blocked the outcome.
    PostExecute,
}

impl Stage {
    /// The journal's `stage` text.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Stage::Model => "model",
            Stage::UnknownTool => "unknown_tool",
            Stage::InvalidJson => "invalid_json",
            Stage::InvalidArgs => "invalid_args",
            Stage::Validate => "validate",
            Stage::PreExecute => "pre_execute",
            Stage::PostExecute => "post_execute",
        }
    }
}

/// Which attempt of which routed request an entry belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttemptAt<'a> {
    /// The routed request's id.
    pub(crate) route_id: &'a str,
    /// The request text.
    pub(crate) request: &'a str,
    /// 1 for the model's first answer, 2 after the first re-ask, ...
    pub(crate) attempt: u32,
    /// Unix milliseconds when the attempt began.
    pub(crate) started: u64,
}

/// What an attempt tried (the tool and its arguments), what came of it,
/// and how long each part took.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tried {
    pub(crate) tool: Option<String>,
    pub(crate) args: Option<Value>,
    pub(crate) outcome: Option<Value>,
    pub(crate) model_ms: u64,
    pub(crate) check_ms: u64,
    pub(crate) run_ms: Option<u64>,
    /// The sha256 of the component that ran, when one ran.
    pub(crate) graph_digest: Option<String>,
}

/// Appends one attempt to `journal`. The journal is an audit trail beside
/// the result: a failing journal is reported loudly but does not undo a run
/// that happened.
pub(crate) fn append(
    journal: &Journal,
    at: AttemptAt<'_>,
    decision: Decision,
    reason: Option<&str>,
    tried: Tried,
) {
    let entry = JournalEntry {
        seq: 0,
        route_id: at.route_id.to_owned(),
        attempt: at.attempt,
        at_ms: at.started,
        request: at.request.to_owned(),
        // A rejected choice names whatever tool the model made up.
        tool: tried.tool.map(|t| guest_text(&t, MAX_GUEST_NAME_BYTES)),
        args: tried.args.as_ref().map(journal_value),
        decision: decision.as_str().to_owned(),
        stage: decision.stage().map(|s| s.as_str().to_owned()),
        reason: reason.map(journal_text),
        outcome: tried.outcome,
        model_ms: tried.model_ms,
        check_ms: tried.check_ms,
        run_ms: tried.run_ms,
        graph_digest: tried.graph_digest,
    };
    if let Err(e) = journal.append(&entry) {
        tracing::error!(
            route = at.route_id,
            attempt = at.attempt,
            "cannot write the routing journal: {e}"
        );
    }
}

/// The journal's copy of an outcome, bounded by
/// [`MAX_JOURNAL_OUTCOME_BYTES`].
pub(crate) fn journal_value(value: &Value) -> Value {
    let text = value.to_string();
    if text.len() <= MAX_JOURNAL_OUTCOME_BYTES {
        return value.clone();
    }
    let mut end = MAX_JOURNAL_OUTCOME_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    json!({"truncated": true, "bytes": text.len(), "head": &text[..end]})
}

/// The journal's copy of a graph's error.
pub(crate) fn error_value(e: &RunError) -> Value {
    json!({"error": {"code": e.code.as_str(), "message": journal_text(&e.message)}})
}

/// Text the journal keeps: capped at [`MAX_JOURNAL_REASON_BYTES`] (the cut
/// marked) with every control character escaped, so a graph or a model can
/// neither flood the journal nor forge a line of `sandgraph journal`.
fn journal_text(text: &str) -> String {
    guest_text(text, MAX_JOURNAL_REASON_BYTES)
}

#[cfg(test)]
mod tests {
    use sandgraph_core::ErrorCode;

    use super::*;

    #[test]
    fn journal_text_is_bounded_and_inert() {
        let flood = format!(
            "\u{1b}]0;pwned\u{7}\nerror[ok]: forged{}",
            "x".repeat(1 << 20)
        );
        let kept = journal_text(&flood);
        assert!(kept.len() < MAX_JOURNAL_REASON_BYTES + 32, "{}", kept.len());
        assert!(kept.starts_with("\\u{1b}]0;pwned\\u{7}\\nerror[ok]: forged"));
        assert!(kept.ends_with("more bytes]"));
        assert!(!kept.chars().any(char::is_control));
        let v = error_value(&RunError::new(ErrorCode::NodeError, flood));
        let message = v["error"]["message"].as_str().unwrap();
        assert_eq!(message, kept);
    }

    /// Journals written before these were types spelled them so; they must
    /// read the same.
    #[test]
    fn decisions_and_stages_keep_their_stored_text() {
        let spelled = |d: Decision| (d.as_str(), d.stage().map(Stage::as_str));
        assert_eq!(spelled(Decision::Accepted), ("accepted", None));
        assert_eq!(spelled(Decision::Failed), ("failed", None));
        assert_eq!(spelled(Decision::Fallback), ("fallback", None));
        assert_eq!(spelled(Decision::ModelFailed), ("error", Some("model")));
        let stages = [
            (Stage::UnknownTool, "unknown_tool"),
            (Stage::InvalidJson, "invalid_json"),
            (Stage::InvalidArgs, "invalid_args"),
            (Stage::Validate, "validate"),
            (Stage::PreExecute, "pre_execute"),
            (Stage::PostExecute, "post_execute"),
        ];
        for (stage, text) in stages {
            assert_eq!(spelled(Decision::Rejected(stage)), ("rejected", Some(text)));
        }
    }
}
