//! The capability examples (`example-graphs/research`,
//! `example-graphs/fetch-summarize`) end to end, granted the way the CLI
//! grants them: a registry over a folder with a `sandgraph.toml`, a real
//! OpenAI-compatible client talking to the loopback scripted model, and a
//! loopback HTTP server. With `DEEPSEEK_API_KEY` set, the same against
//! DeepSeek.

use std::sync::Arc;

use sandgraph_core::Start;
use sandgraph_factors::llm::LlmBackend;
use sandgraph_registry::{CallOptions, OperatorConfig, Registry, RegistryOptions};
use sandgraph_test_llm::{Reply, ScriptedLlm};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Bytes of the article before [`TAIL`]: past the 4 KiB the example sends
/// the model.
const ARTICLE_HEAD_BYTES: usize = 6 * 1024;
/// Ends the article; never sent to the model.
const TAIL: &str = "TAIL-NOT-FOR-THE-MODEL";
const ARTICLE_START: &str = "Sandgraph runs agent graphs as sandboxed WebAssembly components.";

/// Copies `files` (name, component) into a temporary folder with `toml` as
/// its `sandgraph.toml`, and mounts it with `llm` as the host's model.
async fn mount(
    files: &[(&str, &str)],
    toml: &str,
    llm: Option<Arc<dyn sandgraph_llm::Provider>>,
) -> (Registry, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    for (name, component) in files {
        std::fs::copy(component, dir.path().join(name)).unwrap();
    }
    let path = dir.path().join("sandgraph.toml");
    std::fs::write(&path, toml).unwrap();
    let config = OperatorConfig::load(&path).unwrap();
    let llm = llm.map(|provider| LlmBackend {
        provider,
        models: config.llm_models.clone(),
        default_model: "default-model".into(),
    });
    let options = RegistryOptions {
        dirs: vec![dir.path().to_path_buf()],
        config,
        llm,
        log_warnings: false,
        cache: Some(sandgraph_tests::compile_cache()),
        ..RegistryOptions::default()
    };
    let (registry, report) = Registry::open(sandgraph_tests::runtime().clone(), options)
        .await
        .unwrap();
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    (registry, dir)
}

/// A client of `base_url`, reading its key from `key_env`.
fn client(
    base_url: String,
    model: &str,
    key_env: &str,
    max_retries: u32,
) -> Arc<dyn sandgraph_llm::Provider> {
    Arc::new(
        sandgraph_llm::OpenAiClient::new(sandgraph_llm::ClientConfig {
            base_url,
            model: model.into(),
            api_key_env: key_env.into(),
            max_retries,
            ..Default::default()
        })
        .unwrap(),
    )
}

/// A client of the scripted server: loopback, so no key.
fn scripted(server: &ScriptedLlm) -> Arc<dyn sandgraph_llm::Provider> {
    client(
        server.base_url(),
        "default-model",
        "SANDGRAPH_TEST_EXAMPLES_NO_KEY",
        0,
    )
}

/// Calls graph tool `name` with `args`; its final state.
async fn call(registry: &Registry, name: &str, args: Value) -> Value {
    let out = registry
        .get(name)
        .unwrap_or_else(|| panic!("{name} is mounted"))
        .run(Start::Input(args), CallOptions::default(), &mut |_| {})
        .await
        .unwrap_or_else(|e| panic!("{name}: [{}] {}", e.code, e.message));
    assert!(!out.interrupted);
    out.value
}

const RESEARCH_FILES: &[(&str, &str)] = &[
    ("research.wasm", sandgraph_tests::RESEARCH),
    ("greet_graph.wasm", sandgraph_tests::GREET),
    ("echo_graph.wasm", sandgraph_tests::ECHO),
];

/// `research` granted the model alias `fast` (`llm`, the grant's other
/// keys) and the tools echo_graph and greet_graph.
fn research_toml(llm: &str) -> String {
    format!(
        "[llm.models]\nfast = \"deepseek-chat\"\n\n[graphs.research.grants]\n\
         llm = {{ models = [\"fast\"]{llm} }}\n\
         tools = {{ allow = [\"echo_graph\", \"greet_graph\"], max_calls = 10 }}\n"
    )
}

