//! A superstep's tasks: a lone task runs on the main worker, several run
//! concurrently on tokio tasks; each is recorded as it finishes.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;
use tokio::task::{AbortHandle, JoinSet};
use tracing::Instrument as _;

use super::drive::{Recorder, main_worker};
use super::graph::Writer;
use super::state::{Task, TaskOutcome, TaskWrites, apply_writes};
use super::{CompiledGraph, MAX_TARGETS_PER_RESULT, invalid_update};
use crate::{Backend, ErrorCode, NodeContext, NodeOutput, RunError, SharedJson, Worker};

/// One superstep's tasks and what they run against.
pub(super) struct StepRun<'a, B: Backend> {
    pub(super) graph: &'a Arc<CompiledGraph>,
    pub(super) backend: &'a Arc<B>,
    pub(super) tasks: &'a [Task],
    /// Per task, the resume values of its interrupts.
    pub(super) resumes: &'a [Vec<Value>],
    /// The state at step start, read by every PULL task: its JSON text is
    /// made once for the step, by the first worker that needs it.
    pub(super) snapshot: &'a Arc<SharedJson>,
    /// The step's context; a task's adds its resume values.
    pub(super) ctx: &'a NodeContext,
    /// Where each fresh outcome is recorded as soon as its task finishes.
    pub(super) recorder: Option<&'a Recorder<'a>>,
}

/// What a spawned task hands back: the worker it ran on (none when one
/// could not be had) and its outcome.
type Spawned<W> = (Option<W>, Result<TaskOutcome, RunError>);

/// The spawned tasks of a step with several to run.
struct Running<W> {
    set: JoinSet<Spawned<W>>,
    /// Per spawned task, its task index, to abort it.
    aborts: Vec<(usize, AbortHandle)>,
    /// Per tokio task, its position among the spawned (0 holds the main
    /// worker) and its task index.
    index_of: HashMap<tokio::task::Id, (usize, usize)>,
}

impl<B: Backend + 'static> StepRun<'_, B> {
    /// Runs the tasks that have no outcome yet (`reused[i]` is `None`) and
    /// returns all outcomes in task order, or the error of the failed task
    /// that comes first in task order.
    pub(super) async fn execute(
        &self,
        main: &mut Option<B::Worker>,
        reused: Vec<Option<TaskOutcome>>,
    ) -> Result<Vec<TaskOutcome>, RunError> {
        let todo: Vec<usize> = reused
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_none())
            .map(|(i, _)| i)
            .collect();
        let mut results: Vec<Option<Result<TaskOutcome, RunError>>> =
            reused.into_iter().map(|r| r.map(Ok)).collect();
        if let [i] = todo.as_slice() {
            results[*i] = Some(Ok(self.run_alone(main, *i).await?));
        } else if !todo.is_empty() {
            self.run_concurrently(main, &todo, &mut results).await?;
        }
        results
            .into_iter()
            .map(|result| {
                result.unwrap_or_else(|| {
                    Err(RunError::new(
                        ErrorCode::Trap,
                        "internal error: a task vanished",
                    ))
                })
            })
            .collect()
    }

    /// The context of task `i`.
    fn task_ctx(&self, i: usize) -> NodeContext {
        let mut c = self.ctx.clone();
        c.resume = self.resumes.get(i).cloned().unwrap_or_default();
        c
    }

    /// The only task to run, on the main worker.
    async fn run_alone(
        &self,
        main: &mut Option<B::Worker>,
        i: usize,
    ) -> Result<TaskOutcome, RunError> {
        let task = &self.tasks[i];
        let worker = main_worker(main, &**self.backend).await?;
        let span = tracing::debug_span!("task", node = %task.node, step = self.ctx.step);
        let payload = payload_of(task);
        let input = payload.as_ref().unwrap_or(&**self.snapshot);
        let outcome = run_task(
            worker,
            self.graph,
            &task.node,
            input,
            self.snapshot,
            &self.task_ctx(i),
        )
        .instrument(span)
        .await?;
        if let Some(r) = self.recorder {
            r.record(task, &outcome, &self.resumes[i]).await?;
        }
        Ok(outcome)
    }

    /// Runs the tasks `todo` concurrently, the first on the main worker,
    /// and fills in their results. When one fails, tasks after it in task
    /// order are aborted and earlier ones finish; the error of the first
    /// failed task in task order is returned.
    async fn run_concurrently(
        &self,
        main: &mut Option<B::Worker>,
        todo: &[usize],
        results: &mut [Option<Result<TaskOutcome, RunError>>],
    ) -> Result<(), RunError> {
        let mut running = self.spawn(main, todo);
        let mut first_failure: Option<usize> = None;
        while let Some(joined) = running.set.join_next_with_id().await {
            let (i, result) = match joined {
                Ok((id, (worker, result))) => {
                    let Some(&(n, i)) = running.index_of.get(&id) else {
                        continue;
                    };
                    if n == 0 {
                        *main = worker;
                    }
                    (i, result)
                }
                Err(err) if err.is_cancelled() => continue,
                Err(err) => {
                    let Some(&(_, i)) = running.index_of.get(&err.id()) else {
                        continue;
                    };
                    (i, Err(self.panicked(i)))
                }
            };
            let result = self.record_finished(i, result).await;
            if result.is_err() && first_failure.is_none_or(|f| i < f) {
                // Tasks after it in task order cannot matter any more; earlier
                // ones might still fail and take precedence, so they finish.
                first_failure = Some(i);
                for (later, handle) in &running.aborts {
                    if *later > i {
                        handle.abort();
                    }
                }
            }
            if let Some(slot) = results.get_mut(i) {
                *slot = Some(result);
            }
        }
        match first_failure.and_then(|f| results.get_mut(f).and_then(Option::take)) {
            Some(Err(err)) => Err(err),
            _ => Ok(()),
        }
    }

    /// Spawns the tasks `todo` on tokio tasks, the first with the main
    /// worker, the others each with a fresh one.
    fn spawn(&self, main: &mut Option<B::Worker>, todo: &[usize]) -> Running<B::Worker> {
        let mut running = Running {
            set: JoinSet::new(),
            aborts: Vec::with_capacity(todo.len()),
            index_of: HashMap::with_capacity(todo.len()),
        };
        for (n, &i) in todo.iter().enumerate() {
            let worker = if n == 0 { main.take() } else { None };
            let graph = Arc::clone(self.graph);
            let backend = Arc::clone(self.backend);
            let snapshot = Arc::clone(self.snapshot);
            let ctx = self.task_ctx(i);
            let node = self.tasks[i].node.clone();
            let payload = payload_of(&self.tasks[i]);
            let span = tracing::debug_span!("task", node = %node, step = ctx.step);
            let handle = running.set.spawn(
                async move {
                    let mut worker = match worker {
                        Some(worker) => worker,
                        None => match backend.worker().await {
                            Ok(worker) => worker,
                            Err(err) => return (None, Err(err)),
                        },
                    };
                    let input = payload.as_ref().unwrap_or(&*snapshot);
                    let outcome =
                        run_task(&mut worker, &graph, &node, input, &snapshot, &ctx).await;
                    (Some(worker), outcome)
                }
                .instrument(span),
            );
            running.index_of.insert(handle.id(), (n, i));
            running.aborts.push((i, handle));
        }
        running
    }

    /// The error of task `i`, whose tokio task panicked.
    fn panicked(&self, i: usize) -> RunError {
        let node = self.tasks.get(i).map_or("?", |t| t.node.as_str());
        let message = format!("internal error: the task of node {node:?} panicked");
        RunError::new(ErrorCode::Trap, message)
    }

    /// A finished task is recorded at once, so a crash or a failing sibling
    /// never makes it run again; a failed record fails the task.
    async fn record_finished(
        &self,
        i: usize,
        result: Result<TaskOutcome, RunError>,
    ) -> Result<TaskOutcome, RunError> {
        if let (Ok(outcome), Some(r)) = (&result, self.recorder) {
            r.record(&self.tasks[i], outcome, &self.resumes[i]).await?;
        }
        result
    }
}

