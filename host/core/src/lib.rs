//! The engine-independent heart of sandgraph: graph specs and their
//! validation, lossless JSON, reducers, and the Pregel executor that runs a
//! graph's nodes in bulk-synchronous supersteps.
//!
//! Nothing here knows about wasm. The executor drives a [`Backend`], which
//! hands out [`Worker`]s (one sandboxed instance each in production, a fake in
//! tests) that run node bodies, routers and custom reducers.

#![deny(missing_docs)]

pub mod audit;
mod backend;
pub mod budget;
mod checkpoint;
mod error;
mod executor;
pub mod json;
mod reducers;
mod spec;
pub mod suggest;
pub mod text;

pub use backend::{Backend, NodeContext, NodeOutput, RouteTarget, SendPacket, Worker};
pub use checkpoint::{
    Checkpoint, CheckpointSource, Checkpointer, Start, TaskRecord, TaskResult, ThreadState,
    new_checkpoint_id,
};
pub use error::{ErrorCode, RunError};
pub use executor::{
    CompiledGraph, DEFAULT_RECURSION_LIMIT, Interrupt, MAX_TARGETS_PER_RESULT, MAX_TASKS_PER_STEP,
    RunConfig, RunOutcome, StepEvent, TaskUpdate, run, run_thread, update_state,
};
pub use spec::{
    ChannelSpec, ConditionalEdge, END, Edge, GraphSpec, MAX_CHANNELS, MAX_DESCRIPTION_LEN,
    MAX_EDGES, MAX_IDENT_LEN, MAX_NAME_LEN, MAX_NODES, NodeSpec, PathEntry, Reducer, Registration,
    START, STRICT_MARKER_CHANNEL, SpecError,
};
