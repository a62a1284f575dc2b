//! The brokered capabilities (issue 13) against the real sandbox, with
//! fake backends: what a graph gets without a grant, with one, and what
//! it cannot get around.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use sandgraph_factors::tools::{
    SubRun, ToolCallError, ToolDescription, ToolsAccess, ToolsBackend, ToolsGrant,
};
use sandgraph_runtime::caps::Capabilities;
use sandgraph_runtime::{ErrorCode, Graph, Limits, RunOptions, RunOutcome};
use serde_json::{Value, json};

use super::completed;
use sandgraph_tests::{load, runtime};

/// Safety net for things that must end soon; never a speed claim.
const SOON: Duration = Duration::from_secs(20);

/// Runs the graphs it holds, as sub-runs of their caller, with the
/// limits given (so a test can give a sub-run more than its caller).
struct FakeTools {
    graphs: BTreeMap<String, Arc<Graph>>,
    limits: Limits,
    calls: AtomicUsize,
    chains: std::sync::Mutex<Vec<Vec<String>>>,
}

impl ToolsBackend for FakeTools {
    fn describe(&self, name: &str) -> Option<ToolDescription> {
        self.graphs.get(name).map(|g| ToolDescription {
            name: name.to_owned(),
            description: g.spec().description.clone(),
            parameters: json!({"type": "object"}),
        })
    }

    fn call(
        &self,
        name: &str,
        args: Value,
        caller: SubRun,
    ) -> BoxFuture<'static, Result<Value, ToolCallError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.chains
            .lock()
            .unwrap()
            .push(caller.chain().map(str::to_owned).collect());
        let graph = self.graphs.get(name).cloned();
        let limits = self.limits.clone();
        async move {
            let graph = graph.ok_or(ToolCallError::NotFound)?;
            let opts = RunOptions {
                limits: Some(limits),
                sub_run_of: Some(caller),
                ..RunOptions::default()
            };
            match runtime().run(&graph, args, opts).await {
                Ok(RunOutcome::Completed(state)) => Ok(Value::Object(state)),
                Ok(_) => Err(ToolCallError::Interrupted),
                Err(e) => Err(ToolCallError::Run(e)),
            }
        }
        .boxed()
    }
}

async fn fake(names: &[(&str, &str)], limits: Limits) -> Arc<FakeTools> {
    let mut graphs = BTreeMap::new();
    for (name, path) in names {
        graphs.insert((*name).to_owned(), load(path).await);
    }
    Arc::new(FakeTools {
        graphs,
        limits,
        calls: AtomicUsize::new(0),
        chains: Default::default(),
    })
}

fn granting(backend: &Arc<FakeTools>, allow: &[&str], max_calls: Option<u32>) -> Capabilities {
    Capabilities::default().with(ToolsAccess {
        grant: ToolsGrant {
            allow: allow.iter().map(|s| (*s).to_owned()).collect(),
            max_calls,
        },
        backend: backend.clone(),
    })
}

async fn call_tool(caps: Capabilities, tool: &str, args: Value, limits: Limits) -> Value {
    let graph = load(sandgraph_tests::GRAPH_TOOLS).await;
    let opts = RunOptions {
        limits: Some(limits),
        capabilities: caps,
        ..RunOptions::default()
    };
    completed(
        runtime()
            .run(&graph, json!({"tool": tool, "args": args}), opts)
            .await,
    )
}

