//! Python graphs: the SDK's native unit tests, `sandgraph build` of a folder
//! whose pyproject.toml has `[tool.sandgraph]` (componentize-py, installed
//! by `python3 -m pip install -r example-graphs/python/requirements.txt`),
//! and the built component run by the host (see ../toolkit.rs).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use super::conformance::{Lang, run_cached};
use super::folder;
use super::new::assert_ok;
use crate::common::cargo::repo;
use crate::common::{Env, stderr, stdout};

/// What CI runs to install componentize-py.
const INSTALL: &str = "python3 -m pip install -r example-graphs/python/requirements.txt";

/// The exit status of a failed build.
const BUILD_FAILED: i32 = 12;

/// The componentize-py the build will use ($SANDGRAPH_COMPONENTIZE_PY, else
/// on PATH); the test fails, naming the install command, when it is missing.
fn componentize_py() -> PathBuf {
    let tool = std::env::var_os("SANDGRAPH_COMPONENTIZE_PY")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("componentize-py"));
    let ok = Command::new(&tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "componentize-py is not installed ({}): run `{INSTALL}`",
        tool.display()
    );
    tool
}

fn python3(dir: &Path, args: &[&str]) -> Output {
    Command::new("python3")
        .args(args)
        .current_dir(dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 ({e}): install Python 3.11 or later"))
}

#[test]
fn the_sdk_and_example_unit_tests_pass_natively() {
    let o = python3(&repo().join("guest-sdk/python"), &["-m", "unittest", "-v"]);
    assert_ok("python3 -m unittest in guest-sdk/python", &o);
    let report = stderr(&o);
    let ran = report
        .lines()
        .find_map(|l| {
            l.strip_prefix("Ran ")?
                .split(' ')
                .next()?
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(0);
    assert!(ran >= 30, "too few tests ran: {report}");
    assert!(report.lines().any(|l| l == "OK"), "{report}");
    for example in [
        "test_echo",
        "test_greet",
        "test_map_reduce",
        "test_approval",
        "test_research",
    ] {
        assert!(
            report.contains(&format!("{example} ")),
            "{example} did not run: {report}"
        );
    }
}

/// The Python example `name`, built once per change of its inputs (see
/// [`super::conformance::built`]).
fn built(name: &str) -> PathBuf {
    componentize_py();
    super::conformance::built(Lang::Python, name)
}

#[test]
fn echo_builds_and_runs_in_the_host() {
    let wasm = built("echo");
    let env = folder(&[("echo.wasm", wasm.to_str().unwrap())]);
    let o = run_cached(
        &env,
        &["run", "echo.wasm", "--input", r#"{"topic": "wasm"}"#],
    );
    assert_ok("sandgraph run", &o);
    let state: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(state, json!({"topic": "wasm", "log": ["seen:wasm"]}));
    // The build's world leaves out the capabilities the SDK does not offer:
    // the component asks for none.
    let o = run_cached(&env, &["check", "--json", "echo.wasm"]);
    assert_ok("sandgraph check", &o);
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(report["graphs"][0]["name"], "echo_graph", "{report}");
    assert_eq!(report["graphs"][0]["capabilities"], json!([]), "{report}");
}

/// A copy of the echo example in a fresh folder, with `graph` as its graph
/// module.
fn echo_copy(env: &Env, graph: &str) -> PathBuf {
    let dir = env.path("echo");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        repo().join("example-graphs/python/echo/pyproject.toml"),
        dir.join("pyproject.toml"),
    )
    .unwrap();
    std::fs::write(dir.join("graph.py"), graph).unwrap();
    dir
}

#[test]
fn a_missing_componentize_py_names_the_install_command() {
    let env = folder(&[]);
    let dir = echo_copy(
        &env,
        &std::fs::read_to_string(repo().join("example-graphs/python/echo/graph.py")).unwrap(),
    );
    let o = env
        .command(&["build", dir.to_str().unwrap(), "--out", "echo.wasm"])
        .env(
            "SANDGRAPH_COMPONENTIZE_PY",
            env.path("nowhere/componentize-py"),
        )
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(BUILD_FAILED), "{err}");
    assert!(
        err.contains("componentize-py is not installed")
            && err.contains("nowhere/componentize-py")
            && err.contains("`python3 -m pip install componentize-py==0.25.1`"),
        "{err}"
    );
    assert!(!env.path("echo.wasm").exists());
}

/// Builds a copy of the echo graph whose `graph.py` is `graph`, expecting
/// the build to fail and write nothing: its stderr and the graph's folder
/// (its resolved path; the folder itself is removed).
/// Each failing build still runs componentize-py up to the import (about
/// 9 s on 2 cores), so each case is a test of its own and they run side by
/// side.
fn failing_build(graph: &str) -> (String, PathBuf) {
    let tool = componentize_py();
    let env = folder(&[]);
    let dir = echo_copy(&env, graph);
    let o = env
        .command(&["build", dir.to_str().unwrap(), "--out", "echo.wasm"])
        .env("SANDGRAPH_COMPONENTIZE_PY", &tool)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(BUILD_FAILED), "{err}");
    assert!(!env.path("echo.wasm").exists());
    // Resolved now: the folder goes with the Env.
    let dir = dir.canonicalize().unwrap();
    (err, dir)
}

/// A syntax error: the traceback names the file (in the graph's folder)
/// and the line; the summary is the error.
#[test]
fn a_graph_module_that_fails_at_import_is_a_build_error_with_its_python_error() {
    let (err, dir) = failing_build("import sandgraph\n\ndef broken(:\n    pass\n");
    let file = format!("File \"{}/graph.py\", line 3", dir.display());
    assert!(err.contains(&file), "{err}");
    assert!(
        err.contains("the graph module \"graph\" in ")
            && err.contains("failed at import: SyntaxError: invalid syntax"),
        "{err}"
    );
    assert!(
        !err.contains("Stack backtrace"),
        "the tool's own frames are left out: {err}"
    );
    assert!(err.len() < 16 * 1024, "bounded: {} bytes", err.len());
}

/// A graph that does not compile: every problem, in the Python error.
#[test]
fn a_graph_that_does_not_compile_is_a_build_error_naming_every_problem() {
    let (err, _) = failing_build(
        "from typing import TypedDict\nfrom sandgraph import START, StateGraph\n\n\
         class S(TypedDict):\n    x: int\n\n\
         b = StateGraph(S)\nb.add_node(\"a\", lambda s: None)\nb.add_edge(START, \"a\")\n\
         b.add_edge(\"a\", \"b\")\ngraph = b.compile(name=\"bad name\")\n",
    );
    assert!(
        err.contains("graph name 'bad name' may only contain")
            && err.contains("edge 'a' -> 'b': unknown target node 'b'"),
        "{err}"
    );
}

/// A module that compiles no graph.
#[test]
fn a_graph_module_that_compiles_no_graph_is_a_build_error() {
    let (err, _) = failing_build("x = 1\n");
    assert!(err.contains("the graph module compiled no graph"), "{err}");
}

/// `graph` (the component `wasm`) mounted beside the echo graph, granted the
/// model alias `fast` (served at `llm_base`), the tool `echo_graph` and the
/// origin `url` (a loopback one: `private = true`), and called with
/// `{"input": {"url": url}}`: the folder and the final state.
pub(super) async fn call_with_grants(
    graph: &str,
    wasm: &Path,
    llm_base: &str,
    url: &str,
) -> (Env, Value) {
    let name = format!("{graph}.wasm");
    let env = Env::new(&[
        (name.as_str(), wasm.to_str().unwrap()),
        ("echo_graph.wasm", sandgraph_tests::ECHO),
    ])
    .with_db("threads.redb");
    let toml = format!(
        "[llm]\nbase_url = \"{llm_base}\"\napi_key_env = \"SANDGRAPH_CLI_TEST_LLM_KEY\"\n\
         [llm.models]\nfast = \"deepseek-chat\"\n\
         [graphs.{graph}.grants]\nllm = {{ models = [\"fast\"] }}\n\
         tools = {{ allow = [\"echo_graph\"] }}\n\
         http = {{ allow = [\"{url}\"], methods = [\"GET\", \"POST\"], private = true }}\n"
    );
    std::fs::write(env.path("ops.toml"), toml).unwrap();
    let args = json!({"input": {"url": url}}).to_string();
    let mut cmd = env.command(&[
        "call", graph, "--graphs", "graphs", "--config", "ops.toml", "--args", &args,
    ]);
    cmd.env("SANDGRAPH_CLI_TEST_LLM_KEY", "test-key");
    let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_ok(&format!("sandgraph call {graph}"), &o);
    (env, serde_json::from_str(&stdout(&o)).unwrap())
}

/// `answer` is the first scripted reply, "hello", with its token usage.
pub(super) fn assert_answer_and_usage(out: &Value) {
    assert_eq!(out["answer"]["content"], "hello", "{out}");
    let usage = &out["answer"]["usage"];
    let (input, output) = (
        usage["input_tokens"].as_u64(),
        usage["output_tokens"].as_u64(),
    );
    assert!(input.is_some_and(|n| n > 0), "{out}");
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(input.unwrap() + output.unwrap()),
        "{out}"
    );
}

