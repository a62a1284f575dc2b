//! Turning bytes into a runnable [`Graph`]: header checks, compilation,
//! import/export checks with errors that name the fix, the typed `*Pre`, and
//! the graph's own `describe`.

use std::sync::Arc;

use sandgraph_core::{
    ChannelSpec, CompiledGraph, ConditionalEdge, Edge, ErrorCode, GraphSpec, NodeSpec, PathEntry,
    Reducer, Registration, RunError, STRICT_MARKER_CHANNEL, json,
};
use wasmtime::component::Component;

use crate::bindings::{self, GraphComponentPre, WitReducer, WorldVersion};
use crate::limits::{Limits, MAX_COMPONENT_BYTES};
use crate::runtime::Shared;
use crate::sandbox::{RunControl, Sandbox, StoreData};

/// The version of the `sandgraph:graph` WIT package this host implements.
/// Components built against 0.1.x (no capabilities) load too.
pub const HOST_WORLD_VERSION: &str = "0.2.0";
const PACKAGE: &str = "sandgraph:graph";

/// A loaded graph: compiled once, described once, instantiated per run.
pub struct Graph {
    pub(crate) name: Arc<str>,
    pub(crate) spec: GraphSpec,
    pub(crate) compiled: Arc<CompiledGraph>,
    pub(crate) pre: GraphComponentPre<StoreData>,
    pub(crate) component: Component,
    pub(crate) capabilities: Vec<&'static str>,
}

impl Graph {
    /// The graph's name (its tool name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The spec the graph described itself with, validated.
    pub fn spec(&self) -> &GraphSpec {
        &self.spec
    }

    /// The compiled component, for the workspace's benchmarks (feature
    /// `internals`).
    #[cfg(feature = "internals")]
    pub fn component(&self) -> &Component {
        &self.component
    }

    /// The names of the component's exports and imports (interfaces and
    /// functions at its top level), in the component's order.
    pub fn interface_names(&self) -> (Vec<String>, Vec<String>) {
        let ty = self.component.component_type();
        let engine = self.component.engine();
        (
            ty.exports(engine).map(|(n, _)| n.to_owned()).collect(),
            ty.imports(engine).map(|(n, _)| n.to_owned()).collect(),
        )
    }

    /// The version of the `sandgraph:graph` world the component was built
    /// against, e.g. `0.2`.
    pub fn world_version(&self) -> &'static str {
        match self.pre.version() {
            WorldVersion::V0_1 => "0.1",
            WorldVersion::V0_2 => "0.2",
        }
    }

    /// The brokered capabilities the component imports, read from its
    /// imports at load (`llm`, `tools`, `http` for `wasi:http`), in the
    /// order the runtime registered their factors. Importing one is asking
    /// for it; the operator's grants decide.
    pub fn capabilities(&self) -> &[&'static str] {
        &self.capabilities
    }
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

pub(crate) fn load_error(msg: impl Into<String>) -> RunError {
    RunError::new(ErrorCode::Load, msg)
}

/// Checks the header: a wasm file, and a component rather than a core module.
pub(crate) fn check_header(bytes: &[u8]) -> Result<(), RunError> {
    if bytes.len() > MAX_COMPONENT_BYTES {
        return Err(load_error(format!(
            "file is {} bytes, more than the {} byte limit for a graph component",
            bytes.len(),
            MAX_COMPONENT_BYTES
        )));
    }
    if bytes.len() < 8 || &bytes[0..4] != b"\0asm" {
        return Err(load_error(
            "not a wasm file: it does not start with the `\\0asm` header",
        ));
    }
    match &bytes[4..8] {
        [0x0d, 0x00, 0x01, 0x00] => Ok(()),
        [0x01, 0x00, 0x00, 0x00] => Err(load_error(
            "this is a core wasm module, not a component: build the graph for the wasm32-wasip2 target \
             (`sandgraph build DIR --out FILE`)",
        )),
        v => Err(load_error(format!(
            "unsupported wasm encoding version {v:02x?}: expected a component"
        ))),
    }
}

