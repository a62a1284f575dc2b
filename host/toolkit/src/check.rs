//! `sandgraph check GRAPH.wasm|DIR`: what a CI gate wants to know of graph
//! components without running a node. Each component is loaded (compiled
//! and described, through the compile cache) and reported with its world
//! version, the brokered capabilities it imports, its size, its sha256
//! digest and the warnings of a lint of its spec:
//!
//! - `no_parameters`: a graph listed as a tool (`as_tool` or
//!   `as_graph_tool`) declares no parameters, so models and routers see
//!   one opaque `input` argument;
//! - `unreachable_finish`: no path leads from `__start__` to `__end__`, so
//!   every run ends at the recursion limit (unless a node jumps out with a
//!   `goto` the spec cannot show);
//! - `missing_description`: the graph has no description, so models are
//!   shown one synthesized from its structure;
//! - `undescribed_parameter`: a declared parameter has no description.
//!
//! A component that fails to load makes the command exit with the load
//! error's code; `--deny-warnings` makes any warning exit 1 ([`verdict`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sandgraph_core::{END, GraphSpec, START};
use sandgraph_runtime::{RunError, Runtime};
use serde_json::{Value, json};

use crate::Error;
use crate::cache::CacheChoice;
use crate::show;

/// Most components one `check` of a folder reports: a folder of graphs
/// holds tens; the bound keeps a folder of junk from running for hours.
pub const MAX_CHECKED_FILES: usize = 4096;

/// One lint finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// Stable name of the lint (`no_parameters`, ...).
    pub lint: &'static str,
    /// What is wrong and what to do, naming the graph.
    pub message: String,
}

/// What [`check`] found out about one file.
pub struct Report {
    path: PathBuf,
    size: u64,
    sha256: Option<String>,
    outcome: Result<Loaded, RunError>,
}

struct Loaded {
    name: String,
    world: &'static str,
    capabilities: Vec<&'static str>,
    description: Option<String>,
    nodes: usize,
    warnings: Vec<Warning>,
}

/// Checks the component at `path`, or every `*.wasm` of the folder
/// `path` (not recursive), loading each through `cache`: one report per
/// file, in order. A file that fails to load is reported, not an error.
pub async fn check(path: &Path, cache: &CacheChoice) -> Result<Vec<Report>, Error> {
    let files = files(path)?;
    let rt = sandgraph_factors::runtime(Default::default())?;
    let store = cache.open();
    let mut reports = Vec::with_capacity(files.len());
    for path in files {
        reports.push(check_file(&rt, store.as_ref(), path).await);
    }
    Ok(reports)
}

/// What the reports come to: the first load error, else with
/// `deny_warnings` an [`Error::Check`] (`lint`) when any graph warned.
pub fn verdict(reports: &[Report], deny_warnings: bool) -> Result<(), Error> {
    if let Some(e) = reports.iter().find_map(|r| r.outcome.as_ref().err()) {
        return Err(e.clone().into());
    }
    let warnings = warning_count(reports);
    if deny_warnings && warnings > 0 {
        return Err(Error::Check {
            code: "lint",
            message: format!(
                "{warnings} warning(s) with --deny-warnings: fix them or drop the flag"
            ),
        });
    }
    Ok(())
}

/// The lint warnings of all the reports.
fn warning_count(reports: &[Report]) -> usize {
    reports
        .iter()
        .filter_map(|r| r.outcome.as_ref().ok())
        .map(|l| l.warnings.len())
        .sum()
}

/// The reports as one pretty JSON object, `{"graphs": [...]}`.
pub fn to_json(reports: &[Report]) -> Result<String, Error> {
    let graphs: Vec<Value> = reports.iter().map(report_json).collect();
    serde_json::to_string_pretty(&json!({ "graphs": graphs }))
        .map_err(|e| Error::internal(format!("cannot render JSON: {e}")))
}

/// The file, or the sorted `*.wasm` files of the folder.
fn files(path: &Path) -> Result<Vec<PathBuf>, Error> {
    let invalid = |m: String| Error::invalid(m);
    let meta = std::fs::metadata(path)
        .map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    crate::cache::files_in(path, "wasm", MAX_CHECKED_FILES, " to check")
}

async fn check_file(
    rt: &Runtime,
    store: Option<&sandgraph_store::CompileCache>,
    path: PathBuf,
) -> Report {
    let bytes = match crate::cache::read_component(&path) {
        Ok(bytes) => bytes,
        Err(e) => {
            return Report {
                path,
                size: 0,
                sha256: None,
                outcome: Err(e),
            };
        }
    };
    let size = bytes.len() as u64;
    let sha256 = sandgraph_store::sha256_hex(&bytes);
    let outcome = sandgraph_registry::load_cached(rt, store, bytes)
        .await
        .map(|graph| Loaded {
            name: graph.name().to_owned(),
            world: graph.world_version(),
            capabilities: graph.capabilities().to_vec(),
            description: graph.spec().description.clone(),
            nodes: graph.spec().nodes.len(),
            warnings: lint(graph.spec()),
        })
        .map_err(|e| RunError::new(e.code, format!("{}: {}", path.display(), e.message)));
    Report {
        path,
        size,
        sha256: Some(sha256),
        outcome,
    }
}

