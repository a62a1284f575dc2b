use std::fmt;

/// The stable, documented error codes of a run. The CLI prints them as
/// `error[<code>]` and maps each to an exit code; the MCP server puts them in
/// `[<code>]` tool errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The caller's input or options were malformed.
    InvalidInput,
    /// The component could not be loaded or its spec is invalid.
    Load,
    /// The run passed its deadline (soft, then hard) or was cancelled.
    Timeout,
    /// The run used up its fuel budget.
    OutOfFuel,
    /// An instance hit its memory cap or the host-wide memory budget.
    MemoryLimit,
    /// The guest trapped (panic, stack overflow, bad memory access).
    Trap,
    /// A node or the final state produced JSON that is not lossless.
    InvalidOutput,
    /// The writes of a superstep could not be applied.
    InvalidUpdate,
    /// The run needed more supersteps than its step budget.
    RecursionLimit,
    /// A node reported its own failure.
    NodeError,
    /// A tool call's arguments failed the graph's parameter schema. Spelled
    /// `INVALID_ARGS`, the seed contract's code, so its consumers keep working.
    #[serde(rename = "INVALID_ARGS")]
    InvalidArgs,
    /// The graph's own `validate` export rejected a tool call.
    Validation,
    /// Another run is writing the same durable thread.
    ThreadBusy,
    /// The durable store could not be read or written.
    Storage,
}

impl ErrorCode {
    /// Every code, in documentation order.
    pub const ALL: [ErrorCode; 14] = [
        ErrorCode::InvalidInput,
        ErrorCode::Load,
        ErrorCode::Timeout,
        ErrorCode::OutOfFuel,
        ErrorCode::MemoryLimit,
        ErrorCode::Trap,
        ErrorCode::InvalidOutput,
        ErrorCode::InvalidUpdate,
        ErrorCode::RecursionLimit,
        ErrorCode::NodeError,
        ErrorCode::InvalidArgs,
        ErrorCode::Validation,
        ErrorCode::ThreadBusy,
        ErrorCode::Storage,
    ];

    /// The snake_case name printed in `error[<code>]`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidInput => "invalid_input",
            ErrorCode::Load => "load",
            ErrorCode::Timeout => "timeout",
            ErrorCode::OutOfFuel => "out_of_fuel",
            ErrorCode::MemoryLimit => "memory_limit",
            ErrorCode::Trap => "trap",
            ErrorCode::InvalidOutput => "invalid_output",
            ErrorCode::InvalidUpdate => "invalid_update",
            ErrorCode::RecursionLimit => "recursion_limit",
            ErrorCode::NodeError => "node_error",
            ErrorCode::InvalidArgs => "INVALID_ARGS",
            ErrorCode::Validation => "validation",
            ErrorCode::ThreadBusy => "thread_busy",
            ErrorCode::Storage => "storage",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed run: a stable code plus a lowercase message that says what was
/// wrong and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RunError {
    /// The stable code.
    pub code: ErrorCode,
    /// Lowercase, no trailing period; names what was wrong and where.
    pub message: String,
}

impl RunError {
    /// An error with `code` and `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        RunError {
            code,
            message: message.into(),
        }
    }
}
