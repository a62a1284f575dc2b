//! LangGraph conformance of the Pregel executor, driven by a fake backend.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{Call, Fake, FakeBackend, command, graph, object, send, to, update};
use sandgraph_core::{
    CompiledGraph, ErrorCode, GraphSpec, NodeContext, NodeOutput, Reducer, RouteTarget, RunConfig,
    RunError, RunOutcome, StepEvent, TaskUpdate, run,
};
use serde_json::{Map, Value, json};
use tokio::sync::Barrier;

const TIMEOUT: Duration = Duration::from_secs(10);

struct Ran {
    result: Result<RunOutcome, RunError>,
    events: Vec<StepEvent>,
}

impl Ran {
    fn state(&self) -> &Map<String, Value> {
        match &self.result {
            Ok(RunOutcome::Completed(state)) => state,
            other => panic!("expected a completed run, got {other:?}"),
        }
    }

    fn error(&self) -> &RunError {
        match &self.result {
            Err(err) => err,
            other => panic!("expected an error, got {other:?}"),
        }
    }
}

async fn run_with(
    spec: GraphSpec,
    backend: &Arc<FakeBackend>,
    input: Value,
    config: RunConfig,
) -> Ran {
    let graph = Arc::new(CompiledGraph::new(spec).expect("valid spec"));
    let mut events = Vec::new();
    let mut on_step = |event: &StepEvent| events.push(event.clone());
    let result = tokio::time::timeout(TIMEOUT, run(&graph, backend, input, &config, &mut on_step))
        .await
        .expect("the run did not finish in time (tasks not concurrent?)");
    Ran { result, events }
}

async fn run_graph(spec: GraphSpec, backend: &Arc<FakeBackend>, input: Value) -> Ran {
    run_with(spec, backend, input, RunConfig::default()).await
}

fn push(item: Value) -> impl Fn(&Value, &NodeContext) -> Result<NodeOutput, RunError> {
    move |_, _| update(json!({ "log": [item.clone()] }))
}