#[tokio::test]
pub async fn graph_tools() {
    let backend = fake(
        &[
            ("echo_graph", sandgraph_tests::ECHO),
            ("graph_tools", sandgraph_tests::GRAPH_TOOLS),
        ],
        Limits::default(),
    )
    .await;
    let args = json!({"topic": "x"});
    // No grant: denied, nothing listed, nothing runs.
    let state = call_tool(
        Capabilities::default(),
        "echo_graph",
        args.clone(),
        Limits::default(),
    )
    .await;
    assert_eq!(state["error"]["kind"], "denied", "{state}");
    assert_eq!(state["listed"], json!([]));
    assert_eq!(backend.calls.load(Ordering::SeqCst), 0);
    // Granted: the tool's final state comes back; list shows the grant.
    let caps = granting(&backend, &["echo_graph"], None);
    let state = call_tool(caps.clone(), "echo_graph", args.clone(), Limits::default()).await;
    assert_eq!(
        state["result"],
        json!({"topic": "x", "log": ["seen:x"]}),
        "{state}"
    );
    assert_eq!(state["listed"], json!(["echo_graph"]));
    assert_eq!(backend.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        backend.chains.lock().unwrap().last().unwrap(),
        &["graph_tools"]
    );
    // A mounted tool that is not granted: denied, nothing runs.
    let state = call_tool(caps.clone(), "graph_tools", args.clone(), Limits::default()).await;
    assert_eq!(state["error"]["kind"], "denied", "{state}");
    assert!(
        state["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tool \"graph_tools\" is not granted to this graph (granted: echo_graph)"),
        "{state}"
    );
    // Arguments that are not an object never reach the backend.
    let state = call_tool(caps.clone(), "echo_graph", json!([1]), Limits::default()).await;
    assert_eq!(state["error"]["kind"], "invalid_args", "{state}");
    assert_eq!(backend.calls.load(Ordering::SeqCst), 1);
    // Calling itself: refused as recursion before anything runs.
    let caps = granting(&backend, &["graph_tools"], None);
    let state = call_tool(
        caps,
        "graph_tools",
        json!({"tool": "graph_tools"}),
        Limits::default(),
    )
    .await;
    assert_eq!(state["error"]["kind"], "recursion", "{state}");
    assert!(
        state["error"]["message"]
            .as_str()
            .unwrap()
            .contains("graph_tools is already running in this chain (graph_tools -> graph_tools)"),
        "{state}"
    );
    assert_eq!(backend.calls.load(Ordering::SeqCst), 1);
    // The run's quota: none left, refused before the backend is asked.
    let caps = granting(&backend, &["echo_graph"], Some(0));
    let state = call_tool(caps, "echo_graph", args, Limits::default()).await;
    assert_eq!(state["error"]["kind"], "quota", "{state}");
    assert_eq!(backend.calls.load(Ordering::SeqCst), 1);
}

/// Runs `graph-tools` under `caller` limits, calling a tool that spins
/// for a minute on its own limits (unbounded fuel); the outcome, within
/// the safety net.
async fn call_a_spinner(caller: Limits) -> Result<RunOutcome, sandgraph_runtime::RunError> {
    let backend = fake(
        &[("spin", sandgraph_tests::HOSTILE_INFINITE_LOOP)],
        Limits {
            timeout: Duration::from_secs(60),
            fuel: u64::MAX / 2,
            ..Limits::default()
        },
    )
    .await;
    let graph = load(sandgraph_tests::GRAPH_TOOLS).await;
    let opts = RunOptions {
        limits: Some(caller),
        capabilities: granting(&backend, &["spin"], None),
        ..RunOptions::default()
    };
    let started = Instant::now();
    let out = runtime()
        .run(&graph, json!({"tool": "spin", "args": {}}), opts)
        .await;
    assert!(started.elapsed() < SOON, "took {:?}", started.elapsed());
    assert_eq!(backend.calls.load(Ordering::SeqCst), 1);
    out
}

#[tokio::test]
async fn a_tool_call_shares_its_callers_deadline() {
    // The caller has 300 ms: the sub-run ends with the caller's deadline.
    let out = call_a_spinner(Limits {
        timeout: Duration::from_millis(300),
        grace: Duration::from_millis(100),
        fuel: u64::MAX / 2,
        ..Limits::default()
    })
    .await;
    let e = out.expect_err("the caller's deadline ends the run");
    assert_eq!(e.code, ErrorCode::Timeout, "{}", e.message);
}

