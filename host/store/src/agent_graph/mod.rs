//! The durable store of the agent-graph controller (seed-contracts §2.3–2.4):
//! the schedule log, intent claims, operator provisions, graph records and
//! supervisor wakes, in the tables `agent_graph_*` of the sandgraph database.
//!
//! Every mutation is one redb write transaction committed with immediate
//! durability: when a call returns `Ok`, its effect is on disk. redb
//! serializes write transactions, which is the store's lock; reads use read
//! transactions and see a consistent snapshot. A refused call writes
//! nothing. Calls block (an fsync per mutation): async callers should use
//! `spawn_blocking`.
//!
//! See `DESIGN.md` (section "Agent-graph control") for keys, rules and where
//! this store deliberately differs from the original.

mod claims;
mod error;
mod provisions;
mod records;
mod schedule;
mod types;
mod wakes;

pub use error::{ControlError, ControlErrorCode};
pub use types::{
    AGENT_GRAPH_SCHEMA_VERSION, AdmissionChange, AdmissionStatus, AttemptOutcome, AttemptStatus,
    ClaimOutcome, CommitOutcome, GraphFinish, GraphRecord, IntentClaim, IntentClaimRequest,
    Provision, ProvisionOutcome, ProvisionRequest, RecordFacet, RecordOutcome, RecordSource,
    ScheduleUpdate, ScheduleUpdateRequest, ScheduledWork, SelectedResultInput, SupervisorWake,
    TargetKind, UpdateSource, WakeAttempt, WakeClaimOutcome, WakeStatus, WorkStop, WorkTarget,
};

use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use redb::{Database, ReadTransaction, ReadableDatabase, WriteTransaction};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A source of Unix milliseconds.
type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The agent-graph control store. Cheap to clone; clones share the
/// database. Made by [`crate::Store::agent_graphs`].
#[derive(Clone)]
pub struct AgentGraphStore {
    db: Arc<Database>,
    clock: Clock,
}

impl fmt::Debug for AgentGraphStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentGraphStore").finish_non_exhaustive()
    }
}

impl AgentGraphStore {
    pub(crate) fn new(db: Arc<Database>) -> Self {
        AgentGraphStore {
            db,
            clock: Arc::new(now_ms),
        }
    }

    /// This store with another clock (Unix milliseconds) for the times it
    /// stamps (`committedAt`, `claimedAt`, `provisionedAt`, wake and attempt
    /// times). For tests; the default is the system clock.
    pub fn with_clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    fn now(&self) -> u64 {
        (self.clock)()
    }

    /// Runs `f` in one durable write transaction. `f` returns its result and
    /// whether it wrote anything: the transaction is committed (fsynced)
    /// only then, and aborted on an error or when nothing changed.
    fn write<T>(
        &self,
        f: impl FnOnce(&WriteTransaction) -> Result<(T, bool), ControlError>,
    ) -> Result<T, ControlError> {
        let mut tx = self.db.begin_write()?;
        tx.set_durability(redb::Durability::Immediate)?;
        match f(&tx) {
            Ok((value, true)) => {
                tx.commit()?;
                Ok(value)
            }
            Ok((value, false)) => {
                tx.abort()?;
                Ok(value)
            }
            Err(e) => {
                // Dropping aborts too; an abort failure must not hide `e`.
                let _ = tx.abort();
                Err(e)
            }
        }
    }

    fn read(&self) -> Result<ReadTransaction, ControlError> {
        Ok(self.db.begin_read()?)
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
