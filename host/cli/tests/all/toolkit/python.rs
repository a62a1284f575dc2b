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
        Lang::Python,
        "echo",
        &env,
        &["run", "echo.wasm", "--input", r#"{"topic": "wasm"}"#],
    );
    assert_ok("sandgraph run", &o);
    let state: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(state, json!({"topic": "wasm", "log": ["seen:wasm"]}));
    // The build's world leaves out the capabilities the SDK does not offer:
    // the component asks for none.
    let o = run_cached(
        Lang::Python,
        "echo",
        &env,
        &["check", "--json", "echo.wasm"],
    );
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
