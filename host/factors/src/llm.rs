//! The `llm` capability: `chat` through the host's model provider.
//!
//! Factor: [`LlmFactor`]. Context: [`LlmCtx`] (per store). Backend:
//! [`sandgraph_llm::Provider`] with the operator's model aliases
//! ([`LlmBackend`]). Grant: [`LlmAccess`] ([`LlmGrant`] and the backend).
//! Usage meter: each graph's calls and tokens in the chain of runs.
//!
//! A call goes through, in order: the grant (none, or no backend on the
//! host: `denied`), the bounds on what the guest sent (`malformed`), the
//! model alias (not granted: `denied`), the run's soft stop (`timeout`),
//! the tool definitions' schemas (`malformed`), the run's quota of calls
//! and tokens (`quota`), the run's byte budget (`malformed`), and only then
//! the provider. Nothing leaves the host before every check passed. The
//! wait for the answer is an async host call: it holds no CPU and no fuel
//! (the calling call gives its slice back to the run meanwhile), and ends
//! at the run's soft deadline or at once when the run is cancelled
//! (`timeout`), so the node still has the grace period to handle it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use sandgraph_core::json;
use sandgraph_core::text::guest_name;
use sandgraph_llm::{self as provider, Provider};

use sandgraph_runtime::caps::wit::llm::{self as wit, ChatRequest, ChatResponse, LlmError, Role};
use sandgraph_runtime::caps::{Call, Charged, Factor, Grant, RunControl, StoreData, without_fuel};
use wasmtime::StoreContextMut;
use wasmtime::component::Linker;

mod config;

pub use config::{InvalidLlmGrant, LlmGrantConfig};

/// Most bytes of one request the host takes from a guest (message texts,
/// tool calls, tool definitions and their schemas, each item counted with
/// [`ITEM_OVERHEAD_BYTES`]): 1 MiB is hundreds of pages of prompt, more
/// than any model's context; a larger request is a guest trying to make
/// the host allocate or send for it.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;
/// Most messages in one request: a long agent loop has a few hundred; the
/// bound keeps per-message work and allocation small.
pub const MAX_MESSAGES: usize = 1024;
/// Most tool definitions in one request: providers accept about 128.
pub const MAX_TOOL_DEFINITIONS: usize = 128;
/// Most tool calls in one message: a model asks for a handful at a time.
pub const MAX_TOOL_CALLS_PER_MESSAGE: usize = 128;
/// Longest model alias: aliases are short operator-chosen names.
pub const MAX_ALIAS_BYTES: usize = 64;
/// Bytes each message, tool call and tool definition costs on top of its
/// text (the host's structs for it), so a flood of empty items is bounded
/// by [`MAX_REQUEST_BYTES`] too.
pub const ITEM_OVERHEAD_BYTES: usize = 64;
/// Most bytes of an answer handed back to a guest (text and tool calls): the
/// client reads at most 8 MiB of body; an answer this large would only fill
/// the guest's memory.
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;
/// Highest sampling temperature providers accept.
pub const MAX_TEMPERATURE: f32 = 2.0;

/// The alias of `[llm].model`, used when a request names none.
pub const DEFAULT_ALIAS: &str = "default";

/// What the operator grants a graph: `[graphs.<name>.grants] llm = {...}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LlmGrant {
    /// Model aliases the graph may name; `"default"` is `[llm].model`.
    pub models: Vec<String>,
    /// Chat calls per run; `None`: no limit.
    pub max_calls: Option<u32>,
    /// Prompt plus completion tokens per run; `None`: no limit.
    pub max_tokens: Option<u64>,
}

/// Where granted chat calls go: the provider and the operator's aliases.
#[derive(Clone)]
pub struct LlmBackend {
    /// The provider (the operator's `[llm]`), holding the key.
    pub provider: Arc<dyn Provider>,
    /// Alias to provider model name (`[llm.models]`).
    pub models: BTreeMap<String, String>,
    /// The model used for the alias `"default"` (and a request naming none).
    pub default_model: String,
}

