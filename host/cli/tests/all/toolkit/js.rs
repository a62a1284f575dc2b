//! JavaScript graphs: the SDK's and the examples' node tests, `sandgraph
//! build` of a folder whose package.json has a `sandgraph` field (jco's
//! QuickJS backend, installed by `npm ci --prefix example-graphs/js`), and
//! the built component run by the host (see ../toolkit.rs).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use super::conformance::{Lang, run_cached};
use super::folder;
use super::new::assert_ok;
use super::python::{
    assert_answer_and_usage, assert_capability_journal, assert_fetched, assert_model_requests,
    call_with_grants, echo_http_server,
};
use crate::common::cargo::repo;
use crate::common::{Env, stderr, stdout};

/// What CI runs to install jco and the examples' links.
const INSTALL: &str = "npm ci --prefix example-graphs/js";

/// The jco the examples pin; the test fails, naming the install command,
/// when it is missing.
fn jco() -> PathBuf {
    let jco = repo().join("example-graphs/js/node_modules/.bin/jco");
    assert!(
        jco.is_file(),
        "jco is not installed at {}: run `{INSTALL}`",
        jco.display()
    );
    jco
}

/// `node ARGS` in `dir`; fails naming the install when node is missing.
fn node(dir: &Path, args: &[&str]) -> Output {
    Command::new("node")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run node ({e}): install Node.js 18 or later"))
}

#[test]
fn the_sdk_and_example_unit_tests_pass_under_node() {
    jco();
    for dir in ["guest-sdk/js", "example-graphs/js"] {
        let o = node(&repo().join(dir), &["--test"]);
        assert_ok(&format!("node --test in {dir}"), &o);
        let text = stdout(&o);
        assert!(
            text.lines().any(|l| l == "# fail 0") && !text.lines().any(|l| l == "# pass 0"),
            "{dir}: {text}"
        );
    }
}

/// The Js example `name`, built once per change of its inputs (see
/// [`super::conformance::built`]).
fn built(name: &str) -> PathBuf {
    jco();
    super::conformance::built(Lang::Js, name)
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
    // The component asks for no capability: the QuickJS backend imports the
    // whole world, so the build's world leaves out what the graph did not
    // ask for.
    let o = run_cached(&env, &["check", "--json", "echo.wasm"]);
    assert_ok("sandgraph check", &o);
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(report["graphs"][0]["capabilities"], json!([]), "{report}");
    assert_eq!(report["graphs"][0]["name"], "echo_graph", "{report}");
}

/// A copy of the echo example in a fresh folder, with `graph` as its main
/// module; the folder has no node_modules above it.
fn echo_copy(env: &Env, graph: &str) -> PathBuf {
    let dir = env.path("echo");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        repo().join("example-graphs/js/echo/package.json"),
        dir.join("package.json"),
    )
    .unwrap();
    std::fs::write(dir.join("graph.js"), graph).unwrap();
    dir
}

#[test]
fn a_missing_jco_names_the_install_command() {
    let env = folder(&[]);
    let dir = echo_copy(
        &env,
        &std::fs::read_to_string(repo().join("example-graphs/js/echo/graph.js")).unwrap(),
    );
    let empty = env.path("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let o = env
        .command(&["build", dir.to_str().unwrap(), "--out", "echo.wasm"])
        .env_remove("SANDGRAPH_JCO")
        .env("PATH", &empty)
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0));
    let err = stderr(&o);
    assert!(
        err.contains("jco is not installed")
            && err.contains("npm install --save-dev @bytecodealliance/jco@1.35.0"),
        "{err}"
    );
    // SANDGRAPH_JCO that points nowhere is named too.
    let o = env
        .command(&["build", dir.to_str().unwrap(), "--out", "echo.wasm"])
        .env("SANDGRAPH_JCO", env.path("nowhere/jco"))
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(
        err.contains("SANDGRAPH_JCO is ") && err.contains("not a file"),
        "{err}"
    );
}

/// `sandgraph build` of `dir` with the examples' jco, which must fail as a
/// build error (exit 12): its stderr.
fn failed_build(env: &Env, dir: &Path, out: &str) -> String {
    let o = env
        .command(&["build", dir.to_str().unwrap(), "--out", out])
        .env("SANDGRAPH_JCO", jco())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(12), "{err}");
    err
}

#[test]
fn a_syntax_error_is_a_build_error_naming_the_file_and_line() {
    let env = folder(&[]);
    let dir = echo_copy(
        &env,
        "import { StateGraph } from \"@sandgraph/sdk\";\n\nexport const graph = {\n  oops: 1 +,\n};\n",
    );
    let err = failed_build(&env, &dir, "echo.wasm");
    assert!(err.contains("bundling ") && err.contains("failed"), "{err}");
    assert!(err.contains("graph.js:4:"), "{err}");
    assert!(
        !err.contains("node_modules"),
        "the tool's own frames are left out: {err}"
    );
    assert!(!env.path("echo.wasm").exists());
}

