//! One invocation's superstep loop: where it starts (new input, a stored
//! thread continued or resumed), the steps until none is left or one
//! interrupts, and what is recorded and saved on the way.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::state::{LoopState, Task, TaskOutcome, TaskWrites};
use super::tasks::StepRun;
use super::{CompiledGraph, Interrupt, RunConfig, RunOutcome, StepEvent, charge, release, settle};
use crate::checkpoint::{
    CheckpointSource, Checkpointer, Start, TaskRecord, TaskResult, ThreadState,
};
use crate::{Backend, ErrorCode, RunError, SharedJson, Worker};

/// Resume values per task path, from an answer to the pending interrupts.
fn resume_values(
    pending: &ThreadState,
    answer: Value,
) -> Result<HashMap<String, Vec<Value>>, RunError> {
    let interrupted: Vec<(&TaskRecord, &String, &Vec<Value>)> = pending
        .pending
        .iter()
        .filter_map(|r| match &r.result {
            TaskResult::Interrupted { id, resume, .. } => Some((r, id, resume)),
            TaskResult::Done { .. } => None,
        })
        .collect();
    let bad = |m: String| RunError::new(ErrorCode::InvalidInput, m);
    if interrupted.is_empty() {
        return Err(bad("the thread has no pending interrupt to resume".into()));
    }
    if answer.is_null() {
        return Err(bad("null cannot be a resume value".into()));
    }
    let ids: Vec<&str> = interrupted.iter().map(|(_, id, _)| id.as_str()).collect();
    let keyed = answer
        .as_object()
        .is_some_and(|m| !m.is_empty() && m.keys().all(|k| ids.contains(&k.as_str())));
    let mut out = HashMap::new();
    if keyed {
        let map = answer.as_object().cloned().unwrap_or_default();
        for (record, id, resume) in &interrupted {
            let Some(value) = map.get(id.as_str()) else {
                return Err(bad(format!(
                    "the resume map has no value for pending interrupt {id} (node {:?})",
                    record.node
                )));
            };
            let mut values = (*resume).clone();
            values.push(value.clone());
            out.insert(record.path.clone(), values);
        }
    } else if let [(record, _, resume)] = interrupted.as_slice() {
        let mut values = (*resume).clone();
        values.push(answer);
        out.insert(record.path.clone(), values);
    } else {
        return Err(bad(format!(
            "the thread has {} pending interrupts ({}): resume with a JSON object mapping each interrupt id to its value",
            ids.len(),
            ids.join(", ")
        )));
    }
    Ok(out)
}

pub(super) async fn drive<B: Backend + 'static>(
    graph: &Arc<CompiledGraph>,
    backend: &Arc<B>,
    existing: Option<ThreadState>,
    start: Start,
    config: &RunConfig,
    on_step: &mut (dyn FnMut(&StepEvent) + Send),
    saver: Option<&dyn Checkpointer>,
) -> Result<RunOutcome, RunError> {
    if config.recursion_limit == 0 {
        return Err(RunError::new(
            ErrorCode::InvalidInput,
            "recursion_limit must be at least 1",
        ));
    }
    let mut main_worker = backend.worker().await?;
    let started = Started::new(graph, &mut main_worker, existing, start).await?;
    let state = started.state;
    settle(&**backend, &state)?;
    let mut driver = Driver {
        graph,
        backend,
        config,
        saver,
        main: Some(main_worker),
        head: started.head,
        prior: started.prior,
        resume: started.resume,
        first_step: state.step,
    };
    if started.wrote_input {
        driver.save(&state, CheckpointSource::Input).await?;
    }
    driver.run(state, on_step).await
}

/// Where an invocation starts: the state, the checkpoint it follows, and
/// what the thread's pending records say about the first superstep.
struct Started {
    state: LoopState,
    /// The thread's head checkpoint, for a stored thread.
    head: Option<String>,
    /// The input was applied: a checkpoint of it is saved first.
    wrote_input: bool,
    /// Finished tasks of the head's superstep, by task path.
    prior: HashMap<String, TaskRecord>,
    /// Resume values per task path.
    resume: HashMap<String, Vec<Value>>,
}

