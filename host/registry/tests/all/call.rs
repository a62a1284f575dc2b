//! One tool call: argument validation, the graph's validate export, the
//! proof of a check that spares a run both, the fallback `input`,
//! pass-through of the call context and cancellation, and the result
//! rendering.

use std::time::{Duration, Instant};

use crate::common::{self, folder};
use sandgraph_core::Start;
use sandgraph_registry::{CallOptions, Registry};
use sandgraph_runtime::{CancellationToken, ErrorCode};
use sandgraph_tests::{
    ECHO, GRAPH_CONTEXT, GRAPH_INTERRUPT, GREET, HOSTILE_COOPERATIVE, HOSTILE_NAN_OUTPUT,
    HOSTILE_PANIC,
};
use serde_json::{Value, json};

async fn registry() -> (Registry, tempfile::TempDir) {
    let dir = folder(&[
        ("echo_graph.wasm", ECHO),
        ("greet_graph.wasm", GREET),
        ("graph_context.wasm", GRAPH_CONTEXT),
        ("graph_interrupt.wasm", GRAPH_INTERRUPT),
        ("hostile_cooperative.wasm", HOSTILE_COOPERATIVE),
        ("hostile_panic.wasm", HOSTILE_PANIC),
        ("hostile_nan_output.wasm", HOSTILE_NAN_OUTPUT),
    ]);
    // The components compile once for the binary: these tests are about
    // calls, not compiling.
    let (registry, report) = common::open_cached(dir.path()).await;
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    (registry, dir)
}

