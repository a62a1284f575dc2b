//! The live projection of one agent graph: the schedule log folded into work
//! items with statuses, plus the graph's claims and records (seed-contracts
//! §2.6, "Schedule projection", with the terminal states of work added).

use std::collections::{HashMap, HashSet};

use crate::state::{
    AdmissionStatus, AgentGraphStore, GraphRecord, IntentClaim, Provision, RecordFacet,
    RecordOutcome, ScheduleUpdate, ScheduledWork, WorkStop,
};

use crate::error::ToolFailure;
use crate::ids::{cmp_utf16, scheduled_work_intent_id};

/// Where a work item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkStatus {
    /// Scheduled and not ended: waiting, claimed or running.
    Requested,
    /// A stop names it (wins over every other state).
    Stopped,
    /// A later work item replaces it.
    Superseded,
    /// A terminal record with outcome `completed` exists for it.
    Completed,
    /// A terminal record with outcome `failed` exists for it.
    Failed,
    /// A stop or a replacement cut its run: a terminal record with outcome
    /// `cancelled` exists for it (this wins over `stopped` and
    /// `superseded`, which it refines).
    Cancelled,
}

impl WorkStatus {
    /// `requested`, `stopped`, `superseded`, `completed`, `failed` or
    /// `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkStatus::Requested => "requested",
            WorkStatus::Stopped => "stopped",
            WorkStatus::Superseded => "superseded",
            WorkStatus::Completed => "completed",
            WorkStatus::Failed => "failed",
            WorkStatus::Cancelled => "cancelled",
        }
    }

    /// Everything but `requested`.
    pub fn is_terminal(self) -> bool {
        self != WorkStatus::Requested
    }
}

/// One work item of the projection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkEntry {
    work: ScheduledWork,
    status: WorkStatus,
    update_id: String,
    revision: u64,
    committed_at: u64,
    intent_id: String,
    outcome: Option<RecordOutcome>,
}

impl WorkEntry {
    /// The work item as committed.
    pub fn work(&self) -> &ScheduledWork {
        &self.work
    }

    /// Its id.
    pub fn work_id(&self) -> &str {
        &self.work.work_id
    }

    /// Where it is.
    pub fn status(&self) -> WorkStatus {
        self.status
    }

    /// The update that added it.
    pub fn update_id(&self) -> &str {
        &self.update_id
    }

    /// The revision of that update.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// When that update was committed (Unix milliseconds).
    pub fn committed_at(&self) -> u64 {
        self.committed_at
    }

    /// Its intent id ([`scheduled_work_intent_id`]), which its claim carries.
    pub fn intent_id(&self) -> &str {
        &self.intent_id
    }

    /// How the last terminal record of the work ended it, whatever its
    /// status: stopped or superseded work that was already running may
    /// still end with a record. `None` while no terminal record exists.
    pub fn outcome(&self) -> Option<RecordOutcome> {
        self.outcome
    }
}

/// The last stop of one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoppedTarget {
    /// The work stopped.
    pub target_id: String,
    /// Why.
    pub reason: String,
    /// The update that stopped it.
    pub update_id: String,
    /// The revision of that update.
    pub revision: u64,
    /// When that update was committed (Unix milliseconds).
    pub committed_at: u64,
}

/// The finish of a graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishEntry {
    /// The record ids selected as the result.
    pub result_ids: Vec<String>,
    /// Why the graph finished.
    pub reason: String,
    /// The update that finished it.
    pub update_id: String,
    /// The revision of that update.
    pub revision: u64,
    /// When that update was committed (Unix milliseconds).
    pub committed_at: u64,
}

/// The live state of one graph. An unknown graph projects as empty: open,
/// revision 0, nothing in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projection {
    graph_id: String,
    updates: Vec<ScheduleUpdate>,
    work: Vec<WorkEntry>,
    stopped_targets: Vec<StoppedTarget>,
    finish: Option<FinishEntry>,
    claims: Vec<IntentClaim>,
    records: Vec<GraphRecord>,
    provisions: Vec<Provision>,
}

impl Projection {
    /// Reads a graph's schedule log, claims and records from `store` and
    /// folds them: the read-only view of a graph for callers that are not
    /// its root session (the coordinator, `agent-graph show`).
    ///
    /// # Errors
    ///
    /// Store errors, and those of [`Projection::fold`].
    pub fn load(store: &AgentGraphStore, graph_id: &str) -> Result<Self, ToolFailure> {
        let updates = store.list_schedule_updates(graph_id)?;
        let claims = store.list_claims(graph_id)?;
        let records = store.list_records(graph_id)?;
        let provisions = store.list_provisions(graph_id)?;
        Ok(Projection::fold(graph_id, updates, claims, records)?.with_provisions(provisions))
    }

