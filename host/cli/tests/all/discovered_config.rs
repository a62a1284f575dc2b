//! A `sandgraph.toml` the operator did not name (found in the working
//! directory or a folder above it) cannot widen a sandbox: it is read only
//! when it is the user's own and only they may write it, and it may not
//! grant capabilities or raise limits; the same file given with `--config`
//! is read as written.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common::{Env, stderr, stdout};

/// What a hostile project (or another user's `/tmp`) would leave in a
/// folder above the working directory: every origin, private addresses
/// included, for the echo graph.
const HOSTILE: &str = "[graphs.echo_graph.grants]\nhttp = { allow = [\"http://*:*\", \"https://*:*\"], private = true }\n";

/// A folder with `graphs/` holding echo and a working directory two
/// levels below it (`work/deeper`), with `config` in the folder itself.
fn project(config: &str) -> (Env, PathBuf) {
    let env = Env::new(&[("echo_graph.wasm", sandgraph_tests::ECHO)]);
    let cwd = env.path("work/deeper");
    std::fs::create_dir_all(&cwd).unwrap();
    let file = env.write("sandgraph.toml", config);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    (env, cwd)
}

/// `sandgraph ARGS` in `cwd`, the graphs of `env` given by absolute path.
fn run_in(env: &Env, cwd: &Path, args: &[&str]) -> Output {
    let graphs = env.graphs();
    let mut all = args.to_vec();
    all.extend(["--graphs", graphs.to_str().unwrap()]);
    env.command(&all).current_dir(cwd).output().unwrap()
}

/// `sandgraph call echo_graph` in `cwd` with `extra` flags.
fn call_echo(env: &Env, cwd: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "call",
        "echo_graph",
        "--args",
        r#"{"input": {"topic": "t"}}"#,
    ];
    args.extend_from_slice(extra);
    run_in(env, cwd, &args)
}

/// The one `error[...]` line of a failed command.
fn error_line(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(2), "{}", stderr(o));
    assert!(o.stdout.is_empty(), "nothing on stdout on failure");
    stderr(o)
        .lines()
        .find(|l| l.starts_with("error["))
        .unwrap_or_else(|| panic!("no error line: {}", stderr(o)))
        .to_owned()
}

#[test]
fn a_hostile_config_in_a_folder_above_is_refused_and_works_with_config() {
    let (env, cwd) = project(HOSTILE);
    let file = env.path("sandgraph.toml");
    let file = file.display();
    assert_eq!(
        error_line(&call_echo(&env, &cwd, &[])),
        format!(
            "error[invalid_input]: {file} (found in the working directory or above it, not \
             given with --config) sets [graphs.echo_graph.grants].http.private = true: a config \
             you did not name cannot let a graph reach loopback or private addresses; to use it \
             anyway, pass --config {file}"
        )
    );
    // A grant without private, and a raised limit, are refused the same way.
    env.write(
        "sandgraph.toml",
        "[graphs.echo_graph.grants]\nhttp = { allow = [\"https://example.com\"] }\n",
    );
    let line = error_line(&call_echo(&env, &cwd, &[]));
    assert!(
        line.contains("sets [graphs.echo_graph.grants].http: a config you did not name cannot grant capabilities; to use it anyway, pass --config"),
        "{line}"
    );
    env.write("sandgraph.toml", "[limits]\nfuel = 10000000000000\n");
    let line = error_line(&call_echo(&env, &cwd, &[]));
    assert!(
        line.contains(
            "sets [limits].fuel = 10000000000000, above the default 200000000000: a config you \
             did not name cannot raise limits"
        ),
        "{line}"
    );
    // Named by the operator, the same file is theirs to write.
    env.write("sandgraph.toml", HOSTILE);
    let file = env.path("sandgraph.toml");
    let o = call_echo(&env, &cwd, &["--config", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(out["topic"], "t", "{out}");
}

#[test]
fn a_config_others_may_write_or_another_user_owns_is_not_read() {
    let (env, cwd) = project("[graphs.echo_graph]\ntimeout_ms = 5000\n");
    let file = env.path("sandgraph.toml");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o664)).unwrap();
    let shown = file.display();
    assert_eq!(
        error_line(&call_echo(&env, &cwd, &[])),
        format!(
            "error[invalid_input]: {shown} (found in the working directory or above it, not \
             given with --config) is writable by group or other users (mode 0664), so it is not \
             read (run chmod go-w on it if it is yours to keep); to use it anyway, pass \
             --config {shown}"
        )
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o646)).unwrap();
    assert!(error_line(&call_echo(&env, &cwd, &[])).contains("(mode 0646)"));
    // Given with --config, it is the operator's choice.
    let o = call_echo(&env, &cwd, &["--config", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Owned by another user (only root can give a file away).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::os::unix::fs::chown(&file, Some(65534), Some(65534)).unwrap();
        let line = error_line(&call_echo(&env, &cwd, &[]));
        assert!(
            line.contains(") is owned by uid 65534, not by you (uid 0), so it is not read; to use it anyway, pass --config"),
            "{line}"
        );
    }
}

#[test]
fn a_discovered_config_may_tune_and_lower() {
    let (env, cwd) = project(
        "[limits]\ntimeout_ms = 20000\n[graphs.echo_graph]\ntimeout_ms = 5000\nas_graph_tool = false\n",
    );
    let o = run_in(&env, &cwd, &["tools", "list", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let defs: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(defs[0]["name"], "echo_graph");
    assert_eq!(defs[0]["timeout_ms"], 5000, "the file was read: {defs}");
    assert_eq!(defs[0]["as_graph_tool"], false, "{defs}");
    let o = call_echo(&env, &cwd, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
}
