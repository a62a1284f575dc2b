//! Writes `$OUT_DIR/sdk_files.rs`: the SDK sources of every guest
//! language, file by file, that `sandgraph new` and `sandgraph sdk update`
//! vendor into a project (see src/sdk.rs). The tables are made by walking
//! the SDK folders, so a new SDK file is carried without editing a list;
//! the Rust crates' manifests are written with every `workspace = true`
//! field resolved from the root Cargo.toml, so they build outside it.

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    embed_sdks();
}

/// The repository root (host/toolkit/../..).
fn repo_root() -> PathBuf {
    let dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    dir.join("../..")
        .canonicalize()
        .expect("the repository root exists")
}

/// One file of a vendored SDK: its path under the language's folder, and
/// either the source file it is a copy of or its generated text.
enum Entry {
    Copy(String, PathBuf),
    Text(String, String),
}

/// The files under `dir` (recursively) whose names end with one of
/// `suffixes`, as (path relative to `dir`, absolute path), sorted; folders
/// named in `skip` are left out.
fn files_under(
    dir: &Path,
    suffixes: &[&str],
    skip: &[&str],
    recurse: bool,
) -> Vec<(String, PathBuf)> {
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        let entries = std::fs::read_dir(&folder)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", folder.display()));
        for entry in entries {
            let path = entry.expect("a folder entry").path();
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            if path.is_dir() {
                if recurse && !skip.contains(&name.as_str()) && name != "__pycache__" {
                    stack.push(path);
                }
            } else if suffixes.iter().any(|s| name.ends_with(s)) {
                let rel = path
                    .strip_prefix(dir)
                    .expect("under dir")
                    .to_string_lossy()
                    .replace('\\', "/");
                out.push((rel, path));
            }
        }
    }
    out.sort();
    out
}

/// `manifest` (a member crate's Cargo.toml) with its `workspace = true`
/// fields taken from the root manifest `root`, its dev-dependencies
/// dropped, and `sandgraph-spec` a path dependency on the vendored copy.
fn resolve_manifest(manifest: &Path, root: &toml::Table) -> String {
    let text = std::fs::read_to_string(manifest)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", manifest.display()));
    let mut doc: toml::Table =
        toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let ws = root
        .get("workspace")
        .and_then(toml::Value::as_table)
        .expect("the root Cargo.toml has [workspace]");
    let ws_table = |key: &str| {
        ws.get(key)
            .and_then(toml::Value::as_table)
            .cloned()
            .unwrap_or_default()
    };
    let (ws_package, ws_deps) = (ws_table("package"), ws_table("dependencies"));
    if let Some(toml::Value::Table(package)) = doc.get_mut("package") {
        for (key, value) in package.iter_mut() {
            if inherited(value) {
                *value = ws_package
                    .get(key)
                    .unwrap_or_else(|| panic!("[workspace.package] has no {key}"))
                    .clone();
            }
        }
    }
    doc.remove("dev-dependencies");
    doc.remove("lints");
    resolve_dependency_tables(&mut doc, &ws_deps);
    if let Some(toml::Value::Table(targets)) = doc.get_mut("target") {
        for target in targets.iter_mut().map(|(_, target)| target) {
            if let Some(t) = target.as_table_mut() {
                t.remove("dev-dependencies");
                resolve_dependency_tables(t, &ws_deps);
            }
        }
    }
    format!(
        "# Vendored by `sandgraph new` / `sandgraph sdk update`: the SDK this\n\
         # sandgraph carries. Replace it with `sandgraph sdk update`, not by hand.\n{}",
        toml::to_string(&doc).expect("a manifest serializes")
    )
}

/// Whether a manifest value is `{ workspace = true }`.
fn inherited(v: &toml::Value) -> bool {
    v.get("workspace").and_then(toml::Value::as_bool) == Some(true)
}

/// Resolves the `dependencies` and `build-dependencies` of `table` (a
/// manifest, or one of its `[target.*]` tables) against the workspace's.
fn resolve_dependency_tables(table: &mut toml::Table, ws_deps: &toml::Table) {
    for key in ["dependencies", "build-dependencies"] {
        if let Some(toml::Value::Table(deps)) = table.get_mut(key) {
            for (name, value) in deps.iter_mut() {
                resolve_dependency(name, value, ws_deps);
            }
        }
    }
}

/// One dependency: `sandgraph-spec` becomes the vendored path, a
/// `workspace = true` one the workspace's entry with the member's own
/// keys (features added to the workspace's) on top.
fn resolve_dependency(name: &str, value: &mut toml::Value, ws_deps: &toml::Table) {
    if name == "sandgraph-spec" {
        let mut t = toml::Table::new();
        t.insert("path".into(), "../sandgraph-spec".into());
        *value = t.into();
        return;
    }
    if !inherited(value) {
        return;
    }
    let base = ws_deps
        .get(name)
        .unwrap_or_else(|| panic!("[workspace.dependencies] has no {name}"));
    let mut resolved = match base {
        toml::Value::String(v) => {
            let mut t = toml::Table::new();
            t.insert("version".into(), v.clone().into());
            t
        }
        toml::Value::Table(t) => t.clone(),
        other => panic!("[workspace.dependencies] {name} is {other}"),
    };
    assert!(
        !resolved.contains_key("path"),
        "{name} is a path dependency of the workspace: vendor it too"
    );
    let local = value.as_table().cloned().unwrap_or_default();
    for (key, v) in local {
        match key.as_str() {
            "workspace" => {}
            "features" => {
                let mut all = resolved
                    .get("features")
                    .and_then(toml::Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for f in v.as_array().cloned().unwrap_or_default() {
                    if !all.contains(&f) {
                        all.push(f);
                    }
                }
                resolved.insert("features".into(), all.into());
            }
            _ => {
                resolved.insert(key, v);
            }
        }
    }
    *value = resolved.into();
}

/// The WIT world the SDK binds to, `package:name/world@version`, from the
/// `package` and `world` lines of `wit`.
fn world_of(wit: &Path) -> String {
    let text = std::fs::read_to_string(wit)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", wit.display()));
    let package = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("package "))
        .map(|p| p.trim_end_matches(';').trim())
        .expect("graph.wit names its package");
    let worlds: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("world "))
        .filter_map(|w| w.split_whitespace().next())
        .collect();
    assert_eq!(worlds.len(), 1, "graph.wit defines one world: {worlds:?}");
    let (name, version) = package.split_once('@').expect("the package is versioned");
    format!("{name}/{}@{version}", worlds[0])
}

