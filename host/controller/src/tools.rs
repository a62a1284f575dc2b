//! The public entry: the three tool definitions and [`AgentGraphTools`],
//! which validates a call and runs it against the store.

use std::fmt;
use std::sync::{Arc, LazyLock, Mutex};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::state::{AgentGraphStore, AttemptStatus, SupervisorWake, UpdateSource, WakeStatus};
use sandgraph_params::ParameterSchema;

use crate::error::{ToolCode, ToolFailure};
use crate::ids::{graph_wake_attempt_id, graph_wake_id, stable_hash};
use crate::projection::{Projection, WorkStatus};
use crate::update::{UpdateInput, compile_update, decode, validate_against_projection};
use crate::view::{build_snapshot, render_snapshot, render_wake};

/// `view_agent_graph`.
pub const VIEW_TOOL: &str = "view_agent_graph";
/// `update_agent_graph`.
pub const UPDATE_TOOL: &str = "update_agent_graph";
/// `yield_agent_graph`.
pub const YIELD_TOOL: &str = "yield_agent_graph";

const VIEW_DESCRIPTION: &str = "Inspect one agent graph durably: scheduled work with statuses, bounded record summaries, readiness intents, and omitted counts. Pass no cursor for the current view; pass a nextCursor returned by an earlier view to page live state. Read-only.";

const UPDATE_DESCRIPTION: &str = "Adjust one agent graph durably: add work, stop work, or finish it. Always set operation when a provider-filled payload could carry unrelated fields. addWork entries: exactly one of subagentId (new preset), agentId (legacy agent), or operatorId (existing operator); instruction is required (cleaned of surrounding whitespace). Limits: 32 work items, 64 input ids per work item, 60000 instruction chars. replaces must name an existing work id from a previous view \u{2014} it never replaces work added by the same update. finish requires no pending non-terminal work and committed result ids. Pass idempotencyKey to make a retried identical update dedupe at the store.";

const YIELD_DESCRIPTION: &str = "End this supervisor turn successfully while scheduled graph work continues. Call after the current scheduling wave has no immediate decision; do not poll, sleep, or emit a waiting message. The host starts a new supervisor turn at the next durable graph checkpoint. This does not finish or close the graph.";

const UNAVAILABLE_MESSAGE: &str = "the agent graph controller is not configured \u{2014} start sandgraph with a controller (sandgraph supervise, or serve --controller)";

fn view_parameters() -> Value {
    json!({
        "graphId": {"type": "string", "required": true, "description": "The agent graph id to inspect."},
        "cursor": {"type": "string", "description": "Opaque page cursor from a previous view (omit for the latest view)."}
    })
}

fn update_parameters() -> Value {
    json!({
        "graphId": {"type": "string", "required": true, "description": "The agent graph id to update."},
        "operation": {
            "type": "string",
            "enum": ["add_work", "stop", "finish"],
            "description": "Explicit operation discriminator; unrelated provider-filled payloads are ignored."
        },
        "addWork": {
            "type": "array",
            "description": "Schedule work (up to 32 items).",
            "items": {
                "type": "object",
                "additionalProperties": true,
                "properties": {
                    "targetKind": {
                        "type": "string",
                        "enum": ["new_agent", "new_preset", "existing_operator"],
                        "description": "Explicit target discriminator; unrelated identity fields are ignored."
                    },
                    "agentId": {"type": "string", "description": "Legacy built-in agent id for new graph work."},
                    "subagentId": {"type": "string", "description": "User-approved subagent preset id for new graph work."},
                    "operatorId": {"type": "string", "description": "Runtime id of an EXISTING graph operator."},
                    "instruction": {"type": "string", "required": true},
                    "inputIds": {"type": "array", "items": {"type": "string"}, "description": "Durable record ids forming this work item input frontier."},
                    "selectedResultInputs": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": false,
                            "properties": {
                                "sourceGraphId": {"type": "string", "required": true},
                                "resultId": {"type": "string", "required": true}
                            }
                        }
                    },
                    "replaces": {"type": "string", "description": "Existing work superseded by this work item."},
                    "replacementMode": {"type": "string", "enum": ["none", "replace"], "description": "none drops a provider-filled replaces."},
                    "workId": {"type": "string", "description": "Optional explicit work id (normally derived deterministically)."}
                }
            }
        },
        "stop": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": false,
                "properties": {
                    "targetId": {"type": "string", "required": true},
                    "reason": {"type": "string", "required": true}
                }
            }
        },
        "finish": {
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "resultIds": {"type": "array", "items": {"type": "string"}, "description": "Committed graph record ids selected as the final result."},
                "reason": {"type": "string", "required": true}
            }
        },
        "idempotencyKey": {"type": "string", "description": "Stable key folded into the source triple: a retried identical update with the same key is not re-committed."}
    })
}

