//! The toolkit's error: one variant per kind of failure, so the command
//! line maps each to its exit status.

use sandgraph_registry::RegistryError;
use sandgraph_runtime::{ErrorCode, RunError};

/// Why a toolkit operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A failure with a run error code: bad input or options, a graph that
    /// does not load, a store that fails.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A graph could not be built (a missing tool or target, a failed
    /// compile, a bad manifest).
    #[error("{0}")]
    Build(String),
    /// A check a CI gate runs failed; `code` names it: `lint` (a lint
    /// warned under deny-warnings) or `signature` (a graph does not verify).
    #[error("{message}")]
    Check {
        /// The stable name of the check.
        code: &'static str,
        /// What failed, naming the graph.
        message: String,
    },
    /// An OCI registry failed or refused, or a reference is malformed.
    #[error(transparent)]
    Oci(#[from] sandgraph_distribution::Error),
    /// A bad file or folder argument of a push or pull; `code` is
    /// `invalid_args` or `too_large`.
    #[error("{message}")]
    Args {
        /// The stable name of the failure.
        code: &'static str,
        /// What was wrong with the argument.
        message: String,
    },
    /// The host itself failed; `code` is `internal` or `io`.
    #[error("{message}")]
    Internal {
        /// The stable name of the failure.
        code: &'static str,
        /// What failed.
        message: String,
    },
}

impl Error {
    /// A build failure.
    pub fn build(message: impl Into<String>) -> Self {
        Error::Build(message.into())
    }

    /// A failure of the host itself (`internal`).
    pub fn internal(message: impl Into<String>) -> Self {
        Error::Internal {
            code: "internal",
            message: message.into(),
        }
    }

    /// Bad input (`invalid_input`).
    pub fn invalid(message: impl Into<String>) -> Self {
        RunError::new(ErrorCode::InvalidInput, message).into()
    }

    /// A bad argument of a push or pull (`invalid_args`).
    pub(crate) fn args(message: impl Into<String>) -> Self {
        Error::Args {
            code: "invalid_args",
            message: message.into(),
        }
    }
}

/// A registry's failure: `invalid_input` for a bad config or folder,
/// `load` for a graph refused by strict or locked mounting, `internal` for
/// a folder that cannot be watched.
impl From<RegistryError> for Error {
    fn from(e: RegistryError) -> Self {
        match e {
            RegistryError::Config { .. } | RegistryError::Dir { .. } => {
                Error::invalid(e.to_string())
            }
            RegistryError::Strict(_) | RegistryError::Locked(_) => {
                RunError::new(ErrorCode::Load, e.to_string()).into()
            }
            RegistryError::Watch { .. } => Error::internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_failures_keep_their_codes() {
        let e = Error::from(RegistryError::Locked(vec!["x".into()]));
        assert!(matches!(
            e,
            Error::Run(RunError {
                code: ErrorCode::Load,
                ..
            })
        ));
        assert_eq!(
            e.to_string(),
            RegistryError::Locked(vec!["x".into()]).to_string()
        );
        assert!(matches!(
            Error::invalid("bad"),
            Error::Run(RunError {
                code: ErrorCode::InvalidInput,
                ..
            })
        ));
    }
}