fn ends(calls: &[Call]) -> Vec<String> {
    calls
        .iter()
        .filter_map(|c| match c {
            Call::NodeEnd { node, .. } => Some(node.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn writes_apply_in_task_order_not_completion_order() {
    let spec = graph(&["a", "b"])
        .channel("log", Reducer::Append)
        .entry("b")
        .entry("a")
        .build();
    let fake = Fake::new()
        .slow_node("a", Duration::from_millis(100), push(json!("a")))
        .node("b", push(json!("b")))
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(ran.state()["log"], json!(["a", "b"]));
    // b finished first, yet a's write was applied first.
    assert_eq!(ends(&fake.calls()), ["b", "a"]);
    let nodes: Vec<_> = ran.events[0]
        .updates
        .iter()
        .map(|u| u.node.as_str())
        .collect();
    assert_eq!(nodes, ["a", "b"]);
}

#[tokio::test]
async fn tasks_of_a_step_run_concurrently_on_their_own_workers() {
    let barrier = Arc::new(Barrier::new(3));
    let spec = graph(&["a", "b", "c"])
        .channel("log", Reducer::Append)
        .entry("a")
        .entry("b")
        .entry("c")
        .build();
    let fake = Fake::new()
        .barrier_node("a", &barrier, push(json!(1)))
        .barrier_node("b", &barrier, push(json!(2)))
        .barrier_node("c", &barrier, push(json!(3)))
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(ran.state()["log"], json!([1, 2, 3]));
    let mut workers: Vec<(String, usize)> = fake
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::NodeStart { node, worker, .. } => Some((node, worker)),
            _ => None,
        })
        .collect();
    workers.sort();
    // Task 0 runs on the main worker (0), the others on fresh ones.
    assert_eq!(workers[0], ("a".to_owned(), 0));
    assert_ne!(workers[1].1, 0);
    assert_ne!(workers[2].1, 0);
    assert_ne!(workers[1].1, workers[2].1);
    assert_eq!(fake.workers_created(), 3);
    // The three tasks read one snapshot, serialised once for the step.
    assert_eq!(fake.texts_made(), 1);
}

#[tokio::test]
async fn a_nodes_routers_share_one_text_of_its_fresh_state() {
    let spec = graph(&["a"])
        .channel("x", Reducer::LastValue)
        .entry("a")
        .cond("a", "r1", &[])
        .cond("a", "r2", &[])
        .build();
    let fake = Fake::new()
        .node("a", |_, _| update(json!({"x": 1})))
        .router("r1", |_| Ok(vec![to("__end__")]))
        .router("r2", |_| Ok(vec![to("__end__")]))
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(ran.state()["x"], json!(1));
    // The node's input, then one text of the fresh state for both routers.
    assert_eq!(fake.texts_made(), 2);
}

#[tokio::test]
async fn sequential_steps_reuse_the_main_worker() {
    let spec = graph(&["a", "b", "c"])
        .channel("log", Reducer::Append)
        .entry("a")
        .edge("a", "b")
        .edge("b", "c")
        .finish("c")
        .build();
    let fake = Fake::new()
        .node("a", push(json!("a")))
        .node("b", push(json!("b")))
        .node("c", push(json!("c")))
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(ran.state()["log"], json!(["a", "b", "c"]));
    assert_eq!(
        fake.node_runs(),
        [("a".into(), 0), ("b".into(), 1), ("c".into(), 2)]
    );
    assert_eq!(fake.workers_created(), 1);
    assert!(fake.calls().iter().all(|c| matches!(
        c,
        Call::NodeStart { worker: 0, .. } | Call::NodeEnd { worker: 0, .. }
    )));
}

#[tokio::test]
async fn last_value_conflict_names_the_channel_and_both_nodes() {
    let spec = graph(&["a", "b", "c"])
        .channel("x", Reducer::LastValue)
        .entry("a")
        .entry("b")
        .edge("a", "c")
        .build();
    let fake = Fake::new()
        .node("a", |_, _| update(json!({"x": 1})))
        .node("b", |_, _| update(json!({"x": 2})))
        .node("c", |_, _| update(json!({})))
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    let err = ran.error();
    assert_eq!(err.code, ErrorCode::InvalidUpdate);
    assert_eq!(
        err.message,
        "channel \"x\" received 2 values in one step (from nodes \"a\", \"b\"); a last-value channel \
         takes one write per step: give it a reducer (append, merge, add or custom)"
    );
    assert!(ran.events.is_empty());
    assert!(!fake.node_runs().iter().any(|(n, _)| n == "c"));
}

#[tokio::test]
async fn join_waits_for_all_sources_even_across_steps() {
    // b runs in step 0, c in step 1: the join [b, c] -> d fires after step 1.
    let spec = graph(&["a", "b", "c", "d"])
        .channel("log", Reducer::Append)
        .entry("a")
        .entry("b")
        .edge("a", "c")
        .join(&["b", "c"], "d")
        .build();
    let fake = Fake::new()
        .node("a", push(json!("a")))
        .node("b", push(json!("b")))
        .node("c", push(json!("c")))
        .node("d", push(json!("d")))
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(ran.state()["log"], json!(["a", "b", "c", "d"]));
    assert_eq!(
        fake.node_runs(),
        [
            ("a".into(), 0),
            ("b".into(), 0),
            ("c".into(), 1),
            ("d".into(), 2)
        ]
    );
}

#[tokio::test]
async fn join_fires_once_both_branches_ran_and_resets() {
    // a loops to itself twice; the join [a, b] -> c fires when both ran and
    // not again when a runs alone afterwards.
    let spec = graph(&["a", "b", "c"])
        .channel("n", Reducer::Add)
        .entry("a")
        .entry("b")
        .cond("a", "again", &[("again", "a"), ("done", "__end__")])
        .join(&["a", "b"], "c")
        .build();
    let fake = Fake::new()
        .node("a", |_, _| update(json!({"n": 1})))
        .node("b", |_, _| update(json!({})))
        .node("c", |_, _| update(json!({})))
        .router("again", |state| {
            Ok(vec![to(if state["n"] == json!(3) {
                "done"
            } else {
                "again"
            })])
        })
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(ran.state()["n"], json!(3));
    assert_eq!(
        fake.node_runs(),
        [
            ("a".into(), 0),
            ("b".into(), 0),
            ("a".into(), 1),
            ("c".into(), 1),
            ("a".into(), 2)
        ]
    );
}

#[tokio::test]
async fn separate_edges_from_different_steps_run_the_target_twice() {
    // Contrast with a join: a -> c and b2 -> c fire separately.
    let spec = graph(&["a", "b", "b2", "c"])
        .channel("log", Reducer::Append)
        .entry("a")
        .entry("b")
        .edge("b", "b2")
        .edge("a", "c")
        .edge("b2", "c")
        .build();
    let fake = Fake::new()
        .node("a", push(json!("a")))
        .node("b", push(json!("b")))
        .node("b2", push(json!("b2")))
        .node("c", push(json!("c")))
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(ran.state()["log"], json!(["a", "b", "b2", "c", "c"]));
}

#[tokio::test]
async fn a_node_triggered_twice_in_one_step_runs_once() {
    let spec = graph(&["a", "b", "c"])
        .channel("log", Reducer::Append)
        .entry("a")
        .entry("b")
        .edge("a", "c")
        .edge("b", "c")
        .cond("a", "to_c", &[])
        .build();
    let fake = Fake::new()
        .node("a", |_, _| command(json!({}), &["c"], vec![]))
        .node("b", push(json!("b")))
        .node("c", push(json!("c")))
        .router("to_c", |_| Ok(vec![to("c"), to("c")]))
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(ran.state()["log"], json!(["b", "c"]));
    assert_eq!(
        fake.node_runs(),
        [("a".into(), 0), ("b".into(), 0), ("c".into(), 1)]
    );
}

#[tokio::test]
async fn router_sees_committed_state_plus_own_writes_only() {
    let spec = graph(&["a", "b", "c"])
        .channel("x", Reducer::LastValue)
        .channel("y", Reducer::LastValue)
        .channel_default("items", Reducer::Append, json!(["seed"]))
        .entry("a")
        .entry("b")
        .cond("a", "look", &[])
        .build();
    let fake = Fake::new()
        .slow_node("a", Duration::from_millis(50), |_, _| {
            update(json!({"x": 1, "items": ["a"]}))
        })
        .node("b", |_, _| update(json!({"y": 2, "items": ["b"]})))
        .node("c", |_, _| update(json!({})))
        .router("look", |_| Ok(vec![to("c")]))
        .build();
    let ran = run_graph(spec, &fake, json!({"y": 0})).await;
    assert_eq!(ran.state()["items"], json!(["seed", "a", "b"]));
    let routed: Vec<Value> = fake
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Route { state, worker, .. } => {
                assert_eq!(worker, 0, "router runs on the task's own worker");
                Some(state)
            }
            _ => None,
        })
        .collect();
    // Own writes (x, items) visible; b's y=2 and "b" item are not.
    assert_eq!(routed, [json!({"x": 1, "y": 0, "items": ["seed", "a"]})]);
    assert_eq!(fake.node_runs().last(), Some(&("c".to_owned(), 1)));
}