#[tokio::test]
async fn a_tool_call_draws_on_its_callers_fuel() {
    // The caller has 2e9 fuel: the sub-run spends the caller's pool and
    // stops when that is spent.
    let out = call_a_spinner(Limits {
        timeout: Duration::from_secs(60),
        fuel: 2_000_000_000,
        ..Limits::default()
    })
    .await;
    match out {
        Ok(RunOutcome::Completed(state)) => {
            // The node handled the sub-run's failure: out of fuel.
            let message = state["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("[out_of_fuel]"), "{message}");
            // The budget it ran out of is its caller's.
            assert!(message.contains("fuel budget of 2000000000"), "{message}");
        }
        Err(e) => assert_eq!(e.code, ErrorCode::OutOfFuel, "{}", e.message),
        Ok(other) => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_tool_call_gets_the_fuel_its_caller_holds() {
    // 3e8 is less than one slice: the calling node's call holds all of it
    // while it waits on the tool, and gives it back for the sub-run (which
    // failed out of fuel at once before, naming the default budget).
    let backend = fake(&[("echo_graph", sandgraph_tests::ECHO)], Limits::default()).await;
    let caps = granting(&backend, &["echo_graph"], None);
    let limits = Limits {
        fuel: 300_000_000,
        ..Limits::default()
    };
    let state = call_tool(caps, "echo_graph", json!({"topic": "x"}), limits).await;
    assert_eq!(
        state["result"],
        json!({"topic": "x", "log": ["seen:x"]}),
        "{state}"
    );
}

#[tokio::test]
async fn a_sub_runs_steps_arrive_before_the_step_that_called_it() {
    let backend = fake(&[("echo_graph", sandgraph_tests::ECHO)], Limits::default()).await;
    let graph = load(sandgraph_tests::GRAPH_TOOLS).await;
    let opts = RunOptions {
        capabilities: granting(&backend, &["echo_graph"], None),
        ..RunOptions::default()
    };
    let mut seen = Vec::new();
    let out = runtime()
        .run_streaming(
            &graph,
            json!({"tool": "echo_graph", "args": {"topic": "x"}}),
            opts,
            &mut |ev| seen.push(serde_json::to_value(ev).unwrap()),
        )
        .await;
    completed(out);
    // Step 0 of echo_graph (its node "echo" wrote the log), then the
    // caller's own step 0; only the sub-run's is labelled.
    assert_eq!(seen.len(), 2, "{seen:#?}");
    assert_eq!(seen[0]["sub_run"], json!(["echo_graph"]), "{seen:#?}");
    assert_eq!(seen[0]["updates"][0]["node"], "echo");
    assert_eq!(seen[1].get("sub_run"), None, "{seen:#?}");
    assert_eq!(seen[1]["updates"][0]["node"], "call");
}

/// Keeps what the runtime reports.
#[derive(Default)]
pub(crate) struct Recorder(pub(crate) std::sync::Mutex<Vec<sandgraph_core::audit::CapabilityCall>>);

impl sandgraph_core::audit::CapabilityLog for Recorder {
    fn record(
        &self,
        call: sandgraph_core::audit::CapabilityCall,
        _: sandgraph_core::audit::Written,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        self.0.lock().unwrap().push(call);
        Box::pin(async {})
    }
}

#[tokio::test]
async fn tool_calls_are_journaled_allowed_or_refused() {
    let backend = fake(&[("echo_graph", sandgraph_tests::ECHO)], Limits::default()).await;
    let log = Arc::new(Recorder::default());
    let mut caps = granting(&backend, &["echo_graph"], Some(1));
    caps.log = Some(log.clone());
    let args = json!({"topic": "x"});
    call_tool(caps.clone(), "echo_graph", args.clone(), Limits::default()).await;
    call_tool(
        caps.clone(),
        "nope\u{1b}[2J",
        args.clone(),
        Limits::default(),
    )
    .await;
    let no_grant = Capabilities::default().with_log(Some(log.clone()));
    call_tool(no_grant, "echo_graph", args, Limits::default()).await;
    let calls = log.0.lock().unwrap().clone();
    let rows: Vec<(&str, &str, &str)> = calls
        .iter()
        .map(|c| (c.graph.as_str(), c.target.as_str(), c.decision.as_str()))
        .collect();
    assert_eq!(
        rows,
        [
            ("graph_tools", "echo_graph", "allowed"),
            // The graph's text is escaped before it is kept.
            ("graph_tools", "nope\\u{1b}[2J", "denied"),
            ("graph_tools", "echo_graph", "denied"),
        ]
    );
    assert_eq!(calls[0].request_bytes, r#"{"topic":"x"}"#.len() as u64);
    assert!(calls[0].response_bytes > 0);
    assert!(
        calls[2]
            .reason
            .as_deref()
            .unwrap()
            .contains("no tools grant")
    );
}

/// A grant of the alias `fast`, served by `provider` as `model`.
fn granting_fast(provider: Arc<dyn sandgraph_llm::Provider>, model: &str) -> Capabilities {
    use sandgraph_factors::llm::{LlmAccess, LlmBackend, LlmGrant};
    Capabilities::default().with(LlmAccess {
        grant: LlmGrant {
            models: vec!["fast".into()],
            max_calls: None,
            max_tokens: None,
        },
        backend: Some(LlmBackend {
            provider,
            models: [("fast".to_owned(), model.to_owned())].into(),
            default_model: "m0".into(),
        }),
    })
}

/// A model that always answers "ok" with 3 + 2 tokens.
struct Ok3;

impl sandgraph_llm::Provider for Ok3 {
    fn chat<'a>(
        &'a self,
        _: &'a sandgraph_llm::ChatRequest,
    ) -> BoxFuture<'a, Result<sandgraph_llm::ChatResponse, sandgraph_llm::LlmError>> {
        futures::future::ready(Ok(sandgraph_llm::ChatResponse {
            content: Some("ok".into()),
            finish_reason: Some("stop".into()),
            usage: Some(sandgraph_llm::Usage {
                prompt_tokens: 3,
                completion_tokens: 2,
            }),
            ..sandgraph_llm::ChatResponse::default()
        }))
        .boxed()
    }
}

#[tokio::test]
async fn llm_calls_are_journaled_allowed_or_refused() {
    let log = Arc::new(Recorder::default());
    let caps = granting_fast(Arc::new(Ok3), "m1").with_log(Some(log.clone()));
    let graph = load(sandgraph_tests::GRAPH_LLM).await;
    for model in ["fast", "slow"] {
        let opts = RunOptions {
            capabilities: caps.clone(),
            ..RunOptions::default()
        };
        completed(
            runtime()
                .run(&graph, json!({"question": "hi", "model": model}), opts)
                .await,
        );
    }
    let calls = log.0.lock().unwrap().clone();
    let rows: Vec<(&str, &str, &str, Option<u64>)> = calls
        .iter()
        .map(|c| {
            (
                c.capability.as_str(),
                c.target.as_str(),
                c.decision.as_str(),
                c.tokens,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("llm", "fast", "allowed", Some(5)),
            ("llm", "slow", "denied", None)
        ]
    );
    assert_eq!(calls[0].response_bytes, 2);
    assert!(calls[0].request_bytes > 0);
}

/// A model that answers only when the gate opens.
struct Gated(Arc<tokio::sync::Semaphore>);

impl sandgraph_llm::Provider for Gated {
    fn chat<'a>(
        &'a self,
        _: &'a sandgraph_llm::ChatRequest,
    ) -> BoxFuture<'a, Result<sandgraph_llm::ChatResponse, sandgraph_llm::LlmError>> {
        async move {
            let _pass = self.0.acquire().await;
            Ok(sandgraph_llm::ChatResponse {
                content: Some("late".into()),
                ..sandgraph_llm::ChatResponse::default()
            })
        }
        .boxed()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_runs_waiting_on_a_model_do_not_lock_out_others() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let caps = granting_fast(Arc::new(Gated(gate.clone())), "m");
    let graph = load(sandgraph_tests::GRAPH_LLM).await;
    let mut waiting = Vec::new();
    for _ in 0..200 {
        let (graph, caps) = (graph.clone(), caps.clone());
        waiting.push(tokio::spawn(async move {
            let opts = RunOptions {
                capabilities: caps,
                limits: Some(Limits {
                    timeout: Duration::from_secs(60),
                    ..Limits::default()
                }),
                ..RunOptions::default()
            };
            runtime()
                .run(&graph, json!({"question": "q", "model": "fast"}), opts)
                .await
        }));
    }
    // Give every run time to reach its model call.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(waiting.iter().all(|w| !w.is_finished()));
    // Another caller is served while all 200 wait (they hold an instance
    // each, but no CPU, no fuel and not the whole pool).
    let started = Instant::now();
    let state = completed(super::run(sandgraph_tests::ECHO, json!({"topic": "t"})).await);
    assert_eq!(state["log"], json!(["seen:t"]));
    assert!(started.elapsed() < SOON);
    assert!(
        waiting.iter().all(|w| !w.is_finished()),
        "the waiters ended early"
    );
    gate.add_permits(1000);
    for w in waiting {
        let state = completed(w.await.unwrap());
        assert_eq!(state["answers"][0]["content"], "late", "{state}");
    }
}

/// A model that answers only once all its callers wait on it together.
struct AllAtOnce(tokio::sync::Barrier);

impl sandgraph_llm::Provider for AllAtOnce {
    fn chat<'a>(
        &'a self,
        _: &'a sandgraph_llm::ChatRequest,
    ) -> BoxFuture<'a, Result<sandgraph_llm::ChatResponse, sandgraph_llm::LlmError>> {
        async move {
            self.0.wait().await;
            Ok(sandgraph_llm::ChatResponse {
                content: Some("together".into()),
                ..sandgraph_llm::ChatResponse::default()
            })
        }
        .boxed()
    }
}