#[tokio::test]
async fn every_argument_violation_is_listed_with_paths_rooted_at_arguments() {
    let (registry, _dir) = registry().await;
    let greet = registry.get("greet_graph").unwrap();
    let err = greet
        .run(
            Start::Input(json!({"style": "loud", "times": 1.5, "tags": [1]})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgs);
    assert_eq!(err.code.as_str(), "INVALID_ARGS");
    assert_eq!(
        err.message,
        "invalid arguments: missing required property \"arguments.name\"; \
         \"arguments.style\" must be one of [\"formal\",\"casual\"]; \
         \"arguments.times\" must be an integer; \
         \"arguments.tags[0]\" must be a string"
    );
    // Not an object at all.
    let err = greet
        .run(
            Start::Input(json!([1, 2])),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgs);
    assert_eq!(
        err.message,
        "invalid arguments: \"arguments\" must be an object"
    );
}

#[tokio::test]
async fn a_call_returns_the_final_state_and_its_pretty_json() {
    let (registry, _dir) = registry().await;
    let greet = registry.get("greet_graph").unwrap();
    let out = greet
        .run(
            Start::Input(json!({"name": "Ada", "style": "formal", "times": 2, "tags": ["x"]})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert!(!out.interrupted);
    assert_eq!(
        out.value,
        json!({
            "name": "Ada", "style": "formal", "times": 2, "tags": ["x"],
            "greeting": "Good day, Ada. Good day, Ada."
        })
    );
    assert_eq!(
        out.text,
        "{\n  \"name\": \"Ada\",\n  \"style\": \"formal\",\n  \"times\": 2,\n  \"tags\": [\n    \"x\"\n  ],\n  \
         \"greeting\": \"Good day, Ada. Good day, Ada.\"\n}"
    );
    // Errors of the graph itself come back unchanged.
    let err = registry
        .get("hostile_panic")
        .unwrap()
        .run(
            Start::Input(json!({"input": {}})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Trap);
    // A state that is not lossless JSON is an explicit error, never a
    // result.
    let nan = registry.get("hostile_nan_output").unwrap();
    let err = nan
        .run(
            Start::Input(json!({"input": {"mode": "neg_zero"}})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidOutput);
    assert!(err.message.contains("at $.x"), "{}", err.message);
    let out = nan
        .run(
            Start::Input(json!({"input": {"mode": "fine"}})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(out.value["x"], json!(1));
}

#[tokio::test]
async fn the_graph_validate_export_rejects_with_its_reason() {
    let (registry, _dir) = registry().await;
    let greet = registry.get("greet_graph").unwrap();
    let err = greet
        .run(
            Start::Input(json!({"name": "Ada", "style": "formal", "times": 11})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Validation);
    assert_eq!(err.code.as_str(), "validation");
    assert_eq!(err.message, "times must be at most 10");
    // The request text reaches validate (with the tool name).
    let ctx = registry.get("graph_context").unwrap();
    let opts = CallOptions {
        request: Some("this one is not mine".into()),
        ..CallOptions::default()
    };
    let err = ctx
        .run(Start::Input(json!({"input": {}})), opts, &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Validation);
    assert_eq!(
        err.message,
        "\"graph_context\" does not handle: this one is not mine"
    );
}

#[tokio::test]
async fn checked_arguments_run_without_being_checked_again() {
    let (registry, _dir) = registry().await;
    let ctx = registry.get("graph_context").unwrap();
    let args = json!({"input": {"topic": "t"}});
    let checked = ctx.check(&args, &CallOptions::default()).await.unwrap();
    assert_eq!(checked.args(), &args);
    // The graph input is derived once, at the check.
    assert_eq!(checked.input(), &json!({"topic": "t"}));
    // `validate` would refuse this request: with the proof it does not
    // run again, and the nodes still see the request.
    let opts = CallOptions {
        request: Some("this one is not mine".into()),
        checked: Some(checked),
        ..CallOptions::default()
    };
    let out = ctx
        .run(Start::Input(args.clone()), opts, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(out.value["topic"], "t");
    assert_eq!(out.value["context"]["request"], "this one is not mine");
    // A refusal at the check gives no proof.
    let refused = CallOptions {
        request: Some("this one is not mine".into()),
        ..CallOptions::default()
    };
    let err = ctx.check(&args, &refused).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Validation);
    let err = ctx.check(&json!({}), &refused).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgs);
}

#[tokio::test]
async fn a_proof_counts_only_for_its_own_arguments_graph_and_start() {
    let (registry, _dir) = registry().await;
    let ctx = registry.get("graph_context").unwrap();
    let echo = registry.get("echo_graph").unwrap();
    let args = json!({"input": {"topic": "t"}});
    let checked = ctx.check(&args, &CallOptions::default()).await.unwrap();
    let with = || CallOptions {
        checked: Some(checked.clone()),
        ..CallOptions::default()
    };
    // Other arguments: the proof is not theirs.
    let other = json!({"input": {"topic": "u"}});
    let err = ctx
        .run(Start::Input(other), with(), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidInput);
    assert_eq!(
        err.message,
        "the checked arguments are not these arguments of graph \"graph_context\": check them \
         with this tool"
    );
    // Another graph: its `validate` never saw them.
    let err = echo
        .run(Start::Input(args.clone()), with(), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidInput);
    assert!(
        err.message.contains("graph \"echo_graph\""),
        "{}",
        err.message
    );
    // A resume does not start from arguments.
    let err = ctx
        .run(Start::Resume(json!(true)), with(), &mut |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidInput);
    assert_eq!(
        err.message,
        "checked arguments start a call with its input, not a resume or a continue"
    );
    // The proof's own arguments run.
    let out = ctx
        .run(Start::Input(args), with(), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(out.value["topic"], "t");
}

#[tokio::test]
async fn without_parameters_the_tool_takes_one_input_describing_the_state_keys() {
    let (registry, _dir) = registry().await;
    let echo = registry.get("echo_graph").unwrap();
    assert!(echo.parameters().is_fallback());
    assert_eq!(
        echo.input_schema(),
        &json!({
            "type": "object",
            "properties": {
                "input": {"description": "Expected state keys: topic, log (accumulated)."}
            },
            "required": ["input"]
        })
    );
    // The graph input is `args.input`.
    let out = echo
        .run(
            Start::Input(json!({"input": {"topic": "hi"}})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(out.value, json!({"topic": "hi", "log": ["seen:hi"]}));
    // The state itself is not the argument object.
    let err = echo
        .run(
            Start::Input(json!({"topic": "hi"})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidArgs);
    assert_eq!(
        err.message,
        "invalid arguments: missing required property \"arguments.input\""
    );
}

#[tokio::test]
async fn descriptions_are_the_graphs_own_or_synthesized_from_its_structure() {
    let (registry, _dir) = registry().await;
    assert_eq!(
        registry.get("greet_graph").unwrap().description(),
        "Greet someone, formally or casually."
    );
    let ctx = registry.get("graph_context").unwrap();
    assert_eq!(
        ctx.description(),
        "Graph \"graph_context\" with node echo; state keys: topic, context."
    );
    let def = ctx.definition();
    assert_eq!(
        def,
        json!({
            "name": "graph_context",
            "description": "Graph \"graph_context\" with node echo; state keys: topic, context.",
            "as_tool": false,
            "as_graph_tool": true,
            "timeout_ms": 5000,
            "input_schema": {
                "type": "object",
                "properties": {"input": {"description": "Expected state keys: topic, context."}},
                "required": ["input"]
            },
            "output_schema": ctx.output_schema(),
            "source": ctx.source().label(ctx.name()),
        })
    );
    let out = &def["output_schema"];
    assert_eq!(out["type"], "object");
    assert!(
        out["description"].as_str().unwrap().starts_with(
            "The final state of the graph: topic, context. A run that stops at an interrupt"
        ),
        "{out}"
    );
}

#[tokio::test]
async fn thread_id_configurable_and_request_pass_through_to_the_run() {
    let (registry, _dir) = registry().await;
    let ctx = registry.get("graph_context").unwrap();
    let mut configurable = serde_json::Map::new();
    configurable.insert("user".into(), json!("ada"));
    configurable.insert("depth".into(), json!(2));
    // Only `thread_id` sets the thread.
    configurable.insert("thread_id".into(), json!("spoofed"));
    let opts = CallOptions {
        thread_id: Some("thread-7".into()),
        configurable,
        request: Some("echo my context".into()),
        ..CallOptions::default()
    };
    let out = ctx
        .run(
            Start::Input(json!({"input": {"topic": "t"}})),
            opts,
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(
        out.value,
        json!({
            "topic": "t",
            "context": {
                "tool": "graph_context",
                "request": "echo my context",
                "thread_id": "thread-7",
                "configurable": {"user": "ada", "depth": 2}
            }
        })
    );
    // Nothing set: nothing passed.
    let out = ctx
        .run(
            Start::Input(json!({"input": {}})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(
        out.value["context"],
        json!({"tool": "graph_context", "request": null, "thread_id": null, "configurable": {}})
    );
}

#[tokio::test]
async fn the_callers_cancellation_is_forwarded() {
    let (registry, _dir) = registry().await;
    let coop = registry.get("hostile_cooperative").unwrap();
    // Loaded first: a tool mounted from the cached spec loads its component
    // at its first call, and a cancellation that arrives before the run
    // starts ends it before the guest can see it.
    coop.graph().await.unwrap();
    let cancel = CancellationToken::new();
    let opts = CallOptions {
        cancel: cancel.clone(),
        ..CallOptions::default()
    };
    let start = Instant::now();
    let call = tokio::spawn(async move {
        coop.run(Start::Input(json!({"input": {}})), opts, &mut |_| {})
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    cancel.cancel();
    // The graph watches the signal and settles; without the forwarded
    // cancellation it would spin until its fuel runs out (an error).
    let out = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("the cancelled call settles")
        .unwrap()
        .unwrap();
    assert_eq!(out.value["stopped_early"], json!(true));
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn an_interrupted_run_reports_its_interrupts() {
    let (registry, _dir) = registry().await;
    let tool = registry.get("graph_interrupt").unwrap();
    let opts = CallOptions {
        thread_id: Some("t-1".into()),
        ..CallOptions::default()
    };
    let out = tool
        .run(Start::Input(json!({"input": {}})), opts, &mut |_| {})
        .await
        .unwrap();
    assert!(out.interrupted);
    assert_eq!(out.value["status"], json!("interrupted"));
    assert_eq!(out.value["thread_id"], json!("t-1"));
    let interrupts = out.value["interrupts"].as_array().unwrap();
    assert_eq!(interrupts.len(), 1);
    assert_eq!(interrupts[0]["node"], json!("ask"));
    assert_eq!(interrupts[0]["value"], json!({"question": "approve?"}));
    assert_eq!(serde_json::from_str::<Value>(&out.text).unwrap(), out.value);
    // The tool's output schema admits the interrupt report, by its own
    // branch, which a final state does not match.
    let schema = tool.output_schema();
    assert!(
        jsonschema::validator_for(&schema)
            .unwrap()
            .is_valid(&out.value)
    );
    let branch = jsonschema::validator_for(&schema["anyOf"][1]).unwrap();
    assert!(branch.is_valid(&out.value), "{schema}");
    assert!(!branch.is_valid(&json!({"approved": true, "log": []})));
}

#[tokio::test]
async fn with_a_thread_store_calls_continue_the_thread_state() {
    let (registry, _dir) = registry().await;
    let echo = registry.get("echo_graph").unwrap();
    let db = tempfile::tempdir().unwrap();
    let store = sandgraph_store::Store::open(&db.path().join("t.redb")).unwrap();
    let opts = CallOptions {
        thread_id: Some("op-1".into()),
        threads: Some(store.threads()),
        ..CallOptions::default()
    };
    let first = echo
        .run(
            Start::Input(json!({"input": {"topic": "a"}})),
            opts.clone(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(first.value, json!({"topic": "a", "log": ["seen:a"]}));
    let second = echo
        .run(
            Start::Input(json!({"input": {"topic": "b"}})),
            opts.clone(),
            &mut |_| {},
        )
        .await
        .unwrap();
    // The append reducer kept the first call's log.
    assert_eq!(
        second.value,
        json!({"topic": "b", "log": ["seen:a", "seen:b"]})
    );
    let info = store.threads().info("op-1").unwrap().unwrap();
    assert_eq!(info.graph, "echo_graph");
    // Without the store the thread id only reaches the nodes: no state.
    let plain = echo
        .run(
            Start::Input(json!({"input": {"topic": "c"}})),
            CallOptions {
                thread_id: Some("op-1".into()),
                ..CallOptions::default()
            },
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(plain.value, json!({"topic": "c", "log": ["seen:c"]}));
    // A thread belongs to one graph.
    let greet = registry.get("greet_graph").unwrap();
    let err = greet
        .run(
            Start::Input(json!({"name": "A", "style": "casual"})),
            opts,
            &mut |_| {},
        )
        .await
        .unwrap_err();
    assert!(
        err.message.contains("belongs to graph \"echo_graph\""),
        "{err}"
    );
}

/// A provider answering every request with the model it was asked for.
struct EchoModel;

impl sandgraph_llm::Provider for EchoModel {
    fn chat<'a>(
        &'a self,
        request: &'a sandgraph_llm::ChatRequest,
    ) -> futures::future::BoxFuture<'a, Result<sandgraph_llm::ChatResponse, sandgraph_llm::LlmError>>
    {
        Box::pin(async move {
            Ok(sandgraph_llm::ChatResponse {
                content: Some(format!("model {}", request.model)),
                finish_reason: Some("stop".into()),
                ..Default::default()
            })
        })
    }
}

#[tokio::test]
async fn grants_in_the_config_reach_the_graph_tools_runs() {
    let dir = folder(&[
        ("graph_llm.wasm", sandgraph_tests::GRAPH_LLM),
        ("echo_graph.wasm", ECHO),
    ]);
    let toml = "[llm.models]\nfast = \"deepseek-chat\"\n\
                [graphs.graph_llm.grants]\nllm = { models = [\"fast\"], max_calls = 1 }\n";
    let path = dir.path().join("sandgraph.toml");
    std::fs::write(&path, toml).unwrap();
    let config = sandgraph_registry::OperatorConfig::load(&path).unwrap();
    let backend = sandgraph_factors::llm::LlmBackend {
        provider: std::sync::Arc::new(EchoModel),
        models: config.llm_models.clone(),
        default_model: "default-model".into(),
    };
    let open = |llm| {
        let options = sandgraph_registry::RegistryOptions {
            config: config.clone(),
            llm,
            ..common::cached_options(&[dir.path()])
        };
        Registry::open(common::runtime(), options)
    };
    let (registry, _) = open(Some(backend)).await.unwrap();
    let llm = registry.get("graph_llm").unwrap();
    let grant = llm
        .capabilities()
        .get::<sandgraph_factors::llm::LlmAccess>()
        .unwrap()
        .grant
        .clone();
    assert_eq!(
        (grant.models, grant.max_calls),
        (vec!["fast".into()], Some(1))
    );
    assert!(
        registry
            .get("echo_graph")
            .unwrap()
            .capabilities()
            .get::<sandgraph_factors::llm::LlmAccess>()
            .is_none()
    );
    // The grant and the alias reach the run; max_calls counts per run.
    let out = llm
        .run(
            Start::Input(json!({"input": {"calls": 2}})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(
        out.value["answers"][0]["content"],
        json!("model deepseek-chat")
    );
    assert_eq!(out.value["answers"][1]["error"]["kind"], json!("quota"));
    // Granted, but the host has no model: denied, saying so.
    let (registry, _) = open(None).await.unwrap();
    let out = registry
        .get("graph_llm")
        .unwrap()
        .run(
            Start::Input(json!({"input": {}})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    let error = &out.value["answers"][0]["error"];
    assert_eq!(error["kind"], json!("denied"));
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("the host has no model configured"),
        "{error}"
    );
    // A grant key the host does not know is an error naming the file.
    std::fs::write(
        &path,
        "[graphs.graph_llm.grants]\nfilesystem = { allow = [\"/\"] }\n",
    )
    .unwrap();
    let e = sandgraph_registry::OperatorConfig::load(&path)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with(&format!("{}:2:1: ", path.display())), "{e}");
    assert!(e.contains("unknown field `filesystem`"), "{e}");
}

#[tokio::test]
async fn a_tools_grant_runs_another_graph_tool_and_every_call_is_journaled() {
    let dir = folder(&[
        ("graph_tools.wasm", sandgraph_tests::GRAPH_TOOLS),
        ("echo_graph.wasm", ECHO),
        ("greet_graph.wasm", sandgraph_tests::GREET),
    ]);
    let toml = "[graphs.graph_tools.grants]\ntools = { allow = [\"echo_graph\", \"greet_graph\"] }\n\
                http = { allow = [\"https://api.github.com\"] }\n";
    let path = dir.path().join("sandgraph.toml");
    std::fs::write(&path, toml).unwrap();
    let config = sandgraph_registry::OperatorConfig::load(&path).unwrap();
    let store = sandgraph_store::Store::open(&dir.path().join("data.redb")).unwrap();
    let options = sandgraph_registry::RegistryOptions {
        config,
        capability_log: Some(std::sync::Arc::new(
            sandgraph_registry::StoreCapabilityLog::new(
                sandgraph_factors::journal::CapabilityJournal::open(&store),
            ),
        )),
        ..common::cached_options(&[dir.path()])
    };
    let (registry, _) = Registry::open(common::runtime(), options).await.unwrap();
    let tools = registry.get("graph_tools").unwrap();
    let caps = tools.capabilities();
    assert_eq!(caps.names().collect::<Vec<_>>(), ["tools", "http"]);
    let call = |args: serde_json::Value| {
        let tools = tools.clone();
        async move {
            tools
                .run(
                    Start::Input(json!({"input": args})),
                    CallOptions {
                        thread_id: Some("th-1".into()),
                        ..CallOptions::default()
                    },
                    &mut |_| {},
                )
                .await
                .unwrap()
                .value
        }
    };
    // The registry runs the granted tool; list shows the grant.
    let state = call(json!({"tool": "echo_graph", "args": {"input": {"topic": "x"}}})).await;
    assert_eq!(state["result"]["log"], json!(["seen:x"]), "{state}");
    assert_eq!(state["listed"], json!(["echo_graph", "greet_graph"]));
    // Arguments are validated as `sandgraph call` validates them.
    let state = call(json!({"tool": "greet_graph", "args": {"name": 3}})).await;
    assert_eq!(state["error"]["kind"], "invalid_args", "{state}");
    assert!(
        state["error"]["message"].as_str().unwrap().contains("name"),
        "{state}"
    );
    // Every call is in the store's capability journal, with the digest of
    // the caller's component and the thread.
    let journal = sandgraph_factors::journal::CapabilityJournal::open(&store);
    let mut rows = Vec::new();
    for _ in 0..200 {
        rows = journal.entries(None, None).unwrap();
        if rows.len() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let summary: Vec<(&str, &str, &str)> = rows
        .iter()
        .map(|c| (c.graph.as_str(), c.target.as_str(), c.decision.as_str()))
        .collect();
    assert_eq!(
        summary,
        [
            ("graph_tools", "echo_graph", "allowed"),
            ("graph_tools", "greet_graph", "invalid")
        ]
    );
    assert_eq!(rows[0].thread_id.as_deref(), Some("th-1"));
    assert_eq!(rows[0].graph_digest.as_ref().map(String::len), Some(64));
    assert!(rows[0].at_ms > 0);
}

#[test]
fn a_bad_http_grant_is_an_error_naming_the_entry() {
    let e = sandgraph_registry::OperatorConfig::parse(
        "[graphs.g.grants]\nhttp = { allow = [\"api.github.com\"] }\n",
        std::path::Path::new("sandgraph.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("[graphs.g.grants]: http:"), "{e}");
    assert!(e.contains("api.github.com"), "{e}");
}

/// A provider that counts the requests it answers.
#[derive(Default)]
struct CountingModel(std::sync::atomic::AtomicUsize);

impl sandgraph_llm::Provider for CountingModel {
    fn chat<'a>(
        &'a self,
        _: &'a sandgraph_llm::ChatRequest,
    ) -> futures::future::BoxFuture<'a, Result<sandgraph_llm::ChatResponse, sandgraph_llm::LlmError>>
    {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            Ok(sandgraph_llm::ChatResponse {
                content: Some("ok".into()),
                finish_reason: Some("stop".into()),
                ..Default::default()
            })
        })
    }
}

/// The rows of `journal` once it has at least `n`.
async fn journal_rows(
    journal: &sandgraph_factors::journal::CapabilityJournal,
    n: usize,
) -> Vec<sandgraph_core::audit::CapabilityCall> {
    let mut rows = Vec::new();
    for _ in 0..500 {
        rows = journal.entries(None, None).unwrap();
        if rows.len() >= n {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    rows
}

#[tokio::test]
async fn sub_runs_spend_the_outermost_runs_quotas_however_often_they_are_called() {
    let dir = folder(&[
        (
            "hostile_refusal_loop.wasm",
            sandgraph_tests::HOSTILE_REFUSAL_LOOP,
        ),
        ("graph_llm.wasm", sandgraph_tests::GRAPH_LLM),
    ]);
    let toml = "[llm.models]\nfast = \"deepseek-chat\"\n\
                [graphs.hostile_refusal_loop.grants]\ntools = { allow = [\"graph_llm\"] }\n\
                [graphs.graph_llm.grants]\nllm = { models = [\"fast\"], max_calls = 1 }\n";
    let path = dir.path().join("sandgraph.toml");
    std::fs::write(&path, toml).unwrap();
    let config = sandgraph_registry::OperatorConfig::load(&path).unwrap();
    let model = std::sync::Arc::new(CountingModel::default());
    let store = sandgraph_store::Store::open(&dir.path().join("data.redb")).unwrap();
    let options = sandgraph_registry::RegistryOptions {
        llm: Some(sandgraph_factors::llm::LlmBackend {
            provider: model.clone(),
            models: config.llm_models.clone(),
            default_model: "default-model".into(),
        }),
        config,
        capability_log: Some(std::sync::Arc::new(
            sandgraph_registry::StoreCapabilityLog::new(
                sandgraph_factors::journal::CapabilityJournal::open(&store),
            ),
        )),
        ..common::cached_options(&[dir.path()])
    };
    let (registry, _) = Registry::open(common::runtime(), options).await.unwrap();
    let input = json!({"input": {
        "tool": "graph_llm",
        "times": 20,
        "args": {"input": {"calls": 1}},
    }});
    let out = registry
        .get("hostile_refusal_loop")
        .unwrap()
        .run(
            Start::Input(input.clone()),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(out.value["ok"], json!(20), "{}", out.value);
    // graph_llm may make one model call per outermost run, not one per
    // sub-run.
    assert_eq!(model.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    // 20 tool calls, graph_llm's one allowed model call, and its 19
    // refusals in one row; graph_llm's rows name the chain.
    let rows = journal_rows(
        &sandgraph_factors::journal::CapabilityJournal::open(&store),
        22,
    )
    .await;
    let summary: Vec<(&str, &str, &str, u64)> = rows
        .iter()
        .map(|c| {
            (
                c.graph.as_str(),
                c.capability.as_str(),
                c.decision.as_str(),
                c.count,
            )
        })
        .filter(|r| r.0 == "graph_llm")
        .collect();
    assert_eq!(
        summary,
        [
            ("graph_llm", "llm", "allowed", 1),
            ("graph_llm", "llm", "quota", 19)
        ]
    );
    let tool_calls = rows
        .iter()
        .filter(|c| (c.graph.as_str(), c.decision.as_str()) == ("hostile_refusal_loop", "allowed"))
        .count();
    assert_eq!(tool_calls, 20);
    assert_eq!(rows.len(), 22, "{rows:#?}");
    for row in rows.iter().filter(|c| c.graph == "graph_llm") {
        assert_eq!(row.chain, ["hostile_refusal_loop", "graph_llm"], "{row:?}");
    }
    // The next outermost run has its own account.
    registry
        .get("hostile_refusal_loop")
        .unwrap()
        .run(Start::Input(input), CallOptions::default(), &mut |_| {})
        .await
        .unwrap();
    assert_eq!(model.0.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// graph_context's node reports, as guest log lines.
#[derive(Default)]
struct NodeReports(std::sync::Mutex<Vec<String>>);

impl sandgraph_runtime::LogSink for NodeReports {
    fn log(&self, _graph: &str, _level: sandgraph_runtime::GuestLogLevel, message: &str) {
        if message.starts_with("validate calls in this instance") {
            self.0.lock().unwrap().push(message.to_owned());
        }
    }
}

#[tokio::test]
async fn a_call_runs_validate_in_the_instance_its_node_runs_in() {
    let reports = std::sync::Arc::new(NodeReports::default());
    let runtime = sandgraph_factors::builder(sandgraph_runtime::RuntimeConfig::default())
        .sink(reports.clone())
        .build()
        .unwrap();
    let dir = folder(&[("graph_context.wasm", GRAPH_CONTEXT)]);
    let (registry, _) = Registry::open(runtime, common::cached_options(&[dir.path()]))
        .await
        .unwrap();
    let tool = registry.get("graph_context").unwrap();
    for _ in 0..2 {
        tool.run(
            Start::Input(json!({"input": {}})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    }
    // One instance per call, a fresh one for each call.
    assert_eq!(
        *reports.0.lock().unwrap(),
        ["validate calls in this instance: 1"; 2]
    );
    // The router's shape (check, then run with the proof) validates in an
    // instance of its own.
    let args = json!({"input": {}});
    let checked = tool.check(&args, &CallOptions::default()).await.unwrap();
    let opts = CallOptions {
        checked: Some(checked),
        ..CallOptions::default()
    };
    tool.run(Start::Input(args), opts, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(
        reports.0.lock().unwrap().last().map(String::as_str),
        Some("validate calls in this instance: 0")
    );
}