/// Splits `ns:pkg/iface@ver` into (`ns:pkg`, `ver`).
fn package_and_version(name: &str) -> (&str, Option<&str>) {
    let (path, ver) = match name.split_once('@') {
        Some((p, v)) => (p, Some(v)),
        None => (name, None),
    };
    (path.split_once('/').map_or(path, |(pkg, _)| pkg), ver)
}

/// The brokered capabilities among `component`'s imports, in the order
/// their factors were registered.
fn imported_capabilities(shared: &Shared, component: &Component) -> Vec<&'static str> {
    let ty = component.component_type();
    let names: Vec<&str> = ty
        .imports(&shared.engine)
        .map(|(n, _)| n.split_once('@').map_or(n, |(p, _)| p))
        .collect();
    shared
        .factors
        .iter()
        .filter(|f| names.contains(&f.interface()))
        .map(|f| f.capability())
        .collect()
}

/// The interfaces of each version a graph may import.
fn provided(version: WorldVersion, iface: &str) -> bool {
    match version {
        WorldVersion::V0_1 => matches!(iface, "host" | "types"),
        WorldVersion::V0_2 => matches!(iface, "host" | "types" | "llm" | "tools"),
    }
}

/// Checks what the component imports and exports against what this host
/// provides, with an error that says which world or version it was built
/// for; the version of the world it was built for.
pub(crate) fn check_world(
    component: &Component,
    engine: &wasmtime::Engine,
) -> Result<WorldVersion, RunError> {
    let ty = component.component_type();
    let exports: Vec<&str> = ty.exports(engine).map(|(n, _)| n).collect();
    let Some(graph_export) = exports
        .iter()
        .find(|n| n.starts_with("sandgraph:graph/graph"))
    else {
        return Err(load_error(if exports.is_empty() {
            // What a crate built with the SDK but without its export macro
            // looks like.
            "the component exports no graph (it exports nothing): if it was built with the \
             sandgraph SDK, add `sandgraph_sdk::export_graph!(graph);` to its lib.rs, naming the \
             function that builds the graph"
                .to_owned()
        } else {
            format!(
                "component does not export {PACKAGE}/graph@{HOST_WORLD_VERSION} (it exports: \
                 {}): it was built for another world; build it with the sandgraph SDK",
                exports.join(", ")
            )
        }));
    };
    let Some(version) = package_and_version(graph_export)
        .1
        .and_then(WorldVersion::of)
    else {
        return Err(load_error(format!(
            "component exports `{graph_export}` but this host implements \
             {PACKAGE}@{HOST_WORLD_VERSION} (and 0.1): rebuild it against the sandgraph SDK for \
             {HOST_WORLD_VERSION}"
        )));
    };
    let mut unknown = Vec::new();
    for (name, _) in ty.imports(engine) {
        let (pkg, ver) = package_and_version(name);
        if pkg == PACKAGE {
            if ver.and_then(WorldVersion::of) != Some(version) {
                return Err(load_error(format!(
                    "component imports `{name}` but exports `{graph_export}`: one component \
                     must be built against one version of {PACKAGE}"
                )));
            }
            let iface = name
                .split_once('@')
                .map_or(name, |(p, _)| p)
                .trim_start_matches("sandgraph:graph/");
            if !provided(version, iface) {
                unknown.push(name.to_string());
            }
        } else if pkg.starts_with("wasi:") && ver.is_some_and(|v| v.starts_with("0.2.")) {
            // Provided by the deny-by-default WASI p2 linker.
        } else {
            unknown.push(name.to_string());
        }
    }
    if !unknown.is_empty() {
        return Err(load_error(format!(
            "component imports what this host does not provide: {}; a graph may import only \
             {PACKAGE}/{{host,llm,tools}}@{HOST_WORLD_VERSION} and wasi:*@0.2 (wasi:http \
             included)",
            unknown.join(", ")
        )));
    }
    Ok(version)
}

fn parse_json_field(what: &str, text: &str) -> Result<serde_json::Value, RunError> {
    json::parse_lossless(text, what)
        .map_err(|e| load_error(format!("describe: {what} is not lossless JSON at {e}")))
}

