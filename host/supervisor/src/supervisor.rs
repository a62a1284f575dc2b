//! The supervisor loop: turns of the supervisor model over the three
//! agent-graph tools, waves of work, wakes delivered as new turns, until
//! the supervisor finishes the graph.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sandgraph_controller::ids::{graph_wake_attempt_id, stable_hash32};
use sandgraph_controller::{
    AgentGraphTools, AttemptStatus, CallIdentity, ControlError, GraphRecord, OpenAgentGraphs,
    Projection, SupervisorWake, ToolFailure, UPDATE_TOOL, WakeStatus, YIELD_TOOL, prompt_section,
    tool_defs,
};
use sandgraph_llm::{ChatResponse, LlmError, Message, Provider, ToolCall, ToolSpec};
use sandgraph_registry::Registry;
use sandgraph_router::AgentConfig;
use sandgraph_store::Store;
use serde_json::{Value, json};

use crate::context::{Brief, Compaction, Conversation};
use crate::coordinator::{Coordinator, CoordinatorOptions};
use crate::runs::{SupervisorRun, SupervisorRuns, SupervisorRunsError};

/// How the supervisor loop runs.
#[derive(Debug, Clone)]
pub struct SupervisorOptions {
    /// The supervisor's model.
    pub model: String,
    /// Work items run at once.
    pub max_new_activations: usize,
    /// Model calls in one supervisor turn before the turn is cut.
    pub max_turn_steps: u32,
    /// Supervisor turns in one graph before the loop gives up.
    pub max_turns: u64,
    /// Delivery attempts of one wake (the seed's default is 3).
    pub max_wake_attempts: u32,
    /// Wait before the n-th retry of a wake: `wake_backoff × n` (the seed
    /// waits 30 s × n; `[controller].wake_backoff_ms` in `sandgraph.toml`).
    /// See [`SupervisorOptions::wake_retry_delay`].
    pub wake_backoff: Duration,
    /// The most estimated tokens a supervisor request may take
    /// (`[controller].context_budget_tokens` in `sandgraph.toml`; see
    /// [`crate::estimate_tokens`]). A turn over it is compacted once, its
    /// opening message bounded (seed §2.11); see [`Event::Compacted`].
    pub context_budget_tokens: u64,
    /// Extra system text before the prompt section.
    pub system_prompt: Option<String>,
}

impl SupervisorOptions {
    /// Defaults for `model`.
    pub fn new(model: impl Into<String>) -> Self {
        SupervisorOptions {
            model: model.into(),
            max_new_activations: crate::DEFAULT_MAX_NEW_ACTIVATIONS,
            max_turn_steps: 16,
            max_turns: 32,
            max_wake_attempts: 3,
            wake_backoff: Duration::from_secs(30),
            context_budget_tokens: crate::DEFAULT_CONTEXT_BUDGET_TOKENS,
            system_prompt: None,
        }
    }

    /// The wait before the `retry`-th retry of a wake's delivery (1 for
    /// the retry after the first failed attempt): `wake_backoff × retry`,
    /// at most [`Duration::MAX`].
    pub fn wake_retry_delay(&self, retry: u32) -> Duration {
        self.wake_backoff.saturating_mul(retry)
    }
}

/// Progress of a supervised graph.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A supervisor turn began.
    Turn {
        /// Its number.
        turn: u64,
    },
    /// The supervisor called a tool.
    ToolCall {
        /// The tool.
        tool: String,
        /// The text it got back (first line).
        result: String,
    },
    /// A wave of work settled.
    Wave {
        /// The records written.
        records: Vec<GraphRecord>,
    },
    /// A wake was delivered.
    WakeDelivered {
        /// The wake.
        wake_id: String,
    },
    /// A supervisor turn's conversation was over its context budget, or
    /// the model refused it as over its context, and was compacted: the
    /// turn's tool calls so far became a digest and its opening message
    /// (the wake, or the goal) keeps the entries that fit, saying how many
    /// it leaves out. Once per turn.
    Compacted {
        /// The turn.
        turn: u64,
        /// The estimated tokens of the conversation that did not fit.
        estimated_tokens: u64,
        /// The budget it was compacted to, in estimated tokens.
        budget_tokens: u64,
        /// Tool calls of the turn replaced by the digest.
        digested_calls: usize,
        /// Entries (records of a wake, workers of the goal) left out of
        /// the opening message.
        omitted: usize,
        /// Whether the model's provider reported the overflow (rather than
        /// the estimate).
        reported: bool,
    },
}

