//! Rows of the agent-graph control tables (seed-contracts §2.3), as JSON in
//! camelCase: the field names are the ones the supervisor model sees in
//! tool results and the ones the fingerprints hash.

use serde::{Deserialize, Serialize};

/// The `schemaVersion` every request and claim carries.
pub const AGENT_GRAPH_SCHEMA_VERSION: u32 = 1;

/// Who committed a schedule update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateSource {
    /// The caller's session (the root session).
    pub session_id: String,
    /// `graph_run_<n>`, or the idempotency key.
    pub run_id: String,
    /// `graph_turn_<n>`, or the idempotency key.
    pub turn_id: String,
    /// The tool call id, or the idempotency key.
    pub tool_call_id: String,
    /// `graph` for updates made through the tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orchestration_mode: Option<String>,
}

/// What kind of worker runs a work item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// `agentId`: a routing-agent profile.
    Agent,
    /// `subagentId`: one named graph, its arguments filled by a model.
    Preset,
    /// `operatorId`: an operator created by earlier work.
    Operator,
}

impl TargetKind {
    /// `agent`, `preset` or `operator`.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::Agent => "agent",
            TargetKind::Preset => "preset",
            TargetKind::Operator => "operator",
        }
    }
}

/// The worker of a work item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkTarget {
    /// The kind of worker.
    pub kind: TargetKind,
    /// The agent profile, graph (preset) or operator id.
    pub id: String,
}

/// A result of another graph handed to a work item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SelectedResultInput {
    /// The graph the result belongs to.
    pub source_graph_id: String,
    /// The record id of the result.
    pub result_id: String,
}

/// One work item of a schedule update, as stored (key order is the seed's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduledWork {
    /// Unique within the graph.
    pub work_id: String,
    /// Who runs it.
    pub target: WorkTarget,
    /// What to do (trimmed, at most 60000 UTF-16 units).
    pub instruction: String,
    /// Record ids whose summaries are handed to the work; sorted, unique.
    pub input_ids: Vec<String>,
    /// Results of other graphs handed to the work.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub selected_result_inputs: Vec<SelectedResultInput>,
    /// The work item this one supersedes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

/// A stop of a work item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkStop {
    /// The work id stopped.
    pub target_id: String,
    /// Why (trimmed, at most 4000 UTF-16 units).
    pub reason: String,
}

/// The end of a graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GraphFinish {
    /// Committed record ids that are the graph's result; sorted, unique, at
    /// least one.
    pub result_ids: Vec<String>,
    /// Why the graph is finished.
    pub reason: String,
}

/// A schedule update as requested (before the store gives it a revision).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleUpdateRequest {
    /// [`AGENT_GRAPH_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `graph_update_<sha256>` of the graph and source.
    pub update_id: String,
    /// `sha256:<hex>` of the canonical request content.
    pub update_fingerprint: String,
    /// The graph updated.
    pub graph_id: String,
    /// Who committed it.
    pub source: UpdateSource,
    /// Work added.
    pub add_work: Vec<ScheduledWork>,
    /// Work stopped, sorted by target id.
    pub stop: Vec<WorkStop>,
    /// The finish, if this update ends the graph.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish: Option<GraphFinish>,
}

/// A committed schedule update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleUpdate {
    /// The request as committed.
    #[serde(flatten)]
    pub request: ScheduleUpdateRequest,
    /// 1, 2, 3, ... per graph, with no gaps.
    pub revision: u64,
    /// Unix milliseconds of the commit.
    pub committed_at: u64,
}

/// What committing an update did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOutcome {
    /// The stored row (the existing one for a replay).
    pub update: ScheduleUpdate,
    /// `false` when the same update was already committed.
    pub created: bool,
}

/// A claim of one intent (the execution of one work item), exactly once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IntentClaimRequest {
    /// [`AGENT_GRAPH_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `graph_claim_<sha256>`.
    pub claim_id: String,
    /// The graph.
    pub graph_id: String,
    /// `graph_intent_<stableHash32>` of the work.
    pub intent_id: String,
    /// Fingerprint of the intent's content.
    pub intent_fingerprint: String,
    /// Fingerprint of the inputs the intent was ready with.
    pub readiness_context_fingerprint: String,
    /// The operator that runs it.
    pub target_operator_id: String,
    /// The operator's session.
    pub target_session_id: String,
    /// The turn of the operator session that runs it.
    pub target_turn_id: String,
    /// The run of the operator session that runs it.
    pub target_run_id: String,
}

