//! Operator provisions: one operator per work item, adopted on retry.

use sandgraph_store::tables::Table;

use super::schedule::graph_head;
use super::tables;
use super::{
    AgentGraphStore, ControlError, ControlErrorCode, Provision, ProvisionOutcome, ProvisionRequest,
    decode, encode, malformed,
};

type ProvisionKey = (&'static str, &'static str);

fn read_provision(
    provisions: &Table<'_, ProvisionKey, &'static str>,
    graph: &str,
    provision_id: &str,
) -> Result<Option<Provision>, ControlError> {
    let Some(value) = provisions.get((graph, provision_id))? else {
        return Ok(None);
    };
    let key = (graph, provision_id);
    let provision: Provision = decode(tables::AG_PROVISIONS.name(), &key, &value)?;
    check_provision_key(&key, &provision)?;
    Ok(Some(provision))
}

fn check_provision_key(key: &(&str, &str), provision: &Provision) -> Result<(), ControlError> {
    if provision.graph_id != key.0 || provision.provision_id != key.1 {
        return Err(malformed(
            tables::AG_PROVISIONS.name(),
            key,
            format!(
                "it holds provision {} of agent graph {}",
                provision.provision_id, provision.graph_id
            ),
        ));
    }
    Ok(())
}

fn conflict(message: String) -> ControlError {
    ControlError::new(ControlErrorCode::ProvisionConflict, message)
}

impl AgentGraphStore {
    /// Stores the operator a work item creates, if the graph is still at
    /// `expectedScheduleRevision`.
    ///
    /// In order: another current revision → `schedule-revision-conflict`;
    /// the same provision id is adopted (`created: false`) when operator id,
    /// fingerprint and target session match, else `provision-conflict`; the
    /// same work or the same operator id under another provision id →
    /// `provision-conflict`; a finished graph → `schedule-closed`.
    pub fn provision_operator(
        &self,
        req: ProvisionRequest,
    ) -> Result<ProvisionOutcome, ControlError> {
        let graph = req.graph_id.as_str();
        let id = req.provision_id.as_str();
        self.write(|tx| {
            let head = graph_head(&tx.open_table(tables::AG_SCHEDULE)?, graph)?;
            if head.revision != req.expected_schedule_revision {
                return Err(ControlError::revision(
                    graph,
                    req.expected_schedule_revision,
                    head.revision,
                ));
            }
            let mut provisions = tx.open_table(tables::AG_PROVISIONS)?;
            if let Some(existing) = read_provision(&provisions, graph, id)? {
                if existing.operator_id != req.operator_id
                    || existing.provision_fingerprint != req.provision_fingerprint
                    || existing.target_session_id != req.target_session_id
                {
                    return Err(conflict(format!(
                        "agent graph {graph}: provision {id} replayed with a different binding"
                    )));
                }
                let adopted = ProvisionOutcome {
                    provision: existing,
                    created: false,
                };
                return Ok((adopted, false));
            }
            let mut by_work = tx.open_table(tables::AG_PROVISION_WORK)?;
            if let Some(other) = by_work.get((graph, req.work_id.as_str()))? {
                return Err(conflict(format!(
                    "agent graph {graph}: work {} already provisioned as {}",
                    req.work_id, other
                )));
            }
            let mut by_operator = tx.open_table(tables::AG_PROVISION_OPERATORS)?;
            if let Some(other) = by_operator.get((graph, req.operator_id.as_str()))? {
                return Err(conflict(format!(
                    "agent graph {graph}: operator {} already provisioned as {}",
                    req.operator_id, other
                )));
            }
            if head.closed {
                return Err(ControlError::new(
                    ControlErrorCode::ScheduleClosed,
                    format!(
                        "agent graph {graph} is finished; operator {} was not provisioned",
                        req.operator_id
                    ),
                ));
            }
            let provision = Provision {
                provision_id: req.provision_id.clone(),
                graph_id: req.graph_id.clone(),
                work_id: req.work_id.clone(),
                operator_id: req.operator_id.clone(),
                target: req.target.clone(),
                target_session_id: req.target_session_id.clone(),
                initial_turn_id: req.initial_turn_id.clone(),
                initial_run_id: req.initial_run_id.clone(),
                provision_fingerprint: req.provision_fingerprint.clone(),
                edges: req.edges.clone(),
                provisioned_at: self.now(),
            };
            let text = encode(tables::AG_PROVISIONS.name(), &provision)?;
            provisions.insert((graph, id), text.as_str())?;
            by_work.insert((graph, req.work_id.as_str()), id)?;
            by_operator.insert((graph, req.operator_id.as_str()), id)?;
            let created = ProvisionOutcome {
                provision,
                created: true,
            };
            Ok((created, true))
        })
    }

    /// The graph's operators, by provision id (byte order).
    pub fn list_provisions(&self, graph_id: &str) -> Result<Vec<Provision>, ControlError> {
        self.graph_rows(tables::AG_PROVISIONS, graph_id, check_provision_key)
    }

    /// The provision of an operator; `None` when the graph has none.
    pub fn read_provision_by_operator(
        &self,
        graph_id: &str,
        operator_id: &str,
    ) -> Result<Option<Provision>, ControlError> {
        self.read_provision_via(tables::AG_PROVISION_OPERATORS, graph_id, operator_id)
    }

    /// The provision a work item created; `None` when it created none.
    pub fn read_provision_by_work(
        &self,
        graph_id: &str,
        work_id: &str,
    ) -> Result<Option<Provision>, ControlError> {
        self.read_provision_via(tables::AG_PROVISION_WORK, graph_id, work_id)
    }

    fn read_provision_via(
        &self,
        index: sandgraph_store::tables::TableDef<(&'static str, &'static str), &'static str>,
        graph: &str,
        id: &str,
    ) -> Result<Option<Provision>, ControlError> {
        self.read(|tx| {
            let index_table = tx.open_table(index)?;
            let Some(provision_id) = index_table.get((graph, id))? else {
                return Ok(None);
            };
            let provisions = tx.open_table(tables::AG_PROVISIONS)?;
            match read_provision(&provisions, graph, &provision_id)? {
                Some(p) => Ok(Some(p)),
                None => Err(malformed(
                    index.name(),
                    &(graph, id),
                    format!("provision {provision_id} is missing"),
                )),
            }
        })
    }
}
