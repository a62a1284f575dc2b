//! The controller's tables in the sandgraph database, declared on the
//! store's table API (`sandgraph_store::tables`): their names and key and
//! value types are the on-disk format (redb tables of these names, or rows
//! of `sg_agent_graph_rows` with these names in `tbl` on PostgreSQL), so
//! none may change without a migration.
//!
//! Every value is JSON text of a row type of `types.rs` (camelCase),
//! unless said otherwise. Per-graph rows are keyed `(graph id, ..)`, so a
//! graph's rows form one key range; the index tables enforce the
//! uniqueness rules across the database. See `DESIGN.md` at the crate
//! root.

use sandgraph_store::tables::{TableDef, TableSet};

/// Every table of the controller: the store makes them all in a redb file
/// with the first write of an [`AgentGraphStore`](super::AgentGraphStore).
pub(crate) static AGENT_GRAPH_TABLES: TableSet = TableSet {
    what: "the agent graphs",
    tables: &[
        &AG_SCHEDULE,
        &AG_UPDATE_IDS,
        &AG_UPDATE_SOURCES,
        &AG_WORK_IDS,
        &AG_CLAIMS,
        &AG_CLAIM_TURNS,
        &AG_CLAIM_RUNS,
        &AG_PROVISIONS,
        &AG_PROVISION_WORK,
        &AG_PROVISION_OPERATORS,
        &AG_RECORDS,
        &AG_WAKES,
        &AG_WAKE_ATTEMPTS,
    ],
};

/// Committed schedule updates: key `(graph id, revision)`, revisions 1, 2,
/// 3, ... per graph with no gaps; value the `ScheduleUpdate` (request +
/// `revision` + `committedAt`). The last row of a graph gives its current
/// revision, and whether it is finished (no update follows a finish).
pub(crate) const AG_SCHEDULE: TableDef<(&str, u64), &str> = TableDef::new("agent_graph_schedule");

/// Index of update ids, unique across the file: key update id, value
/// `(graph id, revision)` of its [`AG_SCHEDULE`] row.
pub(crate) const AG_UPDATE_IDS: TableDef<&str, (&str, u64)> =
    TableDef::new("agent_graph_update_ids");

/// Index of update sources: key `(graph id, session id, run id, tool call
/// id)` (the turn id is deliberately not part of it), value the update id
/// that source committed. One source commits at most one update.
pub(crate) const AG_UPDATE_SOURCES: TableDef<(&str, &str, &str, &str), &str> =
    TableDef::new("agent_graph_update_sources");

/// Index of work ids: key `(graph id, work id)`, value the revision of the
/// update that added the work. A work id is added at most once per graph.
pub(crate) const AG_WORK_IDS: TableDef<(&str, &str), u64> = TableDef::new("agent_graph_work_ids");

/// Intent claims: key `(graph id, intent id)`, value the `IntentClaim`
/// (request + `claimedAt` + `admissionStatus` + `cancellationReason?`).
pub(crate) const AG_CLAIMS: TableDef<(&str, &str), &str> = TableDef::new("agent_graph_claims");

/// Activation identities held by claims, unique across the file: key
/// `(target session id, target turn id)`, value `(graph id, intent id)` of
/// the claim holding it.
pub(crate) const AG_CLAIM_TURNS: TableDef<(&str, &str), (&str, &str)> =
    TableDef::new("agent_graph_claim_turns");

/// Activation identities held by claims, unique across the file: key
/// `(target session id, target run id)`, value `(graph id, intent id)` of
/// the claim holding it.
pub(crate) const AG_CLAIM_RUNS: TableDef<(&str, &str), (&str, &str)> =
    TableDef::new("agent_graph_claim_runs");

/// Operators: key `(graph id, provision id)`, value the `Provision` (the
/// request without `expectedScheduleRevision`, + `provisionedAt`).
pub(crate) const AG_PROVISIONS: TableDef<(&str, &str), &str> =
    TableDef::new("agent_graph_provisions");

/// Index: key `(graph id, work id)`, value the provision id that work
/// created. One operator per work item.
pub(crate) const AG_PROVISION_WORK: TableDef<(&str, &str), &str> =
    TableDef::new("agent_graph_provision_work");

/// Index: key `(graph id, operator id)`, value its provision id. An operator
/// id names one provision.
pub(crate) const AG_PROVISION_OPERATORS: TableDef<(&str, &str), &str> =
    TableDef::new("agent_graph_provision_operators");

/// Graph records (outcomes of work): key `(graph id, record id)`, value the
/// `GraphRecord`. Rows are immutable once written.
pub(crate) const AG_RECORDS: TableDef<(&str, &str), &str> = TableDef::new("agent_graph_records");

/// Supervisor wakes: key `(graph id, wake id)`, value the `SupervisorWake`.
pub(crate) const AG_WAKES: TableDef<(&str, &str), &str> = TableDef::new("agent_graph_wakes");

/// Delivery attempts of wakes: key `(graph id, wake id, attempt id)`, value
/// the `WakeAttempt`.
pub(crate) const AG_WAKE_ATTEMPTS: TableDef<(&str, &str, &str), &str> =
    TableDef::new("agent_graph_wake_attempts");