#[test]
fn a_graph_that_compiles_badly_names_every_problem() {
    let env = folder(&[]);
    let dir = echo_copy(
        &env,
        "import { Annotation, START, StateGraph } from \"@sandgraph/sdk\";\n\
         export const graph = new StateGraph(Annotation.Root({ x: Annotation() }))\n\
         .addNode(\"a\", () => ({}))\n\
         .addEdge(START, \"a\")\n\
         .addEdge(\"a\", \"b\")\n\
         .compile({ name: \"bad name\" });\n",
    );
    let err = failed_build(&env, &dir, "bad.wasm");
    assert!(
        err.contains("jco componentize of ")
            && err.contains("the graph module threw while it was loaded: Error: the graph \"bad name\" is not valid"),
        "{err}"
    );
    assert!(!err.contains("GenericFailure"), "{err}");
    assert!(
        err.contains("graph name \"bad name\" may only contain")
            && err.contains("edge \"a\" -> \"b\": unknown target node \"b\""),
        "{err}"
    );
}

/// The echo graph in TypeScript, typed by the SDK's index.d.ts.
const ECHO_TS: &str = r#"import { Annotation, END, START, StateGraph, reducers } from "@sandgraph/sdk";

const State = Annotation.Root({
  topic: Annotation<string>(),
  log: Annotation<string[], string | string[]>({ reducer: reducers.append, default: () => [] }),
});

export const graph = new StateGraph(State)
  .addNode("echo", (state) => ({ log: [`seen:${state.topic.toUpperCase()}`] }))
  .addEdge(START, "echo")
  .addEdge("echo", END)
  .compile({ name: "echo_ts", asTool: true });
"#;

