//! [`GraphRoutingAgent`]: one routing round. The model picks a graph tool,
//! the choice is checked, the graph runs between the hooks, and every
//! rejection goes back to the model with its reason.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use sandgraph_core::text::{guest_message, guest_name};
use sandgraph_core::{ErrorCode, RunError, Start};
use sandgraph_llm::{ChatRequest, ChatResponse, LlmError, Message, Provider, ToolCall, ToolSpec};
use sandgraph_registry::{CallOptions, Checked, GraphTool, Registry, Scope};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::hooks::{Execution, HookError, Hooks, PostDecision, PreDecision, Settled};
use crate::journal::{AttemptAt, Decision, Stage, Tried, error_value, journal_value};
use crate::journal_table::Journal;

/// The name of the built-in fallback: no parameters, returns `{}`, does
/// nothing.
pub const FALLBACK_TOOL: &str = "graph_routing_fallback";

/// Re-asks after a rejected choice when nothing else is configured.
pub const DEFAULT_MAX_RETRIES: u32 = 3;

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

/// What runs when the model answers in plain text. The seed accepts any
/// tool as the fallback: a graph, or a reply the host makes itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Fallback {
    /// [`FALLBACK_TOOL`]: returns `{}`.
    #[default]
    Builtin,
    /// A graph tool of the registry whose parameters accept `{}`.
    Tool(String),
    /// A fixed host-side reply (`[routing] fallback_reply`): the result is
    /// `{"reply": <text>}`, reported as [`FALLBACK_TOOL`].
    Reply(String),
    /// A host-side function of the request and the model's plain-text
    /// answer; its value is the result, reported as [`FALLBACK_TOOL`].
    Handler(FallbackHandler),
}

/// The function of [`Fallback::Handler`]: `(request, model text) -> result`.
/// Equal only to its own clones.
#[derive(Clone)]
pub struct FallbackHandler(Arc<FallbackFn>);

type FallbackFn = dyn Fn(&str, Option<&str>) -> Value + Send + Sync;

impl FallbackHandler {
    /// Wraps `f`, called with the request text and the model's answer.
    pub fn new(f: impl Fn(&str, Option<&str>) -> Value + Send + Sync + 'static) -> Self {
        FallbackHandler(Arc::new(f))
    }
}

impl std::fmt::Debug for FallbackHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FallbackHandler(..)")
    }
}

impl PartialEq for FallbackHandler {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for FallbackHandler {}

/// Where a [`GraphRoutingAgent`] finds its candidates: every graph tool of
/// a registry, or an agent's [`Scope`] (its own mounts over the global
/// ones).
#[derive(Debug, Clone)]
pub enum RouteSource {
    /// The registry's global graph tools.
    Registry(Registry),
    /// A scope's view: its own graph tools, then the global ones they do
    /// not shadow.
    Scope(Arc<Scope>),
}

impl From<Registry> for RouteSource {
    fn from(registry: Registry) -> Self {
        RouteSource::Registry(registry)
    }
}

impl From<Arc<Scope>> for RouteSource {
    fn from(scope: Arc<Scope>) -> Self {
        RouteSource::Scope(scope)
    }
}

impl RouteSource {
    fn graph_tools(&self) -> Vec<Arc<GraphTool>> {
        match self {
            RouteSource::Registry(r) => r.graph_tools(),
            RouteSource::Scope(s) => s.graph_tools(),
        }
    }