impl Started {
    /// The start `start` asks for, from the thread's stored state
    /// `existing` (`None` for a new thread); input and routers of
    /// `__start__` run on `worker`.
    async fn new<W: Worker>(
        graph: &CompiledGraph,
        worker: &mut W,
        existing: Option<ThreadState>,
        start: Start,
    ) -> Result<Self, RunError> {
        match (existing, start) {
            (None, Start::Input(input)) => {
                let state = LoopState::from_input(graph, worker, input).await?;
                Ok(Started::with_input(state, None))
            }
            (None, _) => Err(RunError::new(
                ErrorCode::InvalidInput,
                "the thread has no checkpoint to continue or resume: start it with input",
            )),
            (Some(thread), Start::Input(input)) => {
                let parent = thread.checkpoint.id.clone();
                let mut state = LoopState::from_checkpoint(thread.checkpoint);
                state.apply_input(graph, worker, input).await?;
                Ok(Started::with_input(state, Some(parent)))
            }
            (Some(thread), Start::Continue) => {
                let resume = thread
                    .pending
                    .iter()
                    .filter_map(|record| match &record.result {
                        TaskResult::Interrupted { resume, .. } => {
                            Some((record.path.clone(), resume.clone()))
                        }
                        TaskResult::Done { .. } => None,
                    })
                    .collect();
                Ok(Started::pending(thread, resume))
            }
            (Some(thread), Start::Resume(answer)) => {
                let resume = resume_values(&thread, answer)?;
                Ok(Started::pending(thread, resume))
            }
        }
    }

    /// A start from new input, after the checkpoint `head` if any.
    fn with_input(state: LoopState, head: Option<String>) -> Self {
        Started {
            state,
            head,
            wrote_input: true,
            prior: HashMap::new(),
            resume: HashMap::new(),
        }
    }

    /// Continuing the thread's pending superstep with these resume values.
    fn pending(thread: ThreadState, resume: HashMap<String, Vec<Value>>) -> Self {
        let prior = done_records(&thread);
        let head = thread.checkpoint.id.clone();
        Started {
            state: LoopState::from_checkpoint(thread.checkpoint),
            head: Some(head),
            wrote_input: false,
            prior,
            resume,
        }
    }
}

/// The superstep loop of one invocation, and what it carries from one
/// step to the next.
struct Driver<'a, B: Backend> {
    graph: &'a Arc<CompiledGraph>,
    backend: &'a Arc<B>,
    config: &'a RunConfig,
    saver: Option<&'a dyn Checkpointer>,
    /// `None` only while task 0 of a multi-task step holds it, or if that
    /// task panicked (then a fresh one is fetched).
    main: Option<B::Worker>,
    /// The thread's head checkpoint.
    head: Option<String>,
    /// Finished tasks of the head's superstep, by task path.
    prior: HashMap<String, TaskRecord>,
    /// Resume values per task path.
    resume: HashMap<String, Vec<Value>>,
    /// Budget per invocation: a resumed run gets a fresh one.
    first_step: u32,
}

impl<B: Backend + 'static> Driver<'_, B> {
    /// Runs supersteps until none is left to run or one interrupts.
    async fn run(
        mut self,
        mut state: LoopState,
        on_step: &mut (dyn FnMut(&StepEvent) + Send),
    ) -> Result<RunOutcome, RunError> {
        loop {
            let tasks = state.plan();
            if tasks.is_empty() {
                return Ok(RunOutcome::Completed(
                    self.graph.in_channel_order(state.channels),
                ));
            }
            self.check_continue(&state)?;
            tracing::debug!(step = state.step, tasks = tasks.len(), "superstep");
            let (outcomes, resumes) = self.execute(&mut state, &tasks).await?;
            let interrupts = collect_interrupts(state.step, &tasks, &outcomes, &resumes);
            if !interrupts.is_empty() {
                return Ok(RunOutcome::Interrupted {
                    state: self.graph.in_channel_order(state.channels),
                    interrupts,
                });
            }
            let event = self.commit(&mut state, &tasks, outcomes).await?;
            on_step(&event);
            drop(event);
            self.prior.clear();
            self.resume.clear();
            self.save(&state, CheckpointSource::Loop).await?;
        }
    }

    /// The backend lets the run go on and the recursion limit is not
    /// reached.
    fn check_continue(&self, state: &LoopState) -> Result<(), RunError> {
        self.backend.check_continue()?;
        if state.step.saturating_sub(self.first_step) >= self.config.recursion_limit {
            return Err(RunError::new(
                ErrorCode::RecursionLimit,
                format!(
                    "recursion limit of {} reached without hitting a stop condition",
                    self.config.recursion_limit
                ),
            ));
        }
        Ok(())
    }

