//! Tests of `sandgraph check`, and of the compile cache that `run`,
//! `inspect`, `check` and `test` share (see ../toolkit.rs).

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use super::folder;
use crate::common::{Env, stderr, stdout};

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

fn check_json(env: &Env, args: &[&str]) -> (Output, Value) {
    let mut all = vec!["check", "--json"];
    all.extend_from_slice(args);
    let o = env.run(&all);
    let v = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", stdout(&o), stderr(&o)));
    (o, v)
}

fn lints(graph: &Value) -> Vec<&str> {
    graph["warnings"]
        .as_array()
        .unwrap_or_else(|| panic!("no warnings list: {graph}"))
        .iter()
        .map(|w| w["lint"].as_str().unwrap())
        .collect()
}

#[test]
fn check_reports_the_world_capabilities_size_digest_and_lints() {
    let env = folder(&[("echo_graph.wasm", sandgraph_tests::ECHO)]);
    let o = env.run(&["check", "echo_graph.wasm"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let size = std::fs::metadata(env.path("echo_graph.wasm"))
        .unwrap()
        .len();
    for line in [
        "echo_graph.wasm: graph echo_graph".to_owned(),
        "  world         sandgraph:graph@0.2.0".to_owned(),
        "  capabilities  none".to_owned(),
        format!("  size          {size} bytes"),
        format!("  sha256        {}", sha256(&env.path("echo_graph.wasm"))),
        "checked 1 graph(s): 1 loaded, 0 failed to load, 1 warning(s)".to_owned(),
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "no line {line:?} in:\n{text}"
        );
    }
    // echo is a model-visible tool without declared parameters.
    assert!(
        text.contains("  warning[no_parameters]: graph \"echo_graph\" is listed as a tool"),
        "{text}"
    );
    let (o, v) = check_json(&env, &["echo_graph.wasm"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let g = &v["graphs"][0];
    assert_eq!(g["ok"], true);
    assert_eq!(g["name"], "echo_graph");
    assert_eq!(g["world"], "sandgraph:graph@0.2.0");
    assert_eq!(g["capabilities"], serde_json::json!([]));
    assert_eq!(g["size_bytes"], size);
    assert_eq!(g["sha256"], sha256(&env.path("echo_graph.wasm")));
    assert_eq!(lints(g), ["no_parameters"]);
}

#[test]
fn deny_warnings_fails_on_a_lint_and_passes_a_clean_graph() {
    let env = folder(&[
        ("echo_graph.wasm", sandgraph_tests::ECHO),
        ("graph_fallback.wasm", sandgraph_tests::GRAPH_FALLBACK),
    ]);
    let o = env.run(&["check", "--deny-warnings", "echo_graph.wasm"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("error[lint]: 1 warning(s) with --deny-warnings"),
        "{}",
        stderr(&o)
    );
    let o = env.run(&["check", "--deny-warnings", "graph_fallback.wasm"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(!stdout(&o).contains("warning["), "{}", stdout(&o));
}

#[test]
fn the_lints_of_a_graph_without_description_or_parameters() {
    let env = folder(&[("hostile_recursion.wasm", sandgraph_tests::HOSTILE_RECURSION)]);
    let (o, v) = check_json(&env, &["hostile_recursion.wasm"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let g = &v["graphs"][0];
    assert_eq!(lints(g), ["no_parameters", "missing_description"], "{g}");
    let message = g["warnings"][1]["message"].as_str().unwrap();
    assert!(message.contains("has no description"), "{message}");
}

#[test]
fn the_capabilities_a_graph_imports_are_listed() {
    let env = folder(&[("graph_llm.wasm", sandgraph_tests::GRAPH_LLM)]);
    let (o, v) = check_json(&env, &["graph_llm.wasm"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(v["graphs"][0]["capabilities"], serde_json::json!(["llm"]));
    let o = env.run(&["check", "graph_llm.wasm"]);
    assert!(
        stdout(&o).lines().any(|l| l == "  capabilities  llm"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_folder_is_every_wasm_in_it_and_a_load_failure_exits_with_its_code() {
    let env = folder(&[("a_echo.wasm", sandgraph_tests::ECHO)]);
    env.write("b_broken.wasm", "not wasm");
    env.write("notes.txt", "not a graph");
    let o = env.run(&["check", "."]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("a_echo.wasm: graph echo_graph"), "{text}");
    assert!(
        text.contains("b_broken.wasm: failed to load: error[load]: "),
        "{text}"
    );
    assert!(
        text.contains("checked 2 graph(s): 1 loaded, 1 failed to load, 1 warning(s)"),
        "{text}"
    );
    assert!(stderr(&o).starts_with("error[load]: "), "{}", stderr(&o));
    assert!(stderr(&o).contains("b_broken.wasm"), "{}", stderr(&o));
    let (o, v) = check_json(&env, &["."]);
    assert_eq!(o.status.code(), Some(3));
    let graphs = v["graphs"].as_array().unwrap();
    assert_eq!(graphs.len(), 2);
    assert_eq!(graphs[1]["ok"], false);
    assert_eq!(graphs[1]["error"]["code"], "load");
    let empty = tempfile::tempdir().unwrap();
    let o = env.run(&["check", empty.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("holds no *.wasm file"),
        "{}",
        stderr(&o)
    );
}

/// The compile cache's debug lines of one command.
fn cache_log(env: &Env, args: &[&str]) -> (Output, String) {
    let o = env
        .command(args)
        .env("SANDGRAPH_LOG", "sandgraph_registry=debug")
        .output()
        .unwrap();
    let log = stderr(&o);
    (o, log)
}

const COMPILED: &str = "compile cache: compiled and stored the artifact";
const LOADED: &str = "compile cache: loaded the compiled artifact";

#[test]
fn run_compiles_once_and_later_commands_load_the_cached_artifact() {
    let env = folder(&[("echo_graph.wasm", sandgraph_tests::ECHO)]).cold();
    let run = ["run", "echo_graph.wasm", "--input", r#"{"topic": "x"}"#];
    let (o, log) = cache_log(&env, &run);
    assert_eq!(o.status.code(), Some(0), "{log}");
    assert!(log.contains(COMPILED) && !log.contains(LOADED), "{log}");
    assert!(env.path("cache/key").is_file(), "the cache folder is made");
    let (o, log) = cache_log(&env, &run);
    assert_eq!(o.status.code(), Some(0), "{log}");
    assert!(log.contains(LOADED) && !log.contains(COMPILED), "{log}");
    assert!(
        log.contains("compile cache: reusing the described spec"),
        "{log}"
    );
    let state: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(state["log"], serde_json::json!(["seen:x"]));
    // inspect and check go through the same cache.
    for args in [
        &["inspect", "echo_graph.wasm"][..],
        &["check", "echo_graph.wasm"][..],
    ] {
        let (o, log) = cache_log(&env, args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {log}");
        assert!(
            log.contains(LOADED) && !log.contains(COMPILED),
            "{args:?}: {log}"
        );
    }
    // --no-cache neither reads nor writes it; --cache names another folder.
    let (_, log) = cache_log(
        &env,
        &["run", "echo_graph.wasm", "--no-cache", "--input", "{}"],
    );
    assert!(!log.contains(LOADED) && !log.contains(COMPILED), "{log}");
    let other = env.path("other");
    let mut args = run.to_vec();
    args.extend(["--cache", other.to_str().unwrap()]);
    let (_, log) = cache_log(&env, &args);
    assert!(log.contains(COMPILED), "{log}");
    assert!(other.join("key").is_file());
}

#[test]
fn a_thread_run_and_threads_update_load_the_cached_artifact() {
    let env = folder(&[("approval_graph.wasm", sandgraph_tests::APPROVAL)]).cold();
    let args = [
        "run",
        "approval_graph.wasm",
        "--thread",
        "t1",
        "--input",
        r#"{"topic": "x"}"#,
    ];
    let (o, log) = cache_log(&env, &args);
    assert_eq!(o.status.code(), Some(20), "{log}");
    assert!(log.contains(COMPILED), "{log}");
    let update = [
        "threads",
        "update",
        "t1",
        "--graph",
        "approval_graph.wasm",
        "--values",
        r#"{"topic": "y"}"#,
    ];
    let (o, log) = cache_log(&env, &update);
    assert_eq!(o.status.code(), Some(0), "{log}");
    assert!(log.contains(LOADED) && !log.contains(COMPILED), "{log}");
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["values"]["topic"], "y", "{v}");
}

/// Kills and reaps a child process when dropped (a failing test's too).
struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The files under `dir`, recursively, as paths relative to it.
fn files_under(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else {
                let relative = path.strip_prefix(dir).unwrap();
                files.push(relative.to_string_lossy().into_owned());
            }
        }
    }
    files.sort();
    files
}

/// A running `sandgraph serve` (stdio MCP, kept alive by its open stdin)
/// shares the compile cache: a `run` and a `check` of the same graph
/// beside it load the artifact the serve compiled, and `run --stream`'s
/// stderr stays JSON.
#[test]
fn a_running_serve_does_not_make_another_command_compile_cold() {
    let env = folder(&[("echo_graph.wasm", sandgraph_tests::ECHO)]).cold();
    let serve = env
        .command(&["serve", "--graphs", "."])
        .env("SANDGRAPH_LOG", "off")
        // Its own data database: the commands beside it use the folder's.
        .env("SANDGRAPH_DB", env.path("serve.redb"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut serve = Kill(serve);
    // The serve mounts the folder: it compiles the graph into the cache.
    let artifacts = env.path("cache/v1/artifacts");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !artifacts.is_dir() || files_under(&artifacts).is_empty() {
        assert!(
            serve.0.try_wait().unwrap().is_none(),
            "serve ended before compiling"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "serve compiled nothing"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let run = ["run", "echo_graph.wasm", "--input", r#"{"topic": "x"}"#];
    for args in [&run[..], &["check", "echo_graph.wasm"][..]] {
        let (o, log) = cache_log(&env, args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {log}");
        assert!(
            log.contains(LOADED) && !log.contains(COMPILED),
            "{args:?}: {log}"
        );
    }
    let o = env.run(&[
        "run",
        "echo_graph.wasm",
        "--stream",
        "--input",
        r#"{"topic": "x"}"#,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(!err.is_empty(), "--stream printed no step");
    for line in err.lines() {
        serde_json::from_str::<Value>(line)
            .unwrap_or_else(|e| panic!("stderr line is not JSON ({e}): {line}"));
    }
    assert!(
        serve.0.try_wait().unwrap().is_none(),
        "the serve kept running all along"
    );
}

/// Two `sandgraph check`s of one graph started at once on an empty cache
/// both compile it and write the same entries: both succeed, no partial
/// file is left, and the next command loads what they wrote.
#[test]
fn two_processes_writing_one_entry_at_once_both_succeed() {
    let env = folder(&[("echo_graph.wasm", sandgraph_tests::ECHO)]).cold();
    let check = |env: &Env| {
        env.command(&["check", "echo_graph.wasm"])
            .env("SANDGRAPH_LOG", "sandgraph_registry=debug")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (check(&env), check(&env));
    for child in [a, b] {
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let log = stderr(&o);
        assert!(log.contains(COMPILED) || log.contains(LOADED), "{log}");
    }
    let files = files_under(&env.path("cache"));
    assert!(
        files.iter().all(|f| !f.contains(".tmp-")),
        "a partial file is left: {files:?}"
    );
    let (o, log) = cache_log(&env, &["check", "echo_graph.wasm"]);
    assert_eq!(o.status.code(), Some(0), "{log}");
    assert!(log.contains(LOADED) && !log.contains(COMPILED), "{log}");
}