/// A finished graph.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SuperviseOutcome {
    /// The graph.
    pub graph_id: String,
    /// The records the supervisor finished with.
    pub result_ids: Vec<String>,
    /// Why it finished.
    pub reason: String,
    /// The result records, in `result_ids` order.
    pub results: Vec<Value>,
    /// Supervisor turns taken, over all processes.
    pub turns: u64,
}

/// Why supervising failed.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    /// The store failed, or refused an operation the supervisor relies on.
    #[error("storage: {0}")]
    Store(#[from] StoreFailure),
    /// The supervisor's model failed (after the client's retries), on
    /// every attempt of a wake.
    #[error("supervisor model call failed: {0}")]
    Llm(#[from] LlmError),
    /// `--resume` of a graph this database does not hold.
    #[error("no supervised agent graph {0}")]
    UnknownGraph(String),
    /// A graph id the tools would refuse (empty, longer than 256 UTF-16
    /// units, surrounding whitespace or control characters).
    #[error(
        "invalid agent graph id {0:?}: 1 to 256 characters, no surrounding whitespace, no control characters"
    )]
    InvalidGraphId(String),
    /// The supervisor took too many turns, or stopped with nothing pending
    /// and did not finish.
    #[error(transparent)]
    Stalled(Stall),
    /// Running work failed in the host.
    #[error("coordinator: {0}")]
    Coordinator(#[from] crate::WaveError),
    /// A supervisor turn's conversation did not fit the context even after
    /// its one compaction.
    #[error(
        "agent graph {graph}: supervisor turn {turn}: {source}; raise [controller].context_budget_tokens if the model's context allows"
    )]
    ContextOverflow {
        /// The agent graph.
        graph: String,
        /// The supervisor turn.
        turn: u64,
        /// Why the conversation does not fit.
        source: crate::ContextError,
    },
}

/// Why the supervisor gave up on a graph, under [`SuperviseError::Stalled`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Stall {
    /// `supervise` of a graph id the database already holds.
    #[error("agent graph {graph} already exists; continue it with --resume {graph}")]
    Exists {
        /// The agent graph.
        graph: String,
    },
    /// The supervisor took `limit` turns without finishing.
    #[error(
        "agent graph {graph}: the supervisor took {turns} turns without finishing (limit {limit})"
    )]
    TurnLimit {
        /// The agent graph.
        graph: String,
        /// The turns taken.
        turns: u64,
        /// [`SupervisorOptions::max_turns`].
        limit: u64,
    },
    /// The supervisor stopped, again, with nothing pending and no finish.
    #[error("agent graph {graph}: the supervisor stopped without finishing and nothing is pending")]
    NothingPending {
        /// The agent graph.
        graph: String,
    },
    /// Every delivery attempt of a wake failed.
    #[error("agent graph {graph}: wake {wake} could not be delivered in {attempts} attempts")]
    Undelivered {
        /// The agent graph.
        graph: String,
        /// The wake.
        wake: String,
        /// [`SupervisorOptions::max_wake_attempts`].
        attempts: u32,
    },
}

