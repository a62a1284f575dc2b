//! One set of golden cases, every language: each example (`echo`, `greet`,
//! `map-reduce`, `approval`) and the hostile twin are built from their Rust,
//! Python and JavaScript sources with `sandgraph build`, and every build
//! must pass the same cases in `tests/conformance/<example>/` through
//! `sandgraph test`, and describe the same tool (name, description,
//! parameters, channels, nodes, edges) as the Rust build.
//!
//! Built components are kept under the test's temporary folder, keyed by a
//! digest of everything that goes into them (the sources, the language's
//! SDK and pinned tool, the WIT world and the build code of `sandgraph`),
//! so a warm run builds nothing, even after a change elsewhere in the
//! host, and builds under older keys are removed; compiled code is kept
//! in one compile cache per language and example.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use super::new::assert_ok;
use crate::common::cargo::{repo, shared_target};
use crate::common::{Env, sha256_hex, stderr, stdout};

/// The examples every language ships, by folder name.
const EXAMPLES: [&str; 4] = ["echo", "greet", "map-reduce", "approval"];

#[derive(Clone, Copy, Debug)]
pub(crate) enum Lang {
    Rust,
    Python,
    Js,
}

impl Lang {
    fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
        }
    }

    /// The folder `example` is written in, in this language (`hostile` is
    /// the hostile twin).
    fn source(self, example: &str) -> PathBuf {
        let repo = repo();
        match (self, example) {
            (Lang::Rust, "hostile") => repo.join("tests/guests/polyglot-hostile"),
            (Lang::Rust, _) => repo.join("example-graphs").join(example),
            (_, "hostile" | "capabilities" | "llm") => {
                repo.join("tests/polyglot").join(self.name()).join(example)
            }
            (_, _) => repo.join("example-graphs").join(self.name()).join(example),
        }
    }

    /// What a build of this language reads besides the graph's folder:
    /// the SDK, the WIT world, the pinned tool, and the `sandgraph build`
    /// code that drives it (not the whole binary: a change elsewhere in
    /// the host does not change what a build writes, and a Python build
    /// takes about 25 s).
    fn sdk(self) -> Vec<PathBuf> {
        let repo = repo();
        let mut sdk = match self {
            Lang::Rust => vec![
                repo.join("guest-sdk/src"),
                repo.join("guest-sdk/Cargo.toml"),
                repo.join("host/spec/src"),
                repo.join("Cargo.lock"),
            ],
            Lang::Python => vec![
                repo.join("guest-sdk/python/sandgraph"),
                repo.join("example-graphs/python/requirements.txt"),
                repo.join("host/toolkit/src/build_py.rs"),
                repo.join("host/toolkit/wit/wasi"),
            ],
            Lang::Js => vec![
                repo.join("guest-sdk/js"),
                repo.join("example-graphs/js/package-lock.json"),
                repo.join("host/toolkit/src/build_js.rs"),
                repo.join("host/toolkit/wit/wasi"),
            ],
        };
        sdk.push(repo.join("host/toolkit/src/build.rs"));
        sdk.push(repo.join("wit"));
        sdk
    }
}

/// Folders a digest of sources skips: tool output and installed packages.
const SKIPPED: [&str; 5] = ["node_modules", "__pycache__", "target", "dist", ".venv"];

/// Feeds every file under `path` (sorted, by relative name and contents)
/// into `out`.
fn digest_tree(path: &Path, out: &mut Vec<u8>) {
    if path.is_file() {
        out.extend_from_slice(path.to_string_lossy().as_bytes());
        out.push(0);
        out.extend_from_slice(&std::fs::read(path).unwrap());
        out.push(0);
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for entry in entries {
        let name = entry.file_name().unwrap_or_default().to_string_lossy();
        if SKIPPED.contains(&name.as_ref()) || name.ends_with(".wasm") || name.ends_with(".redb") {
            continue;
        }
        digest_tree(&entry, out);
    }
}

/// `sandgraph ARGS` in `env` with the tests' shared compile cache, where
/// [`built`] left the example compiled (a Python component compiles
/// for many seconds, a JavaScript one for one or two).
pub(crate) fn run_cached(env: &Env, args: &[&str]) -> Output {
    env.command(args)
        .env("SANDGRAPH_CACHE", crate::common::cache::shared())
        .output()
        .unwrap()
}

/// A `sandgraph` command with logs off and the tests' shared compile cache.
fn sandgraph(lang: Lang, args: &[&str]) -> Output {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandgraph"));
    if matches!(lang, Lang::Js) {
        // The hostile twin has no node_modules above it: the examples' pinned
        // jco (`npm ci --prefix example-graphs/js`) builds it too.
        cmd.env(
            "SANDGRAPH_JCO",
            repo().join("example-graphs/js/node_modules/.bin/jco"),
        );
    }
    cmd.args(args)
        .current_dir(tmp)
        .env("SANDGRAPH_LOG", "off")
        .env("CARGO_TARGET_DIR", shared_target())
        .env_remove("RUSTC_BOOTSTRAP")
        .env("SANDGRAPH_CACHE", crate::common::cache::shared())
        .env(
            "SANDGRAPH_DB",
            tmp.join(format!("conformance-{}-threads.redb", lang.name())),
        )
        .output()
        .expect("the sandgraph binary runs")
}

/// `example` built from `lang`'s sources: a component path, built once per
/// change of its inputs.
pub(crate) fn built(lang: Lang, example: &str) -> PathBuf {
    let source = lang.source(example);
    assert!(source.is_dir(), "{} is missing", source.display());
    let mut inputs = Vec::new();
    digest_tree(&source, &mut inputs);
    for path in lang.sdk() {
        digest_tree(&path, &mut inputs);
    }
    let key = &sha256_hex(&inputs)[..16];
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("conformance");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("{}-{example}-{key}.wasm", lang.name()));
    if out.is_file() {
        remove_stale(&dir, lang, example, key);
        return out;
    }
    // Two tests may build the same Rust example at once: each writes its
    // own partial file, and the rename is atomic.
    let thread = format!("{:?}", std::thread::current().id());
    let thread: String = thread.chars().filter(char::is_ascii_digit).collect();
    let partial = out.with_extension(format!("partial-{thread}"));
    let before = listing(&source);
    let o = sandgraph(
        lang,
        &[
            "build",
            source.to_str().unwrap(),
            "--out",
            partial.to_str().unwrap(),
        ],
    );
    assert_ok(&format!("sandgraph build ({} {example})", lang.name()), &o);
    // A Python or JavaScript build prints one line; a Rust one also shows
    // cargo's progress.
    assert!(
        matches!(lang, Lang::Rust) || stderr(&o).starts_with("built graph `"),
        "a quiet build: {}",
        stderr(&o)
    );
    // A build reads the graph's folder and writes nothing into it (a Rust
    // build's target folder is elsewhere; componentize-py mounts a Python
    // graph's folder writable).
    assert_eq!(
        listing(&source),
        before,
        "sandgraph build ({} {example}) changed its source folder",
        lang.name()
    );
    std::fs::rename(&partial, &out).unwrap();
    remove_stale(&dir, lang, example, key);
    out
}

