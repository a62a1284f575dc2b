//! Graph specs and Mermaid diagrams as MCP resources:
//! `graph://<name>/spec` (`application/json`) and `graph://<name>/mermaid`
//! (`text/plain`).

use std::sync::Arc;

use rmcp::model::{Resource, ResourceContents, ResourceTemplate};
use sandgraph_registry::GraphTool;

/// Which view of a graph a resource is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Spec,
    Mermaid,
}

impl Kind {
    fn path(self) -> &'static str {
        match self {
            Kind::Spec => "spec",
            Kind::Mermaid => "mermaid",
        }
    }

    fn mime(self) -> &'static str {
        match self {
            Kind::Spec => "application/json",
            Kind::Mermaid => "text/plain",
        }
    }
}

/// The URI of a graph's view.
pub(crate) fn uri(name: &str, kind: Kind) -> String {
    format!("graph://{name}/{}", kind.path())
}

/// `graph://<name>/spec|mermaid` → the name and the view.
pub(crate) fn parse(uri: &str) -> Option<(&str, Kind)> {
    let rest = uri.strip_prefix("graph://")?;
    let (name, path) = rest.split_once('/')?;
    let kind = match path {
        "spec" => Kind::Spec,
        "mermaid" => Kind::Mermaid,
        _ => return None,
    };
    (!name.is_empty()).then_some((name, kind))
}

/// Two resources per mounted graph, by graph name.
pub(crate) fn list(tools: &[Arc<GraphTool>]) -> Vec<Resource> {
    let mut out = Vec::with_capacity(tools.len() * 2);
    for t in tools {
        let name = t.name();
        out.push(
            Resource::new(uri(name, Kind::Spec), format!("{name} spec"))
                .with_description(format!(
                    "The spec of graph \"{name}\" (channels, nodes, edges) as JSON."
                ))
                .with_mime_type(Kind::Spec.mime()),
        );
        out.push(
            Resource::new(uri(name, Kind::Mermaid), format!("{name} mermaid"))
                .with_description(format!("Graph \"{name}\" as a Mermaid flowchart."))
                .with_mime_type(Kind::Mermaid.mime()),
        );
    }
    out
}

/// The URI templates of the two views.
pub(crate) fn templates() -> Vec<ResourceTemplate> {
    [Kind::Spec, Kind::Mermaid]
        .into_iter()
        .map(|k| {
            ResourceTemplate::new(format!("graph://{{name}}/{}", k.path()), k.path())
                .with_mime_type(k.mime())
        })
        .collect()
}

/// The contents of a view of `tool`.
pub(crate) fn read(tool: &GraphTool, kind: Kind, uri: &str) -> Result<ResourceContents, String> {
    let text = match kind {
        Kind::Spec => serde_json::to_string_pretty(tool.spec())
            .map_err(|e| format!("cannot render the spec of \"{}\": {e}", tool.name()))?,
        Kind::Mermaid => tool.spec().to_mermaid(),
    };
    Ok(ResourceContents::TextResourceContents {
        uri: uri.to_owned(),
        mime_type: Some(kind.mime().to_owned()),
        text,
        meta: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip_and_others_are_refused() {
        for kind in [Kind::Spec, Kind::Mermaid] {
            assert_eq!(parse(&uri("echo_graph", kind)), Some(("echo_graph", kind)));
        }
        for bad in [
            "graph://echo_graph",
            "graph:///spec",
            "graph://echo_graph/other",
            "file:///etc/passwd",
            "",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