impl std::fmt::Debug for LlmBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmBackend")
            .field("models", &self.models)
            .field("default_model", &self.default_model)
            .finish_non_exhaustive()
    }
}

impl LlmBackend {
    /// The provider model of `alias`: [`DEFAULT_ALIAS`] is the default
    /// model, any other alias comes from `[llm.models]`.
    pub fn model(&self, alias: &str) -> Option<&str> {
        if alias == DEFAULT_ALIAS {
            Some(&self.default_model)
        } else {
            self.models.get(alias).map(String::as_str)
        }
    }
}

/// A run's `llm` access: its grant and the backend serving it.
#[derive(Clone)]
pub struct LlmAccess {
    /// What the run may do.
    pub grant: LlmGrant,
    /// Where its calls go; `None` when the host has no model configured
    /// (no `[llm]` provider or no key): every call is then `denied`.
    pub backend: Option<LlmBackend>,
}

impl std::fmt::Debug for LlmAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.grant.fmt(f)
    }
}

impl Grant for LlmAccess {
    const CAPABILITY: &'static str = "llm";
}

/// What a graph used of its `llm` grant in a chain of runs, counted
/// across all their instances ([`RunControl::usage`]).
#[derive(Debug, Default)]
struct LlmUsage {
    calls: AtomicU32,
    tokens: AtomicU64,
}

impl LlmUsage {
    /// Counts one call against `grant` and, under a token quota, reserves
    /// what it may spend: `prompt` (an upper bound of the prompt's tokens)
    /// plus its completion, capped to what is left (and to `wanted`, the
    /// request's own `max_tokens`). Parallel calls reserve in turn, so
    /// together they never pass the quota. Or says why the run may not
    /// make the call (nothing counted then).
    fn admit(
        &self,
        grant: &LlmGrant,
        prompt: u64,
        wanted: Option<u32>,
    ) -> Result<Reserved<'_>, String> {
        let mut reserved = Reserved {
            usage: self,
            tokens: 0,
            max_tokens: wanted,
        };
        if let Some(max) = grant.max_tokens {
            let completion = |used: u64| {
                let room = max.saturating_sub(used).checked_sub(prompt)?;
                let completion = wanted.map_or(room, |w| room.min(u64::from(w)));
                (completion > 0).then_some(completion)
            };
            match self
                .tokens
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                    completion(used).map(|c| used + prompt + c)
                }) {
                Ok(used) => {
                    let c = completion(used).unwrap_or(0);
                    reserved.tokens = prompt + c;
                    reserved.max_tokens = Some(u32::try_from(c).unwrap_or(u32::MAX));
                }
                Err(used) if used >= max => {
                    return Err(format!(
                        "the run used {used} of its {max} granted llm tokens"
                    ));
                }
                Err(used) => {
                    return Err(format!(
                        "the run has {} of its {max} granted llm tokens left, not enough for \
                         this request's prompt of up to {prompt} tokens and an answer",
                        max - used
                    ));
                }
            }
        }
        let max_calls = grant.max_calls.unwrap_or(u32::MAX);
        self.calls
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max_calls).then_some(n + 1)
            })
            .map_err(|_| format!("the run made all of its {max_calls} granted llm calls"))?;
        Ok(reserved)
    }
}

/// Tokens reserved for a call in flight ([`LlmUsage::admit`]); given back
/// if the call ends without an answer.
#[derive(Debug)]
struct Reserved<'a> {
    usage: &'a LlmUsage,
    tokens: u64,
    /// The request's `max_tokens`, capped to the reservation.
    max_tokens: Option<u32>,
}

impl Reserved<'_> {
    /// The call was answered: it spent `reported` tokens (`None`: the
    /// provider did not say, and the whole reservation counts as spent).
    fn spend(mut self, reported: Option<u64>) {
        let spent = reported.unwrap_or(self.tokens);
        if spent > self.tokens && self.tokens > 0 {
            tracing::warn!(
                target: "sandgraph::llm",
                spent,
                reserved = self.tokens,
                "the provider reported more tokens than were reserved for the call"
            );
        }
        let reserved = std::mem::take(&mut self.tokens);
        self.usage.tokens.fetch_add(spent, Ordering::AcqRel);
        self.usage.tokens.fetch_sub(reserved, Ordering::AcqRel);
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.usage.tokens.fetch_sub(self.tokens, Ordering::AcqRel);
    }
}

