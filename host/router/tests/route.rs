//! The routing loop against a real OpenAI-compatible server on loopback,
//! scripted per test, and real graph components; and the routing
//! journal's table (`journal_table`).

#[path = "route/journal_table.rs"]
mod journal_table;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandgraph_llm::{ClientConfig, OpenAiClient, Provider};
use sandgraph_registry::{OperatorConfig, Registry, RegistryOptions};
use sandgraph_router::{
    FALLBACK_TOOL, Fallback, FallbackHandler, GraphRoutingAgent, Journal, PostDecision,
    PreDecision, RouteError, RouterOptions, ToolFilter, feedback,
};
use sandgraph_test_llm::{Recorded, Reply, ScriptedLlm};
use sandgraph_tests::{ECHO, GRAPH_CONTEXT, GRAPH_ERRORS, GRAPH_FALLBACK, GREET};
use serde_json::{Value, json};

/// A folder with echo_graph, greet_graph, graph_context and graph_errors.
async fn registry() -> (Registry, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    for (name, path) in [
        ("echo_graph.wasm", ECHO),
        ("greet_graph.wasm", GREET),
        ("graph_context.wasm", GRAPH_CONTEXT),
        ("graph_errors.wasm", GRAPH_ERRORS),
        ("graph_fallback.wasm", GRAPH_FALLBACK),
    ] {
        std::fs::copy(path, dir.path().join(name)).unwrap();
    }
    let (registry, report) = Registry::open(
        sandgraph_tests::runtime().clone(),
        RegistryOptions {
            dirs: vec![dir.path().to_path_buf()],
            cache: Some(sandgraph_tests::compile_cache()),
            ..RegistryOptions::default()
        },
    )
    .await
    .unwrap();
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    (registry, dir)
}

fn provider(server: &ScriptedLlm) -> Arc<dyn Provider> {
    Arc::new(
        OpenAiClient::new(ClientConfig {
            base_url: server.base_url(),
            model: "test-model".into(),
            api_key_env: "SANDGRAPH_ROUTE_TEST_KEY_UNSET".into(),
            backoff: Duration::from_millis(10),
            ..ClientConfig::default()
        })
        .unwrap(),
    )
}

async fn agent(
    server: &ScriptedLlm,
    options: RouterOptions,
) -> (GraphRoutingAgent, tempfile::TempDir) {
    let (registry, dir) = registry().await;
    (
        GraphRoutingAgent::new(registry, provider(server), options).unwrap(),
        dir,
    )
}

fn opts() -> RouterOptions {
    RouterOptions::new("test-model")
}