fn yield_parameters() -> Value {
    json!({
        "graphId": {"type": "string", "required": true, "description": "The agent graph id to yield for."},
        "reason": {"type": "string", "description": "Why the supervisor has no immediate decision until the graph changes."}
    })
}

struct Defs {
    view: ParameterSchema,
    update: ParameterSchema,
    yield_: ParameterSchema,
}

static DEFS: LazyLock<Defs> = LazyLock::new(|| {
    let compile = |v: Value| ParameterSchema::compile(&v).expect("the tool parameters compile");
    Defs {
        view: compile(view_parameters()),
        update: compile(update_parameters()),
        yield_: compile(yield_parameters()),
    }
});

/// A tool as shown to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    /// [`VIEW_TOOL`], [`UPDATE_TOOL`] or [`YIELD_TOOL`].
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// The compiled JSON Schema of the arguments.
    pub parameters: Value,
}

/// The three tools, in the order view, update, yield.
pub fn tool_defs() -> Vec<ToolDef> {
    let def = |name: &str, description: &str, schema: &ParameterSchema| ToolDef {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters: schema.json_schema().clone(),
    };
    vec![
        def(VIEW_TOOL, VIEW_DESCRIPTION, &DEFS.view),
        def(UPDATE_TOOL, UPDATE_DESCRIPTION, &DEFS.update),
        def(YIELD_TOOL, YIELD_DESCRIPTION, &DEFS.yield_),
    ]
}

/// Who is calling: the calling session, its last completed turn (the
/// session's turn boundary) and the tool call id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallIdentity {
    /// The calling session; must be the graph's root session.
    pub session_id: String,
    /// The session's last turn: the update source gets run
    /// `graph_run_<last_turn>` and turn `graph_turn_<last_turn>`.
    pub last_turn: u64,
    /// The model's tool call id.
    pub tool_call_id: String,
}

impl CallIdentity {
    fn source(&self) -> UpdateSource {
        UpdateSource {
            session_id: self.session_id.clone(),
            run_id: format!("graph_run_{}", self.last_turn),
            turn_id: format!("graph_turn_{}", self.last_turn),
            tool_call_id: self.tool_call_id.clone(),
            orchestration_mode: Some("graph".to_owned()),
        }
    }
}

/// A successful call: the structured value and the text block the model
/// sees.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The JSON result.
    pub value: Value,
    /// The human-readable rendering.
    pub text: String,
}

type UpdateHook = Arc<dyn Fn(&str) + Send + Sync>;

#[derive(Clone)]
struct Controller {
    store: AgentGraphStore,
    root_session_id: String,
    on_update: Option<UpdateHook>,
    /// Serializes read-check-commit of updates made through these tools, so
    /// two concurrent calls cannot both pass the closed check.
    update_lock: Arc<Mutex<()>>,
}

/// The three supervisor tools over one graph root session's store. Cheap to
/// clone; clones share the store, the hook and the update lock.
#[derive(Clone)]
pub struct AgentGraphTools {
    controller: Option<Controller>,
}

