//! The engine-independent heart of sandgraph: reducers and the Pregel
//! executor that runs a graph's nodes in bulk-synchronous supersteps, over
//! the graph specs, their validation and the lossless JSON rules of
//! [`sandgraph_spec`] (re-exported here).
//!
//! Nothing here knows about wasm. The executor drives a [`Backend`], which
//! hands out [`Worker`]s (one sandboxed instance each in production, a fake in
//! tests) that run node bodies, routers and custom reducers.

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod audit;
mod backend;
pub mod budget;
mod checkpoint;
mod error;
mod executor;
mod reducers;

pub use backend::{
    Backend, NodeContext, NodeOutput, RouteTarget, SendPacket, SharedJson, TextHold, Worker,
};
pub use checkpoint::{
    Checkpoint, CheckpointSource, Checkpointer, Start, TaskRecord, TaskResult, ThreadState,
    new_checkpoint_id,
};
pub use error::{ErrorCode, RunError};
pub use executor::{
    CompiledGraph, DEFAULT_RECURSION_LIMIT, Interrupt, MAX_TARGETS_PER_RESULT, MAX_TASKS_PER_STEP,
    RunConfig, RunOutcome, StepEvent, TaskUpdate, run, run_thread, update_state,
};
pub use sandgraph_spec::{
    ChannelSpec, ConditionalEdge, END, Edge, GOTO_ROUTER, GraphSpec, MAX_CHANNELS,
    MAX_DESCRIPTION_LEN, MAX_EDGES, MAX_IDENT_LEN, MAX_NAME_LEN, MAX_NODES, NodeSpec, PathEntry,
    RESERVED_GRAPH_NAME, Reducer, Registration, START, STRICT_MARKER_CHANNEL, SpecError, json,
    suggest, text,
};
