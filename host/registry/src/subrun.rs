//! The registry's side of the brokered capabilities: the backends a
//! graph tool's runs get ([`Backends`]), the registry as the `tools`
//! backend (a granted graph calls another mounted graph tool through here,
//! as a sub-run of its own run), and the capability journal writer.
//!
//! The call goes through [`GraphTool::run`] like any other: the arguments
//! are validated against the tool's parameters and by the graph's own
//! `validate`, exactly as `sandgraph call` does; the sub-run then shares
//! its caller's deadline, cancellation, fuel and byte budget
//! ([`SubRun`]).

use std::sync::{Arc, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use sandgraph_core::Start;
use sandgraph_core::audit::{CapabilityCall, CapabilityLog, Written};
use sandgraph_factors::http::HttpCassette;
use sandgraph_factors::journal::CapabilityJournal;
use sandgraph_factors::llm::LlmBackend;
use sandgraph_factors::tools::{SubRun, ToolCallError, ToolDescription, ToolsBackend};
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
            match tool.run(Start::Input(args), opts, &mut |_| {}).await {
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
    fn record(
        &self,
        mut call: CapabilityCall,
        written: Written,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        if call.graph_digest.is_none() {
            call.graph_digest.clone_from(&self.digest);
        }
        if call.thread_id.is_none() {
            call.thread_id.clone_from(&self.thread);
        }
        self.log.record(call, written)
    }
}

/// Rows a journal writer holds queued at most, for all the runs that
/// write to it: about 2 KiB each at most (targets and reasons are capped
/// by the runtime), so a few MiB. A run that finds the queue full waits,
/// within its deadline, for the writer.
const MAX_QUEUED_ROWS: usize = 2048;

/// Rows written in one transaction at most: one commit (one fsync) serves
/// a batch, so the writer keeps up with many runs at once.
const MAX_BATCH_ROWS: usize = 256;

/// The capability journal of a store as a [`CapabilityLog`]: rows are
/// stamped with the time and queued (at most `MAX_QUEUED_ROWS`) for a
/// writer thread of the log's own, which appends what is queued in batches
/// of one transaction each, so neither the capability call nor tokio's
/// blocking pool ever waits for the disk. A failed write is logged, never
/// the call's failure. Dropping the last handle writes what is queued
/// before it returns.
pub struct StoreCapabilityLog {
    writer: Arc<Writer>,
}

type Queued = (CapabilityCall, Written);

/// The queue and the thread that drains it.
struct Writer {
    queue: std::sync::Mutex<Option<tokio::sync::mpsc::Sender<Queued>>>,
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the queue ends the thread once it has written the rest.
        drop(lock(&self.queue).take());
        let Some(thread) = lock(&self.thread).take() else {
            return;
        };
        // The writer thread itself may let go of the last handle (through
        // a row's hold); it ends on its own once the queue is closed.
        if thread.thread().id() == std::thread::current().id() {
            return;
        }
        if thread.join().is_err() {
            tracing::warn!("the capability journal writer panicked");
        }
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

enum Target {
    /// A store this process holds open.
    Open(CapabilityJournal),
    /// A database opened for each batch, so a process that makes no
    /// capability call never opens it (and never holds its lock).
    Path(std::path::PathBuf),
}

impl StoreCapabilityLog {
    /// Writes to `journal`.
    pub fn new(journal: CapabilityJournal) -> Self {
        Self::start(Target::Open(journal))
    }

    /// Writes to the database at `path`, opened for each batch.
    pub fn at_path(path: std::path::PathBuf) -> Self {
        Self::start(Target::Path(path))
    }

    fn start(target: Target) -> Self {
        let (tx, rx) = tokio::sync::mpsc::channel(MAX_QUEUED_ROWS);
        let thread = std::thread::Builder::new()
            .name("sandgraph-journal".into())
            .spawn(move || drain(&target, rx));
        let (queue, thread) = match thread {
            Ok(thread) => (Some(tx), Some(thread)),
            Err(e) => {
                tracing::warn!("cannot start the capability journal writer: {e}");
                (None, None)
            }
        };
        StoreCapabilityLog {
            writer: Arc::new(Writer {
                queue: std::sync::Mutex::new(queue),
                thread: std::sync::Mutex::new(thread),
            }),
        }
    }
}

/// The writer thread: waits for a row, takes what else is queued (up to a
/// batch), writes the batch in one transaction, and lets go of the rows'
/// holds; until the queue is closed and empty.
fn drain(target: &Target, mut rx: tokio::sync::mpsc::Receiver<Queued>) {
    while let Some(first) = rx.blocking_recv() {
        let mut rows = vec![first.0];
        let mut holds = vec![first.1];
        while rows.len() < MAX_BATCH_ROWS {
            match rx.try_recv() {
                Ok((row, hold)) => {
                    rows.push(row);
                    holds.push(hold);
                }
                Err(_) => break,
            }
        }
        if let Err(e) = target.append_all(&rows) {
            tracing::warn!(rows = rows.len(), "cannot journal capability calls: {e}");
        }
        drop(holds);
    }
}

impl Target {
    fn append_all(&self, calls: &[CapabilityCall]) -> Result<(), String> {
        match self {
            Target::Open(journal) => journal
                .append_all(calls)
                .map(drop)
                .map_err(|e| e.to_string()),
            Target::Path(path) => {
                let location = sandgraph_store::StoreLocation::new(path);
                let store = location
                    .open(None)
                    .map_err(|e| format!("{location}: {e}"))?;
                CapabilityJournal::open(&store)
                    .append_all(calls)
                    .map(drop)
                    .map_err(|e| e.to_string())
            }
        }
    }
}

impl CapabilityLog for StoreCapabilityLog {
    fn record(
        &self,
        mut call: CapabilityCall,
        written: Written,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        call.at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let queue = lock(&self.writer.queue).clone();
        Box::pin(async move {
            if let Some(queue) = queue {
                // Waits while the queue is full; fails only once the
                // writer is gone.
                let _ = queue.send((call, written)).await;
            }
        })
    }
}