#[tokio::test]
async fn path_map_maps_router_answers() {
    let spec = graph(&["a", "yes", "no"])
        .channel("log", Reducer::Append)
        .entry("a")
        .cond(
            "a",
            "decide",
            &[("go", "yes"), ("skip", "no"), ("stop", "__end__")],
        )
        .build();
    let fake = Fake::new()
        .node("a", push(json!("a")))
        .node("yes", push(json!("yes")))
        .node("no", push(json!("no")))
        .router("decide", |_| Ok(vec![to("go"), to("stop")]))
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(ran.state()["log"], json!(["a", "yes"]));
}

#[tokio::test]
async fn path_map_rejects_unknown_keys_listing_the_allowed_ones() {
    let spec = graph(&["a", "yes"])
        .channel("log", Reducer::Append)
        .entry("a")
        .cond("a", "decide", &[("go", "yes"), ("stop", "__end__")])
        .build();
    // A node name is not a key either.
    let fake = Fake::new()
        .node("a", push(json!("a")))
        .node("yes", push(json!("yes")))
        .router("decide", |_| Ok(vec![to("yes")]))
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    let err = ran.error();
    assert_eq!(err.code, ErrorCode::InvalidUpdate);
    assert_eq!(
        err.message,
        "router \"decide\" of node \"a\" returned \"yes\", which is not a key of its path map \
         (allowed: \"go\", \"stop\")"
    );
    assert!(ran.events.is_empty(), "the failing step committed nothing");
}

#[tokio::test]
async fn router_without_path_map_must_name_a_node_or_end() {
    let spec = graph(&["a", "b"])
        .channel("x", Reducer::LastValue)
        .entry("a")
        .cond("a", "r", &[])
        .build();
    let fake = Fake::new()
        .node("a", |_, _| update(json!({})))
        .node("b", |_, _| update(json!({})))
        .router("r", |_| Ok(vec![to("__end__"), to("nowhere")]))
        .build();
    let err = run_graph(spec, &fake, json!({})).await.error().clone();
    assert_eq!(err.code, ErrorCode::InvalidUpdate);
    assert_eq!(
        err.message,
        "router \"r\" of node \"a\" returned \"nowhere\", which is neither a node nor __end__"
    );
}

#[tokio::test]
async fn goto_adds_to_static_edges() {
    let spec = graph(&["a", "b", "c"])
        .channel("log", Reducer::Append)
        .entry("a")
        .edge("a", "b")
        .edge("b", "c")
        .build();
    let fake = Fake::new()
        .node("a", |_, _| {
            command(json!({"log": ["a"]}), &["c", "__end__"], vec![])
        })
        .node("b", push(json!("b")))
        .node("c", push(json!("c")))
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(ran.state()["log"], json!(["a", "b", "c", "c"]));
    assert_eq!(
        fake.node_runs(),
        [
            ("a".into(), 0),
            ("b".into(), 1),
            ("c".into(), 1),
            ("c".into(), 2)
        ]
    );
}

#[tokio::test]
async fn declared_goto_targets_are_never_routed() {
    // "c" is reached only by a's goto, declared by a `__goto__` edge (as
    // an SDK emits for `destinations`); the fake has no router at all, so
    // a `route` call would fail the run.
    let spec = graph(&["a", "b", "c"])
        .channel("log", Reducer::Append)
        .entry("a")
        .edge("a", "b")
        .cond(
            "a",
            sandgraph_core::GOTO_ROUTER,
            &[("c", "c"), ("__end__", "__end__")],
        )
        .build();
    spec.validate()
        .expect("a declared goto target is reachable");
    let fake = Fake::new()
        .node("a", |_, _| command(json!({"log": ["a"]}), &["c"], vec![]))
        .node("b", push(json!("b")))
        .node("c", push(json!("c")))
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(ran.state()["log"], json!(["a", "b", "c"]));
    let routed: Vec<Call> = fake
        .calls()
        .into_iter()
        .filter(|c| matches!(c, Call::Route { .. }))
        .collect();
    assert!(routed.is_empty(), "route was called: {routed:?}");
}

#[tokio::test]
async fn a_nodes_goto_and_its_routers_answers_are_bounded_together() {
    // Each result is within the bound on its own (the worker's check); the
    // total is the executor's to refuse.
    let spec = graph(&["a", "b"])
        .channel("x", Reducer::LastValue)
        .entry("a")
        .cond("a", "r", &[])
        .build();
    let fake = Fake::new()
        .node("a", |_, _| command(json!({}), &["b"; 600], vec![]))
        .node("b", |_, _| update(json!({})))
        .router("r", |_| Ok(vec![to("b"); 600]))
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    let err = ran.error();
    assert_eq!(err.code, ErrorCode::InvalidUpdate);
    assert_eq!(
        err.message,
        "node \"a\" returned 1200 goto targets and sends; a node result may name at most 1024"
    );
    assert!(ran.events.is_empty(), "the failing step committed nothing");
}

