//! [`LoopState`], what the loop carries between supersteps, and the
//! barrier that applies a step's writes to it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::graph::Writer;
use super::{CompiledGraph, MAX_TASKS_PER_STEP, StepEvent, TaskUpdate, charge, invalid_update};
use crate::checkpoint::{Checkpoint, CheckpointSource, new_checkpoint_id, now_ms};
use crate::json::value_cost;
use crate::reducers::{self, kind};
use crate::{Backend, ErrorCode, Reducer, RunError, START, SendPacket, SharedJson, Worker};

/// Everything the loop needs between supersteps; serializable so a later
/// checkpointer can persist it after each commit and resume from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LoopState {
    /// Number of the next superstep.
    pub(crate) step: u32,
    /// Every channel that has a value.
    pub(crate) channels: Map<String, Value>,
    /// Nodes triggered for the next superstep (its PULL tasks).
    pub(crate) pull: BTreeSet<String>,
    /// Per join barrier (by key), the sources that ran since it last fired.
    pub(crate) joins_seen: BTreeMap<String, BTreeSet<String>>,
    /// Dynamic tasks for the next superstep (its PUSH tasks), in the order
    /// they were emitted.
    pub(crate) sends: Vec<SendPacket>,
    /// Channel -> version, bumped when the channel is written.
    #[serde(default)]
    pub(crate) versions: BTreeMap<String, u64>,
    /// Node -> the channel versions it read when it last ran.
    #[serde(default)]
    pub(crate) versions_seen: BTreeMap<String, BTreeMap<String, u64>>,
}

/// One task of a superstep.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Task {
    pub(super) node: String,
    /// `None`: a PULL task reading the state snapshot; `Some`: a PUSH task
    /// (the index among the step's sends, and its payload).
    pub(super) push: Option<(usize, Value)>,
}

impl Task {
    /// Identifies the task within its step (LangGraph's task path).
    pub(super) fn path(&self) -> String {
        match &self.push {
            None => format!("pull:{}", self.node),
            Some((index, _)) => format!("push:{index}"),
        }
    }
}

/// What a task produced.
#[derive(Debug)]
pub(super) enum TaskOutcome {
    Done(TaskWrites),
    Interrupted(Value),
}

#[derive(Debug)]
pub(super) struct TaskWrites {
    /// Writes to known channels.
    pub(super) writes: Map<String, Value>,
    /// Nodes triggered by goto and routers (not yet static edges).
    pub(super) next: Vec<String>,
    /// Sends from the node's command, then from its routers.
    pub(super) sends: Vec<SendPacket>,
}

impl TaskWrites {
    /// Host bytes the writes and sends hold.
    pub(super) fn cost(&self) -> usize {
        let writes: usize = self
            .writes
            .iter()
            .map(|(k, v)| k.len() + value_cost(v))
            .sum();
        writes + self.sends.iter().map(send_cost).sum::<usize>()
    }
}

fn send_cost(send: &SendPacket) -> usize {
    send.node.len() + value_cost(&send.payload)
}

impl LoopState {
    /// Host bytes the state holds: the channels and the pending sends.
    pub(super) fn cost(&self) -> usize {
        let channels: usize = self
            .channels
            .iter()
            .map(|(k, v)| k.len() + value_cost(v))
            .sum();
        channels + self.sends.iter().map(send_cost).sum::<usize>()
    }

    /// Starts a run: channels at their defaults, the input applied as
    /// `__start__`'s writes, entry points triggered and the conditional edges
    /// of `__start__` routed on the resulting state.
    pub(super) async fn from_input<W: Worker>(
        graph: &CompiledGraph,
        worker: &mut W,
        input: Value,
    ) -> Result<Self, RunError> {
        let mut state = LoopState {
            step: 0,
            channels: graph.defaults.clone(),
            pull: BTreeSet::new(),
            joins_seen: BTreeMap::new(),
            sends: Vec::new(),
            versions: graph.defaults.keys().map(|k| (k.clone(), 0)).collect(),
            versions_seen: BTreeMap::new(),
        };
        state.apply_input(graph, worker, input).await?;
        Ok(state)
    }

