//! Tests of `sandgraph new`, the SDK's packaging and `sandgraph build`'s
//! small, reproducible output (see ../toolkit.rs).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::folder;
use crate::common::cargo::{BuildSlot, CrateHome, copy_dir, repo, shared_target, walk};
use crate::common::{Env, sha256_hex, stderr, stdout};

/// The SDK binds to its own copy of the WIT world (guest-sdk/wit), so the
/// published crate builds alone; the copy must be wit/'s files, byte for
/// byte, and nothing else.
#[test]
fn the_sdk_packages_the_same_wit_as_the_host() {
    let repo = repo();
    let wit_files = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "wit"))
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let host = wit_files(&repo.join("wit"));
    let sdk = wit_files(&repo.join("guest-sdk/wit"));
    assert!(!host.is_empty());
    assert_eq!(
        host, sdk,
        "guest-sdk/wit must hold exactly the .wit files of wit/: copy them with \
         `cp wit/*.wit guest-sdk/wit/`"
    );
    for name in &host {
        let a = std::fs::read(repo.join("wit").join(name)).unwrap();
        let b = std::fs::read(repo.join("guest-sdk/wit").join(name)).unwrap();
        assert!(
            a == b,
            "guest-sdk/wit/{name} differs from wit/{name}: copy it with \
             `cp wit/{name} guest-sdk/wit/{name}`"
        );
    }
}

/// `cargo package -p sandgraph-sdk` packs the crate with its WIT world and
/// README and builds it from the package alone (its verify step), so the
/// SDK can be published. Its one path dependency, `sandgraph-spec`, is
/// packed with it (cargo verifies the SDK against that package).
#[test]
fn the_sdk_packages_and_builds_from_the_package_alone() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Its verify step builds the package natively with no flags of ours,
    // as `cargo test` of a test's crate does there: the dependencies are
    // built once for both.
    let target = shared_target();
    let package = |extra: &[&str]| {
        let mut args = vec![
            "package",
            "-p",
            "sandgraph-spec",
            "-p",
            "sandgraph-sdk",
            "--allow-dirty",
            "--offline",
        ];
        args.extend_from_slice(extra);
        run_in(&repo(), &target, &cargo, &args)
    };
    // The spec package from the earlier run is taken for unchanged, its
    // unpacked source and its build alike (a registry crate of one version
    // never changes): forget both.
    forget_unpacked_packages();
    let o = run_in(
        &repo(),
        &target,
        &cargo,
        &["clean", "-p", "sandgraph-spec", "--offline"],
    );
    assert_ok("cargo clean -p sandgraph-spec", &o);
    let o = package(&["--list"]);
    assert_ok("cargo package --list", &o);
    let files = stdout(&o);
    for file in ["Cargo.toml", "README.md", "src/lib.rs", "wit/graph.wit"] {
        assert!(
            files.lines().any(|l| l == file),
            "{file} is not packaged:\n{files}"
        );
    }
    assert_ok("cargo package", &package(&[]));
}

/// Removes the copies of our own packages cargo unpacked from an earlier
/// run's verify step. Cargo verifies the SDK against the spec package
/// through a temporary registry, unpacks it under
/// `$CARGO_HOME/registry/src/<registry>/sandgraph-spec-0.1.0` and, finding
/// that folder there on a later run from the same target folder, reuses it
/// as it is: the SDK would be verified against an older spec. Neither crate
/// comes from any other registry, so every such folder is one of these.
fn forget_unpacked_packages() {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry/src")) else {
        return;
    };
    let Ok(registries) = std::fs::read_dir(src) else {
        return;
    };
    for registry in registries.flatten() {
        let Ok(crates) = std::fs::read_dir(registry.path()) else {
            continue;
        };
        for entry in crates.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("sandgraph-spec-") || name.starts_with("sandgraph-sdk-") {
                std::fs::remove_dir_all(entry.path()).unwrap();
            }
        }
    }
}

/// The sha256 the build printed (`... sha256 <hex>) -> ...`).
fn printed_digest(stderr: &str) -> String {
    let at = stderr
        .find("sha256 ")
        .unwrap_or_else(|| panic!("no digest in:\n{stderr}"));
    stderr[at + 7..].chars().take(64).collect()
}