impl fmt::Debug for AgentGraphTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentGraphTools")
            .field(
                "root_session_id",
                &self.controller.as_ref().map(|c| &c.root_session_id),
            )
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ViewArgs {
    graph_id: String,
    cursor: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct YieldArgs {
    graph_id: String,
}

impl AgentGraphTools {
    /// Tools without a controller: every call fails with
    /// `[agent-graph-unavailable] …` before its arguments are validated.
    pub fn unavailable() -> Self {
        AgentGraphTools { controller: None }
    }

    /// Tools over `store` for the graphs of `root_session_id`, the only
    /// session allowed to call them.
    pub fn new(store: AgentGraphStore, root_session_id: impl Into<String>) -> Self {
        AgentGraphTools {
            controller: Some(Controller {
                store,
                root_session_id: root_session_id.into(),
                on_update: None,
                update_lock: Arc::new(Mutex::new(())),
            }),
        }
    }

    /// Calls `f` with the graph id after every update that was committed
    /// (not after a replay), before the result is built, so the host can
    /// drive the graph's coordinator.
    pub fn on_update(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        if let Some(c) = &mut self.controller {
            c.on_update = Some(Arc::new(f));
        }
        self
    }

    /// Whether a controller is configured.
    pub fn is_available(&self) -> bool {
        self.controller.is_some()
    }

    /// The root session, when a controller is configured.
    pub fn root_session_id(&self) -> Option<&str> {
        self.controller.as_ref().map(|c| c.root_session_id.as_str())
    }

    fn controller(&self) -> Result<&Controller, ToolFailure> {
        self.controller
            .as_ref()
            .ok_or_else(|| ToolFailure::coded(ToolCode::AgentGraphUnavailable, UNAVAILABLE_MESSAGE))
    }

    /// Runs one tool call: the availability check, argument validation
    /// (`invalid arguments: …`), the caller check, then the tool, whose
    /// first step is the root-session guard.
    ///
    /// # Errors
    ///
    /// A [`ToolFailure`]; its `Display` is what the model should see.
    pub fn call(
        &self,
        tool: &str,
        args: Value,
        call: &CallIdentity,
    ) -> Result<ToolResult, ToolFailure> {
        let controller = self.controller()?;
        let schema = match tool {
            VIEW_TOOL => &DEFS.view,
            UPDATE_TOOL => &DEFS.update,
            YIELD_TOOL => &DEFS.yield_,
            other => {
                return Err(ToolFailure::coded(
                    ToolCode::InvalidInput,
                    format!("unknown agent graph tool {other}"),
                ));
            }
        };
        schema
            .validate(&args)
            .map_err(|e| ToolFailure::plain(e.to_string()))?;
        if call.session_id.is_empty() {
            // Passed through without a prefix, as the original's.
            return Err(ToolFailure::plain(
                "agent graph tools require an agent-bound caller",
            ));
        }
        match tool {
            VIEW_TOOL => controller.view(decode(args)?, call),
            UPDATE_TOOL => controller.update(decode(args)?, call),
            _ => controller.yield_(decode(args)?, call),
        }
    }

    /// The live projection of a graph (empty for an unknown graph), for the
    /// host that drives the root session's graphs. No root-session check.
    /// Callers with no root session read it with [`Projection::load`].
    ///
    /// # Errors
    ///
    /// `agent-graph-unavailable`, a store error or a projection error.
    pub fn snapshot(&self, graph_id: &str) -> Result<Projection, ToolFailure> {
        self.controller()?.load(graph_id)
    }
}

/// Wake delivery for hosts whose root session is not driven by a
/// supervisor loop (an MCP client of `serve --controller`): the host finds
/// the wakes that are due and delivers them on the root's next call.
impl AgentGraphTools {
    /// The wakes of `graph_id` claimed by this root session that are due:
    /// `pending` (or `retryable_failed`), claimed for a state the graph has
    /// left, with at least one record written since the wake was claimed
    /// (the durable checkpoint the yield waited for). Oldest first. No
    /// root-session check: for the host.
    ///
    /// # Errors
    ///
    /// `agent-graph-unavailable`, a store error or a projection error.
    pub fn due_wakes(&self, graph_id: &str) -> Result<Vec<SupervisorWake>, ToolFailure> {
        let c = self.controller()?;
        let wakes = c.store.list_unsettled_supervisor_wakes(Some(graph_id))?;
        if wakes.is_empty() {
            return Ok(wakes);
        }
        let projection = c.load(graph_id)?;
        let now = snapshot_version(&projection);
        Ok(wakes
            .into_iter()
            .filter(|w| {
                matches!(w.status, WakeStatus::Pending | WakeStatus::RetryableFailed)
                    && w.root_session_id == c.root_session_id
                    && w.snapshot_version != now
                    && projection
                        .records()
                        .iter()
                        .any(|r| r.emitted_at >= w.created_at)
            })
            .collect())
    }

    /// Delivers `wake` to its root session through the store's wake state
    /// machine: a delivery attempt begins (id and turn
    /// [`graph_wake_attempt_id`] of the wake and its attempt count) and
    /// completes `delivered`. Returns the wake's text (the records since it
    /// was claimed, and what is pending) and `{wakeId, attemptId, text}`,
    /// or `None` when the attempt was not acquired (another caller is
    /// delivering it, or it is settled).
    ///
    /// # Errors
    ///
    /// `agent-graph-unavailable`, a store error (the wake is then left to
    /// its attempt), or a projection error.
    pub fn deliver_wake(&self, wake: &SupervisorWake) -> Result<Option<ToolResult>, ToolFailure> {
        let c = self.controller()?;
        let (g, w) = (wake.graph_id.as_str(), wake.wake_id.as_str());
        let text = render_wake(&c.load(g)?, w, wake.created_at);
        let attempt = graph_wake_attempt_id(w, u64::from(wake.attempt_count));
        let begun = c
            .store
            .begin_supervisor_wake_attempt(g, w, &attempt, &attempt, None)?;
        if !begun.acquired {
            return Ok(None);
        }
        c.store
            .complete_supervisor_wake_attempt(g, w, &attempt, AttemptStatus::Delivered, None)?;
        Ok(Some(ToolResult {
            value: json!({"wakeId": w, "attemptId": attempt, "text": text}),
            text,
        }))
    }
}

impl Projection {
    /// The bounded view of this projection that `view_agent_graph` returns,
    /// one page (the first when `cursor` is `None`).
    ///
    /// # Errors
    ///
    /// `invalid_input` for a cursor that is malformed or names no entry.
    pub fn view_page(&self, cursor: Option<&str>) -> Result<ToolResult, ToolFailure> {
        let snapshot = build_snapshot(self, cursor)?;
        Ok(ToolResult {
            text: render_snapshot(&snapshot),
            value: serde_json::to_value(&snapshot).expect("a snapshot serializes"),
        })
    }
}

/// The version of a graph's state that a yield's wake is claimed for
/// (seed-contracts §2.8): revision, work statuses and claim statuses.
fn snapshot_version(projection: &Projection) -> String {
    stable_hash(&json!({
        "schemaVersion": 1,
        "graphId": projection.graph_id(),
        "revision": projection.revision(),
        "work": projection
            .work()
            .iter()
            .map(|w| json!([w.work_id(), w.status().as_str()]))
            .collect::<Vec<_>>(),
        "claims": projection
            .claims()
            .iter()
            .map(|c| json!([c.request.intent_id, c.admission_status]))
            .collect::<Vec<_>>(),
        "intents": [],
    }))
}

impl Controller {
    fn guard(&self, graph_id: &str, call: &CallIdentity) -> Result<(), ToolFailure> {
        if call.session_id == self.root_session_id {
            return Ok(());
        }
        // The root's id is never named: it is another client's session,
        // and a session id must not be handed to whoever asks.
        Err(ToolFailure::coded(
            ToolCode::NotRootSession,
            format!(
                "agent graph {graph_id}: only its root session may call this tool (caller {})",
                call.session_id
            ),
        ))
    }

    fn load(&self, graph_id: &str) -> Result<Projection, ToolFailure> {
        Projection::load(&self.store, graph_id)
    }

    fn view(&self, args: ViewArgs, call: &CallIdentity) -> Result<ToolResult, ToolFailure> {
        self.guard(&args.graph_id, call)?;
        self.load(&args.graph_id)?.view_page(args.cursor.as_deref())
    }

    fn update(&self, args: UpdateInput, call: &CallIdentity) -> Result<ToolResult, ToolFailure> {
        self.guard(&args.graph_id, call)?;
        let request = compile_update(args, &call.source())?;
        let graph_id = request.graph_id.clone();
        let outcome = {
            let _lock = self
                .update_lock
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let projection = self.load(&graph_id)?;
            // A replay of a committed update goes straight to the store,
            // which returns the stored row (or refuses a different payload):
            // its work ids exist by now, and a replayed finish closed the
            // graph itself.
            let replay = projection
                .updates()
                .iter()
                .any(|u| u.request.update_id == request.update_id);
            if !replay {
                if projection.closed() {
                    return Err(ToolFailure::coded(
                        ToolCode::GraphClosed,
                        format!(
                            "agent graph {graph_id} is already finished; updates are no longer accepted"
                        ),
                    ));
                }
                validate_against_projection(&request, &projection)?;
            }
            self.store.commit_schedule_update(request)?
        };
        if outcome.created
            && let Some(hook) = &self.on_update
        {
            hook(&graph_id);
        }
        let page = self.load(&graph_id)?.view_page(None)?;
        let verb = if outcome.created {
            "committed"
        } else {
            "reused"
        };
        Ok(ToolResult {
            text: format!(
                "Agent graph update {verb} at revision {}.\n\n{}",
                outcome.update.revision, page.text
            ),
            value: json!({
                "update": {
                    "revision": outcome.update.revision,
                    "committedAt": outcome.update.committed_at,
                    "created": outcome.created,
                },
                "graph": page.value,
            }),
        })
    }

    fn yield_(&self, args: YieldArgs, call: &CallIdentity) -> Result<ToolResult, ToolFailure> {
        let g = &args.graph_id;
        self.guard(g, call)?;
        let projection = self.load(g)?;
        if projection.closed() {
            return Err(ToolFailure::coded(
                ToolCode::GraphClosed,
                format!("agent graph {g} is already finished; yield is no longer valid"),
            ));
        }
        if projection.requested().next().is_none() && projection.live_claims().next().is_none() {
            return Err(ToolFailure::coded(
                ToolCode::NothingToYield,
                format!(
                    "agent graph {g}: nothing to yield for \u{2014} no requested work, no live intent claims, and no readiness intents"
                ),
            ));
        }
        let snapshot_version = snapshot_version(&projection);
        let wake_id = graph_wake_id(g, &snapshot_version);
        let claimed = self.store.claim_supervisor_wake(
            g,
            &wake_id,
            &snapshot_version,
            &self.root_session_id,
        )?;
        let pending = self
            .load(g)?
            .work()
            .iter()
            .filter(|w| w.status() == WorkStatus::Requested)
            .count();
        let wake_id = claimed.wake.wake_id;
        Ok(ToolResult {
            text: format!(
                "Yielded agent graph {g} (wake {wake_id}); {pending} pending items continue."
            ),
            value: json!({
                "deliveredOnIdle": true,
                "wakeId": wake_id,
                "pendingWorkCount": pending,
            }),
        })
    }
}