    /// Runs the step's tasks on a snapshot of the state; their outcomes and
    /// resume values, in task order.
    async fn execute(
        &mut self,
        state: &mut LoopState,
        tasks: &[Task],
    ) -> Result<(Vec<TaskOutcome>, Vec<Vec<Value>>), RunError> {
        let step = state.step;
        // Tasks finished before a crash or failure are taken from their
        // records, never run twice.
        let reused = reuse_records(&**self.backend, tasks, &self.prior)?;
        let resumes: Vec<Vec<Value>> = tasks
            .iter()
            .map(|t| self.resume.get(&t.path()).cloned().unwrap_or_default())
            .collect();
        // One immutable snapshot per step, shared by every task, and so is
        // its JSON text (made once for the step). The channels move into it
        // and come back once the tasks are done, the text dropped (and its
        // charge given back) before the barrier.
        let channels = Value::Object(std::mem::take(&mut state.channels));
        let snapshot = Arc::new(SharedJson::new(channels));
        let mut ctx = self.config.context.clone();
        ctx.step = step;
        ctx.resume.clear();
        let recorder = match (self.saver, self.head.as_deref()) {
            (Some(saver), Some(head)) => Some(Recorder {
                saver,
                checkpoint_id: head,
                step,
            }),
            _ => None,
        };
        let run = StepRun {
            graph: self.graph,
            backend: self.backend,
            tasks,
            resumes: &resumes,
            snapshot: &snapshot,
            ctx: &ctx,
            recorder: recorder.as_ref(),
        };
        let outcomes = run.execute(&mut self.main, reused).await;
        state.channels = match Arc::try_unwrap(snapshot).map(SharedJson::into_value) {
            Ok(Value::Object(map)) => map,
            Ok(_) => Map::new(),
            Err(shared) => shared.value().as_object().cloned().unwrap_or_default(),
        };
        Ok((outcomes?, resumes))
    }

    /// The barrier on the main worker, then the byte budget's.
    async fn commit(
        &mut self,
        state: &mut LoopState,
        tasks: &[Task],
        outcomes: Vec<TaskOutcome>,
    ) -> Result<StepEvent, RunError> {
        let worker = main_worker(&mut self.main, &**self.backend).await?;
        let event = state
            .commit(self.graph, &**self.backend, worker, tasks, outcomes)
            .await?;
        settle(&**self.backend, state)?;
        Ok(event)
    }

    /// Saves a checkpoint of `state` as the thread's new head, when the
    /// thread is stored.
    async fn save(&mut self, state: &LoopState, source: CheckpointSource) -> Result<(), RunError> {
        if let Some(saver) = self.saver {
            let parent = self.head.as_deref();
            let id =
                save_checkpoint(&**self.backend, saver, self.graph, state, parent, source).await?;
            self.head = Some(id);
        }
        Ok(())
    }
}

/// The main worker, fetched afresh when the last one was lost.
pub(super) async fn main_worker<'w, B: Backend>(
    main: &'w mut Option<B::Worker>,
    backend: &B,
) -> Result<&'w mut B::Worker, RunError> {
    Ok(match main {
        Some(worker) => worker,
        None => main.insert(backend.worker().await?),
    })
}

fn done_records(thread: &ThreadState) -> HashMap<String, TaskRecord> {
    thread
        .pending
        .iter()
        .filter(|r| matches!(r.result, TaskResult::Done { .. }))
        .map(|r| (r.path.clone(), r.clone()))
        .collect()
}

/// Per task, the outcome recorded before a crash or failure (never run
/// twice), its writes charged to the run's byte budget; `None` to run it.
fn reuse_records<B: Backend>(
    backend: &B,
    tasks: &[Task],
    prior: &HashMap<String, TaskRecord>,
) -> Result<Vec<Option<TaskOutcome>>, RunError> {
    tasks
        .iter()
        .map(|t| {
            let reused = prior
                .get(&t.path())
                .filter(|r| r.node == t.node)
                .and_then(|r| match &r.result {
                    TaskResult::Done {
                        writes,
                        next,
                        sends,
                    } => Some(TaskOutcome::Done(TaskWrites {
                        writes: writes.clone(),
                        next: next.clone(),
                        sends: sends.clone(),
                    })),
                    TaskResult::Interrupted { .. } => None,
                });
            if let Some(TaskOutcome::Done(w)) = &reused {
                charge(backend, w.cost(), &|| {
                    format!("the recorded writes of node {:?}", t.node)
                })?;
            }
            Ok(reused)
        })
        .collect()
}

