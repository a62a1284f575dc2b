//! The `tools` capability: other mounted graph tools, run as sub-runs of
//! the current run.
//!
//! Factor: [`ToolsFactor`]. Context: [`ToolsCtx`] (per store). Backend:
//! [`ToolsBackend`] (the registry in production, a fake in tests). Grant:
//! [`ToolsAccess`] ([`ToolsGrant`] and the backend). Usage meter: each
//! graph's calls in the chain of runs.
//!
//! A sub-run shares its caller's deadline (the earlier of the two),
//! cancellation, fuel pool and byte budget ([`SubRun`]), so calling a
//! graph through `tools` never buys a graph more than its own limits. The
//! chain of graphs is carried along: a graph already in the chain is
//! refused (`recursion`), and so is a chain deeper than
//! [`MAX_TOOL_DEPTH`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use futures::future::BoxFuture;
use sandgraph_core::text::{guest_message, guest_name};
use sandgraph_core::{RunError, json};
use serde_json::Value;

pub use sandgraph_runtime::caps::SubRun;
use sandgraph_runtime::caps::wit::tools::{self as wit, ToolError, ToolInfo};
use sandgraph_runtime::caps::{Call, Factor, Grant, RunControl, StoreData, lending_slot};
use wasmtime::StoreContextMut;
use wasmtime::component::Linker;

mod config;

pub use config::{InvalidToolsGrant, ToolsGrantConfig};

/// Deepest chain of runs `tools` calls may build, the outermost run
/// included: each level holds an instance and its caller's slot while it
/// waits, so the depth bounds what one call can tie up.
pub const MAX_TOOL_DEPTH: usize = 4;

/// Largest arguments a graph may pass to a tool, in bytes of JSON text:
/// tool arguments are small objects; the cap is checked before the host
/// parses (and charges) them.
pub const MAX_TOOL_ARGS_BYTES: usize = 256 * 1024;

/// Longest tool name a graph may ask for, in bytes (names are graph
/// names, far shorter).
const MAX_TOOL_NAME_BYTES: usize = 256;

/// What the operator grants a graph: `[graphs.<name>.grants] tools = {...}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolsGrant {
    /// Tool names the graph may call.
    pub allow: Vec<String>,
    /// Tool calls per run; `None`: no limit.
    pub max_calls: Option<u32>,
}

/// A tool as the backend describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDescription {
    /// The tool name.
    pub name: String,
    /// What it does.
    pub description: Option<String>,
    /// JSON Schema of its arguments.
    pub parameters: Value,
}

/// Why a backend could not run a tool.
#[derive(Debug, Clone)]
pub enum ToolCallError {
    /// No tool of that name is mounted.
    NotFound,
    /// The run failed: its code says how (`INVALID_ARGS` for arguments
    /// that do not match the tool's parameters).
    Run(RunError),
    /// The run stopped at an interrupt: a sub-run cannot pause for a human.
    Interrupted,
}

/// Where granted tool calls go (the registry).
pub trait ToolsBackend: Send + Sync + 'static {
    /// The tool `name`, if mounted.
    fn describe(&self, name: &str) -> Option<ToolDescription>;

    /// Runs tool `name` on `args` as a sub-run of `caller` (validated as
    /// any call of the tool is) and returns its final state.
    fn call(
        &self,
        name: &str,
        args: Value,
        caller: SubRun,
    ) -> BoxFuture<'static, Result<Value, ToolCallError>>;
}

/// A run's `tools` access: its grant and the backend serving it.
#[derive(Clone)]
pub struct ToolsAccess {
    /// What the run may do.
    pub grant: ToolsGrant,
    /// Where its calls go.
    pub backend: Arc<dyn ToolsBackend>,
}

impl std::fmt::Debug for ToolsAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolsAccess")
            .field("grant", &self.grant)
            .finish_non_exhaustive()
    }
}

impl Grant for ToolsAccess {
    const CAPABILITY: &'static str = "tools";
}

/// Counters of a graph's `tools` calls in a chain of runs
/// ([`RunControl::usage`]).
#[derive(Debug, Default)]
struct ToolsUsage {
    calls: AtomicU32,
}

fn not_granted() -> ToolError {
    ToolError::Denied(
        "this graph has no tools grant: the operator grants it in sandgraph.toml \
         ([graphs.<name>.grants] tools = { allow = [...] })"
            .to_owned(),
    )
}

/// The per-store context of `tools`: the run it serves.
#[derive(Debug)]
pub struct ToolsCtx {
    control: Arc<RunControl>,
}

