//! The spec drawn as a Mermaid flowchart.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use crate::{END, GraphSpec, START};

impl GraphSpec {
    /// Draws the graph as a Mermaid `flowchart TD`, deterministically: nodes
    /// in spec order, then entry edges, static edges (a join edge as one
    /// arrow per source), conditional edges (dashed, labelled with their
    /// path-map key; without a path map, as for a `Send` fan-out, an
    /// unlabelled dashed arrow to every other node, never to the source
    /// itself or to `__end__`; a node's declared goto targets, an
    /// unlabelled dashed arrow to each) and finish edges.
    ///
    /// Node names that are not plain identifiers get a sanitized id and keep
    /// their name as a quoted label.
    pub fn to_mermaid(&self) -> String {
        let ids = MermaidIds::new(self);
        let mut out = String::from("flowchart TD\n");
        // `write!` into a String cannot fail.
        let _ = writeln!(out, "    {START}([{START}]):::first");
        for node in &self.nodes {
            let id = ids.get(&node.name);
            if id == node.name {
                let _ = writeln!(out, "    {id}({id})");
            } else {
                let _ = writeln!(out, "    {id}(\"{}\")", mermaid_escape(&node.name));
            }
        }
        let _ = writeln!(out, "    {END}([{END}]):::last");

        let mut lines: Vec<String> = Vec::new();
        for entry in &self.entry_points {
            lines.push(format!("{START} --> {}", ids.get(entry)));
        }
        for edge in &self.edges {
            for source in &edge.sources {
                lines.push(format!("{} --> {}", ids.get(source), ids.get(&edge.target)));
            }
        }
        for cond in &self.conditional_edges {
            let source = ids.get(&cond.source);
            if cond.path_map.is_empty() {
                // A router without a path map (typically a `Send` fan-out)
                // may name any node: draw one dashed arrow to each other
                // node, none back to itself or to `__end__`, which would
                // turn every such router into a loop and an exit.
                for target in self.nodes.iter().map(|n| n.name.as_str()) {
                    if target != cond.source {
                        lines.push(format!("{source} -.-> {}", ids.get(target)));
                    }
                }
            }
            if cond.is_goto() {
                // Declared goto targets: the keys are the targets, so no
                // label.
                for entry in &cond.path_map {
                    lines.push(format!("{source} -.-> {}", ids.get(&entry.target)));
                }
                continue;
            }
            for entry in &cond.path_map {
                let target = ids.get(&entry.target);
                let simple = !entry.key.is_empty()
                    && !entry.key.starts_with(' ')
                    && !entry.key.ends_with(' ')
                    && entry
                        .key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ' ');
                if simple {
                    lines.push(format!("{source} -. {} .-> {target}", entry.key));
                } else {
                    lines.push(format!(
                        "{source} -.->|\"{}\"| {target}",
                        mermaid_escape(&entry.key)
                    ));
                }
            }
        }
        for finish in &self.finish_points {
            lines.push(format!("{} --> {END}", ids.get(finish)));
        }
        let mut seen = HashSet::new();
        for line in lines {
            if seen.insert(line.clone()) {
                let _ = writeln!(out, "    {line}");
            }
        }
        out.push_str("    classDef first fill-opacity:0\n");
        out.push_str("    classDef last fill:#bfb6fc\n");
        out
    }
}

/// Mermaid ids for the graph's nodes: the name itself when it is a plain
/// identifier that Mermaid does not treat as a keyword, otherwise a
/// sanitized, de-duplicated variant.
struct MermaidIds {
    ids: HashMap<String, String>,
}

impl MermaidIds {
    fn new(spec: &GraphSpec) -> Self {
        const KEYWORDS: [&str; 12] = [
            "end",
            "graph",
            "subgraph",
            "flowchart",
            "style",
            "class",
            "classdef",
            "click",
            "linkstyle",
            "direction",
            "default",
            "call",
        ];
        let plain = |name: &str| {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !KEYWORDS.contains(&name.to_ascii_lowercase().as_str())
        };
        let mut ids = HashMap::new();
        let mut taken: HashSet<String> = HashSet::from([START.to_owned(), END.to_owned()]);
        // Plain names keep their id; claim them first so sanitized ids avoid them.
        for node in &spec.nodes {
            if plain(&node.name) && taken.insert(node.name.clone()) {
                ids.insert(node.name.clone(), node.name.clone());
            }
        }
        for node in &spec.nodes {
            if ids.contains_key(&node.name) {
                continue;
            }
            let base: String = node
                .name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let base = format!("n_{base}");
            let mut id = base.clone();
            let mut n = 1;
            while !taken.insert(id.clone()) {
                n += 1;
                id = format!("{base}_{n}");
            }
            ids.insert(node.name.clone(), id);
        }
        MermaidIds { ids }
    }

