//! What every route set of a server serves from: the registry's graphs as
//! callers may see them, the durable threads, the run admission, and the
//! controller's agent graphs.

use std::sync::Arc;

use sandgraph_controller::ToolFailure;
use sandgraph_registry::{GraphTool, Registry};
use sandgraph_store::ThreadStore;

use crate::admission::{Admission, Busy, RunPermit, Stats};
use crate::agent_graphs::{AgentGraphOwners, OwnedAgentGraph};
use crate::principal::Principal;

/// The agent graphs of a server with a controller.
#[derive(Debug, Clone)]
struct Controller {
    /// Tool names the controller takes: a graph tool of one of these names
    /// is hidden from every caller.
    reserved: Arc<[&'static str]>,
    /// The graphs and their owners; `None`: the controller has no store.
    owners: Option<AgentGraphOwners>,
}

/// The shared state of a server's route sets. Cheap to clone; clones
/// share everything.
#[derive(Debug, Clone)]
pub struct Context {
    registry: Registry,
    threads: Option<ThreadStore>,
    admission: Admission,
    controller: Option<Controller>,
}

impl Context {
    /// The graphs of `registry` under `admission`'s run limits, with no
    /// durable threads and no controller.
    pub fn new(registry: Registry, admission: Admission) -> Context {
        Context {
            registry,
            threads: None,
            admission,
            controller: None,
        }
    }

    /// Keeps durable threads in `threads` (`None`: none).
    pub fn with_threads(mut self, threads: Option<ThreadStore>) -> Context {
        self.threads = threads;
        self
    }

    /// A controller: its tools' names (`reserved`) hide graph tools of
    /// those names from every caller, and `owners` (`None`: the controller
    /// has no store) answers who owns which agent graph.
    pub fn with_controller(
        mut self,
        reserved: &[&'static str],
        owners: Option<AgentGraphOwners>,
    ) -> Context {
        self.controller = Some(Controller {
            reserved: reserved.into(),
            owners,
        });
        self
    }

    /// The registry served.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The durable threads, if the server keeps them.
    pub fn threads(&self) -> Option<&ThreadStore> {
        self.threads.as_ref()
    }

    /// The run admission every route set's runs go through.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// The admission's counters so far.
    pub fn stats(&self) -> Stats {
        self.admission.stats()
    }

    /// Admits a run of `principal` ([`Admission::admit`]).
    ///
    /// # Errors
    ///
    /// At a run limit, or shutting down.
    pub fn admit_run(&self, principal: &Principal) -> Result<RunPermit, Busy> {
        self.admission.admit(Some(principal))
    }

    /// Whether the server has a controller.
    pub fn has_controller(&self) -> bool {
        self.controller.is_some()
    }

    /// Whether `name` is taken by the controller's tools (then no graph
    /// tool of that name is served).
    pub fn is_reserved(&self, name: &str) -> bool {
        self.controller
            .as_ref()
            .is_some_and(|c| c.reserved.contains(&name))
    }

    /// The graph tool `name` as callers get it: mounted, `as_tool`, and
    /// not hidden by a controller tool of its name; `None` otherwise.
    pub fn visible_tool(&self, name: &str) -> Option<Arc<GraphTool>> {
        if self.is_reserved(name) {
            return None;
        }
        self.registry.get(name).filter(|t| t.model_visible())
    }

    /// The agent graphs and their owners.
    ///
    /// # Errors
    ///
    /// No controller, or one without a store.
    pub fn agent_graphs(&self) -> Result<&AgentGraphOwners, ToolFailure> {
        let controller = self
            .controller
            .as_ref()
            .ok_or_else(|| ToolFailure::plain("this server has no controller"))?;
        controller
            .owners
            .as_ref()
            .ok_or_else(|| ToolFailure::plain("the agent graph store is unavailable"))
    }

    /// The ids of the agent graphs `principal` owns, by id, at most `max`:
    /// read-only, for front doors that show a principal its graphs.
    /// Blocks on the store.
    ///
    /// # Errors
    ///
    /// No controller, or a store error.
    pub fn owned_agent_graphs(
        &self,
        principal: &Principal,
        max: usize,
    ) -> Result<Vec<String>, ToolFailure> {
        self.agent_graphs()?.owned(principal, max)
    }

    /// The agent graph `graph_id` when `principal` owns it, else `None`:
    /// read-only, as [`Context::owned_agent_graphs`]. Blocks on the store.
    ///
    /// # Errors
    ///
    /// No controller, or a store or projection error.
    pub fn owned_agent_graph(
        &self,
        principal: &Principal,
        graph_id: &str,
    ) -> Result<Option<OwnedAgentGraph>, ToolFailure> {
        self.agent_graphs()?.read_owned(principal, graph_id)
    }
}