/// Writes `$OUT_DIR/sdk_files.rs`: `RUST_SDK`, `PYTHON_SDK` and `JS_SDK`
/// ((path, text) pairs) and `SDK_WORLD`.
fn embed_sdks() {
    let root = repo_root();
    let sdk = root.join("guest-sdk");
    let mut out = String::from("// Generated by host/toolkit/build.rs from the SDK folders.\n");
    for (name, entries) in [
        ("RUST_SDK", rust_sdk(&root)),
        ("PYTHON_SDK", python_sdk(&sdk.join("python"))),
        ("JS_SDK", js_sdk(&sdk.join("js"))),
    ] {
        write_sdk(&mut out, name, &entries);
    }
    let wit = sdk.join("wit/graph.wit");
    writeln!(out, "/// The WIT world the SDKs bind to.").unwrap();
    writeln!(out, "pub const SDK_WORLD: &str = {:?};", world_of(&wit)).unwrap();
    let dest = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("sdk_files.rs");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("cannot write {}: {e}", dest.display()));
}

/// The Rust SDK's files: the crate and the `sandgraph-spec` crate it
/// depends on, each with a manifest resolved against the workspace's.
fn rust_sdk(root: &Path) -> Vec<Entry> {
    let root_manifest = root.join("Cargo.toml");
    println!("cargo:rerun-if-changed={}", root_manifest.display());
    let root_doc: toml::Table = toml::from_str(
        &std::fs::read_to_string(&root_manifest).expect("the root Cargo.toml is readable"),
    )
    .expect("the root Cargo.toml is TOML");
    let sdk = root.join("guest-sdk");
    let spec = root.join("host/spec");
    for manifest in [sdk.join("Cargo.toml"), spec.join("Cargo.toml")] {
        println!("cargo:rerun-if-changed={}", manifest.display());
    }
    let mut rust = vec![
        Entry::Text(
            "sandgraph-sdk/Cargo.toml".into(),
            resolve_manifest(&sdk.join("Cargo.toml"), &root_doc),
        ),
        Entry::Copy("sandgraph-sdk/README.md".into(), sdk.join("README.md")),
    ];
    for (rel, path) in files_under(&sdk.join("src"), &[".rs"], &[], true) {
        rust.push(Entry::Copy(format!("sandgraph-sdk/src/{rel}"), path));
    }
    for (rel, path) in files_under(&sdk.join("wit"), &[".wit"], &[], false) {
        rust.push(Entry::Copy(format!("sandgraph-sdk/wit/{rel}"), path));
    }
    rust.push(Entry::Text(
        "sandgraph-spec/Cargo.toml".into(),
        resolve_manifest(&spec.join("Cargo.toml"), &root_doc),
    ));
    for (rel, path) in files_under(&spec.join("src"), &[".rs"], &[], true) {
        rust.push(Entry::Copy(format!("sandgraph-spec/src/{rel}"), path));
    }
    rust
}

/// The Python SDK's files: the package and its project file.
fn python_sdk(python_dir: &Path) -> Vec<Entry> {
    let mut python = vec![
        Entry::Copy("pyproject.toml".into(), python_dir.join("pyproject.toml")),
        Entry::Copy("README.md".into(), python_dir.join("README.md")),
    ];
    for (rel, path) in files_under(&python_dir.join("sandgraph"), &[".py"], &[], true) {
        python.push(Entry::Copy(format!("sandgraph/{rel}"), path));
    }
    python
}

/// The JavaScript SDK's files: its modules, types and package file.
fn js_sdk(js_dir: &Path) -> Vec<Entry> {
    files_under(
        js_dir,
        &[".js", ".d.ts", "package.json", "README.md"],
        &[],
        false,
    )
    .into_iter()
    .map(|(rel, path)| Entry::Copy(rel, path))
    .collect()
}

/// Appends `pub const {name}: &[(&str, &str)]` with `entries` to `out`.
fn write_sdk(out: &mut String, name: &str, entries: &[Entry]) {
    writeln!(
        out,
        "/// The files of the {name}: (path in the project's SDK folder, text)."
    )
    .unwrap();
    writeln!(out, "pub const {name}: &[(&str, &str)] = &[").unwrap();
    for entry in entries {
        match entry {
            Entry::Copy(rel, path) => {
                println!("cargo:rerun-if-changed={}", path.display());
                writeln!(
                    out,
                    "    ({rel:?}, include_str!({:?})),",
                    path.display().to_string()
                )
                .unwrap();
            }
            Entry::Text(rel, text) => writeln!(out, "    ({rel:?}, {text:?}),").unwrap(),
        }
    }
    writeln!(out, "];").unwrap();
}
