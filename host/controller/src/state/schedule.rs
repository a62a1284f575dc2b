//! The schedule log: committed updates, one revision each.

use std::collections::BTreeSet;

use std::ops::Bound;

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::claims::cancel_in;
use super::tables;
use super::wakes::{FINISHED_REASON, supersede_due_in};
use super::{
    AgentGraphStore, CommitOutcome, ControlError, ControlErrorCode, ScheduleUpdate,
    ScheduleUpdateRequest, decode, encode, malformed, successor,
};
use crate::ids::scheduled_work_intent_id;
use sandgraph_store::tables::{Range, Table, Tx};

type ScheduleKey = (&'static str, u64);

/// Where a graph is: its current revision (0 before its first update) and
/// whether it is finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct GraphHead {
    pub(super) revision: u64,
    pub(super) closed: bool,
}

/// The part of a schedule row [`graph_head`] needs; the rest is skipped
/// without being built.
#[derive(Deserialize)]
struct HeadRow {
    revision: u64,
    #[serde(default)]
    finish: Option<IgnoredAny>,
}

/// The graph's head, from its last schedule row. No update is committed
/// after a finish, so the graph is closed exactly when its last update
/// finishes it.
pub(super) fn graph_head(
    schedule: &Table<'_, ScheduleKey, &'static str>,
    graph: &str,
) -> Result<GraphHead, ControlError> {
    let Some(((_, revision), value)) = schedule.last(revisions(graph))? else {
        return Ok(GraphHead {
            revision: 0,
            closed: false,
        });
    };
    let key = (graph, revision);
    let row: HeadRow = decode(tables::AG_SCHEDULE.name(), &key, &value)?;
    if row.revision != key.1 {
        return Err(malformed(
            tables::AG_SCHEDULE.name(),
            &key,
            format!("it holds revision {}", row.revision),
        ));
    }
    Ok(GraphHead {
        revision: key.1,
        closed: row.finish.is_some(),
    })
}

/// Every revision of `graph`.
fn revisions(graph: &str) -> Range<'_, ScheduleKey> {
    (
        Bound::Included((graph, 0)),
        Bound::Included((graph, u64::MAX)),
    )
}

fn read_update(
    schedule: &Table<'_, ScheduleKey, &'static str>,
    graph: &str,
    revision: u64,
) -> Result<Option<ScheduleUpdate>, ControlError> {
    let Some(value) = schedule.get((graph, revision))? else {
        return Ok(None);
    };
    let key = (graph, revision);
    let update: ScheduleUpdate = decode(tables::AG_SCHEDULE.name(), &key, &value)?;
    check_update_key(&key, &update)?;
    Ok(Some(update))
}

fn check_update_key(key: &(&str, u64), update: &ScheduleUpdate) -> Result<(), ControlError> {
    if update.request.graph_id != key.0 || update.revision != key.1 {
        return Err(malformed(
            tables::AG_SCHEDULE.name(),
            key,
            format!(
                "it holds revision {} of agent graph {}",
                update.revision, update.request.graph_id
            ),
        ));
    }
    Ok(())
}

/// The stored update of a replayed update id (`owner`'s revision
/// `revision`): the same graph and fingerprint, else a conflict.
fn replayed(
    schedule: &Table<'_, ScheduleKey, &'static str>,
    req: &ScheduleUpdateRequest,
    owner: &str,
    revision: u64,
) -> Result<ScheduleUpdate, ControlError> {
    let (graph, id) = (req.graph_id.as_str(), req.update_id.as_str());
    if owner != graph {
        return Err(conflict(format!(
            "agent graph {graph}: update id {id} is already used by agent graph {owner}"
        )));
    }
    let Some(existing) = read_update(schedule, graph, revision)? else {
        return Err(malformed(
            tables::AG_UPDATE_IDS.name(),
            &id,
            format!("revision {revision} of agent graph {graph} is missing"),
        ));
    };
    if existing.request.update_fingerprint != req.update_fingerprint {
        return Err(conflict(format!(
            "agent graph {graph}: update {id} replayed with a different payload"
        )));
    }
    Ok(existing)
}

