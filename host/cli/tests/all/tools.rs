//! `sandgraph tools list` and `sandgraph call` end to end.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Env, stderr, stdout};

/// A working folder with `graphs` in `graphs/`, its threads in
/// `threads.redb`.
fn folder(graphs: &[(&str, &str)]) -> Env {
    Env::new(graphs).with_db("threads.redb")
}

/// Asserts a failure with `error[<code>]: <message>` on stderr.
fn assert_error(o: &Output, code: &str, exit: i32, message: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(exit), "stderr: {err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("error["))
        .unwrap_or_else(|| panic!("no error line: {err}"));
    assert_eq!(line, format!("error[{code}]: {message}"));
    assert!(o.stdout.is_empty(), "nothing on stdout on failure");
}

/// A folder with two copies of one graph, a reserved name and a file that
/// is not wasm, and a compile cache of its own: the shared one remembers
/// `broken.wasm`'s failure from whichever test loaded it first, and these
/// tests state the first load's warnings.
fn messy() -> Env {
    let env = folder(&[
        ("a_echo.wasm", sandgraph_tests::ECHO),
        ("b_echo_copy.wasm", sandgraph_tests::ECHO),
        ("greet_graph.wasm", sandgraph_tests::GREET),
        ("d_reserved.wasm", sandgraph_tests::GRAPH_RESERVED_NAME),
    ])
    .cold();
    std::fs::write(env.graphs().join("broken.wasm"), "not wasm").unwrap();
    env
}

#[test]
fn tools_list_prints_a_table_and_warns_about_the_graphs_it_skipped() {
    let env = messy();
    let o = env.run(&["tools", "list", "--graphs", "graphs"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "NAME         AS_TOOL  AS_GRAPH_TOOL  DESCRIPTION\n\
         greet_graph  yes      yes            Greet someone, formally or casually.\n"
    );
    let err = stderr(&o);
    let warnings: Vec<&str> = err.lines().collect();
    let contested = "graph name \"echo_graph\" is claimed by 2 files (graphs/a_echo.wasm, \
                     graphs/b_echo_copy.wasm): none of them is mounted, so that no component \
                     takes another's name and grants; remove or rename all but one";
    assert_eq!(
        warnings,
        [
            format!("warning: graphs/a_echo.wasm: {contested}").as_str(),
            format!("warning: graphs/b_echo_copy.wasm: {contested}").as_str(),
            "warning: graphs/broken.wasm: not a wasm file: it does not start with the `\\0asm` header",
            "warning: graphs/d_reserved.wasm: the name \"run_code\" is reserved",
        ]
    );
}

#[test]
fn tools_list_json_prints_the_full_definitions() {
    let env = messy();
    let o = env.run(&["tools", "list", "--graphs", "graphs", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let defs: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let defs = defs.as_array().unwrap();
    assert_eq!(defs.len(), 1);
    let greet = &defs[0];
    let keys: Vec<&str> = greet
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "name",
            "description",
            "as_tool",
            "as_graph_tool",
            "timeout_ms",
            "input_schema",
            "output_schema",
            "source",
            "capabilities"
        ]
    );
    assert_eq!(greet["name"], json!("greet_graph"));
    assert_eq!(greet["capabilities"], json!([]));
    assert_eq!(greet["timeout_ms"], json!(30000));
    assert_eq!(greet["source"], json!("graphs/greet_graph.wasm"));
    assert_eq!(
        greet["input_schema"],
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The name to greet."},
                "style": {"type": "string", "enum": ["formal", "casual"], "description": "Greeting style."},
                "times": {"type": "integer", "description": "Repeat count.", "default": 1},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Extra tags."}
            },
            "required": ["name", "style"]
        })
    );
}

#[test]
fn strict_mode_fails_on_any_skipped_graph() {
    let env = messy();
    let o = env.run(&["tools", "list", "--graphs", "graphs", "--strict"]);
    assert_error(
        &o,
        "load",
        3,
        &format!(
            "4 graphs failed to mount (strict): graphs/a_echo.wasm: {contested}; \
             graphs/b_echo_copy.wasm: {contested}; graphs/broken.wasm: not a wasm file: it does \
             not start with the `\\0asm` header; graphs/d_reserved.wasm: the name \"run_code\" is \
             reserved",
            contested = "graph name \"echo_graph\" is claimed by 2 files (graphs/a_echo.wasm, \
                         graphs/b_echo_copy.wasm): none of them is mounted, so that no component \
                         takes another's name and grants; remove or rename all but one"
        ),
    );
}

