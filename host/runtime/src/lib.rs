//! The sandbox: loads graph components with wasmtime and runs their nodes
//! under deny-by-default capabilities, fuel, epoch deadlines and memory caps.
//!
//! Build one [`Runtime`] per process with [`Runtime::builder`] (it owns the
//! `Engine`, the `Linker`, the epoch ticker and the host-wide memory
//! budget), registering each brokered capability as a [`caps::Factor`]
//! (the capabilities live in their own crate, `sandgraph-factors`, so the
//! sandbox holds no network client). [`Runtime::load`] each graph once
//! (compiles it and builds its typed `*Pre`), then [`Runtime::run`] as
//! often as you like: every run gets fresh instances in fresh stores.

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod bindings;
pub mod caps;
mod fuel;
mod host_api;
mod limits;
mod loader;
mod runtime;
mod sandbox;
mod turns;
mod wasi;

pub use host_api::{GuestLogLevel, LogSink};
pub use limits::{Limits, MAX_CAPABILITY_CALLS_PER_RUN, MAX_TIMEOUT, RuntimeConfig};
pub use loader::{Graph, HOST_WORLD_VERSION};
pub use runtime::{Compiled, PreparedRun, RunOptions, Runtime, RuntimeBuilder};
pub use sandgraph_core::{
    Checkpoint, Checkpointer, ErrorCode, GraphSpec, Interrupt, RunError, RunOutcome, Start,
    StepEvent, ThreadState,
};
pub use tokio_util::sync::CancellationToken;
