//! Tests of `sandgraph test`: golden cases next to a graph (see
//! ../toolkit.rs).

use std::process::Output;

use serde_json::{Value, json};

use super::folder;
use crate::common::{Env, stderr, stdout};

/// A folder with `graph_llm.wasm` (a copy of `component`) and the case files
/// `tests/<name>` beside it.
fn suite(component: &str, cases: &[(&str, Value)]) -> Env {
    let env = folder(&[("graph_llm.wasm", component)]);
    for (name, case) in cases {
        env.write(
            &format!("tests/{name}"),
            &serde_json::to_string_pretty(case).unwrap(),
        );
    }
    env
}

fn test(env: &Env, extra: &[&str]) -> Output {
    let mut args = vec!["test", "graph_llm.wasm"];
    args.extend_from_slice(extra);
    env.run(&args)
}

fn assert_line(text: &str, prefix: &str) {
    assert!(
        text.lines().any(|l| l.starts_with(prefix)),
        "no line starting {prefix:?} in:\n{text}"
    );
}

#[test]
fn passing_cases_of_echo_report_ok_and_exit_0() {
    let env = suite(
        sandgraph_tests::ECHO,
        &[
            (
                "exact.json",
                json!({"input": {"topic": "wasm"}, "state": {"topic": "wasm", "log": ["seen:wasm"]}}),
            ),
            (
                "more.json",
                json!([
                    {"name": "pointer", "input": {"topic": "a"},
                     "assert": [{"pointer": "/log/0", "equals": "seen:a"},
                                {"pointer": "/log/1", "exists": false}]},
                    {"name": "as a tool", "args": {"input": {"topic": "t"}},
                     "assert": [{"pointer": "/log", "equals": ["seen:t"]}]},
                    {"name": "bad args", "args": {"topic": "t"}, "error": "INVALID_ARGS"},
                    {"name": "tight fuel", "input": {"topic": "a"}, "limits": {"fuel": 1},
                     "error": "out_of_fuel"}
                ]),
            ),
        ],
    );
    let o = test(&env, &[]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{text}{}", stderr(&o));
    for name in ["exact", "pointer", "as a tool", "bad args", "tight fuel"] {
        assert_line(&text, &format!("test {name} ... ok ("));
    }
    assert_line(
        &text,
        "test result: ok. 5 passed; 0 failed; 0 filtered out; finished in ",
    );
    // --filter runs the matching cases only.
    let o = test(&env, &["--filter", "point"]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert_line(&text, "test pointer ... ok");
    assert!(!text.contains("test exact"), "{text}");
    assert_line(
        &text,
        "test result: ok. 1 passed; 0 failed; 4 filtered out;",
    );
}

#[test]
fn a_failing_case_exits_1_with_a_diff_of_the_state() {
    let env = suite(
        sandgraph_tests::ECHO,
        &[
            (
                "good.json",
                json!({"input": {"topic": "a"}, "state": {"topic": "a", "log": ["seen:a"]}}),
            ),
            (
                "wrong.json",
                json!({"input": {"topic": "b"}, "state": {"topic": "b", "log": ["seen:B"]}}),
            ),
            (
                "code.json",
                json!({"input": {"topic": "b"}, "error": "timeout"}),
            ),
        ],
    );
    let o = test(&env, &[]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}{}", stderr(&o));
    assert_line(&text, "test good ... ok (");
    assert_line(&text, "test wrong ... FAILED (");
    assert_line(&text, "test code ... FAILED (");
    assert!(
        text.contains("the run: the state differs from the expected one (- expected, + actual)"),
        "{text}"
    );
    assert!(
        text.contains("-     \"seen:B\"\n+     \"seen:b\""),
        "{text}"
    );
    assert!(
        text.contains("the run: expected error[timeout], but the run completed"),
        "{text}"
    );
    assert_line(
        &text,
        "test result: FAILED. 1 passed; 2 failed; 0 filtered out;",
    );
}

#[test]
fn an_interrupt_sequence_resumes_on_a_throwaway_thread() {
    let draft = |n: u32| match n {
        0 => "A short note about wasm.".to_owned(),
        n => format!("A short note about wasm (revision {n})."),
    };
    let ask = |n| json!({"question": "publish this draft?", "draft": draft(n)});
    let case = json!({
        "input": {"topic": "wasm"},
        "interrupts": [ask(0)],
        "steps": [
            {"resume": "no", "interrupts": [ask(1)],
             "assert": [{"pointer": "/revisions", "equals": 1}]},
            {"resume": "yes", "state": {
                "topic": "wasm", "draft": draft(1), "revisions": 1, "published": true}}
        ]
    });
    let env = suite(sandgraph_tests::APPROVAL, &[("approve.json", case.clone())]);
    let o = test(&env, &[]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_line(&stdout(&o), "test approve ... ok (");
    // A wrong expectation in the middle names the step.
    let mut wrong = case;
    wrong["steps"][0]["interrupts"] = json!([ask(2)]);
    let env = suite(sandgraph_tests::APPROVAL, &[("approve.json", wrong)]);
    let o = test(&env, &[]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("step 1: the interrupts' values differs from the expected one"),
        "{text}"
    );
    assert!(
        text.contains("(revision 2)") && text.contains("(revision 1)"),
        "{text}"
    );
    // Without steps, an interrupted run is a failure that says what to add.
    let env = suite(
        sandgraph_tests::APPROVAL,
        &[(
            "plain.json",
            json!({"input": {"topic": "wasm"}, "state": {}}),
        )],
    );
    let o = test(&env, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("the case expects it to complete: add \"interrupts\""),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_malformed_case_file_names_the_file_and_the_json_path() {
    let env = suite(
        sandgraph_tests::ECHO,
        &[(
            "bad.json",
            json!({"input": {}, "interrupts": [1], "steps": [{"state": {}}]}),
        )],
    );
    let o = test(&env, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.starts_with("error[invalid_input]: "), "{err}");
    assert!(
        err.contains("tests/bad.json: $.steps[0]: a step needs \"resume\""),
        "{err}"
    );
    env.write("tests/bad.json", "{\"input\": {}, \"state\": {},}");
    let err = stderr(&test(&env, &[]));
    assert!(err.contains("tests/bad.json is not valid JSON"), "{err}");
    let err = stderr(&env.run(&["test", "missing.wasm"]));
    assert!(
        err.contains("missing.wasm is neither a graph crate folder nor a graph component"),
        "{err}"
    );
    let env = suite(sandgraph_tests::ECHO, &[]);
    let err = stderr(&test(&env, &[]));
    assert!(
        err.contains("cannot read the folder ") && err.contains("write golden cases there"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cassette_answers_the_model_offline() {
    const KEY: &str = "sk-golden-test-4kQ9";
    let server =
        sandgraph_test_llm::ScriptedLlm::start([sandgraph_test_llm::Reply::text("recorded")]).await;
    let env = folder(&[("graph_llm.wasm", sandgraph_tests::GRAPH_LLM)]);
    env.write(
        "ops.toml",
        &format!(
            "[llm]\nbase_url = \"{}\"\napi_key_env = \"SANDGRAPH_GOLDEN_TEST_KEY\"\n\
             [llm.models]\nfast = \"deepseek-chat\"\n\
             [graphs.graph_llm.grants]\nllm = {{ models = [\"fast\"] }}\n",
            server.base_url()
        ),
    );
    std::fs::create_dir(env.path("graphs")).unwrap();
    std::fs::copy(
        sandgraph_tests::GRAPH_LLM,
        env.path("graphs/graph_llm.wasm"),
    )
    .unwrap();
    let cassette = env.path("tests/cassettes/ask.jsonl");
    std::fs::create_dir_all(cassette.parent().unwrap()).unwrap();
    let args = r#"{"input": {"question": "hi?"}}"#;
    let o = tokio::task::block_in_place(|| {
        env.command(&[
            "call",
            "graph_llm",
            "--graphs",
            "graphs",
            "--config",
            "ops.toml",
            "--args",
            args,
            "--record",
            cassette.to_str().unwrap(),
        ])
        .env("SANDGRAPH_GOLDEN_TEST_KEY", KEY)
        .output()
        .unwrap()
    });
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(server.requests().len(), 1);
    // The test's config names the models but grants nothing: the case
    // grants the model; the other case runs without the grant.
    env.write("models.toml", "[llm.models]\nfast = \"deepseek-chat\"\n");
    env.write(
        "tests/ask.json",
        &json!([
            {"name": "ask", "args": {"input": {"question": "hi?"}},
             "grants": {"llm": {"models": ["fast"]}},
             "cassette": "cassettes/ask.jsonl",
             "assert": [{"pointer": "/answers/0/content", "equals": "recorded"}]},
            {"name": "ungranted", "args": {"input": {"question": "hi?"}},
             "cassette": "cassettes/ask.jsonl",
             "assert": [{"pointer": "/answers/0/error/kind", "equals": "denied"}]}
        ])
        .to_string(),
    );
    // No key, no server: the answer comes from the cassette.
    let run = |config: &str| {
        tokio::task::block_in_place(|| {
            env.command(&["test", "graph_llm.wasm", "--config", config])
                .env_remove("SANDGRAPH_GOLDEN_TEST_KEY")
                .output()
                .unwrap()
        })
    };
    let o = run("models.toml");
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_line(&stdout(&o), "test ask ... ok (");
    assert_line(&stdout(&o), "test ungranted ... ok (");
    assert_eq!(server.requests().len(), 1, "nothing was sent");
    // Without the cassette the host has no model: the call is denied.
    env.write(
        "tests/ask.json",
        &json!({
            "args": {"input": {"question": "hi?"}},
            "assert": [{"pointer": "/answers/0/content", "equals": "recorded"}]
        })
        .to_string(),
    );
    let o = run("ops.toml");
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("\"kind\": \"denied\""),
        "{}",
        stdout(&o)
    );
    assert_eq!(server.requests().len(), 1, "nothing was sent");
}

#[test]
fn a_crate_folder_is_built_first() {
    let cases = tempfile::tempdir().unwrap();
    std::fs::write(
        cases.path().join("hi.json"),
        json!({"input": {"topic": "hi"}, "state": {"topic": "hi", "log": ["seen:hi"]}}).to_string(),
    )
    .unwrap();
    let echo = concat!(env!("CARGO_MANIFEST_DIR"), "/../../example-graphs/echo");
    let env = folder(&[]);
    let o = env.run(&["test", echo, "--cases", cases.path().to_str().unwrap()]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{text}{}", stderr(&o));
    assert!(
        stderr(&o).contains("built graph `echo_graph`"),
        "{}",
        stderr(&o)
    );
    assert_line(&text, "test hi ... ok (");
}

#[test]
fn junit_xml_parses_with_junitparser() {
    let env = suite(
        sandgraph_tests::ECHO,
        &[(
            "cases.json",
            json!([
                {"name": "passes", "input": {"topic": "a"},
                 "assert": [{"pointer": "/log/0", "equals": "seen:a"}]},
                {"name": "fails <&> \u{1b}[31m", "input": {"topic": "x\u{1}<y>"},
                 "assert": [{"pointer": "/log/0", "equals": "seen:z"}]}
            ]),
        )],
    );
    let o = test(&env, &["--junit", "report.xml"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(!o.stdout.contains(&0x1b), "no ESC reaches the terminal");
    let script = r#"
import json, sys
from junitparser import JUnitXml, Failure
xml = JUnitXml.fromfile(sys.argv[1])
out = {"suites": []}
for suite in xml:
    cases = []
    for case in suite:
        failures = [r for r in case.result if isinstance(r, Failure)]
        cases.append({"name": case.name, "classname": case.classname, "time": case.time,
                      "failure": failures[0].message if failures else None,
                      "text": failures[0].text if failures else None})
    out["suites"].append({"name": suite.name, "tests": suite.tests,
                          "failures": suite.failures, "cases": cases})
print(json.dumps(out))
"#;
    let py = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(env.path("report.xml"))
        .output()
        .expect("python3 runs");
    assert!(
        py.status.success(),
        "junitparser (pip install junitparser) could not read the report: {}",
        String::from_utf8_lossy(&py.stderr)
    );
    let v: Value = serde_json::from_slice(&py.stdout).unwrap();
    let suite = &v["suites"][0];
    assert_eq!(suite["name"], "echo_graph");
    assert_eq!(suite["tests"], 2);
    assert_eq!(suite["failures"], 1);
    let cases = suite["cases"].as_array().unwrap();
    assert_eq!(cases[0]["name"], "passes");
    assert_eq!(cases[0]["failure"], Value::Null);
    assert_eq!(cases[1]["name"], "fails <&> \\u{1b}[31m");
    assert_eq!(cases[1]["classname"], "echo_graph.cases");
    assert!(cases[1]["time"].as_f64().is_some());
    let message = cases[1]["failure"].as_str().unwrap();
    assert!(
        message.contains("assert \"/log/0\": expected \"seen:z\", got \"seen:x\\u0001<y>\""),
        "{message}"
    );
}

#[test]
fn graph_tools_of_graphs_folders_answer_a_granted_tools_call() {
    let env = suite(
        sandgraph_tests::GRAPH_TOOLS,
        &[(
            "calls.json",
            json!({
                "args": {"input": {"tool": "echo_graph", "args": {"input": {"topic": "x"}}}},
                "grants": {"tools": {"allow": ["echo_graph"]}},
                "assert": [{"pointer": "/result/log", "equals": ["seen:x"]}]
            }),
        )],
    );
    std::fs::create_dir(env.path("tools")).unwrap();
    std::fs::copy(sandgraph_tests::ECHO, env.path("tools/echo_graph.wasm")).unwrap();
    env.write("tools/broken.wasm", "not wasm");
    let o = test(&env, &["--graphs", "tools"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_line(&stdout(&o), "test calls ... ok (");
    // The folder's graph that cannot be mounted is said once.
    assert_eq!(
        stderr(&o).matches("broken.wasm").count(),
        1,
        "{}",
        stderr(&o)
    );
    // Without the folder there is no echo_graph to call.
    let o = test(&env, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
}