    /// Folds a graph's schedule log, claims and records (records in the
    /// store's order: emittedAt, operatorId, runId, seq, recordId).
    ///
    /// # Errors
    ///
    /// A plain failure (no code, as the original's projection errors) for an
    /// update of another graph, revisions that are not 1, 2, 3, …, an update
    /// after the finish, and a work id added twice.
    pub fn fold(
        graph_id: &str,
        updates: Vec<ScheduleUpdate>,
        claims: Vec<IntentClaim>,
        records: Vec<GraphRecord>,
    ) -> Result<Self, ToolFailure> {
        let mut updates = updates;
        updates.sort_by(|a, b| {
            a.revision
                .cmp(&b.revision)
                .then_with(|| cmp_utf16(&a.request.update_id, &b.request.update_id))
        });
        let mut fold = Fold::default();
        for (index, update) in updates.iter().enumerate() {
            fold.apply(graph_id, index, update)?;
        }
        fold.settle(&records);
        Ok(Projection {
            graph_id: graph_id.to_owned(),
            updates,
            work: fold.work,
            stopped_targets: fold.stopped,
            finish: fold.finish,
            claims,
            records,
            provisions: Vec::new(),
        })
    }

    /// This projection with the graph's operators (their edges give
    /// [`Self::routes_count`]); [`Projection::fold`] starts with none.
    pub(crate) fn with_provisions(mut self, provisions: Vec<Provision>) -> Self {
        self.provisions = provisions;
        self
    }

    /// The graph.
    pub fn graph_id(&self) -> &str {
        &self.graph_id
    }

    /// Whether a finish is committed.
    pub fn closed(&self) -> bool {
        self.finish.is_some()
    }

    /// The last revision, 0 for an empty graph.
    pub fn revision(&self) -> u64 {
        self.updates.last().map_or(0, |u| u.revision)
    }

    /// How many updates are committed.
    pub fn update_count(&self) -> usize {
        self.updates.len()
    }

    /// The committed updates, by ascending revision.
    pub fn updates(&self) -> &[ScheduleUpdate] {
        &self.updates
    }

    /// Every work item, in commit order.
    pub fn work(&self) -> &[WorkEntry] {
        &self.work
    }

    /// One work item.
    pub fn work_item(&self, work_id: &str) -> Option<&WorkEntry> {
        self.work.iter().find(|w| w.work.work_id == work_id)
    }

    /// The work items still `requested`, in commit order.
    pub fn requested(&self) -> impl Iterator<Item = &WorkEntry> {
        self.work
            .iter()
            .filter(|w| w.status == WorkStatus::Requested)
    }

    /// The last stop of each stopped target, by revision then target id.
    pub(crate) fn stopped_targets(&self) -> &[StoppedTarget] {
        &self.stopped_targets
    }

    /// The finish, when the graph is closed.
    pub fn finish(&self) -> Option<&FinishEntry> {
        self.finish.as_ref()
    }

    /// The intent claims of the graph, in the store's order.
    pub fn claims(&self) -> &[IntentClaim] {
        &self.claims
    }

    /// The claim of a work item, if it has one.
    pub fn claim_of(&self, work_id: &str) -> Option<&IntentClaim> {
        let intent = self.work_item(work_id)?.intent_id();
        self.claims.iter().find(|c| c.request.intent_id == intent)
    }

    /// The committed records, ordered by emittedAt, operatorId, runId, seq,
    /// recordId.
    pub fn records(&self) -> &[GraphRecord] {
        &self.records
    }

    /// The graph's operators, by provision id.
    pub fn provisions(&self) -> &[Provision] {
        &self.provisions
    }

    /// The routes of the records along the operators' edges: for every
    /// record, one per distinct edge (by edge id) leaving its operator
    /// (the seed's "records × outgoing edges").
    pub(crate) fn routes_count(&self) -> u64 {
        let mut outgoing: HashMap<&str, HashSet<&str>> = HashMap::new();
        for edge in self.provisions.iter().flat_map(|p| &p.edges) {
            outgoing
                .entry(edge.from_operator_id.as_str())
                .or_default()
                .insert(edge.edge_id.as_str());
        }
        self.records
            .iter()
            .map(|r| {
                outgoing
                    .get(r.operator_id.as_str())
                    .map_or(0, |e| e.len() as u64)
            })
            .sum()
    }

    /// Claims `claimed` or `executing`, whatever their work's status (the
    /// seed's rule: work stopped or superseded while it runs is still
    /// live), except claims whose work already has a terminal record: the
    /// claim of ended work stays `executing`, but nothing runs any more.
    pub fn live_claims(&self) -> impl Iterator<Item = &IntentClaim> {
        let ended: HashSet<&str> = self
            .work
            .iter()
            .filter(|w| w.outcome.is_some())
            .map(|w| w.intent_id())
            .collect();
        self.claims.iter().filter(move |c| {
            matches!(
                c.admission_status,
                AdmissionStatus::Claimed | AdmissionStatus::Executing
            ) && !ended.contains(c.request.intent_id.as_str())
        })
    }
}