    fn get<'a>(&'a self, name: &'a str) -> &'a str {
        self.ids.get(name).map_or(name, String::as_str)
    }
}

/// Escapes text for a quoted Mermaid label.
fn mermaid_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("#quot;"),
            '#' => out.push_str("#35;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::fixtures::{cond, edge, node, valid};
    use crate::{END, START};

    #[test]
    fn mermaid_draws_every_kind_of_edge() {
        let mut spec = valid();
        spec.conditional_edges.push(cond("b", "free", &[]));
        let expected = "\
flowchart TD
    __start__([__start__]):::first
    a(a)
    b(b)
    c(c)
    d(d)
    __end__([__end__]):::last
    __start__ --> a
    a --> b
    a --> c
    b --> d
    c --> d
    d -. again .-> a
    d -. done .-> __end__
    b -.-> a
    b -.-> c
    b -.-> d
    d --> __end__
    classDef first fill-opacity:0
    classDef last fill:#bfb6fc
";
        assert_eq!(spec.to_mermaid(), expected);
        assert_eq!(spec.to_mermaid(), expected, "deterministic");
    }

    #[test]
    fn mermaid_draws_a_send_fan_out_to_the_other_nodes_only() {
        let mut spec = valid();
        spec.nodes = vec![node("plan"), node("work"), node("merge")];
        spec.entry_points = vec!["plan".to_owned()];
        spec.edges = vec![edge(&["work"], "merge")];
        spec.conditional_edges = vec![cond("plan", "fan_out", &[])];
        spec.finish_points = vec!["merge".to_owned()];
        assert_eq!(spec.validate(), Ok(()));
        let mermaid = spec.to_mermaid();
        let dashed: Vec<&str> = mermaid.lines().filter(|l| l.contains("-.->")).collect();
        assert_eq!(
            dashed,
            ["    plan -.-> work", "    plan -.-> merge"],
            "{mermaid}"
        );
        assert!(!mermaid.contains("plan -.-> plan"), "{mermaid}");
        assert!(!mermaid.contains("-.-> __end__"), "{mermaid}");

        // From __start__, every node is a target.
        spec.entry_points.clear();
        spec.conditional_edges = vec![cond(START, "pick", &[])];
        let mermaid = spec.to_mermaid();
        let dashed: Vec<&str> = mermaid.lines().filter(|l| l.contains("-.->")).collect();
        assert_eq!(
            dashed,
            [
                "    __start__ -.-> plan",
                "    __start__ -.-> work",
                "    __start__ -.-> merge"
            ],
            "{mermaid}"
        );
    }

    #[test]
    fn mermaid_draws_declared_goto_targets_dashed_without_labels() {
        let mut spec = valid();
        spec.conditional_edges
            .push(cond("b", crate::GOTO_ROUTER, &[("c", "c"), (END, END)]));
        let mermaid = spec.to_mermaid();
        let dashed: Vec<&str> = mermaid.lines().filter(|l| l.contains("-.")).collect();
        assert_eq!(
            dashed,
            [
                "    d -. again .-> a",
                "    d -. done .-> __end__",
                "    b -.-> c",
                "    b -.-> __end__"
            ],
            "{mermaid}"
        );
    }

    #[test]
    fn mermaid_sanitizes_ids_and_escapes_labels() {
        let mut spec = valid();
        spec.nodes = vec![
            node("end"),
            node("my node"),
            node("n_my_node"),
            node("a\"b"),
        ];
        spec.entry_points = vec!["end".to_owned(), "my node".to_owned()];
        spec.edges = vec![edge(&["my node"], "a\"b")];
        spec.conditional_edges = vec![
            cond(START, "r", &[("to x", "n_my_node")]),
            cond("end", "r", &[("a|b", END)]),
        ];
        spec.finish_points.clear();
        let expected = "\
flowchart TD
    __start__([__start__]):::first
    n_end(\"end\")
    n_my_node_2(\"my node\")
    n_my_node(n_my_node)
    n_a_b(\"a#quot;b\")
    __end__([__end__]):::last
    __start__ --> n_end
    __start__ --> n_my_node_2
    n_my_node_2 --> n_a_b
    __start__ -. to x .-> n_my_node
    n_end -.->|\"a|b\"| __end__
    classDef first fill-opacity:0
    classDef last fill:#bfb6fc
";
        assert_eq!(spec.to_mermaid(), expected);
    }
}