#[tokio::test]
async fn goto_to_an_unknown_node_is_an_invalid_update() {
    let spec = graph(&["a"])
        .channel("x", Reducer::LastValue)
        .entry("a")
        .build();
    let fake = Fake::new()
        .node("a", |_, _| command(json!({"x": 1}), &["ghost"], vec![]))
        .build();
    let err = run_graph(spec, &fake, json!({})).await.error().clone();
    assert_eq!(err.code, ErrorCode::InvalidUpdate);
    assert_eq!(
        err.message,
        "node \"a\" returned goto \"ghost\", which is not a node"
    );
}

#[tokio::test]
async fn sends_run_the_target_next_step_with_private_payloads_in_parallel() {
    let barrier = Arc::new(Barrier::new(3));
    let spec = graph(&["plan", "work", "sum"])
        .channel("topic", Reducer::LastValue)
        .channel("results", Reducer::Append)
        .entry("plan")
        .cond("plan", "fan_out", &[])
        .edge("work", "sum")
        .build();
    let fake = Fake::new()
        .node("plan", |_, _| update(json!({"topic": "t"})))
        .barrier_node("work", &barrier, |input, _| {
            let i = input["i"].as_i64().unwrap_or(-1);
            update(json!({"results": [i * 10]}))
        })
        .node("sum", |state, _| {
            let total: i64 = state["results"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_i64)
                .sum();
            update(json!({"topic": total}))
        })
        .router("fan_out", |state| {
            assert_eq!(state["topic"], json!("t"));
            Ok((1..=3)
                .map(|i| RouteTarget::Send(send("work", json!({"i": i}))))
                .collect())
        })
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(ran.state()["results"], json!([10, 20, 30]));
    assert_eq!(ran.state()["topic"], json!(60));
    assert_eq!(
        fake.inputs_of("work"),
        [json!({"i": 1}), json!({"i": 2}), json!({"i": 3})]
    );
    // Three PUSH tasks in step 1; their static edge triggers sum once.
    assert_eq!(
        fake.node_runs(),
        [
            ("plan".into(), 0),
            ("work".into(), 1),
            ("work".into(), 1),
            ("work".into(), 1),
            ("sum".into(), 2)
        ]
    );
}

#[tokio::test]
async fn command_sends_follow_pull_tasks_in_emission_order() {
    // Task order in step 1: PULL tasks by name (a2, b2), then PUSH tasks in
    // the order emitted in step 0: a's sends first (a sorts before b).
    let spec = graph(&["a", "b", "a2", "b2", "w"])
        .channel("log", Reducer::Append)
        .entry("b")
        .entry("a")
        .edge("a", "a2")
        .edge("b", "b2")
        // Sends need no edge, but every node must be reachable.
        .cond("a", "nowhere", &[("w", "w")])
        .build();
    let fake = Fake::new()
        .node("a", |_, _| {
            command(
                json!({}),
                &[],
                vec![send("w", json!("a1")), send("w", json!("a2"))],
            )
        })
        .node("b", |_, _| {
            command(json!({}), &[], vec![send("w", json!("b1"))])
        })
        .node("a2", push(json!("a2-node")))
        .slow_node("b2", Duration::from_millis(30), push(json!("b2-node")))
        .node("w", |input, _| update(json!({"log": [input.clone()]})))
        .router("nowhere", |_| Ok(vec![]))
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(
        ran.state()["log"],
        json!(["a2-node", "b2-node", "a1", "a2", "b1"])
    );
    let step1: Vec<&str> = ran.events[1]
        .updates
        .iter()
        .map(|u| u.node.as_str())
        .collect();
    assert_eq!(step1, ["a2", "b2", "w", "w", "w"]);
    // The PULL tasks by name, then the PUSH targets in emission order.
    assert_eq!(ran.events[0].next, step1);
}

#[tokio::test]
async fn send_to_end_or_unknown_node_names_the_sender() {
    for (target, expected) in [
        (
            "__end__",
            "node \"a\" sent a task to __end__: a send must target a node",
        ),
        ("ghost", "node \"a\" sent a task to unknown node \"ghost\""),
    ] {
        let spec = graph(&["a"])
            .channel("x", Reducer::LastValue)
            .entry("a")
            .cond("a", "r", &[])
            .build();
        let fake = Fake::new()
            .node("a", |_, _| update(json!({})))
            .router("r", move |_| {
                Ok(vec![RouteTarget::Send(send(target, json!({})))])
            })
            .build();
        let err = run_graph(spec, &fake, json!({})).await.error().clone();
        assert_eq!(err.code, ErrorCode::InvalidUpdate);
        assert_eq!(err.message, expected);
    }
    let spec = graph(&["a"])
        .channel("x", Reducer::LastValue)
        .entry("a")
        .build();
    let fake = Fake::new()
        .node("a", |_, _| {
            command(json!({}), &[], vec![send("__end__", json!(1))])
        })
        .build();
    let err = run_graph(spec, &fake, json!({})).await.error().clone();
    assert_eq!(
        err.message,
        "node \"a\" sent a task to __end__: a send must target a node"
    );
}

fn looping_graph() -> (GraphSpec, Arc<FakeBackend>) {
    let spec = graph(&["a"])
        .channel("n", Reducer::Add)
        .entry("a")
        .edge("a", "a")
        .build();
    let fake = Fake::new()
        .node("a", |_, _| update(json!({"n": 1})))
        .build();
    (spec, fake)
}

