//! `sandgraph route` and `sandgraph journal` end to end, against a real
//! OpenAI-compatible server on loopback.

use std::path::Path;
use std::process::Output;

use sandgraph_test_llm::{Reply, ScriptedLlm};
use serde_json::{Value, json};

use crate::common::{Env, output_off_runtime, stderr, stdout};

/// A working folder with echo and greet in `graphs/` (see [`folder_with`]).
fn folder() -> Env {
    folder_with(&[
        ("echo_graph.wasm", sandgraph_tests::ECHO),
        ("greet_graph.wasm", sandgraph_tests::GREET),
    ])
}

/// A working folder with `graphs/` holding `graphs` ((file name, component)
/// pairs), its commands logging at debug, its data in `data.redb`.
fn folder_with(graphs: &[(&str, &str)]) -> Env {
    Env::new(graphs).with_log("debug").with_db("data.redb")
}

/// `sandgraph route REQUEST --graphs graphs --base-url URL ...extra` in
/// `env`, run off the async runtime so the scripted server keeps serving.
async fn route(env: &Env, server: &ScriptedLlm, request: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "route".to_owned(),
        request.to_owned(),
        "--graphs".to_owned(),
        "graphs".to_owned(),
        "--base-url".to_owned(),
        server.base_url(),
        "--model".to_owned(),
        "test-model".to_owned(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    run(env, args, &[]).await
}

/// `sandgraph ARGS` in `env` with the variables `vars` set.
async fn run(env: &Env, args: Vec<String>, vars: &[(&str, &str)]) -> Output {
    run_in(env, env.dir.path(), args, vars).await
}

/// [`run`] with `cwd` as the working directory.
async fn run_in(env: &Env, cwd: &Path, args: Vec<String>, vars: &[(&str, &str)]) -> Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = env.command(&args);
    cmd.current_dir(cwd).envs(vars.iter().copied());
    output_off_runtime(cmd).await
}