/// Where a claimed intent is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdmissionStatus {
    /// Claimed, not yet started.
    Claimed,
    /// Started.
    Executing,
    /// Cancelled by a stop or a replacement of its work (in the commit of
    /// that update, or by the wave that claimed the work just after it);
    /// final. A run under way stops.
    Cancelled,
}

/// A stored claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IntentClaim {
    /// The claim as requested.
    #[serde(flatten)]
    pub request: IntentClaimRequest,
    /// Unix milliseconds of the claim.
    pub claimed_at: u64,
    /// Where the claim is.
    pub admission_status: AdmissionStatus,
    /// Why it was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancellation_reason: Option<String>,
    /// Who runs the work now, until when: set by
    /// [`AgentGraphStore::lease_intent`](super::AgentGraphStore::lease_intent).
    /// `None` on claims no host has leased (and on claims stored before
    /// leases existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<ClaimLease>,
}

/// The lease of a claim: the one host that may run its work and record its
/// outcome, until `expiresAt` unless it renews.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimLease {
    /// `hostname/pid/random` of the holder's store.
    pub holder: String,
    /// The fencing token: 1 for the first lease, one more at each take-over.
    pub token: u64,
    /// Unix milliseconds after which another holder may take it over.
    pub expires_at: u64,
}

/// What [`AgentGraphStore::lease_intent`](super::AgentGraphStore::lease_intent) found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseOutcome {
    /// The caller holds the lease now: run the work, renew the lease, and
    /// record the outcome with its token.
    Acquired(ClaimLease),
    /// Another holder's lease is live: leave the work to it.
    Held(ClaimLease),
    /// The work's record is written: nothing to run.
    Recorded,
    /// The claim is cancelled: nothing to run.
    Cancelled,
}

/// What claiming did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimOutcome {
    /// The stored claim.
    pub claim: IntentClaim,
    /// `false` when the same claim already existed.
    pub created: bool,
}

/// What an admission transition did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionChange {
    /// The status now.
    pub state: AdmissionStatus,
    /// The status before.
    pub previous_state: AdmissionStatus,
    /// Whether anything changed.
    pub changed: bool,
}

/// An edge of the operators' topology: the records of `fromOperatorId`
/// feed the work of `toOperatorId`. Each record of the `from` operator is
/// one route along the edge (the view's `readiness.routesCount`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorEdge {
    /// `graph_edge_<sha256>` of the graph and both operators
    /// ([`graph_edge_id`](crate::ids::graph_edge_id)).
    pub edge_id: String,
    /// The operator whose records flow along the edge.
    pub from_operator_id: String,
    /// The operator they flow to.
    pub to_operator_id: String,
}

/// An operator: the worker created for a work item, reusable by later work
/// (`operatorId` targets) on the same durable thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionRequest {
    /// `graph_provision_<sha256>`.
    pub provision_id: String,
    /// The graph.
    pub graph_id: String,
    /// The work item that created the operator.
    pub work_id: String,
    /// `graph_operator_<sha256>`.
    pub operator_id: String,
    /// What the operator runs: an agent profile or a preset graph.
    pub target: WorkTarget,
    /// The operator's session; also the durable thread its graphs run on.
    pub target_session_id: String,
    /// The operator's first turn.
    pub initial_turn_id: String,
    /// The operator's first run.
    pub initial_run_id: String,
    /// Fingerprint of the provision's content.
    pub provision_fingerprint: String,
    /// The operator's edges: the coordinator gives each operator one edge
    /// from the operator of every input record of the work that created it.
    /// Not part of the fingerprint: a retry adopts the stored edges.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edges: Vec<OperatorEdge>,
    /// The schedule revision this was decided at (compare-and-set).
    pub expected_schedule_revision: u64,
}

/// A stored operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Provision {
    /// The request, without `expectedScheduleRevision`.
    pub provision_id: String,
    /// The graph.
    pub graph_id: String,
    /// The work item that created the operator.
    pub work_id: String,
    /// The operator.
    pub operator_id: String,
    /// What the operator runs.
    pub target: WorkTarget,
    /// The operator's session and thread.
    pub target_session_id: String,
    /// The operator's first turn.
    pub initial_turn_id: String,
    /// The operator's first run.
    pub initial_run_id: String,
    /// Fingerprint of the provision's content.
    pub provision_fingerprint: String,
    /// The operator's edges, as first provisioned (rows stored before edges
    /// existed have none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edges: Vec<OperatorEdge>,
    /// Unix milliseconds.
    pub provisioned_at: u64,
}

/// What provisioning did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvisionOutcome {
    /// The stored operator.
    pub provision: Provision,
    /// `false` when it already existed (a retry adopted it).
    pub created: bool,
}

