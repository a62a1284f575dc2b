//! Runs requested work: one claim per work item, exactly once; one record
//! per outcome.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use sandgraph_controller::ids::{
    graph_claim_id, graph_edge_id, graph_operator_id, graph_provision_id, graph_record_id,
    stable_hash, stable_hash32,
};
use sandgraph_controller::{
    AGENT_GRAPH_SCHEMA_VERSION, AdmissionStatus, AgentGraphStore, ControlError, ControlErrorCode,
    GraphRecord, IntentClaimRequest, LeaseOutcome, OperatorEdge, Projection, ProvisionRequest,
    RecordFacet, RecordOutcome, RecordSource, TargetKind, ToolFailure, WorkEntry, WorkStatus,
    WorkTarget,
};
use sandgraph_llm::Provider;
use sandgraph_registry::Registry;
use sandgraph_router::{
    AgentConfig, Fallback, GraphRoutingAgent, RouteOptions, RouterOptions, ToolFilter,
};
use serde_json::json;

/// How often a running work item's claim is looked at, so a stop or a
/// replacement committed by any host cancels the run within about this.
const CANCEL_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// Work items run at once when nothing else is configured (the seed's
/// host default).
pub const DEFAULT_MAX_NEW_ACTIVATIONS: usize = 4;

/// The longest record summary, in characters. Summaries go back to the
/// supervisor in its wake message and views; the full result stays in the
/// journal.
const MAX_SUMMARY_CHARS: usize = 4000;

/// How the coordinator runs work.
#[derive(Debug, Clone)]
pub struct CoordinatorOptions {
    /// Work items run at once.
    pub max_new_activations: usize,
    /// The model of `new_preset` work and of agent profiles without one.
    pub model: String,
    /// Where the routing attempts of every work item are recorded.
    pub journal: Option<sandgraph_router::Journal>,
    /// Durable threads of the operators: each operator's graphs run on
    /// threads of its own, so `operatorId` work continues their state.
    pub threads: Option<sandgraph_store::ThreadStore>,
}

/// What one wave did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WaveReport {
    /// The records written, in completion order.
    pub records: Vec<GraphRecord>,
    /// Work ids not run by this wave: cancelled, claimed by another
    /// activation, leased by another host, recorded meanwhile, or their
    /// lease was lost before the record.
    pub skipped: Vec<String>,
}

