//! [`GraphRoutingAgent`]: one routing round. The model picks a graph tool,
//! the choice is checked, the graph runs between the hooks, and every
//! rejection goes back to the model with its reason.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use sandgraph_core::text::{MAX_GUEST_NAME_BYTES, guest_message, guest_name, guest_text};
use sandgraph_llm::{ChatRequest, LlmError, Message, Provider, ToolCall, ToolSpec};
use sandgraph_registry::{CallOptions, GraphTool, Registry};
use sandgraph_runtime::{CancellationToken, ErrorCode, RunError};
use sandgraph_store::{Journal, JournalEntry};
use serde_json::{Map, Value, json};

use crate::hooks::{Execution, Hooks, PostDecision, PreDecision, Settled};

/// The name of the built-in fallback: no parameters, returns `{}`, does
/// nothing.
pub const FALLBACK_TOOL: &str = "graph_routing_fallback";

/// Re-asks after a rejected choice when nothing else is configured.
pub const DEFAULT_MAX_RETRIES: u32 = 3;

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

/// The system prompt when none is configured.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You route a user's request to a tool. Call exactly one of the tools, the one that fits the request, with arguments that satisfy its parameters. If no tool fits the request, answer in plain text without calling a tool.";

/// The tool message the model gets after a rejected choice: the reason,
/// then the instruction to choose again.
pub fn feedback(reason: &str) -> String {
    format!("rejected: {reason}\nChoose a tool again and call it with corrected arguments.")
}

/// Which graph tools the model may choose from, with the meaning of
/// `tools.restrict`: `allow` keeps only the names listed, `deny` removes
/// names, and both together intersect.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFilter {
    /// Only these, when given.
    pub allow: Option<Vec<String>>,
    /// Never these.
    pub deny: Vec<String>,
}

/// What runs when the model answers in plain text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Fallback {
    /// [`FALLBACK_TOOL`]: returns `{}`.
    #[default]
    Builtin,
    /// A graph tool of the registry whose parameters accept `{}`.
    Tool(String),
}

/// How a [`GraphRoutingAgent`] routes.
#[derive(Debug, Clone)]
pub struct RouterOptions {
    /// The model name sent to the provider.
    pub model: String,
    /// The candidate filter.
    pub filter: ToolFilter,
    /// Re-asks after a rejected choice: at most `1 + max_retries` model
    /// calls.
    pub max_retries: u32,
    /// What runs on a plain-text answer.
    pub fallback: Fallback,
    /// The system prompt; [`DEFAULT_SYSTEM_PROMPT`] when `None`.
    pub system_prompt: Option<String>,
}

impl RouterOptions {
    /// Defaults for `model`: no filter, 3 retries, the built-in fallback.
    pub fn new(model: impl Into<String>) -> Self {
        RouterOptions {
            model: model.into(),
            filter: ToolFilter::default(),
            max_retries: DEFAULT_MAX_RETRIES,
            fallback: Fallback::Builtin,
            system_prompt: None,
        }
    }
}

/// Per-request options of [`GraphRoutingAgent::route_with`].
#[derive(Debug, Clone, Default)]
pub struct RouteOptions {
    /// Cancels the model call and the run.
    pub cancel: CancellationToken,
    /// The durable thread the chosen graph runs on.
    pub thread_id: Option<String>,
    /// Extra configurable keys for the run.
    pub configurable: Map<String, Value>,
    /// Text handed to the model after the request (for example summaries
    /// of earlier results); not seen by `validate`.
    pub context: Option<String>,
    /// Durable threads: with these and `thread_id`, the chosen graph (or
    /// the fallback graph) runs on the durable thread `<thread_id>/<tool>`
    /// (one thread per graph, as a thread belongs to one graph), starting
    /// from its stored state.
    pub threads: Option<sandgraph_store::ThreadStore>,
}

impl RouteOptions {
    /// `base` for running `tool`: on its durable thread when there is a
    /// thread store, so what the run reports (an interrupt included) is
    /// stored before it is returned.
    fn for_tool(&self, base: &CallOptions, tool: &str) -> CallOptions {
        let mut run_opts = base.clone();
        if let (Some(threads), Some(thread)) = (&self.threads, &self.thread_id) {
            run_opts.thread_id = Some(format!("{thread}/{tool}"));
            run_opts.threads = Some(threads.clone());
        }
        run_opts
    }
}

