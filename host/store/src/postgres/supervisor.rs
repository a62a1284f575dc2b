//! Supervised agent graphs on PostgreSQL (`sg_supervisor_runs`): one row
//! per graph, `run` the same `SupervisorRun` JSON as in redb.

use futures::FutureExt;

use super::{Pg, PgTxError};
use crate::StoreError;
use crate::supervisor::{SupervisorRun, SupervisorRunsBackend, decode, encode};

/// Supervised runs in a PostgreSQL database.
pub(crate) struct PgSupervisorRuns {
    pg: Pg,
}

impl PgSupervisorRuns {
    pub(crate) fn new(pg: Pg) -> Self {
        PgSupervisorRuns { pg }
    }
}

impl SupervisorRunsBackend for PgSupervisorRuns {
    fn create(&self, run: &SupervisorRun) -> Result<(SupervisorRun, bool), StoreError> {
        let text = encode(run)?;
        let run = run.clone();
        self.pg
            .transaction_blocking("cannot create a supervised run", true, move |tx| {
                let (run, text) = (run.clone(), text.clone());
                async move {
                    // Of hosts creating one graph at once, one inserts; the
                    // others wait for it, lose the serialization conflict,
                    // and find its row when they run again.
                    let inserted = tx
                        .execute(
                            "INSERT INTO sg_supervisor_runs (graph_id, run) VALUES ($1, $2)
                             ON CONFLICT (graph_id) DO NOTHING",
                            &[&run.graph_id, &text],
                        )
                        .await?;
                    if inserted == 1 {
                        return Ok::<_, PgTxError>((run, true));
                    }
                    let row = tx
                        .query_one(
                            "SELECT run FROM sg_supervisor_runs WHERE graph_id = $1",
                            &[&run.graph_id],
                        )
                        .await?;
                    Ok((decode(&run.graph_id, row.get(0))?, false))
                }
                .boxed()
            })
    }

    fn get(&self, graph_id: &str) -> Result<Option<SupervisorRun>, StoreError> {
        let graph = graph_id.to_owned();
        let text: Option<String> =
            self.pg
                .transaction_blocking("cannot read a supervised run", true, move |tx| {
                    let graph = graph.clone();
                    async move {
                        let row = tx
                            .query_opt(
                                "SELECT run FROM sg_supervisor_runs WHERE graph_id = $1",
                                &[&graph],
                            )
                            .await?;
                        Ok::<_, PgTxError>(row.map(|r| r.get(0)))
                    }
                    .boxed()
                })?;
        text.map(|t| decode(graph_id, &t)).transpose()
    }

    fn list(&self) -> Result<Vec<SupervisorRun>, StoreError> {
        let rows: Vec<(String, String)> =
            self.pg
                .transaction_blocking("cannot list supervised runs", true, |tx| {
                    async move {
                        let rows = tx
                            .query(
                                "SELECT graph_id, run FROM sg_supervisor_runs ORDER BY graph_id",
                                &[],
                            )
                            .await?;
                        Ok::<_, PgTxError>(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
                    }
                    .boxed()
                })?;
        rows.iter().map(|(g, t)| decode(g, t)).collect()
    }

    fn next_turn(&self, graph_id: &str, now_ms: u64) -> Result<u64, StoreError> {
        let graph = graph_id.to_owned();
        self.pg
            .transaction_blocking("cannot begin a supervisor turn", true, move |tx| {
                let graph = graph.clone();
                async move {
                    let Some(row) = tx
                        .query_opt(
                            "SELECT run FROM sg_supervisor_runs WHERE graph_id = $1 FOR UPDATE",
                            &[&graph],
                        )
                        .await?
                    else {
                        return Err(PgTxError::Store(StoreError::InvalidArgument(format!(
                            "no supervised agent graph {graph:?}"
                        ))));
                    };
                    let mut run = decode(&graph, row.get(0))?;
                    run.turns += 1;
                    run.updated_at = now_ms;
                    tx.execute(
                        "UPDATE sg_supervisor_runs SET run = $2 WHERE graph_id = $1",
                        &[&graph, &encode(&run)?],
                    )
                    .await?;
                    Ok(run.turns)
                }
                .boxed()
            })
    }
}
