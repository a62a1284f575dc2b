//! Builds every example graph (`example-graphs/*`) and every test guest
//! (`tests/guests/*`) once, as wasm32-wasip2 components (the `guest` profile: release, small), and
//! generates `$OUT_DIR/graphs.rs`: one `pub const` path per component plus
//! the `foreach_graph!` macro (see `src/lib.rs`).
//!
//! It also generates `$OUT_DIR/sdk-bindings.rs`: the SDK's bindings as
//! wit-bindgen generates them today, which the test `the_sdk_bindings_are_current`
//! compares with the copy the SDK ships.
//!
//! The guests are built by one nested `cargo build` into
//! `<workspace>/target/guests`, not `OUT_DIR`, so debug, release, test and
//! clippy builds of this crate all share one guest build.

use std::collections::BTreeMap;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const TARGET: &str = "wasm32-wasip2";

/// Directories (relative to the workspace) whose subdirectories are guests.
const GUEST_DIRS: [&str; 2] = ["example-graphs", "tests/guests"];

/// Environment variables of the outer build that would leak into, or break,
/// the nested one: flags for the host target, jobserver handles, compiler
/// wrappers (clippy, sccache, coverage), and the outer target directory.
const SCRUBBED_ENV: &[&str] = &[
    "CARGO_ENCODED_RUSTFLAGS",
    "RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_MAKEFLAGS",
    "MAKEFLAGS",
    "MFLAGS",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_BUILD_RUSTC_WRAPPER",
    "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "CARGO_LLVM_COV",
    "CARGO_LLVM_COV_TARGET_DIR",
    "LLVM_PROFILE_FILE",
];

/// A guest crate found on disk.
struct Guest {
    /// Cargo package name, e.g. `hostile-infinite-loop`.
    package: String,
    /// Directory relative to the workspace, e.g. `tests/guests/hostile-infinite-loop`.
    dir: String,
    /// Absolute path of its `Cargo.toml`.
    manifest: PathBuf,
}

