//! Graph tools: every `.wasm` graph component in a folder, mounted as a
//! validated tool.
//!
//! A [`Registry`] mounts the components of the folders it is given (sorted
//! paths, non-recursive). Each becomes a [`GraphTool`]: its name, its
//! description (the graph's own or one synthesized from its structure), the
//! JSON Schema of its arguments (compiled from the graph's `parameters`, or
//! the fallback single `input` argument), its registration flags after the
//! operator's overrides ([`OperatorConfig`], `sandgraph.toml`) and its
//! limits. [`GraphTool::run`] is the one way a run starts, from a
//! [`sandgraph_core::Start`]: for a tool call the arguments are validated,
//! the graph's own `validate` export runs (once: a router that checked them
//! first with [`GraphTool::check`] hands back the [`Checked`] proof), then
//! the graph runs once and its final state comes back as JSON and as
//! pretty JSON text.
//!
//! A graph that cannot be mounted (not loadable, invalid spec, duplicate
//! name, the reserved name `run_code`, unsupported parameters) is reported
//! in the [`MountReport`] and skipped; `strict` turns that into an error.
//! [`Registry::watch`] follows the folders while the host runs.
//!
//! Before a file is compiled it is admitted from its bytes' sha256:
//! with [`RegistryOptions::locked`] only the graphs each folder's
//! `sandgraph.lock` pins mount, and [`Registry::open`] fails as a whole
//! ([`RegistryError::Locked`]) when a folder has no lock or its graphs
//! differ from it (changed, missing, extra); with
//! [`RegistryOptions::trusted_keys`] a graph mounts only when its
//! `<file>.sig` sidecar signs that digest with a trusted key (else a mount
//! warning, [`MountErrorKind::Signature`]). The formats are those of
//! `sandgraph_artifact`.
//!
//! Registration compiles nothing when the compile cache (a folder,
//! [`sandgraph_store::CompileCache`], that concurrent processes share)
//! already holds the graph's spec and compiled
//! artifact, keyed by the sha256 of the wasm bytes and the engine
//! fingerprint: the artifact is deserialized, after its digest is checked,
//! at the first call. A graph seen for the first time is compiled once at
//! mount (its spec comes from running it) and the artifact is stored. A
//! component that fails to load (an invalid file, a `describe` that traps
//! or runs into the runtime's load limits, an invalid spec) is remembered
//! in the cache with its error, and skipped at once by later starts until
//! its bytes change.

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod admission;
mod compile;
mod config;
mod error;
mod registry;
mod subrun;
mod tool;
mod watch;

pub use compile::load_cached;
pub use config::{
    DEFAULT_CONFIG_FILE, GrantsConfig, GraphOverrides, LimitOverrides, OperatorConfig,
};
pub use error::{MountErrorKind, MountWarning, RegistryError};
pub use registry::{
    MAX_CONCURRENT_MOUNTS, MountReport, MountedGraph, RESERVED_NAME, Registry, RegistryEvent,
    RegistryOptions, Scope,
};
pub use subrun::StoreCapabilityLog;
pub use tool::{CallOptions, Checked, GraphTool, ToolOutput, ToolSource};
pub use watch::{DEBOUNCE, WatchHandle};