/// The lint warnings of `spec`, in a fixed order.
pub fn lint(spec: &GraphSpec) -> Vec<Warning> {
    let mut out = Vec::new();
    let name = &spec.name;
    let listed = spec.registration.as_tool || spec.registration.as_graph_tool;
    match &spec.parameters {
        None if listed => out.push(Warning {
            lint: "no_parameters",
            message: format!(
                "graph \"{name}\" is listed as a tool but declares no parameters: models see one \
                 opaque `input` argument; declare them (Rust `.parameters(...)`, Python \
                 `compile(parameters=...)`, JavaScript `compile({{ parameters }})`)"
            ),
        }),
        Some(Value::Object(params)) => {
            for (key, param) in params {
                let described = param
                    .get("description")
                    .and_then(Value::as_str)
                    .is_some_and(|d| !d.trim().is_empty());
                if !described {
                    out.push(Warning {
                        lint: "undescribed_parameter",
                        message: format!(
                            "graph \"{name}\": parameter \"{key}\" has no description: models \
                             fill it in from its name alone; add `\"description\"`"
                        ),
                    });
                }
            }
        }
        _ => {}
    }
    if !reaches_end(spec) {
        out.push(Warning {
            lint: "unreachable_finish",
            message: format!(
                "graph \"{name}\": no path leads from {START} to {END}, so every run ends at the \
                 recursion limit; add an edge to {END}, a finish point, or a router path to {END}"
            ),
        });
    }
    if spec
        .description
        .as_deref()
        .is_none_or(|d| d.trim().is_empty())
    {
        out.push(Warning {
            lint: "missing_description",
            message: format!(
                "graph \"{name}\" has no description: models are shown one made from its node \
                 and state names; add `.description(...)`"
            ),
        });
    }
    out
}

/// Whether a run can end: some node reachable from `__start__` is a
/// finish point, has an edge or a router path to `__end__`, has a router
/// without a path map (it may go anywhere), or has no way out at all (the
/// run stops when no task is left). A join edge counts once all of its
/// sources are reached, as the spec's own reachability check does.
fn reaches_end(spec: &GraphSpec) -> bool {
    let reached = spec.reachable();
    if reached.contains(END) {
        return true;
    }
    // A router without a path map may return `__end__`.
    if spec
        .conditional_edges
        .iter()
        .any(|c| c.path_map.is_empty() && reached.contains(c.source.as_str()))
    {
        return true;
    }
    spec.nodes
        .iter()
        .filter(|n| reached.contains(n.name.as_str()))
        .any(|n| {
            let name = n.name.as_str();
            spec.finish_points.iter().any(|f| f == name)
                || (!spec
                    .edges
                    .iter()
                    .any(|e| e.sources.iter().any(|s| s == name))
                    && !spec.conditional_edges.iter().any(|c| c.source == name))
        })
}

fn report_json(r: &Report) -> Value {
    let mut v = json!({
        "path": r.path.display().to_string(),
        "size_bytes": r.size,
        "sha256": r.sha256,
    });
    let o = v.as_object_mut().expect("a json object literal");
    match &r.outcome {
        Ok(l) => {
            o.insert("ok".into(), true.into());
            o.insert("name".into(), l.name.clone().into());
            o.insert(
                "world".into(),
                format!("sandgraph:graph@{}.0", l.world).into(),
            );
            o.insert("capabilities".into(), json!(l.capabilities));
            o.insert("description".into(), json!(l.description));
            o.insert("nodes".into(), l.nodes.into());
            let warnings: Vec<Value> = l
                .warnings
                .iter()
                .map(|w| json!({"lint": w.lint, "message": w.message}))
                .collect();
            o.insert("warnings".into(), warnings.into());
        }
        Err(e) => {
            o.insert("ok".into(), false.into());
            o.insert(
                "error".into(),
                json!({"code": e.code.as_str(), "message": e.message}),
            );
        }
    }
    v
}

/// The text report of one file: a line saying it failed to load, or its
/// graph, world, capabilities, nodes, size, digest and warnings.
pub fn render(r: &Report) -> String {
    let path = show::line(&r.path.display().to_string(), show::MAX_LINE_BYTES);
    let l = match &r.outcome {
        Err(e) => {
            return format!(
                "{path}: failed to load: error[{}]: {}",
                e.code.as_str(),
                show::line(&e.message, show::MAX_REPORT_BYTES)
            );
        }
        Ok(l) => l,
    };
    let caps = if l.capabilities.is_empty() {
        "none".to_owned()
    } else {
        l.capabilities.join(", ")
    };
    let mut out = format!(
        "{path}: graph {}\n",
        show::line(&l.name, show::MAX_LINE_BYTES)
    );
    let _ = writeln!(out, "  world         sandgraph:graph@{}.0", l.world);
    let _ = writeln!(out, "  capabilities  {caps}");
    let _ = writeln!(out, "  nodes         {}", l.nodes);
    let _ = writeln!(out, "  size          {} bytes", r.size);
    let _ = write!(
        out,
        "  sha256        {}",
        r.sha256.as_deref().unwrap_or("-")
    );
    for w in &l.warnings {
        let _ = write!(
            out,
            "\n  warning[{}]: {}",
            w.lint,
            show::line(&w.message, show::MAX_LINE_BYTES)
        );
    }
    out
}

