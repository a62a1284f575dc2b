//! The `bindgen!` sites, one per supported version of the
//! `sandgraph:graph` world. Everything generated stays private to the
//! crate; the rest of the runtime uses the curated re-exports below and
//! the version-blind [`GraphComponentPre`] / [`GraphComponent`].
//!
//! * 0.1.0 (`wit/frozen/0.1.0`): `host` and `graph` only. Components built
//!   against it keep loading and running unchanged.
//! * 0.2.0 (`wit/`): adds the brokered capabilities `llm` and `tools`. Its
//!   `types` interface is the 0.1.0 one, so both versions share one set of
//!   Rust types and the executor never sees which version a graph has.

use wasmtime::AsContextMut;
use wasmtime::component::InstancePre;

mod v0_1 {
    wasmtime::component::bindgen!({
        path: "../../wit/frozen/0.1.0",
        world: "graph-component",
        exports: { default: async },
    });
}

/// Public through [`crate::caps::wit`]: the capabilities' factors use its
/// `llm` and `tools` types.
#[allow(missing_docs)]
mod v0_2 {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "graph-component",
        imports: {
            "sandgraph:graph/llm.chat": async,
            "sandgraph:graph/tools.call": async,
        },
        exports: { default: async },
        with: {
            "sandgraph:graph/types@0.2.0": crate::bindings::v0_1::sandgraph::graph::types,
        },
    });
}

pub(crate) use v0_1::sandgraph::graph::host::{
    Host as HostImports, add_to_linker as add_host_to_linker,
};
pub(crate) use v0_1::sandgraph::graph::types::{
    CallContext, ChannelSpec as WitChannelSpec, GraphError, GraphSpec as WitGraphSpec, LogLevel,
    NodeResult, Reducer as WitReducer, RouteTarget as WitRouteTarget, Send as WitSend,
};
/// The spec's parts, for tests that build a described spec by hand.
#[cfg(test)]
pub(crate) use v0_1::sandgraph::graph::types::{
    NodeSpec as WitNodeSpec, Registration as WitRegistration,
};
pub(crate) use v0_2::sandgraph::graph::host::{
    Host as HostImportsV2, add_to_linker as add_host_v2_to_linker,
};
pub use v0_2::sandgraph::graph::llm;
pub use v0_2::sandgraph::graph::tools;

/// The versions of the world this host runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorldVersion {
    /// `sandgraph:graph@0.1.x`.
    V0_1,
    /// `sandgraph:graph@0.2.x`.
    V0_2,
}

impl WorldVersion {
    /// The version of a `sandgraph:graph` name's `@version`, if supported.
    pub(crate) fn of(version: &str) -> Option<WorldVersion> {
        let minor =
            |m: &str| version == format!("0.{m}") || version.starts_with(&format!("0.{m}."));
        if minor("1") {
            Some(WorldVersion::V0_1)
        } else if minor("2") {
            Some(WorldVersion::V0_2)
        } else {
            None
        }
    }
}

/// A graph component linked and type-checked once, for either version.
pub(crate) enum GraphComponentPre<T: 'static> {
    V0_1(v0_1::GraphComponentPre<T>),
    V0_2(v0_2::GraphComponentPre<T>),
}

impl<T: 'static> Clone for GraphComponentPre<T> {
    fn clone(&self) -> Self {
        match self {
            GraphComponentPre::V0_1(p) => GraphComponentPre::V0_1(p.clone()),
            GraphComponentPre::V0_2(p) => GraphComponentPre::V0_2(p.clone()),
        }
    }
}

impl<T: Send + 'static> GraphComponentPre<T> {
    /// Checks `pre`'s exports against `version` of the world.
    pub(crate) fn new(version: WorldVersion, pre: InstancePre<T>) -> wasmtime::Result<Self> {
        Ok(match version {
            WorldVersion::V0_1 => GraphComponentPre::V0_1(v0_1::GraphComponentPre::new(pre)?),
            WorldVersion::V0_2 => GraphComponentPre::V0_2(v0_2::GraphComponentPre::new(pre)?),
        })
    }

    /// The version of the world the component was built for.
    pub(crate) fn version(&self) -> WorldVersion {
        match self {
            GraphComponentPre::V0_1(_) => WorldVersion::V0_1,
            GraphComponentPre::V0_2(_) => WorldVersion::V0_2,
        }
    }

    /// A new instance in `store`.
    pub(crate) async fn instantiate_async(
        &self,
        store: impl AsContextMut<Data = T>,
    ) -> wasmtime::Result<GraphComponent> {
        Ok(match self {
            GraphComponentPre::V0_1(p) => GraphComponent::V0_1(p.instantiate_async(store).await?),
            GraphComponentPre::V0_2(p) => GraphComponent::V0_2(p.instantiate_async(store).await?),
        })
    }
}

/// An instance's `graph` exports, for either version.
pub(crate) enum GraphComponent {
    V0_1(v0_1::GraphComponent),
    V0_2(v0_2::GraphComponent),
}

/// Calls the same export on whichever version `$b` is.
macro_rules! on_graph {
    ($b:expr, $g:ident => $call:expr) => {
        match $b {
            GraphComponent::V0_1(b) => {
                let $g = b.sandgraph_graph_graph();
                $call
            }
            GraphComponent::V0_2(b) => {
                let $g = b.sandgraph_graph_graph();
                $call
            }
        }
    };
}

impl GraphComponent {
    pub(crate) async fn call_describe<S: AsContextMut<Data: Send>>(
        &self,
        s: S,
    ) -> wasmtime::Result<WitGraphSpec> {
        on_graph!(self, g => g.call_describe(s).await)
    }

    pub(crate) async fn call_validate<S: AsContextMut<Data: Send>>(
        &self,
        s: S,
        input: &str,
        ctx: &CallContext,
    ) -> wasmtime::Result<Result<(), String>> {
        on_graph!(self, g => g.call_validate(s, input, ctx).await)
    }

    pub(crate) async fn call_run_node<S: AsContextMut<Data: Send>>(
        &self,
        s: S,
        node: &str,
        state: &str,
        ctx: &CallContext,
    ) -> wasmtime::Result<Result<NodeResult, GraphError>> {
        on_graph!(self, g => g.call_run_node(s, node, state, ctx).await)
    }

    pub(crate) async fn call_route<S: AsContextMut<Data: Send>>(
        &self,
        s: S,
        router: &str,
        state: &str,
    ) -> wasmtime::Result<Result<Vec<WitRouteTarget>, GraphError>> {
        on_graph!(self, g => g.call_route(s, router, state).await)
    }

    pub(crate) async fn call_reduce<S: AsContextMut<Data: Send>>(
        &self,
        s: S,
        channel: &str,
        current: &str,
        update: &str,
    ) -> wasmtime::Result<Result<String, GraphError>> {
        on_graph!(self, g => g.call_reduce(s, channel, current, update).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn world_versions_by_minor() {
        assert_eq!(WorldVersion::of("0.1.0"), Some(WorldVersion::V0_1));
        assert_eq!(WorldVersion::of("0.1.7"), Some(WorldVersion::V0_1));
        assert_eq!(WorldVersion::of("0.2.0"), Some(WorldVersion::V0_2));
        assert_eq!(WorldVersion::of("0.2"), Some(WorldVersion::V0_2));
        assert_eq!(WorldVersion::of("0.3.0"), None);
        assert_eq!(WorldVersion::of("0.10.0"), None);
        assert_eq!(WorldVersion::of("1.1.0"), None);
    }
}