/// Where finished tasks are recorded, and against which checkpoint.
pub(super) struct Recorder<'a> {
    saver: &'a dyn Checkpointer,
    checkpoint_id: &'a str,
    step: u32,
}

impl Recorder<'_> {
    pub(super) async fn record(
        &self,
        task: &Task,
        outcome: &TaskOutcome,
        resume: &[Value],
    ) -> Result<(), RunError> {
        let result = match outcome {
            TaskOutcome::Done(w) => TaskResult::Done {
                writes: w.writes.clone(),
                next: w.next.clone(),
                sends: w.sends.clone(),
            },
            TaskOutcome::Interrupted(value) => TaskResult::Interrupted {
                id: interrupt_id(self.step, &task.path(), resume.len()),
                value: value.clone(),
                resume: resume.to_vec(),
            },
        };
        let record = TaskRecord {
            path: task.path(),
            node: task.node.clone(),
            result,
        };
        self.saver.put_task(self.checkpoint_id, &record).await?;
        // Not necessarily durable yet (a sync checkpointer commits it with
        // the step's checkpoint): the checkpointer logs `task record saved`
        // when it is.
        tracing::debug!(target: "sandgraph::checkpoint", step = self.step, task = %record.path, node = %record.node, "task recorded");
        Ok(())
    }
}

/// Saves a checkpoint of `state` and returns its id; the copy is charged
/// while it is written.
async fn save_checkpoint<B: Backend>(
    backend: &B,
    saver: &dyn Checkpointer,
    graph: &CompiledGraph,
    state: &LoopState,
    parent: Option<&str>,
    source: CheckpointSource,
) -> Result<String, RunError> {
    let copy = state.cost();
    charge(backend, copy, &|| {
        format!("the checkpoint of step {}", state.step)
    })?;
    let checkpoint = state.checkpoint(graph, parent, source);
    let id = checkpoint.id.clone();
    let saved = saver.put_checkpoint(&checkpoint).await;
    drop(checkpoint);
    release(backend, copy);
    saved.map(|()| id)
}

fn collect_interrupts(
    step: u32,
    tasks: &[Task],
    outcomes: &[TaskOutcome],
    resumes: &[Vec<Value>],
) -> Vec<Interrupt> {
    tasks
        .iter()
        .zip(outcomes)
        .zip(resumes)
        .filter_map(|((task, outcome), resume)| match outcome {
            TaskOutcome::Interrupted(value) => Some(Interrupt {
                // The k-th interrupt of a task (k = answers it already had).
                id: interrupt_id(step, &task.path(), resume.len()),
                node: task.node.clone(),
                value: value.clone(),
            }),
            TaskOutcome::Done(_) => None,
        })
        .collect()
}

/// 32 hex digits of FNV-1a-128 over the step, task path and interrupt index.
/// Checkpoints keep these ids and a resume answers them by id, so the
/// formula must not change.
fn interrupt_id(step: u32, task_path: &str, index: usize) -> String {
    let text = format!("{step}\u{0}{task_path}\u{0}{index}");
    format!("{:032x}", fnv1a_128(text.as_bytes()))
}

/// FNV-1a with the 128-bit offset basis and prime.
fn fnv1a_128(bytes: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    bytes.iter().fold(OFFSET, |hash, &byte| {
        (hash ^ u128::from(byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn fnv1a_128_matches_reference_vectors() {
        // The published FNV-1a-128 values of "", "a" and "foobar".
        for (input, expected) in [
            (&b""[..], "6c62272e07bb014262b821756295c58d"),
            (b"a", "d228cb696f1a8caf78912b704e4a8964"),
            (b"foobar", "343e1662793c64bf6f0d3597ba446f18"),
        ] {
            assert_eq!(format!("{:032x}", fnv1a_128(input)), expected);
        }
    }

    #[test]
    fn an_interrupt_id_is_the_hash_of_step_path_and_index() {
        // Pinned: stored checkpoints are answered by these ids.
        let id = interrupt_id(3, "pull:a", 0);
        assert_eq!(id, "c1c1bc6b91146f424eb284fc8319a59c");
        assert_ne!(id, interrupt_id(4, "pull:a", 0));
        assert_ne!(id, interrupt_id(3, "pull:b", 0));
        assert_ne!(id, interrupt_id(3, "pull:a", 1));
    }
}