#[tokio::test]
async fn recursion_limit_stops_an_endless_loop() {
    let (spec, fake) = looping_graph();
    let config = RunConfig {
        recursion_limit: 5,
        ..RunConfig::default()
    };
    let ran = run_with(spec, &fake, json!({}), config).await;
    let err = ran.error();
    assert_eq!(err.code, ErrorCode::RecursionLimit);
    assert_eq!(
        err.message,
        "recursion limit of 5 reached without hitting a stop condition"
    );
    assert_eq!(fake.node_runs().len(), 5);
    assert_eq!(ran.events.len(), 5);

    let (spec, fake) = looping_graph();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(
        ran.error().message,
        "recursion limit of 25 reached without hitting a stop condition"
    );
    assert_eq!(fake.node_runs().len(), 25);
}

#[tokio::test]
async fn a_run_needing_exactly_the_limit_succeeds() {
    let chain = || {
        graph(&["a", "b", "c"])
            .channel("n", Reducer::Add)
            .entry("a")
            .edge("a", "b")
            .edge("b", "c")
            .build()
    };
    let body = |_: &Value, _: &NodeContext| update(json!({"n": 1}));
    let fake = Fake::new()
        .node("a", body)
        .node("b", body)
        .node("c", body)
        .build();
    let ran = run_with(
        chain(),
        &fake,
        json!({}),
        RunConfig {
            recursion_limit: 3,
            ..RunConfig::default()
        },
    )
    .await;
    assert_eq!(ran.state()["n"], json!(3));

    let fake = Fake::new()
        .node("a", body)
        .node("b", body)
        .node("c", body)
        .build();
    let ran = run_with(
        chain(),
        &fake,
        json!({}),
        RunConfig {
            recursion_limit: 2,
            ..RunConfig::default()
        },
    )
    .await;
    assert_eq!(ran.error().code, ErrorCode::RecursionLimit);
    assert_eq!(fake.node_runs().len(), 2);
}

#[tokio::test]
async fn recursion_limit_zero_is_invalid_input() {
    let (spec, fake) = looping_graph();
    let ran = run_with(
        spec,
        &fake,
        json!({}),
        RunConfig {
            recursion_limit: 0,
            ..RunConfig::default()
        },
    )
    .await;
    assert_eq!(ran.error().code, ErrorCode::InvalidInput);
    assert!(fake.node_runs().is_empty());
}

#[tokio::test]
async fn custom_reducers_run_on_the_main_worker_in_task_order() {
    let spec = graph(&["a", "b"])
        .channel_default("text", Reducer::Custom, json!(""))
        .entry("a")
        .entry("b")
        .build();
    let fake = Fake::new()
        .slow_node("a", Duration::from_millis(50), |_, _| {
            update(json!({"text": "a"}))
        })
        .node("b", |_, _| update(json!({"text": "b"})))
        .reducer("text", |current, update| {
            Ok(json!(format!(
                "{}{}",
                current.as_str().unwrap_or("?"),
                update.as_str().unwrap_or("?")
            )))
        })
        .build();
    let ran = run_graph(spec, &fake, json!({"text": "in:"})).await;
    assert_eq!(ran.state()["text"], json!("in:ab"));
    let reduces: Vec<(Value, Value, usize)> = fake
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Reduce {
                current,
                update,
                worker,
                ..
            } => Some((current, update, worker)),
            _ => None,
        })
        .collect();
    assert_eq!(
        reduces,
        [
            (json!(""), json!("in:"), 0),
            (json!("in:"), json!("a"), 0),
            (json!("in:a"), json!("b"), 0)
        ]
    );
}

#[tokio::test]
async fn custom_reducer_without_value_gets_null() {
    let spec = graph(&["a"])
        .channel("c", Reducer::Custom)
        .entry("a")
        .build();
    let fake = Fake::new()
        .node("a", |_, _| update(json!({"c": 5})))
        .reducer("c", |current, update| {
            Ok(json!([current.clone(), update.clone()]))
        })
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(ran.state()["c"], json!([null, 5]));
}

#[tokio::test]
async fn unknown_input_and_update_keys_are_dropped() {
    let spec = graph(&["a"])
        .channel("x", Reducer::LastValue)
        .channel_default("items", Reducer::Append, json!([0]))
        .channel("unset", Reducer::LastValue)
        .entry("a")
        .build();
    let fake = Fake::new()
        .node("a", |_, _| update(json!({"x": 2, "stray": true})))
        .build();
    let ran = run_graph(spec, &fake, json!({"x": 1, "items": 1, "junk": 2})).await;
    // Input went through the reducers; absent channels stay absent.
    assert_eq!(ran.state(), &object(json!({"x": 2, "items": [0, 1]})));
    assert_eq!(fake.inputs_of("a"), [json!({"x": 1, "items": [0, 1]})]);
    assert_eq!(
        ran.events[0].updates,
        [TaskUpdate {
            node: "a".into(),
            update: json!({"x": 2})
        }]
    );
}

fn strict_spec() -> GraphSpec {
    graph(&["tag"])
        .channel("topic", Reducer::LastValue)
        .channel("tags", Reducer::Append)
        .entry("tag")
        .strict()
        .build()
}

