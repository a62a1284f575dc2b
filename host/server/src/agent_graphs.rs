//! Who owns which agent graph: a graph's root session (the session of its
//! supervised run when one is recorded, else of its first committed
//! update), read against a caller's [`Principal`]. The MCP route set
//! routes agent-graph tool calls to the root this finds; other front
//! doors (the studio) show a principal the graphs it owns, read-only.

use std::sync::Arc;

use sandgraph_controller::{AgentGraphStore, Projection, SupervisorWake, ToolFailure};

use crate::principal::Principal;

/// The root session recorded for a supervised agent graph, by graph id:
/// `Ok(None)` when the graph has no supervised run, `Err` with the
/// failure's text. The front door gets it from whoever keeps supervised
/// runs (`sandgraph_supervisor::SupervisorRuns::root_session`, given by
/// the CLI), so the server does not depend on the supervisor.
pub type SupervisedRoots = Arc<dyn Fn(&str) -> Result<Option<String>, String> + Send + Sync>;

/// The agent graphs of a server's controller and the rule that names
/// their root sessions. Cheap to clone.
#[derive(Clone)]
pub struct AgentGraphOwners {
    store: AgentGraphStore,
    supervised_roots: Option<SupervisedRoots>,
}

impl std::fmt::Debug for AgentGraphOwners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentGraphOwners")
            .field("supervised_roots", &self.supervised_roots.is_some())
            .finish_non_exhaustive()
    }
}

/// An agent graph as its owner reads it outside MCP (the studio):
/// [`AgentGraphOwners::read_owned`].
#[derive(Debug, Clone)]
pub struct OwnedAgentGraph {
    /// Its live projection ([`Projection::view_page`] gives the view its
    /// root sees).
    pub projection: Projection,
    /// Its supervisor wakes, by `createdAt` then wake id.
    pub wakes: Vec<SupervisorWake>,
}

impl AgentGraphOwners {
    /// The graphs of `store`, their roots also taken from the supervised
    /// runs `supervised_roots` looks up, when given.
    pub fn new(store: AgentGraphStore, supervised_roots: Option<SupervisedRoots>) -> Self {
        AgentGraphOwners {
            store,
            supervised_roots,
        }
    }

    /// The root session of `graph_id`: its supervised run's, else that of
    /// its first update, else `caller`. Blocks on the store.
    ///
    /// # Errors
    ///
    /// A store error.
    pub fn root_of(&self, graph_id: &str, caller: &str) -> Result<String, ToolFailure> {
        if let Some(roots) = &self.supervised_roots
            && let Some(root) = roots(graph_id).map_err(ToolFailure::plain)?
        {
            return Ok(root);
        }
        let first = self
            .store
            .list_schedule_updates(graph_id)?
            .into_iter()
            .next();
        Ok(first.map_or_else(|| caller.to_owned(), |u| u.request.source.session_id))
    }

    /// The ids of the graphs `principal` owns, by id, at most `max`.
    /// Blocks on the store.
    ///
    /// # Errors
    ///
    /// A store error.
    pub fn owned(&self, principal: &Principal, max: usize) -> Result<Vec<String>, ToolFailure> {
        let mut owned = Vec::new();
        for graph in self.store.list_graphs()? {
            if owned.len() >= max {
                break;
            }
            if principal.owns(&self.root_of(&graph, "")?) {
                owned.push(graph);
            }
        }
        Ok(owned)
    }

    /// `graph_id` when `principal` owns it, else `None`. Blocks on the
    /// store.
    ///
    /// # Errors
    ///
    /// A store or projection error.
    pub fn read_owned(
        &self,
        principal: &Principal,
        graph_id: &str,
    ) -> Result<Option<OwnedAgentGraph>, ToolFailure> {
        if !principal.owns(&self.root_of(graph_id, "")?) {
            return Ok(None);
        }
        Ok(Some(OwnedAgentGraph {
            projection: Projection::load(&self.store, graph_id)?,
            wakes: self.store.list_supervisor_wakes(graph_id)?,
        }))
    }
}