/// The `llm` capability, registered with the runtime.
#[derive(Debug, Clone, Copy, Default)]
pub struct LlmFactor;

impl Factor for LlmFactor {
    const INTERFACE: &'static str = "sandgraph:graph/llm";
    type Grant = LlmAccess;
    type InstanceState = LlmCtx;

    /// Adds `sandgraph:graph/llm`. Defined here rather than by bindgen
    /// because `chat` needs the calling store: the calling call gives back
    /// the fuel it holds while it waits for the model, so the run's other
    /// calls can use it, and takes a new slice when the answer is in.
    fn add_to_linker(&self, linker: &mut Linker<StoreData>) -> wasmtime::Result<()> {
        linker
            .instance("sandgraph:graph/llm@0.2.0")?
            .func_wrap_async(
                "chat",
                |mut store: StoreContextMut<'_, StoreData>, (request,): (ChatRequest,)| {
                    Box::new(async move {
                        let chat = async |ctx: &mut LlmCtx| wit::Host::chat(ctx, request).await;
                        Ok((without_fuel::<LlmFactor, _>(&mut store, chat).await?,))
                    })
                },
            )
    }

    fn instance_state(&self, run: &Arc<RunControl>) -> LlmCtx {
        LlmCtx {
            control: run.clone(),
        }
    }
}

/// The per-store context of `llm`: the run it serves.
#[derive(Debug)]
pub struct LlmCtx {
    control: Arc<RunControl>,
}

impl wit::Host for LlmCtx {
    async fn chat(&mut self, request: ChatRequest) -> Result<ChatResponse, LlmError> {
        let control = self.control.clone();
        let started = std::time::Instant::now();
        let target = request
            .model
            .clone()
            .unwrap_or_else(|| DEFAULT_ALIAS.to_owned());
        let request_bytes = request_size(&request).map_or(0, |n| n as u64);
        let result = match control.enter() {
            Ok(()) => chat(&control, request).await,
            Err(why) => Err(LlmError::Quota(why.to_string())),
        };
        if let Err(e) = &result {
            tracing::debug!(target: "sandgraph::llm", error = %error_text(e), "llm call refused or failed");
        }
        let (decision, reason) = match &result {
            Ok(_) => ("allowed", None),
            Err(e) => (journal_decision(e), Some(error_text(e))),
        };
        control
            .record(Call {
                capability: "llm",
                target: &target,
                decision,
                reason: reason.as_deref(),
                request_bytes,
                response_bytes: result.as_ref().map_or(0, |r| {
                    (r.content.len()
                        + r.tool_calls
                            .iter()
                            .map(|c| c.arguments.len())
                            .sum::<usize>()) as u64
                }),
                tokens: result.as_ref().ok().map(|r| {
                    u64::from(r.usage.prompt_tokens) + u64::from(r.usage.completion_tokens)
                }),
                started,
            })
            .await;
        result
    }
}