/// Converts the WIT spec into the core spec, parsing embedded JSON. The
/// strict marker channel ([`STRICT_MARKER_CHANNEL`], last-value, no
/// default) becomes [`GraphSpec::strict`]; a second one stays a channel,
/// which validation refuses by name.
pub(crate) fn convert_spec(mut s: bindings::WitGraphSpec) -> Result<GraphSpec, RunError> {
    let marker = s.channels.iter().position(|c| {
        c.name == STRICT_MARKER_CHANNEL
            && matches!(c.reducer, WitReducer::LastValue)
            && c.default.is_none()
    });
    let strict = marker.map(|at| s.channels.remove(at)).is_some();
    let channels = s
        .channels
        .into_iter()
        .map(convert_channel)
        .collect::<Result<Vec<_>, RunError>>()?;
    let parameters = match &s.parameters {
        Some(p) => Some(parse_json_field("parameters", p)?),
        None => None,
    };
    Ok(GraphSpec {
        name: s.name,
        description: s.description,
        registration: Registration {
            as_tool: s.registration.as_tool,
            as_graph_tool: s.registration.as_graph_tool,
        },
        parameters,
        timeout_ms: s.timeout_ms,
        channels,
        nodes: s
            .nodes
            .into_iter()
            .map(|n| NodeSpec {
                name: n.name,
                description: n.description,
            })
            .collect(),
        edges: s
            .edges
            .into_iter()
            .map(|e| Edge {
                sources: e.sources,
                target: e.target,
            })
            .collect(),
        conditional_edges: s
            .conditional_edges
            .into_iter()
            .map(|c| ConditionalEdge {
                source: c.source,
                router: c.router,
                path_map: c
                    .path_map
                    .into_iter()
                    .map(|p| PathEntry {
                        key: p.key,
                        target: p.target,
                    })
                    .collect(),
            })
            .collect(),
        entry_points: s.entry_points,
        finish_points: s.finish_points,
        strict,
    })
}

/// One WIT channel as a core channel, its default parsed as lossless JSON.
fn convert_channel(c: bindings::WitChannelSpec) -> Result<ChannelSpec, RunError> {
    let default = match &c.default {
        Some(d) => Some(parse_json_field(
            &format!("default of channel \"{}\"", c.name),
            d,
        )?),
        None => None,
    };
    Ok(ChannelSpec {
        reducer: match c.reducer {
            WitReducer::LastValue => Reducer::LastValue,
            WitReducer::Append => Reducer::Append,
            WitReducer::Merge => Reducer::Merge,
            WitReducer::Add => Reducer::Add,
            WitReducer::Custom => Reducer::Custom,
        },
        name: c.name,
        default,
    })
}

/// Checks the header of `bytes` and compiles them.
pub(crate) fn compile(shared: &Shared, bytes: &[u8]) -> Result<Component, RunError> {
    check_header(bytes)?;
    shared
        .compiles
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Component::from_binary(&shared.engine, bytes)
        .map_err(|e| load_error(format!("invalid component: {}", e.root_cause())))
}

/// Links `component` against the host: world checks plus the typed `*Pre`.
fn link(shared: &Shared, component: &Component) -> Result<GraphComponentPre<StoreData>, RunError> {
    let version = check_world(component, &shared.engine)?;
    let instance_pre = shared
        .linker
        .instantiate_pre(component)
        .map_err(|e| load_error(format!("cannot link component: {}", e.root_cause())))?;
    GraphComponentPre::new(version, instance_pre).map_err(|e| {
        load_error(format!(
            "component does not match the graph world: {}",
            e.root_cause()
        ))
    })
}

/// Builds a [`Graph`] from a compiled component and a spec described
/// earlier (the compile cache), without calling `describe` again.
pub(crate) fn from_parts(
    shared: &Arc<Shared>,
    component: Component,
    spec: GraphSpec,
) -> Result<Graph, RunError> {
    let pre = link(shared, &component)?;
    let compiled = CompiledGraph::new(spec.clone()).map_err(|e| load_error(e.to_string()))?;
    Ok(Graph {
        name: Arc::from(spec.name.as_str()),
        spec,
        compiled: Arc::new(compiled),
        pre,
        capabilities: imported_capabilities(shared, &component),
        component,
    })
}

/// Compiles and checks `bytes`, then asks the graph to describe itself.
pub(crate) async fn load(shared: &Arc<Shared>, bytes: &[u8]) -> Result<Graph, RunError> {
    let component = compile(shared, bytes)?;
    from_component(shared, component).await
}

