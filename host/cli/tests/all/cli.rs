//! The `sandgraph` binary end to end: output, streams, exit codes, errors.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::common::{stderr, stdout};

fn sandgraph(args: &[&str]) -> Output {
    sandgraph_cmd()
        .args(args)
        .env("SANDGRAPH_LOG", "off")
        .output()
        .expect("the sandgraph binary runs")
}

/// Asserts a failure with `error[<code>]` on stderr and exit code `exit`.
fn assert_error(o: &Output, code: &str, exit: i32, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(exit), "stderr: {err}");
    assert!(
        err.starts_with(&format!("error[{code}]: ")),
        "stderr: {err}"
    );
    assert!(err.contains(needle), "stderr lacks {needle:?}: {err}");
    assert!(o.stdout.is_empty(), "nothing on stdout on failure");
}

#[test]
fn run_prints_the_final_state_as_pretty_json() {
    let o = sandgraph(&["run", sandgraph_tests::ECHO, "--input", r#"{"topic":"hi"}"#]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "{\n  \"topic\": \"hi\",\n  \"log\": [\n    \"seen:hi\"\n  ]\n}\n"
    );
}

#[test]
fn run_reads_input_from_a_file_and_streams_supersteps() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.json");
    std::fs::write(&input, r#"{"target": 3}"#).unwrap();
    let arg = format!("@{}", input.display());
    let o = sandgraph(&[
        "run",
        sandgraph_tests::LOOP_GRAPH,
        "--input",
        &arg,
        "--stream",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let state: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(state["n"], json!(3));
    let lines: Vec<Value> = stderr(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["step"], json!(0));
    assert_eq!(
        lines[2]["updates"][0],
        json!({"node": "count", "update": {"n": 3}})
    );
}

#[test]
fn inspect_prints_the_spec_and_a_mermaid_chart() {
    let o = sandgraph(&["inspect", sandgraph_tests::ECHO]);
    assert!(o.status.success(), "{}", stderr(&o));
    let spec: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(spec["name"], json!("echo_graph"));
    assert_eq!(
        spec["channels"][1],
        json!({"name": "log", "reducer": "append", "default": []})
    );
    let o = sandgraph(&["inspect", sandgraph_tests::LOOP_GRAPH, "--mermaid"]);
    let chart = stdout(&o);
    assert!(chart.starts_with("flowchart TD"), "{chart}");
    assert!(chart.contains("count -. continue .-> count"), "{chart}");
    assert!(chart.contains("count -. done .-> __end__"), "{chart}");
}

#[test]
fn every_error_code_has_its_exit_code() {
    fn t(ms: &str) -> Vec<&str> {
        vec!["--timeout-ms", ms, "--fuel", "100000000000000"]
    }
    // (graph, input, extra args, error code, exit code, text in the message)
    type Case<'a> = (&'a str, &'a str, Vec<&'a str>, &'a str, i32, &'a str);
    let cases: Vec<Case> = vec![
        (
            sandgraph_tests::ECHO,
            "{not json",
            vec![],
            "invalid_input",
            2,
            "error[invalid_input]: --input is not valid json: key must be a string at line 1 column 2",
        ),
        (
            sandgraph_tests::ECHO,
            "{}",
            vec!["--recursion-limit", "0"],
            "invalid_input",
            2,
            "recursion limit",
        ),
        (
            sandgraph_tests::GRAPH_INVALID_SPEC,
            "{}",
            vec![],
            "load",
            3,
            "unknown target node",
        ),
        (
            sandgraph_tests::HOSTILE_INFINITE_LOOP,
            "{}",
            t("200"),
            "timeout",
            4,
            "timeout of 200 ms",
        ),
        (
            sandgraph_tests::HOSTILE_INFINITE_LOOP,
            "{}",
            vec!["--fuel", "1000000"],
            "out_of_fuel",
            5,
            "fuel",
        ),
        (
            sandgraph_tests::HOSTILE_MEMORY_BOMB,
            "{}",
            vec!["--memory-mb", "16"],
            "memory_limit",
            6,
            "16 MiB",
        ),
        (
            sandgraph_tests::HOSTILE_PANIC,
            "{}",
            vec![],
            "trap",
            7,
            "boom from guest",
        ),
        (
            sandgraph_tests::HOSTILE_NAN_OUTPUT,
            r#"{"mode":"neg_zero"}"#,
            vec![],
            "invalid_output",
            8,
            "$.x",
        ),
        (
            sandgraph_tests::GRAPH_CONFLICT,
            "{}",
            vec![],
            "invalid_update",
            9,
            "\"value\"",
        ),
        (
            sandgraph_tests::LOOP_GRAPH,
            r#"{"target":9}"#,
            vec!["--recursion-limit", "4"],
            "recursion_limit",
            10,
            "4",
        ),
        (
            sandgraph_tests::GRAPH_ERRORS,
            r#"{"mode":"fail"}"#,
            vec![],
            "node_error",
            11,
            "deliberate failure",
        ),
    ];
    for (graph, input, extra, code, exit, needle) in cases {
        let mut args = vec!["run", graph, "--input", input];
        args.extend(extra);
        assert_error(&sandgraph(&args), code, exit, needle);
    }
}

#[test]
fn interrupts_exit_with_their_own_code() {
    let o = sandgraph(&["run", sandgraph_tests::GRAPH_INTERRUPT, "--input", "{}"]);
    assert_eq!(o.status.code(), Some(20), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["status"], json!("interrupted"));
    assert_eq!(v["interrupts"][0]["value"], json!({"question": "approve?"}));
}

#[test]
fn loader_errors_name_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.wasm");
    std::fs::write(&text, "hello").unwrap();
    let o = sandgraph(&["run", text.to_str().unwrap(), "--input", "{}"]);
    assert_error(&o, "load", 3, "not a wasm file");
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let o = sandgraph(&["inspect", core.to_str().unwrap()]);
    assert_error(&o, "load", 3, "core wasm module, not a component");
    let o = sandgraph(&["inspect", "/nonexistent/graph.wasm"]);
    assert_error(&o, "load", 3, "cannot read /nonexistent/graph.wasm");
    // An empty component: what a crate built with the SDK but without
    // `export_graph!` produces.
    let empty = dir.path().join("empty.wasm");
    std::fs::write(&empty, b"\0asm\x0d\0\x01\0").unwrap();
    let o = sandgraph(&["inspect", empty.to_str().unwrap()]);
    assert_error(
        &o,
        "load",
        3,
        "add `sandgraph_sdk::export_graph!(graph);` to its lib.rs",
    );
}

#[test]
fn build_names_the_rustup_command_when_the_target_is_missing() {
    // A fake rustc whose sysroot lacks the wasm32-wasip2 standard library.
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("rustc");
    std::fs::write(&fake, format!("#!/bin/sh\necho {}\n", dir.path().display())).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let o = sandgraph_cmd()
        .args(["build", "../../example-graphs/echo", "--out", "x.wasm"])
        .env("RUSTC", &fake)
        .output()
        .unwrap();
    assert_error(&o, "build", 12, "run `rustup target add wasm32-wasip2`");
}

#[test]
fn build_compiles_checks_and_writes_the_component() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("echo.wasm");
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../example-graphs/echo");
    let o = sandgraph_cmd()
        .args([
            "build",
            crate_dir.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("built graph `echo_graph`"),
        "{}",
        stderr(&o)
    );
    let o = sandgraph(&[
        "run",
        out.to_str().unwrap(),
        "--input",
        r#"{"topic":"built"}"#,
    ]);
    let state: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(state["log"], json!(["seen:built"]));
    // Without --out: the graph's name (not the crate's, `echo`) in the
    // current folder.
    let here = out_dir.path().join("here");
    std::fs::create_dir(&here).unwrap();
    let o = sandgraph_cmd()
        .args(["build", crate_dir.to_str().unwrap()])
        .current_dir(&here)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("-> echo_graph.wasm"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(here.join("echo_graph.wasm")).unwrap(),
        std::fs::read(&out).unwrap()
    );
    let listed: Vec<_> = std::fs::read_dir(&here)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(listed, ["echo_graph.wasm"]);
    // Not a crate: a clear error.
    let o = sandgraph(&["build", out_dir.path().to_str().unwrap(), "--out", "x.wasm"]);
    assert_error(
        &o,
        "build",
        12,
        "holds no graph: point at a Rust crate (Cargo.toml)",
    );
}

/// Asserts that `text` holds no byte a terminal acts on: no C0 control but
/// the newline ending a line, no DEL, no UTF-8-encoded C1 control.
fn assert_inert(text: &str) {
    for (i, c) in text.char_indices() {
        assert!(
            c == '\n' || !(c.is_control() || ('\u{80}'..='\u{9f}').contains(&c)),
            "control character {:?} at byte {i} of {:?}",
            c,
            &text[i.saturating_sub(40)..(i + 40).min(text.len())]
        );
    }
}

#[test]
fn a_hostile_node_error_is_one_bounded_inert_line() {
    let o = sandgraph(&[
        "run",
        sandgraph_tests::HOSTILE_ESCAPE_ERROR,
        "--input",
        "{}",
    ]);
    assert_eq!(o.status.code(), Some(11), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    // The guest's message is 32 MiB; the report stays one screenful.
    assert!(o.stderr.len() < 16 * 1024, "{} bytes", o.stderr.len());
    assert!(!o.stderr.contains(&0x1b), "no ESC reaches the terminal");
    assert!(!o.stderr.contains(&0x07), "no BEL reaches the terminal");
    let err = stderr(&o);
    assert_inert(&err);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("error[")).count(),
        1,
        "{err}"
    );
    assert!(!lines.iter().any(|l| l.starts_with("error[ok]")), "{err}");
    assert!(lines[0].starts_with("error[node_error]: "), "{err}");
    // The escapes are shown, not dropped, and the cut is marked.
    assert!(lines[0].contains("\\u{1b}]0;pwned\\u{7}"), "{err}");
    assert!(lines[0].contains("\\nerror[ok]: forged"), "{err}");
    assert!(lines[0].ends_with("more bytes]"), "{err}");
}