#[tokio::test]
async fn a_strict_graph_refuses_unknown_input_keys_with_a_hint() {
    let fake = Fake::new().node("tag", |_, _| update(json!({}))).build();
    let ran = run_graph(strict_spec(), &fake, json!({"tpoic": "x", "tags": []})).await;
    let err = ran.error();
    assert_eq!(err.code, ErrorCode::InvalidInput);
    assert_eq!(
        err.message,
        "the input of strict graph \"test-graph\" has key \"tpoic\" (did you mean \"topic\"?), \
         which is not a channel: pass only the graph's channels (topic, tags)"
    );
    assert!(fake.node_runs().is_empty(), "nothing ran");

    // Several keys: each is named, hints only where a channel is close.
    let ran = run_graph(strict_spec(), &fake, json!({"zzz": 1, "tag": 2})).await;
    assert_eq!(
        ran.error().message,
        "the input of strict graph \"test-graph\" has keys \"zzz\", \"tag\" (did you mean \"tags\"?), \
         which are not channels: pass only the graph's channels (topic, tags)"
    );
    // Known keys alone run as usual.
    let ran = run_graph(strict_spec(), &fake, json!({"topic": "t"})).await;
    assert_eq!(ran.state(), &object(json!({"topic": "t"})));
}

#[tokio::test]
async fn a_strict_graph_refuses_node_writes_to_undeclared_channels() {
    let fake = Fake::new()
        .node("tag", |_, _| update(json!({"tgas": ["a"], "topic": "t"})))
        .build();
    let ran = run_graph(strict_spec(), &fake, json!({})).await;
    let err = ran.error();
    assert_eq!(err.code, ErrorCode::InvalidUpdate);
    assert_eq!(
        err.message,
        "node \"tag\" of strict graph \"test-graph\" wrote key \"tgas\" (did you mean \"tags\"?), \
         which is not a channel: write only declared channels (topic, tags) or declare the channel"
    );
    assert!(ran.events.is_empty(), "the failed step applied no writes");

    // Many unknown keys: the first few are named, the rest counted, and
    // each name is escaped.
    let fake = Fake::new()
        .node("tag", |_, _| {
            let writes: Map<String, Value> = (0..20)
                .map(|i| (format!("k{i:02}\u{1b}"), json!(i)))
                .collect();
            update(Value::Object(writes))
        })
        .build();
    let message = run_graph(strict_spec(), &fake, json!({}))
        .await
        .error()
        .message
        .clone();
    assert!(
        message.contains("\"k00\\u{1b}\", \"k01\\u{1b}\""),
        "{message}"
    );
    assert!(
        message.contains(", and 12 more, which are not channels"),
        "{message}"
    );
    assert!(!message.contains('\u{1b}'), "{message}");
}

#[tokio::test]
async fn input_must_be_an_object() {
    let spec = graph(&["a"])
        .channel("x", Reducer::LastValue)
        .entry("a")
        .build();
    let fake = Fake::new().node("a", |_, _| update(json!({}))).build();
    let err = run_graph(spec, &fake, json!([1])).await.error().clone();
    assert_eq!(err.code, ErrorCode::InvalidInput);
    assert_eq!(err.message, "the input must be a json object, not an array");
    assert!(fake.node_runs().is_empty());
}

#[tokio::test]
async fn invalid_input_for_a_reducer_is_an_invalid_update_from_start() {
    let spec = graph(&["a"]).channel("n", Reducer::Add).entry("a").build();
    let fake = Fake::new().node("a", |_, _| update(json!({}))).build();
    let err = run_graph(spec, &fake, json!({"n": "one"}))
        .await
        .error()
        .clone();
    assert_eq!(err.code, ErrorCode::InvalidUpdate);
    assert!(
        err.message
            .starts_with("node \"__start__\" wrote to channel \"n\" (add reducer)"),
        "{err}"
    );
}

#[tokio::test]
async fn conditional_edge_from_start_routes_on_the_input() {
    let spec = graph(&["small", "big"])
        .channel("n", Reducer::LastValue)
        .channel("log", Reducer::Append)
        .cond("__start__", "size", &[("small", "small"), ("big", "big")])
        .build();
    let fake = Fake::new()
        .node("small", push(json!("small")))
        .node("big", push(json!("big")))
        .router("size", |state| {
            Ok(vec![to(if state["n"].as_i64() > Some(10) {
                "big"
            } else {
                "small"
            })])
        })
        .build();
    let ran = run_graph(spec.clone(), &fake, json!({"n": 50})).await;
    assert_eq!(ran.state()["log"], json!(["big"]));
    let fake2 = Fake::new()
        .node("small", push(json!("small")))
        .node("big", push(json!("big")))
        .router("size", |state| {
            Ok(vec![to(if state["n"].as_i64() > Some(10) {
                "big"
            } else {
                "small"
            })])
        })
        .build();
    let ran = run_graph(spec, &fake2, json!({"n": 5})).await;
    assert_eq!(ran.state()["log"], json!(["small"]));
}