/// A routed request that ran.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RouteOutcome {
    /// The tool that ran (the fallback's name on the fallback path).
    pub tool: String,
    /// Its arguments (`{}` on the fallback path).
    pub args: Value,
    /// The value returned: the graph's final state, or a `post-execute`
    /// replacement.
    pub result: Value,
    /// Model calls made.
    pub attempts: u32,
    /// The model answered in plain text and the fallback ran.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fallback: bool,
    /// The graph stopped at an interrupt (`result` is the interrupt
    /// report; on a durable thread the run can be resumed).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// The model's plain-text answer on the fallback path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The id of the request in the journal.
    pub route_id: String,
}

/// Why a routed request failed.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// The filter or the fallback is wrong; raised before any model call.
    #[error("routing configuration: {0}")]
    Config(String),
    /// The model call failed (after the client's own retries).
    #[error("model call failed: {0}")]
    Llm(#[from] LlmError),
    /// Every attempt was rejected.
    #[error("routing failed after {attempts} attempts: {reason}")]
    Exhausted {
        /// Model calls made.
        attempts: u32,
        /// The last rejection's reason.
        reason: String,
    },
    /// The chosen graph (or the fallback) failed and no listener blocked:
    /// the graph's error, unchanged.
    #[error("{0}")]
    Graph(RunError),
    /// A hook listener failed.
    #[error("{phase} listener failed: {message}")]
    Hook {
        /// `pre-execute` or `post-execute`.
        phase: &'static str,
        /// The listener's error.
        message: String,
    },
    /// The caller cancelled.
    #[error("routing was cancelled")]
    Cancelled,
}

impl RouteError {
    /// A stable code: `routing_config`, the provider's code,
    /// `routing_exhausted`, the graph's code, `hook_error`, `cancelled`.
    pub fn code(&self) -> &'static str {
        match self {
            RouteError::Config(_) => "routing_config",
            RouteError::Llm(e) => e.code(),
            RouteError::Exhausted { .. } => "routing_exhausted",
            RouteError::Graph(e) => e.code.as_str(),
            RouteError::Hook { .. } => "hook_error",
            RouteError::Cancelled => "cancelled",
        }
    }
}

/// Routes requests to the graph tools of a registry (seed:
/// `GraphRoutingAgent`).
pub struct GraphRoutingAgent {
    registry: Registry,
    provider: Arc<dyn Provider>,
    options: RouterOptions,
    hooks: Hooks,
    journal: Option<Journal>,
}

impl std::fmt::Debug for GraphRoutingAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphRoutingAgent")
            .field("options", &self.options)
            .field("hooks", &self.hooks)
            .field("journal", &self.journal.is_some())
            .finish_non_exhaustive()
    }
}

