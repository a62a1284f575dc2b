//! The routing agent (seed: `GraphRoutingAgent`): a model picks one of the
//! graph tools of a [`sandgraph_registry::Registry`], the choice is checked
//! and retried with the reason when it is wrong, and the graph runs between
//! `pre-execute` and `post-execute` hooks. An operator's `[policy]` adds
//! built-in hooks; every attempt can be recorded in the routing journal
//! ([`Journal`], a table of this crate's in the sandgraph database).
//!
//! ```text
//! request ─▶ model ─▶ tool call? ──no──▶ fallback ─▶ outcome {fallback: true}
//!                        │yes
//!                        ▼
//!   candidate? ▶ JSON? ▶ schema? ▶ validate(request)? ▶ pre-execute ▶ run ▶ post-execute
//!        └──────────┴────────┴───────────┴─────────────────┴────────────────┘
//!                 rejection: reason back to the model (at most max_retries times)
//! ```

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod config;
mod hooks;
mod journal;
mod journal_table;
mod policy;
mod router;

pub use config::{AgentConfig, AgentProfile, ConfigError, RoutingConfig};
pub use hooks::{
    Execution, HookError, Hooks, PostDecision, PostNext, PreDecision, PreNext, Settled,
};
pub use journal::{MAX_JOURNAL_OUTCOME_BYTES, MAX_JOURNAL_REASON_BYTES};
pub use journal_table::{Journal, JournalEntry, JournalError};
pub use policy::{ArgLimit, PolicyConfig};
pub use router::{
    DEFAULT_MAX_RETRIES, DEFAULT_SYSTEM_PROMPT, FALLBACK_TOOL, Fallback, FallbackHandler,
    GraphRoutingAgent, RouteError, RouteOptions, RouteOutcome, RouteSource, RouterOptions,
    ToolFilter, feedback,
};
