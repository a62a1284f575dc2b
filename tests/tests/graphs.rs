//! One test per example and test graph (enforced by `foreach_graph!`), each
//! running the real component in the real sandbox.

use std::time::{Duration, Instant};

use sandgraph_runtime::{ErrorCode, Limits, RunError, RunOptions, RunOutcome, RuntimeConfig};
use sandgraph_tests::{assert_test_exists, load, runtime};
use serde_json::{Value, json};

#[path = "graphs/capabilities.rs"]
mod capabilities;
use capabilities::{graph_llm_fanout, graph_tools, hostile_refusal_loop};
#[path = "graphs/http.rs"]
mod http;
use http::{graph_http, hostile_http_flood};
#[path = "graphs/examples.rs"]
mod examples;
use examples::{fetch_summarize, research};

#[path = "graphs/identity.rs"]
mod identity;
use identity::hostile_name_squat;

#[path = "graphs/sdk_bindings.rs"]
mod sdk_bindings;

#[path = "graphs/containment.rs"]
mod containment;

// Not a graph: the workspace's crate layering, checked beside the graphs so
// it costs no test binary of its own.
#[path = "graphs/layering.rs"]
mod layering;
use containment::{
    hostile_describe_alloc, hostile_describe_spin, hostile_describe_trap, hostile_escape_error,
    hostile_fanout_bloat, hostile_fanout_spin, hostile_host_sleep, hostile_log_forge,
    hostile_many_sends,
};

sandgraph_tests::foreach_graph!(assert_test_exists);

async fn run(path: &str, input: Value) -> Result<RunOutcome, RunError> {
    run_with(path, input, Limits::default()).await
}

async fn run_with(path: &str, input: Value, limits: Limits) -> Result<RunOutcome, RunError> {
    let graph = load(path).await;
    let opts = RunOptions {
        limits: Some(limits),
        ..Default::default()
    };
    runtime().run(&graph, input, opts).await
}

fn completed(outcome: Result<RunOutcome, RunError>) -> Value {
    match outcome {
        Ok(RunOutcome::Completed(state)) => Value::Object(state),
        Ok(other) => panic!("expected a completed run, got {other:?}"),
        Err(e) => panic!("expected a completed run, got [{}] {}", e.code, e.message),
    }
}

fn failed(outcome: Result<RunOutcome, RunError>) -> RunError {
    match outcome {
        Err(e) => e,
        Ok(o) => panic!("expected an error, got {o:?}"),
    }
}

fn spin_limits(timeout_ms: u64) -> Limits {
    Limits {
        timeout: Duration::from_millis(timeout_ms),
        grace: Duration::from_millis(100),
        fuel: u64::MAX / 2,
        ..Limits::default()
    }
}

// ---- example graphs ----

#[tokio::test]
async fn echo() {
    let state = completed(run(sandgraph_tests::ECHO, json!({"topic": "hi"})).await);
    assert_eq!(state, json!({"topic": "hi", "log": ["seen:hi"]}));
    // Key order follows the declared channels.
    assert_eq!(
        serde_json::to_string(&state).unwrap(),
        r#"{"topic":"hi","log":["seen:hi"]}"#
    );
    let graph = load(sandgraph_tests::ECHO).await;
    assert_eq!(graph.name(), "echo_graph");
    assert_eq!(
        graph.spec().description.as_deref(),
        Some("Echo the given topic.")
    );
    assert!(graph.spec().registration.as_tool);
    assert!(graph.spec().registration.as_graph_tool);
}

#[tokio::test]
async fn compat_v0_1() {
    // Built against sandgraph:graph@0.1.0 with wit-bindgen directly: the
    // host still loads and runs it, its `host` import included.
    let graph = load(sandgraph_tests::COMPAT_V0_1).await;
    assert_eq!(graph.name(), "compat_v0_1");
    assert_eq!(graph.world_version(), "0.1");
    assert!(graph.capabilities().is_empty());
    let state = completed(run(sandgraph_tests::COMPAT_V0_1, json!({"name": "Ada"})).await);
    assert_eq!(state, json!({"name": "Ada", "reply": "hello Ada"}));
    // The SDK builds against 0.2.0, and a graph that uses no capability
    // imports none.
    let echo = load(sandgraph_tests::ECHO).await;
    assert_eq!(echo.world_version(), "0.2");
    assert!(echo.capabilities().is_empty(), "{:?}", echo.capabilities());
}

#[tokio::test]
async fn graph_fallback() {
    let state = completed(run(sandgraph_tests::GRAPH_FALLBACK, json!({})).await);
    assert_eq!(state, json!({"handled": "fallback", "request": null}));
    let graph = load(sandgraph_tests::GRAPH_FALLBACK).await;
    assert_eq!(graph.name(), "graph_fallback");
    // Every parameter is optional: `{}` is valid arguments.
    let params = graph
        .spec()
        .parameters
        .clone()
        .expect("declares parameters");
    assert_eq!(
        params,
        json!({"note": {"type": "string", "description": "Optional note."}})
    );
}

#[tokio::test]
async fn greet() {
    let state = completed(
        run(
            sandgraph_tests::GREET,
            json!({"name": "Ada", "style": "formal", "times": 2}),
        )
        .await,
    );
    assert_eq!(state["greeting"], json!("Good day, Ada. Good day, Ada."));
    let state = completed(
        run(
            sandgraph_tests::GREET,
            json!({"name": "Bo", "style": "casual"}),
        )
        .await,
    );
    assert_eq!(state["greeting"], json!("Hey Bo!"));
    let graph = load(sandgraph_tests::GREET).await;
    let params = graph
        .spec()
        .parameters
        .clone()
        .expect("greet declares parameters");
    assert_eq!(params["style"]["enum"], json!(["formal", "casual"]));
    assert_eq!(params["name"]["required"], json!(true));
    // The graph's own validate export.
    let ok = runtime()
        .validate(
            &graph,
            &json!({"name": "Ada", "style": "formal"}),
            RunOptions::default(),
        )
        .await;
    assert_eq!(ok.unwrap(), Ok(()));
    let rejected = runtime()
        .validate(
            &graph,
            &json!({"name": "Ada", "style": "formal", "times": 11}),
            RunOptions::default(),
        )
        .await;
    assert_eq!(
        rejected.unwrap(),
        Err("times must be at most 10".to_string())
    );
}