#[test]
fn guest_log_lines_cannot_forge_host_lines() {
    let o = sandgraph_cmd()
        .args(["run", sandgraph_tests::HOSTILE_LOG_FORGE, "--input", "{}"])
        .env("SANDGRAPH_LOG", "info")
        .output()
        .expect("the sandgraph binary runs");
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&stdout(&o)).unwrap(),
        json!({"done": true})
    );
    assert!(
        !o.stderr.contains(&0x1b),
        "no ESC reaches the terminal: {err}"
    );
    assert_inert(&err);
    assert!(
        !err.lines().any(|l| l.starts_with("error[")),
        "no line looks like a host error: {err}"
    );
    // Each record is one line, its newline and escape shown as text: the
    // info and the warn line.
    let forged: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("hello\\nerror[ok]: forged line\\u{1b}[31m"))
        .collect();
    assert_eq!(forged.len(), 2, "{err}");
    // The 64 KiB flood line is capped, the cut marked.
    let flood = err
        .lines()
        .find(|l| l.contains("\\u{1b}[2J"))
        .expect("the flood line is logged");
    assert!(flood.len() < 8 * 1024, "{} bytes", flood.len());
    assert!(flood.contains("more bytes]"), "{flood}");
}

#[test]
fn run_takes_the_host_memory_and_instance_limits() {
    let o = sandgraph(&[
        "run",
        sandgraph_tests::ECHO,
        "--input",
        r#"{"topic":"hi"}"#,
        "--host-memory-mb",
        "128",
        "--instances",
        "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = sandgraph(&[
        "run",
        sandgraph_tests::ECHO,
        "--input",
        "{}",
        "--instances",
        "0",
    ]);
    assert_error(
        &o,
        "invalid_input",
        2,
        "instances per run must be at least 1",
    );
    let o = sandgraph(&[
        "run",
        sandgraph_tests::ECHO,
        "--input",
        "{}",
        "--host-memory-mb",
        "0",
    ]);
    assert_error(
        &o,
        "invalid_input",
        2,
        "host byte budget must be at least 1 MiB",
    );
}