#[test]
fn a_missing_folder_is_invalid_input() {
    let env = folder(&[]);
    let o = env.run(&["tools", "list", "--graphs", "nope"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("error[invalid_input]: cannot read graph folder nope: "),
        "{}",
        stderr(&o)
    );
}

#[test]
fn call_validates_runs_and_prints_pretty_json() {
    let env = messy();
    let o = env.run(&[
        "call",
        "greet_graph",
        "--graphs",
        "graphs",
        "--args",
        r#"{"name":"Ada","style":"formal"}"#,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "{\n  \"name\": \"Ada\",\n  \"style\": \"formal\",\n  \"tags\": [],\n  \"greeting\": \"Good day, Ada.\"\n}\n"
    );
    // A graph without parameters takes `input`; arguments from a file.
    // (The messy folder's two copies of echo_graph refuse each other, and
    // neither is named after it.)
    std::fs::remove_file(env.graphs().join("b_echo_copy.wasm")).unwrap();
    std::fs::rename(
        env.graphs().join("a_echo.wasm"),
        env.graphs().join("echo_graph.wasm"),
    )
    .unwrap();
    std::fs::write(env.path("args.json"), r#"{"input": {"topic": "hi"}}"#).unwrap();
    let o = env.run(&[
        "call",
        "echo_graph",
        "--graphs",
        "graphs",
        "--args",
        "@args.json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v, json!({"topic": "hi", "log": ["seen:hi"]}));
}

#[test]
fn call_errors_have_codes_and_exit_codes() {
    let env = folder(&[
        ("echo_graph.wasm", sandgraph_tests::ECHO),
        ("greet_graph.wasm", sandgraph_tests::GREET),
    ]);
    let call =
        |name: &str, args: &str| env.run(&["call", name, "--graphs", "graphs", "--args", args]);
    assert_error(
        &call("greet_graph", r#"{"style":"loud","times":1.5,"tags":[1]}"#),
        "INVALID_ARGS",
        13,
        "invalid arguments: missing required property \"arguments.name\"; \"arguments.style\" \
         must be one of [\"formal\",\"casual\"]; \"arguments.times\" must be an integer; \
         \"arguments.tags[0]\" must be a string",
    );
    assert_error(
        &call(
            "greet_graph",
            r#"{"name":"Ada","style":"formal","times":11}"#,
        ),
        "validation",
        14,
        "times must be at most 10",
    );
    assert_error(
        &call("nope", "{}"),
        "invalid_input",
        2,
        "no graph tool named \"nope\"; available: echo_graph, greet_graph",
    );
    let o = call("greet_graph", "{not json");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("error[invalid_input]: --args is not valid json: key must be a string"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_operator_config_overrides_flags_and_limits() {
    let env = folder(&[
        ("greet_graph.wasm", sandgraph_tests::GREET),
        (
            "hostile_infinite_loop.wasm",
            sandgraph_tests::HOSTILE_INFINITE_LOOP,
        ),
    ]);
    // ./sandgraph.toml is read by default.
    std::fs::write(
        env.path("sandgraph.toml"),
        "[graphs.greet_graph]\nas_tool = false\n\n[graphs.hostile_infinite_loop]\nas_graph_tool = false\ntimeout_ms = 200\n",
    )
    .unwrap();
    let o = env.run(&["tools", "list", "--graphs", "graphs"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "NAME                   AS_TOOL  AS_GRAPH_TOOL  DESCRIPTION\n\
         greet_graph            no       yes            Greet someone, formally or casually.\n\
         hostile_infinite_loop  no       no             Graph \"hostile_infinite_loop\" with node spin; state keys: none.\n"
    );
    let o = env.run(&[
        "call",
        "hostile_infinite_loop",
        "--graphs",
        "graphs",
        "--args",
        r#"{"input": {}}"#,
    ]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("timeout of 200 ms"), "{}", stderr(&o));

    // --config names another file; its errors name the file and position.
    std::fs::write(env.path("bad.toml"), "[limits]\ntimeout = 3\n").unwrap();
    let o = env.run(&[
        "tools", "list", "--graphs", "graphs", "--config", "bad.toml",
    ]);
    assert_error(
        &o,
        "invalid_input",
        2,
        "bad.toml:2:1: unknown field `timeout`, expected one of `timeout_ms`, `fuel`, `memory_mb`, `recursion_limit`, `host_memory_mb`, `instances`",
    );

    // Limit flags cap the call.
    std::fs::remove_file(env.path("sandgraph.toml")).unwrap();
    let o = env.run(&[
        "call",
        "hostile_infinite_loop",
        "--graphs",
        "graphs",
        "--args",
        r#"{"input": {}}"#,
        "--timeout-ms",
        "150",
    ]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("timeout of 150 ms"), "{}", stderr(&o));
}

#[test]
fn an_interrupted_call_exits_20_with_the_thread_id() {
    let env = folder(&[("graph_interrupt.wasm", sandgraph_tests::GRAPH_INTERRUPT)]);
    let o = env.run(&[
        "call",
        "graph_interrupt",
        "--graphs",
        "graphs",
        "--args",
        r#"{"input": {}}"#,
        "--thread",
        "t-9",
    ]);
    assert_eq!(o.status.code(), Some(20), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["status"], json!("interrupted"));
    assert_eq!(v["thread_id"], json!("t-9"));
    assert_eq!(v["interrupts"][0]["value"], json!({"question": "approve?"}));
    // The interrupted state is on disk: another process finds the thread
    // and its pending interrupt.
    let o = env.run(&["threads", "show", "t-9"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("approve?"), "{}", stdout(&o));
    let o = env.run(&["threads", "list"]);
    assert!(stdout(&o).contains("t-9"), "{}", stdout(&o));
    // `call --resume` answers it: the second question comes, then the end.
    let resume = |answer: &str| {
        env.run(&[
            "call",
            "graph_interrupt",
            "--graphs",
            "graphs",
            "--thread",
            "t-9",
            "--resume",
            answer,
        ])
    };
    let o = resume("true");
    assert_eq!(o.status.code(), Some(20), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        v["interrupts"][0]["value"],
        json!({"question": "name?", "approved": true})
    );
    let o = resume(r#""Ada""#);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["approved"], json!(true));
    assert_eq!(v["name"], json!("Ada"));
    assert_eq!(v["log"], json!(["prepared", "asked"]));
    // Nothing is pending now; an unknown thread has nothing to resume.
    let o = resume("1");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no pending interrupt"),
        "{}",
        stderr(&o)
    );
    let o = env.run(&[
        "call",
        "graph_interrupt",
        "--graphs",
        "graphs",
        "--thread",
        "t-nope",
        "--resume",
        "1",
    ]);
    assert_error(
        &o,
        "invalid_input",
        2,
        "thread \"t-nope\" does not exist: there is nothing to resume",
    );
}

#[test]
fn configurable_keys_reach_the_nodes_from_call_and_run() {
    let env = folder(&[("graph_context.wasm", sandgraph_tests::GRAPH_CONTEXT)]);
    let o = env.run(&[
        "call",
        "graph_context",
        "--graphs",
        "graphs",
        "--args",
        r#"{"input": {}}"#,
        "--configurable",
        r#"{"tenant": "acme", "thread_id": "forged"}"#,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["context"]["configurable"], json!({"tenant": "acme"}));
    assert_eq!(v["context"]["thread_id"], Value::Null);
    let o = env.run(&[
        "run",
        "graphs/graph_context.wasm",
        "--input",
        "{}",
        "--configurable",
        r#"{"depth": 2}"#,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["context"]["configurable"], json!({"depth": 2}));
    let o = env.run(&[
        "run",
        "graphs/graph_context.wasm",
        "--input",
        "{}",
        "--configurable",
        "[1]",
    ]);
    assert_error(
        &o,
        "invalid_input",
        2,
        "--configurable must be a JSON object of configurable keys, not an array",
    );
}

#[test]
fn the_compile_cache_is_written_where_told_and_not_at_all_with_no_cache() {
    let env = folder(&[("greet_graph.wasm", sandgraph_tests::GREET)]).cold();
    let args = r#"{"name":"Ada","style":"casual"}"#;
    let o = env.run(&[
        "call",
        "greet_graph",
        "--graphs",
        "graphs",
        "--args",
        args,
        "--no-cache",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !env.path("cache").exists(),
        "--no-cache wrote the default cache"
    );
    let o = env.run(&[
        "call",
        "greet_graph",
        "--graphs",
        "graphs",
        "--args",
        args,
        "--cache",
        "c/x",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(env.path("c/x/key").is_file());
    assert!(env.path("c/x/v1/specs").is_dir());
    // Warm: same output.
    let warm = env.run(&[
        "call",
        "greet_graph",
        "--graphs",
        "graphs",
        "--args",
        args,
        "--cache",
        "c/x",
    ]);
    assert!(warm.status.success(), "{}", stderr(&warm));
    assert_eq!(stdout(&warm), stdout(&o));
    // The default from the environment.
    let o = env.run(&["call", "greet_graph", "--graphs", "graphs", "--args", args]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(env.path("cache/key").is_file());
}

/// Reads lines from the child's stdout until one satisfies `want`.
fn read_until(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    want: &str,
) -> Vec<String> {
    let mut seen = Vec::new();
    for line in lines {
        let line = line.unwrap();
        let done = line == want;
        seen.push(line);
        if done {
            return seen;
        }
    }
    panic!("stdout ended before {want:?}: {seen:?}");
}

#[test]
fn tools_list_watch_prints_changes_as_they_happen() {
    let env = folder(&[("echo_graph.wasm", sandgraph_tests::ECHO)]);
    let mut child = env
        .command(&["tools", "list", "--graphs", "graphs", "--watch"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // Kill the child if the test fails on the way.
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _child = Kill(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut lines = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(30)).ok());
    read_until(
        &mut lines,
        "echo_graph  yes      yes            Echo the given topic.",
    );
    let greet = env.graphs().join("greet_graph.wasm");
    deploy(&greet, sandgraph_tests::GREET);
    read_until(
        &mut lines,
        "mounted greet_graph from graphs/greet_graph.wasm",
    );
    std::fs::remove_file(env.graphs().join("echo_graph.wasm")).unwrap();
    read_until(
        &mut lines,
        "unmounted echo_graph from graphs/echo_graph.wasm",
    );
}

/// Copies `component` to `path` through a temporary name.
fn deploy(path: &Path, component: &str) {
    let tmp = path.with_extension("part");
    std::fs::copy(component, &tmp).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The key the llm tests hand the binary; unusual so a leak is obvious.
const LLM_KEY: &str = "sk-cli-tools-test-8bX2";

/// `sandgraph call graph_llm` with `toml` as `file` (given with
/// `--config` when `flag`), the key in the child's environment.
async fn call_llm(env: &Env, file: &str, toml: String, flag: bool) -> Output {
    std::fs::write(env.path(file), toml).unwrap();
    let mut args = vec!["call", "graph_llm", "--graphs", "graphs", "--args"];
    args.push(r#"{"input": {"question": "hi?"}}"#);
    if flag {
        args.extend(["--config", file]);
    }
    let mut cmd = env.command(&args);
    cmd.env("SANDGRAPH_CLI_TEST_LLM_KEY", LLM_KEY);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_serves_the_llm_grant_of_the_config_and_shows_capabilities() {
    let server =
        sandgraph_test_llm::ScriptedLlm::start([sandgraph_test_llm::Reply::text("hello")]).await;
    let env = folder(&[("graph_llm.wasm", sandgraph_tests::GRAPH_LLM)]);
    let toml = format!(
        "[llm]\nbase_url = \"{}\"\napi_key_env = \"SANDGRAPH_CLI_TEST_LLM_KEY\"\n\
         [llm.models]\nfast = \"deepseek-chat\"\n\
         [graphs.graph_llm.grants]\nllm = {{ models = [\"fast\"], max_calls = 3 }}\n",
        server.base_url()
    );
    let o = call_llm(&env, "ops.toml", toml.clone(), true).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let out: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(out["answers"][0]["content"], json!("hello"), "{out}");
    let sent = server.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body["model"], json!("deepseek-chat"));
    assert_eq!(
        sent[0].header("authorization"),
        Some(format!("Bearer {LLM_KEY}").as_str())
    );
    // A discovered sandgraph.toml may not grant the model (nor send the
    // key to its own server): refused, and nothing is sent.
    let o = call_llm(&env, "sandgraph.toml", toml, false).await;
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "sets [graphs.graph_llm.grants].llm: a config you did not name cannot grant \
             capabilities; to use it anyway, pass --config sandgraph.toml"
        ),
        "{}",
        stderr(&o)
    );
    assert_eq!(server.requests().len(), 1);
    assert!(!stdout(&o).contains(LLM_KEY) && !stderr(&o).contains(LLM_KEY));
    std::fs::remove_file(env.path("sandgraph.toml")).unwrap();
    // What the component imports, in inspect and tools list --json.
    let o = env.run(&["inspect", sandgraph_tests::GRAPH_LLM]);
    let spec: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(spec["capabilities"], json!(["llm"]));
    let o = env.run(&["tools", "list", "--graphs", "graphs", "--json"]);
    let defs: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(defs[0]["capabilities"], json!(["llm"]));
}

#[test]
fn a_graphs_tool_calls_are_in_the_capability_journal_allowed_or_refused() {
    let env = folder(&[
        ("graph_tools.wasm", sandgraph_tests::GRAPH_TOOLS),
        ("echo_graph.wasm", sandgraph_tests::ECHO),
    ]);
    std::fs::write(
        env.path("ops.toml"),
        "[graphs.graph_tools.grants]\ntools = { allow = [\"echo_graph\"] }\n",
    )
    .unwrap();
    let call = |tool: &str| {
        let args = json!({"input": {"tool": tool, "args": {"input": {"topic": "x"}}}}).to_string();
        env.run(&[
            "call",
            "graph_tools",
            "--graphs",
            "graphs",
            "--config",
            "ops.toml",
            "--args",
            &args,
        ])
    };
    let out = call("echo_graph");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let state: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(state["result"]["log"], json!(["seen:x"]), "{state}");
    // A refused call (a graph name with an escape sequence in it).
    let out = call("graph_tools\u{1b}[2J");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = env.run(&["journal", "--capabilities"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with("#1 graph_tools tools echo_graph allowed ["),
        "{text}"
    );
    assert!(
        lines[1].starts_with("#2 graph_tools tools graph_tools\\u{1b}[2J denied: "),
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "the escape reached the terminal");
    let out = env.run(&[
        "journal",
        "--capabilities",
        "--json",
        "--graph",
        "graph_tools",
        "--last",
        "1",
    ]);
    let row: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(row["decision"], "denied");
    assert_eq!(row["graph_digest"].as_str().map(str::len), Some(64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_llm_graph_recorded_once_replays_offline_without_a_key() {
    let server =
        sandgraph_test_llm::ScriptedLlm::start([sandgraph_test_llm::Reply::text("recorded")]).await;
    let env = folder(&[("graph_llm.wasm", sandgraph_tests::GRAPH_LLM)]);
    let toml = format!(
        "[llm]\nbase_url = \"{}\"\napi_key_env = \"SANDGRAPH_CLI_TEST_LLM_KEY\"\n\
         [llm.models]\nfast = \"deepseek-chat\"\n\
         [graphs.graph_llm.grants]\nllm = {{ models = [\"fast\"] }}\n",
        server.base_url()
    );
    std::fs::write(env.path("ops.toml"), toml).unwrap();
    let run = |extra: &[&str], key: bool| {
        let mut args = vec![
            "call",
            "graph_llm",
            "--graphs",
            "graphs",
            "--config",
            "ops.toml",
            "--args",
            r#"{"input": {"question": "hi?"}}"#,
        ];
        args.extend_from_slice(extra);
        let mut cmd = env.command(&args);
        if key {
            cmd.env("SANDGRAPH_CLI_TEST_LLM_KEY", LLM_KEY);
        } else {
            cmd.env_remove("SANDGRAPH_CLI_TEST_LLM_KEY");
        }
        cmd.output().unwrap()
    };
    let cassette = env.path("c.jsonl");
    let cassette = cassette.to_str().unwrap();
    let o = tokio::task::block_in_place(|| run(&["--record", cassette], true));
    assert!(o.status.success(), "{}", stderr(&o));
    let recorded: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(recorded["answers"][0]["content"], json!("recorded"));
    assert_eq!(server.requests().len(), 1);
    let text = std::fs::read_to_string(cassette).unwrap();
    assert!(!text.contains(LLM_KEY), "the key reached the cassette");
    // Offline, without the key: the same answer, nothing sent.
    let o = tokio::task::block_in_place(|| run(&["--replay", cassette], false));
    assert!(o.status.success(), "{}", stderr(&o));
    let replayed: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(replayed["answers"], recorded["answers"]);
    assert_eq!(server.requests().len(), 1);
    // A request the cassette never saw fails clearly (as the node's error).
    let mut args = vec!["--replay", cassette];
    let o = tokio::task::block_in_place(|| {
        let mut cmd = env.command(&[
            "call",
            "graph_llm",
            "--graphs",
            "graphs",
            "--config",
            "ops.toml",
            "--args",
            r#"{"input": {"question": "something else"}}"#,
        ]);
        cmd.args(args.drain(..));
        cmd.output().unwrap()
    });
    let out: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let error = &out["answers"][0]["error"];
    assert_eq!(error["kind"], json!("provider"), "{out}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("has no (more) recorded answers"),
        "{out}"
    );
}

/// A PostgreSQL URL's password is never printed: not in the warning of a
/// capability journal whose database cannot be reached (a connection that
/// fails), nor in an error that names the database after connecting.
#[test]
fn a_postgres_password_is_never_printed() {
    // A port nothing listens on: the connection is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let unreachable = format!("postgres://sandgraph:s3cret-pw@127.0.0.1:{port}/sg");
    // Without --thread, `call` journals to $SANDGRAPH_DB when a capability
    // call is made.
    let env = folder(&[("graph_tools.wasm", sandgraph_tests::GRAPH_TOOLS)])
        .with_log("warn")
        .with_var("SANDGRAPH_DB", &unreachable);
    let args = json!({"input": {"tool": "nope", "args": {}}}).to_string();
    let out = env.run(&["call", "graph_tools", "--graphs", "graphs", "--args", &args]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("cannot journal capability calls"), "{err}");
    let shown = format!("postgres://sandgraph:***@127.0.0.1:{port}/sg");
    assert!(err.contains(&shown), "{err}");
    assert!(!err.contains("s3cret-pw"), "{err}");

    // Connected: the test cluster trusts loopback, so any password works.
    let pg = sandgraph_tests::postgres::TestPostgres::shared();
    let url = pg.fresh_db("password_never_printed").replacen(
        "postgres://sandgraph@",
        "postgres://sandgraph:s3cret-pw@",
        1,
    );
    assert!(url.contains("s3cret-pw"), "{url}");
    let out = env.run(&["threads", "show", "nope", "--db", &url]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no thread \"nope\" in postgres://sandgraph:***@127.0.0.1:"),
        "{err}"
    );
    assert!(!err.contains("s3cret-pw"), "{err}");
}

/// A compile cache whose key is a symbolic link (to a good key elsewhere)
/// is refused with a warning naming the file; the call still runs,
/// compiled without the cache.
#[cfg(unix)]
#[test]
fn a_symlinked_compile_cache_key_is_refused() {
    let env = folder(&[("greet_graph.wasm", sandgraph_tests::GREET)]).cold();
    let planted = env.path("planted.key");
    std::fs::write(&planted, [7u8; 32]).unwrap();
    std::fs::create_dir(env.path("cache")).unwrap();
    std::os::unix::fs::symlink(&planted, env.path("cache/key")).unwrap();
    let args = r#"{"name":"Ada","style":"casual"}"#;
    let o = env.run(&["call", "greet_graph", "--graphs", "graphs", "--args", args]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let key = env.path("cache/key");
    assert!(
        err.contains(&format!(
            "warning: compile cache unavailable, compiling without it: compile cache key {}: \
             is a symbolic link: refused",
            key.display()
        )),
        "{err}"
    );
}