/// `sandgraph new NAME EXTRA` with `env`'s settings, run in `home`, a
/// folder outside the workspace; returns the project's folder. The SDK is
/// the one the binary carries, vendored into the project.
pub(crate) fn new_crate(env: &Env, home: &CrateHome, name: &str, extra: &[&str]) -> PathBuf {
    let mut args = vec!["new", name];
    args.extend_from_slice(extra);
    let o = env.command(&args).current_dir(home.dir()).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    home.path(name)
}

/// Runs `program args` in `dir` with `target` as the cargo target folder.
pub(crate) fn run_in(dir: &Path, target: &Path, program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target)
        .env("SANDGRAPH_LOG", "off")
        .env("SANDGRAPH_CACHE", dir.join("cache"))
        // The test harness's own RUSTC_BOOTSTRAP (`--report-time` needs
        // it) would make cargo rebuild every dependency.
        .env_remove("RUSTC_BOOTSTRAP")
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"))
}

pub(crate) fn sandgraph_in(dir: &Path, target: &Path, args: &[&str]) -> Output {
    run_in(dir, target, env!("CARGO_BIN_EXE_sandgraph"), args)
}

pub(crate) fn assert_ok(what: &str, o: &Output) {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{what}:\n{}{}",
        stdout(o),
        stderr(o)
    );
}

/// A new crate in the folder `dir`: its native tests pass (`cargo test`),
/// it builds (`sandgraph build`, in the [`BuildSlot`], to `dir/NAME.wasm`),
/// its golden cases pass (`sandgraph test`) and it checks clean.
fn builds_and_passes(dir: &Path, name: &str) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target = shared_target();
    assert_ok("cargo test", &run_in(dir, &target, &cargo, &["test", "-q"]));
    let wasm = format!("{name}.wasm");
    let o = build_in_slot(dir, &dir.join(&wasm));
    assert_ok("sandgraph build", &o);
    let digest = printed_digest(&stderr(&o));
    let bytes = std::fs::read(dir.join(&wasm)).unwrap();
    assert_eq!(digest, sha256_hex(&bytes));
    let o = sandgraph_in(dir, &target, &["test", &wasm, "--junit", "junit.xml"]);
    assert_ok("sandgraph test", &o);
    assert!(stdout(&o).contains("test result: ok."), "{}", stdout(&o));
    assert!(dir.join("junit.xml").is_file());
    assert_ok(
        "sandgraph check",
        &sandgraph_in(dir, &target, &["check", &wasm]),
    );
}

/// `sandgraph build . --out OUT` of a copy of the crate in `krate`, in the
/// [`BuildSlot`].
pub(crate) fn build_in_slot(krate: &Path, out: &Path) -> Output {
    let slot = BuildSlot::take(krate);
    let out = out.to_str().unwrap();
    sandgraph_in(slot.dir(), slot.target(), &["build", ".", "--out", out])
}

