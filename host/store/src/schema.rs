//! Every table of the database, in one place. Bump [`SCHEMA_VERSION`] and add
//! a step to [`migrate`] when a table's key or value encoding changes.

use redb::{TableDefinition, WriteTransaction};

use crate::StoreError;
use crate::agent_graph::TableDef;

/// The schema this build writes.
pub const SCHEMA_VERSION: u64 = 1;

/// `META["schema_version"]` holds the schema version of the file.
pub(crate) const SCHEMA_VERSION_KEY: &str = "schema_version";
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Durable threads: key thread id, value JSON
/// `{"graph", "head", "created_at_ms", "updated_at_ms"}`; `head` names the
/// thread's newest checkpoint. Written with the thread's first checkpoint.
pub(crate) const THREADS: TableDefinition<&str, &str> = TableDefinition::new("threads");

/// Checkpoints: key `(thread id, checkpoint id)`, checkpoint ids being 16
/// lowercase hex digits that sort chronologically; value the checkpoint as
/// JSON without its id and without channel values: `values` is instead the
/// list `[[channel, blob], ...]`, in the checkpoint's channel order, naming
/// the [`BLOBS`] row of each channel that has a value.
pub(crate) const CHECKPOINTS: TableDefinition<(&str, &str), &str> =
    TableDefinition::new("checkpoints");

/// Channel values: key `(thread id, channel, blob)`, where `blob` is the id
/// (as a number) of the checkpoint that first held this value of the
/// channel; value the channel's value as JSON. A checkpoint whose channel
/// has the same version as in its parent refers to the parent's blob, so a
/// value is stored again only when its channel's version changes.
pub(crate) const BLOBS: TableDefinition<(&str, &str, u64), &str> = TableDefinition::new("blobs");

/// Pending writes: key `(thread id, checkpoint id, task path)`, value the
/// task's `TaskRecord` as JSON: what a task of the superstep after that
/// checkpoint produced (writes or an interrupt).
pub(crate) const WRITES: TableDefinition<(&str, &str, &str), &str> = TableDefinition::new("writes");

// ---------------------------------------------------------------------------
// The agent-graph controller (seed-contracts §2.3), public for its rules in
// `sandgraph-controller` (re-exported by `agent_graph`). Every value is JSON
// text of a row type of the controller's (camelCase), unless said otherwise.
// Per-graph rows are keyed `(graph id, ..)`, so a graph's rows form one key
// range; the index tables enforce the uniqueness rules across the file.

/// Committed schedule updates: key `(graph id, revision)`, revisions 1, 2,
/// 3, ... per graph with no gaps; value the `ScheduleUpdate` (request +
/// `revision` + `committedAt`). The last row of a graph gives its current
/// revision, and whether it is finished (no update follows a finish).
pub const AG_SCHEDULE: TableDef<(&str, u64), &str> = TableDef::new("agent_graph_schedule");

/// Index of update ids, unique across the file: key update id, value
/// `(graph id, revision)` of its [`AG_SCHEDULE`] row.
pub const AG_UPDATE_IDS: TableDef<&str, (&str, u64)> = TableDef::new("agent_graph_update_ids");

/// Index of update sources: key `(graph id, session id, run id, tool call
/// id)` (the turn id is deliberately not part of it), value the update id
/// that source committed. One source commits at most one update.
pub const AG_UPDATE_SOURCES: TableDef<(&str, &str, &str, &str), &str> =
    TableDef::new("agent_graph_update_sources");

/// Index of work ids: key `(graph id, work id)`, value the revision of the
/// update that added the work. A work id is added at most once per graph.
pub const AG_WORK_IDS: TableDef<(&str, &str), u64> = TableDef::new("agent_graph_work_ids");

/// Intent claims: key `(graph id, intent id)`, value the `IntentClaim`
/// (request + `claimedAt` + `admissionStatus` + `cancellationReason?`).
pub const AG_CLAIMS: TableDef<(&str, &str), &str> = TableDef::new("agent_graph_claims");

/// Activation identities held by claims, unique across the file: key
/// `(target session id, target turn id)`, value `(graph id, intent id)` of
/// the claim holding it.
pub const AG_CLAIM_TURNS: TableDef<(&str, &str), (&str, &str)> =
    TableDef::new("agent_graph_claim_turns");