/// One checked choice, or the reason it was rejected.
enum Check {
    Chosen { tool: Arc<GraphTool>, args: Value },
    Rejected { stage: &'static str, reason: String },
}

/// What one attempt ended with, for the journal.
#[derive(Default)]
struct AttemptRecord {
    tool: Option<String>,
    args: Option<Value>,
    decision: &'static str,
    stage: Option<&'static str>,
    reason: Option<String>,
    outcome: Option<Value>,
    model_ms: u64,
    check_ms: u64,
    run_ms: Option<u64>,
    /// The sha256 of the component that ran, when one ran.
    graph_digest: Option<String>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

fn new_route_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("route-{}-{}-{n}", now_ms(), std::process::id())
}

/// The journal's copy of an outcome, bounded by
/// [`MAX_JOURNAL_OUTCOME_BYTES`].
fn journal_value(value: &Value) -> Value {
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

fn error_value(e: &RunError) -> Value {
    json!({"error": {"code": e.code.as_str(), "message": journal_text(&e.message)}})
}

/// Text the journal keeps: capped at [`MAX_JOURNAL_REASON_BYTES`] (the cut
/// marked) with every control character escaped, so a graph or a model can
/// neither flood the journal nor forge a line of `sandgraph journal`.
fn journal_text(text: &str) -> String {
    guest_text(text, MAX_JOURNAL_REASON_BYTES)
}

impl GraphRoutingAgent {
    /// A router over the graph tools of `registry`. The filter and the
    /// fallback are checked here, and again at every request (the registry
    /// may change while the host runs).
    ///
    /// # Errors
    ///
    /// [`RouteError::Config`]: a filter naming an unknown graph tool or
    /// leaving none, or a fallback that is unknown or refuses `{}`.
    pub fn new(
        registry: Registry,
        provider: Arc<dyn Provider>,
        options: RouterOptions,
    ) -> Result<Self, RouteError> {
        let agent = GraphRoutingAgent {
            registry,
            provider,
            options,
            hooks: Hooks::default(),
            journal: None,
        };
        agent.candidates()?;
        agent.fallback_tool()?;
        Ok(agent)
    }

    /// Records every attempt in `journal`.
    pub fn with_journal(mut self, journal: Journal) -> Self {
        self.journal = Some(journal);
        self
    }

    /// The listeners; register with [`Hooks::on_pre_execute`] and
    /// [`Hooks::on_post_execute`].
    pub fn hooks_mut(&mut self) -> &mut Hooks {
        &mut self.hooks
    }

    /// The options.
    pub fn options(&self) -> &RouterOptions {
        &self.options
    }

    /// The graph tools the model may choose from, in name order.
    ///
    /// # Errors
    ///
    /// [`RouteError::Config`] as [`GraphRoutingAgent::new`].
    pub fn candidates(&self) -> Result<Vec<Arc<GraphTool>>, RouteError> {
        let mut tools = self.registry.graph_tools();
        tools.sort_by(|a, b| a.name().cmp(b.name()));
        let known: BTreeSet<&str> = tools.iter().map(|t| t.name()).collect();
        let filter = &self.options.filter;
        let unknown = |list: &[String], which: &str| -> Result<(), RouteError> {
            let missing: Vec<&str> = list
                .iter()
                .map(String::as_str)
                .filter(|n| !known.contains(n))
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            let known_list = known.iter().copied().collect::<Vec<_>>().join(", ");
            Err(RouteError::Config(format!(
                "filter {which} names unknown graph tool{} {} (graph tools: {})",
                if missing.len() == 1 { "" } else { "s" },
                missing
                    .iter()
                    .map(|n| format!("\"{n}\""))
                    .collect::<Vec<_>>()
                    .join(", "),
                if known_list.is_empty() {
                    "none".to_owned()
                } else {
                    known_list
                },
            )))
        };
        if let Some(allow) = &filter.allow {
            unknown(allow, "allow")?;
        }
        unknown(&filter.deny, "deny")?;
        let kept: Vec<Arc<GraphTool>> = tools
            .iter()
            .filter(|t| {
                filter
                    .allow
                    .as_ref()
                    .is_none_or(|a| a.iter().any(|n| n == t.name()))
                    && !filter.deny.iter().any(|n| n == t.name())
            })
            .cloned()
            .collect();
        if kept.is_empty() {
            return Err(RouteError::Config(if tools.is_empty() {
                "there is no graph tool to route to".to_owned()
            } else {
                format!(
                    "the filter leaves no graph tool (allow: {}, deny: {})",
                    filter
                        .allow
                        .as_ref()
                        .map_or_else(|| "all".to_owned(), |a| format!("[{}]", a.join(", "))),
                    format_args!("[{}]", filter.deny.join(", "))
                )
            }));
        }
        Ok(kept)
    }

    fn fallback_tool(&self) -> Result<Option<Arc<GraphTool>>, RouteError> {
        match &self.options.fallback {
            Fallback::Builtin => Ok(None),
            Fallback::Tool(name) => {
                let tool = self.registry.get(name).ok_or_else(|| {
                    RouteError::Config(format!("fallback names unknown tool \"{name}\""))
                })?;
                tool.parameters().validate(&json!({})).map_err(|e| {
                    RouteError::Config(format!(
                        "fallback \"{name}\" must accept {{}} as its arguments: {e}"
                    ))
                })?;
                Ok(Some(tool))
            }
        }
    }

    /// Routes `request`: see [`GraphRoutingAgent::route_with`].
    ///
    /// # Errors
    ///
    /// As [`GraphRoutingAgent::route_with`].
    pub async fn route(&self, request: &str) -> Result<RouteOutcome, RouteError> {
        self.route_with(request, RouteOptions::default()).await
    }

    /// One routing round: the model picks a tool, the choice is checked
    /// (the tool is a candidate; the arguments are JSON; they pass the
    /// schema; the graph's `validate` accepts them with `request` in its
    /// context), `pre-execute` listeners may deny it, the graph runs,
    /// `post-execute` listeners may block or replace the outcome. A
    /// rejection at any step goes back to the model with its reason, at
    /// most `max_retries` times. A plain-text answer runs the fallback with
    /// `{}` and no hooks.
    ///
    /// # Errors
    ///
    /// See [`RouteError`]. The graph's own error propagates unchanged
    /// unless a `post-execute` listener blocks it.
    pub async fn route_with(
        &self,
        request: &str,
        opts: RouteOptions,
    ) -> Result<RouteOutcome, RouteError> {
        let candidates = self.candidates()?;
        let fallback = self.fallback_tool()?;
        let route_id = new_route_id();
        let tools: Vec<ToolSpec> = candidates
            .iter()
            .map(|t| ToolSpec {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                parameters: t.input_schema().clone(),
            })
            .collect();
        let mut user = request.to_owned();
        if let Some(context) = &opts.context {
            user.push_str("\n\n");
            user.push_str(context);
        }
        let mut messages = vec![
            Message::System {
                content: self
                    .options
                    .system_prompt
                    .clone()
                    .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_owned()),
            },
            Message::User { content: user },
        ];
        let call_opts = CallOptions {
            cancel: opts.cancel.clone(),
            thread_id: opts.thread_id.clone(),
            configurable: opts.configurable.clone(),
            request: Some(request.to_owned()),
            threads: None,
            sub_run_of: None,
        };
        let mut last_reason = String::new();
        for attempt in 1..=self.options.max_retries.saturating_add(1) {
            let started = now_ms();
            let model_start = Instant::now();
            let chat = ChatRequest {
                model: self.options.model.clone(),
                messages: messages.clone(),
                tools: tools.clone(),
                temperature: None,
                max_tokens: None,
            };
            let response = tokio::select! {
                r = self.provider.chat(&chat) => r,
                () = opts.cancel.cancelled() => return Err(RouteError::Cancelled),
            };
            let model_ms = ms(model_start);
            let response = match response {
                Ok(r) => r,
                Err(e) => {
                    self.journal(
                        &route_id,
                        attempt,
                        started,
                        request,
                        AttemptRecord {
                            decision: "error",
                            stage: Some("model"),
                            reason: Some(e.to_string()),
                            model_ms,
                            ..AttemptRecord::default()
                        },
                    );
                    return Err(RouteError::Llm(e));
                }
            };
            // The first tool call is the model's choice; later ones in the
            // same answer are ignored (and not echoed back).
            let Some(call) = response.tool_calls.first().cloned() else {
                // The fallback graph runs on its thread like a chosen one: a
                // thread id without its store would be reported and lost.
                let fallback_opts = match &fallback {
                    Some(t) => opts.for_tool(&call_opts, t.name()),
                    None => call_opts.clone(),
                };
                return self
                    .run_fallback(
                        fallback.as_ref(),
                        response.content,
                        attempt,
                        &route_id,
                        started,
                        request,
                        model_ms,
                        &fallback_opts,
                    )
                    .await;
            };
            let check_start = Instant::now();
            let (tool, args) = match self.check(&candidates, &call, &call_opts).await? {
                Check::Chosen { tool, args } => (tool, args),
                Check::Rejected { stage, reason } => {
                    self.journal(
                        &route_id,
                        attempt,
                        started,
                        request,
                        AttemptRecord {
                            tool: Some(call.name.clone()),
                            args: Some(raw_args(&call)),
                            decision: "rejected",
                            stage: Some(stage),
                            reason: Some(reason.clone()),
                            model_ms,
                            check_ms: ms(check_start),
                            ..AttemptRecord::default()
                        },
                    );
                    push_feedback(&mut messages, response.content, call, &reason);
                    last_reason = reason;
                    continue;
                }
            };
            let exec = Arc::new(Execution {
                tool: tool.name().to_owned(),
                args: args.clone(),
                request: request.to_owned(),
                cancel: opts.cancel.clone(),
                attempt,
            });
            let pre = self
                .hooks
                .pre_execute(exec.clone())
                .await
                .map_err(|e| RouteError::Hook {
                    phase: "pre-execute",
                    message: e.to_string(),
                })?;
            if let PreDecision::Deny { reason } = pre {
                self.journal(
                    &route_id,
                    attempt,
                    started,
                    request,
                    AttemptRecord {
                        tool: Some(call.name.clone()),
                        args: Some(args),
                        decision: "rejected",
                        stage: Some("pre_execute"),
                        reason: Some(reason.clone()),
                        model_ms,
                        check_ms: ms(check_start),
                        ..AttemptRecord::default()
                    },
                );
                push_feedback(&mut messages, response.content, call, &reason);
                last_reason = reason;
                continue;
            }
            let check_ms = ms(check_start);
            let run_start = Instant::now();
            let run_opts = opts.for_tool(&call_opts, tool.name());
            let settled: Settled = tool.execute(args.clone(), run_opts).await;
            let run_ms = ms(run_start);
            let settled = Arc::new(settled);
            let post = self
                .hooks
                .post_execute(exec, settled.clone())
                .await
                .map_err(|e| RouteError::Hook {
                    phase: "post-execute",
                    message: e.to_string(),
                })?;
            let original = match settled.as_ref() {
                Ok(out) => journal_value(&out.value),
                Err(e) => error_value(e),
            };
            let record = |decision, stage, reason: Option<String>, outcome| AttemptRecord {
                tool: Some(tool.name().to_owned()),
                args: Some(args.clone()),
                decision,
                stage,
                reason,
                outcome: Some(outcome),
                model_ms,
                check_ms,
                run_ms: Some(run_ms),
                graph_digest: tool.digest().map(str::to_owned),
            };
            let result = match post {
                PostDecision::Block { reason } => {
                    self.journal(
                        &route_id,
                        attempt,
                        started,
                        request,
                        record(
                            "rejected",
                            Some("post_execute"),
                            Some(reason.clone()),
                            original,
                        ),
                    );
                    push_feedback(&mut messages, response.content, call, &reason);
                    last_reason = reason;
                    continue;
                }
                PostDecision::Accept {
                    result: Some(replacement),
                } => {
                    self.journal(
                        &route_id,
                        attempt,
                        started,
                        request,
                        record(
                            "accepted",
                            None,
                            None,
                            json!({"original": original, "replaced_by": journal_value(&replacement)}),
                        ),
                    );
                    replacement
                }
                PostDecision::Accept { result: None } | PostDecision::Pass => {
                    match settled.as_ref() {
                        Ok(out) => {
                            self.journal(
                                &route_id,
                                attempt,
                                started,
                                request,
                                record("accepted", None, None, original),
                            );
                            out.value.clone()
                        }
                        Err(e) => {
                            self.journal(
                                &route_id,
                                attempt,
                                started,
                                request,
                                record("failed", None, Some(e.to_string()), original),
                            );
                            return Err(RouteError::Graph(e.clone()));
                        }
                    }
                }
            };
            return Ok(RouteOutcome {
                tool: tool.name().to_owned(),
                args,
                result,
                attempts: attempt,
                fallback: false,
                interrupted: settled.as_ref().as_ref().is_ok_and(|o| o.interrupted),
                text: None,
                route_id,
            });
        }
        Err(RouteError::Exhausted {
            attempts: self.options.max_retries.saturating_add(1),
            reason: last_reason,
        })
    }

    /// The validation chain; the first failure wins.
    async fn check(
        &self,
        candidates: &[Arc<GraphTool>],
        call: &ToolCall,
        opts: &CallOptions,
    ) -> Result<Check, RouteError> {
        let Some(tool) = candidates.iter().find(|t| t.name() == call.name) else {
            let names: Vec<&str> = candidates.iter().map(|t| t.name()).collect();
            return Ok(Check::Rejected {
                stage: "unknown_tool",
                reason: format!(
                    "unknown tool {}; choose one of: {}",
                    guest_name(&call.name),
                    names.join(", ")
                ),
            });
        };
        let text = if call.arguments.trim().is_empty() {
            "{}"
        } else {
            call.arguments.as_str()
        };
        let args = match sandgraph_core::json::parse_lossless(text, "the arguments") {
            Ok(v) => v,
            Err(e) => {
                return Ok(Check::Rejected {
                    stage: "invalid_json",
                    reason: format!(
                        "the arguments of {} are not valid JSON: {}",
                        guest_name(&call.name),
                        guest_message(&e.to_string())
                    ),
                });
            }
        };
        match tool.check(&args, opts).await {
            Ok(()) => Ok(Check::Chosen {
                tool: tool.clone(),
                args,
            }),
            Err(e) if e.code == ErrorCode::InvalidArgs => Ok(Check::Rejected {
                stage: "invalid_args",
                reason: guest_message(&e.message),
            }),
            Err(e) if e.code == ErrorCode::Validation => Ok(Check::Rejected {
                stage: "validate",
                reason: format!(
                    "graph \"{}\" refused the request: {}",
                    call.name,
                    guest_message(&e.message)
                ),
            }),
            // Loading the graph or running its `validate` failed: the
            // graph's own error, not a routing rejection.
            Err(e) => Err(RouteError::Graph(e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_fallback(
        &self,
        tool: Option<&Arc<GraphTool>>,
        text: Option<String>,
        attempt: u32,
        route_id: &str,
        started: u64,
        request: &str,
        model_ms: u64,
        opts: &CallOptions,
    ) -> Result<RouteOutcome, RouteError> {
        let run_start = Instant::now();
        let (name, result, interrupted) = match tool {
            None => (FALLBACK_TOOL.to_owned(), Ok(json!({})), false),
            Some(t) => match t.call(json!({}), opts.clone()).await {
                Ok(o) => (t.name().to_owned(), Ok(o.value), o.interrupted),
                Err(e) => (t.name().to_owned(), Err(e), false),
            },
        };
        let outcome = match &result {
            Ok(v) => journal_value(v),
            Err(e) => error_value(e),
        };
        self.journal(
            route_id,
            attempt,
            started,
            request,
            AttemptRecord {
                tool: Some(name.clone()),
                args: Some(json!({})),
                decision: "fallback",
                stage: None,
                reason: text.clone(),
                outcome: Some(outcome),
                model_ms,
                check_ms: 0,
                run_ms: Some(ms(run_start)),
                graph_digest: None,
            },
        );
        Ok(RouteOutcome {
            tool: name,
            args: json!({}),
            result: result.map_err(RouteError::Graph)?,
            attempts: attempt,
            fallback: true,
            interrupted,
            text,
            route_id: route_id.to_owned(),
        })
    }

    fn journal(&self, route_id: &str, attempt: u32, at_ms: u64, request: &str, r: AttemptRecord) {
        let Some(journal) = &self.journal else {
            return;
        };
        let entry = JournalEntry {
            seq: 0,
            route_id: route_id.to_owned(),
            attempt,
            at_ms,
            request: request.to_owned(),
            // A rejected choice names whatever tool the model made up.
            tool: r.tool.map(|t| guest_text(&t, MAX_GUEST_NAME_BYTES)),
            args: r.args.as_ref().map(journal_value),
            decision: r.decision.to_owned(),
            stage: r.stage.map(str::to_owned),
            reason: r.reason.as_deref().map(journal_text),
            outcome: r.outcome,
            model_ms: r.model_ms,
            check_ms: r.check_ms,
            run_ms: r.run_ms,
            graph_digest: r.graph_digest,
        };
        // The journal is an audit trail beside the result: a failing
        // journal is reported loudly but does not undo a run that happened.
        if let Err(e) = journal.append(&entry) {
            tracing::error!(
                route = route_id,
                attempt,
                "cannot write the routing journal: {e}"
            );
        }
    }
}

/// The arguments as the journal keeps them: JSON when they parse, else the
/// raw text.
fn raw_args(call: &ToolCall) -> Value {
    serde_json::from_str(&call.arguments).unwrap_or_else(|_| Value::String(call.arguments.clone()))
}

/// Appends the assistant's rejected tool call and a tool message with the
/// reason.
fn push_feedback(
    messages: &mut Vec<Message>,
    content: Option<String>,
    call: ToolCall,
    reason: &str,
) {
    let id = call.id.clone();
    messages.push(Message::Assistant {
        content,
        tool_calls: vec![call],
    });
    messages.push(Message::Tool {
        tool_call_id: id,
        content: feedback(reason),
    });
}

#[cfg(test)]
mod tests {
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
}