#[test]
fn the_basic_crate_tests_builds_and_passes_its_golden_case() {
    let env = folder(&[]);
    let home = CrateHome::new("basic-crate");
    let dir = new_crate(&env, &home, "word-count", &[]);
    let mut files: Vec<String> = walk(&dir)
        .iter()
        .map(|p| p.strip_prefix(&dir).unwrap().to_string_lossy().into_owned())
        .filter(|p| !p.starts_with("sdk/"))
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            ".github/workflows/graph.yml",
            ".gitignore",
            "Cargo.toml",
            "README.md",
            "src/lib.rs",
            "tests/basic.json",
        ]
    );
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let manifest: toml::Table = toml::from_str(&manifest).unwrap();
    assert_eq!(manifest["package"]["name"].as_str(), Some("word-count"));
    assert_eq!(
        manifest["lib"]["crate-type"],
        toml::Value::Array(vec!["cdylib".into()])
    );
    let sdk = &manifest["dependencies"]["sandgraph-sdk"]["path"];
    assert_eq!(sdk.as_str(), Some("sdk/rust/sandgraph-sdk"));
    for vendored in [
        "sdk/sandgraph-sdk.toml",
        "sdk/rust/sandgraph-sdk/Cargo.toml",
        "sdk/rust/sandgraph-sdk/src/lib.rs",
        "sdk/rust/sandgraph-sdk/wit/graph.wit",
        "sdk/rust/sandgraph-spec/Cargo.toml",
        "sdk/rust/sandgraph-spec/src/lib.rs",
    ] {
        assert!(dir.join(vendored).is_file(), "{vendored}");
    }
    assert!(!dir.join("sdk/python").exists() && !dir.join("sdk/js").exists());
    assert_eq!(
        manifest["dependencies"]["serde"]["features"],
        toml::Value::Array(vec!["derive".into()])
    );
    let release = &manifest["profile"]["release"];
    assert_eq!(release["opt-level"].as_str(), Some("s"));
    assert_eq!(release["lto"].as_bool(), Some(true));
    assert_eq!(release["codegen-units"].as_integer(), Some(1));
    let lib = std::fs::read_to_string(dir.join("src/lib.rs")).unwrap();
    assert!(lib.contains(r#"Graph::new("word-count")"#), "{lib}");
    assert!(lib.contains(".strict()") && lib.contains("graph().check()"));
    let ignore = std::fs::read_to_string(dir.join(".gitignore")).unwrap();
    assert_eq!(ignore.lines().collect::<Vec<_>>(), ["target/", "*.wasm"]);
    let workflow = std::fs::read_to_string(dir.join(".github/workflows/graph.yml")).unwrap();
    let install = format!(
        "cargo install --locked --git https://github.com/sandgraph/sandgraph --rev {} sandgraph-cli",
        sandgraph_commit()
    );
    for step in [
        "targets: wasm32-wasip2",
        install.as_str(),
        "run: cargo test",
        "run: sandgraph build . --out word-count.wasm",
        "run: sandgraph test word-count.wasm --junit junit.xml",
        "run: sandgraph check word-count.wasm --deny-warnings",
        "run: sandgraph sign word-count.wasm --key-env SANDGRAPH_SIGNING_KEY",
        "sandgraph push word-count.wasm \"$SANDGRAPH_REGISTRY/word-count:$GITHUB_REF_NAME\"",
        "actions/cache@",
        "actions/upload-artifact@",
    ] {
        assert!(workflow.contains(step), "no {step:?} in:\n{workflow}");
    }
    builds_and_passes(&dir, "word-count");
}

#[test]
fn the_agent_crate_answers_its_golden_case_from_the_cassette() {
    let env = folder(&[]);
    let home = CrateHome::new("agent-crate");
    let dir = new_crate(&env, &home, "ask", &["--template", "agent"]);
    let lib = std::fs::read_to_string(dir.join("src/lib.rs")).unwrap();
    assert!(lib.contains("ctx.llm().chat("), "{lib}");
    assert!(dir.join("tests/basic.cassette.jsonl").is_file());
    builds_and_passes(&dir, "ask");
    // Without the cassette the case has no model to ask: it fails, so the
    // pass above came from the replayed answer.
    std::fs::remove_file(dir.join("tests/basic.cassette.jsonl")).unwrap();
    let o = sandgraph_in(&dir, &shared_target(), &["test", "ask.wasm"]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
}

#[test]
fn new_refuses_bad_names_and_a_non_empty_folder() {
    let env = folder(&[]);
    for (name, why) in [
        ("1st", "must start with an ASCII letter"),
        ("my graph", "' ' is not allowed"),
        ("fn", "is reserved"),
        ("serde", "is reserved"),
    ] {
        let o = env.run(&["new", name]);
        assert_eq!(o.status.code(), Some(2), "{name}");
        let e = stderr(&o);
        assert!(
            e.contains("cannot name a graph project") && e.contains(why),
            "{name}: {e}"
        );
        assert!(!env.path(name).exists());
    }
    env.write("taken/notes.txt", "mine");
    let o = env.run(&["new", "fresh", "--dir", "taken"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("taken is not empty"), "{}", stderr(&o));
    assert_eq!(walk(&env.path("taken")).len(), 1, "nothing was written");
    // An empty folder is fine.
    std::fs::create_dir(env.path("empty")).unwrap();
    let o = env.run(&["new", "fresh", "--dir", "empty"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(env.path("empty/Cargo.toml").is_file());
    // --sdk-path must be the SDK.
    let o = env.run(&["new", "other", "--sdk-path", "empty"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("is not the sandgraph-sdk package"),
        "{}",
        stderr(&o)
    );
}

/// The commit `sandgraph --version` names.
fn sandgraph_commit() -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_sandgraph"))
        .arg("--version")
        .output()
        .unwrap();
    let version = stdout(&o);
    let at = version
        .find("(commit ")
        .expect("--version names the commit")
        + 8;
    version[at..].trim_end().trim_end_matches(')').to_owned()
}

#[test]
fn the_sdk_is_vendored_unless_told_otherwise() {
    let env = folder(&[]);
    let sdk_line = |dir: &str| -> toml::Value {
        let manifest = std::fs::read_to_string(env.path(dir).join("Cargo.toml")).unwrap();
        let manifest: toml::Table = toml::from_str(&manifest).unwrap();
        manifest["dependencies"]["sandgraph-sdk"].clone()
    };
    let o = env.run(&["new", "vendored"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        sdk_line("vendored")["path"].as_str(),
        Some("sdk/rust/sandgraph-sdk")
    );
    let marker = std::fs::read_to_string(env.path("vendored/sdk/sandgraph-sdk.toml")).unwrap();
    let marker: toml::Table = toml::from_str(&marker).unwrap();
    assert_eq!(marker["version"].as_str(), Some(env!("CARGO_PKG_VERSION")));
    assert_eq!(marker["language"].as_str(), Some("rust"));
    assert!(
        marker["world"]
            .as_str()
            .unwrap()
            .starts_with("sandgraph:graph/"),
        "{marker:?}"
    );
    let url = "https://example.com/sandgraph.git";
    let o = env.run(&["new", "from-git", "--sdk-git", url]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(sdk_line("from-git")["git"].as_str(), Some(url));
    assert!(!env.path("from-git/sdk").exists(), "nothing is vendored");
    // A relative --sdk-path is written absolute.
    std::fs::create_dir(env.path("sdk")).unwrap();
    std::fs::copy(
        repo().join("guest-sdk/Cargo.toml"),
        env.path("sdk/Cargo.toml"),
    )
    .unwrap();
    let o = env.run(&["new", "local", "--sdk-path", "sdk"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let path = sdk_line("local")["path"].as_str().unwrap().to_owned();
    assert_eq!(PathBuf::from(path), env.path("sdk").canonicalize().unwrap());
    assert!(
        stderr(&o).contains("CI runners do not have"),
        "{}",
        stderr(&o)
    );
    let o = env.run(&["new", "both", "--sdk-path", "sdk", "--sdk-git", url]);
    assert_eq!(o.status.code(), Some(2), "clap refuses both");
    let o = env.run(&["new", "py", "--lang", "python", "--sdk-git", url]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("are for Rust crates"), "{}", stderr(&o));
}

/// Python and JavaScript projects: the graph, its native tests, the golden
/// cases and only their own language's SDK.
#[test]
fn python_and_js_projects_vendor_their_sdk() {
    let env = folder(&[]);
    for (lang, files, sdk) in [
        (
            "python",
            ["pyproject.toml", "graph.py", "test_graph.py"],
            "sdk/python/sandgraph/__init__.py",
        ),
        (
            "js",
            ["package.json", "graph.js", "graph.test.js"],
            "sdk/js/index.js",
        ),
    ] {
        let name = format!("My-{lang}");
        let o = env.run(&["new", &name, "--lang", lang, "--template", "agent"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let dir = env.path(&name);
        for file in files.iter().chain(&[
            ".gitignore",
            "README.md",
            ".github/workflows/graph.yml",
            "tests/basic.json",
            "tests/basic.cassette.jsonl",
            "tests/denied.json",
            "sdk/sandgraph-sdk.toml",
            sdk,
        ]) {
            assert!(dir.join(file).is_file(), "{lang}: {file}");
        }
        assert!(!dir.join("sdk/rust").exists(), "{lang}");
        assert!(!dir.join("Cargo.toml").exists(), "{lang}");
    }
    let package: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(env.path("My-js/package.json")).unwrap())
            .unwrap();
    assert_eq!(package["name"], "my-js", "npm names are lowercase");
    assert_eq!(package["devDependencies"]["@sandgraph/sdk"], "file:sdk/js");
    assert_eq!(package["sandgraph"]["capabilities"][0], "llm");
    let pyproject: toml::Table =
        toml::from_str(&std::fs::read_to_string(env.path("My-python/pyproject.toml")).unwrap())
            .unwrap();
    assert_eq!(
        pyproject["tool"]["sandgraph"]["module"].as_str(),
        Some("graph")
    );
}

/// `build` refuses a project whose vendored SDK is another sandgraph's,
/// naming both; `sdk update` puts this one's back; a folder that is no
/// project is refused.
#[test]
fn build_refuses_another_sdk_until_sdk_update() {
    let env = folder(&[]);
    let o = env.run(&["new", "old", "--lang", "python"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let marker = env.path("old/sdk/sandgraph-sdk.toml");
    let ours = std::fs::read_to_string(&marker).unwrap();
    let version = format!("version = \"{}\"", env!("CARGO_PKG_VERSION"));
    assert!(ours.contains(&version), "{ours}");
    std::fs::write(
        &marker,
        ours.replace(&version, "version = \"0.0.1\"")
            .replace("graph-component@", "graph-component@0.0."),
    )
    .unwrap();
    std::fs::remove_file(env.path("old/sdk/python/sandgraph/graph.py")).unwrap();
    let o = env.run(&["build", "old", "--out", "old.wasm"]);
    assert_eq!(o.status.code(), Some(12), "{}", stderr(&o));
    let e = stderr(&o);
    for part in [
        "sandgraph-sdk.toml",
        "sandgraph 0.0.1",
        env!("CARGO_PKG_VERSION"),
        "sandgraph sdk update old",
    ] {
        assert!(e.contains(part), "{part:?} not in {e}");
    }
    assert!(!env.path("old.wasm").exists());

    let o = env.run(&["sdk", "update", "old"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("from sandgraph 0.0.1"),
        "{}",
        stdout(&o)
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), ours);
    assert!(env.path("old/sdk/python/sandgraph/graph.py").is_file());

    std::fs::create_dir(env.path("plain")).unwrap();
    env.write("plain/Cargo.toml", "[package]\nname = \"plain\"\n");
    let o = env.run(&["sdk", "update", "plain"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is not a sandgraph project"),
        "{}",
        stderr(&o)
    );
    assert!(!env.path("plain/sdk").exists());
}

/// The same source built in two folders with two target folders gives the
/// same component, byte for byte.
#[test]
fn the_same_source_builds_to_the_same_digest_anywhere() {
    let env = folder(&[]);
    let home = CrateHome::new("repro-crate");
    let source = new_crate(&env, &home, "repro", &[]);
    // Sources the compiler knows by absolute path, in the crate folder and
    // in the target folder (a build script's output), named in the graph's
    // description: without remapping, each folder would be in the component.
    std::fs::write(
        source.join("build.rs"),
        "fn main() {\n    let out = std::env::var(\"OUT_DIR\").unwrap();\n    \
         std::fs::write(format!(\"{out}/generated.rs\"), \
         \"fn generated_at() -> &'static str { file!() }\").unwrap();\n}\n",
    )
    .unwrap();
    std::fs::write(
        source.join("src/extra.rs"),
        "fn written_at() -> &'static str {\n    file!()\n}\n",
    )
    .unwrap();
    let lib = std::fs::read_to_string(source.join("src/lib.rs")).unwrap();
    let lib = lib.replace(
        r#".description("Count the words of a text.")"#,
        r#".description(format!("Count words ({} {}).", written_at(), generated_at()))"#,
    ) + concat!(
        "include!(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/src/extra.rs\"));\n",
        "include!(concat!(env!(\"OUT_DIR\"), \"/generated.rs\"));\n",
    );
    assert!(lib.contains("written_at()"), "the template changed: {lib}");
    std::fs::write(source.join("src/lib.rs"), lib).unwrap();
    // Two folders, two target folders: the build slot's, whose target
    // folder may hold other crates' dependencies already, and one of its own.
    let slot = BuildSlot::take(&source);
    let o = sandgraph_in(
        slot.dir(),
        slot.target(),
        &["build", ".", "--out", "repro.wasm"],
    );
    let first = remapped_digest(&o, slot.dir(), slot.target());
    drop(slot);
    let dir = home.path("two/deeper/repro");
    copy_dir(&source, &dir);
    let target = home.target("two");
    let o = sandgraph_in(&dir, &target, &["build", ".", "--out", "repro.wasm"]);
    assert_eq!(first, remapped_digest(&o, &dir, &target));
}

/// The digest of `repro.wasm` built in `dir` with the target folder
/// `target` (`o`: the build's output), checked to be the one the build
/// printed and to name neither folder.
fn remapped_digest(o: &Output, dir: &Path, target: &Path) -> String {
    assert_ok("sandgraph build", o);
    let bytes = std::fs::read(dir.join("repro.wasm")).unwrap();
    assert_eq!(printed_digest(&stderr(o)), sha256_hex(&bytes));
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains("/workspace/src/extra.rs"),
        "the crate folder is remapped"
    );
    assert!(text.contains("/generated.rs"));
    for folder in [dir, target] {
        let folder = folder.to_string_lossy();
        assert!(
            !text.contains(folder.as_ref()),
            "{folder} is in the component"
        );
    }
    sha256_hex(&bytes)
}

/// The names of the custom sections of a component or core module, and of
/// the core modules and components nested in it.
fn custom_sections(wasm: &[u8]) -> Vec<String> {
    fn leb(bytes: &[u8], at: &mut usize) -> usize {
        let (mut value, mut shift) = (0usize, 0);
        loop {
            let b = bytes[*at];
            *at += 1;
            value |= usize::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return value;
            }
            shift += 7;
        }
    }
    let is_component = wasm[4..8] != [1, 0, 0, 0];
    let mut out = Vec::new();
    let mut at = 8;
    while at < wasm.len() {
        let id = wasm[at];
        at += 1;
        let size = leb(wasm, &mut at);
        let payload = &wasm[at..at + size];
        if id == 0 {
            let mut p = 0;
            let len = leb(payload, &mut p);
            out.push(String::from_utf8_lossy(&payload[p..p + len]).into_owned());
        } else if is_component && (id == 1 || id == 4) {
            // A nested core module (1) or component (4).
            out.extend(custom_sections(payload));
        }
        at += size;
    }
    out
}

/// `sandgraph build` of the echo example: small and without DWARF by
/// default, with it under --debug.
#[test]
fn echo_builds_small_and_debug_keeps_dwarf() {
    /// The issue's bound for the echo example.
    const MAX_ECHO_BYTES: usize = 300 * 1024;
    let env = folder(&[]);
    let target = shared_target();
    let echo = repo().join("example-graphs/echo");
    let echo = echo.to_str().unwrap();
    let o = sandgraph_in(
        env.dir.path(),
        &target,
        &["build", echo, "--out", "echo.wasm"],
    );
    assert_ok("sandgraph build", &o);
    let small = std::fs::read(env.path("echo.wasm")).unwrap();
    assert!(
        small.len() <= MAX_ECHO_BYTES,
        "echo.wasm is {} bytes",
        small.len()
    );
    let sections = custom_sections(&small);
    assert!(
        !sections.iter().any(|s| s.starts_with(".debug")),
        "{sections:?}"
    );
    assert!(
        sections.iter().any(|s| s == "name"),
        "function names stay: {sections:?}"
    );
    let o = sandgraph_in(
        env.dir.path(),
        &target,
        &["build", echo, "--out", "debug.wasm", "--debug"],
    );
    assert_ok("sandgraph build --debug", &o);
    let debug = std::fs::read(env.path("debug.wasm")).unwrap();
    let sections = custom_sections(&debug);
    assert!(sections.iter().any(|s| s == ".debug_info"), "{sections:?}");
    assert!(debug.len() > small.len());
}