/// Refuses a work id the update adds twice, or that an earlier update of
/// the graph added.
fn check_new_work(
    work_ids: &Table<'_, (&'static str, &'static str), u64>,
    req: &ScheduleUpdateRequest,
) -> Result<(), ControlError> {
    let (graph, id) = (req.graph_id.as_str(), req.update_id.as_str());
    let mut seen = BTreeSet::new();
    for work in &req.add_work {
        let w = work.work_id.as_str();
        if !seen.insert(w) {
            return Err(conflict(format!(
                "agent graph {graph}: update {id} adds work {w} twice"
            )));
        }
        if let Some(rev) = work_ids.get((graph, w))? {
            return Err(conflict(format!(
                "agent graph {graph}: update {id} adds work {w}, which revision {} already added",
                rev
            )));
        }
    }
    Ok(())
}

/// Inside `tx`: cancels the claims of the work `req` stops (reason
/// `stopped: <reason>`) and of the work it replaces (`replaced by <work>`),
/// so a run under way stops and no host starts one.
fn cancel_ended_work(tx: &Tx<'_>, req: &ScheduleUpdateRequest) -> Result<(), ControlError> {
    let graph = req.graph_id.as_str();
    for stop in &req.stop {
        let intent = scheduled_work_intent_id(graph, &stop.target_id);
        cancel_in(tx, graph, &intent, &format!("stopped: {}", stop.reason))?;
    }
    for work in &req.add_work {
        if let Some(replaced) = &work.replaces {
            let intent = scheduled_work_intent_id(graph, replaced);
            cancel_in(tx, graph, &intent, &format!("replaced by {}", work.work_id))?;
        }
    }
    Ok(())
}

fn conflict(message: String) -> ControlError {
    ControlError::new(ControlErrorCode::ScheduleUpdateConflict, message)
}

impl AgentGraphStore {
    /// Commits a schedule update as the graph's next revision, exactly once.
    ///
    /// In order: `finish` with `addWork` is refused; an update id already
    /// committed returns the stored row (`created: false`) when the
    /// fingerprint matches and is refused otherwise; a source (graph,
    /// session, run, tool call; not the turn) that committed another update
    /// is refused; a finished graph refuses the update (`schedule-closed`);
    /// a work id repeated inside the update or added by an earlier update is
    /// refused. Otherwise the update gets `revision = last + 1` (from 1);
    /// in the same transaction the claims of the work it stops or replaces
    /// are cancelled (`stopped: <reason>`, `replaced by <work>`: a run
    /// under way stops, see [`AdmissionStatus`](super::AdmissionStatus)),
    /// and a `finish` supersedes, in the same transaction, the graph's
    /// wakes still due for delivery (`pending` or `retryable_failed`;
    /// reason `graph finished`): the seed's finish supersedes due wakes
    /// without delivering them. A wake under delivery is settled by its
    /// attempt.
    pub fn commit_schedule_update(
        &self,
        req: ScheduleUpdateRequest,
    ) -> Result<CommitOutcome, ControlError> {
        let graph = req.graph_id.as_str();
        let id = req.update_id.as_str();
        if req.finish.is_some() && !req.add_work.is_empty() {
            return Err(conflict(format!(
                "agent graph {graph}: update {id} cannot both finish the graph and add work"
            )));
        }
        self.write(|tx| {
            let mut ids = tx.open_table(tables::AG_UPDATE_IDS)?;
            let mut schedule = tx.open_table(tables::AG_SCHEDULE)?;
            if let Some((owner, revision)) = ids.get(id)? {
                let update = replayed(&schedule, &req, &owner, revision)?;
                return Ok((
                    CommitOutcome {
                        update,
                        created: false,
                    },
                    false,
                ));
            }
            let src = &req.source;
            let source_key = (
                graph,
                src.session_id.as_str(),
                src.run_id.as_str(),
                src.tool_call_id.as_str(),
            );
            let mut sources = tx.open_table(tables::AG_UPDATE_SOURCES)?;
            if let Some(other) = sources.get(source_key)? {
                return Err(conflict(format!(
                    "agent graph {graph}: source {}:{}:{} already committed update {}, not {id}",
                    src.session_id, src.run_id, src.tool_call_id, other
                )));
            }
            let head = graph_head(&schedule, graph)?;
            if head.closed {
                return Err(ControlError::new(
                    ControlErrorCode::ScheduleClosed,
                    format!("agent graph {graph} is finished; update {id} was not committed"),
                ));
            }
            let mut work_ids = tx.open_table(tables::AG_WORK_IDS)?;
            check_new_work(&work_ids, &req)?;
            let revision = head.revision + 1;
            let update = ScheduleUpdate {
                revision,
                committed_at: self.now(),
                request: req.clone(),
            };
            let text = encode(tables::AG_SCHEDULE.name(), &update)?;
            schedule.insert((graph, revision), text.as_str())?;
            ids.insert(id, (graph, revision))?;
            sources.insert(source_key, id)?;
            for work in &req.add_work {
                work_ids.insert((graph, work.work_id.as_str()), revision)?;
            }
            cancel_ended_work(tx, &req)?;
            if req.finish.is_some() {
                supersede_due_in(tx, graph, FINISHED_REASON, update.committed_at)?;
            }
            let created = CommitOutcome {
                update,
                created: true,
            };
            Ok((created, true))
        })
    }

