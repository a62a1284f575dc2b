//! The one `bindgen!` site. Everything generated stays private to the crate;
//! the rest of the runtime uses the curated re-exports below.

mod generated {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "graph-component",
        exports: { default: async },
    });
}

pub(crate) use generated::sandgraph::graph::host::{
    Host as HostImports, add_to_linker as add_host_to_linker,
};
pub(crate) use generated::sandgraph::graph::types::{
    CallContext, GraphError, GraphSpec as WitGraphSpec, LogLevel, NodeResult,
    Reducer as WitReducer, RouteTarget as WitRouteTarget, Send as WitSend,
};
pub(crate) use generated::{GraphComponent, GraphComponentPre};