/// Activation identities held by claims, unique across the file: key
/// `(target session id, target run id)`, value `(graph id, intent id)` of
/// the claim holding it.
pub const AG_CLAIM_RUNS: TableDef<(&str, &str), (&str, &str)> =
    TableDef::new("agent_graph_claim_runs");

/// Operators: key `(graph id, provision id)`, value the `Provision` (the
/// request without `expectedScheduleRevision`, + `provisionedAt`).
pub const AG_PROVISIONS: TableDef<(&str, &str), &str> = TableDef::new("agent_graph_provisions");

/// Index: key `(graph id, work id)`, value the provision id that work
/// created. One operator per work item.
pub const AG_PROVISION_WORK: TableDef<(&str, &str), &str> =
    TableDef::new("agent_graph_provision_work");

/// Index: key `(graph id, operator id)`, value its provision id. An operator
/// id names one provision.
pub const AG_PROVISION_OPERATORS: TableDef<(&str, &str), &str> =
    TableDef::new("agent_graph_provision_operators");

/// Graph records (outcomes of work): key `(graph id, record id)`, value the
/// `GraphRecord`. Rows are immutable once written.
pub const AG_RECORDS: TableDef<(&str, &str), &str> = TableDef::new("agent_graph_records");

/// Supervisor wakes: key `(graph id, wake id)`, value the `SupervisorWake`.
pub const AG_WAKES: TableDef<(&str, &str), &str> = TableDef::new("agent_graph_wakes");

/// Delivery attempts of wakes: key `(graph id, wake id, attempt id)`, value
/// the `WakeAttempt`.
pub const AG_WAKE_ATTEMPTS: TableDef<(&str, &str, &str), &str> =
    TableDef::new("agent_graph_wake_attempts");

/// The routing audit journal: key the entry's sequence number (1, 2, ...),
/// value the `JournalEntry` as JSON. Append-only.
pub(crate) const JOURNAL: TableDefinition<u64, &str> = TableDefinition::new("journal");

/// The capability journal: key the call's sequence number (1, 2, ...),
/// value the `CapabilityCall` as JSON. Append-only.
pub(crate) const CAPABILITY_CALLS: TableDefinition<u64, &str> =
    TableDefinition::new("capability_calls");

/// Supervised agent graphs: key graph id, value the `SupervisorRun` as
/// JSON (goal, root session, the supervisor's turn counter). Written when
/// `sandgraph supervise` starts a graph; the turn counter is bumped, durably,
/// before every supervisor turn.
pub(crate) const SUPERVISOR_RUNS: TableDefinition<&str, &str> =
    TableDefinition::new("supervisor_runs");

pub(crate) fn create_tables(tx: &WriteTransaction) -> Result<(), StoreError> {
    tx.open_table(JOURNAL)?;
    tx.open_table(SUPERVISOR_RUNS)?;
    tx.open_table(THREADS)?;
    tx.open_table(CHECKPOINTS)?;
    tx.open_table(BLOBS)?;
    tx.open_table(WRITES)?;
    // Added without a schema bump: new tables are compatible, opening a
    // file written before them creates them empty.
    tx.open_table(AG_SCHEDULE.redb())?;
    tx.open_table(AG_UPDATE_IDS.redb())?;
    tx.open_table(AG_UPDATE_SOURCES.redb())?;
    tx.open_table(AG_WORK_IDS.redb())?;
    tx.open_table(AG_CLAIMS.redb())?;
    tx.open_table(AG_CLAIM_TURNS.redb())?;
    tx.open_table(AG_CLAIM_RUNS.redb())?;
    tx.open_table(AG_PROVISIONS.redb())?;
    tx.open_table(AG_PROVISION_WORK.redb())?;
    tx.open_table(AG_PROVISION_OPERATORS.redb())?;
    tx.open_table(AG_RECORDS.redb())?;
    tx.open_table(AG_WAKES.redb())?;
    tx.open_table(AG_WAKE_ATTEMPTS.redb())?;
    tx.open_table(CAPABILITY_CALLS)?;
    Ok(())
}

/// Upgrades a file written by schema `from` (older than this build).
pub(crate) fn migrate(_tx: &WriteTransaction, from: u64) -> Result<(), StoreError> {
    // Schema 1 is the first; nothing older exists.
    Err(StoreError::Db(format!(
        "no migration from schema {from} to {SCHEMA_VERSION}"
    )))
}
