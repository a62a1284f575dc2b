//! The registry's side of the brokered capabilities: the backends a
//! graph tool's runs get ([`Backends`]), the registry as the `tools`
//! backend (a granted graph calls another mounted graph tool through here,
//! as a sub-run of its own run), and the capability journal writer.
//!
//! The call goes through [`GraphTool::call`] like any other: the arguments
//! are validated against the tool's parameters and by the graph's own
//! `validate`, exactly as `sandgraph call` does; the sub-run then shares
//! its caller's deadline, cancellation, fuel and byte budget
//! ([`SubRun`]).

use std::sync::{Arc, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use sandgraph_core::audit::{CapabilityCall, CapabilityLog};
use sandgraph_runtime::caps::http::HttpCassette;
use sandgraph_runtime::caps::llm::LlmBackend;
use sandgraph_runtime::caps::tools::{SubRun, ToolCallError, ToolDescription, ToolsBackend};
use sandgraph_store::CapabilityJournal;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;

use crate::registry::{Inner, Registry};
use crate::tool::CallOptions;

/// The backend of every graph tool's `tools` grant: the registry the tool
/// is mounted in (held weakly: a tool must not keep its registry alive).
pub(crate) struct RegistryTools(pub(crate) Weak<Inner>);

impl RegistryTools {
    fn registry(&self) -> Option<Registry> {
        self.0.upgrade().map(|inner| Registry { inner })
    }

    /// The tool a grant naming `name` reaches: only one bound to that name
    /// by the operator ([`GraphTool::identity_bound`]); a component that
    /// merely calls itself `name` is not it.
    fn target(&self, name: &str) -> Option<Arc<crate::GraphTool>> {
        self.registry()?.get(name).filter(|t| t.identity_bound())
    }
}

impl ToolsBackend for RegistryTools {
    fn describe(&self, name: &str) -> Option<ToolDescription> {
        let tool = self.target(name)?;
        Some(ToolDescription {
            name: tool.name().to_owned(),
            description: Some(tool.description().to_owned()),
            parameters: tool.input_schema().clone(),
        })
    }

    fn call(
        &self,
        name: &str,
        args: Value,
        caller: SubRun,
    ) -> Pin<Box<dyn Future<Output = Result<Value, ToolCallError>> + Send>> {
        let tool = self.target(name);
        Box::pin(async move {
            let tool = tool.ok_or(ToolCallError::NotFound)?;
            let opts = CallOptions {
                sub_run_of: Some(caller),
                ..CallOptions::default()
            };
            match tool.call(args, opts).await {
                Ok(out) if out.interrupted => Err(ToolCallError::Interrupted),
                Ok(out) => Ok(out.value),
                Err(e) => Err(ToolCallError::Run(e)),
            }
        })
    }
}

/// The `tools` backend for the tools of the registry `inner` will be.
pub(crate) fn backend(inner: Weak<Inner>) -> Arc<dyn ToolsBackend> {
    Arc::new(RegistryTools(inner))
}

/// Where the capability calls of a registry's graph tools go.
#[derive(Clone)]
pub(crate) struct Backends {
    /// The operator's model, if the host has one.
    pub(crate) llm: Option<LlmBackend>,
    /// The registry itself.
    pub(crate) tools: Arc<dyn ToolsBackend>,
    /// The capability journal, if kept.
    pub(crate) log: Option<Arc<dyn CapabilityLog>>,
    /// Where the `http` exchanges are recorded or replayed from, if so.
    pub(crate) http_cassette: Option<HttpCassette>,
}

/// A log that adds what the registry knows of a call (the component's
/// digest, the thread) before passing each row on.
pub(crate) struct Tagged {
    pub(crate) log: Arc<dyn CapabilityLog>,
    pub(crate) digest: Option<String>,
    pub(crate) thread: Option<String>,
}

impl CapabilityLog for Tagged {
    fn record(&self, mut call: CapabilityCall) {
        if call.graph_digest.is_none() {
            call.graph_digest.clone_from(&self.digest);
        }
        if call.thread_id.is_none() {
            call.thread_id.clone_from(&self.thread);
        }
        self.log.record(call);
    }
}

/// The capability journal of a store as a [`CapabilityLog`]: each row is
/// stamped with the time and written on a blocking thread (a write
/// fsyncs), so the capability call itself never waits for the disk. A
/// failed write is logged, never the call's failure.
pub struct StoreCapabilityLog {
    target: Arc<Target>,
}

enum Target {
    /// A store this process holds open.
    Open(CapabilityJournal),
    /// A database opened for each row, so a process that makes no
    /// capability call never opens it (and never holds its lock).
    Path(std::sync::Mutex<std::path::PathBuf>),
}

impl StoreCapabilityLog {
    /// Writes to `journal`.
    pub fn new(journal: CapabilityJournal) -> Self {
        StoreCapabilityLog {
            target: Arc::new(Target::Open(journal)),
        }
    }

    /// Writes to the database at `path`, opened for each row (one at a
    /// time).
    pub fn at_path(path: std::path::PathBuf) -> Self {
        StoreCapabilityLog {
            target: Arc::new(Target::Path(std::sync::Mutex::new(path))),
        }
    }
}

impl Target {
    fn append(&self, call: &CapabilityCall) -> Result<(), String> {
        match self {
            Target::Open(journal) => journal.append(call).map(drop).map_err(|e| e.to_string()),
            Target::Path(path) => {
                let path = path
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let store = match path.to_str() {
                    Some(location) => sandgraph_store::Store::open_location(location),
                    None => sandgraph_store::Store::open(&path),
                }
                .map_err(|e| format!("{}: {e}", path.display()))?;
                store
                    .capability_journal()
                    .append(call)
                    .map(drop)
                    .map_err(|e| e.to_string())
            }
        }
    }
}

impl CapabilityLog for StoreCapabilityLog {
    fn record(&self, mut call: CapabilityCall) {
        call.at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let target = self.target.clone();
        let write = move || {
            if let Err(e) = target.append(&call) {
                tracing::warn!("cannot journal a capability call: {e}");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn_blocking(write);
            }
            Err(_) => write(),
        }
    }
}