/// The tool message the model got for its last rejected call.
fn fed_back(request: &Recorded) -> String {
    let last = request.messages().last().expect("messages").clone();
    assert_eq!(last["role"], "tool", "{last}");
    last["content"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_correct_pick_runs_the_graph_once() {
    let server = ScriptedLlm::start([Reply::tool_call(
        "echo_graph",
        r#"{"input":{"topic":"hello"}}"#,
    )])
    .await;
    let (agent, _dir) = agent(&server, opts()).await;
    let out = agent.route("echo hello for me").await.unwrap();
    assert_eq!(out.tool, "echo_graph");
    assert_eq!(out.args, json!({"input": {"topic": "hello"}}));
    assert_eq!(out.result, json!({"topic": "hello", "log": ["seen:hello"]}));
    assert_eq!(out.attempts, 1);
    assert!(!out.fallback);
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let body = &requests[0].body;
    assert_eq!(body["model"], "test-model");
    assert_eq!(
        requests[0].tool_names(),
        vec![
            "echo_graph",
            "graph_context",
            "graph_errors",
            "graph_fallback",
            "greet_graph"
        ]
    );
    let messages = requests[0].messages();
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(
        messages[1],
        json!({"role": "user", "content": "echo hello for me"})
    );
    // The candidate's JSON Schema is what the model sees.
    let greet = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "greet_graph")
        .unwrap();
    assert_eq!(
        greet["function"]["parameters"]["required"],
        json!(["name", "style"])
    );
}

#[tokio::test]
async fn an_unknown_tool_is_fed_back_and_retried() {
    let server = ScriptedLlm::start([
        Reply::tool_call("search_graph", "{}"),
        Reply::tool_call("greet_graph", r#"{"name":"Ada","style":"casual"}"#),
    ])
    .await;
    let (agent, _dir) = agent(&server, opts()).await;
    let out = agent.route("greet Ada").await.unwrap();
    assert_eq!(out.tool, "greet_graph");
    assert_eq!(out.result["greeting"], "Hey Ada!");
    assert_eq!(out.attempts, 2);
    let second = &server.requests()[1];
    assert_eq!(
        fed_back(second),
        "rejected: unknown tool \"search_graph\"; choose one of: echo_graph, graph_context, graph_errors, graph_fallback, greet_graph\nChoose a tool again and call it with corrected arguments."
    );
    // The assistant's rejected call is echoed before the tool message, with
    // the same id.
    let messages = second.messages();
    let assistant = &messages[messages.len() - 2];
    assert_eq!(assistant["role"], "assistant");
    let call_id = assistant["tool_calls"][0]["id"].as_str().unwrap();
    assert_eq!(
        assistant["tool_calls"][0]["function"]["name"],
        "search_graph"
    );
    assert_eq!(messages[messages.len() - 1]["tool_call_id"], call_id);
}

#[tokio::test]
async fn broken_json_arguments_are_retried() {
    let server = ScriptedLlm::start([
        Reply::tool_call("greet_graph", r#"{"name": "Ada", "style": "#),
        Reply::tool_call("greet_graph", r#"{"name":"Ada","style":"formal"}"#),
    ])
    .await;
    let (agent, _dir) = agent(&server, opts()).await;
    let out = agent.route("greet Ada").await.unwrap();
    assert_eq!(out.attempts, 2);
    let reason = fed_back(&server.requests()[1]);
    assert!(
        reason.starts_with("rejected: the arguments of \"greet_graph\" are not valid JSON: "),
        "{reason}"
    );
}

#[tokio::test]
async fn a_schema_violation_is_retried_with_the_registry_message() {
    let server = ScriptedLlm::start([
        Reply::tool_call("greet_graph", r#"{"name":"Ada","style":"loud"}"#),
        Reply::tool_call("greet_graph", r#"{"name":"Ada","style":"formal"}"#),
    ])
    .await;
    let (agent, _dir) = agent(&server, opts()).await;
    let out = agent.route("greet Ada").await.unwrap();
    assert_eq!(out.result["greeting"], "Good day, Ada.");
    assert_eq!(
        fed_back(&server.requests()[1]),
        "rejected: invalid arguments: \"arguments.style\" must be one of [\"formal\",\"casual\"]\nChoose a tool again and call it with corrected arguments."
    );
}

#[tokio::test]
async fn a_validate_rejection_sees_the_request_text_and_is_retried() {
    let server = ScriptedLlm::start([
        Reply::tool_call("graph_context", r#"{"input":{"topic":"x"}}"#),
        Reply::tool_call("echo_graph", r#"{"input":{"topic":"x"}}"#),
    ])
    .await;
    let (agent, _dir) = agent(&server, opts()).await;
    let out = agent.route("this one is not mine").await.unwrap();
    assert_eq!(out.tool, "echo_graph");
    assert_eq!(
        fed_back(&server.requests()[1]),
        "rejected: graph \"graph_context\" refused the request: \"graph_context\" does not handle: this one is not mine\nChoose a tool again and call it with corrected arguments."
    );
}

#[tokio::test]
async fn the_request_text_reaches_the_chosen_graph() {
    let server = ScriptedLlm::start([Reply::tool_call(
        "graph_context",
        r#"{"input":{"topic":"t"}}"#,
    )])
    .await;
    let (agent, _dir) = agent(&server, opts()).await;
    let out = agent.route("show me the context").await.unwrap();
    assert_eq!(out.result["context"]["request"], "show me the context");
    assert_eq!(out.result["context"]["tool"], "graph_context");
}

#[tokio::test]
async fn a_pre_execute_deny_is_retried_and_the_graph_does_not_run() {
    let server = ScriptedLlm::start([
        Reply::tool_call("graph_errors", r#"{"input":{"mode":"ok"}}"#),
        Reply::tool_call("echo_graph", r#"{"input":{"topic":"x"}}"#),
    ])
    .await;
    let (mut agent, _dir) = agent(&server, opts()).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let ran = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    agent.hooks_mut().on_pre_execute(move |exec, next| {
        s.lock()
            .unwrap()
            .push((exec.tool.clone(), exec.request.clone(), exec.attempt));
        async move {
            if exec.tool == "graph_errors" {
                Ok(PreDecision::Deny {
                    reason: format!("\"{}\" is disabled by policy", exec.tool),
                })
            } else {
                next.run().await
            }
        }
    });
    let r = ran.clone();
    agent
        .hooks_mut()
        .on_post_execute(move |exec, _outcome, next| {
            r.lock().unwrap().push(exec.tool.clone());
            next.run()
        });
    let out = agent.route("do it").await.unwrap();
    assert_eq!(out.tool, "echo_graph");
    assert_eq!(
        fed_back(&server.requests()[1]),
        feedback("\"graph_errors\" is disabled by policy")
    );
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            ("graph_errors".to_owned(), "do it".to_owned(), 1),
            ("echo_graph".to_owned(), "do it".to_owned(), 2)
        ]
    );
    // The denied attempt never ran, so its post-execute never fired.
    assert_eq!(*ran.lock().unwrap(), vec!["echo_graph".to_owned()]);
}

#[tokio::test]
async fn the_first_decision_wins_and_later_listeners_do_not_run() {
    let server =
        ScriptedLlm::start([Reply::tool_call("echo_graph", r#"{"input":{"topic":"x"}}"#)]).await;
    let (mut agent, _dir) = agent(&server, opts()).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let o = order.clone();
    agent.hooks_mut().on_pre_execute(move |_, next| {
        o.lock().unwrap().push("first");
        next.run()
    });
    let o = order.clone();
    agent.hooks_mut().on_pre_execute(move |_, _next| {
        o.lock().unwrap().push("second decides");
        async { Ok(PreDecision::Allow) }
    });
    let o = order.clone();
    agent.hooks_mut().on_pre_execute(move |_, _next| {
        o.lock().unwrap().push("third");
        async {
            Ok(PreDecision::Deny {
                reason: "never".into(),
            })
        }
    });
    let out = agent.route("x").await.unwrap();
    assert_eq!(out.tool, "echo_graph");
    assert_eq!(*order.lock().unwrap(), vec!["first", "second decides"]);
}

#[tokio::test]
async fn a_post_execute_block_turns_a_graph_error_into_a_retry() {
    let server = ScriptedLlm::start([
        Reply::tool_call("graph_errors", r#"{"input":{"mode":"fail"}}"#),
        Reply::tool_call("graph_errors", r#"{"input":{"mode":"ok"}}"#),
    ])
    .await;
    let (mut agent, _dir) = agent(&server, opts()).await;
    let executions = Arc::new(Mutex::new(Vec::new()));
    let e = executions.clone();
    agent.hooks_mut().on_pre_execute(move |exec, next| {
        e.lock().unwrap().push(("pre", Arc::as_ptr(&exec) as usize));
        next.run()
    });
    let e = executions.clone();
    agent
        .hooks_mut()
        .on_post_execute(move |exec, outcome, next| {
            e.lock()
                .unwrap()
                .push(("post", Arc::as_ptr(&exec) as usize));
            async move {
                match outcome.as_ref() {
                    Err(err) => Ok(PostDecision::Block {
                        reason: format!(
                            "the graph failed ({}); try another mode",
                            err.code.as_str()
                        ),
                    }),
                    Ok(_) => next.run().await,
                }
            }
        });
    let out = agent.route("run the errors graph").await.unwrap();
    assert_eq!(out.attempts, 2);
    assert_eq!(out.result["done"], true);
    assert_eq!(
        fed_back(&server.requests()[1]),
        feedback("the graph failed (node_error); try another mode")
    );
    // The same execution reached both hooks of one attempt, and each
    // attempt had its own.
    let executions = executions.lock().unwrap();
    assert_eq!(executions.len(), 4);
    assert_eq!(executions[0].1, executions[1].1);
    assert_eq!(executions[2].1, executions[3].1);
}

#[tokio::test]
async fn an_unblocked_graph_error_propagates_unchanged_without_retry() {
    let server = ScriptedLlm::start([Reply::tool_call(
        "graph_errors",
        r#"{"input":{"mode":"fail"}}"#,
    )])
    .await;
    let (agent, _dir) = agent(&server, opts()).await;
    let err = agent.route("fail").await.unwrap_err();
    let RouteError::Graph(e) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(e.code.as_str(), "node_error");
    assert!(e.message.contains("deliberate failure"), "{e}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn accept_replaces_the_returned_value_but_listeners_saw_the_original() {
    let server = ScriptedLlm::start([Reply::tool_call(
        "echo_graph",
        r#"{"input":{"topic":"secret"}}"#,
    )])
    .await;
    let (mut agent, _dir) = agent(&server, opts()).await;
    agent.hooks_mut().on_post_execute(|_, _, next| async move {
        Ok(match next.run().await? {
            PostDecision::Pass => PostDecision::Accept {
                result: Some(json!({"redacted": true})),
            },
            other => other,
        })
    });
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    agent.hooks_mut().on_post_execute(move |_, outcome, next| {
        *s.lock().unwrap() = outcome.as_ref().as_ref().ok().map(|o| o.value.clone());
        next.run()
    });
    let out = agent.route("echo secret").await.unwrap();
    assert_eq!(out.result, json!({"redacted": true}));
    assert_eq!(
        seen.lock().unwrap().clone(),
        Some(json!({"topic": "secret", "log": ["seen:secret"]}))
    );
}

#[tokio::test]
async fn exhausted_retries_end_with_the_last_reason() {
    let server = ScriptedLlm::start([
        Reply::tool_call("nope_1", "{}"),
        Reply::tool_call("nope_2", "{}"),
        Reply::tool_call("greet_graph", r#"{"name":"Ada","style":"loud"}"#),
    ])
    .await;
    let mut o = opts();
    o.max_retries = 2;
    let (agent, _dir) = agent(&server, o).await;
    let err = agent.route("greet").await.unwrap_err();
    assert_eq!(err.code(), "routing_exhausted");
    assert_eq!(
        err.to_string(),
        "routing failed after 3 attempts: invalid arguments: \"arguments.style\" must be one of [\"formal\",\"casual\"]"
    );
    assert_eq!(server.requests().len(), 3);
    assert_eq!(server.remaining(), 0);
}

#[tokio::test]
async fn the_default_allows_three_re_asks() {
    let server =
        ScriptedLlm::start((0..4).map(|i| Reply::tool_call(&format!("nope_{i}"), "{}"))).await;
    let (agent, _dir) = agent(&server, opts()).await;
    let err = agent.route("x").await.unwrap_err();
    assert!(
        matches!(err, RouteError::Exhausted { attempts: 4, ref reason } if reason.starts_with("unknown tool \"nope_3\"")),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test]
async fn plain_text_runs_the_fallback_without_hooks() {
    let server = ScriptedLlm::start([Reply::text("I cannot help with that.")]).await;
    let (mut agent, _dir) = agent(&server, opts()).await;
    let fired = Arc::new(Mutex::new(0));
    let f = fired.clone();
    agent.hooks_mut().on_pre_execute(move |_, next| {
        *f.lock().unwrap() += 1;
        next.run()
    });
    let f = fired.clone();
    agent.hooks_mut().on_post_execute(move |_, _, next| {
        *f.lock().unwrap() += 1;
        next.run()
    });
    let out = agent.route("what is the weather").await.unwrap();
    assert_eq!(out.tool, FALLBACK_TOOL);
    assert_eq!(out.args, json!({}));
    assert_eq!(out.result, json!({}));
    assert!(out.fallback);
    assert_eq!(out.text.as_deref(), Some("I cannot help with that."));
    assert_eq!(*fired.lock().unwrap(), 0);
    assert_eq!(server.requests().len(), 1);
    let printed = serde_json::to_value(&out).unwrap();
    assert_eq!(printed["fallback"], true);
}

#[tokio::test]
async fn a_configured_fallback_graph_must_accept_empty_arguments() {
    let server = ScriptedLlm::start([Reply::text("no tool")]).await;
    let (registry, _dir) = registry().await;
    let mut o = opts();
    o.fallback = Fallback::Tool("greet_graph".into());
    let err = GraphRoutingAgent::new(registry.clone(), provider(&server), o).unwrap_err();
    assert_eq!(
        err.to_string(),
        "routing configuration: fallback \"greet_graph\" must accept {} as its arguments: invalid arguments: missing required property \"arguments.name\"; missing required property \"arguments.style\""
    );
    let mut o = opts();
    o.fallback = Fallback::Tool("graph_missing".into());
    let err = GraphRoutingAgent::new(registry.clone(), provider(&server), o).unwrap_err();
    assert_eq!(
        err.to_string(),
        "routing configuration: fallback names unknown tool \"graph_missing\""
    );
    let mut o = opts();
    o.fallback = Fallback::Tool("graph_fallback".into());
    let agent = GraphRoutingAgent::new(registry, provider(&server), o).unwrap();
    let out = agent.route("tell me a joke").await.unwrap();
    assert!(out.fallback);
    assert_eq!(out.tool, "graph_fallback");
    assert_eq!(out.args, json!({}));
    // The fallback graph ran with the request in its context.
    assert_eq!(out.result["handled"], "fallback");
    assert_eq!(out.result["request"], "tell me a joke");
}

#[tokio::test]
async fn filter_configuration_errors_come_before_any_model_call() {
    let server = ScriptedLlm::start([]).await;
    let (registry, _dir) = registry().await;
    let cases = [
        (
            ToolFilter {
                allow: Some(vec!["echo_graph".into(), "search_graph".into()]),
                deny: vec![],
            },
            "routing configuration: filter allow names unknown graph tool \"search_graph\" (graph tools: echo_graph, graph_context, graph_errors, graph_fallback, greet_graph)",
        ),
        (
            ToolFilter {
                allow: None,
                deny: vec!["ghost".into(), "phantom".into()],
            },
            "routing configuration: filter deny names unknown graph tools \"ghost\", \"phantom\" (graph tools: echo_graph, graph_context, graph_errors, graph_fallback, greet_graph)",
        ),
        (
            ToolFilter {
                allow: Some(vec!["echo_graph".into()]),
                deny: vec!["echo_graph".into()],
            },
            "routing configuration: the filter leaves no graph tool (allow: [echo_graph], deny: [echo_graph])",
        ),
    ];
    for (filter, message) in cases {
        let mut o = opts();
        o.filter = filter;
        let err = GraphRoutingAgent::new(registry.clone(), provider(&server), o).unwrap_err();
        assert_eq!(err.code(), "routing_config");
        assert_eq!(err.to_string(), message);
    }
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn allow_and_deny_intersect() {
    let server = ScriptedLlm::start([
        Reply::tool_call("greet_graph", r#"{"name":"A","style":"casual"}"#),
        Reply::tool_call("echo_graph", r#"{"input":{"topic":"a"}}"#),
    ])
    .await;
    let mut o = opts();
    o.filter = ToolFilter {
        allow: Some(vec![
            "echo_graph".into(),
            "greet_graph".into(),
            "graph_errors".into(),
        ]),
        deny: vec!["greet_graph".into()],
    };
    let (agent, _dir) = agent(&server, o).await;
    let out = agent.route("x").await.unwrap();
    assert_eq!(out.tool, "echo_graph");
    let requests = server.requests();
    assert_eq!(requests[0].tool_names(), vec!["echo_graph", "graph_errors"]);
    // A filtered-out tool is unknown to the routing loop.
    assert!(fed_back(&requests[1]).starts_with(
        "rejected: unknown tool \"greet_graph\"; choose one of: echo_graph, graph_errors\n"
    ));
}

#[tokio::test]
async fn a_rate_limit_then_success_is_retried_by_the_client() {
    let server = ScriptedLlm::start([
        Reply::status(
            429,
            r#"{"error":{"message":"rate limited","type":"rate_limit"}}"#,
        )
        .with_header("Retry-After", "0"),
        Reply::tool_call("echo_graph", r#"{"input":{"topic":"a"}}"#),
    ])
    .await;
    let (agent, _dir) = agent(&server, opts()).await;
    let out = agent.route("echo a").await.unwrap();
    assert_eq!(out.attempts, 1);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_listener_error_propagates() {
    let server =
        ScriptedLlm::start([Reply::tool_call("echo_graph", r#"{"input":{"topic":"a"}}"#)]).await;
    let (mut agent, _dir) = agent(&server, opts()).await;
    agent
        .hooks_mut()
        .on_post_execute(|_, _, _| async { Err("audit sink is down".into()) });
    let err = agent.route("x").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "post-execute listener failed: audit sink is down"
    );
    assert_eq!(err.code(), "hook_error");
}

/// A listener's own error type.
#[derive(Debug, PartialEq)]
struct SinkDown(u16);

impl std::fmt::Display for SinkDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sink answered {}", self.0)
    }
}

impl std::error::Error for SinkDown {}

#[tokio::test]
async fn a_listener_error_keeps_its_type_for_the_caller() {
    let server =
        ScriptedLlm::start([Reply::tool_call("echo_graph", r#"{"input":{"topic":"a"}}"#)]).await;
    let (mut agent, _dir) = agent(&server, opts()).await;
    agent
        .hooks_mut()
        .on_pre_execute(|_, _| async { Err(Box::new(SinkDown(503)) as _) });
    let err = agent.route("x").await.unwrap_err();
    assert_eq!(err.code(), "hook_error");
    assert_eq!(
        err.to_string(),
        "pre-execute listener failed: sink answered 503"
    );
    let source = std::error::Error::source(&err).expect("the listener's error");
    assert_eq!(source.downcast_ref::<SinkDown>(), Some(&SinkDown(503)));
}

#[tokio::test]
async fn only_the_first_of_two_tool_calls_in_one_answer_counts() {
    let server = ScriptedLlm::start([
        Reply::tool_calls(&[
            ("search_graph", "{}"),
            ("echo_graph", r#"{"input":{"topic":"b"}}"#),
        ]),
        Reply::tool_calls(&[
            ("echo_graph", r#"{"input":{"topic":"a"}}"#),
            ("greet_graph", r#"{"name":"Ada","style":"formal"}"#),
        ]),
    ])
    .await;
    let (agent, _dir) = agent(&server, opts()).await;
    let out = agent.route("echo a").await.unwrap();
    // The unknown first call was rejected although a valid one followed;
    // in the second answer the first call ran and the greeting did not.
    assert_eq!(out.tool, "echo_graph");
    assert_eq!(out.result["topic"], "a");
    assert_eq!(out.attempts, 2);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(fed_back(&requests[1]).contains("unknown tool \"search_graph\""));
    // Only the call that counted is echoed back to the model.
    let assistant = &requests[1].messages()[2];
    assert_eq!(assistant["role"], "assistant", "{assistant}");
    let calls = assistant["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{assistant}");
    assert_eq!(calls[0]["function"]["name"], "search_graph");
}

#[tokio::test]
async fn accept_with_a_value_turns_a_failed_run_into_that_value() {
    let server = ScriptedLlm::start([Reply::tool_call(
        "graph_errors",
        r#"{"input":{"mode":"fail"}}"#,
    )])
    .await;
    let (mut agent, _dir) = agent(&server, opts()).await;
    agent
        .hooks_mut()
        .on_post_execute(|_, outcome, _| async move {
            let code = outcome.as_ref().as_ref().err().map(|e| e.code.as_str());
            Ok(PostDecision::Accept {
                result: Some(json!({"recovered_from": code})),
            })
        });
    let out = agent.route("fail").await.unwrap();
    assert_eq!(out.result, json!({"recovered_from": "node_error"}));
    assert_eq!(out.attempts, 1);
    assert!(!out.interrupted);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn accept_without_a_value_lets_a_failure_propagate() {
    let server = ScriptedLlm::start([Reply::tool_call(
        "graph_errors",
        r#"{"input":{"mode":"fail"}}"#,
    )])
    .await;
    let (mut agent, _dir) = agent(&server, opts()).await;
    agent
        .hooks_mut()
        .on_post_execute(|_, _, _| async { Ok(PostDecision::Accept { result: None }) });
    let err = agent.route("fail").await.unwrap_err();
    let RouteError::Graph(e) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(e.code.as_str(), "node_error");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn block_on_a_success_asks_the_model_again() {
    let server = ScriptedLlm::start([
        Reply::tool_call("echo_graph", r#"{"input":{"topic":"first"}}"#),
        Reply::tool_call("echo_graph", r#"{"input":{"topic":"second"}}"#),
    ])
    .await;
    let (mut agent, _dir) = agent(&server, opts()).await;
    agent
        .hooks_mut()
        .on_post_execute(|exec, outcome, next| async move {
            if exec.attempt == 1 && outcome.is_ok() {
                return Ok(PostDecision::Block {
                    reason: "the first answer is never good enough".into(),
                });
            }
            next.run().await
        });
    let out = agent.route("echo").await.unwrap();
    assert_eq!(out.attempts, 2);
    assert_eq!(out.result["topic"], "second");
    assert_eq!(
        fed_back(&server.requests()[1]),
        feedback("the first answer is never good enough")
    );
}

#[tokio::test]
async fn a_trapping_validate_is_a_rejection_with_the_panic_message() {
    let server = ScriptedLlm::start([
        Reply::tool_call("graph_context", r#"{"input":{}}"#),
        Reply::tool_call("echo_graph", r#"{"input":{"topic":"x"}}"#),
    ])
    .await;
    let (agent, _dir) = agent(&server, opts()).await;
    let out = agent.route("please panic in validate").await.unwrap();
    assert_eq!(out.tool, "echo_graph");
    assert_eq!(out.attempts, 2);
    let fed = fed_back(&server.requests()[1]);
    assert!(
        fed.starts_with("rejected: graph \"graph_context\" failed to validate the request: "),
        "{fed}"
    );
    assert!(
        fed.contains("validate gave up on: please panic in validate"),
        "{fed}"
    );
}

/// Counts the guest log lines `validate called`.
#[derive(Default)]
struct ValidateCalls(Mutex<usize>);

impl sandgraph_runtime::LogSink for ValidateCalls {
    fn log(&self, _graph: &str, _level: sandgraph_runtime::GuestLogLevel, message: &str) {
        if message == "validate called" {
            *self.0.lock().unwrap() += 1;
        }
    }
}

#[tokio::test]
async fn validate_runs_once_per_attempt_and_not_again_for_the_run() {
    let calls = Arc::new(ValidateCalls::default());
    let runtime = sandgraph_factors::builder(sandgraph_runtime::RuntimeConfig::default())
        .sink(calls.clone())
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(GRAPH_CONTEXT, dir.path().join("graph_context.wasm")).unwrap();
    let (registry, _) = Registry::open(
        runtime,
        RegistryOptions {
            dirs: vec![dir.path().to_path_buf()],
            cache: Some(sandgraph_tests::compile_cache()),
            ..RegistryOptions::default()
        },
    )
    .await
    .unwrap();
    let server = ScriptedLlm::start([
        Reply::tool_call("graph_context", r#"{"input":{}}"#),
        Reply::tool_call("graph_context", r#"{"input":{}}"#),
        Reply::tool_call("graph_context", r#"{"input":{}}"#),
    ])
    .await;
    let mut agent = GraphRoutingAgent::new(registry, provider(&server), opts()).unwrap();
    agent.hooks_mut().on_pre_execute(|exec, next| async move {
        if exec.attempt < 3 {
            return Ok(PreDecision::Deny {
                reason: format!("not yet ({})", exec.attempt),
            });
        }
        next.run().await
    });
    let out = agent.route("context please").await.unwrap();
    assert_eq!(out.attempts, 3);
    assert_eq!(out.result["context"]["tool"], "graph_context");
    assert_eq!(*calls.0.lock().unwrap(), 3);
}

#[tokio::test]
async fn a_host_reply_or_handler_can_be_the_fallback() {
    let server =
        ScriptedLlm::start([Reply::text("nothing fits"), Reply::text("still nothing")]).await;
    let (registry, _dir) = registry().await;
    let mut o = opts();
    o.fallback = Fallback::Reply("I only route to graphs.".into());
    let agent = GraphRoutingAgent::new(registry.clone(), provider(&server), o).unwrap();
    let out = agent.route("sing").await.unwrap();
    assert!(out.fallback);
    assert_eq!(out.tool, FALLBACK_TOOL);
    assert_eq!(out.result, json!({"reply": "I only route to graphs."}));
    assert_eq!(out.text.as_deref(), Some("nothing fits"));

    let mut o = opts();
    o.fallback = Fallback::Handler(FallbackHandler::new(
        |request, text| json!({"request": request, "model_said": text}),
    ));
    let agent = GraphRoutingAgent::new(registry, provider(&server), o).unwrap();
    let out = agent.route("dance").await.unwrap();
    assert!(out.fallback);
    assert_eq!(out.tool, FALLBACK_TOOL);
    assert_eq!(
        out.result,
        json!({"request": "dance", "model_said": "still nothing"})
    );
}

#[tokio::test]
async fn routing_over_a_scope_sees_its_own_mounts() {
    let global = tempfile::tempdir().unwrap();
    std::fs::copy(ECHO, global.path().join("echo_graph.wasm")).unwrap();
    let (registry, _) = Registry::open(
        sandgraph_tests::runtime().clone(),
        RegistryOptions {
            dirs: vec![global.path().to_path_buf()],
            cache: Some(sandgraph_tests::compile_cache()),
            ..RegistryOptions::default()
        },
    )
    .await
    .unwrap();
    let own = tempfile::tempdir().unwrap();
    let greet = own.path().join("greet_graph.wasm");
    std::fs::copy(GREET, &greet).unwrap();
    let scope = Arc::new(registry.scope("writer"));
    scope.mount_file(&greet).await.unwrap();
    let server = ScriptedLlm::start([
        Reply::tool_call("greet_graph", r#"{"name":"Ada","style":"formal"}"#),
        Reply::text("no"),
    ])
    .await;
    let agent = GraphRoutingAgent::new(scope.clone(), provider(&server), opts()).unwrap();
    let out = agent.route("greet Ada").await.unwrap();
    assert_eq!(out.tool, "greet_graph");
    assert_eq!(
        server.requests()[0].tool_names(),
        vec!["echo_graph", "greet_graph"]
    );
    // The global view does not see the scope's mount.
    let mut o = opts();
    o.filter.allow = Some(vec!["greet_graph".into()]);
    let err = GraphRoutingAgent::new(registry, provider(&server), o).unwrap_err();
    assert_eq!(err.code(), "routing_config");
}

#[tokio::test]
async fn the_policy_denies_tools_and_limits_argument_values() {
    let config = OperatorConfig::parse(
        r#"
[policy]
deny_tools = ["graph_errors"]
[[policy.limit]]
tool = "greet_graph"
path = "/times"
max = 3
[[policy.limit]]
path = "/input/topic"
max_length = 5
"#,
        Path::new("sandgraph.toml"),
    )
    .unwrap();
    let policy = sandgraph_router::AgentConfig::from_operator(&config)
        .unwrap()
        .policy;
    assert_eq!(
        policy.violation("graph_errors", &json!({})).as_deref(),
        Some("\"graph_errors\" is denied by policy")
    );
    let server = ScriptedLlm::start([
        Reply::tool_call("graph_errors", r#"{"input":{"mode":"ok"}}"#),
        Reply::tool_call("greet_graph", r#"{"name":"A","style":"casual","times":5}"#),
        Reply::tool_call("echo_graph", r#"{"input":{"topic":"toolong"}}"#),
        Reply::tool_call("echo_graph", r#"{"input":{"topic":"ok"}}"#),
    ])
    .await;
    let (mut agent, _dir) = agent(&server, opts()).await;
    policy.install(agent.hooks_mut());
    let out = agent.route("x").await.unwrap();
    assert_eq!(out.result["topic"], "ok");
    let requests = server.requests();
    assert_eq!(
        fed_back(&requests[1]),
        feedback("\"graph_errors\" is denied by policy")
    );
    assert_eq!(
        fed_back(&requests[2]),
        feedback("argument /times is above the maximum 3 (policy)")
    );
    assert_eq!(
        fed_back(&requests[3]),
        feedback("argument /input/topic is longer than 5 characters (policy)")
    );
}

#[tokio::test]
async fn a_policy_that_cannot_work_is_a_config_error() {
    let config = OperatorConfig::parse(
        "[[policy.limit]]\npath = \"topic\"\nmax_length = 3\n",
        Path::new("sandgraph.toml"),
    )
    .unwrap();
    let err = sandgraph_router::AgentConfig::from_operator(&config).unwrap_err();
    assert_eq!(
        err.to_string(),
        "sandgraph.toml: [policy]: limit[0]: path \"topic\" is not a JSON pointer (it starts with /)"
    );
    let config =
        OperatorConfig::parse("[llm]\nmodle = \"x\"\n", Path::new("sandgraph.toml")).unwrap();
    let err = sandgraph_router::AgentConfig::from_operator(&config).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("sandgraph.toml: [llm]: unknown field `modle`"),
        "{err}"
    );
}

#[tokio::test]
async fn every_attempt_is_journaled() {
    let server = ScriptedLlm::start([
        Reply::tool_call("greet_graph", r#"{"name":"Ada","style":"loud"}"#),
        Reply::tool_call("greet_graph", "not json"),
        Reply::tool_call("greet_graph", r#"{"name":"Ada","style":"casual"}"#),
        Reply::text("nothing fits"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.redb");
    let store = sandgraph_store::Store::open(&db).unwrap();
    let (agent, _graphs) = agent(&server, opts()).await;
    let agent = agent.with_journal(Journal::open(&store));
    let out = agent.route("greet Ada").await.unwrap();
    let fb = agent.route("weather?").await.unwrap();
    drop(agent);
    drop(store);
    // Reopen: the journal is durable.
    let store = sandgraph_store::Store::open(&db).unwrap();
    let all = Journal::open(&store).entries(None, None).unwrap();
    assert_eq!(all.len(), 4);
    let first: Vec<_> = Journal::open(&store)
        .entries(Some(&out.route_id), None)
        .unwrap();
    assert_eq!(first.len(), 3);
    assert_eq!(
        first
            .iter()
            .map(|e| (e.attempt, e.decision.as_str(), e.stage.as_deref()))
            .collect::<Vec<_>>(),
        vec![
            (1, "rejected", Some("invalid_args")),
            (2, "rejected", Some("invalid_json")),
            (3, "accepted", None)
        ]
    );
    assert_eq!(first[0].request, "greet Ada");
    assert_eq!(first[0].tool.as_deref(), Some("greet_graph"));
    assert_eq!(first[1].args, Some(Value::String("not json".into())));
    assert!(
        first[0]
            .reason
            .as_deref()
            .unwrap()
            .starts_with("invalid arguments:")
    );
    assert_eq!(first[2].outcome.as_ref().unwrap()["greeting"], "Hey Ada!");
    assert!(first[2].run_ms.is_some());
    // The accepted attempt names the component version that ran.
    let digest = first[2].graph_digest.as_deref().unwrap();
    assert_eq!(digest.len(), 64, "{digest}");
    assert_eq!(
        digest,
        sandgraph_store::sha256_hex(&std::fs::read(GREET).unwrap())
    );
    assert_eq!(first[0].graph_digest, None);
    assert_eq!(all[3].route_id, fb.route_id);
    assert_eq!(all[3].decision, "fallback");
    assert_eq!(all[3].reason.as_deref(), Some("nothing fits"));
    assert_eq!(
        all.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
}