#[tokio::test]
async fn interrupt_returns_committed_state_after_siblings_finish() {
    let spec = graph(&["s", "a", "b", "c"])
        .channel("x", Reducer::LastValue)
        .channel("y", Reducer::LastValue)
        .entry("s")
        .edge("s", "a")
        .edge("s", "b")
        .edge("a", "c")
        .build();
    let fake = Fake::new()
        .node("s", |_, _| update(json!({"x": 1})))
        .node("a", |_, _| {
            Ok(NodeOutput::Interrupt(json!({"question": "ok?"})))
        })
        .slow_node("b", Duration::from_millis(50), |_, _| {
            update(json!({"y": 2}))
        })
        .node("c", |_, _| update(json!({})))
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    let Ok(RunOutcome::Interrupted { state, interrupts }) = &ran.result else {
        panic!("expected an interrupt, got {:?}", ran.result);
    };
    assert_eq!(state, &object(json!({"x": 1})), "b's write is not applied");
    assert_eq!(interrupts.len(), 1);
    assert_eq!(interrupts[0].node, "a");
    assert_eq!(interrupts[0].value, json!({"question": "ok?"}));
    assert_eq!(interrupts[0].id.len(), 32);
    assert!(interrupts[0].id.bytes().all(|b| b.is_ascii_hexdigit()));
    // The sibling still ran to completion; nothing after the step ran.
    assert_eq!(ends(&fake.calls()), ["s", "a", "b"]);
    assert_eq!(ran.events.len(), 1);

    // Same graph, same step and task: same id.
    let fake2 = Fake::new()
        .node("s", |_, _| update(json!({"x": 1})))
        .node("a", |_, _| {
            Ok(NodeOutput::Interrupt(json!("other payload")))
        })
        .node("b", |_, _| update(json!({})))
        .node("c", |_, _| update(json!({})))
        .build();
    let spec = graph(&["s", "a", "b", "c"])
        .channel("x", Reducer::LastValue)
        .entry("s")
        .edge("s", "a")
        .edge("s", "b")
        .edge("a", "c")
        .build();
    let again = run_graph(spec, &fake2, json!({})).await;
    let Ok(RunOutcome::Interrupted {
        interrupts: second, ..
    }) = &again.result
    else {
        panic!("expected an interrupt");
    };
    assert_eq!(second[0].id, interrupts[0].id);
}

#[tokio::test]
async fn interrupts_of_several_tasks_come_in_task_order_with_distinct_ids() {
    let spec = graph(&["a", "b"])
        .channel("x", Reducer::LastValue)
        .entry("b")
        .entry("a")
        .build();
    let fake = Fake::new()
        .slow_node("a", Duration::from_millis(30), |_, _| {
            Ok(NodeOutput::Interrupt(json!("a?")))
        })
        .node("b", |_, _| Ok(NodeOutput::Interrupt(json!("b?"))))
        .build();
    let ran = run_graph(spec, &fake, json!({"x": 0})).await;
    let Ok(RunOutcome::Interrupted { state, interrupts }) = &ran.result else {
        panic!("expected an interrupt, got {:?}", ran.result);
    };
    assert_eq!(state, &object(json!({"x": 0})));
    let nodes: Vec<_> = interrupts
        .iter()
        .map(|i| (i.node.as_str(), i.value.clone()))
        .collect();
    assert_eq!(nodes, [("a", json!("a?")), ("b", json!("b?"))]);
    assert_ne!(interrupts[0].id, interrupts[1].id);
}

#[tokio::test]
async fn a_failing_task_fails_the_run_without_applying_writes() {
    let spec = graph(&["a", "b", "c"])
        .channel("log", Reducer::Append)
        .entry("a")
        .entry("b")
        .edge("b", "c")
        .build();
    let fake = Fake::new()
        .node("a", |_, _| {
            Err(RunError::new(ErrorCode::NodeError, "a broke"))
        })
        .slow_node("b", Duration::from_secs(5), push(json!("b")))
        .node("c", push(json!("c")))
        .build();
    let started = Instant::now();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(ran.error(), &RunError::new(ErrorCode::NodeError, "a broke"));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the slow sibling was not aborted"
    );
    assert!(ends(&fake.calls()).iter().all(|n| n != "b"));
    assert!(ran.events.is_empty());
}

#[tokio::test]
async fn the_first_failure_in_task_order_wins() {
    let spec = graph(&["a", "b"])
        .channel("x", Reducer::LastValue)
        .entry("a")
        .entry("b")
        .build();
    let fake = Fake::new()
        .slow_node("a", Duration::from_millis(50), |_, _| {
            Err(RunError::new(ErrorCode::Trap, "a trapped"))
        })
        .node("b", |_, _| {
            Err(RunError::new(ErrorCode::NodeError, "b failed"))
        })
        .build();
    let err = run_graph(spec, &fake, json!({})).await.error().clone();
    assert_eq!(err, RunError::new(ErrorCode::Trap, "a trapped"));
}

#[tokio::test]
async fn a_failure_beats_an_interrupt() {
    let spec = graph(&["a", "b"])
        .channel("x", Reducer::LastValue)
        .entry("a")
        .entry("b")
        .build();
    let fake = Fake::new()
        .node("a", |_, _| Ok(NodeOutput::Interrupt(json!("?"))))
        .slow_node("b", Duration::from_millis(20), |_, _| {
            Err(RunError::new(ErrorCode::NodeError, "b failed"))
        })
        .build();
    let err = run_graph(spec, &fake, json!({})).await.error().clone();
    assert_eq!(err.message, "b failed");
}

#[tokio::test]
async fn a_panicking_task_becomes_a_trap() {
    let spec = graph(&["a", "b"])
        .channel("x", Reducer::LastValue)
        .entry("a")
        .entry("b")
        .build();
    let fake = Fake::new()
        .node("a", |_, _| update(json!({})))
        .node("b", |_, _| panic!("fake node panicked on purpose"))
        .build();
    let err = run_graph(spec, &fake, json!({})).await.error().clone();
    assert_eq!(err.code, ErrorCode::Trap);
    assert_eq!(
        err.message,
        "internal error: the task of node \"b\" panicked"
    );
}