/// Every file and folder under `path` (relative), with each file's
/// modification time.
fn listing(path: &Path) -> Vec<(PathBuf, Option<std::time::SystemTime>)> {
    let mut found = Vec::new();
    let mut pending = vec![path.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let p = entry.path();
            let meta = entry.metadata().ok();
            if meta.as_ref().is_some_and(std::fs::Metadata::is_dir) {
                pending.push(p.clone());
            }
            let modified = meta.filter(|m| m.is_file()).and_then(|m| m.modified().ok());
            found.push((p.strip_prefix(path).unwrap_or(&p).to_path_buf(), modified));
        }
    }
    found.sort();
    found
}

/// Removes the builds of `example` in `lang` under an older key from
/// `dir`, so each change of the SDK or the build code does not leave a set
/// of components behind.
fn remove_stale(dir: &Path, lang: Lang, example: &str, key: &str) {
    let prefix = format!("{}-{example}-", lang.name());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(old) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|n| n.strip_suffix(".wasm"))
        else {
            continue;
        };
        let is_key = old.len() == key.len() && old.bytes().all(|b| b.is_ascii_hexdigit());
        if is_key && old != key {
            // Another test process may have removed it first.
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The parts of `sandgraph inspect` (the spec as JSON) that must agree across
/// languages: what a client and the executor see of the graph.
fn surface(lang: Lang, wasm: &Path) -> Value {
    let o = sandgraph(lang, &["inspect", wasm.to_str().unwrap()]);
    assert_ok(&format!("sandgraph inspect ({})", lang.name()), &o);
    let spec: Value = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("inspect prints JSON ({e}):\n{}", stdout(&o)));
    let mut kept = serde_json::Map::new();
    for key in [
        "name",
        "description",
        "registration",
        "parameters",
        "channels",
        "edges",
        "entry_points",
        "finish_points",
    ] {
        kept.insert(key.into(), spec[key].clone());
    }
    let nodes: Vec<Value> = spec["nodes"]
        .as_array()
        .map(|nodes| nodes.iter().map(|n| n["name"].clone()).collect())
        .unwrap_or_default();
    kept.insert("nodes".into(), Value::Array(nodes));
    Value::Object(kept)
}

/// Builds every example (and the hostile twin) in `lang`, runs the shared
/// cases through each build, and compares each tool's surface with Rust's.
fn conforms(lang: Lang) {
    let examples: Vec<&str> = EXAMPLES.iter().copied().chain(["hostile"]).collect();
    // Cold, a Python build keeps one core busy for about 25 s while most
    // other tests of this binary wait on processes and sockets: build two
    // at a time (`built` is safe to call concurrently), then test in order.
    std::thread::scope(|s| {
        for first in [0, 1] {
            let examples = &examples;
            s.spawn(move || {
                for example in examples.iter().skip(first).step_by(2) {
                    built(lang, example);
                }
            });
        }
    });
    let cases = repo().join("tests/conformance");
    let mut failures = Vec::new();
    for example in examples {
        let wasm = built(lang, example);
        let dir = cases.join(example);
        let o = sandgraph(
            lang,
            &[
                "test",
                wasm.to_str().unwrap(),
                "--cases",
                dir.to_str().unwrap(),
                "--jobs",
                "1",
            ],
        );
        if o.status.code() != Some(0) {
            failures.push(format!(
                "{} {example}: `sandgraph test` exited {:?}\n{}{}",
                lang.name(),
                o.status.code(),
                stdout(&o),
                stderr(&o)
            ));
        }
        if !matches!(lang, Lang::Rust) {
            let rust = surface(Lang::Rust, &built(Lang::Rust, example));
            let ours = surface(lang, &wasm);
            if ours != rust {
                failures.push(format!(
                    "{} {example} describes another graph than Rust's:\n  rust: {rust}\n  {}: {ours}",
                    lang.name(),
                    lang.name()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn rust_examples_pass_the_conformance_cases() {
    conforms(Lang::Rust);
}

#[test]
fn python_examples_pass_the_conformance_cases() {
    conforms(Lang::Python);
}

#[test]
fn js_examples_pass_the_conformance_cases() {
    conforms(Lang::Js);
}
