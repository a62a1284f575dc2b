//! Errors of the registry: opening it (configuration, folders, strict mode)
//! and mounting one graph.

use std::fmt;
use std::path::PathBuf;

/// Why a graph was not mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MountErrorKind {
    /// The file could not be read.
    Io,
    /// The runtime refused the component: not a component, the wrong
    /// world, a failing `describe`, or an invalid spec.
    Load,
    /// The graph is named `run_code`.
    Reserved,
    /// Another graph of the same name is mounted in the same scope.
    Duplicate,
    /// The graph's `parameters` do not follow the value schema DSL.
    UnsupportedSchema,
    /// The scope passed belongs to another registry, or is closed.
    ForeignScope,
    /// Locked mounting: the file is not the one its folder's
    /// `sandgraph.lock` pins (changed, or not in the lock).
    Unpinned,
    /// Trusted keys: the file's signature sidecar is missing, malformed,
    /// signs other bytes, or is not by a trusted key.
    Signature,
    /// The graph's name is not one the operator chose for the component:
    /// the file is not named after it and its folder's `sandgraph.lock`
    /// does not pin it under it.
    Unbound,
    /// Not a failure: advice about a mounted graph or the configuration
    /// (only in [`crate::MountReport::notices`]).
    Advice,
}

/// A graph that was not mounted: where it came from and why. Mounting a
/// folder reports these as warnings and goes on; the imperative
/// `mount_*`/`register`/`create` calls return them as errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountWarning {
    /// The file, or the origin label of bytes and registered graphs.
    pub path: PathBuf,
    /// The class of failure.
    pub kind: MountErrorKind,
    /// Lowercase, no trailing period, e.g.
    /// `duplicate graph name "echo_graph" (already mounted from a.wasm)`.
    pub reason: String,
}

impl MountWarning {
    pub(crate) fn new(path: impl Into<PathBuf>, kind: MountErrorKind, reason: String) -> Self {
        MountWarning {
            path: path.into(),
            kind,
            reason,
        }
    }
}

impl fmt::Display for MountWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

impl std::error::Error for MountWarning {}

/// A failure to open or watch a registry.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The operator configuration is unreadable or invalid. `path` carries
    /// `:line:column` when the position is known.
    #[error("{}: {message}", path.display())]
    Config {
        /// The file, with `:line:column` when known.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A graph folder cannot be read.
    #[error("cannot read graph folder {}: {message}", path.display())]
    Dir {
        /// The folder.
        path: PathBuf,
        /// The I/O error.
        message: String,
    },
    /// Strict mode: at least one graph failed to mount.
    #[error("{} failed to mount (strict): {}", graphs(.0.len()), join(.0))]
    Strict(Vec<MountWarning>),
    /// Locked mounting: a folder has no usable `sandgraph.lock`, or its
    /// graphs differ from it (changed, missing or extra files); each entry
    /// names the file and what differs.
    #[error("the graph folders do not match their lock files: {}", .0.join("; "))]
    Locked(Vec<String>),
    /// The folders cannot be watched.
    #[error("cannot watch {}: {message}", path.display())]
    Watch {
        /// The folder.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

fn graphs(n: usize) -> String {
    if n == 1 {
        "1 graph".to_owned()
    } else {
        format!("{n} graphs")
    }
}

fn join(warnings: &[MountWarning]) -> String {
    warnings
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