/// What folding the schedule log builds, update by update.
#[derive(Default)]
struct Fold {
    work: Vec<WorkEntry>,
    work_ids: HashSet<String>,
    superseded: HashSet<String>,
    stopped: Vec<StoppedTarget>,
    finish: Option<FinishEntry>,
}

impl Fold {
    /// Checks the update at `index` of the sorted log and applies it.
    fn apply(
        &mut self,
        graph_id: &str,
        index: usize,
        update: &ScheduleUpdate,
    ) -> Result<(), ToolFailure> {
        let request = &update.request;
        if request.graph_id != graph_id {
            return Err(ToolFailure::plain(format!(
                "agent graph {graph_id}: update {} belongs to {}",
                request.update_id, request.graph_id
            )));
        }
        if update.revision != index as u64 + 1 {
            return Err(ToolFailure::plain(format!(
                "agent graph {graph_id}: non-contiguous revision {}",
                update.revision
            )));
        }
        if self.finish.is_some() {
            return Err(ToolFailure::plain(format!(
                "agent graph {graph_id}: update {} after finish",
                request.update_id
            )));
        }
        for item in &request.add_work {
            self.add_work(graph_id, update, item)?;
        }
        for stop in &request.stop {
            self.stop(update, stop);
        }
        if let Some(f) = &request.finish {
            self.finish = Some(FinishEntry {
                result_ids: f.result_ids.clone(),
                reason: f.reason.clone(),
                update_id: request.update_id.clone(),
                revision: update.revision,
                committed_at: update.committed_at,
            });
        }
        Ok(())
    }

    fn add_work(
        &mut self,
        graph_id: &str,
        update: &ScheduleUpdate,
        item: &ScheduledWork,
    ) -> Result<(), ToolFailure> {
        if !self.work_ids.insert(item.work_id.clone()) {
            return Err(ToolFailure::plain(format!(
                "agent graph {graph_id}: update repeats work {}",
                item.work_id
            )));
        }
        if let Some(replaces) = &item.replaces {
            self.superseded.insert(replaces.clone());
        }
        self.work.push(WorkEntry {
            intent_id: scheduled_work_intent_id(graph_id, &item.work_id),
            work: item.clone(),
            status: WorkStatus::Requested,
            update_id: update.request.update_id.clone(),
            revision: update.revision,
            committed_at: update.committed_at,
            outcome: None,
        });
        Ok(())
    }

    /// The last stop of a target replaces its earlier ones.
    fn stop(&mut self, update: &ScheduleUpdate, stop: &WorkStop) {
        let entry = StoppedTarget {
            target_id: stop.target_id.clone(),
            reason: stop.reason.clone(),
            update_id: update.request.update_id.clone(),
            revision: update.revision,
            committed_at: update.committed_at,
        };
        match self
            .stopped
            .iter_mut()
            .find(|s| s.target_id == stop.target_id)
        {
            Some(existing) => *existing = entry,
            None => self.stopped.push(entry),
        }
    }

    /// Sorts the stops and gives every work item its status: cancelled when
    /// its last terminal record says its run was cut, else stopped, else
    /// superseded, else as that record ended it.
    fn settle(&mut self, records: &[GraphRecord]) {
        self.stopped.sort_by(|a, b| {
            a.revision
                .cmp(&b.revision)
                .then_with(|| cmp_utf16(&a.target_id, &b.target_id))
        });
        let mut ended: HashMap<&str, RecordOutcome> = HashMap::new();
        for record in records {
            if let (Some(work_id), Some(outcome)) = (&record.work_id, record.outcome)
                && record.facets.contains(&RecordFacet::Terminal)
            {
                ended.insert(work_id, outcome);
            }
        }
        let stopped: HashSet<&str> = self.stopped.iter().map(|s| s.target_id.as_str()).collect();
        for entry in &mut self.work {
            let id = entry.work.work_id.as_str();
            entry.outcome = ended.get(id).copied();
            entry.status = if entry.outcome == Some(RecordOutcome::Cancelled) {
                WorkStatus::Cancelled
            } else if stopped.contains(id) {
                WorkStatus::Stopped
            } else if self.superseded.contains(id) {
                WorkStatus::Superseded
            } else {
                match entry.outcome {
                    Some(RecordOutcome::Completed) => WorkStatus::Completed,
                    Some(RecordOutcome::Failed) => WorkStatus::Failed,
                    Some(RecordOutcome::Cancelled) => WorkStatus::Cancelled,
                    None => WorkStatus::Requested,
                }
            };
        }
    }
}