fn main() {
    let manifest_dir = PathBuf::from(env_var("CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir
        .parent()
        .expect("the tests crate lives inside the workspace")
        .to_path_buf();
    check_target_installed();
    let guests = discover(&workspace);
    watch(&workspace, &guests);
    let artifacts = build(&workspace, &guests);
    let source = generate(&guests, &artifacts);

    let out_dir = PathBuf::from(env_var("OUT_DIR"));
    write_if_changed(&out_dir.join("graphs.rs"), &source);
    write_if_changed(&out_dir.join("sdk-bindings.rs"), &sdk_bindings(&workspace));
}

/// Reruns this script when what the guests are built from changes: each
/// guest's folder, the SDK's Rust crate and WIT, the spec crate, the WIT
/// world and the workspace's manifest and lock (a guest added or removed
/// changes the lock, since the guest folders are workspace members).
///
/// Not the whole of `example-graphs`: its Python and JavaScript graphs are
/// not built here, and what installing and building them writes
/// (`node_modules`, componentize-py's `__pycache__`) would otherwise rerun
/// this script, and recompile every test crate, on the next `cargo test`.
fn watch(workspace: &Path, guests: &[Guest]) {
    let inputs = [
        "guest-sdk/Cargo.toml",
        "guest-sdk/src",
        "guest-sdk/wit",
        "host/spec",
        "wit",
        "Cargo.toml",
        "Cargo.lock",
    ];
    for path in guests.iter().map(|g| g.dir.as_str()).chain(inputs) {
        println!("cargo:rerun-if-changed={}", workspace.join(path).display());
    }
}

/// Writes `source` to `path` unless it already holds it.
fn write_if_changed(path: &Path, source: &str) {
    if fs::read_to_string(path).ok().as_deref() != Some(source) {
        fs::write(path, source)
            .unwrap_or_else(|err| fail(format!("writing {}: {err}", path.display())));
    }
}

/// The SDK's bindings of the `graph-component` world, generated from its
/// packaged WIT copy with the options its `generate!` call had before they
/// were checked in (`guest-sdk/src/component/bindings.rs`), under that
/// file's header.
fn sdk_bindings(workspace: &Path) -> String {
    use wit_bindgen_core::wit_parser::Resolve;
    use wit_bindgen_core::{Files, WorldGenerator};

    let wit = workspace.join("guest-sdk/wit");
    let mut resolve = Resolve::default();
    let world = resolve
        .push_path(&wit)
        .and_then(|(package, _)| resolve.select_world(&[package], Some("graph-component")))
        .unwrap_or_else(|err| fail(format!("reading {}: {err:#}", wit.display())));
    let opts = wit_bindgen_rust::Opts {
        format: true,
        pub_export_macro: true,
        export_macro_name: Some("__export_graph_component".to_owned()),
        default_bindings_module: Some("::sandgraph_sdk::__private::bindings".to_owned()),
        ..Default::default()
    };
    let mut files = Files::default();
    if let Err(err) = opts.build().generate(&mut resolve, world, &mut files) {
        fail(format!("generating the SDK's bindings: {err:#}"));
    }
    let Some((_, source)) = files.iter().next() else {
        fail("wit-bindgen generated no file for the SDK's bindings");
    };
    format!(
        "// Rewritten by `SANDGRAPH_BLESS=1 cargo test -p sandgraph-tests --test graphs sdk_bindings`.\n{}",
        String::from_utf8_lossy(source)
    )
}

/// Stops the build with `message`.
fn fail(message: impl AsRef<str>) -> ! {
    eprintln!("error: {}", message.as_ref());
    std::process::exit(1);
}

fn env_var(name: &str) -> String {
    env::var(name).unwrap_or_else(|_| fail(format!("cargo did not set {name}")))
}

/// Fails with the fix when the wasm32-wasip2 standard library is missing.
fn check_target_installed() {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let output = Command::new(&rustc)
        .args(["--print", "target-libdir", "--target", TARGET])
        .output();
    let installed = match output {
        Ok(output) if output.status.success() => {
            let dir = String::from_utf8_lossy(&output.stdout);
            Path::new(dir.trim()).is_dir()
        }
        _ => false,
    };
    if !installed {
        fail(format!(
            "the {TARGET} target is not installed: run `rustup target add {TARGET}`"
        ));
    }
}

/// Every guest crate, sorted by package name.
fn discover(workspace: &Path) -> Vec<Guest> {
    let mut guests = Vec::new();
    for parent in GUEST_DIRS {
        let Ok(entries) = fs::read_dir(workspace.join(parent)) else {
            continue;
        };
        for entry in entries.flatten() {
            let manifest = entry.path().join("Cargo.toml");
            let Ok(text) = fs::read_to_string(&manifest) else {
                continue;
            };
            let package = package_name(&text)
                .unwrap_or_else(|| fail(format!("{}: no [package] name", manifest.display())));
            let ident = package.replace('-', "_");
            if is_keyword(&ident) {
                fail(format!(
                    "{}: package name `{package}` is a Rust keyword and cannot name a test \
                     function; rename it (e.g. `{package}-graph`)",
                    manifest.display()
                ));
            }
            let dir = format!("{parent}/{}", entry.file_name().to_string_lossy());
            guests.push(Guest {
                package,
                dir,
                manifest,
            });
        }
    }
    guests.sort_by(|a, b| a.package.cmp(&b.package));
    if let Some(pair) = guests.windows(2).find(|w| w[0].package == w[1].package) {
        fail(format!(
            "two guests are named `{}`: {} and {}",
            pair[0].package, pair[0].dir, pair[1].dir
        ));
    }
    guests
}

/// The `name` of the `[package]` table, read without a TOML parser: the
/// guests' manifests are ours and simple.
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package {
            let Some(rest) = line.strip_prefix("name") else {
                continue;
            };
            let value = rest.trim_start().strip_prefix('=')?.trim();
            return Some(value.trim_matches('"').to_owned());
        }
    }
    None
}

fn is_keyword(ident: &str) -> bool {
    const KEYWORDS: &[&str] = &[
        "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum",
        "extern", "false", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod",
        "move", "mut", "pub", "ref", "return", "self", "static", "struct", "super", "trait",
        "true", "try", "type", "unsafe", "use", "where", "while", "yield",
    ];
    KEYWORDS.contains(&ident)
}