/// The model got two requests: the first to `fast` (deepseek-chat) with at
/// most 50 tokens and the system prompt "be brief", the second "again".
pub(super) fn assert_model_requests(llm: &sandgraph_test_llm::ScriptedLlm) {
    let sent = llm.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].body["model"], json!("deepseek-chat"));
    assert_eq!(sent[0].body["max_tokens"], json!(50));
    assert_eq!(sent[0].last_content("system"), Some("be brief"));
    assert_eq!(sent[1].last_content("user"), Some("again"));
}

/// The loopback answers of the capabilities graphs' `fetched` key: a GET
/// with a query and a header, a POST with a JSON body, example.com denied.
pub(super) fn assert_fetched(fetched: &Value) {
    assert_eq!(fetched["status"], 200, "{fetched}");
    assert_eq!(fetched["type"], "application/json", "{fetched}");
    assert_eq!(
        fetched["get"],
        json!({"method": "GET", "path": "/hello?q=%C3%A9", "x-test": "yes", "body": ""}),
        "{fetched}"
    );
    assert_eq!(
        fetched["post"],
        json!({"method": "POST", "path": "/echo", "x-test": "", "body": "{\"n\":1}"}),
        "{fetched}"
    );
    assert_eq!(fetched["denied"], "denied", "{fetched}");
}