/// Runs the CLI and returns its output and its peak resident set in KiB,
/// as the kernel recorded it for the child (`wait4`'s `ru_maxrss`).
// The child is reaped by `wait4` below, which std's `wait` cannot do
// while also reporting the child's resource usage.
fn run_measured(args: &[&str]) -> (Output, u64) {
    let mut cmd = sandgraph_cmd();
    cmd.args(args).env("SANDGRAPH_LOG", "off");
    measured(cmd)
}

/// Runs `cmd` and returns its output and its peak resident set in KiB
/// ([`run_measured`]).
#[allow(clippy::zombie_processes)]
pub(crate) fn measured(mut cmd: Command) -> (Output, u64) {
    use std::os::unix::process::ExitStatusExt;
    let child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let (mut out_pipe, mut err_pipe) = (child.stdout.unwrap(), child.stderr.unwrap());
    let readers = (
        std::thread::spawn(move || {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut out_pipe, &mut v).unwrap();
            v
        }),
        std::thread::spawn(move || {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut err_pipe, &mut v).unwrap();
            v
        }),
    );
    let mut status = 0;
    // SAFETY: `rusage` is plain data, zeroed is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; both pointers are valid for the call.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4 failed");
    let output = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: readers.0.join().unwrap(),
        stderr: readers.1.join().unwrap(),
    };
    (output, usage.ru_maxrss as u64)
}

