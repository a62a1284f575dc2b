//! Exit codes and the `error[<code>]: <message>` report. The book's table
//! (`docs/reference/exit-codes.md`, from `reference/exits.rs`) is generated
//! from the same numbers; keep them stable.

use std::process::ExitCode;

use sandgraph_runtime::{ErrorCode, RunError};

use crate::show;

/// The run stopped at an interrupt and waits for a resume value. Not an error.
pub const INTERRUPTED: u8 = 20;
/// `sandgraph build` could not build the crate.
pub const BUILD_FAILED: u8 = 12;
/// A check a CI gate runs failed: `sandgraph test` (a case failed),
/// `check --deny-warnings` (a lint warned), `verify` (the graph does not
/// verify). The generic failure status CI systems expect.
pub const CHECK_FAILED: u8 = 1;
/// An OCI registry failed or refused (`push`, `pull`): unreachable,
/// credentials refused, no such reference, not a wasm component artifact,
/// a size over its bound, or a digest mismatch.
pub const REGISTRY: u8 = 22;
/// A bug or an environment failure in the host itself.
pub const INTERNAL: u8 = 70;
/// The model provider failed: missing or rejected key, rate limits or
/// server errors past the retries, timeouts, malformed answers.
pub const MODEL: u8 = 17;
/// Every routing attempt was rejected; the message has the last reason.
pub const ROUTING_EXHAUSTED: u8 = 18;
/// A routing hook (a listener of the operator's policy) failed.
pub const HOOK: u8 = 19;
/// The supervisor could not drive its agent graph to the end (turn limit,
/// stopped without finishing, undeliverable wake, coordinator failure).
pub const SUPERVISOR: u8 = 21;

/// The exit code of each error code.
pub fn exit_code(code: ErrorCode) -> u8 {
    match code {
        ErrorCode::InvalidInput => 2,
        ErrorCode::Load => 3,
        ErrorCode::Timeout => 4,
        ErrorCode::OutOfFuel => 5,
        ErrorCode::MemoryLimit => 6,
        ErrorCode::Trap => 7,
        ErrorCode::InvalidOutput => 8,
        ErrorCode::InvalidUpdate => 9,
        ErrorCode::RecursionLimit => 10,
        ErrorCode::NodeError => 11,
        ErrorCode::InvalidArgs => 13,
        ErrorCode::Validation => 14,
        ErrorCode::ThreadBusy => 15,
        ErrorCode::Storage => 16,
    }
}

/// A failure to print as `error[<code>]: <message>` on stderr.
#[derive(Debug)]
pub struct Failure {
    code: &'static str,
    exit: u8,
    message: String,
}

impl Failure {
    pub fn build(message: impl Into<String>) -> Self {
        Failure {
            code: "build",
            exit: BUILD_FAILED,
            message: message.into(),
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Failure {
            code: "internal",
            exit: INTERNAL,
            message: message.into(),
        }
    }

    /// A failure with its own code and exit number.
    pub fn new(code: &'static str, exit: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            exit,
            message: message.into(),
        }
    }

    /// Prints the report as one line: the message bounded by
    /// [`show::MAX_REPORT_BYTES`] and escaped. It may quote a graph, a model
    /// or a client however it got here; none of them may drive the terminal
    /// or forge a line.
    pub fn report(self) -> ExitCode {
        eprintln!(
            "error[{}]: {}",
            self.code,
            show::line(&self.message, show::MAX_REPORT_BYTES)
        );
        ExitCode::from(self.exit)
    }
}

/// The exit status of each kind of toolkit failure: a run error keeps its
/// code's, a push or pull refused by the registry exits [`REGISTRY`] (a
/// malformed reference 2, as bad input).
impl From<sandgraph_toolkit::Error> for Failure {
    fn from(e: sandgraph_toolkit::Error) -> Self {
        use sandgraph_toolkit::Error;
        match e {
            Error::Run(e) => e.into(),
            Error::Build(message) => Failure::build(message),
            Error::Check { code, message } => Failure::new(code, CHECK_FAILED, message),
            Error::Oci(e) => {
                let exit = match e {
                    sandgraph_distribution::Error::Reference(_) => 2,
                    _ => REGISTRY,
                };
                Failure::new(e.code(), exit, e.to_string())
            }
            Error::Args { code, message } => Failure::new(code, 2, message),
            Error::Internal { code, message } => Failure::new(code, INTERNAL, message),
        }
    }
}

impl From<RunError> for Failure {
    fn from(e: RunError) -> Self {
        Failure {
            code: e.code.as_str(),
            exit: exit_code(e.code),
            message: e.message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_distinct_and_nonzero() {
        let mut seen = std::collections::HashSet::new();
        for c in ErrorCode::ALL {
            let e = exit_code(c);
            assert!(
                ![
                    0,
                    INTERRUPTED,
                    BUILD_FAILED,
                    INTERNAL,
                    MODEL,
                    ROUTING_EXHAUSTED,
                    HOOK,
                    SUPERVISOR,
                    CHECK_FAILED,
                    REGISTRY
                ]
                .contains(&e)
            );
            assert!(seen.insert(e), "duplicate exit code {e}");
        }
    }
}