    /// The graph's committed updates, by ascending revision.
    pub fn list_schedule_updates(
        &self,
        graph_id: &str,
    ) -> Result<Vec<ScheduleUpdate>, ControlError> {
        self.read(|tx| {
            let schedule = tx.open_table(tables::AG_SCHEDULE)?;
            let mut out = Vec::new();
            for ((g, revision), value) in schedule.range(revisions(graph_id))? {
                let key = (g.as_str(), revision);
                let update: ScheduleUpdate = decode(tables::AG_SCHEDULE.name(), &key, &value)?;
                check_update_key(&key, &update)?;
                out.push(update);
            }
            Ok(out)
        })
    }

    /// One committed update of the graph; `None` when the graph has no
    /// update of that id.
    pub fn read_schedule_update(
        &self,
        graph_id: &str,
        update_id: &str,
    ) -> Result<Option<ScheduleUpdate>, ControlError> {
        self.read(|tx| {
            let ids = tx.open_table(tables::AG_UPDATE_IDS)?;
            let Some((owner, revision)) = ids.get(update_id)? else {
                return Ok(None);
            };
            if owner != graph_id {
                return Ok(None);
            }
            let schedule = tx.open_table(tables::AG_SCHEDULE)?;
            match read_update(&schedule, graph_id, revision)? {
                Some(update) => Ok(Some(update)),
                None => Err(malformed(
                    tables::AG_UPDATE_IDS.name(),
                    &update_id,
                    format!("revision {revision} of agent graph {graph_id} is missing"),
                )),
            }
        })
    }

    /// The graph's current revision: that of its last update, 0 when none.
    pub fn current_revision(&self, graph_id: &str) -> Result<u64, ControlError> {
        self.read(|tx| {
            let schedule = tx.open_table(tables::AG_SCHEDULE)?;
            Ok(schedule
                .last(revisions(graph_id))?
                .map_or(0, |((_, revision), _)| revision))
        })
    }

    /// Whether a committed update of the graph has a `finish`.
    pub fn is_closed(&self, graph_id: &str) -> Result<bool, ControlError> {
        self.read(|tx| Ok(graph_head(&tx.open_table(tables::AG_SCHEDULE)?, graph_id)?.closed))
    }

    /// The ids of the graphs with at least one committed update, in byte
    /// order.
    pub fn list_graphs(&self) -> Result<Vec<String>, ControlError> {
        self.read(|tx| {
            let schedule = tx.open_table(tables::AG_SCHEDULE)?;
            let mut out: Vec<String> = Vec::new();
            // Skip from graph to graph: one range lookup per graph.
            let mut from = String::new();
            loop {
                let next =
                    schedule.first((Bound::Included((from.as_str(), 0)), Bound::Unbounded))?;
                let Some(((graph, _), _)) = next else {
                    return Ok(out);
                };
                from = successor(&graph);
                out.push(graph);
            }
        })
    }
}