/// The stage of a load that runs guest code, for [`at_load`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Instantiate,
    Describe,
}

/// A failure to instantiate or describe a graph under the load limits, as
/// the error of the load.
///
/// What the component caused is [`ErrorCode::Load`], naming the load limit
/// it hit. A condition of the host at the time keeps its own code
/// (`timeout` for no free instance slot, `memory_limit` for a spent
/// host-wide budget): the same component may load a moment later, so the
/// registry does not remember such a failure. A wall-clock timeout during
/// instantiation counts as the host's (it is where a call waits for a
/// slot); one during `describe` is the component's: it had its instance
/// and did not describe itself in time.
fn at_load(stage: Stage, limits: &Limits, e: RunError) -> RunError {
    let what = match stage {
        Stage::Instantiate => "instantiating the component",
        Stage::Describe => "describe",
    };
    match e.code {
        ErrorCode::Timeout if stage == Stage::Instantiate => RunError::new(
            ErrorCode::Timeout,
            format!("cannot load the graph now: {}", e.message),
        ),
        ErrorCode::MemoryLimit if e.message.contains("host-wide") => RunError::new(
            ErrorCode::MemoryLimit,
            format!("cannot load the graph now: {}", e.message),
        ),
        ErrorCode::Timeout => load_error(format!(
            "{what} did not finish within the load limit of {} ms (a graph must describe itself \
             at once)",
            limits.timeout.as_millis()
        )),
        ErrorCode::OutOfFuel => load_error(format!(
            "{what} used up the load fuel budget of {} (a graph must describe itself at once)",
            limits.fuel
        )),
        ErrorCode::MemoryLimit => load_error(format!(
            "{what} exceeded the load memory cap of {} MiB per instance",
            limits.memory >> 20
        )),
        _ => load_error(format!("{what} failed: {}", e.message)),
    }
}