async fn chat(control: &RunControl, request: ChatRequest) -> Result<ChatResponse, LlmError> {
    let Some(access) = control.grant::<LlmAccess>() else {
        return Err(LlmError::Denied(
            "this graph has no llm grant: the operator grants it in sandgraph.toml \
             ([graphs.<name>.grants] llm = { models = [...] })"
                .to_owned(),
        ));
    };
    let Some(backend) = access.backend.as_ref() else {
        return Err(LlmError::Denied(
            "the host has no model configured: the operator sets [llm] and its key".to_owned(),
        ));
    };
    let size = request_size(&request)?;
    let alias = request
        .model
        .clone()
        .unwrap_or_else(|| DEFAULT_ALIAS.to_owned());
    let alias = alias.as_str();
    if !access.grant.models.iter().any(|m| m == alias) {
        return Err(LlmError::Denied(format!(
            "the model alias {} is not granted to this graph (granted: {})",
            guest_name(alias),
            access.grant.models.join(", ")
        )));
    }
    let Some(model) = backend.model(alias) else {
        return Err(LlmError::Denied(format!(
            "the host maps no model to the alias {} ([llm.models])",
            guest_name(alias)
        )));
    };
    if control.soft_stop_reached() {
        return Err(stopped(control));
    }
    let mut converted = convert(request, model)?;
    // A prompt has at most a token per byte of its text; `size` counts
    // every item's overhead on top.
    let usage = control.usage::<LlmUsage>();
    let reserved = usage
        .admit(&access.grant, size as u64, converted.max_tokens)
        .map_err(LlmError::Quota)?;
    converted.max_tokens = reserved.max_tokens;
    let _held = Charged::new(control.bytes(), size, &|| {
        format!("an llm request of {size} bytes")
    })
    .map_err(|e| LlmError::Malformed(e.message))?;
    let answer = tokio::select! {
        answer = backend.provider.chat(&converted) => answer,
        () = control.soft_stopped() => return Err(stopped(control)),
    };
    let answer = answer.map_err(provider_error)?;
    reserved.spend(
        answer
            .usage
            .map(|u| u.prompt_tokens.saturating_add(u.completion_tokens)),
    );
    let response = response(answer)?;
    tracing::debug!(
        target: "sandgraph::llm",
        alias = %guest_name(alias),
        model,
        prompt_tokens = response.usage.prompt_tokens,
        completion_tokens = response.usage.completion_tokens,
        "llm call answered"
    );
    Ok(response)
}

/// How a refused or failed call is journaled.
fn journal_decision(e: &LlmError) -> &'static str {
    match e {
        LlmError::Denied(_) => "denied",
        LlmError::Quota(_) => "quota",
        LlmError::Timeout(_) => "timeout",
        LlmError::Provider(_) => "failed",
        LlmError::Malformed(_) => "invalid",
    }
}

/// The `timeout` of a call the run's soft stop ended (or refused).
fn stopped(control: &RunControl) -> LlmError {
    LlmError::Timeout(if control.is_cancelled() {
        "the run was cancelled".to_owned()
    } else {
        format!(
            "the run's deadline of {} ms passed before the model answered",
            control.limits().timeout.as_millis()
        )
    })
}

/// The bytes `request` holds on the host, checked against every bound
/// before anything is built from it.
fn request_size(request: &ChatRequest) -> Result<usize, LlmError> {
    let malformed = |m: String| Err(LlmError::Malformed(m));
    if request.messages.len() > MAX_MESSAGES {
        return malformed(format!(
            "the request has {} messages, more than the limit of {MAX_MESSAGES}",
            request.messages.len()
        ));
    }
    if request.tools.len() > MAX_TOOL_DEFINITIONS {
        return malformed(format!(
            "the request has {} tool definitions, more than the limit of {MAX_TOOL_DEFINITIONS}",
            request.tools.len()
        ));
    }
    if let Some(alias) = &request.model
        && alias.len() > MAX_ALIAS_BYTES
    {
        return malformed(format!(
            "the model alias is {} bytes, more than the limit of {MAX_ALIAS_BYTES}",
            alias.len()
        ));
    }
    let mut size = request.model.as_ref().map_or(0, String::len);
    for (i, m) in request.messages.iter().enumerate() {
        if m.tool_calls.len() > MAX_TOOL_CALLS_PER_MESSAGE {
            return malformed(format!(
                "message {i} has {} tool calls, more than the limit of \
                 {MAX_TOOL_CALLS_PER_MESSAGE}",
                m.tool_calls.len()
            ));
        }
        size = size
            .saturating_add(ITEM_OVERHEAD_BYTES)
            .saturating_add(m.content.len())
            .saturating_add(m.tool_call_id.as_ref().map_or(0, String::len));
        for c in &m.tool_calls {
            size = size
                .saturating_add(ITEM_OVERHEAD_BYTES)
                .saturating_add(c.id.len() + c.name.len())
                .saturating_add(c.arguments.len());
        }
    }
    for t in &request.tools {
        size = size
            .saturating_add(ITEM_OVERHEAD_BYTES)
            .saturating_add(t.name.len())
            .saturating_add(t.description.as_ref().map_or(0, String::len))
            .saturating_add(t.parameters.len());
    }
    if size > MAX_REQUEST_BYTES {
        return malformed(format!(
            "the request is {size} bytes, more than the limit of {MAX_REQUEST_BYTES}"
        ));
    }
    Ok(size)
}

