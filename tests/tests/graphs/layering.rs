//! The crate layering of ARCHITECTURE.md, read from `cargo metadata`: a
//! forbidden dependency edge fails here, naming the edge (and, for a
//! transitive one, the path), before it can grow into the design.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::process::Command;

use serde_json::Value;

/// The lower floors: they never depend on a crate of the upper floors.
const LOWER: &[&str] = &[
    "sandgraph-spec",
    "sandgraph-core",
    "sandgraph-params",
    "sandgraph-store",
    "sandgraph-runtime",
    "sandgraph-factors",
    "sandgraph-llm",
    "sandgraph-artifact",
    "sandgraph-distribution",
];

/// The upper floors: hosts, front doors and the product's own policies.
const UPPER: &[&str] = &[
    "sandgraph-registry",
    "sandgraph-controller",
    "sandgraph-router",
    "sandgraph-supervisor",
    "sandgraph-server",
    "sandgraph-mcp",
    "sandgraph-studio",
    "sandgraph-toolkit",
    "sandgraph-cli",
];

/// Direct edges that must not exist, of any kind (normal, build or dev),
/// with the reason the test prints.
const FORBIDDEN: &[(&str, &str, &str)] = &[
    (
        "sandgraph-mcp",
        "sandgraph-studio",
        "mcp and the studio are sibling route sets on sandgraph-server",
    ),
    (
        "sandgraph-studio",
        "sandgraph-mcp",
        "mcp and the studio are sibling route sets on sandgraph-server",
    ),
    (
        "*",
        "sandgraph-cli",
        "the CLI is the top: it calls libraries, nothing calls it",
    ),
];

/// Crates a crate must not reach through its normal dependencies, however
/// indirectly, with the reason.
const UNREACHABLE: &[(&str, &[&str], &str)] = &[
    (
        "sandgraph-core",
        &["wasmtime"],
        "the executor is tested with a fake backend, without a wasm engine",
    ),
    (
        "sandgraph-spec",
        &["wasmtime", "tokio"],
        "the guest SDK checks a graph with the host's own rules, on wasm32",
    ),
    (
        "sandgraph-store",
        &["wasmtime"],
        "the store keeps bytes and JSON, it never runs a graph",
    ),
    (
        "sandgraph-params",
        &["wasmtime"],
        "the parameter DSL never runs a graph",
    ),
    (
        "sandgraph-controller",
        &["wasmtime"],
        "the agent-graph rules are synchronous code over the store",
    ),
    (
        "sandgraph-runtime",
        &[
            "reqwest",
            "rustls",
            "tokio-rustls",
            "hyper-rustls",
            "rustls-platform-verifier",
            "wasmtime-wasi-http",
        ],
        "the sandbox has no HTTP client stack: capabilities that reach the network are \
         factors (sandgraph-factors)",
    ),
];

/// The only workspace crates with wasmtime among their normal
/// dependencies: the runtime, and the capabilities it links as factors.
const ENGINE_OWNERS: &[&str] = &["sandgraph-runtime", "sandgraph-factors"];
const ENGINE: &[&str] = &["wasmtime", "wasmtime-wasi", "wasmtime-wasi-http"];

struct Graph {
    /// Package id → name, for every package of the build.
    names: BTreeMap<String, String>,
    /// Package id → (dependency id, whether any of its kinds is normal).
    deps: BTreeMap<String, Vec<(String, bool)>>,
    /// The workspace's packages, by name → id.
    members: BTreeMap<String, String>,
}