#[test]
fn a_typescript_graph_type_checks_builds_and_runs() {
    let tsc = repo().join("example-graphs/js/node_modules/.bin/tsc");
    assert!(tsc.is_file(), "tsc is not installed: run `{INSTALL}`");
    let env = folder(&[]);
    let dir = env.path("echo-ts");
    std::fs::create_dir_all(dir.join("node_modules/@sandgraph")).unwrap();
    std::fs::write(
        dir.join("package.json"),
        r#"{"type": "module", "sandgraph": {"main": "graph.ts"}}"#,
    )
    .unwrap();
    std::fs::write(dir.join("graph.ts"), ECHO_TS).unwrap();
    std::os::unix::fs::symlink(
        repo().join("guest-sdk/js"),
        dir.join("node_modules/@sandgraph/sdk"),
    )
    .unwrap();
    let checked = |source: &str| {
        std::fs::write(dir.join("graph.ts"), source).unwrap();
        Command::new(&tsc)
            .args([
                "--noEmit", "--strict", "--module", "nodenext", "--target", "es2022",
            ])
            .arg("graph.ts")
            .current_dir(&dir)
            .output()
            .unwrap()
    };
    assert_ok("tsc", &checked(ECHO_TS));
    // A node that writes a channel the state does not have, or the wrong
    // type, does not type-check.
    let wrong = ECHO_TS.replace("{ log: [`seen:", "{ lgo: [`seen:");
    assert_ne!(
        checked(&wrong).status.code(),
        Some(0),
        "a misspelt channel is a type error"
    );
    let wrong = ECHO_TS.replace("state.topic.toUpperCase()", "state.topic.toFixed()");
    assert_ne!(checked(&wrong).status.code(), Some(0), "topic is a string");
    std::fs::write(dir.join("graph.ts"), ECHO_TS).unwrap();
    // The SDK comes from the CLI, not the graph's node_modules.
    std::fs::remove_file(dir.join("node_modules/@sandgraph/sdk")).unwrap();
    let o = env
        .command(&["build", dir.to_str().unwrap(), "--out", "echo-ts.wasm"])
        .env("SANDGRAPH_JCO", jco())
        .output()
        .unwrap();
    assert_ok("sandgraph build (typescript)", &o);
    let o = env.run(&["run", "echo-ts.wasm", "--input", r#"{"topic": "ts"}"#]);
    assert_ok("sandgraph run", &o);
    let state: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(state, json!({"topic": "ts", "log": ["seen:TS"]}));
}

/// tests/polyglot/js/capabilities: async nodes await a model
/// (`ChatModel.invoke`, the scripted loopback server), two granted graph
/// tools at once (`Promise.all` over `tools.call`) and a granted loopback
/// origin (`fetch`), and all three at once; refusals arrive as typed
/// errors; every call is in the capability journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graph_with_capabilities_calls_a_model_tools_and_a_url_from_async_nodes() {
    use sandgraph_test_llm::{Reply, ScriptedLlm};
    let wasm = tokio::task::block_in_place(|| built("capabilities"));
    let llm = ScriptedLlm::start([Reply::text("hello"), Reply::text("again")]).await;
    let url = echo_http_server();
    let (env, out) = call_with_grants("js_caps", &wasm, &llm.base_url(), &url).await;
    assert_answer_and_usage(&out);
    assert_eq!(
        out["tool"],
        json!({"log": ["seen:a", "seen:b"], "refused": "denied"}),
        "{out}"
    );
    assert_fetched(&out["fetched"]);
    assert_eq!(
        out["gathered"],
        json!(["again", ["seen:async"], "/async"]),
        "{out}"
    );
    assert_model_requests(&llm);
    // Every call is journalled, allowed or refused: three calls of
    // echo_graph.
    assert_capability_journal(&env, "js_caps", &url, 3);
}

/// A graph module of the graph's own that calls a timer is refused at
/// build time, naming the call and where it is.
#[test]
fn a_graph_that_calls_a_timer_is_a_build_error() {
    let env = folder(&[]);
    let dir = echo_copy(
        &env,
        "import { Annotation, StateGraph, START } from \"@sandgraph/sdk\";\n\
         const later = () => setTimeout(() => {}, 10);\n\
         export const graph = new StateGraph(Annotation.Root({ x: Annotation() }))\n\
         .addNode(\"n\", later).addEdge(START, \"n\").compile({ name: \"t\" });\n",
    );
    let err = failed_build(&env, &dir, "t.wasm");
    assert!(
        err.contains("a graph cannot use timers (setTimeout at graph.js:2)"),
        "{err}"
    );
}

/// A LangGraph.js graph as written: `compile()` without a name (package.json
/// names it), a Command's goto target declared with `ends` only, and the
/// messages channel reduced in the graph.
const TRIAGE_JS: &str = r#"import { AIMessage, Command, END, MessagesAnnotation, START, StateGraph } from "@sandgraph/sdk";

export const graph = new StateGraph(MessagesAnnotation)
  .addNode("triage", () => new Command({ update: { messages: [new AIMessage("escalating")] }, goto: "escalate" }), { ends: ["escalate"] })
  .addNode("escalate", (state) => ({ messages: [["ai", `escalated after ${state.messages.length} messages`]] }))
  .addEdge(START, "triage")
  .addEdge("escalate", END)
  .compile();
"#;

/// `sandgraph build DIR --out OUT` with the examples' jco.
fn build(env: &Env, dir: &Path, out: &str) -> Output {
    env.command(&["build", dir.to_str().unwrap(), "--out", out])
        .env("SANDGRAPH_JCO", jco())
        .output()
        .unwrap()
}

#[test]
fn a_langgraph_graph_builds_unnamed_with_goto_declared_by_ends() {
    let env = folder(&[]);
    let dir = env.path("triage");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("package.json"),
        r#"{"name": "@acme/triage.v2", "type": "module", "sandgraph": {"main": "graph.js"}}"#,
    )
    .unwrap();
    std::fs::write(dir.join("graph.js"), TRIAGE_JS).unwrap();
    let o = build(&env, &dir, "triage.wasm");
    assert_ok("sandgraph build", &o);
    let o = env.run(&["inspect", "triage.wasm"]);
    assert_ok("sandgraph inspect", &o);
    let spec: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(spec["name"], "triage_v2", "{spec}");
    let o = env.run(&["run", "triage.wasm", "--input", r#"{"messages": ["help"]}"#]);
    assert_ok("sandgraph run", &o);
    let state: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        state,
        json!({"messages": [
            {"type": "human", "content": "help", "id": "msg-0"},
            {"type": "ai", "content": "escalating", "id": "msg-1", "tool_calls": []},
            {"type": "ai", "content": "escalated after 2 messages", "id": "msg-2", "tool_calls": []},
        ]})
    );

    // Without a package name the build says how to name the graph.
    std::fs::write(
        dir.join("package.json"),
        r#"{"type": "module", "sandgraph": {"main": "graph.js"}}"#,
    )
    .unwrap();
    let o = build(&env, &dir, "unnamed.wasm");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(12), "{err}");
    assert!(
        err.contains(
            "graph name is empty: compile({ name: \"my_graph\" }), or give package.json a \"name\""
        ),
        "{err}"
    );
}