/// The provider's request for a bounded guest request, sent to `model`.
fn convert(request: ChatRequest, model: &str) -> Result<provider::ChatRequest, LlmError> {
    if let Some(t) = request.temperature
        && !(0.0..=MAX_TEMPERATURE).contains(&t)
    {
        return Err(LlmError::Malformed(format!(
            "temperature must be between 0 and {MAX_TEMPERATURE}, got {t}"
        )));
    }
    let mut tools = Vec::with_capacity(request.tools.len());
    for t in request.tools {
        let parameters = if t.parameters.trim().is_empty() {
            serde_json::Value::Null
        } else {
            json::parse_lossless(&t.parameters, "parameters").map_err(|e| {
                LlmError::Malformed(format!(
                    "tool {}: parameters are not a JSON Schema: {e}",
                    guest_name(&t.name)
                ))
            })?
        };
        if !matches!(
            parameters,
            serde_json::Value::Object(_) | serde_json::Value::Null
        ) {
            return Err(LlmError::Malformed(format!(
                "tool {}: parameters must be a JSON object (a JSON Schema)",
                guest_name(&t.name)
            )));
        }
        tools.push(provider::ToolSpec {
            name: t.name,
            description: t.description.unwrap_or_default(),
            parameters,
        });
    }
    let mut messages = Vec::with_capacity(request.messages.len());
    for (i, m) in request.messages.into_iter().enumerate() {
        if !matches!(m.role, Role::Assistant) && !m.tool_calls.is_empty() {
            return Err(LlmError::Malformed(format!(
                "message {i}: only assistant messages carry tool calls"
            )));
        }
        let calls = m.tool_calls.into_iter().map(|c| provider::ToolCall {
            id: c.id,
            name: c.name,
            arguments: c.arguments,
        });
        messages.push(match m.role {
            Role::System => provider::Message::System { content: m.content },
            Role::User => provider::Message::User { content: m.content },
            Role::Assistant => provider::Message::Assistant {
                content: (!m.content.is_empty()).then_some(m.content),
                tool_calls: calls.collect(),
            },
            Role::Tool => provider::Message::Tool {
                tool_call_id: m.tool_call_id.ok_or_else(|| {
                    LlmError::Malformed(format!(
                        "message {i}: a tool message needs the tool-call-id it answers"
                    ))
                })?,
                content: m.content,
            },
        });
    }
    Ok(provider::ChatRequest {
        model: model.to_owned(),
        messages,
        tools,
        temperature: request.temperature,
        max_tokens: request.max_tokens,
    })
}

/// The guest's answer, bounded by [`MAX_RESPONSE_BYTES`].
fn response(answer: provider::ChatResponse) -> Result<ChatResponse, LlmError> {
    let size = answer.content.as_ref().map_or(0, String::len)
        + answer
            .tool_calls
            .iter()
            .map(|c| ITEM_OVERHEAD_BYTES + c.id.len() + c.name.len() + c.arguments.len())
            .sum::<usize>();
    if size > MAX_RESPONSE_BYTES {
        return Err(LlmError::Malformed(format!(
            "the model's answer is {size} bytes, more than the limit of {MAX_RESPONSE_BYTES}"
        )));
    }
    let usage = answer.usage.unwrap_or_default();
    let tokens = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    Ok(ChatResponse {
        content: answer.content.unwrap_or_default(),
        tool_calls: answer
            .tool_calls
            .into_iter()
            .map(|c| wit::ToolCall {
                id: c.id,
                name: c.name,
                arguments: c.arguments,
            })
            .collect(),
        finish_reason: answer.finish_reason.unwrap_or_default(),
        usage: wit::Usage {
            prompt_tokens: tokens(usage.prompt_tokens),
            completion_tokens: tokens(usage.completion_tokens),
        },
    })
}

