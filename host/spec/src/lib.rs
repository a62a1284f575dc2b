//! The sandgraph graph spec, its validation, and the lossless JSON rules:
//! what the host and the guest SDK must agree on, with no async runtime and
//! no wasm engine, so it builds for `wasm32-wasip2` too.
//!
//! - [`GraphSpec`] mirrors the WIT `graph-spec` record a component
//!   describes itself with; [`GraphSpec::validate`] is the host's check
//!   (first problem), [`GraphSpec::problems`] every problem, worded for the
//!   host or for a graph's author ([`Audience`]).
//! - [`json`]: lossless JSON (finite, no `-0`, safe integers, no duplicate
//!   keys, bounded depth and size).
//! - [`text`]: guest text made safe to show; [`suggest`]: did-you-mean
//!   hints. Spec messages use both.
//!
//! `sandgraph-core` re-exports all of it; graphs use it through
//! `sandgraph-sdk`.

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod json;
mod mermaid;
mod spec;
pub mod suggest;
pub mod text;
mod validate;

pub use spec::{
    ChannelSpec, ConditionalEdge, END, Edge, GOTO_ROUTER, GraphSpec, MAX_CHANNELS,
    MAX_DESCRIPTION_LEN, MAX_EDGES, MAX_IDENT_LEN, MAX_NAME_LEN, MAX_NODES, NodeSpec, PathEntry,
    RESERVED_GRAPH_NAME, Reducer, Registration, START, STRICT_MARKER_CHANNEL, SpecError,
};
pub use validate::Audience;

#[cfg(test)]
mod fixtures;
