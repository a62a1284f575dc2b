//! Supervised agent graphs: what `sandgraph supervise` needs to resume a
//! graph after a crash. The graph's schedule, claims, records and wakes
//! live in the agent-graph tables; this row holds the goal, the root
//! session and the supervisor's turn counter. A table of this crate's in
//! the sandgraph database, declared on the store's table API
//! (`sandgraph_store::tables`).
//!
//! The format: table `supervisor_runs`, key the graph id (`&str`), value
//! the [`SupervisorRun`] as JSON text (`&str`): the redb table that files
//! have always held, or on PostgreSQL the rows of `sg_agent_graph_rows`
//! named `supervisor_runs`.

use sandgraph_store::Store;
use sandgraph_store::tables::{TableDef, TableError, TableSet, Tables};
use serde::{Deserialize, Serialize};

/// Supervised agent graphs: key graph id, value the [`SupervisorRun`] as
/// JSON (goal, root session, the supervisor's turn counter). Written when
/// `sandgraph supervise` starts a graph; the turn counter is bumped,
/// durably, before every supervisor turn.
const SUPERVISOR_RUNS: TableDef<&str, &str> = TableDef::new("supervisor_runs");

/// The supervised runs' one table.
static RUN_TABLES: TableSet = TableSet {
    what: "the supervised runs",
    tables: &[&SUPERVISOR_RUNS],
};

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

/// A failure of the supervised runs.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorRunsError {
    /// The database failed.
    #[error(transparent)]
    Table(#[from] TableError),
    /// No supervised run of this graph.
    #[error("no supervised agent graph {0:?}")]
    UnknownGraph(String),
    /// A stored row that is not a [`SupervisorRun`], or a run that cannot
    /// be encoded.
    #[error("corrupt supervised run {graph:?}: {message}")]
    Corrupt {
        /// The row's graph id.
        graph: String,
        /// What is wrong with it.
        message: String,
    },
}

fn decode(graph: &str, text: &str) -> Result<SupervisorRun, SupervisorRunsError> {
    serde_json::from_str(text).map_err(|e| SupervisorRunsError::Corrupt {
        graph: graph.to_owned(),
        message: e.to_string(),
    })
}

fn encode(run: &SupervisorRun) -> Result<String, SupervisorRunsError> {
    serde_json::to_string(run).map_err(|e| SupervisorRunsError::Corrupt {
        graph: run.graph_id.clone(),
        message: format!("cannot encode the run: {e}"),
    })
}

/// The supervised graphs of a store's database (a redb file, or
/// PostgreSQL shared with other hosts). Cheap to clone; clones share the
/// database.
///
/// Calls block (an fsync, or round trips to the server): async callers
/// should use `spawn_blocking`.
#[derive(Clone)]
pub struct SupervisorRuns {
    tables: Tables,
}

impl std::fmt::Debug for SupervisorRuns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SupervisorRuns").finish_non_exhaustive()
    }
}

impl SupervisorRuns {
    /// The supervised runs in `store`'s database.
    pub fn open(store: &Store) -> Self {
        SupervisorRuns {
            tables: store.tables(&RUN_TABLES),
        }
    }

    /// Stores `run` unless a run of its graph exists; returns the stored
    /// row and whether it was created. Atomic: of hosts creating one graph
    /// at once, one creates it and the others get its row.
    ///
    /// # Errors
    ///
    /// Database errors.
    pub fn create(
        &self,
        run: &SupervisorRun,
    ) -> Result<(SupervisorRun, bool), SupervisorRunsError> {
        let text = encode(run)?;
        self.tables.write(|tx| {
            let mut table = tx.open_table(SUPERVISOR_RUNS)?;
            if let Some(found) = table.get(run.graph_id.as_str())? {
                return Ok(((decode(&run.graph_id, &found)?, false), false));
            }
            table.insert(run.graph_id.as_str(), text.as_str())?;
            Ok(((run.clone(), true), true))
        })
    }

    /// The run of `graph_id`.
    ///
    /// # Errors
    ///
    /// Database errors and undecodable rows.
    pub fn get(&self, graph_id: &str) -> Result<Option<SupervisorRun>, SupervisorRunsError> {
        let text = self
            .tables
            .read(|tx| tx.open_table(SUPERVISOR_RUNS)?.get(graph_id))?;
        text.map(|t| decode(graph_id, &t)).transpose()
    }

    /// The root session of `graph_id`'s supervised run, if there is one.
    ///
    /// # Errors
    ///
    /// Database errors and undecodable rows.
    pub fn root_session(&self, graph_id: &str) -> Result<Option<String>, SupervisorRunsError> {
        Ok(self.get(graph_id)?.map(|run| run.root_session_id))
    }

    /// Every run, by graph id (bytewise).
    ///
    /// # Errors
    ///
    /// Database errors and undecodable rows.
    pub fn list(&self) -> Result<Vec<SupervisorRun>, SupervisorRunsError> {
        let rows = self
            .tables
            .read(|tx| tx.open_table(SUPERVISOR_RUNS)?.all())?;
        rows.iter()
            .map(|(graph, text)| decode(graph, text))
            .collect()
    }

    /// Begins the next supervisor turn of `graph_id`, durably, and returns
    /// its number (1 for the first). Atomic across hosts: two calls never
    /// return the same number.
    ///
    /// # Errors
    ///
    /// [`SupervisorRunsError::UnknownGraph`]; database errors.
    pub fn next_turn(&self, graph_id: &str, now_ms: u64) -> Result<u64, SupervisorRunsError> {
        self.tables.write(|tx| {
            let mut table = tx.open_table(SUPERVISOR_RUNS)?;
            let Some(text) = table.get(graph_id)? else {
                return Err(SupervisorRunsError::UnknownGraph(graph_id.to_owned()));
            };
            let mut run = decode(graph_id, &text)?;
            run.turns += 1;
            run.updated_at = now_ms;
            table.insert(graph_id, encode(&run)?.as_str())?;
            Ok((run.turns, true))
        })
    }
}