/// Why a wave stopped before all its work settled.
#[derive(Debug, thiserror::Error)]
pub enum WaveError {
    /// The store refused or failed an operation the wave needed.
    #[error("[{}] {}", .0.code, .0.message)]
    Store(#[from] ControlError),
    /// The graph's stored state does not fold into a projection.
    #[error("{0}")]
    Projection(#[from] ToolFailure),
    /// A blocking store task panicked or was cancelled.
    #[error("store task failed: {0}")]
    Task(String),
    /// The host's run slots are closed: it is shutting down.
    #[error("the host's run slots are closed")]
    SlotsClosed,
}

impl WaveError {
    /// The store's code, when the store refused.
    fn code(&self) -> Option<ControlErrorCode> {
        match self {
            WaveError::Store(e) => Some(e.code),
            _ => None,
        }
    }
}

/// How one work item of a wave ended.
enum WorkOutcome {
    /// Its record was written.
    Recorded(Box<GraphRecord>),
    /// Not run here: cancelled, finished graph, claimed differently, leased
    /// by another host, already recorded, or its lease was lost.
    Skipped,
}

/// Runs the requested work of agent graphs. Cheap to clone.
#[derive(Clone)]
pub struct Coordinator {
    inner: Arc<Inner>,
}

struct Inner {
    graphs: AgentGraphStore,
    registry: Registry,
    provider: Arc<dyn Provider>,
    agents: AgentConfig,
    options: CoordinatorOptions,
    journal: Option<sandgraph_router::Journal>,
    threads: Option<sandgraph_store::ThreadStore>,
    /// One wave per process at a time: a drive requested while a wave runs
    /// waits and then sees the new work.
    wave: tokio::sync::Mutex<()>,
    /// The host's run slots, when work counts under a server's run limit:
    /// each work item waits for one before it starts.
    run_slots: std::sync::OnceLock<Arc<tokio::sync::Semaphore>>,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn bounded(text: &str) -> String {
    if text.chars().count() <= MAX_SUMMARY_CHARS {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(MAX_SUMMARY_CHARS).collect();
    s.push('…');
    s
}

/// Aborts a task when dropped (also when its owner returns early).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The operator of a work item, or the unknown one it names.
enum Worker {
    Known(Operator),
    /// An `operatorId` target with no provision: the work fails.
    Unknown(String),
}

/// The provision of the operator `work` creates (`new_agent`/`new_preset`),
/// with an edge from each of `feeders` (the operators of its input
/// records) to it.
fn provision_request(
    graph_id: &str,
    work: &WorkEntry,
    revision: u64,
    feeders: &[String],
) -> ProvisionRequest {
    let target = &work.work().target;
    let operator_id = graph_operator_id(graph_id, work.work_id());
    let edges = feeders
        .iter()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|from| OperatorEdge {
            edge_id: graph_edge_id(graph_id, from, &operator_id),
            from_operator_id: from.clone(),
            to_operator_id: operator_id.clone(),
        })
        .collect();
    let session = format!(
        "operator_session_{}",
        stable_hash32(&json!({"graphId": graph_id, "operatorId": operator_id}))
    );
    ProvisionRequest {
        provision_id: graph_provision_id(graph_id, work.work_id()),
        graph_id: graph_id.to_owned(),
        work_id: work.work_id().to_owned(),
        operator_id: operator_id.clone(),
        target: target.clone(),
        target_session_id: session,
        initial_turn_id: "operator_turn_1".to_owned(),
        initial_run_id: "operator_run_1".to_owned(),
        provision_fingerprint: stable_hash(&json!({
            "workId": work.work_id(),
            "operatorId": operator_id,
            "target": {"kind": target.kind.as_str(), "id": target.id},
        })),
        edges,
        expected_schedule_revision: revision,
    }
}

/// The claim of `work` by `worker`: the run and turn ids are hashes of
/// the graph and intent, so a retry claims the same activation.
fn claim_request(graph_id: &str, work: &WorkEntry, worker: &Worker) -> IntentClaimRequest {
    let intent_id = work.intent_id().to_owned();
    let run_id = format!(
        "operator_run_{}",
        stable_hash32(&json!({"graphId": graph_id, "intentId": intent_id}))
    );
    let (operator_id, session) = match worker {
        Worker::Known(op) => (op.id.clone(), op.session.clone()),
        // A work item naming an unknown operator still gets a claim and a
        // failed record, so it ends.
        Worker::Unknown(_) => (work.work().target.id.clone(), format!("unknown_{run_id}")),
    };
    IntentClaimRequest {
        schema_version: AGENT_GRAPH_SCHEMA_VERSION,
        claim_id: graph_claim_id(graph_id, &intent_id),
        graph_id: graph_id.to_owned(),
        intent_id,
        intent_fingerprint: stable_hash(&serde_json::to_value(work.work()).unwrap_or_default()),
        readiness_context_fingerprint: stable_hash(&json!({"inputIds": work.work().input_ids})),
        target_operator_id: operator_id,
        target_session_id: session,
        target_turn_id: run_id.replace("operator_run_", "operator_turn_"),
        target_run_id: run_id,
    }
}

/// The terminal record of a claimed work item.
fn terminal_record(
    record_id: String,
    claim: &IntentClaimRequest,
    work: &WorkEntry,
    outcome: RecordOutcome,
    summary: &str,
    evidence: Vec<String>,
) -> GraphRecord {
    GraphRecord {
        record_id,
        graph_id: claim.graph_id.clone(),
        operator_id: claim.target_operator_id.clone(),
        work_id: Some(work.work_id().to_owned()),
        source: RecordSource {
            session_id: claim.target_session_id.clone(),
            run_id: claim.target_run_id.clone(),
            turn_id: Some(claim.target_turn_id.clone()),
            runtime_event_id: Some("terminal".to_owned()),
            seq: 0,
        },
        summary: bounded(summary),
        facets: vec![RecordFacet::Terminal],
        outcome: Some(outcome),
        evidence_refs: evidence,
        emitted_at: now_ms(),
    }
}

/// A work item this host claimed, leased and began.
struct Started {
    worker: Worker,
    claim: IntentClaimRequest,
    /// The id of its terminal record.
    record_id: String,
    /// The fencing token of its lease.
    token: u64,
}

/// Who runs a work item.
struct Operator {
    id: String,
    session: String,
    target: WorkTarget,
}

impl Coordinator {
    /// A coordinator over `graphs`, running work on the tools of
    /// `registry` with models from `provider`.
    pub fn new(
        graphs: AgentGraphStore,
        registry: Registry,
        provider: Arc<dyn Provider>,
        agents: AgentConfig,
        options: CoordinatorOptions,
    ) -> Self {
        Coordinator {
            inner: Arc::new(Inner {
                graphs,
                registry,
                provider,
                agents,
                journal: options.journal.clone(),
                threads: options.threads.clone(),
                options,
                wave: tokio::sync::Mutex::new(()),
                run_slots: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Makes every work item wait for one of `slots` (e.g. the run slots
    /// of the MCP server whose update tool starts the waves) and hold it
    /// while it runs, so waves count under the same limit as the calls that start
    /// them. Set once; later calls are ignored.
    pub fn count_runs_under(&self, slots: Arc<tokio::sync::Semaphore>) {
        let _ = self.inner.run_slots.set(slots);
    }

    /// Runs every requested work item of `graph_id` that has no record yet
    /// (at most `max_new_activations` at once) and returns when all have
    /// settled. Each item runs under the lease of its claim
    /// ([`AgentGraphStore::lease_intent`]): work another host's live lease
    /// holds is left to it, and the outcome is recorded only while this
    /// host still holds the lease, so with several hosts on one store each
    /// item runs to exactly one record. Work whose holder died without a
    /// record (a crash) runs again once its lease has expired (on redb, at
    /// once); work with a record never does. A stop or a replacement of a
    /// running item, committed through any host, cancels its claim: the
    /// run is cancelled within about 200 ms and recorded `cancelled`.
    ///
    /// # Errors
    ///
    /// Store errors (a refused work item is skipped, not an error), and
    /// closed run slots.
    pub async fn run_wave(&self, graph_id: &str) -> Result<WaveReport, WaveError> {
        let _wave = self.inner.wave.lock().await;
        let projection = self.snapshot(graph_id).await?;
        if projection.closed() {
            return Ok(WaveReport::default());
        }
        let graphs = &self.inner.graphs;
        let pending: Vec<WorkEntry> = projection
            .requested()
            .filter(|w| {
                projection.claim_of(w.work_id()).is_none_or(|c| {
                    c.admission_status != AdmissionStatus::Cancelled && !graphs.held_elsewhere(c)
                })
            })
            .cloned()
            .collect();
        let revision = projection.revision();
        let limit = self.inner.options.max_new_activations.max(1);
        let results: Vec<(String, Result<WorkOutcome, WaveError>)> =
            futures::stream::iter(pending.into_iter().map(|work| {
                let this = self.clone();
                let graph = graph_id.to_owned();
                async move {
                    // Boxed: the run's future nests the executor's deep
                    // enough that laying out the wave's stream (inline)
                    // can overflow rustc's query depth in callers' crates,
                    // depending on what incremental compilation cached.
                    let outcome = Box::pin(this.run_in_slot(&graph, &work, revision)).await;
                    (work.work_id().to_owned(), outcome)
                }
            }))
            .buffer_unordered(limit)
            .collect()
            .await;
        let mut report = WaveReport::default();
        for (work_id, outcome) in results {
            match outcome? {
                WorkOutcome::Recorded(record) => report.records.push(*record),
                WorkOutcome::Skipped => report.skipped.push(work_id),
            }
        }
        Ok(report)
    }

    /// [`Self::run_work`] once one of the host's run slots is free (when
    /// work counts under them).
    async fn run_in_slot(
        &self,
        graph_id: &str,
        work: &WorkEntry,
        revision: u64,
    ) -> Result<WorkOutcome, WaveError> {
        let _slot = match self.inner.run_slots.get() {
            Some(slots) => Some(
                slots
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| WaveError::SlotsClosed)?,
            ),
            None => None,
        };
        self.run_work(graph_id, work, revision).await
    }

    async fn snapshot(&self, graph_id: &str) -> Result<Projection, WaveError> {
        let graphs = self.inner.graphs.clone();
        let graph = graph_id.to_owned();
        tokio::task::spawn_blocking(move || Projection::load(&graphs, &graph))
            .await
            .map_err(|e| WaveError::Task(e.to_string()))?
            .map_err(WaveError::from)
    }

    /// A store call off the async threads (every write is durable, and
    /// blocks).
    async fn store<T: Send + 'static>(
        &self,
        f: impl FnOnce(&AgentGraphStore) -> Result<T, ControlError> + Send + 'static,
    ) -> Result<T, WaveError> {
        let graphs = self.inner.graphs.clone();
        tokio::task::spawn_blocking(move || f(&graphs))
            .await
            .map_err(|e| WaveError::Task(e.to_string()))?
            .map_err(WaveError::from)
    }

    /// Who runs `work`: the stored operator it names, or the one it
    /// provisions (adopted on retry).
    async fn operator(
        &self,
        graph_id: &str,
        work: &WorkEntry,
        revision: u64,
    ) -> Result<Worker, WaveError> {
        let target = work.work().target.clone();
        if target.kind == TargetKind::Operator {
            let (g, op) = (graph_id.to_owned(), target.id.clone());
            let found = self
                .store(move |s| s.read_provision_by_operator(&g, &op))
                .await?;
            return Ok(match found {
                Some(p) => Worker::Known(Operator {
                    id: p.operator_id,
                    session: p.target_session_id,
                    target: p.target,
                }),
                None => Worker::Unknown(target.id),
            });
        }
        let (g, inputs) = (graph_id.to_owned(), work.work().input_ids.clone());
        let feeders = self
            .store(move |s| {
                let mut operators = Vec::new();
                for input in &inputs {
                    if let Some(record) = s.read_record(&g, input)? {
                        operators.push(record.operator_id);
                    }
                }
                Ok(operators)
            })
            .await?;
        let request = provision_request(graph_id, work, revision, &feeders);
        let p = self.store(move |s| s.provision_operator(request)).await?;
        Ok(Worker::Known(Operator {
            id: p.provision.operator_id,
            session: p.provision.target_session_id,
            target: p.provision.target,
        }))
    }

    /// Claims, leases, runs and records one work item.
    async fn run_work(
        &self,
        graph_id: &str,
        work: &WorkEntry,
        revision: u64,
    ) -> Result<WorkOutcome, WaveError> {
        match self.start(graph_id, work, revision).await? {
            Some(started) => self.run_started(graph_id, work, started).await,
            None => Ok(WorkOutcome::Skipped),
        }
    }

    /// Provisions, claims, leases and begins `work`; `None` when it is not
    /// this host's to run (see [`WorkOutcome::Skipped`]).
    async fn start(
        &self,
        graph_id: &str,
        work: &WorkEntry,
        revision: u64,
    ) -> Result<Option<Started>, WaveError> {
        let (worker, revision) = match self.operator(graph_id, work, revision).await {
            Ok(w) => (w, revision),
            Err(e) if e.code() == Some(ControlErrorCode::ScheduleRevisionConflict) => {
                let revision = self.current_revision(graph_id).await?;
                (self.operator(graph_id, work, revision).await?, revision)
            }
            Err(e) if e.code() == Some(ControlErrorCode::ScheduleClosed) => return Ok(None),
            Err(e) => return Err(e),
        };
        let claim = claim_request(graph_id, work, &worker);
        if !self.claim(claim.clone(), revision, work).await? {
            return Ok(None);
        }
        let record_id = graph_record_id(
            graph_id,
            &claim.target_operator_id,
            &claim.target_session_id,
            &claim.target_run_id,
            "terminal",
        );
        let (g, i, r) = (
            graph_id.to_owned(),
            claim.intent_id.clone(),
            record_id.clone(),
        );
        let LeaseOutcome::Acquired(lease) = self.store(move |s| s.lease_intent(&g, &i, &r)).await?
        else {
            return Ok(None);
        };
        let (g, i) = (graph_id.to_owned(), claim.intent_id.clone());
        let change = self
            .store(move |s| s.begin_intent_execution(&g, &i))
            .await?;
        if change.state == AdmissionStatus::Cancelled
            || !self.still_wanted(graph_id, work, &claim.intent_id).await?
        {
            return Ok(None);
        }
        Ok(Some(Started {
            worker,
            claim,
            record_id,
            token: lease.token,
        }))
    }

    /// Whether `work` is still requested now that its claim is executing.
    /// A stop or a replacement committed after the wave's snapshot but
    /// before the claim found no claim to cancel: the claim is cancelled
    /// here and the work not run. One committed after this check finds the
    /// claim, and the run's watch cancels the run.
    async fn still_wanted(
        &self,
        graph_id: &str,
        work: &WorkEntry,
        intent_id: &str,
    ) -> Result<bool, WaveError> {
        let now = self.snapshot(graph_id).await?;
        let reason = match now.work_item(work.work_id()).map(WorkEntry::status) {
            Some(WorkStatus::Stopped) => "stopped before it ran",
            Some(WorkStatus::Superseded) => "replaced before it ran",
            _ => return Ok(true),
        };
        let (g, i) = (graph_id.to_owned(), intent_id.to_owned());
        self.store(move |s| s.cancel_intent_execution(&g, &i, reason))
            .await?;
        Ok(false)
    }

    /// Runs a started work item under its lease and records its outcome.
    /// Cancelling its claim (a stop or a replacement) cancels the run, and
    /// the record says `cancelled` with the claim's reason.
    async fn run_started(
        &self,
        graph_id: &str,
        work: &WorkEntry,
        started: Started,
    ) -> Result<WorkOutcome, WaveError> {
        let Started {
            worker,
            claim,
            record_id,
            token,
        } = started;
        let route = RouteOptions::default();
        let (cut, cancel) = (route.cancel.clone(), route.cancel.clone());
        let renewal = AbortOnDrop(self.renew_while_running(graph_id, &claim.intent_id, token));
        let watch = AbortOnDrop(self.cancel_when_claim_cancelled(
            graph_id,
            &claim.intent_id,
            move || cancel.cancel(),
        ));
        let (mut outcome, mut summary, evidence) = match worker {
            Worker::Unknown(id) => (
                RecordOutcome::Failed,
                format!("failed: unknown operator {id}"),
                vec![],
            ),
            Worker::Known(op) => self.execute(graph_id, work, &op, route).await?,
        };
        drop(watch);
        drop(renewal);
        if cut.is_cancelled() {
            outcome = RecordOutcome::Cancelled;
            summary = format!(
                "cancelled: {}",
                self.cancellation_reason(graph_id, &claim.intent_id).await?
            );
        }
        let record = terminal_record(record_id, &claim, work, outcome, &summary, evidence);
        let (r, i) = (record.clone(), claim.intent_id.clone());
        match self
            .store(move |s| s.append_record_leased(r, &i, token))
            .await
        {
            Ok(_) => Ok(WorkOutcome::Recorded(Box::new(record))),
            Err(e) if e.code() == Some(ControlErrorCode::ClaimLeaseLost) => {
                tracing::warn!(
                    graph = graph_id,
                    work = work.work_id(),
                    "outcome not recorded: {e}"
                );
                Ok(WorkOutcome::Skipped)
            }
            Err(e) => Err(e),
        }
    }

    /// Looks at the claim every [`CANCEL_POLL`] until aborted, and calls
    /// `cancel` once it is cancelled (through this host's store or
    /// another's).
    fn cancel_when_claim_cancelled(
        &self,
        graph_id: &str,
        intent_id: &str,
        cancel: impl FnOnce() + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        let (graph, intent) = (graph_id.to_owned(), intent_id.to_owned());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(CANCEL_POLL).await;
                let (g, i) = (graph.clone(), intent.clone());
                match this.store(move |s| s.read_claim(&g, &i)).await {
                    Ok(Some(c)) if c.admission_status == AdmissionStatus::Cancelled => {
                        tracing::info!(graph, intent, "claim cancelled: cancelling its run");
                        cancel();
                        return;
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(graph, intent, "claim not read: {e}"),
                }
            }
        })
    }

    /// Why the claim of `intent_id` was cancelled.
    async fn cancellation_reason(
        &self,
        graph_id: &str,
        intent_id: &str,
    ) -> Result<String, WaveError> {
        let (g, i) = (graph_id.to_owned(), intent_id.to_owned());
        let claim = self.store(move |s| s.read_claim(&g, &i)).await?;
        Ok(claim
            .and_then(|c| c.cancellation_reason)
            .unwrap_or_else(|| "its claim was cancelled".to_owned()))
    }

    /// Claims the intent at `revision`, retrying on revision conflicts.
    /// `false` when the graph is finished or the intent or its activation
    /// is claimed differently (the work is skipped).
    async fn claim(
        &self,
        claim: IntentClaimRequest,
        mut revision: u64,
        work: &WorkEntry,
    ) -> Result<bool, WaveError> {
        let mut attempt = 0;
        loop {
            let (c, rev) = (claim.clone(), revision);
            match self
                .store(move |s| s.claim_intent_at_revision(c, rev))
                .await
            {
                Ok(_) => return Ok(true),
                Err(e)
                    if e.code() == Some(ControlErrorCode::ScheduleRevisionConflict)
                        && attempt < 8 =>
                {
                    attempt += 1;
                    revision = self.current_revision(&claim.graph_id).await?;
                }
                Err(e)
                    if matches!(
                        e.code(),
                        Some(
                            ControlErrorCode::ScheduleClosed
                                | ControlErrorCode::IntentClaimConflict
                        )
                    ) =>
                {
                    tracing::warn!(
                        graph = claim.graph_id,
                        work = work.work_id(),
                        "work not claimed: {e}"
                    );
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Renews the claim's lease every third of its lifetime until aborted
    /// (or until the lease is lost: then the outcome will not be recorded).
    fn renew_while_running(
        &self,
        graph_id: &str,
        intent_id: &str,
        token: u64,
    ) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        let (graph, intent) = (graph_id.to_owned(), intent_id.to_owned());
        let every = (self.inner.graphs.lease_ttl() / 3).max(std::time::Duration::from_millis(30));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let (g, i) = (graph.clone(), intent.clone());
                match this
                    .store(move |s| s.renew_intent_lease(&g, &i, token))
                    .await
                {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(graph, intent, "claim lease lost to another host");
                        return;
                    }
                    Err(e) => tracing::warn!(graph, intent, "claim lease not renewed: {e}"),
                }
            }
        })
    }

    async fn current_revision(&self, graph_id: &str) -> Result<u64, WaveError> {
        let g = graph_id.to_owned();
        self.store(move |s| s.current_revision(&g)).await
    }

    /// Runs the work on its operator: a routing agent (agent profile), or
    /// one graph whose arguments a model fills (preset), with `route`'s
    /// cancellation. Returns the outcome, the summary and the evidence.
    async fn execute(
        &self,
        graph_id: &str,
        work: &WorkEntry,
        op: &Operator,
        route: RouteOptions,
    ) -> Result<(RecordOutcome, String, Vec<String>), WaveError> {
        let options = match self.router_options(&op.target) {
            Ok(o) => o,
            Err(reason) => return Ok((RecordOutcome::Failed, format!("failed: {reason}"), vec![])),
        };
        let mut context = String::new();
        for input in &work.work().input_ids {
            let (g, r) = (graph_id.to_owned(), input.clone());
            let record = self.store(move |s| s.read_record(&g, &r)).await?;
            if let Some(rec) = record {
                context.push_str(&format!("Input {}: {}\n", rec.record_id, rec.summary));
            }
        }
        let agent = match GraphRoutingAgent::new(
            self.inner.registry.clone(),
            self.inner.provider.clone(),
            options,
        ) {
            Ok(a) => a,
            Err(e) => return Ok((RecordOutcome::Failed, format!("failed: {e}"), vec![])),
        };
        let mut agent = match &self.inner.journal {
            Some(j) => agent.with_journal(j.clone()),
            None => agent,
        };
        self.inner.agents.policy.install(agent.hooks_mut());
        let routed = agent
            .route_with(
                &work.work().instruction,
                RouteOptions {
                    thread_id: Some(op.session.clone()),
                    threads: self.inner.threads.clone(),
                    context: (!context.is_empty()).then_some(context),
                    ..route
                },
            )
            .await;
        Ok(match routed {
            Ok(out) => {
                let result = serde_json::to_string(&out.result).unwrap_or_default();
                let summary = if out.fallback {
                    format!(
                        "no graph fits: {}",
                        out.text
                            .as_deref()
                            .unwrap_or("the model answered without a tool")
                    )
                } else {
                    format!("{} returned {result}", out.tool)
                };
                let outcome = if out.fallback {
                    RecordOutcome::Failed
                } else {
                    RecordOutcome::Completed
                };
                (
                    outcome,
                    summary,
                    vec![out.tool, format!("route:{}", out.route_id)],
                )
            }
            Err(e) => (
                RecordOutcome::Failed,
                format!("failed: [{}] {}", e.code(), e),
                vec![],
            ),
        })
    }

    fn router_options(&self, target: &WorkTarget) -> Result<RouterOptions, String> {
        let default_model = self.inner.options.model.clone();
        match target.kind {
            TargetKind::Agent => {
                let profile = self.inner.agents.agents.get(&target.id).ok_or_else(|| {
                    let known: Vec<&str> = self
                        .inner
                        .agents
                        .agents
                        .keys()
                        .map(String::as_str)
                        .collect();
                    format!(
                        "unknown agent {} (agents: {})",
                        target.id,
                        if known.is_empty() {
                            "none".to_owned()
                        } else {
                            known.join(", ")
                        }
                    )
                })?;
                Ok(RouterOptions {
                    model: profile.model.clone().unwrap_or(default_model),
                    filter: ToolFilter {
                        allow: profile.allow.clone(),
                        deny: profile.deny.clone(),
                    },
                    max_retries: profile
                        .max_retries
                        .unwrap_or(self.inner.agents.routing.max_retries),
                    fallback: Fallback::Builtin,
                    system_prompt: profile.system_prompt.clone(),
                })
            }
            TargetKind::Preset => {
                if self.inner.registry.get(&target.id).is_none() {
                    return Err(format!("unknown preset graph {}", target.id));
                }
                Ok(RouterOptions {
                    model: default_model,
                    filter: ToolFilter {
                        allow: Some(vec![target.id.clone()]),
                        deny: vec![],
                    },
                    max_retries: self.inner.agents.routing.max_retries,
                    fallback: Fallback::Builtin,
                    system_prompt: Some(format!(
                        "Fill the arguments of the tool {} from the instruction and call it. Always call the tool.",
                        target.id
                    )),
                })
            }
            TargetKind::Operator => Err("an operator's target cannot be another operator".into()),
        }
    }
}