/// The summary line of all the reports.
pub fn summary(reports: &[Report]) -> String {
    let failed = reports.iter().filter(|r| r.outcome.is_err()).count();
    format!(
        "checked {} graph(s): {} loaded, {failed} failed to load, {} warning(s)",
        reports.len(),
        reports.len() - failed,
        warning_count(reports)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandgraph_core::{ConditionalEdge, Edge, NodeSpec, PathEntry};

    /// A spec of `edges` (`__start__` edges become entry points), not
    /// listed as a tool, with a description.
    fn spec(edges: &[(&str, &str)]) -> GraphSpec {
        let mut nodes: Vec<&str> = Vec::new();
        for n in edges.iter().flat_map(|(a, b)| [*a, *b]) {
            if n != START && n != END && !nodes.contains(&n) {
                nodes.push(n);
            }
        }
        let entry: Vec<&str> = edges
            .iter()
            .filter(|(a, _)| *a == START)
            .map(|(_, b)| *b)
            .collect();
        let static_edges: Vec<Value> = edges
            .iter()
            .filter(|(a, _)| *a != START)
            .map(|(a, b)| json!({"sources": [a], "target": b}))
            .collect();
        let nodes: Vec<Value> = nodes.iter().map(|n| json!({"name": n})).collect();
        serde_json::from_value(json!({
            "name": "g",
            "description": "A graph.",
            "registration": {"as_tool": false, "as_graph_tool": false},
            "channels": [],
            "nodes": nodes,
            "edges": static_edges,
            "entry_points": entry,
        }))
        .expect("a valid spec")
    }

    fn lints(s: &GraphSpec) -> Vec<&'static str> {
        lint(s).iter().map(|w| w.lint).collect()
    }

    #[test]
    fn a_clean_graph_has_no_warnings() {
        assert!(lints(&spec(&[(START, "a"), ("a", END)])).is_empty());
        // A node without a way out ends the run when nothing is left.
        assert!(lints(&spec(&[(START, "a"), ("a", "b")])).is_empty());
    }

    #[test]
    fn a_cycle_without_an_exit_is_an_unreachable_finish() {
        let s = spec(&[(START, "a"), ("a", "b"), ("b", "a")]);
        assert_eq!(lints(&s), ["unreachable_finish"]);
        assert!(lint(&s)[0].message.contains("no path leads from __start__"));
        // A router path to the end is a way out.
        let mut exit = s.clone();
        exit.conditional_edges.push(ConditionalEdge {
            source: "b".into(),
            router: "r".into(),
            path_map: vec![PathEntry {
                key: "done".into(),
                target: END.into(),
            }],
        });
        assert!(lints(&exit).is_empty());
        // So is a router without a path map (it may go anywhere) ...
        let mut anywhere = s.clone();
        anywhere.conditional_edges.push(ConditionalEdge {
            source: "a".into(),
            router: "r".into(),
            path_map: vec![],
        });
        assert!(lints(&anywhere).is_empty());
        // ... and a finish point.
        let mut finish = s;
        finish.finish_points.push("b".into());
        assert!(lints(&finish).is_empty());
    }

    #[test]
    fn a_join_reaches_the_end_only_once_all_its_sources_are_reached() {
        let mut s = spec(&[(START, "a"), ("a", "a")]);
        s.nodes.push(NodeSpec {
            name: "never".into(),
            description: None,
        });
        s.edges.push(Edge {
            sources: vec!["a".into(), "never".into()],
            target: END.into(),
        });
        assert_eq!(lints(&s), ["unreachable_finish"]);
    }

    #[test]
    fn tools_without_parameters_and_descriptions_are_flagged() {
        let mut s = spec(&[(START, "a"), ("a", END)]);
        s.registration.as_graph_tool = true;
        s.description = Some("  ".into());
        assert_eq!(lints(&s), ["no_parameters", "missing_description"]);
        s.parameters = Some(json!({
            "topic": {"type": "string", "description": "What to write about."},
            "tone": {"type": "string"}
        }));
        s.description = None;
        let found = lint(&s);
        assert_eq!(
            found.iter().map(|w| w.lint).collect::<Vec<_>>(),
            ["undescribed_parameter", "missing_description"]
        );
        assert!(found[0].message.contains("parameter \"tone\""));
    }
}