    /// Resumes the loop from a stored checkpoint.
    pub(super) fn from_checkpoint(c: Checkpoint) -> Self {
        LoopState {
            step: c.step,
            channels: c.values,
            pull: c.pull,
            joins_seen: c.joins_seen,
            sends: c.sends,
            versions: c.channel_versions,
            versions_seen: c.versions_seen,
        }
    }

    /// Applies `input` as `__start__`'s writes and plans a fresh start:
    /// entry points plus `__start__`'s conditional edges; pending tasks,
    /// sends and join barriers are discarded.
    pub(super) async fn apply_input<W: Worker>(
        &mut self,
        graph: &CompiledGraph,
        worker: &mut W,
        input: Value,
    ) -> Result<(), RunError> {
        let Value::Object(input) = input else {
            return Err(RunError::new(
                ErrorCode::InvalidInput,
                format!("the input must be a json object, not {}", kind(&input)),
            ));
        };
        let writes = graph.filter_writes(Writer::Input, input)?;
        let written = apply_writes(graph, worker, &mut self.channels, START, writes).await?;
        self.bump(written);
        let mut pull = graph.entry.clone();
        let mut sends = Vec::new();
        if graph.has_conditionals(START) {
            let state = SharedJson::new(Value::Object(self.channels.clone()));
            let mut next = Vec::new();
            for cond in graph.conditionals(START) {
                let answers = worker.route(&cond.router, &state).await?;
                graph.resolve_routes(START, cond, answers, &mut next, &mut sends)?;
            }
            pull.extend(next);
        }
        self.pull = pull;
        self.sends = sends;
        self.joins_seen.clear();
        Ok(())
    }

    /// Gives every channel in `written` one new version, above all others
    /// (LangGraph: all channels updated in a step share the new version).
    fn bump(&mut self, written: BTreeSet<String>) {
        if written.is_empty() {
            return;
        }
        let next = self.versions.values().copied().max().unwrap_or(0) + 1;
        for channel in written {
            self.versions.insert(channel, next);
        }
    }

    /// The checkpoint of the current state.
    pub(super) fn checkpoint(
        &self,
        graph: &CompiledGraph,
        parent: Option<&str>,
        source: CheckpointSource,
    ) -> Checkpoint {
        Checkpoint {
            id: new_checkpoint_id(parent),
            parent: parent.map(str::to_owned),
            source,
            step: self.step,
            created_at_ms: now_ms(),
            channel_versions: self.versions.clone(),
            versions_seen: self.versions_seen.clone(),
            values: graph.in_channel_order(self.channels.clone()),
            pull: self.pull.clone(),
            joins_seen: self.joins_seen.clone(),
            sends: self.sends.clone(),
        }
    }

    /// The tasks of the next superstep, in task order: PULL tasks by node
    /// name, then PUSH tasks in emission order.
    pub(super) fn plan(&self) -> Vec<Task> {
        let pull = self.pull.iter().map(|node| Task {
            node: node.clone(),
            push: None,
        });
        let push = self.sends.iter().enumerate().map(|(i, send)| Task {
            node: send.node.clone(),
            push: Some((i, send.payload.clone())),
        });
        pull.chain(push).collect()
    }

