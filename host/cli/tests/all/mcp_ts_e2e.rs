//! `sandgraph serve` against a client nobody here wrote: the official MCP
//! TypeScript SDK (`tests/mcp-e2e`, installed by `.ci/run` with
//! `npm ci --prefix tests/mcp-e2e`), over stdio and Streamable HTTP.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn the_typescript_sdk_lists_calls_and_gets_errors_and_progress() {
    let e2e = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp-e2e");
    assert!(
        e2e.join("node_modules/@modelcontextprotocol/sdk/package.json")
            .is_file(),
        "the TypeScript SDK is not installed: run `npm ci --prefix tests/mcp-e2e` (.ci/run does)"
    );
    let dir = tempfile::tempdir().unwrap();
    let graphs = dir.path().join("graphs");
    std::fs::create_dir(&graphs).unwrap();
    for (name, c) in [
        ("echo_graph.wasm", sandgraph_tests::ECHO),
        ("greet_graph.wasm", sandgraph_tests::GREET),
        ("loop_graph.wasm", sandgraph_tests::LOOP_GRAPH),
    ] {
        std::fs::copy(c, graphs.join(name)).unwrap();
    }
    let config = dir.path().join("sandgraph.toml");
    std::fs::write(&config, "[graphs.loop_graph]\nas_tool = true\n").unwrap();
    let out = Command::new("node")
        .arg(e2e.join("e2e.mjs"))
        .arg(env!("CARGO_BIN_EXE_sandgraph"))
        .arg(&graphs)
        .arg(&config)
        .current_dir(dir.path())
        .output()
        .unwrap_or_else(|e| panic!("cannot run node (Node.js 18+ is needed): {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "e2e failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let last = stdout.lines().last().unwrap_or_default();
    let passed: u32 = last
        .strip_suffix(" passed, 0 failed")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `N passed, 0 failed` line:\n{stdout}"));
    // Every check of both flows ran.
    assert!(passed >= 26, "{stdout}");
}