    fn get(&self, name: &str) -> Option<Arc<GraphTool>> {
        match self {
            RouteSource::Registry(r) => r.get(name),
            RouteSource::Scope(s) => s.get(name),
        }
    }
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
    /// A hook listener failed; the request ends. The listener's own error
    /// is the [`std::error::Error::source`], so a caller can downcast it.
    #[error("{phase} listener failed: {source}")]
    Hook {
        /// `pre-execute` or `post-execute`.
        phase: &'static str,
        /// The listener's error, unchanged.
        #[source]
        source: HookError,
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

/// Routes requests to the graph tools of a registry or a scope (seed:
/// `GraphRoutingAgent`).
pub struct GraphRoutingAgent {
    source: RouteSource,
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

/// One checked choice (the tool and the proof that its arguments passed),
/// or the reason it was rejected.
enum Check {
    Chosen {
        tool: Arc<GraphTool>,
        checked: Checked,
    },
    Rejected {
        stage: Stage,
        reason: String,
    },
}

/// A checked choice that the `pre-execute` listeners allowed: what runs.
struct Chosen<'a> {
    tool: &'a GraphTool,
    checked: Checked,
    exec: Arc<Execution>,
}

/// A rejected choice: the step that rejected it and why (the reason goes
/// back to the model), and what was tried, for the journal.
struct Rejection {
    stage: Stage,
    reason: String,
    tried: Tried,
}

/// How one attempt with a tool call ended.
enum Attempted {
    /// The chosen graph ran and its outcome stands.
    Ran(RouteOutcome),
    /// The model is asked again.
    Rejected(Rejection),
}

/// What stays the same for every attempt of one routed request.
struct Round<'a> {
    request: &'a str,
    opts: &'a RouteOptions,
    route_id: String,
    candidates: Vec<Arc<GraphTool>>,
    fallback: Option<Arc<GraphTool>>,
    /// The options of every call; the chosen tool's run adds its thread.
    call_opts: CallOptions,
}

impl Round<'_> {
    /// Attempt `attempt`, beginning now.
    fn at(&self, attempt: u32) -> AttemptAt<'_> {
        AttemptAt {
            route_id: &self.route_id,
            request: self.request,
            attempt,
            started: now_ms(),
        }
    }
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

/// A listener's error in `phase` (`pre-execute` or `post-execute`).
fn hook_error(phase: &'static str) -> impl FnOnce(HookError) -> RouteError {
    move |source| RouteError::Hook { phase, source }
}

impl GraphRoutingAgent {
    /// A router over the graph tools of `source`: a [`Registry`], or an
    /// agent's `Arc<Scope>`. The filter and the fallback are checked here,
    /// and again at every request (the registry may change while the host
    /// runs).
    ///
    /// # Errors
    ///
    /// [`RouteError::Config`]: a filter naming an unknown graph tool or
    /// leaving none, or a fallback that is unknown or refuses `{}`.
    pub fn new(
        source: impl Into<RouteSource>,
        provider: Arc<dyn Provider>,
        options: RouterOptions,
    ) -> Result<Self, RouteError> {
        let agent = GraphRoutingAgent {
            source: source.into(),
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
        let mut tools = self.source.graph_tools();
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
            Fallback::Builtin | Fallback::Reply(_) | Fallback::Handler(_) => Ok(None),
            Fallback::Tool(name) => {
                let tool = self.source.get(name).ok_or_else(|| {
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
        let round = self.round(request, &opts)?;
        let mut chat = self.first_chat(&round);
        let mut last_reason = String::new();
        for attempt in 1..=self.options.max_retries.saturating_add(1) {
            let at = round.at(attempt);
            let (response, model_ms) = self.ask(&chat, &opts.cancel, at).await?;
            // The first tool call is the model's choice; later ones in the
            // same answer are ignored (and not echoed back).
            let Some(call) = response.tool_calls.first().cloned() else {
                return self
                    .run_fallback(&round, at, response.content, model_ms)
                    .await;
            };
            let Rejection {
                stage,
                reason,
                tried,
            } = match self.attempt(&round, at, &call, model_ms).await? {
                Attempted::Ran(outcome) => return Ok(outcome),
                Attempted::Rejected(rejection) => rejection,
            };
            self.journal(at, Decision::Rejected(stage), Some(&reason), tried);
            push_feedback(&mut chat.messages, response.content, call, &reason);
            last_reason = reason;
        }
        Err(RouteError::Exhausted {
            attempts: self.options.max_retries.saturating_add(1),
            reason: last_reason,
        })
    }

    /// The parts of a routed request every attempt shares; the candidates
    /// and the fallback are checked again here.
    fn round<'a>(&self, request: &'a str, opts: &'a RouteOptions) -> Result<Round<'a>, RouteError> {
        Ok(Round {
            request,
            opts,
            route_id: new_route_id(),
            candidates: self.candidates()?,
            fallback: self.fallback_tool()?,
            call_opts: CallOptions {
                cancel: opts.cancel.clone(),
                thread_id: opts.thread_id.clone(),
                configurable: opts.configurable.clone(),
                request: Some(request.to_owned()),
                threads: None,
                sub_run_of: None,
                checked: None,
            },
        })
    }

    /// The first model request: the system prompt, the request (and its
    /// context) and the candidates as tools.
    fn first_chat(&self, round: &Round<'_>) -> ChatRequest {
        let tools: Vec<ToolSpec> = round
            .candidates
            .iter()
            .map(|t| ToolSpec {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                parameters: t.input_schema().clone(),
            })
            .collect();
        let mut user = round.request.to_owned();
        if let Some(context) = &round.opts.context {
            user.push_str("\n\n");
            user.push_str(context);
        }
        let system = self
            .options
            .system_prompt
            .clone()
            .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_owned());
        ChatRequest {
            model: self.options.model.clone(),
            messages: vec![
                Message::System { content: system },
                Message::User { content: user },
            ],
            tools,
            temperature: None,
            max_tokens: None,
        }
    }

    /// Asks the model; its answer and how long it took. A failed call is
    /// journalled.
    async fn ask(
        &self,
        chat: &ChatRequest,
        cancel: &CancellationToken,
        at: AttemptAt<'_>,
    ) -> Result<(ChatResponse, u64), RouteError> {
        let model_start = Instant::now();
        let response = tokio::select! {
            r = self.provider.chat(chat) => r,
            () = cancel.cancelled() => return Err(RouteError::Cancelled),
        };
        let model_ms = ms(model_start);
        match response {
            Ok(response) => Ok((response, model_ms)),
            Err(e) => {
                let tried = Tried {
                    model_ms,
                    ..Tried::default()
                };
                self.journal(at, Decision::ModelFailed, Some(&e.to_string()), tried);
                Err(RouteError::Llm(e))
            }
        }
    }

    /// One tool call of the model: checked, gated by `pre-execute`, run,
    /// and judged by `post-execute`.
    async fn attempt(
        &self,
        round: &Round<'_>,
        at: AttemptAt<'_>,
        call: &ToolCall,
        model_ms: u64,
    ) -> Result<Attempted, RouteError> {
        let check_start = Instant::now();
        let (tool, checked) = match self
            .check(&round.candidates, call, &round.call_opts)
            .await?
        {
            Check::Chosen { tool, checked } => (tool, checked),
            Check::Rejected { stage, reason } => {
                let tried = Tried {
                    tool: Some(call.name.clone()),
                    args: Some(raw_args(call)),
                    model_ms,
                    check_ms: ms(check_start),
                    ..Tried::default()
                };
                return Ok(Attempted::Rejected(Rejection {
                    stage,
                    reason,
                    tried,
                }));
            }
        };
        let exec = Arc::new(Execution {
            tool: tool.name().to_owned(),
            args: checked.args().clone(),
            request: round.request.to_owned(),
            cancel: round.opts.cancel.clone(),
            attempt: at.attempt,
        });
        let pre = self
            .hooks
            .pre_execute(exec.clone())
            .await
            .map_err(hook_error("pre-execute"))?;
        let tried = Tried {
            tool: Some(tool.name().to_owned()),
            args: Some(exec.args.clone()),
            model_ms,
            check_ms: ms(check_start),
            ..Tried::default()
        };
        if let PreDecision::Deny { reason } = pre {
            return Ok(Attempted::Rejected(Rejection {
                stage: Stage::PreExecute,
                reason,
                tried,
            }));
        }
        let chosen = Chosen {
            tool: &tool,
            checked,
            exec,
        };
        self.run_chosen(round, at, chosen, tried).await
    }

    /// Runs the checked and allowed choice, its arguments not checked
    /// again; `post-execute` listeners may block or replace its outcome.
    /// `tried` has the timings so far.
    async fn run_chosen(
        &self,
        round: &Round<'_>,
        at: AttemptAt<'_>,
        chosen: Chosen<'_>,
        tried: Tried,
    ) -> Result<Attempted, RouteError> {
        let Chosen {
            tool,
            checked,
            exec,
        } = chosen;
        let run_start = Instant::now();
        let mut run_opts = round.opts.for_tool(&round.call_opts, tool.name());
        run_opts.checked = Some(checked);
        let start = Start::Input(exec.args.clone());
        let settled: Settled = tool.run(start, run_opts, &mut |_| {}).await;
        let run_ms = ms(run_start);
        let settled = Arc::new(settled);
        let post = self
            .hooks
            .post_execute(exec.clone(), settled.clone())
            .await
            .map_err(hook_error("post-execute"))?;
        let original = match settled.as_ref() {
            Ok(out) => journal_value(&out.value),
            Err(e) => error_value(e),
        };
        let tried = |outcome| Tried {
            outcome: Some(outcome),
            run_ms: Some(run_ms),
            graph_digest: tool.digest().map(str::to_owned),
            ..tried.clone()
        };
        let result = match (post, settled.as_ref()) {
            (PostDecision::Block { reason }, _) => {
                return Ok(Attempted::Rejected(Rejection {
                    stage: Stage::PostExecute,
                    reason,
                    tried: tried(original),
                }));
            }
            (
                PostDecision::Accept {
                    result: Some(replacement),
                },
                _,
            ) => {
                let outcome =
                    json!({"original": original, "replaced_by": journal_value(&replacement)});
                self.journal(at, Decision::Accepted, None, tried(outcome));
                replacement
            }
            (PostDecision::Accept { result: None } | PostDecision::Pass, Ok(out)) => {
                self.journal(at, Decision::Accepted, None, tried(original));
                out.value.clone()
            }
            (PostDecision::Accept { result: None } | PostDecision::Pass, Err(e)) => {
                let reason = e.to_string();
                self.journal(at, Decision::Failed, Some(&reason), tried(original));
                return Err(RouteError::Graph(e.clone()));
            }
        };
        Ok(Attempted::Ran(RouteOutcome {
            tool: tool.name().to_owned(),
            args: exec.args.clone(),
            result,
            attempts: at.attempt,
            fallback: false,
            interrupted: settled.as_ref().as_ref().is_ok_and(|o| o.interrupted),
            text: None,
            route_id: round.route_id.clone(),
        }))
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
                stage: Stage::UnknownTool,
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
                    stage: Stage::InvalidJson,
                    reason: format!(
                        "the arguments of {} are not valid JSON: {}",
                        guest_name(&call.name),
                        guest_message(&e.to_string())
                    ),
                });
            }
        };
        match tool.check(&args, opts).await {
            Ok(checked) => Ok(Check::Chosen {
                tool: tool.clone(),
                checked,
            }),
            Err(e) if e.code == ErrorCode::InvalidArgs => Ok(Check::Rejected {
                stage: Stage::InvalidArgs,
                reason: guest_message(&e.message),
            }),
            Err(e) if e.code == ErrorCode::Validation => Ok(Check::Rejected {
                stage: Stage::Validate,
                reason: format!(
                    "graph \"{}\" refused the request: {}",
                    call.name,
                    guest_message(&e.message)
                ),
            }),
            // A `validate` that traps (a guest panic) is a refusal, as a
            // throwing `validate` is in the seed: the model hears why and
            // may choose again. The message quotes the guest's panic.
            Err(e) if e.code == ErrorCode::Trap => Ok(Check::Rejected {
                stage: Stage::Validate,
                reason: format!(
                    "graph \"{}\" failed to validate the request: {}",
                    call.name,
                    guest_message(&e.message)
                ),
            }),
            // Loading the graph failed, or `validate` ran out of a limit
            // (fuel, time, memory): the graph's own error, not a routing
            // rejection.
            Err(e) => Err(RouteError::Graph(e)),
        }
    }