/// The capability journal of `graph`: two model calls, `echo_calls` calls
/// of echo_graph and one refused tool, two GETs and a POST to `url` and
/// one refused GET, and nothing else.
pub(super) fn assert_capability_journal(env: &Env, graph: &str, url: &str, echo_calls: usize) {
    let o = env.run(&["journal", "--capabilities", "--graph", graph]);
    assert_ok("sandgraph journal --capabilities", &o);
    let text = stdout(&o);
    let count = |needle: String| text.lines().filter(|r| r.contains(&needle)).count();
    let expected = [
        (format!(" {graph} llm fast allowed"), 2),
        (format!(" {graph} tools echo_graph allowed"), echo_calls),
        (format!(" {graph} tools not_granted denied"), 1),
        (format!(" {graph} http GET {url} allowed"), 2),
        (format!(" {graph} http POST {url} allowed"), 1),
        (format!(" {graph} http GET http://example.com denied"), 1),
    ];
    for (needle, n) in &expected {
        assert_eq!(count(needle.clone()), *n, "{needle}: {text}");
    }
    let total: usize = expected.iter().map(|(_, n)| n).sum();
    assert_eq!(text.lines().count(), total, "{text}");
}

/// A loopback HTTP server answering every request with a JSON object of
/// its method, path, `x-test` header and body; serves until the test ends.
pub(super) fn echo_http_server() -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let mut parts = line.split_whitespace();
            let (method, path) = (
                parts.next().unwrap_or_default().to_owned(),
                parts.next().unwrap_or_default().to_owned(),
            );
            let (mut length, mut test) = (0usize, String::new());
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
                    break;
                }
                let (name, value) = header.split_once(':').unwrap_or_default();
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "x-test" => test = value.trim().to_owned(),
                    _ => {}
                }
            }
            let mut body = vec![0; length];
            let _ = std::io::Read::read_exact(&mut reader, &mut body);
            let answer = json!({
                "method": method,
                "path": path,
                "x-test": test,
                "body": String::from_utf8_lossy(&body),
            })
            .to_string();
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    url
}