impl ToolsCtx {
    /// The checks before a call: grant, name, chain, quota; the access and
    /// the parsed arguments.
    fn admit_tool(&self, name: &str, args: &str) -> Result<(ToolsAccess, Value), ToolError> {
        let Some(access) = self.control.grant::<ToolsAccess>().cloned() else {
            return Err(not_granted());
        };
        if name.len() > MAX_TOOL_NAME_BYTES || !access.grant.allow.iter().any(|a| a == name) {
            return Err(ToolError::Denied(format!(
                "tool {} is not granted to this graph (granted: {})",
                guest_name(name),
                if access.grant.allow.is_empty() {
                    "none".to_owned()
                } else {
                    access.grant.allow.join(", ")
                }
            )));
        }
        let control = &self.control;
        if control.chain().any(|g| g == name) {
            let path: Vec<&str> = control.chain().collect();
            return Err(ToolError::Recursion(format!(
                "tool {name} is already running in this chain ({} -> {name})",
                path.join(" -> ")
            )));
        }
        let depth = control.chain().count();
        if depth >= MAX_TOOL_DEPTH {
            return Err(ToolError::Recursion(format!(
                "calling {name} would nest {} runs deep; at most {MAX_TOOL_DEPTH} may nest",
                depth + 1
            )));
        }
        if args.len() > MAX_TOOL_ARGS_BYTES {
            return Err(ToolError::InvalidArgs(format!(
                "{} bytes of arguments is more than the {MAX_TOOL_ARGS_BYTES} a tool call may pass",
                args.len()
            )));
        }
        let args = json::parse_lossless(args, "args").map_err(|e| {
            ToolError::InvalidArgs(format!(
                "arguments are not lossless JSON at {}",
                guest_message(&e.to_string())
            ))
        })?;
        if !args.is_object() {
            return Err(ToolError::InvalidArgs(
                "arguments must be a JSON object".to_owned(),
            ));
        }
        if let Some(max) = access.grant.max_calls {
            let usage = self.control.usage::<ToolsUsage>();
            let taken = usage
                .calls
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < max).then_some(n + 1)
                });
            if taken.is_err() {
                return Err(ToolError::Quota(format!(
                    "this graph used its {max} granted tool calls in this run"
                )));
            }
        }
        Ok((access, args))
    }
}

/// A sub-run's failure as the caller's graph sees it.
fn tool_error(name: &str, e: ToolCallError) -> ToolError {
    match e {
        ToolCallError::NotFound => ToolError::NotFound(format!("no tool named {name} is mounted")),
        ToolCallError::Run(e) if e.code == sandgraph_core::ErrorCode::InvalidArgs => {
            ToolError::InvalidArgs(e.message)
        }
        ToolCallError::Run(e) => ToolError::Failed(format!("[{}] {}", e.code, e.message)),
        ToolCallError::Interrupted => ToolError::Failed(format!(
            "tool {name} stopped at an interrupt; a tool called by a graph cannot pause for a human"
        )),
    }
}

impl wit::Host for ToolsCtx {
    fn list(&mut self) -> Vec<ToolInfo> {
        let Some(access) = self.control.grant::<ToolsAccess>() else {
            return Vec::new();
        };
        access
            .grant
            .allow
            .iter()
            .filter_map(|name| access.backend.describe(name))
            .map(|d| ToolInfo {
                name: d.name,
                description: d.description,
                parameters: d.parameters.to_string(),
            })
            .collect()
    }

    async fn call(&mut self, name: String, args: String) -> Result<String, ToolError> {
        let started = Instant::now();
        let result = match self.control.enter() {
            Ok(()) => self.call_tool(&name, &args).await,
            Err(why) => Err(ToolError::Quota(why.to_string())),
        };
        let (decision, reason) = match &result {
            Ok(_) => ("allowed", None),
            Err(e) => journal_decision(e),
        };
        self.control
            .record(Call {
                capability: "tools",
                target: &name,
                decision,
                reason,
                request_bytes: args.len() as u64,
                response_bytes: result.as_ref().map_or(0, |v| v.len() as u64),
                tokens: None,
                started,
            })
            .await;
        result
    }
}

/// The `tools` capability, registered with the runtime.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolsFactor;

impl Factor for ToolsFactor {
    const INTERFACE: &'static str = "sandgraph:graph/tools";
    type Grant = ToolsAccess;
    type InstanceState = ToolsCtx;

    /// Adds `sandgraph:graph/tools`. Defined here rather than by bindgen
    /// because `call` needs the calling store: the calling call gives back
    /// the fuel it holds and lends its instance slot while the sub-run runs
    /// (the sub-run draws on the same pool and slots, and would otherwise
    /// find them taken) and takes both back when the sub-run ends.
    fn add_to_linker(&self, linker: &mut Linker<StoreData>) -> wasmtime::Result<()> {
        let mut tools = linker.instance("sandgraph:graph/tools@0.2.0")?;
        tools.func_wrap(
            "list",
            |mut store: StoreContextMut<'_, StoreData>, (): ()| {
                Ok((wit::Host::list(
                    store.data_mut().factor_mut::<ToolsFactor>(),
                ),))
            },
        )?;
        tools.func_wrap_async(
            "call",
            |mut store: StoreContextMut<'_, StoreData>, (name, args): (String, String)| {
                Box::new(async move {
                    let call = async |ctx: &mut ToolsCtx| wit::Host::call(ctx, name, args).await;
                    Ok((lending_slot::<ToolsFactor, _>(&mut store, call).await?,))
                })
            },
        )?;
        Ok(())
    }

    fn instance_state(&self, run: &Arc<RunControl>) -> ToolsCtx {
        ToolsCtx {
            control: run.clone(),
        }
    }
}

