//! The brokered capabilities a graph may import, one
//! [`Factor`](sandgraph_runtime::caps::Factor) each: [`llm`] (models,
//! through the host's provider and key), [`tools`] (other mounted graph
//! tools, as sub-runs of the current run) and [`http`] (outgoing
//! `wasi:http` requests, checked before anything leaves the host).
//!
//! Each module is one capability and owns all of it: its linking (the
//! functions it adds to the sandbox's linker), its grant type (and, for
//! `http`, the grant's parsing from `sandgraph.toml`), its state in each
//! store, its usage meter, the journal rows of its calls, and its backend
//! trait, so tests inject a fake. The capability journal those rows go to
//! is [`journal`]: a table of this crate's in the sandgraph database. The runtime only knows the
//! [`Factor`](sandgraph_runtime::caps::Factor) interface; this crate's
//! [`builder`] is the one list that registers them. Adding a capability is
//! a module here and one line in that list.
//!
//! Invariants: deny by default (a run gets what its
//! [`Capabilities`](sandgraph_runtime::caps::Capabilities) grant, an
//! ungranted call is the capability's typed `denied` error and nothing
//! leaves the host); every call, allowed or refused, counts against the
//! run's call cap and reaches the capability journal; a wait on the
//! outside world holds no fuel and ends at the run's soft deadline. The
//! network client stack (hyper's client, rustls) is linked here, never in
//! `sandgraph-runtime`.
//!
//! One crate with a module per capability rather than a crate each: on the
//! two cores CI has, every crate of the workspace adds its own compile and
//! test binary (each links wasmtime), and the three share all of their
//! dependencies but the HTTP client's.

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod http;
pub mod journal;
pub mod llm;
pub mod tools;

#[cfg(test)]
#[allow(dead_code)]
#[path = "../../../tests/src/postgres.rs"]
mod fixture;

use sandgraph_runtime::{RunError, Runtime, RuntimeBuilder, RuntimeConfig};

/// A runtime builder with `config` and every capability registered: the
/// one registration list, in the order [`Graph::capabilities`] names them.
///
/// [`Graph::capabilities`]: sandgraph_runtime::Graph::capabilities
pub fn builder(config: RuntimeConfig) -> RuntimeBuilder {
    Runtime::builder(config)
        .factor(llm::LlmFactor)
        .factor(tools::ToolsFactor)
        .factor(http::HttpFactor::new())
}

/// A runtime with `config` and every capability registered ([`builder`]).
///
/// # Errors
///
/// As [`RuntimeBuilder::build`].
pub fn runtime(config: RuntimeConfig) -> Result<Runtime, RunError> {
    builder(config).build()
}