/// Builds a [`Graph`] from an already compiled component: instantiates it
/// and calls `describe` under the runtime's load limits
/// ([`crate::RuntimeConfig::load_limits`]), in a throwaway instance.
///
/// # Errors
///
/// [`ErrorCode::Load`] for everything the component caused (see
/// [`at_load`] for the host's conditions, which keep their own code).
pub(crate) async fn from_component(
    shared: &Arc<Shared>,
    component: Component,
) -> Result<Graph, RunError> {
    let pre = link(shared, &component)?;
    let limits = shared.config.load_limits.clone();
    let control = RunControl::new(limits.clone(), Default::default());
    let mut instance = Sandbox::instantiate(shared, &pre, Arc::from("<loading>"), &control)
        .await
        .map_err(|e| at_load(Stage::Instantiate, &limits, e))?;
    let raw = instance
        .describe()
        .await
        .map_err(|e| at_load(Stage::Describe, &limits, e))?;
    drop(instance);
    let spec = convert_spec(raw)?;
    let compiled = CompiledGraph::new(spec.clone()).map_err(|e| load_error(e.to_string()))?;
    Ok(Graph {
        name: Arc::from(spec.name.as_str()),
        spec,
        compiled: Arc::new(compiled),
        pre,
        capabilities: imported_capabilities(shared, &component),
        component,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A described spec with one node and `channels` (name, default).
    fn described(channels: &[(&str, Option<&str>)]) -> bindings::WitGraphSpec {
        bindings::WitGraphSpec {
            name: "g".into(),
            description: None,
            registration: bindings::WitRegistration {
                as_tool: false,
                as_graph_tool: true,
            },
            parameters: None,
            timeout_ms: None,
            channels: channels
                .iter()
                .map(|(name, default)| bindings::WitChannelSpec {
                    name: (*name).into(),
                    reducer: WitReducer::LastValue,
                    default: default.map(str::to_owned),
                })
                .collect(),
            nodes: vec![bindings::WitNodeSpec {
                name: "a".into(),
                description: None,
            }],
            edges: vec![],
            conditional_edges: vec![],
            entry_points: vec!["a".into()],
            finish_points: vec![],
        }
    }

    #[test]
    fn the_strict_marker_channel_becomes_the_flag() {
        let spec = convert_spec(described(&[("x", None), (STRICT_MARKER_CHANNEL, None)])).unwrap();
        assert!(spec.strict);
        assert_eq!(spec.channels.len(), 1);
        assert_eq!(spec.validate(), Ok(()));

        let spec = convert_spec(described(&[("x", None)])).unwrap();
        assert!(!spec.strict);

        // Only the exact marker (last-value, no default) counts, and only
        // once; anything else named like it is refused by validation.
        for channels in [
            vec![(STRICT_MARKER_CHANNEL, Some("true"))],
            vec![(STRICT_MARKER_CHANNEL, None), (STRICT_MARKER_CHANNEL, None)],
        ] {
            let spec = convert_spec(described(&channels)).unwrap();
            let err = spec.validate().unwrap_err().to_string();
            assert!(
                err.contains("channel name \"__strict__\" is reserved"),
                "{err}"
            );
        }
    }

    #[test]
    fn header_errors_name_the_fix() {
        assert!(
            check_header(b"hello world")
                .unwrap_err()
                .message
                .contains("not a wasm file")
        );
        let core = [0, b'a', b's', b'm', 1, 0, 0, 0];
        assert!(
            check_header(&core)
                .unwrap_err()
                .message
                .contains("core wasm module, not a component")
        );
        let comp = [0, b'a', b's', b'm', 0x0d, 0, 1, 0];
        assert!(check_header(&comp).is_ok());
    }

    #[test]
    fn load_errors_name_the_limit_and_keep_host_conditions_apart() {
        let limits = Limits::for_load();
        let e = |code, msg: &str| RunError::new(code, msg);
        let spin = at_load(
            Stage::Describe,
            &limits,
            e(ErrorCode::Timeout, "run exceeded its timeout of 500 ms"),
        );
        assert_eq!(spin.code, ErrorCode::Load);
        assert_eq!(
            spin.message,
            "describe did not finish within the load limit of 500 ms (a graph must describe \
             itself at once)"
        );
        let fuel = at_load(
            Stage::Describe,
            &limits,
            e(
                ErrorCode::OutOfFuel,
                "run used up its fuel budget of 5000000000",
            ),
        );
        assert_eq!(fuel.code, ErrorCode::Load);
        assert!(
            fuel.message.contains("load fuel budget of 5000000000"),
            "{}",
            fuel.message
        );
        let mem = at_load(
            Stage::Describe,
            &limits,
            e(
                ErrorCode::MemoryLimit,
                "describe exceeded the memory cap of 64 MiB per instance",
            ),
        );
        assert_eq!(mem.code, ErrorCode::Load);
        assert!(
            mem.message.contains("load memory cap of 64 MiB"),
            "{}",
            mem.message
        );
        let trap = at_load(
            Stage::Describe,
            &limits,
            e(
                ErrorCode::Trap,
                "describe trapped: wasm `unreachable` executed",
            ),
        );
        assert_eq!(trap.code, ErrorCode::Load);
        assert!(
            trap.message
                .starts_with("describe failed: describe trapped")
        );
        // The host's state, not the component: not a load failure.
        let busy = at_load(
            Stage::Instantiate,
            &limits,
            e(
                ErrorCode::Timeout,
                "host busy: no instance slot became free",
            ),
        );
        assert_eq!(busy.code, ErrorCode::Timeout);
        let budget = at_load(
            Stage::Describe,
            &limits,
            e(
                ErrorCode::MemoryLimit,
                "describe could not grow memory: the host-wide memory budget is spent",
            ),
        );
        assert_eq!(budget.code, ErrorCode::MemoryLimit);
    }

    #[test]
    fn package_versions_split() {
        assert_eq!(
            package_and_version("wasi:cli/stdout@0.2.6"),
            ("wasi:cli", Some("0.2.6"))
        );
        assert_eq!(
            package_and_version("sandgraph:graph/host@0.1.0"),
            ("sandgraph:graph", Some("0.1.0"))
        );
        assert!(provided(WorldVersion::V0_2, "llm"));
        assert!(!provided(WorldVersion::V0_1, "llm"));
        assert!(!provided(WorldVersion::V0_2, "files"));
    }
}