/// Peak RSS a `sandgraph run` process may reach on a hostile graph: the
/// engine and a compiled component (~50 MiB for echo), the run's 64 MiB
/// host byte budget, and its 8 instances' guest memory and lifted output
/// texts. Before the byte budget, the bloat graph drove it past 6 GiB.
const MAX_HOSTILE_RSS_KIB: u64 = 768 * 1024;

/// Peak RSS of a `sandgraph call` whose graph loops on refused capability
/// calls: the engine and the component, nothing per call.
const MAX_REFUSAL_LOOP_RSS_KIB: u64 = 100 * 1024;

/// The deadline the refusal loop runs to, and how long after it the
/// process may take to end: the grace period and the journal's last
/// batch, with room for a busy machine (before the call cap, the process
/// went on writing a row per refusal for minutes).
const REFUSAL_LOOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);
const REFUSAL_LOOP_AFTER: std::time::Duration = std::time::Duration::from_secs(8);

#[test]
fn a_graph_looping_on_refused_calls_ends_at_its_deadline_with_a_few_journal_rows() {
    let env = crate::common::Env::new(&[(
        "hostile_refusal_loop.wasm",
        sandgraph_tests::HOSTILE_REFUSAL_LOOP,
    )])
    .with_db("data.redb");
    let timeout_ms = REFUSAL_LOOP_TIMEOUT.as_millis().to_string();
    let cmd = env.command(&[
        "call",
        "hostile_refusal_loop",
        "--graphs",
        "graphs",
        "--timeout-ms",
        &timeout_ms,
        "--args",
        r#"{"input": {"times": 1000000000}}"#,
    ]);
    let started = std::time::Instant::now();
    let (o, rss_kib) = measured(cmd);
    let took = started.elapsed();
    assert_error(&o, "timeout", 4, "timeout");
    assert!(
        took < REFUSAL_LOOP_TIMEOUT + REFUSAL_LOOP_AFTER,
        "the process ended {took:?} after it started"
    );
    assert!(
        rss_kib < MAX_REFUSAL_LOOP_RSS_KIB,
        "peak RSS {rss_kib} KiB, over {MAX_REFUSAL_LOOP_RSS_KIB} KiB"
    );
    // One row for the refusals before the cap, one for those after it.
    let o = env.run(&["journal", "--capabilities", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let rows: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(
        (&rows[0]["decision"], &rows[0]["count"]),
        (
            &json!("denied"),
            &json!(sandgraph_runtime::MAX_CAPABILITY_CALLS_PER_RUN)
        ),
        "{rows:#?}"
    );
    assert_eq!(rows[1]["decision"], "quota", "{rows:#?}");
    assert!(rows[1]["count"].as_u64().unwrap() > 0, "{rows:#?}");
    // The next call is served.
    let o = env.run(&[
        "call",
        "hostile_refusal_loop",
        "--graphs",
        "graphs",
        "--args",
        r#"{"input": {"times": 2}}"#,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn hostile_outputs_stay_within_a_stated_rss_and_get_their_typed_error() {
    for (graph, code, exit, needle) in [
        (
            sandgraph_tests::HOSTILE_FANOUT_BLOAT,
            "memory_limit",
            6,
            // Refused while a node's JSON is parsed ("64 MiB") or when the
            // parsed value is charged ("64.0 MiB"), whichever of the 64
            // tasks' results comes first.
            "host byte budget of 64",
        ),
        (
            sandgraph_tests::HOSTILE_MANY_SENDS,
            "invalid_update",
            9,
            "returned 200000 goto targets and sends",
        ),
    ] {
        let (o, rss_kib) = run_measured(&["run", graph, "--input", "{}"]);
        assert_error(&o, code, exit, needle);
        assert!(
            rss_kib < MAX_HOSTILE_RSS_KIB,
            "{graph}: peak RSS {} MiB, over the stated {} MiB",
            rss_kib / 1024,
            MAX_HOSTILE_RSS_KIB / 1024
        );
    }
    // The next call is served.
    let o = sandgraph(&["run", sandgraph_tests::ECHO, "--input", r#"{"topic":"x"}"#]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn limits_at_the_edge_of_their_types_are_refused_not_overflowed() {
    let max = u64::MAX.to_string();
    let echo = sandgraph_tests::ECHO;
    let input = r#"{"topic":"x"}"#;
    let o = sandgraph(&["run", echo, "--input", input, "--timeout-ms", &max]);
    assert_error(&o, "invalid_input", 2, "timeout must be at most 604800 s");
    let o = sandgraph(&["run", echo, "--input", input, "--memory-mb", &max]);
    assert_error(
        &o,
        "invalid_input",
        2,
        "memory cap must be at most 4096 MiB",
    );
    // An unbounded byte budget saturates; nothing overflows.
    let o = sandgraph(&["run", echo, "--input", input, "--host-memory-mb", &max]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A week is accepted: nothing overflows on the way.
    let o = sandgraph(&["run", echo, "--input", input, "--timeout-ms", "604800000"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    // `sandgraph inspect … | head -0`: the reader is gone before anything
    // is written.
    let mut child = sandgraph_cmd()
        .args(["inspect", sandgraph_tests::ECHO])
        .env("SANDGRAPH_LOG", "off")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(141), "{err}");
}

#[test]
fn build_strips_debug_info_and_prints_the_digest() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("echo.wasm");
    let echo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../example-graphs/echo");
    let o = sandgraph(&[
        "build",
        echo.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let bytes = std::fs::read(&out).unwrap();
    // With the workspace's line tables kept it was about 4 MB.
    assert!(bytes.len() < 1_000_000, "{} bytes", bytes.len());
    let digest = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&bytes))
    };
    assert!(err.contains(&format!("sha256 {digest}")), "{err}");
    // Still a working graph.
    let o = sandgraph(&["run", out.to_str().unwrap(), "--input", r#"{"topic":"hi"}"#]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// The CLI, with the tests' shared compile cache rather than the user's
/// home's; the test harness's own RUSTC_BOOTSTRAP (`--report-time`
/// needs it) would make the cargo of `build` rebuild every dependency. A
/// `build` of an example uses the target folder the other tests' builds of
/// the examples share, where its dependencies are built once (the
/// workspace's own would build them a second time).
fn sandgraph_cmd() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandgraph"));
    cmd.env("SANDGRAPH_CACHE", crate::common::cache::shared())
        .env("CARGO_TARGET_DIR", crate::common::cargo::shared_target())
        .env_remove("RUSTC_BOOTSTRAP");
    cmd
}

#[test]
fn version_names_the_commit_the_binary_was_built_from() {
    let o = sandgraph(&["--version"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let commit = out
        .trim_end()
        .strip_prefix(&format!("sandgraph {} (commit ", env!("CARGO_PKG_VERSION")))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not `sandgraph VERSION (commit HASH)`: {out:?}"));
    // Built in a git checkout (this repository's tests are): the full hash
    // of the commit checked out; `unknown` only outside one.
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| stdout(&o).trim().to_owned());
    match head {
        Some(head) => {
            assert!(
                commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()),
                "{commit:?} is not a 40-hex-digit commit"
            );
            assert_eq!(commit, head, "the commit is HEAD's");
        }
        None => assert_eq!(commit, "unknown"),
    }
}

/// The names of `sandgraph`'s commands, from its `--help`.
fn command_names() -> Vec<String> {
    let o = sandgraph(&["--help"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let help = stdout(&o);
    let names: Vec<String> = help
        .split("Commands:\n")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .unwrap_or_else(|| panic!("no commands in: {help}"))
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_owned)
        .collect();
    for expected in ["build", "sign", "agent-graph", "completions", "man"] {
        assert!(names.iter().any(|n| n == expected), "{expected}: {names:?}");
    }
    names
}

#[test]
fn completions_print_a_script_that_knows_every_command() {
    let names = command_names();
    let o = sandgraph(&["completions", "bash"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let script = stdout(&o);
    assert!(script.contains("complete -F _sandgraph"), "{script}");
    for name in &names {
        // bash's completion case for each command: `sandgraph,NAME)`.
        assert!(
            script.contains(&format!("sandgraph,{name})")),
            "the bash script lacks {name}"
        );
    }
    // A flag of a command: `--key-env` of sign.
    assert!(script.contains("--key-env"));
    for (shell, marker) in [
        ("zsh", "#compdef sandgraph"),
        ("fish", "complete -c sandgraph"),
    ] {
        let o = sandgraph(&["completions", shell]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stdout(&o).contains(marker), "{shell}: {}", stdout(&o));
        assert!(stdout(&o).contains("agent-graph"), "{shell}");
    }
    let o = sandgraph(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("invalid value 'tcsh'"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn man_writes_a_roff_page_for_sandgraph_and_each_command() {
    let names = command_names();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man/man1");
    let o = sandgraph(&["man", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut pages: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    pages.sort();
    assert!(
        stdout(&o).contains(&format!("wrote {} man pages", pages.len())),
        "{}",
        stdout(&o)
    );
    let mut expected: Vec<String> = names
        .iter()
        .map(|n| format!("sandgraph-{n}.1"))
        .chain([
            "sandgraph.1".to_owned(),
            "sandgraph-threads-list.1".to_owned(),
        ])
        .collect();
    expected.sort();
    for page in &expected {
        assert!(pages.contains(page), "no {page} in {pages:?}");
    }
    assert!(!pages.iter().any(|p| p.contains("help")), "{pages:?}");
    for page in &pages {
        let text = std::fs::read_to_string(out.join(page)).unwrap();
        // roff: requests only (the quote string's definition) up to the
        // title line, which names the page, its section and the version.
        let title = page.trim_end_matches(".1");
        let head: Vec<&str> = text
            .lines()
            .take_while(|l| !l.starts_with(".TH "))
            .collect();
        assert!(
            head.len() < 4 && head.iter().all(|l| l.starts_with('.')),
            "{page}: {head:?}"
        );
        let th = text.lines().nth(head.len()).unwrap_or_default();
        let version = format!("\"sandgraph {} (commit ", env!("CARGO_PKG_VERSION"));
        assert!(
            th.starts_with(&format!(".TH {title} 1 ")) && th.contains(&version),
            "{page}: {th}"
        );
        assert!(text.contains("\n.SH NAME\n"), "{page}");
    }
    let sign = std::fs::read_to_string(out.join("sandgraph-sign.1")).unwrap();
    assert!(sign.contains("key\\-env"), "{sign}");
}