/// Runs the nested build; returns each guest's component, by manifest path.
fn build(workspace: &Path, guests: &[Guest]) -> BTreeMap<PathBuf, PathBuf> {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace)
        .args(["build", "--profile", "guest", "--target", TARGET])
        .args(["--message-format", "json-render-diagnostics"])
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"));
    for guest in guests {
        cmd.args(["-p", &guest.package]);
    }
    for var in SCRUBBED_ENV {
        cmd.env_remove(var);
    }
    cmd.env("CARGO_TARGET_DIR", workspace.join("target").join("guests"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());

    let mut child = cmd
        .spawn()
        .unwrap_or_else(|err| fail(format!("running {cmd:?}: {err}")));
    let mut artifacts = BTreeMap::new();
    let stdout = child.stdout.take().expect("stdout is piped");
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap_or_else(|err| fail(format!("reading cargo's output: {err}")));
        if let Some((manifest, wasm)) = component_artifact(&line) {
            artifacts.insert(manifest, wasm);
        }
    }
    let status = child
        .wait()
        .unwrap_or_else(|err| fail(format!("waiting for cargo: {err}")));
    if !status.success() {
        fail(format!(
            "building the guests for {TARGET} failed ({status})"
        ));
    }
    artifacts
}

/// (manifest path, `.wasm` path) from a `compiler-artifact` message of a
/// cdylib, if `line` is one.
fn component_artifact(line: &str) -> Option<(PathBuf, PathBuf)> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message["reason"] != "compiler-artifact" {
        return None;
    }
    let kinds = message["target"]["kind"].as_array()?;
    if !kinds.iter().any(|kind| kind == "cdylib") {
        return None;
    }
    let wasm = message["filenames"]
        .as_array()?
        .iter()
        .filter_map(|f| f.as_str())
        .find(|f| f.ends_with(".wasm"))?;
    let manifest = message["manifest_path"].as_str()?;
    Some((PathBuf::from(manifest), PathBuf::from(wasm)))
}

/// The text of `graphs.rs`.
fn generate(guests: &[Guest], artifacts: &BTreeMap<PathBuf, PathBuf>) -> String {
    let mut src = String::from("// @generated by tests/build.rs; do not edit.\n\n");
    let mut names = Vec::new();
    for guest in guests {
        let manifest = fs::canonicalize(&guest.manifest).unwrap_or_else(|_| guest.manifest.clone());
        let wasm = artifacts
            .get(&manifest)
            .or_else(|| artifacts.get(&guest.manifest))
            .unwrap_or_else(|| {
                fail(format!(
                    "cargo reported no component for `{}` ({}); is it a cdylib?",
                    guest.package, guest.dir
                ))
            });
        if !wasm.is_file() {
            fail(format!("{} does not exist after the build", wasm.display()));
        }
        let wasm = wasm
            .to_str()
            .unwrap_or_else(|| fail(format!("{} is not UTF-8", wasm.display())));
        let constant = guest.package.replace('-', "_").to_uppercase();
        let _ = writeln!(
            src,
            "/// The `{}` component ({}), built for {TARGET}.\npub const {constant}: &str = {wasm:?};\n",
            guest.package, guest.dir
        );
        names.push((guest.package.replace('-', "_"), constant));
    }

    src.push_str("/// Every graph as (snake_case name, component path), sorted by name.\n");
    src.push_str("pub const ALL: &[(&str, &str)] = &[\n");
    for (snake, constant) in &names {
        let _ = writeln!(src, "    ({snake:?}, {constant}),");
    }
    src.push_str("];\n\n");

    src.push_str(
        "/// Invokes `$mac!(name)` once per graph, `name` being the snake_case\n\
         /// package name (`echo`, `map_reduce`, `hostile_infinite_loop`, ...).\n\
         /// `$mac` may be a path.\n\
         #[macro_export]\n\
         macro_rules! foreach_graph {\n    ($($mac:tt)*) => {\n",
    );
    for (snake, _) in &names {
        let _ = writeln!(src, "        $($mac)*!({snake});");
    }
    src.push_str("    };\n}\n");
    src
}
