//! The durable state of the agent-graph controller (seed-contracts
//! §2.3–2.4) and its rules: the schedule log and its revision
//! compare-and-set, intent claims and their leases, operator provisions,
//! graph records and supervisor wakes, kept in the tables `agent_graph_*`
//! that `tables.rs` declares in the sandgraph database
//! (`sandgraph_store::tables`): a redb file, or PostgreSQL shared by
//! several hosts.
//!
//! Every mutation is one durable write transaction: when a call returns
//! `Ok`, its effect is on disk. On redb, write transactions run one at a
//! time, which is the store's lock; on PostgreSQL they are `SERIALIZABLE`
//! (one that lost a conflict runs again), which gives the same outcomes
//! across hosts. The rules are written once over the store's [`Tx`] and
//! tables. Reads see one consistent snapshot. A refused call writes
//! nothing. Calls block (an fsync, or round trips to the server, per
//! mutation): async callers should use `spawn_blocking`.
//!
//! See the controller's `DESIGN.md` for keys, rules, leases and where this
//! store deliberately differs from the original.

mod claims;
mod error;
mod leases;
mod provisions;
mod records;
mod schedule;
mod tables;
mod types;
mod wakes;

pub use error::{ControlError, ControlErrorCode};
pub use types::{
    AGENT_GRAPH_SCHEMA_VERSION, AdmissionChange, AdmissionStatus, AttemptOutcome, AttemptStatus,
    ClaimLease, ClaimOutcome, CommitOutcome, GraphFinish, GraphRecord, IntentClaim,
    IntentClaimRequest, LeaseOutcome, OperatorEdge, Provision, ProvisionOutcome, ProvisionRequest,
    RecordFacet, RecordOutcome, RecordSource, ScheduleUpdate, ScheduleUpdateRequest, ScheduledWork,
    SelectedResultInput, SupervisorWake, TargetKind, UpdateSource, WakeAttempt, WakeClaimOutcome,
    WakeStatus, WorkStop, WorkTarget,
};

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sandgraph_store::Store;
use sandgraph_store::tables::{TableDef, Tables, Tx};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A source of Unix milliseconds.
type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The agent-graph control store: the controller's rules over a store's
/// agent-graph tables. Cheap to clone; clones share the database. Made by
/// [`AgentGraphStore::open`] (or [`OpenAgentGraphs::agent_graphs`]).
#[derive(Clone)]
pub struct AgentGraphStore {
    tables: Tables,
    clock: Clock,
    /// Who this store is in claim leases: `host/pid/random`.
    holder: Arc<str>,
    /// How long a claim lease lasts unless renewed.
    lease_ttl: Duration,
}

impl fmt::Debug for AgentGraphStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentGraphStore")
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

/// `store.agent_graphs()`: [`AgentGraphStore::open`] as a method of
/// [`Store`].
pub trait OpenAgentGraphs {
    /// The agent-graph controller's durable state (schedule log, intent
    /// claims and their leases, operators, records, supervisor wakes), in
    /// this store's database: a redb file, or PostgreSQL shared with the
    /// other hosts. Every mutation is one durable transaction. Claim leases
    /// last as long as [thread leases](Store::with_thread_lease).
    fn agent_graphs(&self) -> AgentGraphStore;
}

impl OpenAgentGraphs for Store {
    fn agent_graphs(&self) -> AgentGraphStore {
        AgentGraphStore::open(self)
    }
}

impl AgentGraphStore {
    /// The agent-graph state in `store`'s database: a redb file, or
    /// PostgreSQL shared with the other hosts. Claim leases last as long as
    /// the store's [thread leases](Store::with_thread_lease); the holder is
    /// the store's.
    pub fn open(store: &Store) -> Self {
        let tables = store.tables(&tables::AGENT_GRAPH_TABLES);
        AgentGraphStore {
            clock: Arc::new(now_ms),
            holder: tables.holder().clone(),
            lease_ttl: tables.lease_ttl(),
            tables,
        }
    }

    /// This store with another clock (Unix milliseconds) for the times it
    /// stamps (`committedAt`, `claimedAt`, `provisionedAt`, wake and attempt
    /// times, lease expiry). For tests; the default is the system clock.
    pub fn with_clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// This store as another holder of claim leases (see
    /// [`Self::lease_intent`]), e.g. to play a second host in a test.
    pub fn with_holder(mut self, holder: &str) -> Self {
        self.holder = holder.into();
        self
    }

    /// Who this store is in claim leases: `hostname/pid/random`, one per
    /// [`Store`].
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// How long a claim lease lasts unless renewed.
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    fn now(&self) -> u64 {
        (self.clock)()
    }

    /// Runs `f` in one durable write transaction
    /// ([`Tables::write`]).
    fn write<T>(
        &self,
        f: impl FnMut(&Tx<'_>) -> Result<(T, bool), ControlError>,
    ) -> Result<T, ControlError> {
        self.tables.write(f)
    }

    /// Runs `f` on one consistent snapshot.
    fn read<T>(
        &self,
        f: impl FnOnce(&Tx<'_>) -> Result<T, ControlError>,
    ) -> Result<T, ControlError> {
        self.tables.read(f)
    }

    /// Every row of `table` whose key starts with `graph_id`, decoded and
    /// checked against its key by `check`, in key order.
    fn graph_rows<T: DeserializeOwned>(
        &self,
        table: TableDef<(&'static str, &'static str), &'static str>,
        graph_id: &str,
        check: fn(&(&str, &str), &T) -> Result<(), ControlError>,
    ) -> Result<Vec<T>, ControlError> {
        let name = table.name();
        self.read(|tx| {
            let end = successor(graph_id);
            let rows = tx
                .open_table(table)?
                .between((graph_id, ""), (end.as_str(), ""))?;
            let mut out = Vec::with_capacity(rows.len());
            for ((g, id), value) in rows {
                let key = (g.as_str(), id.as_str());
                let row: T = decode(name, &key, &value)?;
                check(&key, &row)?;
                out.push(row);
            }
            Ok(out)
        })
    }

    /// Whether a lease held by another holder may be taken over before it
    /// expires: on redb, whose file only one process can open, any other
    /// holder is a process that is gone.
    fn holders_are_exclusive(&self) -> bool {
        self.tables.single_process()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The string right after `s` in byte order: `s + "\0"`. The tuple range
/// `(s, ..)..(successor(s), ..)` holds exactly the keys whose first element
/// is `s`.
fn successor(s: &str) -> String {
    format!("{s}\0")
}

fn encode<T: Serialize>(table: &str, value: &T) -> Result<String, ControlError> {
    serde_json::to_string(value).map_err(|e| {
        ControlError::new(
            ControlErrorCode::Storage,
            format!("cannot encode a row of {table}: {e}"),
        )
    })
}

fn decode<T: DeserializeOwned>(
    table: &str,
    key: &impl fmt::Debug,
    text: &str,
) -> Result<T, ControlError> {
    serde_json::from_str(text).map_err(|e| malformed(table, key, e))
}

/// A stored row that breaks the store's rules or does not decode.
fn malformed(table: &str, key: &impl fmt::Debug, what: impl fmt::Display) -> ControlError {
    ControlError::new(
        ControlErrorCode::MalformedState,
        format!("malformed row {key:?} in table {table}: {what}"),
    )
}
