//! The graph author's toolkit, everything `sandgraph` does to a graph
//! before it is hosted: [`build`] a graph written in Rust (cargo), Python
//! (componentize-py) or JavaScript (jco) into a component; run its
//! [`golden`] cases and report them (text, JUnit XML); [`check`] components
//! without running a node; pin folders (`sign::lock`), sign and verify
//! components ([`sign`]); [`oci`] push and pull; create a project
//! ([`new`]) with the SDK of this sandgraph vendored into it ([`sdk`]).
//!
//! Each operation is a function taking its options and returning a typed
//! value or an [`Error`]; the command line (`sandgraph-cli`) parses the
//! flags, resolves the operator's configuration, prints what the values
//! say and maps each [`Error`] to its exit status. The library writes
//! nothing to stdout; progress and warnings (a build's tool output, a
//! compile cache it cannot use, a registry's credentials note) go to
//! stderr. Text quoting a graph, a model or a registry is made inert for
//! a terminal ([`show`]) before it reaches a message or a report.
//!
//! The SDK sources and project templates `new` writes are embedded at
//! build time (build.rs walks guest-sdk/ and host/spec/; templates/ holds
//! the project files), so what a project vendors is exactly the SDK this
//! toolkit was built with.

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod build;
mod build_js;
mod build_py;
pub mod cache;
pub mod check;
mod error;
pub mod golden;
pub mod new;
pub mod oci;
pub mod sdk;
pub mod show;
pub mod sign;

pub use build_js::JCO_VERSION;
pub use build_py::COMPONENTIZE_PY_VERSION;
pub use error::Error;