/// The guest's error for a provider failure, with the client's stable code.
/// The client never puts the key in an error (it redacts server echoes).
fn provider_error(e: provider::LlmError) -> LlmError {
    let message = format!("{}: {e}", e.code());
    match e {
        provider::LlmError::Timeout { .. } => LlmError::Timeout(message),
        provider::LlmError::Malformed { .. } | provider::LlmError::TooLarge { .. } => {
            LlmError::Malformed(message)
        }
        _ => LlmError::Provider(message),
    }
}

/// `e` as one escaped log line.
fn error_text(e: &LlmError) -> String {
    let (code, message) = match e {
        LlmError::Denied(m) => ("denied", m),
        LlmError::Quota(m) => ("quota", m),
        LlmError::Timeout(m) => ("timeout", m),
        LlmError::Provider(m) => ("provider", m),
        LlmError::Malformed(m) => ("malformed", m),
    };
    format!("{code}: {}", sandgraph_core::text::guest_message(message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandgraph_runtime::caps::wit::llm::{Message, ToolCall, ToolDefinition};

    fn message(role: Role, content: &str) -> Message {
        Message {
            role,
            content: content.to_owned(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    fn request(messages: Vec<Message>) -> ChatRequest {
        ChatRequest {
            model: None,
            messages,
            tools: Vec::new(),
            temperature: None,
            max_tokens: None,
        }
    }

    fn malformed(r: Result<impl std::fmt::Debug, LlmError>) -> String {
        match r {
            Err(LlmError::Malformed(m)) => m,
            other => panic!("expected malformed, got {other:?}"),
        }
    }

    #[test]
    fn every_guest_buffer_is_bounded_before_conversion() {
        let big = "x".repeat(MAX_REQUEST_BYTES);
        let m = malformed(request_size(&request(vec![message(Role::User, &big)])));
        assert!(m.contains("more than the limit of 1048576"), "{m}");
        // Empty items are not free.
        let many = vec![message(Role::User, ""); MAX_MESSAGES + 1];
        let m = malformed(request_size(&request(many)));
        assert!(m.contains("1025 messages"), "{m}");
        let mut r = request(vec![]);
        r.model = Some("a".repeat(MAX_ALIAS_BYTES + 1));
        assert!(malformed(request_size(&r)).contains("model alias"));
        let mut r = request(vec![]);
        r.tools = vec![
            ToolDefinition {
                name: "t".into(),
                description: None,
                parameters: String::new(),
            };
            MAX_TOOL_DEFINITIONS + 1
        ];
        assert!(malformed(request_size(&r)).contains("tool definitions"));
        let ok = request(vec![message(Role::User, "hi")]);
        assert_eq!(request_size(&ok).unwrap(), ITEM_OVERHEAD_BYTES + 2);
    }

    #[test]
    fn schemas_must_parse_and_roles_must_fit() {
        let mut r = request(vec![message(Role::User, "hi")]);
        r.tools = vec![ToolDefinition {
            name: "search".into(),
            description: Some("d".into()),
            parameters: r#"{"type": "object", "type": "array"}"#.into(),
        }];
        let m = malformed(convert(r, "m"));
        assert!(m.starts_with("tool \"search\": parameters are not"), "{m}");
        let mut r = request(vec![]);
        r.tools = vec![ToolDefinition {
            name: "n".into(),
            description: None,
            parameters: "[1]".into(),
        }];
        assert!(malformed(convert(r, "m")).contains("must be a JSON object"));
        let r = request(vec![message(Role::Tool, "result")]);
        assert!(malformed(convert(r, "m")).contains("needs the tool-call-id"));
        let mut user = message(Role::User, "");
        user.tool_calls = vec![ToolCall {
            id: "c".into(),
            name: "f".into(),
            arguments: "{}".into(),
        }];
        assert!(malformed(convert(request(vec![user]), "m")).contains("only assistant"));
        let mut r = request(vec![]);
        r.temperature = Some(f32::NAN);
        assert!(malformed(convert(r, "m")).contains("temperature"));
        let mut r = request(vec![message(Role::Assistant, "")]);
        r.max_tokens = Some(9);
        let out = convert(r, "deepseek-chat").unwrap();
        assert_eq!(out.model, "deepseek-chat");
        assert_eq!(out.max_tokens, Some(9));
        assert_eq!(
            out.messages,
            [provider::Message::Assistant {
                content: None,
                tool_calls: vec![]
            }]
        );
    }

    #[test]
    fn quotas_count_calls_and_tokens_per_run() {
        let usage = LlmUsage::default();
        let grant = LlmGrant {
            models: vec!["fast".into()],
            max_calls: Some(2),
            max_tokens: Some(100),
        };
        let first = usage.admit(&grant, 10, None).unwrap();
        assert_eq!((first.tokens, first.max_tokens), (100, Some(90)));
        first.spend(Some(60));
        let second = usage.admit(&grant, 10, Some(5)).unwrap();
        assert_eq!((second.tokens, second.max_tokens), (15, Some(5)));
        drop(second);
        assert_eq!(usage.tokens.load(Ordering::Acquire), 60);
        let e = usage.admit(&grant, 10, None).unwrap_err();
        assert_eq!(e, "the run made all of its 2 granted llm calls");
        assert_eq!(usage.tokens.load(Ordering::Acquire), 60);
        let usage = LlmUsage::default();
        usage.admit(&grant, 1, None).unwrap().spend(Some(100));
        let e = usage.admit(&grant, 1, None).unwrap_err();
        assert_eq!(e, "the run used 100 of its 100 granted llm tokens");
        // Refused before counting: the refused call is not a call.
        assert_eq!(usage.calls.load(Ordering::Acquire), 1);
        let free = LlmUsage::default();
        let r = free.admit(&LlmGrant::default(), 10, None).unwrap();
        assert_eq!((r.tokens, r.max_tokens), (0, None));
    }

    #[test]
    fn parallel_calls_never_pass_the_token_quota() {
        let usage = LlmUsage::default();
        let grant = LlmGrant {
            models: vec!["fast".into()],
            max_calls: None,
            max_tokens: Some(100),
        };
        // Two calls in flight at once: the second gets what the first
        // did not reserve, then nothing is left for a third.
        let a = usage.admit(&grant, 20, Some(50)).unwrap();
        let b = usage.admit(&grant, 20, None).unwrap();
        assert_eq!((b.tokens, b.max_tokens), (30, Some(10)));
        let e = usage.admit(&grant, 20, None).unwrap_err();
        assert_eq!(e, "the run used 100 of its 100 granted llm tokens");
        // Each spends at most what it reserved; a provider that reports no
        // usage spends its whole reservation.
        a.spend(Some(70));
        b.spend(None);
        assert_eq!(usage.tokens.load(Ordering::Acquire), 100);
        let usage = LlmUsage::default();
        let e = usage.admit(&grant, 100, None).unwrap_err();
        assert_eq!(
            e,
            "the run has 100 of its 100 granted llm tokens left, not enough for this \
             request's prompt of up to 100 tokens and an answer"
        );
    }

    #[test]
    fn provider_errors_keep_their_code() {
        let e = provider_error(provider::LlmError::Timeout { after_ms: 5 });
        assert!(matches!(e, LlmError::Timeout(m) if m.starts_with("timeout: ")));
        let e = provider_error(provider::LlmError::Status {
            status: 400,
            message: "bad".into(),
        });
        assert!(
            matches!(e, LlmError::Provider(m) if m == "status: request failed with status 400: bad")
        );
    }
}
