//! The `sandgraph:graph/host` capability: `log` and `cancelled`.
//!
//! Its context is [`HostApi`], kept in each store; its backend is a
//! [`LogSink`] (the tracing log in production, a recorder in tests).

use std::sync::Arc;

use sandgraph_core::text::guest_text;

use crate::bindings::{HostImports, HostImportsV2, LogLevel};
use crate::limits::{MAX_LOG_LINES_PER_INSTANCE, MAX_LOG_MESSAGE_BYTES};
use crate::sandbox::RunControl;

/// Where guest log lines go.
pub trait LogSink: Send + Sync + 'static {
    /// One line from graph `graph`, already bounded (cut at
    /// `MAX_LOG_MESSAGE_BYTES`, the cut marked) and escaped: it holds no
    /// control character, so it is one inert line.
    fn log(&self, graph: &str, level: GuestLogLevel, message: &str);
}

/// A guest log level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestLogLevel {
    /// Finest detail.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal progress.
    Info,
    /// Something unexpected the graph handled.
    Warn,
    /// A failure the graph reports.
    Error,
}

/// The production sink: the host's `tracing` log, target `sandgraph::guest`.
#[derive(Debug, Default)]
pub(crate) struct TracingSink;

impl LogSink for TracingSink {
    fn log(&self, graph: &str, level: GuestLogLevel, message: &str) {
        match level {
            GuestLogLevel::Trace => tracing::trace!(target: "sandgraph::guest", graph, "{message}"),
            GuestLogLevel::Debug => tracing::debug!(target: "sandgraph::guest", graph, "{message}"),
            GuestLogLevel::Info => tracing::info!(target: "sandgraph::guest", graph, "{message}"),
            GuestLogLevel::Warn => tracing::warn!(target: "sandgraph::guest", graph, "{message}"),
            GuestLogLevel::Error => tracing::error!(target: "sandgraph::guest", graph, "{message}"),
        }
    }
}

/// Per-store context of the host capability.
pub(crate) struct HostApi {
    pub(crate) graph: Arc<str>,
    pub(crate) control: Arc<RunControl>,
    pub(crate) sink: Arc<dyn LogSink>,
    lines: usize,
}

impl HostApi {
    pub(crate) fn new(graph: Arc<str>, control: Arc<RunControl>, sink: Arc<dyn LogSink>) -> Self {
        HostApi {
            graph,
            control,
            sink,
            lines: 0,
        }
    }
}

impl HostImports for HostApi {
    fn log(&mut self, level: LogLevel, message: String) {
        self.lines += 1;
        if self.lines > MAX_LOG_LINES_PER_INSTANCE {
            if self.lines == MAX_LOG_LINES_PER_INSTANCE + 1 {
                self.sink.log(
                    &self.graph,
                    GuestLogLevel::Warn,
                    "log line limit reached; further lines dropped",
                );
            }
            return;
        }
        let level = match level {
            LogLevel::Trace => GuestLogLevel::Trace,
            LogLevel::Debug => GuestLogLevel::Debug,
            LogLevel::Info => GuestLogLevel::Info,
            LogLevel::Warn => GuestLogLevel::Warn,
            LogLevel::Error => GuestLogLevel::Error,
        };
        // One record, one inert line: a newline or an escape sequence in
        // the guest's text is written as a visible escape, so the line can
        // neither forge a host line nor drive the operator's terminal.
        self.sink.log(
            &self.graph,
            level,
            &guest_text(&message, MAX_LOG_MESSAGE_BYTES),
        );
    }

    fn cancelled(&mut self) -> bool {
        self.control.soft_stop_reached()
    }
}

/// 0.2.0's `host` is 0.1.0's: the same two functions.
impl HostImportsV2 for HostApi {
    fn log(&mut self, level: LogLevel, message: String) {
        HostImports::log(self, level, message);
    }

    fn cancelled(&mut self) -> bool {
        HostImports::cancelled(self)
    }
}