#[tokio::test]
async fn step_events_report_each_step_in_task_order() {
    let spec = graph(&["a", "b", "c"])
        .channel("x", Reducer::LastValue)
        .channel("n", Reducer::Add)
        .entry("b")
        .entry("a")
        .join(&["a", "b"], "c")
        .build();
    let fake = Fake::new()
        .node("a", |_, _| update(json!({"n": 1, "ignored": 0})))
        .node("b", |_, _| update(json!({"n": 2})))
        .node("c", |_, _| update(json!({"x": "done"})))
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(ran.state(), &object(json!({"n": 3, "x": "done"})));
    let events = serde_json::to_value(&ran.events).unwrap();
    assert_eq!(
        events,
        json!([
            {"step": 0, "updates": [{"node": "a", "update": {"n": 1}}, {"node": "b", "update": {"n": 2}}]},
            {"step": 1, "updates": [{"node": "c", "update": {"x": "done"}}]}
        ])
    );
    // `next` is not serialized; it names the next step's nodes.
    assert_eq!(ran.events[0].next, ["c"]);
    assert!(ran.events[1].next.is_empty());
}

#[tokio::test]
async fn check_continue_stops_before_the_next_step() {
    let spec = graph(&["a", "b"])
        .channel("log", Reducer::Append)
        .entry("a")
        .edge("a", "b")
        .build();
    let fake = Fake::new()
        .node("a", push(json!("a")))
        .node("b", push(json!("b")))
        .stop_after_checks(1)
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(
        ran.error(),
        &RunError::new(ErrorCode::Timeout, "soft deadline passed")
    );
    assert_eq!(fake.node_runs(), [("a".into(), 0)]);
    assert_eq!(ran.events.len(), 1);
}

#[tokio::test]
async fn check_continue_is_asked_once_per_step_and_not_at_completion() {
    let spec = graph(&["a", "b"])
        .channel("log", Reducer::Append)
        .entry("a")
        .edge("a", "b")
        .build();
    let fake = Fake::new()
        .node("a", push(json!("a")))
        .node("b", push(json!("b")))
        .stop_after_checks(2)
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    assert_eq!(ran.state()["log"], json!(["a", "b"]));
    assert_eq!(fake.checks(), 2);
}

#[tokio::test]
async fn nodes_get_the_base_context_with_their_step() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let spec = graph(&["a", "b"])
        .channel("x", Reducer::LastValue)
        .entry("a")
        .edge("a", "b")
        .build();
    let record = {
        let seen = Arc::clone(&seen);
        move |_: &Value, ctx: &NodeContext| {
            seen.lock().unwrap().push(ctx.clone());
            update(json!({}))
        }
    };
    let fake = Fake::new()
        .node("a", record.clone())
        .node("b", record)
        .build();
    let base = NodeContext {
        tool: "tool".into(),
        request: Some("please".into()),
        thread_id: Some("t1".into()),
        step: 99,
        resume: vec![json!("stale")],
        configurable: object(json!({"k": "v"})),
    };
    let config = RunConfig {
        recursion_limit: 10,
        context: base.clone(),
    };
    run_with(spec, &fake, json!({}), config).await.state();
    let seen = seen.lock().unwrap().clone();
    let expected: Vec<NodeContext> = (0..2)
        .map(|step| NodeContext {
            step,
            resume: vec![],
            ..base.clone()
        })
        .collect();
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn the_run_future_is_send() {
    let spec = graph(&["a"])
        .channel("x", Reducer::LastValue)
        .entry("a")
        .build();
    let graph = Arc::new(CompiledGraph::new(spec).unwrap());
    let fake = Fake::new()
        .node("a", |_, _| update(json!({"x": 1})))
        .build();
    let handle = tokio::spawn(async move {
        let mut count = 0;
        let mut on_step = |_: &StepEvent| count += 1;
        let outcome = run(
            &graph,
            &fake,
            json!({}),
            &RunConfig::default(),
            &mut on_step,
        )
        .await;
        (outcome, count)
    });
    let (outcome, count) = handle.await.unwrap();
    assert_eq!(outcome, Ok(RunOutcome::Completed(object(json!({"x": 1})))));
    assert_eq!(count, 1);
}

#[tokio::test]
async fn compiled_graph_rejects_invalid_specs() {
    let spec = graph(&["a", "b"])
        .channel("x", Reducer::LastValue)
        .entry("a")
        .build();
    let err = CompiledGraph::new(spec).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "invalid graph spec: node \"b\" is unreachable from __start__: add an edge"
        ),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_parallel_sends_on_a_multi_thread_runtime() {
    let spec = graph(&["fan", "w"])
        .channel("results", Reducer::Append)
        .entry("fan")
        .cond("fan", "nowhere", &[("w", "w")])
        .build();
    let fake = Fake::new()
        .node("fan", |_, _| {
            command(
                json!({}),
                &[],
                (0..50).map(|i| send("w", json!(i))).collect(),
            )
        })
        .node("w", |input, _| update(json!({"results": [input.clone()]})))
        .router("nowhere", |_| Ok(vec![]))
        .build();
    let ran = run_graph(spec, &fake, json!({})).await;
    let expected: Vec<Value> = (0..50).map(|i| json!(i)).collect();
    assert_eq!(ran.state()["results"], Value::Array(expected));
    assert_eq!(fake.workers_created(), 50);
}
