//! Each rule of [`GraphSpec::validate`], as a table of one mutation of a
//! valid spec and the problem it must report ("" when the spec stays
//! valid), and the SDK's wording ([`Audience::Builder`]).

use serde_json::json;

use crate::fixtures::{channel, cond, edge, node, valid};
use crate::{
    Audience, END, GOTO_ROUTER, GraphSpec, MAX_CHANNELS, MAX_DESCRIPTION_LEN, MAX_EDGES,
    MAX_IDENT_LEN, MAX_NODES, Reducer, START, STRICT_MARKER_CHANNEL, SpecError,
};

/// A change to [`valid`] and what `validate` must say about it.
type Case = (fn(&mut GraphSpec), &'static str);

/// Runs every case: the problem contains the expected text, is lowercase
/// with no trailing period, and is the first of [`GraphSpec::problems`].
fn assert_cases(cases: &[Case]) {
    for (i, (mutate, expected)) in cases.iter().enumerate() {
        let mut spec = valid();
        mutate(&mut spec);
        let first = spec.problems(Audience::Host).into_iter().next();
        match (spec.validate(), *expected) {
            (Ok(()), "") => {}
            (Ok(()), expected) => panic!("case {i}: accepted, expected {expected:?}"),
            (Err(e), "") => panic!("case {i}: rejected with {e}"),
            (Err(SpecError(message)), expected) => {
                assert!(
                    message.contains(expected),
                    "case {i}: {message:?} lacks {expected:?}"
                );
                assert_eq!(message, message.to_lowercase(), "case {i}: not lowercase");
                assert!(!message.ends_with('.'), "case {i}: trailing period");
                assert_eq!(first.as_ref(), Some(&message), "case {i}: problems");
            }
        }
    }
}

#[test]
fn valid_spec_passes() {
    assert_eq!(valid().validate(), Ok(()));
    assert!(valid().problems(Audience::Host).is_empty());
    assert!(valid().problems(Audience::Builder).is_empty());
}

#[test]
fn header_faults() {
    assert_cases(&[
        (|s| s.name = String::new(), "graph name is empty"),
        (|s| s.name = "a".repeat(65), "is longer than 64 characters"),
        (|s| s.name = "a".repeat(64), ""),
        (
            |s| s.name = "has space".to_owned(),
            r#"graph name "has space" may only contain"#,
        ),
        (
            |s| s.name = "dot.ted".to_owned(),
            r#"graph name "dot.ted" may only contain"#,
        ),
        // The registry refuses it; the spec is fine.
        (|s| s.name = "run_code".to_owned(), ""),
        (
            |s| s.description = Some("x".repeat(MAX_DESCRIPTION_LEN + 1)),
            "graph description is 4097 characters long",
        ),
        (
            |s| s.parameters = Some(json!([1])),
            "parameters must be a json object, not an array",
        ),
        (|s| s.timeout_ms = Some(0), "timeout_ms must be positive"),
    ]);
}

#[test]
fn channel_faults() {
    assert_cases(&[
        (
            |s| s.channels[1].name = "x".to_owned(),
            r#"channel "x" is declared twice"#,
        ),
        (
            |s| s.channels[0].name = String::new(),
            "channel name is empty",
        ),
        (
            |s| s.channels[1].default = Some(json!({})),
            r#"channel "items": default is an object, but its reducer needs an array"#,
        ),
        (
            |s| s.channels[2].default = Some(json!([])),
            r#"channel "meta": default is an array, but its reducer needs an object"#,
        ),
        (
            |s| s.channels[3].default = Some(json!("0")),
            r#"channel "n": default is a string, but its reducer needs a number"#,
        ),
        (
            |s| s.channels[0].default = Some(json!({"big": 9007199254740992_i64})),
            r#"channel "x": default is not lossless json: $.big: integer 9007199254740992"#,
        ),
        (
            |s| {
                s.channels = (0..=MAX_CHANNELS)
                    .map(|i| channel(&format!("c{i}"), Reducer::Add, None))
                    .collect()
            },
            "257 channels, more than the limit of 256",
        ),
        (
            |s| {
                let marker = channel(STRICT_MARKER_CHANNEL, Reducer::LastValue, None);
                s.channels.push(marker)
            },
            r#"channel name "__strict__" is reserved (it marks a strict graph)"#,
        ),
    ]);
}

#[test]
fn node_faults() {
    assert_cases(&[
        (|s| s.nodes.clear(), "the graph has no nodes"),
        (
            |s| {
                s.nodes
                    .extend((0..MAX_NODES).map(|i| node(&format!("n{i}"))))
            },
            "260 nodes, more than the limit of 256",
        ),
        (|s| s.nodes.push(node("a")), r#"node "a" is declared twice"#),
        (
            |s| s.nodes.push(node(START)),
            r#"node name "__start__" is reserved"#,
        ),
        (
            |s| s.nodes.push(node(END)),
            r#"node name "__end__" is reserved"#,
        ),
        (|s| s.nodes.push(node("")), "node name is empty"),
        (
            |s| s.nodes.push(node(&"n".repeat(MAX_IDENT_LEN + 1))),
            "bytes long, more than 256",
        ),
        (
            |s| s.nodes[1].description = Some("é".repeat(MAX_DESCRIPTION_LEN + 1)),
            r#"node "b" description is 4097 characters long"#,
        ),
        (
            |s| s.nodes[1].description = Some("é".repeat(MAX_DESCRIPTION_LEN)),
            "",
        ),
    ]);
}

#[test]
fn entry_and_finish_faults() {
    assert_cases(&[
        (
            |s| s.entry_points.clear(),
            "no entry point and no conditional edge from __start__",
        ),
        (
            |s| {
                s.entry_points.clear();
                s.conditional_edges
                    .push(cond(START, "pick", &[("go", "a")]));
            },
            "",
        ),
        (
            |s| s.entry_points.push("zz".to_owned()),
            r#"entry point "zz" is not a node"#,
        ),
        (
            |s| s.finish_points.push(END.to_owned()),
            r#"finish point "__end__" is not a node"#,
        ),
        (
            |s| s.entry_points.push("aa".to_owned()),
            r#"entry point "aa" is not a node; did you mean "a"?"#,
        ),
        (
            |s| {
                s.nodes.push(node("summarize"));
                s.edges.push(edge(&["d"], "summarize"));
                s.finish_points.push("sumarize".to_owned());
            },
            r#"finish point "sumarize" is not a node; did you mean "summarize"?"#,
        ),
    ]);
}

#[test]
fn edge_faults() {
    assert_cases(&[
        (
            |s| s.edges.push(edge(&["a"], "zz")),
            r#"edge "a" -> "zz": unknown target node "zz""#,
        ),
        (
            |s| s.edges.push(edge(&["a"], "__end")),
            r#"edge "a" -> "__end": unknown target node "__end"; did you mean "__end__"?"#,
        ),
        (
            |s| {
                s.nodes.push(node("fetch"));
                s.edges.push(edge(&["fecth"], "a"));
            },
            r#"edge "fecth" -> "a": unknown source node "fecth"; did you mean "fetch"?"#,
        ),
        (
            |s| s.edges.push(edge(&["zz"], "a")),
            r#"edge "zz" -> "a": unknown source node "zz""#,
        ),
        (
            |s| s.edges.push(edge(&[], "a")),
            r#"edge [] -> "a": no source node"#,
        ),
        (
            |s| s.edges.push(edge(&[START], "a")),
            r#"edge "__start__" -> "a": __start__ cannot be an edge source; use an entry point"#,
        ),
        (
            |s| s.edges.push(edge(&[END], "a")),
            r#"edge "__end__" -> "a": __end__ cannot be an edge source"#,
        ),
        (
            |s| s.edges.push(edge(&["a"], START)),
            r#"edge "a" -> "__start__": unknown target node"#,
        ),
        (|s| s.edges.push(edge(&["a"], END)), ""),
        (
            |s| s.edges.push(edge(&["b", "b"], "d")),
            r#"edge ["b", "b"] -> "d": source "b" is listed twice"#,
        ),
        (
            |s| s.edges.push(edge(&["b", "q"], "d")),
            r#"edge ["b", "q"] -> "d": unknown source node "q""#,
        ),
        (
            |s| s.edges.extend((0..MAX_EDGES).map(|_| edge(&["a"], "b"))),
            "1028 edges, more than the limit of 1024",
        ),
    ]);
}

#[test]
fn conditional_edge_faults() {
    let label = r#"conditional edge from "a" (router "r")"#;
    assert_cases(&[
        (
            |s| {
                s.nodes.push(node("review"));
                s.conditional_edges
                    .push(cond("a", "r", &[("ok", "reveiw"), ("no", "review")]));
            },
            r#"path-map key "ok" leads to unknown node "reveiw"; did you mean "review"?"#,
        ),
        (
            |s| {
                s.nodes.push(node("review"));
                s.edges.push(edge(&["a"], "review"));
                s.conditional_edges.push(cond("reviews", "r", &[]));
            },
            r#"conditional edge from "reviews": unknown source node "reviews"; did you mean "review"?"#,
        ),
        (
            |s| s.conditional_edges.push(cond("zz", "r", &[])),
            r#"conditional edge from "zz": unknown source node "zz""#,
        ),
        (
            |s| s.conditional_edges.push(cond(END, "r", &[])),
            r#"conditional edge from "__end__": unknown source node"#,
        ),
        (
            |s| s.conditional_edges.push(cond("a", "", &[])),
            r#"conditional edge from "a": router name is empty"#,
        ),
        (
            |s| {
                let map = [("k", "b"), ("k", "c")];
                s.conditional_edges.push(cond("a", "r", &map))
            },
            r#"conditional edge from "a" (router "r"): path-map key "k" is listed twice"#,
        ),
        (
            |s| s.conditional_edges.push(cond("a", "r", &[("k", "zz")])),
            r#"conditional edge from "a" (router "r"): path-map key "k" leads to unknown node "zz""#,
        ),
        (
            |s| s.conditional_edges.push(cond("a", "r", &[("k", START)])),
            "unknown node \"__start__\"",
        ),
        (
            |s| {
                s.conditional_edges.push(cond("a", "r", &[("k", END)]));
                s.conditional_edges.push(cond("b", "r", &[("k", END)]));
            },
            r#"conditional edge from "b": router name "r" is used by another conditional edge"#,
        ),
    ]);
    let mut spec = valid();
    let long_key = "k".repeat(MAX_IDENT_LEN + 1);
    spec.conditional_edges
        .push(cond("a", "r", &[(long_key.as_str(), END)]));
    let e = spec.validate().unwrap_err().to_string();
    assert!(
        e.ends_with(&format!("{label}: path-map key is longer than 256 bytes")),
        "{e}"
    );
}

#[test]
fn unreachable_nodes() {
    assert_cases(&[
        (
            |s| s.nodes.push(node("island")),
            r#"node "island" is unreachable from __start__"#,
        ),
        (
            |s| {
                s.nodes.push(node("island"));
                s.edges.push(edge(&["island"], "a"));
            },
            r#"node "island" is unreachable from __start__"#,
        ),
        // A join reaches its target only when every source is reachable.
        (
            |s| {
                s.nodes.push(node("island"));
                s.nodes.push(node("after"));
                s.edges.push(edge(&["a", "island"], "after"));
            },
            r#"node "island" is unreachable from __start__"#,
        ),
        // A conditional edge without a path map may reach any node.
        (
            |s| {
                s.nodes.push(node("island"));
                s.conditional_edges.push(cond("b", "anywhere", &[]));
            },
            "",
        ),
        (
            |s| {
                s.nodes.push(node("island"));
                s.conditional_edges
                    .push(cond("b", "r", &[("go", "island")]));
            },
            "",
        ),
    ]);
}

#[test]
fn goto_declarations() {
    let label = r#"conditional edge from "a" (router "__goto__")"#;
    assert_cases(&[
        // Two nodes may declare goto targets; the name is not a router.
        (
            |s| {
                s.conditional_edges
                    .push(cond("a", GOTO_ROUTER, &[("d", "d"), (END, END)]));
                s.conditional_edges
                    .push(cond("b", GOTO_ROUTER, &[("a", "a")]));
            },
            "",
        ),
        (
            |s| s.conditional_edges.push(cond("a", GOTO_ROUTER, &[])),
            "declares no goto targets (a __goto__ edge needs a path map)",
        ),
        (
            |s| {
                let map = [("again", "b")];
                s.conditional_edges.push(cond("a", GOTO_ROUTER, &map))
            },
            r#"path-map key "again" leads to "b", but a __goto__ edge maps each goto target to itself"#,
        ),
        (
            |s| {
                s.nodes.push(node("review"));
                s.edges.push(edge(&["a"], "review"));
                let map = [("reveiw", "reveiw")];
                s.conditional_edges.push(cond("a", GOTO_ROUTER, &map))
            },
            r#"path-map key "reveiw" leads to unknown node "reveiw"; did you mean "review"?"#,
        ),
        (
            |s| {
                let map = [("b", "b")];
                s.conditional_edges.push(cond(START, GOTO_ROUTER, &map))
            },
            "__start__ cannot declare goto targets",
        ),
        // A declaration from __start__ is no entry.
        (
            |s| {
                s.entry_points.clear();
                let map = [("a", "a")];
                s.conditional_edges.push(cond(START, GOTO_ROUTER, &map))
            },
            "no entry point and no conditional edge from __start__",
        ),
    ]);
    let mut spec = valid();
    spec.conditional_edges
        .push(cond("a", GOTO_ROUTER, &[("zz", "zz")]));
    assert_eq!(
        spec.validate().unwrap_err().to_string(),
        format!(r#"invalid graph spec: {label}: path-map key "zz" leads to unknown node "zz""#)
    );
}

#[test]
fn a_node_reached_only_by_a_declared_goto_is_reachable() {
    let mut spec = valid();
    spec.nodes.push(node("escalate"));
    let e = spec.validate().unwrap_err().to_string();
    assert!(e.contains(r#"node "escalate" is unreachable"#), "{e}");
    spec.conditional_edges
        .push(cond("b", GOTO_ROUTER, &[("escalate", "escalate")]));
    assert_eq!(spec.validate(), Ok(()));
    assert!(spec.reachable().contains("escalate"));
    assert!(spec.problems(Audience::Builder).is_empty());
    // Only when its source is reached.
    spec.nodes.push(node("island"));
    spec.conditional_edges[1].source = "island".to_owned();
    let problems = spec.problems(Audience::Builder);
    assert_eq!(
        problems,
        [
            r#"node "escalate" is unreachable from __start__"#,
            r#"node "island" is unreachable from __start__"#
        ]
    );
}

#[test]
fn names_with_control_characters_are_refused() {
    let mut spec = valid();
    spec.channels[0].name = "log\u{1b}]0;x\u{7}".into();
    let e = spec.validate().unwrap_err().to_string();
    assert!(e.contains("holds a control or bidi character"), "{e}");
    assert!(!e.chars().any(char::is_control), "{e:?}");
}

#[test]
fn spec_error_display() {
    let mut spec = valid();
    spec.edges.push(edge(&["a"], "b2"));
    assert_eq!(
        spec.validate().unwrap_err().to_string(),
        r#"invalid graph spec: edge "a" -> "b2": unknown target node "b2"; did you mean "b"?"#
    );
}

#[test]
fn problems_lists_every_fault_in_the_order_validate_meets_them() {
    let mut spec = valid();
    spec.name = String::new();
    spec.timeout_ms = Some(0);
    spec.nodes.push(node("a"));
    spec.nodes.push(node("island"));
    spec.nodes.push(node("lonely"));
    spec.edges.push(edge(&["a"], "b2"));
    let problems = spec.problems(Audience::Host);
    assert_eq!(
        problems[..4],
        [
            "graph name is empty",
            "timeout_ms must be positive",
            r#"node "a" is declared twice"#,
            r#"edge "a" -> "b2": unknown target node "b2"; did you mean "b"?"#,
        ]
    );
    assert!(problems[4].starts_with(r#"node "island" is unreachable from __start__: add"#));
    assert!(problems[5].starts_with(r#"node "lonely" is unreachable"#));
    assert_eq!(problems.len(), 6, "{problems:#?}");
}

#[test]
fn builder_wording_has_no_hints_and_speaks_of_the_builder() {
    let mut spec = valid();
    spec.name = "run_code".to_owned();
    spec.entry_points.clear();
    spec.edges.push(edge(&["a"], "b2"));
    spec.conditional_edges.push(cond("b", "again", &[]));
    assert_eq!(
        spec.problems(Audience::Builder),
        [
            r#"graph name "run_code" is reserved"#,
            "the graph has no entry point and no conditional edge from __start__ \
             (add .edge(START, node))",
            r#"edge "a" -> "b2": unknown target node "b2""#,
            r#"router "again" is used twice"#,
            r#"node "a" is unreachable from __start__"#,
            r#"node "b" is unreachable from __start__"#,
            r#"node "c" is unreachable from __start__"#,
            r#"node "d" is unreachable from __start__"#,
        ]
    );
}