    /// The model answered in plain text: the fallback runs with `{}` and
    /// no hooks, on its durable thread like a chosen graph (a thread id
    /// without its store would be reported and lost).
    async fn run_fallback(
        &self,
        round: &Round<'_>,
        at: AttemptAt<'_>,
        text: Option<String>,
        model_ms: u64,
    ) -> Result<RouteOutcome, RouteError> {
        let run_start = Instant::now();
        let (name, result, interrupted) = match &round.fallback {
            None => (
                FALLBACK_TOOL.to_owned(),
                Ok(self.host_fallback(round.request, text.as_deref())),
                false,
            ),
            Some(t) => {
                let opts = round.opts.for_tool(&round.call_opts, t.name());
                match t.run(Start::Input(json!({})), opts, &mut |_| {}).await {
                    Ok(o) => (t.name().to_owned(), Ok(o.value), o.interrupted),
                    Err(e) => (t.name().to_owned(), Err(e), false),
                }
            }
        };
        let outcome = match &result {
            Ok(v) => journal_value(v),
            Err(e) => error_value(e),
        };
        let tried = Tried {
            tool: Some(name.clone()),
            args: Some(json!({})),
            outcome: Some(outcome),
            model_ms,
            check_ms: 0,
            run_ms: Some(ms(run_start)),
            graph_digest: None,
        };
        self.journal(at, Decision::Fallback, text.as_deref(), tried);
        Ok(RouteOutcome {
            tool: name,
            args: json!({}),
            result: result.map_err(RouteError::Graph)?,
            attempts: at.attempt,
            fallback: true,
            interrupted,
            text,
            route_id: round.route_id.clone(),
        })
    }

    /// The result of a fallback the host answers itself.
    fn host_fallback(&self, request: &str, text: Option<&str>) -> Value {
        match &self.options.fallback {
            Fallback::Reply(reply) => json!({ "reply": reply }),
            Fallback::Handler(handler) => (handler.0)(request, text),
            Fallback::Builtin | Fallback::Tool(_) => json!({}),
        }
    }

    /// Records an attempt, when there is a journal.
    fn journal(&self, at: AttemptAt<'_>, decision: Decision, reason: Option<&str>, tried: Tried) {
        if let Some(journal) = &self.journal {
            crate::journal::append(journal, at, decision, reason, tried);
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
