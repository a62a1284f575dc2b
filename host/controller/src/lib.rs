//! The agent-graph supervisor tools: `view_agent_graph`,
//! `update_agent_graph` and `yield_agent_graph`, and the
//! `orchestration:graph` prompt section (seed-contracts §2).
//!
//! The tools are root-only and direct: only the graph's root session may
//! call them, and they address graphs by id. Every model-visible list is
//! bounded with explicit `omitted` counts; every update is cleaned by the
//! discriminator-tolerant preprocessors, checked against every bound and
//! against the live projection, and committed to the durable state
//! ([`AgentGraphStore`]) once: a replayed call, or a retry with the same
//! `idempotencyKey` in a later turn, returns the stored row.
//!
//! The durable state and its rules are here too ([`AgentGraphStore`]:
//! schedule revisions, claims and their leases, provisions, records,
//! supervisor wakes), written once over the tables of `sandgraph-store`
//! (redb or PostgreSQL); the store knows rows, not rules.
//!
//! Entry points: [`AgentGraphTools`] (one per graph root session),
//! [`tool_defs`] and [`prompt_section`]. [`AgentGraphTools::snapshot`] gives
//! the [`Projection`] the coordinator drives from.
//!
//! Where this differs from the original, on purpose:
//!
//! * an update on a finished graph fails with `graph_closed` before it is
//!   committed (the original committed it, and every later view failed);
//! * a work id that exists in the graph, or repeats within the update, is
//!   refused with `invalid_input`;
//! * `finish` needs `resultIds`, and `replacementMode: "replace"` needs
//!   `replaces`;
//! * work ends: a terminal record for a work item (in the store) makes it
//!   `completed`, `failed` or `cancelled` (a stop or a replacement cancels
//!   the claim of its target, and a run under way stops), and the claim of work with a terminal record
//!   no longer counts as live for `yield` (the claim stays `executing`);
//! * `omitted.partialRecords` is always 0: records are written only for
//!   settled outcomes, never folded from a stream with partial events;
//! * the text rule refuses every control character but tab, LF and CR (the
//!   original's pattern let U+0001..U+0007 through);
//! * `not_root_session` does not name the root session (`only its root
//!   session may call this tool`): the original handed the root's session
//!   id to any caller, which let it send requests as the root.

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod error;
pub mod ids;
mod projection;
mod prompt;
pub mod rules;
mod state;
mod tools;
mod update;
mod view;

pub use error::{ToolCode, ToolFailure};
pub use projection::{FinishEntry, Projection, StoppedTarget, WorkEntry, WorkStatus};
pub use prompt::{
    GRAPH_MODE_PROMPT, PROMPT_SECTION_NAME, PROMPT_SECTION_ORDER, PromptSection, prompt_section,
};
pub use state::{
    AGENT_GRAPH_SCHEMA_VERSION, AdmissionChange, AdmissionStatus, AgentGraphStore, AttemptOutcome,
    AttemptStatus, ClaimLease, ClaimOutcome, CommitOutcome, ControlError, ControlErrorCode,
    GraphFinish, GraphRecord, IntentClaim, IntentClaimRequest, LeaseOutcome, OpenAgentGraphs,
    OperatorEdge, Provision, ProvisionOutcome, ProvisionRequest, RecordFacet, RecordOutcome,
    RecordSource, ScheduleUpdate, ScheduleUpdateRequest, ScheduledWork, SelectedResultInput,
    SupervisorWake, TargetKind, UpdateSource, WakeAttempt, WakeClaimOutcome, WakeStatus, WorkStop,
    WorkTarget,
};
pub use tools::{
    AgentGraphTools, CallIdentity, ToolDef, ToolResult, UPDATE_TOOL, VIEW_TOOL, YIELD_TOOL,
    tool_defs,
};
