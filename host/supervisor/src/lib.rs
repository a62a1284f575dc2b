//! The agent-graph host. A [`Coordinator`] runs the work a supervisor
//! scheduled (claims it exactly once, runs it on a routing agent or one
//! graph under the sandbox limits, writes one record per outcome); a
//! [`Supervisor`] drives a graph to its end: supervisor turns over the
//! model provider with the three agent-graph tools, waves of work, and wakes
//! delivered as new supervisor turns, all of it durable in redb so
//! [`Supervisor::resume`] continues after a crash without running finished
//! work again.

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod context;
mod coordinator;
mod supervisor;

pub use context::{BYTES_PER_TOKEN, ContextError, DEFAULT_CONTEXT_BUDGET_TOKENS, estimate_tokens};
pub use coordinator::{
    Coordinator, CoordinatorOptions, DEFAULT_MAX_NEW_ACTIVATIONS, WaveError, WaveReport,
};
pub use supervisor::{
    Event, StoreFailure, SuperviseError, SuperviseOutcome, Supervisor, SupervisorOptions,
};
