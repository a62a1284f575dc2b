//! Lines in the host log, under the graph's name.
//!
//! The host truncates long messages and rate-limits floods. Off wasm (native
//! tests) the lines go to stderr.
//!
//! ```
//! sandgraph_sdk::log::info("planning 3 items");
//! sandgraph_sdk::log::warn(format!("retrying {}", "lookup"));
//! ```

use std::fmt;

/// How important a log line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal progress.
    Info,
    /// Something unexpected that the graph handled.
    Warn,
    /// A failure.
    Error,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        })
    }
}

/// Writes `message` to the host log at `level`.
pub fn log(level: Level, message: impl AsRef<str>) {
    crate::component::host::log(level, message.as_ref());
}

/// Writes `message` at [`Level::Trace`].
pub fn trace(message: impl AsRef<str>) {
    log(Level::Trace, message);
}

/// Writes `message` at [`Level::Debug`].
pub fn debug(message: impl AsRef<str>) {
    log(Level::Debug, message);
}

/// Writes `message` at [`Level::Info`].
pub fn info(message: impl AsRef<str>) {
    log(Level::Info, message);
}

/// Writes `message` at [`Level::Warn`].
pub fn warn(message: impl AsRef<str>) {
    log(Level::Warn, message);
}

/// Writes `message` at [`Level::Error`].
pub fn error(message: impl AsRef<str>) {
    log(Level::Error, message);
}
