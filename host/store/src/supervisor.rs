//! Supervised agent graphs: what `sandgraph supervise` needs to resume a
//! graph after a crash. The graph's schedule, claims, records and wakes
//! live in the agent-graph tables; this row holds the goal, the root
//! session and the supervisor's turn counter.

use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable};
use serde::{Deserialize, Serialize};

use crate::StoreError;
use crate::schema::SUPERVISOR_RUNS;

/// One supervised agent graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorRun {
    /// The agent graph.
    pub graph_id: String,
    /// The goal the supervisor was given.
    pub goal: String,
    /// The supervisor's session: the only one allowed to call the tools.
    pub root_session_id: String,
    /// Supervisor turns begun so far (the last turn's number).
    pub turns: u64,
    /// The model of the supervisor.
    pub model: String,
    /// Unix milliseconds.
    pub created_at: u64,
    /// Unix milliseconds.
    pub updated_at: u64,
}

/// Where supervised runs are kept: redb ([`RedbSupervisorRuns`]) or
/// PostgreSQL (`postgres::supervisor`), with the semantics documented on
/// [`SupervisorRuns`].
pub(crate) trait SupervisorRunsBackend: Send + Sync {
    fn create(&self, run: &SupervisorRun) -> Result<(SupervisorRun, bool), StoreError>;
    fn get(&self, graph_id: &str) -> Result<Option<SupervisorRun>, StoreError>;
    fn list(&self) -> Result<Vec<SupervisorRun>, StoreError>;
    fn next_turn(&self, graph_id: &str, now_ms: u64) -> Result<u64, StoreError>;
}

/// The supervised graphs of a [`crate::Store`]. Cheap to clone.
#[derive(Clone)]
pub struct SupervisorRuns {
    backend: Arc<dyn SupervisorRunsBackend>,
}

/// Supervised runs in the redb file.
struct RedbSupervisorRuns {
    db: Arc<Database>,
}

impl std::fmt::Debug for SupervisorRuns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SupervisorRuns").finish_non_exhaustive()
    }
}

pub(crate) fn decode(graph: &str, text: &str) -> Result<SupervisorRun, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        table: "supervisor_runs",
        message: format!("row {graph:?}: {e}"),
    })
}

pub(crate) fn encode(run: &SupervisorRun) -> Result<String, StoreError> {
    serde_json::to_string(run).map_err(|e| StoreError::Corrupt {
        table: "supervisor_runs",
        message: format!("cannot encode row {:?}: {e}", run.graph_id),
    })
}

impl SupervisorRuns {
    pub(crate) fn new(db: Arc<Database>) -> Self {
        SupervisorRuns::with_backend(Arc::new(RedbSupervisorRuns { db }))
    }

    pub(crate) fn with_backend(backend: Arc<dyn SupervisorRunsBackend>) -> Self {
        SupervisorRuns { backend }
    }

    /// Stores `run` unless a run of its graph exists; returns the stored
    /// row and whether it was created. Atomic: of hosts creating one graph
    /// at once, one creates it and the others get its row.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn create(&self, run: &SupervisorRun) -> Result<(SupervisorRun, bool), StoreError> {
        self.backend.create(run)
    }

    /// The run of `graph_id`.
    ///
    /// # Errors
    ///
    /// Database errors and undecodable rows.
    pub fn get(&self, graph_id: &str) -> Result<Option<SupervisorRun>, StoreError> {
        self.backend.get(graph_id)
    }

    /// Every run, by graph id.
    ///
    /// # Errors
    ///
    /// Database errors and undecodable rows.
    pub fn list(&self) -> Result<Vec<SupervisorRun>, StoreError> {
        self.backend.list()
    }

    /// Begins the next supervisor turn of `graph_id`, durably, and returns
    /// its number (1 for the first). Atomic across hosts: two calls never
    /// return the same number.
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidArgument`] for an unknown graph; database errors.
    pub fn next_turn(&self, graph_id: &str, now_ms: u64) -> Result<u64, StoreError> {
        self.backend.next_turn(graph_id, now_ms)
    }
}

impl SupervisorRunsBackend for RedbSupervisorRuns {
    fn create(&self, run: &SupervisorRun) -> Result<(SupervisorRun, bool), StoreError> {
        let tx = self.db.begin_write()?;
        let out = {
            let mut table = tx.open_table(SUPERVISOR_RUNS)?;
            let existing = table
                .get(run.graph_id.as_str())?
                .map(|v| decode(&run.graph_id, v.value()))
                .transpose()?;
            match existing {
                Some(row) => (row, false),
                None => {
                    table.insert(run.graph_id.as_str(), encode(run)?.as_str())?;
                    (run.clone(), true)
                }
            }
        };
        tx.commit()?;
        Ok(out)
    }

    fn get(&self, graph_id: &str) -> Result<Option<SupervisorRun>, StoreError> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(SUPERVISOR_RUNS)?;
        table
            .get(graph_id)?
            .map(|v| decode(graph_id, v.value()))
            .transpose()
    }

    fn list(&self) -> Result<Vec<SupervisorRun>, StoreError> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(SUPERVISOR_RUNS)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            let (k, v) = row?;
            out.push(decode(k.value(), v.value())?);
        }
        Ok(out)
    }

    fn next_turn(&self, graph_id: &str, now_ms: u64) -> Result<u64, StoreError> {
        let tx = self.db.begin_write()?;
        let turn = {
            let mut table = tx.open_table(SUPERVISOR_RUNS)?;
            let mut row = match table.get(graph_id)? {
                Some(v) => decode(graph_id, v.value())?,
                None => {
                    return Err(StoreError::InvalidArgument(format!(
                        "no supervised agent graph {graph_id:?}"
                    )));
                }
            };
            row.turns += 1;
            row.updated_at = now_ms;
            table.insert(graph_id, encode(&row)?.as_str())?;
            row.turns
        };
        tx.commit()?;
        Ok(turn)
    }
}