/// A Python graph built with `capabilities = ["llm", "tools", "http"]`
/// calls a model (the scripted loopback server), a granted graph tool and a
/// granted loopback origin, sync and from an async node with
/// `asyncio.gather`; refusals arrive as typed errors; `idna` works; every
/// call is in the capability journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graph_with_capabilities_calls_a_model_a_tool_and_a_url() {
    use sandgraph_test_llm::{Reply, ScriptedLlm};
    let wasm = tokio::task::block_in_place(|| built("capabilities"));
    let llm = ScriptedLlm::start([Reply::text("hello"), Reply::text("again")]).await;
    let url = echo_http_server();
    let (env, out) = call_with_grants("py_caps", &wasm, &llm.base_url(), &url).await;
    assert_answer_and_usage(&out);
    assert_eq!(
        out["tool"],
        json!({"log": ["seen:py"], "refused": "denied"}),
        "{out}"
    );
    assert_fetched(&out["fetched"]);
    assert_eq!(out["fetched"]["idna"], "xn--bcher-kva.example", "{out}");
    assert_eq!(
        out["gathered"],
        json!(["again", ["seen:async"], "/async"]),
        "{out}"
    );
    assert_model_requests(&llm);
    // Every call is journalled, allowed or refused: two calls of
    // echo_graph.
    assert_capability_journal(&env, "py_caps", &url, 2);
}

/// The Python research twin (`create_react_agent`'s blocks: ChatModel,
/// ToolNode, tools_condition), named by its pyproject.toml: the scripted
/// model first asks for a graph tool call, the tool runs as a sub-run, then
/// the model answers; the final state holds the whole conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_research_twin_calls_a_tool_then_answers() {
    use sandgraph_test_llm::{Reply, ScriptedLlm};
    let wasm = tokio::task::block_in_place(|| built("research"));
    let llm = ScriptedLlm::start([
        Reply::tool_call("echo_graph", r#"{"input":{"topic":"py"}}"#),
        Reply::text("It said seen:py."),
    ])
    .await;
    let env = Env::new(&[
        ("research.wasm", wasm.to_str().unwrap()),
        ("echo_graph.wasm", sandgraph_tests::ECHO),
    ]);
    let toml = format!(
        "[llm]\nbase_url = \"{}\"\napi_key_env = \"SANDGRAPH_CLI_TEST_LLM_KEY\"\n\
         [llm.models]\nfast = \"deepseek-chat\"\n\
         [graphs.research.grants]\nllm = {{ models = [\"fast\"] }}\n\
         tools = {{ allow = [\"echo_graph\"] }}\n",
        llm.base_url()
    );
    std::fs::write(env.path("ops.toml"), toml).unwrap();
    let args = json!({"question": "What does echo say?"}).to_string();
    let mut cmd = env.command(&[
        "call", "research", "--graphs", "graphs", "--config", "ops.toml", "--args", &args,
    ]);
    cmd.env("SANDGRAPH_CLI_TEST_LLM_KEY", "test-key");
    let o = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_ok("sandgraph call research", &o);
    let out: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(out["answer"], "It said seen:py.", "{out}");
    assert_eq!(out["steps"], 2, "{out}");
    let messages = out["messages"].as_array().expect("messages");
    let kinds: Vec<&str> = messages.iter().filter_map(|m| m["type"].as_str()).collect();
    assert_eq!(kinds, ["system", "human", "ai", "tool", "ai"], "{out}");
    let ids: Vec<&str> = messages.iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, ["msg-0", "msg-1", "msg-2", "msg-3", "msg-4"], "{out}");
    let call = &messages[2]["tool_calls"][0];
    assert_eq!(
        (&call["name"], &call["args"]),
        (&json!("echo_graph"), &json!({"input": {"topic": "py"}})),
        "{out}"
    );
    assert_eq!(messages[3]["tool_call_id"], call["id"], "{out}");
    assert_eq!(messages[3]["status"], "success", "{out}");
    let result: Value = serde_json::from_str(messages[3]["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["log"], json!(["seen:py"]), "{out}");
    assert_eq!(messages[4]["content"], "It said seen:py.", "{out}");
    let sent = llm.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].tool_names(), ["echo_graph"]);
    assert_eq!(
        sent[1].last_content("tool"),
        messages[3]["content"].as_str()
    );
}