/// The messages of `request` with `role`.
fn with_role<'a>(request: &'a sandgraph_test_llm::Recorded, role: &str) -> Vec<&'a Value> {
    request
        .messages()
        .iter()
        .filter(|m| m["role"] == role)
        .collect()
}

#[tokio::test]
pub async fn research() {
    let server = ScriptedLlm::start([
        Reply::tool_call("greet_graph", r#"{"name":"Ada","style":"formal"}"#),
        Reply::text("Say \"Good day, Ada.\""),
    ])
    .await;
    let (registry, _dir) = mount(RESEARCH_FILES, &research_toml(""), Some(scripted(&server))).await;
    let question = "How do I greet Ada formally?";
    let state = call(&registry, "research", json!({"question": question})).await;
    assert_eq!(state["answer"], "Say \"Good day, Ada.\"", "{state}");
    assert_eq!(state["steps"], 2);
    assert_eq!(state.get("error"), None, "{state}");
    // The messages channel: add_messages gave each message an id.
    let messages = state["messages"].as_array().unwrap();
    let types: Vec<&Value> = messages.iter().map(|m| &m["type"]).collect();
    assert_eq!(types, ["system", "human", "ai", "tool", "ai"], "{state}");
    let ids: Vec<&Value> = messages.iter().map(|m| &m["id"]).collect();
    assert_eq!(
        ids,
        ["msg-0", "msg-1", "msg-2", "msg-3", "msg-4"],
        "{state}"
    );
    assert_eq!(messages[3]["name"], "greet_graph", "{state}");
    assert_eq!(messages[3]["status"], "success", "{state}");

    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    // The first turn: the alias mapped to the model, the question, and the
    // granted tools with their argument schemas.
    assert_eq!(sent[0].body["model"], "deepseek-chat");
    assert_eq!(sent[0].last_content("user"), Some(question));
    assert_eq!(sent[0].tool_names(), ["echo_graph", "greet_graph"]);
    let greet = &sent[0].body["tools"][1]["function"];
    assert_eq!(greet["description"], "Greet someone, formally or casually.");
    assert_eq!(greet["parameters"]["required"], json!(["name", "style"]));
    // The second: the model's tool call, then greet_graph's final state as
    // the tool message answering it.
    let assistant = with_role(&sent[1], "assistant");
    assert_eq!(assistant.len(), 1, "{}", sent[1].body);
    let tool_call = &assistant[0]["tool_calls"][0];
    assert_eq!(tool_call["id"], "call_1");
    assert_eq!(tool_call["function"]["name"], "greet_graph");
    let tool = with_role(&sent[1], "tool");
    assert_eq!(tool.len(), 1, "{}", sent[1].body);
    assert_eq!(tool[0]["tool_call_id"], "call_1");
    let result: Value = serde_json::from_str(tool[0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["greeting"], "Good day, Ada.", "{result}");
}

#[tokio::test]
async fn research_stops_at_max_steps_and_hands_tool_errors_to_the_model() {
    // A model that never stops calling tools: bad arguments, a tool not
    // granted, then a good call; one reply more than the cap allows.
    let server = ScriptedLlm::start([
        Reply::tool_call("greet_graph", r#"{"name":3}"#),
        Reply::tool_call("graph_tools", "{}"),
        Reply::tool_call("echo_graph", r#"{"input":{"topic":"t"}}"#),
        Reply::text("never asked"),
    ])
    .await;
    let (registry, _dir) = mount(RESEARCH_FILES, &research_toml(""), Some(scripted(&server))).await;
    let state = call(
        &registry,
        "research",
        json!({"question": "loop", "max_steps": 3}),
    )
    .await;
    assert_eq!(state["steps"], 3, "{state}");
    assert_eq!(state.get("answer"), None, "{state}");
    assert_eq!(
        state["error"], "no answer after 3 model turns (max_steps is 3)",
        "{state}"
    );
    assert_eq!(server.requests().len(), 3);
    assert_eq!(server.remaining(), 1);
    // Each failed call went back to the model as an error tool message
    // (the ToolNode's wording).
    let sent = server.requests();
    let last_tool = |i: usize| sent[i].last_content("tool").unwrap().to_owned();
    assert!(
        last_tool(1).starts_with("Error: invalid_args: "),
        "{}",
        last_tool(1)
    );
    assert!(
        last_tool(1).ends_with("\n Please fix your mistakes."),
        "{}",
        last_tool(1)
    );
    assert!(last_tool(1).contains("name"), "{}", last_tool(1));
    assert_eq!(
        last_tool(2),
        "Error: graph_tools is not a valid tool, try one of [echo_graph, greet_graph]."
    );
    // The cap's own turn ran its tool call too, and kept it.
    let messages = state["messages"].as_array().unwrap();
    let errors = messages.iter().filter(|m| m["status"] == "error").count();
    assert_eq!(errors, 2, "{state}");
    let last = messages.last().unwrap();
    assert_eq!(last["type"], "tool", "{state}");
    assert_eq!(last["status"], "success", "{state}");
    assert!(
        last["content"].as_str().unwrap().contains("seen:t"),
        "{state}"
    );
}

#[tokio::test]
async fn research_ends_with_an_error_when_the_model_is_denied_or_used_up() {
    // No llm grant: denied, nothing sent.
    let server = ScriptedLlm::start([]).await;
    let toml = "[graphs.research.grants]\ntools = { allow = [\"greet_graph\"] }\n";
    let (registry, _dir) = mount(RESEARCH_FILES, toml, Some(scripted(&server))).await;
    let state = call(&registry, "research", json!({"question": "q"})).await;
    let error = state["error"].as_str().unwrap();
    assert!(
        error.starts_with("llm call failed (denied): this graph has no llm grant"),
        "{error}"
    );
    assert_eq!(state["steps"], 1);
    assert_eq!(state.get("answer"), None, "{state}");
    assert_eq!(server.requests().len(), 0);
    // One call granted: the second turn is refused with `quota`.
    let server = ScriptedLlm::start([
        Reply::tool_call("greet_graph", r#"{"name":"Ada","style":"casual"}"#),
        Reply::text("never asked"),
    ])
    .await;
    let toml = research_toml(", max_calls = 1");
    let (registry, _dir) = mount(RESEARCH_FILES, &toml, Some(scripted(&server))).await;
    let state = call(&registry, "research", json!({"question": "q"})).await;
    let error = state["error"].as_str().unwrap();
    assert!(error.starts_with("llm call failed (quota): "), "{error}");
    assert_eq!(state["steps"], 2);
    assert_eq!(server.requests().len(), 1);
}

/// A loopback HTTP/1.1 server: `/article` is a 200 whose body is
/// [`ARTICLE_START`], padding to [`ARTICLE_HEAD_BYTES`], then [`TAIL`];
/// `/big` is over the host's response cap; anything else is a 404.
async fn article_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
                    match stream.read(&mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let path = head.split(' ').nth(1).unwrap_or_default().to_owned();
                let (status, body) = match path.as_str() {
                    "/article" => {
                        let mut body = ARTICLE_START.to_owned();
                        while body.len() < ARTICLE_HEAD_BYTES {
                            body.push_str(" It checks every capability call.");
                        }
                        body.push_str(TAIL);
                        ("200 OK", body)
                    }
                    "/big" => {
                        let size = sandgraph_factors::http::MAX_RESPONSE_BODY_BYTES;
                        ("200 OK", "x".repeat(size as usize + 1))
                    }
                    _ => ("404 Not Found", String::new()),
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    origin
}

/// Named as `sandgraph build example-graphs/fetch-summarize` names it: the
/// `-` of the file name stands for the graph name's `_`, so the file is
/// bound to `fetch_summarize` and gets its grants.
const FETCH_FILES: &[(&str, &str)] = &[("fetch-summarize.wasm", sandgraph_tests::FETCH_SUMMARIZE)];

/// `fetch_summarize` granted `fast` and the http origins `allow`.
fn fetch_toml(allow: &[&str]) -> String {
    format!(
        "[llm.models]\nfast = \"deepseek-chat\"\n\n[graphs.fetch_summarize.grants]\n\
         llm = {{ models = [\"fast\"] }}\nhttp = {{ allow = {allow:?} }}\n"
    )
}

#[tokio::test]
pub async fn fetch_summarize() {
    let origin = article_server().await;
    let port = origin.rsplit(':').next().unwrap();
    let by_name = format!("http://localhost:{port}");
    let server = ScriptedLlm::start([Reply::text("Sandgraph sandboxes agent graphs.")]).await;
    let toml = fetch_toml(&[&origin, &by_name]);
    let (registry, _dir) = mount(FETCH_FILES, &toml, Some(scripted(&server))).await;
    let url = format!("{origin}/article");
    let state = call(&registry, "fetch_summarize", json!({"url": url})).await;
    assert_eq!(
        state["summary"], "Sandgraph sandboxes agent graphs.",
        "{state}"
    );
    assert_eq!(state["status"], 200);
    assert_eq!(state["source"], url.as_str());
    assert_eq!(state.get("error"), None, "{state}");
    // The model got the start of the body, cut at 4 KiB.
    let sent = server.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body["model"], "deepseek-chat");
    let user = sent[0].last_content("user").unwrap();
    assert!(user.contains(&url), "{user}");
    assert!(user.contains(ARTICLE_START), "{user}");
    assert!(!user.contains(TAIL), "the whole body was sent");
    assert_eq!(state["excerpt"].as_str().unwrap().len(), 4096);

    // Every failure ends in `error`, and the model is not asked.
    let cases = [
        // Another origin than granted: refused before any connection.
        (
            "http://127.0.0.1:9/article".to_owned(),
            "http request denied: ",
        ),
        // A granted name resolving to loopback, without `private = true`.
        (
            format!("{by_name}/article"),
            "http destination prohibited: ",
        ),
        (format!("{origin}/big"), "http body too large: "),
        (format!("{origin}/missing"), "the server answered 404"),
        ("not a url".to_owned(), "invalid http request: "),
    ];
    for (url, why) in cases {
        let state = call(&registry, "fetch_summarize", json!({"url": url})).await;
        let error = state["error"].as_str().unwrap_or_default();
        assert!(error.starts_with(why), "{url}: {state}");
        assert_eq!(state.get("summary"), None, "{state}");
    }
    assert_eq!(server.requests().len(), 1);
    // The model failing (the script is used up: a 500): `error` too.
    let state = call(&registry, "fetch_summarize", json!({"url": url})).await;
    let error = state["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("llm call failed (provider): "), "{state}");
    assert_eq!(state["status"], 200);
}

#[tokio::test]
async fn examples_against_deepseek() {
    if std::env::var_os("DEEPSEEK_API_KEY").is_none_or(|k| k.is_empty()) {
        eprintln!("skipped: DEEPSEEK_API_KEY is not set");
        return;
    }
    let origin = article_server().await;
    let deepseek = client(
        "https://api.deepseek.com".into(),
        "deepseek-chat",
        "DEEPSEEK_API_KEY",
        2,
    );
    let toml = format!(
        "[limits]\ntimeout_ms = 120000\n\n{}\n[graphs.fetch_summarize.grants]\n\
         llm = {{ models = [\"fast\"] }}\nhttp = {{ allow = [\"{origin}\"] }}\n",
        research_toml(", max_calls = 6")
    );
    let files: Vec<(&str, &str)> = RESEARCH_FILES.iter().chain(FETCH_FILES).copied().collect();
    let (registry, _dir) = mount(&files, &toml, Some(deepseek)).await;
    let state = call(
        &registry,
        "research",
        json!({"question": "Use greet_graph to greet Ada formally and tell me the exact greeting."}),
    )
    .await;
    assert_eq!(state.get("error"), None, "{state}");
    let answer = state["answer"].as_str().unwrap_or_default();
    assert!(!answer.trim().is_empty(), "{state}");
    eprintln!("research answered in {} steps: {answer}", state["steps"]);
    let state = call(
        &registry,
        "fetch_summarize",
        json!({"url": format!("{origin}/article")}),
    )
    .await;
    assert_eq!(state.get("error"), None, "{state}");
    let summary = state["summary"].as_str().unwrap_or_default();
    assert!(!summary.trim().is_empty(), "{state}");
    eprintln!("fetch_summarize: {summary}");
}