/// A call waiting on the model holds none of the run's fuel.
#[tokio::test]
pub async fn graph_llm_fanout() {
    // Four tasks on 3e8 fuel (less than one slice) ask a model that
    // answers only when all four wait on it: each call gives its fuel back
    // while it waits, so the next task can start and ask too. (A waiting
    // call that kept its slice held the whole pool, and the other tasks
    // waited for it until the deadline.)
    let graph = load(sandgraph_tests::GRAPH_LLM_FANOUT).await;
    let opts = RunOptions {
        capabilities: granting_fast(Arc::new(AllAtOnce(tokio::sync::Barrier::new(4))), "m"),
        limits: Some(Limits {
            timeout: Duration::from_secs(10),
            fuel: 300_000_000,
            ..Limits::default()
        }),
        ..RunOptions::default()
    };
    let state = completed(runtime().run(&graph, json!({"n": 4}), opts).await);
    assert_eq!(
        state["answers"],
        json!(["together", "together", "together", "together"]),
        "{state}"
    );
}

/// A graph with no grant loops on a refused `tools` call: past the run's
/// cap every call is refused at once with `quota`, and the journal gets
/// one row per kind of refusal, with its count, not a row per call.
#[tokio::test]
pub async fn hostile_refusal_loop() {
    use sandgraph_runtime::MAX_CAPABILITY_CALLS_PER_RUN as CAP;
    let graph = load(sandgraph_tests::HOSTILE_REFUSAL_LOOP).await;
    let log = Arc::new(Recorder::default());
    let opts = RunOptions {
        capabilities: Capabilities::default().with_log(Some(log.clone())),
        ..RunOptions::default()
    };
    let times = CAP + 5_000;
    let started = Instant::now();
    let out = completed(runtime().run(&graph, json!({"times": times}), opts).await);
    assert!(started.elapsed() < SOON);
    assert_eq!(out["made"], json!(times));
    assert_eq!(out["ok"], json!(0));
    assert_eq!(out["last_error"]["kind"], json!("quota"), "{out}");
    assert_eq!(
        out["last_error"]["message"],
        json!(format!(
            "tool call quota: the run made all of its {CAP} capability calls"
        )),
    );
    let rows = log.0.lock().unwrap().clone();
    let summary: Vec<(&str, &str, &str, u64)> = rows
        .iter()
        .map(|c| {
            (
                c.graph.as_str(),
                c.target.as_str(),
                c.decision.as_str(),
                c.count,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("hostile_refusal_loop", "no_such_graph", "denied", CAP),
            ("hostile_refusal_loop", "no_such_graph", "quota", 5_000),
        ]
    );
    assert!(
        rows[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("no tools grant"),
        "the first refusal's reason is kept: {rows:?}"
    );
    // The next run is served, with a fresh account of its own.
    let log = Arc::new(Recorder::default());
    let opts = RunOptions {
        capabilities: Capabilities::default().with_log(Some(log.clone())),
        ..RunOptions::default()
    };
    let out = completed(runtime().run(&graph, json!({"times": 3}), opts).await);
    assert_eq!(out["last_error"]["kind"], json!("denied"), "{out}");
    assert_eq!(log.0.lock().unwrap()[0].count, 3);
}
