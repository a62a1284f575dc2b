//! `GET /api/graphs` and `GET /api/graphs/{name}`: the mounted graphs, and
//! one graph with its spec and its drawing (nodes and typed edges).

use std::collections::HashSet;
use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, State};
use axum::response::Response;
use sandgraph_core::{END, GraphSpec, START};
use sandgraph_registry::GraphTool;
use sandgraph_server::Principal;
use serde_json::{Value, json};

use crate::api::{ApiError, Studio, json_body, run_error};
use crate::bound;

/// `GET /api/graphs`: the graphs the caller may call (every mounted one
/// for a studio operator), by name. Never loads one.
pub(crate) async fn list(
    State(studio): State<Arc<Studio>>,
    Extension(principal): Extension<Principal>,
) -> Response {
    let operator = studio.is_operator(&principal);
    let graphs: Vec<Value> = studio
        .server
        .registry()
        .list()
        .iter()
        .filter(|t| operator || studio.server.visible_tool(t.name()).is_some())
        .map(|t| {
            let imported = t.is_loaded().then(|| imported(t));
            summary(t, imported.flatten())
        })
        .collect();
    json_body(&json!({ "graphs": graphs }))
}

/// `GET /api/graphs/{name}`: one graph with its spec and drawing. Loads
/// (compiles) the graph when it is not loaded yet, to read its imports.
pub(crate) async fn detail(
    State(studio): State<Arc<Studio>>,
    Extension(principal): Extension<Principal>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let tool = served(&studio, &principal, &name)?;
    let graph = tool.graph().await.map_err(run_error)?;
    let imported: Vec<&str> = graph.capabilities().to_vec();
    let mut out = summary(&tool, Some(json!(imported)));
    let spec = serde_json::to_value(tool.spec()).unwrap_or(Value::Null);
    out["spec"] = bound::value(&spec);
    out["drawing"] = drawing(tool.spec());
    Ok(json_body(&out))
}

/// The graph `name` as `principal` may see, run, resume and update it:
/// the graph tool MCP offers under that name
/// ([`sandgraph_server::Context::visible_tool`]), or for a studio operator
/// any mounted graph. Else `404`, the same answer for a graph MCP hides
/// as for no graph, so a caller learns nothing of graphs it may not call.
pub(crate) fn served(
    studio: &Studio,
    principal: &Principal,
    name: &str,
) -> Result<Arc<GraphTool>, ApiError> {
    let tool = if studio.is_operator(principal) {
        studio.server.registry().get(name)
    } else {
        studio.server.visible_tool(name)
    };
    tool.ok_or_else(|| no_graph(name))
}

/// `404` for a graph that is not mounted, or that the caller may not see.
fn no_graph(name: &str) -> ApiError {
    ApiError::not_found(format!(
        "no graph named \"{}\" is available",
        bound::name(name)
    ))
}

/// The capabilities a loaded graph imports, else `None`.
fn imported(tool: &GraphTool) -> Option<Value> {
    let loaded = tool.graph();
    // Loaded: the future resolves at once, without compiling.
    let graph = futures::FutureExt::now_or_never(loaded)?.ok()?;
    Some(json!(graph.capabilities()))
}

/// A graph as the list shows it; `imported` is `null` when unknown.
fn summary(tool: &GraphTool, imported: Option<Value>) -> Value {
    let caps = tool.capabilities();
    let granted: Vec<&str> = caps.names().collect();
    json!({
        "name": bound::name(tool.name()),
        "description": bound::description(tool.description()),
        "digest": tool.digest(),
        "parameters": bound::value(tool.input_schema()),
        "capabilities": {"imported": imported, "granted": granted},
        "as_tool": tool.model_visible(),
        "as_graph_tool": tool.routable(),
        "timeout_ms": tool.timeout_ms(),
    })
}

/// The drawing of `spec`: `__start__`, its nodes, `__end__`, then the
/// edges in the order API.md gives, without duplicates.
pub(crate) fn drawing(spec: &GraphSpec) -> Value {
    let mut nodes = vec![virtual_node(START, "start")];
    nodes.extend(spec.nodes.iter().map(|n| {
        json!({
            "id": bound::name(&n.name),
            "label": bound::name(&n.name),
            "description": n.description.as_deref().map(bound::description),
            "kind": "node",
        })
    }));
    nodes.push(virtual_node(END, "end"));
    let mut edges = Edges::default();
    for entry in &spec.entry_points {
        edges.push(START, entry, "static", None, None);
    }
    for (i, edge) in spec.edges.iter().enumerate() {
        let join = (edge.sources.len() > 1).then(|| format!("join-{i}"));
        for source in &edge.sources {
            let kind = if join.is_some() { "join" } else { "static" };
            edges.push_join(source, &edge.target, kind, join.as_deref());
        }
    }
    for cond in &spec.conditional_edges {
        if cond.is_goto() {
            // Declared goto targets: no router, and the keys are the targets.
            for entry in &cond.path_map {
                edges.push(&cond.source, &entry.target, "goto", None, None);
            }
            continue;
        }
        if cond.path_map.is_empty() {
            for node in spec.nodes.iter().filter(|n| n.name != cond.source) {
                edges.push(&cond.source, &node.name, "send", None, Some(&cond.router));
            }
        }
        for entry in &cond.path_map {
            let label = Some(entry.key.as_str());
            edges.push(
                &cond.source,
                &entry.target,
                "conditional",
                label,
                Some(&cond.router),
            );
        }
    }
    for finish in &spec.finish_points {
        edges.push(finish, END, "static", None, None);
    }
    json!({"nodes": nodes, "edges": edges.list})
}