#[tokio::test]
async fn fanout() {
    let graph = load(sandgraph_tests::FANOUT).await;
    let mut events = Vec::new();
    let outcome = runtime()
        .run_streaming(&graph, json!({}), RunOptions::default(), &mut |ev| {
            events.push(serde_json::to_value(ev).unwrap())
        })
        .await;
    let state = completed(outcome);
    // Eight parallel branches, applied in task order (by node name), then the join.
    assert_eq!(
        state["items"],
        json!(["b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7"])
    );
    assert_eq!(state["count"], json!(8));
    assert_eq!(events.len(), 3);
    assert_eq!(events[1]["updates"].as_array().unwrap().len(), 8);
    assert_eq!(events[2]["updates"][0]["node"], json!("join"));
}

#[tokio::test]
async fn loop_graph() {
    let state = completed(run(sandgraph_tests::LOOP_GRAPH, json!({"target": 5})).await);
    assert_eq!(state["n"], json!(5));
    // 30 iterations need 30 supersteps: over the default budget of 25.
    let err = failed(run(sandgraph_tests::LOOP_GRAPH, json!({"target": 30})).await);
    assert_eq!(err.code, ErrorCode::RecursionLimit);
    assert!(
        err.message.contains("recursion limit of 25"),
        "{}",
        err.message
    );
    // Exactly at the limit succeeds; one more step fails.
    let ok = run_with(
        sandgraph_tests::LOOP_GRAPH,
        json!({"target": 30}),
        Limits {
            recursion_limit: 30,
            ..Limits::default()
        },
    );
    assert_eq!(completed(ok.await)["n"], json!(30));
    let err = failed(
        run_with(
            sandgraph_tests::LOOP_GRAPH,
            json!({"target": 30}),
            Limits {
                recursion_limit: 29,
                ..Limits::default()
            },
        )
        .await,
    );
    assert!(
        err.message.contains("recursion limit of 29"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn map_reduce() {
    let state = completed(run(sandgraph_tests::MAP_REDUCE, json!({"items": [1, 2, 3]})).await);
    assert_eq!(state["total"], json!(14));
    let mut results: Vec<i64> = state["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    results.sort();
    assert_eq!(results, vec![1, 4, 9]);
    // No items: no sends, so nothing after `plan` runs.
    let state = completed(run(sandgraph_tests::MAP_REDUCE, json!({"items": []})).await);
    assert_eq!(state.get("total"), None);
}

// ---- LangGraph conformance guests ----

#[tokio::test]
async fn graph_conflict() {
    let err = failed(run(sandgraph_tests::GRAPH_CONFLICT, json!({})).await);
    assert_eq!(err.code, ErrorCode::InvalidUpdate);
    // Names the channel and both writers (LangGraph names only the key).
    assert!(err.message.contains("\"value\""), "{}", err.message);
    assert!(
        err.message.contains("\"a\"") && err.message.contains("\"b\""),
        "{}",
        err.message
    );
    // One writer: fine, and the append channel merges both in task order.
    let state = completed(run(sandgraph_tests::GRAPH_CONFLICT, json!({"only_a": true})).await);
    assert_eq!(state["value"], json!("a"));
    assert_eq!(state["log"], json!(["a", "b"]));
}

#[tokio::test]
async fn graph_custom_reducer() {
    let state = completed(run(sandgraph_tests::GRAPH_CUSTOM_REDUCER, json!({})).await);
    assert_eq!(state["best"], json!(7));
    assert_eq!(state["words"], json!(["apple", "pear"]));
    // The join waited for both branches before `report` ran.
    assert_eq!(state["reported"], json!(7));
    let err = failed(run(sandgraph_tests::GRAPH_CUSTOM_REDUCER, json!({"bad": true})).await);
    assert_eq!(err.code, ErrorCode::NodeError);
    assert!(
        err.message.contains("reducer of channel \"best\""),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn graph_goto() {
    let state = completed(run(sandgraph_tests::GRAPH_GOTO, json!({})).await);
    let visited = state["visited"].as_array().unwrap();
    // goto adds to the static edge; sends run the worker twice with private input.
    assert_eq!(visited[0], json!("start"));
    let rest: Vec<&str> = visited[1..].iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(rest, vec!["jumped", "static_next", "worker:1", "worker:2"]);
    let state = completed(run(sandgraph_tests::GRAPH_GOTO, json!({"goto_end": true})).await);
    assert_eq!(state["visited"], json!(["start", "static_next"]));
}

#[tokio::test]
async fn graph_strict() {
    let graph = load(sandgraph_tests::GRAPH_STRICT).await;
    assert!(graph.spec().strict, "the marker channel became the flag");
    let channels: Vec<&str> = graph
        .spec()
        .channels
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(channels, ["topic", "mode", "tags"], "and left the channels");

    let state = completed(run(sandgraph_tests::GRAPH_STRICT, json!({"topic": "wasm"})).await);
    assert_eq!(state, json!({"topic": "wasm", "tags": ["wasm"]}));

    // A typo'd input key is refused before anything runs, with a hint.
    let err = failed(run(sandgraph_tests::GRAPH_STRICT, json!({"tpoic": "wasm"})).await);
    assert_eq!(err.code, ErrorCode::InvalidInput);
    assert_eq!(
        err.message,
        "the input of strict graph \"graph_strict\" has key \"tpoic\" (did you mean \"topic\"?), \
         which is not a channel: pass only the graph's channels (topic, mode, tags)"
    );

    // A node's write to an undeclared channel fails the run, naming both.
    let input = json!({"topic": "wasm", "mode": "typo"});
    let err = failed(run(sandgraph_tests::GRAPH_STRICT, input).await);
    assert_eq!(err.code, ErrorCode::InvalidUpdate);
    assert_eq!(
        err.message,
        "node \"tag\" of strict graph \"graph_strict\" wrote key \"tgas\" (did you mean \"tags\"?), \
         which is not a channel: write only declared channels (topic, mode, tags) or declare the channel"
    );
}

#[tokio::test]
async fn graph_interrupt() {
    let outcome = run(sandgraph_tests::GRAPH_INTERRUPT, json!({}))
        .await
        .unwrap();
    let RunOutcome::Interrupted { state, interrupts } = outcome else {
        panic!("expected an interrupt")
    };
    assert_eq!(interrupts.len(), 1);
    assert_eq!(interrupts[0].node, "ask");
    assert_eq!(interrupts[0].value, json!({"question": "approve?"}));
    assert_eq!(interrupts[0].id.len(), 32);
    // The interrupted step's writes are not applied; the earlier step's are.
    assert_eq!(Value::Object(state), json!({"log": ["prepared"]}));
}

#[tokio::test]
async fn graph_errors() {
    let err = failed(run(sandgraph_tests::GRAPH_ERRORS, json!({"mode": "fail"})).await);
    assert_eq!(err.code, ErrorCode::NodeError);
    assert!(
        err.message
            .contains("node \"work\" failed: deliberate failure"),
        "{}",
        err.message
    );
    let err = failed(
        run(
            sandgraph_tests::GRAPH_ERRORS,
            json!({"mode": "goto_unknown"}),
        )
        .await,
    );
    assert_eq!(err.code, ErrorCode::InvalidUpdate);
    assert!(err.message.contains("ghost"), "{}", err.message);
    let err = failed(
        run(
            sandgraph_tests::GRAPH_ERRORS,
            json!({"mode": "send_unknown"}),
        )
        .await,
    );
    assert_eq!(err.code, ErrorCode::InvalidUpdate);
    let err = failed(run(sandgraph_tests::GRAPH_ERRORS, json!({"mode": "route_fail"})).await);
    assert_eq!(err.code, ErrorCode::NodeError);
    assert!(
        err.message
            .contains("router \"next\" failed: router failed"),
        "{}",
        err.message
    );
    let err = failed(
        run(
            sandgraph_tests::GRAPH_ERRORS,
            json!({"mode": "route_unknown"}),
        )
        .await,
    );
    assert_eq!(err.code, ErrorCode::InvalidUpdate);
    assert!(err.message.contains("nowhere"), "{}", err.message);
    let err = failed(
        run(
            sandgraph_tests::GRAPH_ERRORS,
            json!({"mode": "decode", "count": "x"}),
        )
        .await,
    );
    assert_eq!(err.code, ErrorCode::NodeError);
    assert!(err.message.contains("count"), "{}", err.message);
    let state = completed(run(sandgraph_tests::GRAPH_ERRORS, json!({"mode": "ok"})).await);
    assert_eq!(state["done"], json!(true));
    // Input must be an object.
    let err = failed(run(sandgraph_tests::GRAPH_ERRORS, json!([1])).await);
    assert_eq!(err.code, ErrorCode::InvalidInput);
}

#[tokio::test]
async fn graph_invalid_spec() {
    let err = runtime()
        .load_file(std::path::Path::new(sandgraph_tests::GRAPH_INVALID_SPEC))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Load);
    assert!(
        err.message
            .contains(r#"edge "a" -> "b": unknown target node "b""#),
        "{}",
        err.message
    );
}

// ---- hostile guests ----

#[tokio::test]
async fn hostile_infinite_loop() {
    let start = Instant::now();
    let err = failed(
        run_with(
            sandgraph_tests::HOSTILE_INFINITE_LOOP,
            json!({}),
            spin_limits(200),
        )
        .await,
    );
    assert_eq!(err.code, ErrorCode::Timeout);
    assert!(err.message.contains("timeout of 200 ms"), "{}", err.message);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "the hard stop did not land"
    );
    // Fuel stops it deterministically too.
    let limits = Limits {
        fuel: 50_000_000,
        ..Limits::default()
    };
    let err = failed(run_with(sandgraph_tests::HOSTILE_INFINITE_LOOP, json!({}), limits).await);
    assert_eq!(err.code, ErrorCode::OutOfFuel);
    assert!(err.message.contains("50000000"), "{}", err.message);
    // The host goes on serving.
    completed(run(sandgraph_tests::ECHO, json!({"topic": "after"})).await);
}

#[tokio::test]
async fn hostile_memory_bomb() {
    let limits = Limits {
        memory: 32 << 20,
        ..Limits::default()
    };
    let err = failed(run_with(sandgraph_tests::HOSTILE_MEMORY_BOMB, json!({}), limits).await);
    assert_eq!(err.code, ErrorCode::MemoryLimit);
    assert!(
        err.message.contains("32 MiB per instance"),
        "{}",
        err.message
    );
    completed(run(sandgraph_tests::ECHO, json!({"topic": "after"})).await);
}

#[tokio::test]
async fn hostile_memory_bomb_hits_the_host_budget() {
    // A separate runtime whose host-wide budget is below the instance cap.
    let config = RuntimeConfig {
        memory_budget: 24 << 20,
        max_instances: 8,
        ..RuntimeConfig::default()
    };
    let rt = sandgraph_factors::runtime(config).unwrap();
    let graph = rt
        .load_file(std::path::Path::new(sandgraph_tests::HOSTILE_MEMORY_BOMB))
        .await
        .unwrap();
    let err = failed(rt.run(&graph, json!({}), RunOptions::default()).await);
    assert_eq!(err.code, ErrorCode::MemoryLimit);
    assert!(
        err.message.contains("host-wide memory budget"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn hostile_recursion() {
    let err = failed(run(sandgraph_tests::HOSTILE_RECURSION, json!({})).await);
    assert_eq!(err.code, ErrorCode::Trap);
    assert!(err.message.contains("recursion"), "{}", err.message);
    assert!(
        err.message.contains("guest backtrace: hostile_recursion::"),
        "{}",
        err.message
    );
    completed(run(sandgraph_tests::ECHO, json!({"topic": "after"})).await);
}

#[tokio::test]
async fn polyglot_hostile() {
    // The Rust twin of the Python and JS hostile graphs; every mode runs
    // for all three languages in the CLI's conformance test
    // (host/cli/tests/toolkit/conformance.rs). Here: the cheap ones.
    let done = completed(run(sandgraph_tests::POLYGLOT_HOSTILE, json!({"mode": "calm"})).await);
    assert_eq!(done["out"], "ok");
    let err = failed(run(sandgraph_tests::POLYGLOT_HOSTILE, json!({"mode": "raise"})).await);
    assert_eq!(err.code, ErrorCode::NodeError);
    assert!(err.message.contains("hostile raise"), "{}", err.message);
    let err = failed(run(sandgraph_tests::POLYGLOT_HOSTILE, json!({"mode": "huge"})).await);
    assert_eq!(err.code, ErrorCode::InvalidOutput);
}

#[tokio::test]
async fn hostile_huge_output() {
    let err = failed(run(sandgraph_tests::HOSTILE_HUGE_OUTPUT, json!({})).await);
    assert_eq!(err.code, ErrorCode::InvalidOutput);
    assert!(err.message.contains("over the limit"), "{}", err.message);
}

#[tokio::test]
async fn hostile_invalid_json() {
    for mode in [
        "garbage",
        "empty",
        "truncated",
        "trailing",
        "nan",
        "infinity",
        "command_garbage",
    ] {
        let err = failed(run(sandgraph_tests::HOSTILE_INVALID_JSON, json!({"mode": mode})).await);
        assert_eq!(
            err.code,
            ErrorCode::InvalidOutput,
            "{mode}: {}",
            err.message
        );
        assert!(
            err.message.starts_with("node \"emit"),
            "{mode}: {}",
            err.message
        );
        assert!(
            err.message.contains("returned invalid JSON at $"),
            "{mode}: {}",
            err.message
        );
    }
    let err = failed(
        run(
            sandgraph_tests::HOSTILE_INVALID_JSON,
            json!({"mode": "not_object"}),
        )
        .await,
    );
    assert_eq!(err.code, ErrorCode::InvalidOutput);
    assert!(err.message.contains("JSON object"), "{}", err.message);
}

#[tokio::test]
async fn hostile_nan_output() {
    let cases = [
        ("neg_zero", "$.x"),
        ("neg_zero_float", "$.x"),
        ("big_int", "$.x"),
        ("big_neg_int", "$.x"),
        ("huge_float", "$"),
        ("dup_key", "$.x"),
        ("nested_dup_key", "$.x.y"),
        ("deep", "$.x"),
        ("nan", "$"),
        ("infinity", "$"),
    ];
    for (mode, path) in cases {
        let err = failed(run(sandgraph_tests::HOSTILE_NAN_OUTPUT, json!({"mode": mode})).await);
        assert_eq!(
            err.code,
            ErrorCode::InvalidOutput,
            "{mode}: {}",
            err.message
        );
        assert!(
            err.message.contains(&format!("at {path}")),
            "{mode}: expected path {path}: {}",
            err.message
        );
    }
    let state = completed(run(sandgraph_tests::HOSTILE_NAN_OUTPUT, json!({"mode": "fine"})).await);
    assert_eq!(state["x"], json!(1));
}

#[tokio::test]
async fn hostile_panic() {
    let err = failed(run(sandgraph_tests::HOSTILE_PANIC, json!({})).await);
    assert_eq!(err.code, ErrorCode::Trap);
    assert!(err.message.contains("boom from guest"), "{}", err.message);
    assert!(err.message.contains("guest backtrace: "), "{}", err.message);
    completed(run(sandgraph_tests::ECHO, json!({"topic": "after"})).await);
}

#[tokio::test]
async fn hostile_fs_probe() {
    let state = completed(run(sandgraph_tests::HOSTILE_FS_PROBE, json!({})).await);
    for probe in [
        "fs_read",
        "read_dir",
        "fs_write",
        "tcp_connect",
        "udp_bind",
        "dns",
    ] {
        let got = state[probe].as_str().unwrap_or_default();
        assert!(got.starts_with("err:"), "{probe} was not denied: {got}");
    }
    assert_eq!(state["env_count"], json!(0));
    assert_eq!(state["args_count"], json!(0));
    assert_eq!(state["stdin"], json!("ok: 0 bytes"));
}

#[tokio::test]
async fn hostile_ignore_cancel() {
    let start = Instant::now();
    let err = failed(
        run_with(
            sandgraph_tests::HOSTILE_IGNORE_CANCEL,
            json!({}),
            spin_limits(150),
        )
        .await,
    );
    assert_eq!(err.code, ErrorCode::Timeout);
    assert!(start.elapsed() < Duration::from_secs(10));
    // Caller cancellation: cooperative first, then the hard stop.
    let graph = load(sandgraph_tests::HOSTILE_IGNORE_CANCEL).await;
    let opts = RunOptions {
        limits: Some(spin_limits(60_000)),
        ..Default::default()
    };
    let cancel = opts.cancel.clone();
    let run = tokio::spawn(async move { runtime().run(&graph, json!({}), opts).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    cancel.cancel();
    let err = failed(
        tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .expect("cancelled run stops")
            .unwrap(),
    );
    assert_eq!(err.code, ErrorCode::Timeout);
    assert!(err.message.contains("cancelled"), "{}", err.message);
}

#[tokio::test]
async fn hostile_cooperative() {
    // The guest sees cancelled() at the soft deadline and returns its update
    // before the hard stop; no new superstep starts after it.
    let state = completed(
        run_with(
            sandgraph_tests::HOSTILE_COOPERATIVE,
            json!({}),
            spin_limits(100),
        )
        .await,
    );
    assert_eq!(state["stopped_early"], json!(true));
}

#[tokio::test]
async fn hostile_stdout_flood() {
    let state = completed(run(sandgraph_tests::HOSTILE_STDOUT_FLOOD, json!({})).await);
    assert_eq!(state["done"], json!(true));
    assert!(state["stdout_bytes"].as_u64().unwrap() >= 10 << 20);
}

#[tokio::test]
async fn hostile_stream_flood() {
    let state = completed(run(sandgraph_tests::HOSTILE_STREAM_FLOOD, json!({"steps": 3})).await);
    assert_eq!(state["done"], json!(3));
    let blob = state["blob"].as_array().unwrap();
    assert_eq!(blob.len(), 16);
    assert_eq!(blob[0].as_str().unwrap().len(), 60 * 1024);
    assert!(blob[0].as_str().unwrap().bytes().all(|b| b == b'd'));
}

// ---- benchmark guests ----

#[tokio::test]
async fn bench_noop() {
    // A std component of another world (`bench:noop/noop`): the loader
    // rejects it before instantiating anything, naming the missing export.
    let err = runtime()
        .load_file(std::path::Path::new(sandgraph_tests::BENCH_NOOP))
        .await
        .expect_err("bench-noop is not a graph");
    assert_eq!(err.code, ErrorCode::Load);
    assert!(
        err.message
            .contains("does not export sandgraph:graph/graph"),
        "{}",
        err.message
    );
    assert!(err.message.contains("noop"), "{}", err.message);
}

#[tokio::test]
async fn bench_chain() {
    let state = completed(run(sandgraph_tests::BENCH_CHAIN, json!({})).await);
    let trail: Vec<String> = (0..10).map(|i| format!("n{i}")).collect();
    assert_eq!(state, json!({ "trail": trail }));
    let graph = load(sandgraph_tests::BENCH_CHAIN).await;
    assert_eq!(graph.name(), "bench_chain");
    assert_eq!(graph.spec().nodes.len(), 10);
}

// ---- durable threads ----

/// Runs `path` on thread `id` of `store` from `start`.
async fn on_thread(
    store: &sandgraph_store::ThreadStore,
    path: &str,
    id: &str,
    start: sandgraph_runtime::Start,
) -> Result<RunOutcome, RunError> {
    let graph = load(path).await;
    let writer = store
        .begin(id, graph.name(), sandgraph_store::Durability::Sync)
        .map_err(RunError::from)?;
    let existing = writer.load().map_err(RunError::from)?;
    runtime()
        .run_thread(
            &graph,
            existing,
            start,
            RunOptions::default(),
            &writer,
            &mut |_| {},
        )
        .await
}

fn interrupted(outcome: Result<RunOutcome, RunError>) -> Vec<sandgraph_runtime::Interrupt> {
    match outcome {
        Ok(RunOutcome::Interrupted { interrupts, .. }) => interrupts,
        other => panic!("expected an interrupt, got {other:?}"),
    }
}

#[tokio::test]
async fn approval() {
    use sandgraph_runtime::Start;
    let dir = tempfile::tempdir().unwrap();
    let store = sandgraph_store::Store::open(&dir.path().join("t.redb"))
        .unwrap()
        .threads();
    let first = interrupted(
        on_thread(
            &store,
            sandgraph_tests::APPROVAL,
            "t1",
            Start::Input(json!({"topic": "wasm"})),
        )
        .await,
    );
    assert_eq!(first[0].value["draft"], json!("A short note about wasm."));
    let second = interrupted(
        on_thread(
            &store,
            sandgraph_tests::APPROVAL,
            "t1",
            Start::Resume(json!("no")),
        )
        .await,
    );
    assert_eq!(
        second[0].value["draft"],
        json!("A short note about wasm (revision 1).")
    );
    assert_ne!(first[0].id, second[0].id);
    let done = completed(
        on_thread(
            &store,
            sandgraph_tests::APPROVAL,
            "t1",
            Start::Resume(json!("yes")),
        )
        .await,
    );
    assert_eq!(done["published"], json!(true));
    assert_eq!(done["revisions"], json!(1));
    // The finished thread has no pending interrupt left.
    let err = failed(
        on_thread(
            &store,
            sandgraph_tests::APPROVAL,
            "t1",
            Start::Resume(json!("yes")),
        )
        .await,
    );
    assert_eq!(err.code, ErrorCode::InvalidInput);
    assert!(
        err.message.contains("no pending interrupt"),
        "{}",
        err.message
    );
    let history = store.history("t1", None).unwrap();
    assert!(
        history.len() >= 5,
        "a checkpoint per superstep plus the input"
    );
}

#[tokio::test]
async fn graph_durable() {
    use sandgraph_runtime::Start;
    let state = completed(run(sandgraph_tests::GRAPH_DURABLE, json!({"slow_ms": 1})).await);
    assert_eq!(
        state["trail"],
        json!(["start", "fast", "slow", "merge", "finish"])
    );
    // Two runs racing on one thread: exactly one gets to write it.
    let dir = tempfile::tempdir().unwrap();
    let store = sandgraph_store::Store::open(&dir.path().join("t.redb"))
        .unwrap()
        .threads();
    let (a, b) = tokio::join!(
        on_thread(
            &store,
            sandgraph_tests::GRAPH_DURABLE,
            "race",
            Start::Input(json!({"slow_ms": 100}))
        ),
        on_thread(
            &store,
            sandgraph_tests::GRAPH_DURABLE,
            "race",
            Start::Input(json!({"slow_ms": 100}))
        ),
    );
    let (ok, busy): (Vec<_>, Vec<_>) = [a, b].into_iter().partition(|r| r.is_ok());
    assert_eq!(ok.len(), 1, "exactly one run succeeds");
    let err = busy.into_iter().next().unwrap().unwrap_err();
    assert_eq!(err.code, ErrorCode::ThreadBusy);
    // Running again on the thread continues from its state.
    let again = completed(
        on_thread(
            &store,
            sandgraph_tests::GRAPH_DURABLE,
            "race",
            Start::Input(json!({"slow_ms": 1})),
        )
        .await,
    );
    assert_eq!(again["trail"].as_array().unwrap().len(), 10);
}

#[tokio::test]
async fn graph_interrupt_two_interrupts_in_one_node_on_a_real_store() {
    use sandgraph_runtime::Start;
    let dir = tempfile::tempdir().unwrap();
    let store = sandgraph_store::Store::open(&dir.path().join("t.redb"))
        .unwrap()
        .threads();
    let g = sandgraph_tests::GRAPH_INTERRUPT;
    let first = interrupted(on_thread(&store, g, "t", Start::Input(json!({}))).await);
    assert_eq!(first[0].value, json!({"question": "approve?"}));
    let second = interrupted(on_thread(&store, g, "t", Start::Resume(json!(true))).await);
    assert_eq!(
        second[0].value,
        json!({"question": "name?", "approved": true})
    );
    let done = completed(on_thread(&store, g, "t", Start::Resume(json!("Ada"))).await);
    assert_eq!(done["approved"], json!(true));
    assert_eq!(done["name"], json!("Ada"));
    // `prepare` ran once: the interrupted steps never re-ran it.
    assert_eq!(done["log"], json!(["prepared", "asked"]));
}

// ---- graph tools (the registry refuses these two; the runtime loads them) ----

#[tokio::test]
async fn graph_reserved_name() {
    // A well-formed graph named `run_code`: loadable and runnable; only the
    // graph tool registry refuses the reserved name.
    let graph = load(sandgraph_tests::GRAPH_RESERVED_NAME).await;
    assert_eq!(graph.name(), "run_code");
    let state = completed(run(sandgraph_tests::GRAPH_RESERVED_NAME, json!({})).await);
    assert_eq!(state, json!({"ran": true}));
}

#[tokio::test]
async fn graph_bad_params() {
    // The spec is valid (parameters are an object); the parameter DSL is
    // not, which only the registry checks.
    let graph = load(sandgraph_tests::GRAPH_BAD_PARAMS).await;
    assert_eq!(graph.name(), "graph_bad_params");
    assert_eq!(
        graph.spec().parameters,
        Some(json!({"x": {"type": "string", "required": false}}))
    );
}

#[tokio::test]
async fn graph_context() {
    let graph = load(sandgraph_tests::GRAPH_CONTEXT).await;
    assert_eq!(graph.spec().timeout_ms, Some(5000));
    assert_eq!(graph.spec().description, None);
    let mut configurable = serde_json::Map::new();
    configurable.insert("k".into(), json!(1));
    let context = sandgraph_core::NodeContext {
        tool: "ctx_tool".into(),
        request: Some("hello".into()),
        thread_id: Some("th".into()),
        configurable,
        ..Default::default()
    };
    let opts = RunOptions {
        context: context.clone(),
        ..Default::default()
    };
    let state = completed(
        runtime()
            .run(&graph, json!({"topic": "t"}), opts.clone())
            .await,
    );
    assert_eq!(
        state["context"],
        json!({"tool": "ctx_tool", "request": "hello", "thread_id": "th", "configurable": {"k": 1}})
    );
    // validate refuses requests that are "not mine", naming the tool.
    assert_eq!(
        runtime().validate(&graph, &json!({}), opts).await.unwrap(),
        Ok(())
    );
    let opts = RunOptions {
        context: sandgraph_core::NodeContext {
            request: Some("not mine".into()),
            ..context
        },
        ..Default::default()
    };
    assert_eq!(
        runtime().validate(&graph, &json!({}), opts).await.unwrap(),
        Err("\"ctx_tool\" does not handle: not mine".to_owned())
    );
}

/// The guest's log lines, in order.
#[derive(Default)]
struct Lines(std::sync::Mutex<Vec<String>>);

impl sandgraph_runtime::LogSink for Lines {
    fn log(&self, _graph: &str, _level: sandgraph_runtime::GuestLogLevel, message: &str) {
        self.0.lock().unwrap().push(message.to_owned());
    }
}

impl Lines {
    /// What graph_context's node said about `validate` since the last take.
    fn take_node_reports(&self) -> Vec<String> {
        let mut lines = self.0.lock().unwrap();
        let reports = lines
            .iter()
            .filter(|l| l.starts_with("validate calls in this instance"))
            .cloned()
            .collect();
        lines.clear();
        reports
    }
}

#[tokio::test]
async fn a_calls_validate_runs_in_the_instance_its_run_starts_on() {
    let lines = std::sync::Arc::new(Lines::default());
    let rt = sandgraph_factors::builder(RuntimeConfig::default())
        .sink(lines.clone())
        .build()
        .unwrap();
    let graph = rt
        .load_file(std::path::Path::new(sandgraph_tests::GRAPH_CONTEXT))
        .await
        .unwrap();
    let input = json!({"topic": "t"});
    // A prepared run: validate, then the node, in one instance.
    for _ in 0..2 {
        let run = rt.prepare(&graph, RunOptions::default()).unwrap();
        assert_eq!(run.validate(&input).await.unwrap(), Ok(()));
        completed(run.run_streaming(input.clone(), &mut |_| {}).await);
        // Once per call: a second call's instance is a fresh one.
        assert_eq!(
            lines.take_node_reports(),
            ["validate calls in this instance: 1"]
        );
    }
    // `Runtime::validate` checks in an instance of its own, which no run
    // gets; a plain run validates nothing.
    let verdict = rt.validate(&graph, &input, RunOptions::default()).await;
    assert_eq!(verdict.unwrap(), Ok(()));
    completed(rt.run(&graph, input.clone(), RunOptions::default()).await);
    assert_eq!(
        lines.take_node_reports(),
        ["validate calls in this instance: 0"]
    );
    // A refusal keeps no instance: the run after it starts on a fresh one.
    let refused = RunOptions {
        context: sandgraph_core::NodeContext {
            request: Some("not mine".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let run = rt.prepare(&graph, refused).unwrap();
    assert!(run.validate(&input).await.unwrap().is_err());
    completed(run.run_streaming(input, &mut |_| {}).await);
    assert_eq!(
        lines.take_node_reports(),
        ["validate calls in this instance: 0"]
    );
}

// ---- the llm capability (graph-llm against the scripted model server) ----

/// Holds [`LLM_KEY`] once [`llm_backend`] ran.
const LLM_KEY_VAR: &str = "SANDGRAPH_TEST_GRAPHS_LLM_KEY_5E1B";
/// The key the host holds; unusual so a leak into a guest is unambiguous.
const LLM_KEY: &str = "sk-graphs-test-Qm4p7Wd2-leakcheck";

/// A backend over `server` holding the test key: `fast` is
/// `deepseek-chat`, `smart` is `deepseek-reasoner`, `default` is
/// `default-model`; no retries, so one call is one request.
fn llm_backend(server: &sandgraph_test_llm::ScriptedLlm) -> sandgraph_factors::llm::LlmBackend {
    static KEY: std::sync::Once = std::sync::Once::new();
    // SAFETY: runs once, before any client of this binary reads the
    // environment (every llm test builds its backend through here).
    KEY.call_once(|| unsafe { std::env::set_var(LLM_KEY_VAR, LLM_KEY) });
    let client = sandgraph_llm::OpenAiClient::new(sandgraph_llm::ClientConfig {
        base_url: server.base_url(),
        model: "default-model".into(),
        api_key_env: LLM_KEY_VAR.into(),
        max_retries: 0,
        ..Default::default()
    })
    .expect("the test client config is valid");
    sandgraph_factors::llm::LlmBackend {
        provider: std::sync::Arc::new(client),
        models: [("fast", "deepseek-chat"), ("smart", "deepseek-reasoner")]
            .into_iter()
            .map(|(a, m)| (a.to_owned(), m.to_owned()))
            .collect(),
        default_model: "default-model".into(),
    }
}

/// The models `models` granted, no quota.
fn llm_grant(models: &[&str]) -> sandgraph_factors::llm::LlmGrant {
    sandgraph_factors::llm::LlmGrant {
        models: models.iter().map(|m| (*m).to_owned()).collect(),
        ..Default::default()
    }
}

/// `grant`, served by `server` (none: the host has no model).
fn llm_caps(
    server: Option<&sandgraph_test_llm::ScriptedLlm>,
    grant: sandgraph_factors::llm::LlmGrant,
) -> sandgraph_runtime::caps::Capabilities {
    sandgraph_runtime::caps::Capabilities::default().with(sandgraph_factors::llm::LlmAccess {
        grant,
        backend: server.map(llm_backend),
    })
}

/// A completion answering `content` with exactly this usage.
fn llm_completion(content: &str, prompt: u64, completion: u64) -> sandgraph_test_llm::Reply {
    sandgraph_test_llm::Reply::raw(
        &json!({
            "id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion},
        })
        .to_string(),
    )
}

/// Runs graph-llm on `input` with `caps` and `limits`; also returns the
/// `answers` its `ask` step wrote (seen even when the run fails after it).
async fn run_llm(
    input: Value,
    caps: sandgraph_runtime::caps::Capabilities,
    limits: Limits,
    cancel: sandgraph_runtime::CancellationToken,
) -> (Result<RunOutcome, RunError>, Vec<Value>) {
    let graph = load(sandgraph_tests::GRAPH_LLM).await;
    let opts = RunOptions {
        limits: Some(limits),
        cancel,
        capabilities: caps,
        ..Default::default()
    };
    let mut answers = Vec::new();
    let outcome = runtime()
        .run_streaming(&graph, input, opts, &mut |event| {
            for task in event.updates.iter().filter(|t| t.node == "ask") {
                if let Some(list) = task.update["answers"].as_array() {
                    answers.extend(list.iter().cloned());
                }
            }
        })
        .await;
    (outcome, answers)
}

/// [`run_llm`] with the default limits, to completion: the final state.
async fn ask_llm(input: Value, caps: sandgraph_runtime::caps::Capabilities) -> Value {
    completed(
        run_llm(input, caps, Limits::default(), Default::default())
            .await
            .0,
    )
}

/// The `kind` of an answer that is an error, with its message.
fn llm_error(answer: &Value) -> (&str, &str) {
    let e = &answer["error"];
    match (e["kind"].as_str(), e["message"].as_str()) {
        (Some(kind), Some(message)) => (kind, message),
        _ => panic!("expected an llm error, got {answer}"),
    }
}

#[tokio::test]
async fn graph_llm() {
    let graph = load(sandgraph_tests::GRAPH_LLM).await;
    assert_eq!(graph.capabilities(), ["llm"]);
    // Granted: the answer and the usage the provider reported arrive; the
    // provider got the mapped model name and the host's key.
    let server = sandgraph_test_llm::ScriptedLlm::start([llm_completion("42", 11, 5)]).await;
    let state = ask_llm(
        json!({"question": "what is six times seven?"}),
        llm_caps(Some(&server), llm_grant(&["fast"])),
    )
    .await;
    assert_eq!(
        state["answers"],
        json!([{"content": "42", "finish_reason": "stop", "prompt_tokens": 11, "completion_tokens": 5}])
    );
    let sent = server.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body["model"], json!("deepseek-chat"));
    assert_eq!(
        sent[0].header("authorization"),
        Some(format!("Bearer {LLM_KEY}").as_str())
    );
    assert_eq!(
        sent[0].last_content("user"),
        Some("what is six times seven?")
    );
    // No token quota: the guest set no max_tokens, none is sent.
    assert!(sent[0].body.get("max_tokens").is_none(), "{}", sent[0].body);

    // Not granted, an alias not granted, granted without a model on the
    // host: denied in the node's hands, and nothing reaches the server.
    let server = sandgraph_test_llm::ScriptedLlm::start([llm_completion("no", 1, 1)]).await;
    let cases = [
        (json!({}), Default::default(), "this graph has no llm grant"),
        (
            json!({"model": "smart"}),
            llm_caps(Some(&server), llm_grant(&["fast"])),
            "the model alias \"smart\" is not granted to this graph (granted: fast)",
        ),
        (
            json!({}),
            llm_caps(None, llm_grant(&["fast"])),
            "the host has no model configured",
        ),
    ];
    for (input, caps, why) in cases {
        let state = ask_llm(input, caps).await;
        let (kind, message) = llm_error(&state["answers"][0]);
        assert_eq!(kind, "denied", "{message}");
        assert!(message.starts_with(why), "{message}");
    }
    assert_eq!(server.requests().len(), 0, "a refused call sent nothing");

    // A provider failure echoing the key: the guest gets `provider`, and
    // the key is nowhere in what it got.
    let server = sandgraph_test_llm::ScriptedLlm::start([sandgraph_test_llm::Reply::status(
        400,
        &json!({"error": {"message": format!("bad request for {LLM_KEY}")}}).to_string(),
    )])
    .await;
    let state = ask_llm(json!({}), llm_caps(Some(&server), llm_grant(&["fast"]))).await;
    let (kind, message) = llm_error(&state["answers"][0]);
    assert_eq!(kind, "provider");
    assert!(message.starts_with("status: "), "{message}");
    assert!(!state.to_string().contains(LLM_KEY), "{state}");
}

#[tokio::test]
async fn graph_llm_quotas_are_per_run_and_checked_before_the_call() {
    // max_calls: the call past it is `quota`, and never sent.
    let server = sandgraph_test_llm::ScriptedLlm::start([
        llm_completion("one", 1, 1),
        llm_completion("two", 1, 1),
    ])
    .await;
    let grant = sandgraph_factors::llm::LlmGrant {
        max_calls: Some(1),
        ..llm_grant(&["fast"])
    };
    let state = ask_llm(json!({"calls": 2}), llm_caps(Some(&server), grant)).await;
    assert_eq!(state["answers"][0]["content"], json!("one"));
    let (kind, message) = llm_error(&state["answers"][1]);
    assert_eq!(
        (kind, message),
        ("quota", "the run made all of its 1 granted llm calls")
    );
    assert_eq!(server.requests().len(), 1);
    // A new run has its own quota.
    let grant = sandgraph_factors::llm::LlmGrant {
        max_calls: Some(1),
        ..llm_grant(&["fast"])
    };
    let state = ask_llm(json!({}), llm_caps(Some(&server), grant)).await;
    assert_eq!(state["answers"][0]["content"], json!("two"));

    // max_tokens: each request reserves its prompt (a token per byte, an
    // upper bound) and asks for at most what is left after it, counted
    // from the reported usage; once spent, the next call is refused.
    let server = sandgraph_test_llm::ScriptedLlm::start([
        llm_completion("a", 200, 100),
        llm_completion("b", 500, 250),
        llm_completion("c", 1, 1),
    ])
    .await;
    let grant = sandgraph_factors::llm::LlmGrant {
        max_tokens: Some(1000),
        ..llm_grant(&["fast"])
    };
    let state = ask_llm(json!({"calls": 3}), llm_caps(Some(&server), grant)).await;
    let sent = server.requests();
    assert_eq!(sent.len(), 2, "the third call was refused before sending");
    let first = sent[0].body["max_tokens"].as_u64().unwrap();
    let prompt = 1000 - first;
    assert!((1..500).contains(&prompt), "{first}");
    // The same prompt again, after 300 reported tokens.
    assert_eq!(sent[1].body["max_tokens"], json!(1000 - 300 - prompt));
    let (kind, message) = llm_error(&state["answers"][2]);
    assert_eq!(kind, "quota");
    assert_eq!(message, "the run used 1050 of its 1000 granted llm tokens");
}

#[tokio::test]
async fn graph_llm_wait_ends_at_the_deadline_and_on_cancellation() {
    // The model takes 30 s; the run's deadline is 300 ms with a long
    // grace, so only the capability's own wait can end it early: the
    // node sees `timeout` at the soft deadline and the run stops there.
    let slow = || llm_completion("late", 1, 1).delay(Duration::from_secs(30));
    let server = sandgraph_test_llm::ScriptedLlm::start([slow(), slow()]).await;
    let limits = Limits {
        timeout: Duration::from_millis(300),
        grace: Duration::from_secs(10),
        ..Limits::default()
    };
    let started = Instant::now();
    let (outcome, answers) = run_llm(
        json!({}),
        llm_caps(Some(&server), llm_grant(&["fast"])),
        limits,
        Default::default(),
    )
    .await;
    let elapsed = started.elapsed();
    let (kind, message) = llm_error(&answers[0]);
    assert_eq!(kind, "timeout");
    assert!(message.contains("deadline of 300 ms"), "{message}");
    assert_eq!(failed(outcome).code, ErrorCode::Timeout);
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");

    // Cancellation ends the wait at once, not after the grace period.
    let cancel = sandgraph_runtime::CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let limits = Limits {
        timeout: Duration::from_secs(60),
        grace: Duration::from_secs(10),
        ..Limits::default()
    };
    let (outcome, answers) = run_llm(
        json!({}),
        llm_caps(Some(&server), llm_grant(&["fast"])),
        limits,
        cancel,
    )
    .await;
    let elapsed = started.elapsed();
    assert_eq!(llm_error(&answers[0]), ("timeout", "the run was cancelled"));
    assert_eq!(failed(outcome).code, ErrorCode::Timeout);
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[tokio::test]
async fn graph_llm_oversized_request_is_malformed_and_never_sent() {
    let server = sandgraph_test_llm::ScriptedLlm::start([llm_completion("no", 1, 1)]).await;
    let state = ask_llm(
        json!({"oversize": true}),
        llm_caps(Some(&server), llm_grant(&["fast"])),
    )
    .await;
    let (kind, message) = llm_error(&state["answers"][0]);
    assert_eq!(kind, "malformed");
    assert!(
        message.ends_with("more than the limit of 1048576"),
        "{message}"
    );
    assert_eq!(server.requests().len(), 0);
}

#[tokio::test]
async fn graph_llm_resumed_thread_never_repeats_a_finished_call() {
    use sandgraph_runtime::Start;
    // One reply only: a repeated call would get the server's 500.
    let server = sandgraph_test_llm::ScriptedLlm::start([llm_completion("draft", 3, 2)]).await;
    let dir = tempfile::tempdir().unwrap();
    let store = sandgraph_store::Store::open(&dir.path().join("t.redb"))
        .unwrap()
        .threads();
    let graph = load(sandgraph_tests::GRAPH_LLM).await;
    let run = |start| {
        let writer = store
            .begin("t", graph.name(), sandgraph_store::Durability::Sync)
            .unwrap();
        let existing = writer.load().unwrap();
        let opts = RunOptions {
            capabilities: llm_caps(Some(&server), llm_grant(&["fast"])),
            ..Default::default()
        };
        let graph = graph.clone();
        async move {
            runtime()
                .run_thread(&graph, existing, start, opts, &writer, &mut |_| {})
                .await
        }
    };
    let paused = interrupted(run(Start::Input(json!({"review": true}))).await);
    assert_eq!(paused[0].node, "review");
    assert_eq!(paused[0].value["answers"][0]["content"], json!("draft"));
    let state = completed(run(Start::Resume(json!("yes"))).await);
    assert_eq!(state["approved"], json!("yes"));
    assert_eq!(state["answers"].as_array().unwrap().len(), 1);
    assert_eq!(server.requests().len(), 1, "the model was asked once");
}
