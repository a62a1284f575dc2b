//! The agent-graph host. A [`Coordinator`] runs the work a supervisor
//! scheduled (claims it exactly once, runs it on a routing agent or one
//! graph under the sandbox limits, writes one record per outcome); a
//! [`Supervisor`] drives a graph to its end: supervisor turns over the
//! model provider with the three agent-graph tools, waves of work, and wakes
//! delivered as new supervisor turns, all of it durable (the graph's
//! [`SupervisorRuns`] row, a table of this crate's, and the controller's) so
//! [`Supervisor::resume`] continues after a crash without running finished
//! work again. A [`WorkPoller`] shares the work of several hosts: started
//! by `sandgraph serve --controller` beside its server, it runs a wave of
//! every open graph at start and then at an interval, so hosts on one
//! PostgreSQL store finish each other's work, however it was scheduled,
//! and the work of a dead host (its claims' leases expired) or of a
//! crashed earlier run on redb is finished. The claims and leases that make
//! each work item run once live in the controller's store; the poller only
//! looks and starts waves.

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod context;
mod coordinator;
mod poller;
mod runs;
mod supervisor;

pub use context::{BYTES_PER_TOKEN, ContextError, DEFAULT_CONTEXT_BUDGET_TOKENS, estimate_tokens};
pub use coordinator::{
    Coordinator, CoordinatorOptions, DEFAULT_MAX_NEW_ACTIVATIONS, WaveError, WaveReport,
};
pub use poller::WorkPoller;
pub use runs::{SupervisorRun, SupervisorRuns, SupervisorRunsError};
pub use supervisor::{
    Event, Stall, StoreFailure, SuperviseError, SuperviseOutcome, Supervisor, SupervisorOptions,
};