#[tokio::test(flavor = "multi_thread")]
async fn route_prints_the_choice_and_the_journal_records_it() {
    let env = folder();
    let server = ScriptedLlm::start([
        Reply::tool_call("greet_graph", r#"{"name":"Ada","style":"loud"}"#),
        Reply::tool_call("greet_graph", r#"{"name":"Ada","style":"casual"}"#),
    ])
    .await;
    let out = route(&env, &server, "greet Ada casually", &[]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let printed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        printed,
        json!({
            "tool": "greet_graph",
            "args": {"name": "Ada", "style": "casual"},
            "result": {"name": "Ada", "style": "casual", "tags": [], "greeting": "Hey Ada!"},
            "attempts": 2,
        })
    );
    // No local server needs a key: none was sent.
    assert_eq!(server.requests()[0].header("authorization"), None);

    let journal = run(&env, vec!["journal".into(), "--json".into()], &[]).await;
    assert!(journal.status.success(), "{}", stderr(&journal));
    let rows: Vec<Value> = stdout(&journal)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["decision"], "rejected");
    assert_eq!(rows[0]["stage"], "invalid_args");
    assert_eq!(rows[0]["request"], "greet Ada casually");
    assert_eq!(rows[1]["decision"], "accepted");
    assert_eq!(rows[1]["outcome"]["greeting"], "Hey Ada!");
    assert_eq!(rows[0]["route_id"], rows[1]["route_id"]);

    let text = run(&env, vec!["journal".into()], &[]).await;
    let text = stdout(&text);
    assert!(
        text.starts_with("request: greet Ada casually\n#1 route-"),
        "{text}"
    );
    assert!(
        text.contains(
            " attempt 1 rejected (invalid_args) greet_graph {\"name\":\"Ada\",\"style\":\"loud\"}"
        ),
        "{text}"
    );
    assert!(text.contains("    reason: invalid arguments: \"arguments.style\" must be one of [\"formal\",\"casual\"]"), "{text}");
    assert!(text.contains(" attempt 2 accepted greet_graph "), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn plain_text_prints_fallback_true() {
    let env = folder();
    let server = ScriptedLlm::start([Reply::text("no tool fits")]).await;
    let out = route(&env, &server, "what time is it", &["--no-journal"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let printed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        printed,
        json!({"tool": "graph_routing_fallback", "args": {}, "result": {}, "attempts": 1, "fallback": true})
    );
    assert!(
        !env.path("data.redb").exists(),
        "--no-journal opened no database"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_reply_fallback_and_configurable_keys_from_the_command_line() {
    let env = folder_with(&[("graph_context.wasm", sandgraph_tests::GRAPH_CONTEXT)]);
    let server = ScriptedLlm::start([
        Reply::text("no tool fits"),
        Reply::tool_call("graph_context", r#"{"input":{}}"#),
    ])
    .await;
    let out = route(
        &env,
        &server,
        "what time is it",
        &["--no-journal", "--fallback-reply", "I only run graphs."],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let printed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(printed["tool"], "graph_routing_fallback");
    assert_eq!(printed["result"], json!({"reply": "I only run graphs."}));
    let out = route(
        &env,
        &server,
        "show the context",
        &["--no-journal", "--configurable", r#"{"tenant":"acme"}"#],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let printed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        printed["result"]["context"]["configurable"],
        json!({"tenant": "acme"})
    );
    // A graph and a reply cannot both be the fallback.
    std::fs::write(
        env.path("sandgraph.toml"),
        "[routing]\nfallback = \"graph_context\"\nfallback_reply = \"hi\"\n",
    )
    .unwrap();
    let out = route(&env, &server, "x", &["--no-journal"]).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            "[routing]: set fallback (a graph) or fallback_reply (a host reply), not both"
        ),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_key_is_sent_but_never_printed() {
    let env = folder();
    let key = "sk-test-3f9a1c-very-secret";
    let server = ScriptedLlm::start([
        Reply::status(
            401,
            &format!(r#"{{"error":{{"message":"Incorrect API key provided: {key}","type":"invalid_request_error","code":"invalid_api_key"}}}}"#),
        ),
    ])
    .await;
    let out = run(
        &env,
        vec![
            "route".into(),
            "echo hi".into(),
            "--graphs".into(),
            "graphs".into(),
            "--base-url".into(),
            server.base_url(),
            "--api-key-env".into(),
            "SANDGRAPH_CLI_TEST_KEY".into(),
        ],
        &[("SANDGRAPH_CLI_TEST_KEY", key)],
    )
    .await;
    assert_eq!(out.status.code(), Some(17), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("error[auth]: model call failed: authentication failed (401)"),
        "{err}"
    );
    assert!(
        err.contains("SANDGRAPH_CLI_TEST_KEY"),
        "the message names the variable: {err}"
    );
    assert!(
        !err.contains(key) && !stdout(&out).contains(key),
        "the key leaked: {err}"
    );
    // The key did reach the server.
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some(format!("Bearer {key}").as_str())
    );
    // Nor is it in the journal.
    let journal = run(&env, vec!["journal".into(), "--json".into()], &[]).await;
    assert!(!stdout(&journal).contains(key));
    assert!(
        stdout(&journal).contains("\"decision\":\"error\""),
        "{}",
        stdout(&journal)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_key_for_a_remote_provider_fails_before_any_call() {
    let env = folder();
    let out = run(
        &env,
        vec![
            "route".into(),
            "echo hi".into(),
            "--graphs".into(),
            "graphs".into(),
        ],
        &[],
    )
    .await;
    assert_eq!(out.status.code(), Some(17), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("error[missing_key]"), "{err}");
    assert!(err.contains("DEEPSEEK_API_KEY"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rate_limit_is_retried_after_retry_after() {
    let env = folder();
    let server = ScriptedLlm::start([
        Reply::status(429, r#"{"error":{"message":"slow down"}}"#).with_header("Retry-After", "1"),
        Reply::tool_call("echo_graph", r#"{"input":{"topic":"hi"}}"#),
    ])
    .await;
    let out = route(&env, &server, "echo hi", &["--no-journal"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let printed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        printed["result"],
        json!({"topic": "hi", "log": ["seen:hi"]})
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn exhausted_retries_and_bad_filters_have_their_exit_codes() {
    let env = folder();
    let server = ScriptedLlm::start([
        Reply::tool_call("nope", "{}"),
        Reply::tool_call("nope", "{}"),
    ])
    .await;
    let out = route(&env, &server, "x", &["--max-retries", "1", "--no-journal"]).await;
    assert_eq!(out.status.code(), Some(18), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("error[routing_exhausted]: routing failed after 2 attempts: unknown tool \"nope\"; choose one of: echo_graph, greet_graph"),
        "{}",
        stderr(&out)
    );

    let server = ScriptedLlm::start([]).await;
    let out = route(&env, &server, "x", &["--allow", "echo_graph,ghost"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("error[routing_config]: routing configuration: filter allow names unknown graph tool \"ghost\""),
        "{}",
        stderr(&out)
    );
    assert!(server.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_config_file_sets_the_model_and_the_policy() {
    let env = folder();
    let server = ScriptedLlm::start([
        Reply::tool_call("greet_graph", r#"{"name":"Ada","style":"casual"}"#),
        Reply::tool_call("echo_graph", r#"{"input":{"topic":"hi"}}"#),
    ])
    .await;
    std::fs::write(
        env.path("sandgraph.toml"),
        format!(
            "[llm]\nbase_url = \"{}\"\nmodel = \"from-config\"\n\n[policy]\ndeny_tools = [\"greet_graph\"]\n",
            server.base_url()
        ),
    )
    .unwrap();
    // Found in the working directory, it may name a local server: with no
    // key set (DEEPSEEK_API_KEY is removed) no key would be sent.
    let out = run(
        &env,
        vec![
            "route".into(),
            "hi".into(),
            "--graphs".into(),
            "graphs".into(),
            "--no-journal".into(),
        ],
        &[],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let requests = server.requests();
    assert_eq!(requests[0].body["model"], "from-config");
    assert_eq!(
        requests[1].messages().last().unwrap()["content"],
        "rejected: \"greet_graph\" is denied by policy\nChoose a tool again and call it with corrected arguments."
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_thread_the_chosen_graph_continues_its_state() {
    let env = folder();
    let server = ScriptedLlm::start([
        Reply::tool_call("echo_graph", r#"{"input":{"topic":"one"}}"#),
        Reply::tool_call("echo_graph", r#"{"input":{"topic":"two"}}"#),
    ])
    .await;
    let first = route(
        &env,
        &server,
        "echo one",
        &["--thread", "t1", "--no-journal"],
    )
    .await;
    assert!(first.status.success(), "{}", stderr(&first));
    let second = route(
        &env,
        &server,
        "echo two",
        &["--thread", "t1", "--no-journal"],
    )
    .await;
    assert!(second.status.success(), "{}", stderr(&second));
    let printed: Value = serde_json::from_str(&stdout(&second)).unwrap();
    assert_eq!(
        printed["result"],
        json!({"topic": "two", "log": ["seen:one", "seen:two"]})
    );
    // The thread is t1/echo_graph in the database.
    let threads = run(&env, vec!["threads".into(), "list".into()], &[]).await;
    assert!(
        stdout(&threads).contains("\"t1/echo_graph\""),
        "{}",
        stdout(&threads)
    );
}

/// `route REQUEST --graphs GRAPHS --no-journal` and `extra`, as strings.
fn route_args(request: &str, graphs: &str, extra: &[&str]) -> Vec<String> {
    ["route", request, "--graphs", graphs, "--no-journal"]
        .iter()
        .chain(extra)
        .map(|s| (*s).to_owned())
        .collect()
}

const KEY: &str = "sk-test-discovered-config";

/// The thread `id` as a fresh open of `db` finds it.
fn stored_thread(db: &Path, id: &str) -> sandgraph_core::ThreadState {
    let store = sandgraph_store::Store::open(db).unwrap();
    let state = store.threads().load(id).unwrap();
    state.unwrap_or_else(|| panic!("no thread {id} in {}", db.display()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_discovered_config_cannot_send_the_key_to_another_host() {
    let env = folder();
    let server = ScriptedLlm::start([]).await;
    std::fs::write(
        env.path("sandgraph.toml"),
        format!("[llm]\nbase_url = \"{}\"\n", server.base_url()),
    )
    .unwrap();
    let key = [("DEEPSEEK_API_KEY", KEY)];
    let out = run(&env, route_args("echo hi", "graphs", &[]), &key).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).lines().last().unwrap(),
        format!(
            "error[invalid_input]: sandgraph.toml (found in the working directory or above it, \
             not given with --config) sets [llm].base_url: the API key in DEEPSEEK_API_KEY \
             would go to {}, not https://api.deepseek.com; to send it there, pass --config \
             sandgraph.toml or name the URL with --base-url",
            server.base_url()
        )
    );
    // Found from a folder below too, and named by its full path.
    std::fs::create_dir(env.path("sub")).unwrap();
    let out = run_in(
        &env,
        &env.path("sub"),
        route_args("echo hi", "../graphs", &[]),
        &key,
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let found = env.path("sandgraph.toml").canonicalize().unwrap();
    let (err, found) = (stderr(&out), found.display());
    assert!(
        err.contains(&format!(
            "error[invalid_input]: {found} (found in the working"
        )) && err.ends_with(&format!(
            "pass --config {found} or name the URL with --base-url\n"
        )),
        "{err}"
    );
    // A file that names the variable is refused the same way.
    std::fs::write(
        env.path("sandgraph.toml"),
        format!(
            "[llm]\nbase_url = \"{}\"\napi_key_env = \"SANDGRAPH_ROUTE_TEST_SECRET\"\n",
            server.base_url()
        ),
    )
    .unwrap();
    let out = run(
        &env,
        route_args("echo hi", "graphs", &[]),
        &[("SANDGRAPH_ROUTE_TEST_SECRET", KEY)],
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the API key in SANDGRAPH_ROUTE_TEST_SECRET would go to"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains(KEY));
    assert!(
        server.requests().is_empty(),
        "the server was never asked: {:?}",
        server.requests().len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_operator_accepts_another_host_with_config_or_base_url_and_v_says_which() {
    let env = folder();
    let call = || Reply::tool_call("echo_graph", r#"{"input":{"topic":"hi"}}"#);
    let server = ScriptedLlm::start([call(), call()]).await;
    std::fs::write(
        env.path("sandgraph.toml"),
        format!("[llm]\nbase_url = \"{}\"\n", server.base_url()),
    )
    .unwrap();
    let key = [("DEEPSEEK_API_KEY", KEY)];
    // The same file given with --config is the operator's word.
    let out = run(
        &env,
        route_args("echo hi", "graphs", &["--config", "sandgraph.toml", "-v"]),
        &key,
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let printed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(printed["result"]["topic"], "hi");
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "config: sandgraph.toml (given with --config)\nbase url: {} (from the config)\n\
             api key: DEEPSEEK_API_KEY (the default, set)\n",
            server.base_url()
        )),
        "{err}"
    );
    assert!(!err.contains(KEY), "{err}");
    // So is a URL named with --base-url, over the discovered file.
    let out = run(
        &env,
        route_args(
            "echo hi",
            "graphs",
            &["--base-url", &server.base_url(), "--verbose"],
        ),
        &key,
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "config: sandgraph.toml (found in the working directory or above it)\n\
             base url: {} (from the flag)\n",
            server.base_url()
        )),
        "{}",
        stderr(&out)
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn v_says_no_config_and_the_default_url_and_escapes_what_it_prints() {
    let env = folder();
    // No key for the default host: the model call fails, after -v spoke.
    let out = run(&env, route_args("x", "graphs", &["-v"]), &[]).await;
    assert_eq!(out.status.code(), Some(17), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with(
            "config: none (the built-in defaults)\nbase url: https://api.deepseek.com (the default)\n\
             api key: DEEPSEEK_API_KEY (the default, not set)\n"
        ),
        "{}",
        stderr(&out)
    );
    // A file name with a control character is printed inert.
    let odd = "odd\u{1b}[31m.toml";
    std::fs::write(env.path(odd), "[llm]\nmodel = \"m\"\n").unwrap();
    let out = run(
        &env,
        route_args("x", "graphs", &["-v", "--config", odd]),
        &[],
    )
    .await;
    let err = stderr(&out);
    assert!(
        err.starts_with("config: odd\\u{1b}[31m.toml (given with --config)\n"),
        "{err}"
    );
    assert!(!err.contains('\u{1b}'), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_routed_run_is_on_disk_when_route_returns() {
    let env = folder_with(&[("graph_interrupt.wasm", sandgraph_tests::GRAPH_INTERRUPT)]);
    let server = ScriptedLlm::start([Reply::tool_call("graph_interrupt", r#"{"input":{}}"#)]).await;
    let db = env.path("threads.redb");
    let on_thread = ["--thread", "t1", "--db", db.to_str().unwrap()];
    let out = route(&env, &server, "ask for approval", &on_thread).await;
    // As `run` and `call`: an interrupted run exits 20, and says so.
    assert_eq!(out.status.code(), Some(20), "{}", stderr(&out));
    let printed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(printed["interrupted"], true);
    assert_eq!(printed["result"]["status"], "interrupted");
    assert_eq!(printed["result"]["thread_id"], "t1/graph_interrupt");
    // The process is gone; a fresh open of the file finds the thread
    // waiting at its interrupt.
    let state = stored_thread(&db, "t1/graph_interrupt");
    let interrupts = state.pending_interrupts();
    assert_eq!(interrupts.len(), 1, "{interrupts:?}");
    assert_eq!(interrupts[0].value, json!({"question": "approve?"}));
    assert_eq!(state.checkpoint.values["log"], json!(["prepared"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fallback_graph_runs_on_the_thread_too() {
    let env = folder_with(&[
        ("echo_graph.wasm", sandgraph_tests::ECHO),
        ("graph_fallback.wasm", sandgraph_tests::GRAPH_FALLBACK),
    ]);
    let server = ScriptedLlm::start([Reply::text("no tool fits")]).await;
    let db = env.path("threads.redb");
    let (fallback, db_arg) = ("graph_fallback", db.to_str().unwrap());
    let args = ["--fallback", fallback, "--thread", "t2", "--db", db_arg];
    let out = route(&env, &server, "what time is it", &args).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let printed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(printed["fallback"], true);
    assert_eq!(printed.get("interrupted"), None, "{printed}");
    assert_eq!(printed["result"]["handled"], "fallback");
    // Like a chosen graph, the fallback ran on <thread>/<tool>, and a
    // fresh open of the file finds it.
    let state = stored_thread(&db, "t2/graph_fallback");
    assert_eq!(state.checkpoint.values["handled"], "fallback");
    assert_eq!(state.checkpoint.values["request"], "what time is it");
}
