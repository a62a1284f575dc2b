//! Durable threads: the checkpoint written after every superstep, the task
//! records (pending writes) saved as each task finishes, and the
//! [`Checkpointer`] trait a store implements.
//!
//! The model is LangGraph's (a checkpoint per superstep holding channel
//! values, channel versions and versions seen per node; pending writes per
//! task so finished siblings of a failed or interrupted step never re-run),
//! with the loop's own planning state stored explicitly.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{RunError, SendPacket};

/// Why a checkpoint was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointSource {
    /// Input was applied (a new thread, or new input on an existing one).
    Input,
    /// A superstep completed.
    Loop,
    /// The state was updated from outside, as if a node had written it.
    Update,
    /// A copy of an earlier checkpoint, made the thread's head.
    Fork,
}

/// The state of a thread between two supersteps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Time-sortable id (see [`new_checkpoint_id`]).
    pub id: String,
    /// The checkpoint this one follows; `None` for a thread's first.
    pub parent: Option<String>,
    /// Why it was written.
    pub source: CheckpointSource,
    /// Number of the next superstep.
    pub step: u32,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Channel -> version; a channel's version changes when it is written.
    pub channel_versions: BTreeMap<String, u64>,
    /// Node -> channel versions it read when it last ran.
    pub versions_seen: BTreeMap<String, BTreeMap<String, u64>>,
    /// Every channel that has a value.
    pub values: Map<String, Value>,
    /// Nodes triggered for the next superstep.
    pub pull: BTreeSet<String>,
    /// Per join barrier, the sources that ran since it last fired.
    pub joins_seen: BTreeMap<String, BTreeSet<String>>,
    /// Dynamic tasks for the next superstep, in emission order.
    pub sends: Vec<SendPacket>,
}

impl Checkpoint {
    /// The nodes the next superstep will run: PULL tasks then PUSH targets.
    pub fn next_nodes(&self) -> Vec<String> {
        let mut next: Vec<String> = self.pull.iter().cloned().collect();
        next.extend(self.sends.iter().map(|s| s.node.clone()));
        next
    }
}

/// What a finished task of the superstep after a checkpoint produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The task's path within its step (`pull:<node>` or `push:<index>`).
    pub path: String,
    /// The node it ran.
    pub node: String,
    /// What it produced.
    pub result: TaskResult,
}

/// A task's result, enough to commit the step without running it again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TaskResult {
    /// The node (and its routers) finished.
    Done {
        /// Writes to known channels.
        writes: Map<String, Value>,
        /// Nodes triggered by goto and routers.
        next: Vec<String>,
        /// Sends from the node's command and its routers.
        sends: Vec<SendPacket>,
    },
    /// The node interrupted.
    Interrupted {
        /// The interrupt's id.
        id: String,
        /// Its payload.
        value: Value,
        /// Resume values the task had already received (its earlier
        /// interrupts' answers), oldest first.
        resume: Vec<Value>,
    },
}

/// Where a thread's checkpoints and task records go. Implementations decide
/// durability. In `sync` mode a checkpoint (other than an `Input` one) is on
/// disk when `put_checkpoint` returns, together with the task records of the
/// superstep it ends: task records and the `Input` checkpoint may be held
/// until then, so a crash re-runs the finished tasks of a superstep that had
/// not settled. `async` mode may queue everything, in order; `exit` mode
/// may buffer it until [`Checkpointer::flush`], which makes whatever is held
/// durable.
///
/// The executor logs `task recorded` when `put_task` returns; a durable
/// implementation logs `task record saved` (target `sandgraph::checkpoint`,
/// with the record's `node`) once a record is on disk.
pub trait Checkpointer: Send + Sync {
    /// Saves a task record of the superstep that follows `checkpoint_id`;
    /// it may be held and made durable with the checkpoint that ends that
    /// superstep, or by [`Checkpointer::flush`].
    fn put_task<'a>(
        &'a self,
        checkpoint_id: &'a str,
        record: &'a TaskRecord,
    ) -> BoxFuture<'a, Result<(), RunError>>;

    /// Saves a new checkpoint and makes it the thread's head.
    fn put_checkpoint<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, Result<(), RunError>>;

    /// Called once when the run ends, whatever the outcome: everything saved
    /// so far must be durable when it returns.
    fn flush(&self) -> BoxFuture<'_, Result<(), RunError>>;
}

/// A stored thread: its head checkpoint and the task records saved against
/// it (finished or interrupted tasks of the step after it).
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadState {
    /// The head checkpoint.
    pub checkpoint: Checkpoint,
    /// Records of finished or interrupted tasks of the step after it.
    pub pending: Vec<TaskRecord>,
}

impl ThreadState {
    /// The interrupts waiting for an answer, in task order.
    pub fn pending_interrupts(&self) -> Vec<crate::Interrupt> {
        self.pending
            .iter()
            .filter_map(|r| match &r.result {
                TaskResult::Interrupted { id, value, .. } => Some(crate::Interrupt {
                    id: id.clone(),
                    node: r.node.clone(),
                    value: value.clone(),
                }),
                TaskResult::Done { .. } => None,
            })
            .collect()
    }
}

/// How a thread run starts.
#[derive(Debug, Clone, PartialEq)]
pub enum Start {
    /// Apply new input: a new thread, or on an existing one a fresh start
    /// from its state (unfinished tasks are discarded, as in LangGraph).
    Input(Value),
    /// Continue the head checkpoint's pending superstep (after a crash or a
    /// failure); finished tasks are not run again.
    Continue,
    /// Answer the pending interrupts: a bare value when exactly one is
    /// pending, else an object mapping each interrupt id to its value.
    Resume(Value),
}

/// A time-sortable checkpoint id: 16 hex digits of microseconds since the
/// epoch, strictly greater than `after` (so ids sort in creation order even
/// when the clock stalls or steps back).
pub fn new_checkpoint_id(after: Option<&str>) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let floor = after
        .and_then(|a| u64::from_str_radix(a, 16).ok())
        .map_or(0, |p| p.saturating_add(1));
    format!("{:016x}", now.max(floor))
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_ids_sort_in_creation_order_even_with_a_stalled_clock() {
        let a = new_checkpoint_id(None);
        let far_future = format!("{:016x}", u64::MAX / 2);
        let b = new_checkpoint_id(Some(&far_future));
        assert!(b > far_future);
        let c = new_checkpoint_id(Some(&b));
        assert!(a < b && b < c);
        assert_eq!(c.len(), 16);
    }

    #[test]
    fn task_records_round_trip_as_json() {
        let r = TaskRecord {
            path: "pull:a".into(),
            node: "a".into(),
            result: TaskResult::Interrupted {
                id: "x".into(),
                value: Value::Bool(true),
                resume: vec![Value::from(1)],
            },
        };
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains(r#""kind":"interrupted""#), "{text}");
        assert_eq!(serde_json::from_str::<TaskRecord>(&text).unwrap(), r);
    }
}
