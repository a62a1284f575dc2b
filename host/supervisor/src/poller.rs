//! The work poller: how several hosts on one shared store (PostgreSQL)
//! share the work of their agent graphs, and how the work of a dead host
//! (its claims' leases expired) or of a crashed earlier run on redb is
//! finished. It looks for pending work of every open graph at start and
//! then at a fixed interval, and runs one wave of each.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use sandgraph_controller::{AgentGraphStore, ControlError};

use crate::Coordinator;

/// The target the poller logs under: the one it had when it lived in
/// `sandgraph serve` (the CLI's `serve` module), so `SANDGRAPH_LOG`
/// filters such as `sandgraph::serve=info` keep showing its waves.
const LOG_TARGET: &str = "sandgraph::serve";

/// What a poller calls when a wave of `graph_id` wrote records: the graph
/// reached a durable checkpoint (a server announces it to its clients).
type OnCheckpoint = Arc<dyn Fn(String) -> BoxFuture<'static, ()> + Send + Sync>;

/// A running work poller; dropping it stops it (the wave it is running is
/// cancelled with it, and its claims' leases expire for another host).
pub struct WorkPoller(tokio::task::JoinHandle<()>);

impl Drop for WorkPoller {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl WorkPoller {
    /// Starts the poller on the current tokio runtime: at once and then
    /// every `every`, one wave ([`Coordinator::run_wave`]) of each open
    /// graph of `graphs`, one graph after the other; the next look waits
    /// for the last wave to settle. A wave runs the graph's work that has
    /// no record and no live claim: work scheduled through another host of
    /// the same store, or claimed by a host that died. A wave that wrote
    /// records calls `on_checkpoint` with the graph's id. Failures are
    /// logged and the next look tries again.
    pub fn start<F, Fut>(
        graphs: AgentGraphStore,
        coordinator: Coordinator,
        every: Duration,
        on_checkpoint: F,
    ) -> WorkPoller
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let on_checkpoint: OnCheckpoint = Arc::new(move |graph| Box::pin(on_checkpoint(graph)));
        WorkPoller(tokio::spawn(poll(
            graphs,
            coordinator,
            every,
            on_checkpoint,
        )))
    }
}

/// The poller's loop; it ends only when its task is aborted.
async fn poll(
    graphs: AgentGraphStore,
    coordinator: Coordinator,
    every: Duration,
    on_checkpoint: OnCheckpoint,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let store = graphs.clone();
        let open = match tokio::task::spawn_blocking(move || open_graphs(&store)).await {
            Ok(Ok(open)) => open,
            Ok(Err(e)) => {
                tracing::warn!(target: LOG_TARGET, "work poller: cannot list the agent graphs: {e}");
                continue;
            }
            Err(e) => {
                tracing::warn!(target: LOG_TARGET, "work poller: the store task failed: {e}");
                continue;
            }
        };
        for graph in open {
            match coordinator.run_wave(&graph).await {
                Ok(report) if report.records.is_empty() => {}
                Ok(report) => {
                    tracing::info!(
                        target: LOG_TARGET,
                        graph,
                        records = report.records.len(),
                        "polled wave settled"
                    );
                    on_checkpoint(graph).await;
                }
                Err(e) => tracing::warn!(target: LOG_TARGET, graph, "polled wave failed: {e}"),
            }
        }
    }
}

/// The ids of the graphs of `graphs` that are not finished.
fn open_graphs(graphs: &AgentGraphStore) -> Result<Vec<String>, ControlError> {
    let mut open = Vec::new();
    for graph in graphs.list_graphs()? {
        if !graphs.is_closed(&graph)? {
            open.push(graph);
        }
    }
    Ok(open)
}