/// A PUSH task's input: its payload, read by this task alone (a PULL
/// task reads the step's snapshot).
fn payload_of(task: &Task) -> Option<SharedJson> {
    let (_, payload) = task.push.as_ref()?;
    Some(SharedJson::new(payload.clone()))
}

/// One task: the node body on `input`, then (unless it interrupted) each of
/// its conditional edges' routers on the fresh state (the step-start
/// snapshot plus this task's own writes, its text made once for them all).
async fn run_task<W: Worker>(
    worker: &mut W,
    graph: &CompiledGraph,
    node: &str,
    input: &SharedJson,
    snapshot: &SharedJson,
    ctx: &NodeContext,
) -> Result<TaskOutcome, RunError> {
    let (update, goto, command_sends) = match worker.run_node(node, input, ctx).await? {
        NodeOutput::Update(update) => (update, Vec::new(), Vec::new()),
        NodeOutput::Command {
            update,
            goto,
            sends,
        } => (update, goto, sends),
        NodeOutput::Interrupt(value) => return Ok(TaskOutcome::Interrupted(value)),
    };
    // The one check of a node result's own count is at the WIT boundary
    // (`sandbox.rs` `check_target_count`, before any payload is parsed);
    // a worker hands on no result past it (see `Worker`).
    debug_assert!(
        goto.len() + command_sends.len() <= MAX_TARGETS_PER_RESULT,
        "a worker handed on a result naming more than MAX_TARGETS_PER_RESULT targets"
    );
    let writes = graph.filter_writes(Writer::Node(node), update)?;
    let mut next = Vec::new();
    for target in &goto {
        if let Some(target) = graph.resolve_goto(node, target)? {
            next.push(target.to_owned());
        }
    }
    for send in &command_sends {
        graph.check_send(node, send)?;
    }
    let mut sends = command_sends;

    if graph.has_conditionals(node) {
        let mut fresh = snapshot.value().as_object().cloned().unwrap_or_default();
        apply_writes(graph, worker, &mut fresh, node, writes.clone()).await?;
        let fresh = SharedJson::new(Value::Object(fresh));
        for cond in graph.conditionals(node) {
            let answers = worker.route(&cond.router, &fresh).await?;
            graph.resolve_routes(node, cond, answers, &mut next, &mut sends)?;
            check_targets(node, next.len() + sends.len())?;
        }
    }
    Ok(TaskOutcome::Done(TaskWrites {
        writes,
        next,
        sends,
    }))
}

/// A node result with its routers' answers may name at most
/// [`MAX_TARGETS_PER_RESULT`] goto targets and sends: the total, which no
/// single guest call returns and so only the executor sees (each router's
/// own answer is bounded at the WIT boundary, like the node's result).
fn check_targets(node: &str, count: usize) -> Result<(), RunError> {
    if count > MAX_TARGETS_PER_RESULT {
        return Err(invalid_update(format!(
            "node {node:?} returned {count} goto targets and sends; a node result may name at most {MAX_TARGETS_PER_RESULT}"
        )));
    }
    Ok(())
}