    /// The barrier: applies the step's writes in task order, computes the
    /// next step's triggers and advances the step. On error the state must be
    /// discarded.
    pub(super) async fn commit<B: Backend, W: Worker>(
        &mut self,
        graph: &CompiledGraph,
        backend: &B,
        worker: &mut W,
        tasks: &[Task],
        outcomes: Vec<TaskOutcome>,
    ) -> Result<StepEvent, RunError> {
        let writes = barrier_writes(graph, self.step, tasks, outcomes)?;
        // The step event is a copy of every task's writes.
        let event_cost = writes.iter().map(|w| w.cost()).sum::<usize>();
        charge(backend, event_cost, &|| {
            format!("the event of step {}", self.step)
        })?;

        let mut updates = Vec::with_capacity(tasks.len());
        let mut pull = BTreeSet::new();
        let mut sends = Vec::new();
        let mut written = BTreeSet::new();
        for task in tasks {
            self.versions_seen
                .insert(task.node.clone(), self.versions.clone());
        }
        for (task, task_writes) in tasks.iter().zip(writes) {
            let TaskWrites {
                writes,
                next,
                sends: task_sends,
            } = task_writes;
            updates.push(TaskUpdate {
                node: task.node.clone(),
                update: Value::Object(writes.clone()),
            });
            written
                .extend(apply_writes(graph, worker, &mut self.channels, &task.node, writes).await?);
            self.triggered_by(graph, &task.node, next, &mut pull);
            sends.extend(task_sends);
        }
        self.fire_joins(graph, &mut pull);
        let event = StepEvent {
            step: self.step,
            updates,
            sub_run: Vec::new(),
            next: pull
                .iter()
                .cloned()
                .chain(sends.iter().map(|s| s.node.clone()))
                .collect(),
        };
        self.pull = pull;
        self.sends = sends;
        self.bump(written);
        self.step = self.step.saturating_add(1);
        Ok(event)
    }

    /// What the task of `node` triggers for the next step (its static
    /// edges, then its goto and router targets `next`); the join barriers
    /// waiting for `node` see it ran.
    fn triggered_by(
        &mut self,
        graph: &CompiledGraph,
        node: &str,
        next: Vec<String>,
        pull: &mut BTreeSet<String>,
    ) {
        if let Some(targets) = graph.edges_from.get(node) {
            pull.extend(targets.iter().cloned());
        }
        pull.extend(next);
        for &j in graph.joins_of.get(node).into_iter().flatten() {
            if let Some(join) = graph.joins.get(j) {
                self.joins_seen
                    .entry(join.key.clone())
                    .or_default()
                    .insert(node.to_owned());
            }
        }
    }

    /// Every join barrier whose sources have all run fires: its target is
    /// triggered and it starts over.
    fn fire_joins(&mut self, graph: &CompiledGraph, pull: &mut BTreeSet<String>) {
        for join in &graph.joins {
            if self
                .joins_seen
                .get(&join.key)
                .is_some_and(|seen| seen.is_superset(&join.sources))
            {
                self.joins_seen.remove(&join.key);
                pull.insert(join.target.clone());
            }
        }
    }
}

/// The writes of a step that reached the barrier (none interrupted), once
/// they pass the checks of the barrier.
fn barrier_writes(
    graph: &CompiledGraph,
    step: u32,
    tasks: &[Task],
    outcomes: Vec<TaskOutcome>,
) -> Result<Vec<TaskWrites>, RunError> {
    let writes: Vec<TaskWrites> = outcomes
        .into_iter()
        .filter_map(|outcome| match outcome {
            TaskOutcome::Done(writes) => Some(writes),
            TaskOutcome::Interrupted(_) => None,
        })
        .collect();
    if writes.len() != tasks.len() {
        return Err(RunError::new(
            ErrorCode::Trap,
            "internal error: a superstep with an interrupt reached the barrier",
        ));
    }
    check_last_value_conflicts(graph, tasks, &writes)?;
    check_task_count(step, tasks, &writes)?;
    Ok(writes)
}

/// The next superstep may plan at most [`MAX_TASKS_PER_STEP`] tasks; the
/// error names the node that asked for the most.
fn check_task_count(step: u32, tasks: &[Task], writes: &[TaskWrites]) -> Result<(), RunError> {
    let total: usize = writes.iter().map(|w| w.next.len() + w.sends.len()).sum();
    if total <= MAX_TASKS_PER_STEP {
        return Ok(());
    }
    let (node, most) = tasks
        .iter()
        .zip(writes)
        .map(|(t, w)| (t.node.as_str(), w.next.len() + w.sends.len()))
        .max_by_key(|(_, n)| *n)
        .unwrap_or(("?", 0));
    Err(invalid_update(format!(
        "superstep {} would start {total} tasks (node {node:?} asked for {most}); a superstep may start at most {MAX_TASKS_PER_STEP}",
        step + 1
    )))
}