/// A record facet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordFacet {
    /// A message of the operator.
    Message,
    /// The last record of a run.
    Terminal,
    /// A fact of the runtime.
    RuntimeFact,
}

/// How the work behind a terminal record ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordOutcome {
    /// The work produced a result.
    Completed,
    /// The work failed; the summary says why.
    Failed,
    /// The run was cut: a stop or a replacement cancelled its claim while
    /// it ran; the summary says why.
    Cancelled,
}

impl RecordOutcome {
    /// `completed`, `failed` or `cancelled`, as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordOutcome::Completed => "completed",
            RecordOutcome::Failed => "failed",
            RecordOutcome::Cancelled => "cancelled",
        }
    }
}

/// Where a record came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordSource {
    /// The operator's session.
    pub session_id: String,
    /// The operator's run.
    pub run_id: String,
    /// The operator's turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// The runtime event the record stands for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_event_id: Option<String>,
    /// Order within the run.
    pub seq: u64,
}

/// An outcome of work, persisted (the originals kept records in memory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GraphRecord {
    /// `graph_record_<stableHash32>`.
    pub record_id: String,
    /// The graph.
    pub graph_id: String,
    /// The operator that produced it.
    pub operator_id: String,
    /// The work item it is the outcome of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_id: Option<String>,
    /// Where it came from.
    pub source: RecordSource,
    /// The rendered outcome.
    pub summary: String,
    /// What kind of record this is.
    pub facets: Vec<RecordFacet>,
    /// For terminal records: how the work ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<RecordOutcome>,
    /// References to evidence (tool names, thread ids).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence_refs: Vec<String>,
    /// Unix milliseconds.
    pub emitted_at: u64,
}

/// Where a supervisor wake is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WakeStatus {
    /// Claimed, not yet delivered.
    Pending,
    /// A delivery attempt is under way.
    Running,
    /// Waiting for a permission.
    WaitingPermission,
    /// Delivered: the supervisor had its turn. Terminal.
    Delivered,
    /// Made moot by a finish or a stop. Terminal.
    Superseded,
    /// The last attempt failed; another may follow.
    RetryableFailed,
    /// Every attempt failed. Terminal.
    Exhausted,
}

impl WakeStatus {
    /// `delivered`, `superseded` and `exhausted` refuse new attempts.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            WakeStatus::Delivered | WakeStatus::Superseded | WakeStatus::Exhausted
        )
    }
}

/// A supervisor wake: one per graph state the supervisor yielded on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupervisorWake {
    /// `graph_wake_<sha256>` of the graph and snapshot version.
    pub wake_id: String,
    /// The graph.
    pub graph_id: String,
    /// The state hash the supervisor yielded on.
    pub snapshot_version: String,
    /// The supervisor's session.
    pub root_session_id: String,
    /// Where the wake is.
    pub status: WakeStatus,
    /// Attempts begun.
    pub attempt_count: u32,
    /// The attempt under way or last made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_attempt_id: Option<String>,
    /// The supervisor turn of that attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_turn_id: Option<String>,
    /// Unix milliseconds.
    pub created_at: u64,
    /// Unix milliseconds.
    pub updated_at: u64,
    /// Why it was superseded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_reason: Option<String>,
    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
}

/// What claiming a wake did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeClaimOutcome {
    /// The stored wake (unchanged when it existed).
    pub wake: SupervisorWake,
    /// `false` when the wake already existed.
    pub created: bool,
}

/// Where one delivery attempt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptStatus {
    /// Under way.
    Running,
    /// Waiting for a permission.
    WaitingPermission,
    /// The supervisor had its turn.
    Delivered,
    /// Made moot.
    Superseded,
    /// Failed; the wake may be retried.
    RetryableFailed,
}

/// One delivery attempt of a wake.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WakeAttempt {
    /// `graph_wake_attempt_<sha256>` of the wake and the attempt index.
    pub attempt_id: String,
    /// The wake.
    pub wake_id: String,
    /// The graph.
    pub graph_id: String,
    /// The supervisor turn of the attempt.
    pub turn_id: String,
    /// Where the attempt is.
    pub status: AttemptStatus,
    /// Unix milliseconds.
    pub started_at: u64,
    /// Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<u64>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
}

/// What beginning an attempt did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptOutcome {
    /// The attempt (the existing one when not acquired and it exists).
    pub attempt: Option<WakeAttempt>,
    /// The wake after the call.
    pub wake: SupervisorWake,
    /// Whether this call began the attempt.
    pub acquired: bool,
}