/// How a refused or failed call is journaled.
fn journal_decision(e: &ToolError) -> (&'static str, Option<&str>) {
    match e {
        ToolError::Denied(m) => ("denied", Some(m)),
        ToolError::NotFound(m) | ToolError::InvalidArgs(m) => ("invalid", Some(m)),
        ToolError::Recursion(m) => ("recursion", Some(m)),
        ToolError::Quota(m) => ("quota", Some(m)),
        ToolError::Failed(m) => ("failed", Some(m)),
    }
}

impl ToolsCtx {
    async fn call_tool(&self, name: &str, args: &str) -> Result<String, ToolError> {
        let (name, args) = (name.to_owned(), args);
        let (access, args) = self.admit_tool(&name, args)?;
        let control = self.control.clone();
        let run = access.backend.call(&name, args, control.sub_run());
        let value = tokio::select! {
            r = run => r.map_err(|e| tool_error(&name, e))?,
            () = control.cancelled() => {
                return Err(ToolError::Failed(format!(
                    "tool {name} was stopped: the calling run was cancelled"
                )));
            }
        };
        Ok(value.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandgraph_runtime::Limits;
    use sandgraph_runtime::caps::Capabilities;

    struct Nothing;

    impl ToolsBackend for Nothing {
        fn describe(&self, _: &str) -> Option<ToolDescription> {
            None
        }

        fn call(
            &self,
            _: &str,
            _: Value,
            _: SubRun,
        ) -> BoxFuture<'static, Result<Value, ToolCallError>> {
            Box::pin(async { Err(ToolCallError::NotFound) })
        }
    }

    /// The context of a run `depth` levels deep (`g0` the outermost).
    fn nested(depth: usize) -> ToolsCtx {
        let caps = Capabilities::default().with(ToolsAccess {
            grant: ToolsGrant {
                allow: vec!["next".into(), "g0".into()],
                max_calls: None,
            },
            backend: Arc::new(Nothing),
        });
        let mut control: Option<Arc<RunControl>> = None;
        for level in 0..depth {
            control = Some(RunControl::detached(
                Limits::default(),
                caps.clone(),
                control.map(|c| c.sub_run()),
                &format!("g{level}"),
            ));
        }
        ToolsFactor.instance_state(&control.expect("depth >= 1"))
    }

    #[test]
    fn chains_are_bounded_in_depth_and_refuse_cycles() {
        let ctx = nested(MAX_TOOL_DEPTH - 1);
        assert!(ctx.admit_tool("next", "{}").is_ok());
        let ctx = nested(MAX_TOOL_DEPTH);
        let e = ctx.admit_tool("next", "{}").unwrap_err();
        assert!(
            matches!(&e, ToolError::Recursion(m) if m == "calling next would nest 5 runs deep; at most 4 may nest"),
            "{e:?}"
        );
        let e = nested(3).admit_tool("g0", "{}").unwrap_err();
        assert!(
            matches!(&e, ToolError::Recursion(m) if m == "tool g0 is already running in this chain (g0 -> g1 -> g2 -> g0)"),
            "{e:?}"
        );
        let big = format!("{{\"a\": \"{}\"}}", "x".repeat(MAX_TOOL_ARGS_BYTES));
        assert!(matches!(
            nested(1).admit_tool("next", &big),
            Err(ToolError::InvalidArgs(_))
        ));
    }

    #[test]
    fn run_failures_keep_their_code() {
        let e = tool_error(
            "g",
            ToolCallError::Run(RunError::new(
                sandgraph_core::ErrorCode::Timeout,
                "run exceeded its timeout of 5 ms",
            )),
        );
        assert!(
            matches!(&e, ToolError::Failed(m) if m == "[timeout] run exceeded its timeout of 5 ms"),
            "{e:?}"
        );
        let e = tool_error(
            "g",
            ToolCallError::Run(RunError::new(
                sandgraph_core::ErrorCode::InvalidArgs,
                "invalid arguments: /name: expected a string",
            )),
        );
        assert!(matches!(e, ToolError::InvalidArgs(_)), "{e:?}");
        assert!(matches!(
            tool_error("g", ToolCallError::NotFound),
            ToolError::NotFound(m) if m == "no tool named g is mounted"
        ));
    }
}