fn virtual_node(id: &str, kind: &str) -> Value {
    json!({"id": id, "label": id, "description": null, "kind": kind})
}

/// The edges of a drawing, each once.
#[derive(Default)]
struct Edges {
    list: Vec<Value>,
    seen: HashSet<String>,
}

impl Edges {
    fn push(
        &mut self,
        from: &str,
        to: &str,
        kind: &str,
        label: Option<&str>,
        router: Option<&str>,
    ) {
        let mut edge = json!({
            "from": bound::name(from),
            "to": bound::name(to),
            "kind": kind,
            "label": label.map(bound::name),
        });
        if let Some(r) = router {
            edge["router"] = json!(bound::name(r));
        }
        self.add(edge);
    }

    fn push_join(&mut self, from: &str, to: &str, kind: &str, join: Option<&str>) {
        let mut edge = json!({
            "from": bound::name(from),
            "to": bound::name(to),
            "kind": kind,
            "label": null,
        });
        if let Some(j) = join {
            edge["join"] = json!(j);
        }
        self.add(edge);
    }

    fn add(&mut self, edge: Value) {
        if self.seen.insert(edge.to_string()) {
            self.list.push(edge);
        }
    }
}

#[cfg(test)]
mod tests {
    use sandgraph_core::{ConditionalEdge, Edge, NodeSpec, PathEntry};

    use super::*;

    fn node(name: &str) -> NodeSpec {
        NodeSpec {
            name: name.into(),
            description: Some(format!("does {name}\u{1b}[2J")),
        }
    }

    #[test]
    fn the_drawing_types_every_edge() {
        let spec = GraphSpec {
            name: "g".into(),
            description: None,
            registration: Default::default(),
            parameters: None,
            timeout_ms: None,
            channels: Vec::new(),
            nodes: vec![node("a"), node("b"), node("c"), node("d")],
            edges: vec![
                Edge {
                    sources: vec!["a".into()],
                    target: "b".into(),
                },
                Edge {
                    sources: vec!["a".into(), "b".into()],
                    target: "c".into(),
                },
            ],
            conditional_edges: vec![
                ConditionalEdge {
                    source: "c".into(),
                    router: "after_c".into(),
                    path_map: vec![
                        PathEntry {
                            key: "done".into(),
                            target: END.into(),
                        },
                        PathEntry {
                            key: "again".into(),
                            target: "a".into(),
                        },
                    ],
                },
                ConditionalEdge {
                    source: "d".into(),
                    router: "fan".into(),
                    path_map: Vec::new(),
                },
                ConditionalEdge {
                    source: "b".into(),
                    router: sandgraph_core::GOTO_ROUTER.into(),
                    path_map: vec![PathEntry {
                        key: "d".into(),
                        target: "d".into(),
                    }],
                },
            ],
            entry_points: vec!["a".into(), "d".into()],
            finish_points: vec!["c".into()],
            strict: false,
        };
        let d = drawing(&spec);
        let nodes: Vec<&str> = d["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["id"].as_str().unwrap())
            .collect();
        assert_eq!(nodes, [START, "a", "b", "c", "d", END]);
        assert_eq!(d["nodes"][1]["description"], "does a\\u{1b}[2J");
        let edges: Vec<String> = d["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                format!(
                    "{}>{}:{}:{}",
                    e["from"].as_str().unwrap(),
                    e["to"].as_str().unwrap(),
                    e["kind"].as_str().unwrap(),
                    e["label"].as_str().unwrap_or("-")
                )
            })
            .collect();
        assert_eq!(
            edges,
            [
                "__start__>a:static:-",
                "__start__>d:static:-",
                "a>b:static:-",
                "a>c:join:-",
                "b>c:join:-",
                "c>__end__:conditional:done",
                "c>a:conditional:again",
                "d>a:send:-",
                "d>b:send:-",
                "d>c:send:-",
                "b>d:goto:-",
                "c>__end__:static:-",
            ]
        );
        assert_eq!(d["edges"][3]["join"], "join-1");
        assert_eq!(d["edges"][4]["join"], "join-1");
        assert_eq!(d["edges"][5]["router"], "after_c");
        assert_eq!(d["edges"][7]["router"], "fan");
        assert!(
            d["edges"][10].get("router").is_none(),
            "a goto edge has no router"
        );
    }
}