/// A last-value channel takes one write per superstep.
fn check_last_value_conflicts(
    graph: &CompiledGraph,
    tasks: &[Task],
    writes: &[TaskWrites],
) -> Result<(), RunError> {
    let mut writers: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (task, task_writes) in tasks.iter().zip(writes) {
        for channel in task_writes.writes.keys() {
            if graph.reducers.get(channel) == Some(&Reducer::LastValue) {
                writers.entry(channel).or_default().push(&task.node);
            }
        }
    }
    match writers.into_iter().find(|(_, nodes)| nodes.len() > 1) {
        Some((channel, nodes)) => {
            let names: Vec<String> = nodes.iter().map(|n| format!("{n:?}")).collect();
            Err(invalid_update(format!(
                "channel {channel:?} received {} values in one step (from nodes {}); a last-value channel takes one write per step: give it a reducer (append, merge, add or custom)",
                nodes.len(),
                names.join(", ")
            )))
        }
        None => Ok(()),
    }
}

/// Applies one writer's writes (to known channels) through the reducers;
/// custom reducers run on `worker`.
pub(super) async fn apply_writes<W: Worker>(
    graph: &CompiledGraph,
    worker: &mut W,
    channels: &mut Map<String, Value>,
    writer: &str,
    writes: Map<String, Value>,
) -> Result<BTreeSet<String>, RunError> {
    let mut written = BTreeSet::new();
    for (channel, update) in writes {
        let Some(&reducer) = graph.reducers.get(&channel) else {
            continue;
        };
        let value = match reducer {
            Reducer::Custom => {
                let current = channels.get(&channel).unwrap_or(&Value::Null);
                worker.reduce(&channel, current, &update).await?
            }
            builtin => reducers::apply(builtin, &channel, channels.get(&channel), update, writer)?,
        };
        channels.insert(channel.clone(), value);
        written.insert(channel);
    }
    Ok(written)
}

#[cfg(test)]
mod loop_state_tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn plan_orders_pull_tasks_by_name_then_push_tasks_by_emission() {
        let state = LoopState {
            step: 3,
            channels: Map::new(),
            pull: ["zeta", "alpha", "mid"]
                .into_iter()
                .map(String::from)
                .collect(),
            joins_seen: BTreeMap::new(),
            versions: BTreeMap::new(),
            versions_seen: BTreeMap::new(),
            sends: vec![
                SendPacket {
                    node: "w".into(),
                    payload: json!(2),
                },
                SendPacket {
                    node: "alpha".into(),
                    payload: json!(1),
                },
            ],
        };
        let plan = state.plan();
        let order: Vec<(String, String)> =
            plan.iter().map(|t| (t.node.clone(), t.path())).collect();
        assert_eq!(
            order,
            [
                ("alpha".to_owned(), "pull:alpha".to_owned()),
                ("mid".to_owned(), "pull:mid".to_owned()),
                ("zeta".to_owned(), "pull:zeta".to_owned()),
                ("w".to_owned(), "push:0".to_owned()),
                ("alpha".to_owned(), "push:1".to_owned()),
            ]
        );
        assert_eq!(plan[4].push, Some((1, json!(1))));
    }

    #[test]
    fn loop_state_round_trips_through_json() {
        let state = LoopState {
            step: 7,
            channels: json!({"x": 1, "items": [1, 2]})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            pull: ["b".to_owned()].into_iter().collect(),
            joins_seen: [(
                "join:a+b:c".to_owned(),
                ["a".to_owned()].into_iter().collect(),
            )]
            .into_iter()
            .collect(),
            versions: BTreeMap::new(),
            versions_seen: BTreeMap::new(),
            sends: vec![SendPacket {
                node: "w".into(),
                payload: json!({"i": 1}),
            }],
        };
        let text = serde_json::to_string(&state).unwrap();
        let back: LoopState = serde_json::from_str(&text).unwrap();
        assert_eq!(back, state);
        assert_eq!(
            serde_json::to_value(&state).unwrap(),
            json!({
                "step": 7,
                "channels": {"x": 1, "items": [1, 2]},
                "pull": ["b"],
                "joins_seen": {"join:a+b:c": ["a"]},
                "sends": [{"node": "w", "payload": {"i": 1}}],
                "versions": {},
                "versions_seen": {}
            })
        );
    }
}