/// What failed in the store, under [`SuperviseError::Store`].
#[derive(Debug, thiserror::Error)]
pub enum StoreFailure {
    /// Reading or writing the supervisor's own rows failed.
    #[error(transparent)]
    Runs(#[from] SupervisorRunsError),
    /// The agent-graph store refused or failed an operation.
    #[error(transparent)]
    AgentGraphs(#[from] ControlError),
    /// The graph's projection could not be read.
    #[error(transparent)]
    Projection(#[from] ToolFailure),
    /// A blocking store task panicked or was cancelled.
    #[error("{what} task failed: {source}")]
    Task {
        /// Which task.
        what: &'static str,
        /// Why it did not finish.
        source: tokio::task::JoinError,
    },
    /// A closed agent graph holds no finish record: the store was damaged.
    #[error("agent graph {0} is closed but has no finish")]
    NoFinish(String),
}

impl From<SupervisorRunsError> for SuperviseError {
    fn from(e: SupervisorRunsError) -> Self {
        SuperviseError::Store(e.into())
    }
}

impl From<ControlError> for SuperviseError {
    fn from(e: ControlError) -> Self {
        SuperviseError::Store(e.into())
    }
}

impl From<ToolFailure> for SuperviseError {
    fn from(e: ToolFailure) -> Self {
        SuperviseError::Store(e.into())
    }
}

impl SuperviseError {
    /// A stable code.
    pub fn code(&self) -> &'static str {
        match self {
            SuperviseError::Store(_) => "storage",
            SuperviseError::Llm(e) => e.code(),
            SuperviseError::UnknownGraph(_) | SuperviseError::InvalidGraphId(_) => "invalid_input",
            SuperviseError::Stalled(_) => "supervisor_stalled",
            SuperviseError::Coordinator(_) => "coordinator",
            SuperviseError::ContextOverflow { .. } => "context_overflow",
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn one_line(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let mut s: String = flat.chars().take(max).collect();
    s.push('…');
    s
}

/// The first supervisor message of a graph, in parts: the goal, and its
/// list is the workers.
fn first_brief(graph_id: &str, goal: &str, registry: &Registry, agents: &AgentConfig) -> Brief {
    let mut presets: Vec<_> = registry.graph_tools();
    presets.sort_by(|a, b| a.name().cmp(b.name()));
    let mut items: Vec<String> = presets
        .iter()
        .map(|t| {
            format!(
                "- subagentId \"{}\" (one graph): {}\n",
                t.name(),
                one_line(t.description(), 200)
            )
        })
        .collect();
    items.extend(agents.agents.iter().map(|(id, profile)| {
        format!(
            "- agentId \"{id}\" (a routing agent): {}\n",
            profile
                .description
                .as_deref()
                .unwrap_or("routes its instruction to a graph")
        )
    }));
    Brief {
        head: format!(
            "Goal: {goal}\n\nYou supervise agent graph {graph_id}. Workers you can schedule:\n"
        ),
        items,
        empty: "",
        tail: "\nSchedule work with update_agent_graph, then end your turn with yield_agent_graph. When the results are in, finish the graph with their record ids.".to_owned(),
        kind: "workers",
        hint: "the ones listed are the first by name, presets before agents",
    }
}

/// The message of a wake, in parts: its list is the records written since
/// the wake was claimed.
fn wake_brief(graph_id: &str, records: &[GraphRecord], pending: usize) -> Brief {
    let items = records
        .iter()
        .map(|r| {
            format!(
                "- {} (work {}, operator {}, {}): {}\n",
                r.record_id,
                r.work_id.as_deref().unwrap_or("-"),
                r.operator_id,
                r.outcome
                    .map_or("record", sandgraph_controller::RecordOutcome::as_str),
                one_line(&r.summary, 500)
            )
        })
        .collect();
    Brief {
        head: format!("Agent graph {graph_id}: the wave settled. New records:\n"),
        items,
        empty: "none\n",
        tail: format!(
            "{pending} work items are still pending. Use view_agent_graph to inspect, update_agent_graph to schedule more or to finish with result ids, yield_agent_graph to wait."
        ),
        kind: "records",
        hint: "these are the first ones; view_agent_graph lists every record, paging with nextCursor",
    }
}

/// How a supervisor turn ended.
#[derive(Debug, PartialEq)]
enum TurnEnd {
    Yielded,
    Finished,
    Stopped,
}

/// Drives agent graphs to their end.
pub struct Supervisor {
    store: Store,
    registry: Registry,
    provider: Arc<dyn Provider>,
    agents: AgentConfig,
    options: SupervisorOptions,
    coordinator: Coordinator,
    on_event: Option<EventSink>,
}

type EventSink = Arc<dyn Fn(&Event) + Send + Sync>;

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// A supervisor keeping its state in `store`.
    pub fn new(
        store: Store,
        registry: Registry,
        provider: Arc<dyn Provider>,
        agents: AgentConfig,
        options: SupervisorOptions,
        journal: bool,
    ) -> Self {
        let coordinator = Coordinator::new(
            store.agent_graphs(),
            registry.clone(),
            provider.clone(),
            agents.clone(),
            CoordinatorOptions {
                max_new_activations: options.max_new_activations,
                model: options.model.clone(),
                journal: journal.then(|| sandgraph_router::Journal::open(&store)),
                threads: Some(store.threads()),
            },
        );
        Supervisor {
            store,
            registry,
            provider,
            agents,
            options,
            coordinator,
            on_event: None,
        }
    }

    /// Calls `f` with every [`Event`].
    pub fn on_event(mut self, f: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.on_event = Some(Arc::new(f));
        self
    }

    fn emit(&self, e: Event) {
        if let Some(f) = &self.on_event {
            f(&e);
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> T + Send + 'static,
    ) -> Result<T, SuperviseError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|source| {
                SuperviseError::Store(StoreFailure::Task {
                    what: "store",
                    source,
                })
            })
    }

    /// Starts a new agent graph for `goal` (id `graph_id`, or a fresh one)
    /// and drives it to its end.
    ///
    /// # Errors
    ///
    /// See [`SuperviseError`]. The graph stays in the store and
    /// [`Supervisor::resume`] continues it.
    pub async fn start(
        &self,
        goal: &str,
        graph_id: Option<String>,
    ) -> Result<SuperviseOutcome, SuperviseError> {
        let now = now_ms();
        let graph_id = graph_id.unwrap_or_else(|| {
            format!(
                "agent_graph_{}",
                &stable_hash32(&json!({"goal": goal, "at": now, "pid": std::process::id()}))[..16]
            )
        });
        if !sandgraph_controller::rules::is_identity(&graph_id) {
            return Err(SuperviseError::InvalidGraphId(graph_id));
        }
        let run = SupervisorRun {
            graph_id: graph_id.clone(),
            goal: goal.to_owned(),
            root_session_id: format!("supervisor_{graph_id}"),
            turns: 0,
            model: self.options.model.clone(),
            created_at: now,
            updated_at: now,
        };
        let (_, created) = self
            .blocking(move |s| SupervisorRuns::open(s).create(&run))
            .await??;
        if !created {
            return Err(SuperviseError::Stalled(Stall::Exists { graph: graph_id }));
        }
        self.resume(&graph_id).await
    }

    /// Continues the agent graph `graph_id` where it stopped: unfinished
    /// work runs (again, when a crash cut it), finished work never does,
    /// and the pending wake is delivered.
    ///
    /// # Errors
    ///
    /// See [`SuperviseError`].
    pub async fn resume(&self, graph_id: &str) -> Result<SuperviseOutcome, SuperviseError> {
        let g = graph_id.to_owned();
        let run = self
            .blocking(move |s| SupervisorRuns::open(s).get(&g))
            .await??
            .ok_or_else(|| SuperviseError::UnknownGraph(graph_id.to_owned()))?;
        let tools = AgentGraphTools::new(self.store.agent_graphs(), run.root_session_id.clone());
        let mut stalls = 0;
        loop {
            let projection = self.snapshot(&tools, graph_id).await?;
            if projection.closed() {
                return self.finished(&run, &projection).await;
            }
            let turns = self.turns(graph_id).await?;
            if turns >= self.options.max_turns {
                return Err(SuperviseError::Stalled(Stall::TurnLimit {
                    graph: graph_id.to_owned(),
                    turns,
                    limit: self.options.max_turns,
                }));
            }
            if projection.requested().next().is_some() {
                let report = self
                    .coordinator
                    .run_wave(graph_id)
                    .await
                    .map_err(SuperviseError::Coordinator)?;
                let progressed = !report.records.is_empty();
                self.emit(Event::Wave {
                    records: report.records,
                });
                if progressed {
                    stalls = 0;
                    continue;
                }
            }
            let g = graph_id.to_owned();
            let wakes = self
                .blocking(move |s| s.agent_graphs().list_unsettled_supervisor_wakes(Some(&g)))
                .await??;
            if let Some(wake) = wakes.into_iter().next() {
                self.deliver(&tools, &run, &projection, wake).await?;
                stalls = 0;
                continue;
            }
            // No wake to deliver: the graph is new, or the supervisor ended a
            // turn without yielding, or a crash cut the turn before its
            // yield. Nothing scheduled yet: give the goal (again); otherwise
            // report the records since the last delivered wake.
            stalls += 1;
            if stalls > 2 {
                return Err(SuperviseError::Stalled(Stall::NothingPending {
                    graph: graph_id.to_owned(),
                }));
            }
            let brief = if projection.revision() == 0 {
                first_brief(graph_id, &run.goal, &self.registry, &self.agents)
            } else {
                let g = graph_id.to_owned();
                let since = self
                    .blocking(move |s| s.agent_graphs().list_supervisor_wakes(&g))
                    .await??
                    .iter()
                    .filter(|w| w.status == WakeStatus::Delivered)
                    .map(|w| w.updated_at)
                    .max()
                    .unwrap_or(0);
                let records: Vec<GraphRecord> = projection
                    .records()
                    .iter()
                    .filter(|r| r.emitted_at >= since)
                    .cloned()
                    .collect();
                wake_brief(graph_id, &records, projection.requested().count())
            };
            self.turn(&tools, &run, brief).await?;
        }
    }

    async fn snapshot(
        &self,
        tools: &AgentGraphTools,
        graph_id: &str,
    ) -> Result<Projection, SuperviseError> {
        let (t, g) = (tools.clone(), graph_id.to_owned());
        tokio::task::spawn_blocking(move || t.snapshot(&g))
            .await
            .map_err(|source| {
                SuperviseError::Store(StoreFailure::Task {
                    what: "snapshot",
                    source,
                })
            })?
            .map_err(SuperviseError::from)
    }

    async fn turns(&self, graph_id: &str) -> Result<u64, SuperviseError> {
        let g = graph_id.to_owned();
        Ok(self
            .blocking(move |s| SupervisorRuns::open(s).get(&g))
            .await??
            .map_or(0, |r| r.turns))
    }

    async fn finished(
        &self,
        run: &SupervisorRun,
        projection: &Projection,
    ) -> Result<SuperviseOutcome, SuperviseError> {
        // A finish supersedes pending wakes.
        let (root, g) = (run.root_session_id.clone(), run.graph_id.clone());
        self.blocking(move |s| {
            s.agent_graphs().supersede_supervisor_wakes(
                &[root.as_str()],
                Some(&[g.as_str()]),
                "graph finished",
            )
        })
        .await??;
        let finish = projection
            .finish()
            .ok_or_else(|| SuperviseError::Store(StoreFailure::NoFinish(run.graph_id.clone())))?;
        let results = finish
            .result_ids
            .iter()
            .filter_map(|id| projection.records().iter().find(|r| &r.record_id == id))
            .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
            .collect();
        Ok(SuperviseOutcome {
            graph_id: run.graph_id.clone(),
            result_ids: finish.result_ids.clone(),
            reason: finish.reason.clone(),
            results,
            turns: self.turns(&run.graph_id).await?,
        })
    }

    /// Delivers `wake`: a supervisor turn whose message lists the records
    /// written since the wake was claimed. Retried with backoff up to the
    /// attempt limit.
    async fn deliver(
        &self,
        tools: &AgentGraphTools,
        run: &SupervisorRun,
        projection: &Projection,
        wake: SupervisorWake,
    ) -> Result<(), SuperviseError> {
        let graph_id = &run.graph_id;
        // An attempt left running by a crash failed.
        if wake.status == WakeStatus::Running
            && let Some(attempt) = wake.current_attempt_id.clone()
        {
            let reason = Some("interrupted: the host stopped during delivery".to_owned());
            self.complete_attempt(
                graph_id,
                &wake.wake_id,
                attempt,
                AttemptStatus::RetryableFailed,
                reason,
            )
            .await??;
        }
        let records: Vec<GraphRecord> = projection
            .records()
            .iter()
            .filter(|r| r.emitted_at >= wake.created_at)
            .cloned()
            .collect();
        let pending = projection.requested().count();
        let brief = wake_brief(graph_id, &records, pending);
        let mut index = u64::from(wake.attempt_count);
        loop {
            let attempt_id = graph_wake_attempt_id(&wake.wake_id, index);
            if !self
                .begin_attempt(graph_id, &wake.wake_id, &attempt_id)
                .await?
            {
                return Ok(());
            }
            let outcome = self.turn(tools, run, brief.clone()).await;
            let (status, reason) = attempt_status(&outcome);
            let completed = self
                .complete_attempt(graph_id, &wake.wake_id, attempt_id, status, reason)
                .await?;
            // Refused when a finish during the turn superseded the wake, which
            // is expected: logged only.
            if let Err(refused) = completed {
                tracing::debug!("wake attempt completion: {refused}");
            }
            match outcome {
                Ok(_) => {
                    self.emit(Event::WakeDelivered {
                        wake_id: wake.wake_id.clone(),
                    });
                    return Ok(());
                }
                Err(SuperviseError::Llm(e)) => {
                    index += 1;
                    if index >= u64::from(self.options.max_wake_attempts) {
                        return Err(SuperviseError::Llm(e));
                    }
                    let retry = u32::try_from(index).unwrap_or(u32::MAX);
                    tokio::time::sleep(self.options.wake_retry_delay(retry)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Begins delivery attempt `attempt_id` of a wake; `false` when the
    /// wake needs no more delivery. A wake whose attempts are used up is
    /// exhausted and the graph stalled.
    async fn begin_attempt(
        &self,
        graph_id: &str,
        wake_id: &str,
        attempt_id: &str,
    ) -> Result<bool, SuperviseError> {
        let (g, w, a, max) = (
            graph_id.to_owned(),
            wake_id.to_owned(),
            attempt_id.to_owned(),
            self.options.max_wake_attempts,
        );
        let begun = self
            .blocking(move |s| {
                s.agent_graphs()
                    .begin_supervisor_wake_attempt(&g, &w, &a, &a, Some(max))
            })
            .await??;
        if begun.acquired {
            return Ok(true);
        }
        if begun.wake.status == WakeStatus::RetryableFailed {
            let (g, w) = (graph_id.to_owned(), wake_id.to_owned());
            self.blocking(move |s| {
                s.agent_graphs()
                    .exhaust_supervisor_wake(&g, &w, "every delivery attempt failed")
            })
            .await??;
            return Err(SuperviseError::Stalled(Stall::Undelivered {
                graph: graph_id.to_owned(),
                wake: wake_id.to_owned(),
                attempts: self.options.max_wake_attempts,
            }));
        }
        Ok(false)
    }

    /// Completes a wake's delivery attempt with `status`; the inner error
    /// is the store's refusal.
    async fn complete_attempt(
        &self,
        graph_id: &str,
        wake_id: &str,
        attempt_id: String,
        status: AttemptStatus,
        reason: Option<String>,
    ) -> Result<Result<(), ControlError>, SuperviseError> {
        let (g, w) = (graph_id.to_owned(), wake_id.to_owned());
        let completed = self
            .blocking(move |s| {
                s.agent_graphs().complete_supervisor_wake_attempt(
                    &g,
                    &w,
                    &attempt_id,
                    status,
                    reason.as_deref(),
                )
            })
            .await?;
        Ok(completed.map(drop))
    }

    /// One supervisor turn: model calls and tool calls until the model
    /// yields, finishes the graph or stops calling tools. The turn opens
    /// with `brief`; its conversation is kept under the context budget
    /// ([`Supervisor::ask`]).
    async fn turn(
        &self,
        tools: &AgentGraphTools,
        run: &SupervisorRun,
        brief: Brief,
    ) -> Result<TurnEnd, SuperviseError> {
        let g = run.graph_id.clone();
        let turn = self
            .blocking(move |s| SupervisorRuns::open(s).next_turn(&g, now_ms()))
            .await??;
        self.emit(Event::Turn { turn });
        let mut conversation = Conversation::new(
            self.options.model.clone(),
            tool_specs(),
            self.system_prompt(),
            brief,
            self.options.context_budget_tokens,
        );
        for _ in 0..self.options.max_turn_steps {
            let response = self.ask(&mut conversation, run, turn).await?;
            if response.tool_calls.is_empty() {
                return Ok(TurnEnd::Stopped);
            }
            conversation.push(Message::Assistant {
                content: response.content.clone(),
                tool_calls: response.tool_calls.clone(),
            });
            let mut end = None;
            for call in response.tool_calls {
                let identity = CallIdentity {
                    session_id: run.root_session_id.clone(),
                    last_turn: turn,
                    tool_call_id: call.id.clone(),
                };
                let text = call_tool(tools, &call, identity, &mut end).await?;
                self.emit(Event::ToolCall {
                    tool: call.name.clone(),
                    result: text.lines().next().unwrap_or("").to_owned(),
                });
                conversation.push(Message::Tool {
                    tool_call_id: call.id,
                    content: text,
                });
            }
            if let Some(end) = end {
                return Ok(end);
            }
        }
        Ok(TurnEnd::Stopped)
    }

    /// The model's next answer in `conversation`: compacted once first
    /// when it is over the context budget, or again asked compacted when
    /// the provider refuses it as over the model's context (seed §2.11).
    /// Still too long after its compaction: [`SuperviseError::ContextOverflow`].
    async fn ask(
        &self,
        conversation: &mut Conversation,
        run: &SupervisorRun,
        turn: u64,
    ) -> Result<ChatResponse, SuperviseError> {
        let overflow = |source| SuperviseError::ContextOverflow {
            graph: run.graph_id.clone(),
            turn,
            source,
        };
        // At most two rounds: a second refusal finds the conversation
        // compacted already and is an error.
        loop {
            if let Some(compaction) = conversation.fit().map_err(overflow)? {
                self.compacted(turn, compaction);
            }
            match self.provider.chat(&conversation.request()).await {
                Err(e) if e.is_context_overflow() => {
                    let compaction = conversation.refused(&e).map_err(overflow)?;
                    self.compacted(turn, compaction);
                }
                answer => return Ok(answer?),
            }
        }
    }

    fn compacted(&self, turn: u64, c: Compaction) {
        tracing::info!(
            turn,
            estimated_tokens = c.estimated_tokens,
            budget_tokens = c.budget_tokens,
            digested_calls = c.digested_calls,
            omitted = c.omitted,
            reported = c.reported,
            "supervisor conversation compacted"
        );
        self.emit(Event::Compacted {
            turn,
            estimated_tokens: c.estimated_tokens,
            budget_tokens: c.budget_tokens,
            digested_calls: c.digested_calls,
            omitted: c.omitted,
            reported: c.reported,
        });
    }

    /// The supervisor's system message: the configured text (or the
    /// default) and the agent-graph prompt section.
    fn system_prompt(&self) -> String {
        let mut system = self.options.system_prompt.clone().unwrap_or_else(|| {
            "You are the supervisor of an agent graph: you plan work, schedule it on workers and finish the graph with the results.".to_owned()
        });
        system.push_str("\n\n");
        system.push_str(&prompt_section(true).text);
        system
    }
}

/// The agent-graph tools as the supervisor model sees them.
fn tool_specs() -> Vec<ToolSpec> {
    tool_defs()
        .into_iter()
        .map(|d| ToolSpec {
            name: d.name,
            description: d.description,
            parameters: d.parameters,
        })
        .collect()
}

/// Runs one tool call of the supervisor model; returns the text the model
/// gets back, and notes in `end` a yield or a finish of the graph.
async fn call_tool(
    tools: &AgentGraphTools,
    call: &ToolCall,
    identity: CallIdentity,
    end: &mut Option<TurnEnd>,
) -> Result<String, SuperviseError> {
    let arguments = if call.arguments.trim().is_empty() {
        "{}"
    } else {
        &call.arguments
    };
    let args = match serde_json::from_str::<Value>(arguments) {
        Err(e) => {
            return Ok(format!(
                "[invalid_input] the arguments are not valid JSON: {e}"
            ));
        }
        Ok(args) => args,
    };
    let (t, name) = (tools.clone(), call.name.clone());
    let result = tokio::task::spawn_blocking(move || t.call(&name, args, &identity))
        .await
        .map_err(|source| {
            SuperviseError::Store(StoreFailure::Task {
                what: "tool",
                source,
            })
        })?;
    Ok(match result {
        Ok(r) => {
            if call.name == YIELD_TOOL {
                end.get_or_insert(TurnEnd::Yielded);
            }
            if call.name == UPDATE_TOOL && r.value["graph"]["closed"] == true {
                *end = Some(TurnEnd::Finished);
            }
            r.text
        }
        Err(f) => f.to_string(),
    })
}

/// How a delivery attempt ended, by its turn's outcome: the status and the
/// failure reason.
fn attempt_status(outcome: &Result<TurnEnd, SuperviseError>) -> (AttemptStatus, Option<String>) {
    match outcome {
        Ok(_) => (AttemptStatus::Delivered, None),
        Err(SuperviseError::Llm(e)) => (AttemptStatus::RetryableFailed, Some(e.to_string())),
        Err(e @ SuperviseError::ContextOverflow { .. }) => {
            (AttemptStatus::RetryableFailed, Some(e.to_string()))
        }
        Err(_) => (
            AttemptStatus::RetryableFailed,
            Some("the turn failed".to_owned()),
        ),
    }
}