fn metadata() -> Graph {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    // Only this machine's platform: the others' packages may not be
    // downloaded, and --offline must not need them.
    let version = Command::new(&cargo)
        .arg("-vV")
        .output()
        .expect("cargo -vV runs");
    let version = String::from_utf8_lossy(&version.stdout);
    let host = version
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("cargo -vV names the host");
    let out = Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", host])
        .current_dir(root)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let names: BTreeMap<String, String> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (str_of(&p["id"]), str_of(&p["name"])))
        .collect();
    let members = meta["workspace_members"]
        .as_array()
        .expect("workspace_members")
        .iter()
        .map(|id| (names[&str_of(id)].clone(), str_of(id)))
        .collect();
    let deps = meta["resolve"]["nodes"]
        .as_array()
        .expect("resolve.nodes")
        .iter()
        .map(|node| {
            let edges = node["deps"]
                .as_array()
                .expect("deps")
                .iter()
                .map(|d| {
                    let normal = d["dep_kinds"]
                        .as_array()
                        .expect("dep_kinds")
                        .iter()
                        .any(|k| k["kind"].is_null());
                    (str_of(&d["pkg"]), normal)
                })
                .collect();
            (str_of(&node["id"]), edges)
        })
        .collect();
    Graph {
        names,
        deps,
        members,
    }
}

fn str_of(v: &Value) -> String {
    v.as_str().expect("a string").to_owned()
}

impl Graph {
    /// The workspace's direct edges `(from, to, normal)`, by name.
    fn member_edges(&self) -> Vec<(&str, &str, bool)> {
        let mut edges = Vec::new();
        for (name, id) in &self.members {
            for (dep, normal) in &self.deps[id] {
                edges.push((name.as_str(), self.names[dep].as_str(), *normal));
            }
        }
        edges
    }

    /// The path from `from` (a member) to the first package named in
    /// `targets` through normal dependencies, if one is reachable.
    fn normal_path(&self, from: &str, targets: &[&str]) -> Option<Vec<String>> {
        let start = self.members.get(from)?;
        let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
        let mut seen = BTreeSet::from([start.as_str()]);
        let mut queue = VecDeque::from([start.as_str()]);
        while let Some(id) = queue.pop_front() {
            if targets.contains(&self.names[id].as_str()) {
                let mut path = vec![self.names[id].clone()];
                let mut at = id;
                while let Some(p) = parent.get(at) {
                    path.push(self.names[*p].clone());
                    at = p;
                }
                path.reverse();
                return Some(path);
            }
            for (dep, normal) in &self.deps[id] {
                if *normal && seen.insert(dep.as_str()) {
                    parent.insert(dep.as_str(), id);
                    queue.push_back(dep.as_str());
                }
            }
        }
        None
    }
}

#[test]
fn crate_layering_holds() {
    let graph = metadata();
    let mut broken = Vec::new();
    for (from, to, normal) in graph.member_edges() {
        if normal && LOWER.contains(&from) && UPPER.contains(&to) {
            broken.push(format!(
                "{from} -> {to}: a lower floor depends on an upper one"
            ));
        }
        if normal && ENGINE.contains(&to) && !ENGINE_OWNERS.contains(&from) {
            broken.push(format!(
                "{from} -> {to}: only {ENGINE_OWNERS:?} hold the wasm engine"
            ));
        }
        for (f, t, why) in FORBIDDEN {
            if (*f == "*" || *f == from) && *t == to {
                broken.push(format!("{from} -> {to}: {why}"));
            }
        }
    }
    for (from, targets, why) in UNREACHABLE {
        if let Some(path) = graph.normal_path(from, targets) {
            broken.push(format!("{}: {why}", path.join(" -> ")));
        }
    }
    assert!(
        broken.is_empty(),
        "forbidden dependency edges:\n{}",
        broken.join("\n")
    );
}

#[test]
fn every_workspace_crate_has_a_floor() {
    let graph = metadata();
    let unplaced: Vec<&String> = graph
        .members
        .keys()
        .filter(|name| name.starts_with("sandgraph-") && name.as_str() != "sandgraph-tests")
        .filter(|name| !LOWER.contains(&name.as_str()) && !UPPER.contains(&name.as_str()))
        .filter(|name| !OTHER.contains(&name.as_str()))
        .collect();
    assert!(
        unplaced.is_empty(),
        "crates missing from the layering of tests/tests/graphs/layering.rs \
         (put each in LOWER, UPPER or OTHER): {unplaced:?}"
    );
}

/// Workspace crates outside the host's floors: the guest SDK and its
/// spec, the test model server.
const OTHER: &[&str] = &["sandgraph-sdk", "sandgraph-test-llm"];
