//! Issue 14's acceptance path, as the README's "Ship a graph" walks it:
//! `sandgraph new` in a folder outside the workspace, `cargo test`, `build`,
//! `test --junit` (read back by Python's junitparser), `check`, `lock`,
//! `keygen` and `sign`, `push` to a loopback CNCF registry, `pull` into a
//! fresh folder, `verify`, and `serve --locked --trusted-keys` answering a
//! real MCP client.

use std::path::Path;
use std::process::Stdio;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ContentBlock};
use rmcp::transport::TokioChildProcess;
use sandgraph_tests::oci_registry::{Auth, OciRegistry};
use serde_json::{Value, json};

use super::folder;
use super::new::{assert_ok, build_in_slot, new_crate, run_in, sandgraph_in};
use crate::common::cargo::{CrateHome, shared_target};
use crate::common::{sha256_hex, stderr, stdout};

/// Reads a JUnit file with junitparser: (tests, failures + errors).
fn junit_counts(path: &Path) -> (u64, u64) {
    let script = "import sys, junitparser\n\
                  x = junitparser.JUnitXml.fromfile(sys.argv[1])\n\
                  cases = [c for s in x for c in s]\n\
                  bad = sum(1 for c in cases if not c.is_passed)\n\
                  print(len(cases), bad)";
    let o = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .output()
        .expect("python3 runs (junitparser is installed by .ci/run)");
    assert_ok("junitparser reads the report", &o);
    let out = stdout(&o);
    let mut it = out.split_whitespace().map(|n| n.parse::<u64>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_graph_goes_from_new_to_a_signed_locked_served_tool() {
    let env = folder(&[]);
    let home = CrateHome::new("acceptance-crate");
    let target = shared_target();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());

    // Author: a crate that tests natively, builds, and passes its cases.
    let krate = new_crate(&env, &home, "ticket-triage", &[]);
    assert_ok(
        "cargo test",
        &run_in(&krate, &target, &cargo, &["test", "-q"]),
    );
    std::fs::create_dir(env.path("dist")).unwrap();
    let dist_wasm = env.path("dist/ticket-triage.wasm");
    let wasm = dist_wasm.to_str().unwrap();
    assert_ok("sandgraph build", &build_in_slot(&krate, &dist_wasm));
    let cases = krate.join("tests");
    let junit = env.path("junit.xml");
    let o = sandgraph_in(
        &krate,
        &target,
        &[
            "test",
            wasm,
            "--cases",
            cases.to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ],
    );
    assert_ok("sandgraph test", &o);
    let (tests, bad) = junit_counts(&junit);
    assert!(tests >= 1 && bad == 0, "junit: {tests} cases, {bad} failed");

    // CI gate: loads, lint-clean, and the digest it reports is the file's.
    let o = sandgraph_in(
        &krate,
        &target,
        &["check", wasm, "--json", "--deny-warnings"],
    );
    assert_ok("sandgraph check", &o);
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let graph = &report["graphs"][0];
    let bytes = std::fs::read(&dist_wasm).unwrap();
    assert_eq!(graph["sha256"], json!(sha256_hex(&bytes)));
    let name = graph["name"].as_str().unwrap().to_owned();

    // Pin and sign; the secret key stays apart from the trusted public keys.
    let dist = env.path("dist");
    assert_ok(
        "sandgraph lock",
        &env.run(&["lock", "--graphs", dist.to_str().unwrap()]),
    );
    assert!(dist.join("sandgraph.lock").is_file());
    std::fs::create_dir(env.path("secret")).unwrap();
    std::fs::create_dir(env.path("trusted")).unwrap();
    assert_ok("keygen", &env.run(&["keygen", "--out", "secret/ci.key"]));
    std::fs::copy(env.path("secret/ci.key.pub"), env.path("trusted/ci.pub")).unwrap();
    assert_ok("sign", &env.run(&["sign", wasm, "--key", "secret/ci.key"]));

    // Ship through a real registry into a fresh folder.
    std::fs::create_dir(env.path("fresh")).unwrap();
    let fresh = env.path("fresh");
    let registry = OciRegistry::start(Auth::Open);
    let reference = format!("{}/graphs/ticket-triage:1.0", registry.addr());
    let o = env.run(&["push", wasm, &reference]);
    assert_ok("push", &o);
    assert!(stdout(&o).contains("@sha256:"), "{}", stdout(&o));
    assert_ok(
        "pull",
        &env.run(&["pull", &reference, "--out", fresh.to_str().unwrap()]),
    );
    let pulled = fresh.join("ticket-triage.wasm");
    assert_eq!(
        std::fs::read(&pulled).unwrap(),
        bytes,
        "pulled bytes differ"
    );
    assert!(
        fresh.join("ticket-triage.wasm.sig").is_file(),
        "no signature came along"
    );
    let o = env.run(&[
        "verify",
        pulled.to_str().unwrap(),
        "--trusted-keys",
        "trusted",
    ]);
    assert_ok("verify", &o);
    // The lock published with the graphs goes with them.
    std::fs::copy(dist.join("sandgraph.lock"), fresh.join("sandgraph.lock")).unwrap();

    // Serve the fresh folder pinned and signature-checked; a real MCP client
    // lists the graph and calls it.
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sandgraph"));
    cmd.args([
        "serve",
        "--graphs",
        "fresh",
        "--locked",
        "--trusted-keys",
        "trusted",
    ])
    .current_dir(env.dir.path())
    .env("SANDGRAPH_LOG", "warn")
    .env("SANDGRAPH_CACHE", crate::common::cache::shared())
    .kill_on_drop(true);
    let (transport, _stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = ().serve(transport).await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    assert!(
        tools.iter().any(|t| t.name == name),
        "{name} not served: {tools:?}"
    );
    let mut params = CallToolRequestParams::new(name.clone());
    params.arguments = json!({"text": "route this ticket please"})
        .as_object()
        .cloned();
    let result = client.call_tool(params).await.unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let text = match &result.content[..] {
        [ContentBlock::Text(t)] => t.text.clone(),
        other => panic!("not one text block: {other:?}"),
    };
    let state: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(state["words"], json!(4), "{state}");
    client.cancel().await.unwrap();

    // The same folder with one byte changed is refused before serving.
    let mut tampered = bytes.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    std::fs::write(&pulled, &tampered).unwrap();
    let o = env.run(&["tools", "list", "--graphs", "fresh", "--locked"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("changed since it was locked"),
        "{}",
        stderr(&o)
    );
}
