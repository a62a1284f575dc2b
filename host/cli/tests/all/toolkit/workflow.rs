//! Issue 45's acceptance path: for each language and template, `sandgraph
//! new` in a folder outside the repository (no generated file names the
//! checkout), then the `run:` steps of the workflow it wrote, in order, as
//! GitHub Actions would run them (bash, `-eo pipefail`), with the test's
//! `sandgraph` first on PATH: install (skipped: it is that commit
//! already), native tests, build, check, golden cases, sign with a key from
//! the environment, and, the ref being a tag, push to a loopback CNCF
//! registry. The component is then pulled back and its signature verified.
//! A step that fails fails the test, so the workflow cannot rot.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use sandgraph_tests::oci_registry::{Auth, OciRegistry};
use yaml_rust2::{Yaml, YamlLoader};

use super::folder;
use super::new::{assert_ok, new_crate as new_project};
use crate::common::cargo::{BuildSlot, CrateHome, repo, walk};
use crate::common::{stderr, stdout};

/// The tag the workflow runs for.
const TAG: &str = "v0.1.0";

/// One step of the job: its name, its `if:` and its `run:` script (none
/// for a `uses:` step).
struct Step {
    name: String,
    condition: Option<String>,
    run: Option<String>,
}

/// The steps of the workflow's one job, checked for what the test relies
/// on: expressions only in `env:`, `if:` and `with:`, never in a script.
fn steps(workflow: &str) -> Vec<Step> {
    let docs = YamlLoader::load_from_str(workflow).expect("graph.yml is YAML");
    let jobs = docs[0]["jobs"].as_hash().expect("graph.yml has jobs");
    assert_eq!(jobs.len(), 1, "one job");
    let job = jobs.values().next().unwrap();
    let uses: Vec<&str> = job["steps"]
        .as_vec()
        .expect("the job has steps")
        .iter()
        .filter_map(|s| s["uses"].as_str())
        .collect();
    for action in [
        "actions/checkout@",
        "actions/cache@",
        "actions/upload-artifact@",
    ] {
        assert!(
            uses.iter().any(|u| u.starts_with(action)),
            "no {action} in {uses:?}"
        );
    }
    let field = |s: &Yaml, key: &str| s[key].as_str().map(str::to_owned);
    job["steps"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|s| {
            let step = Step {
                name: field(s, "name")
                    .or_else(|| field(s, "uses"))
                    .expect("a step has a name or uses"),
                condition: field(s, "if"),
                run: field(s, "run"),
            };
            if let Some(run) = &step.run {
                assert!(
                    !run.contains("${{"),
                    "step {:?}: expressions go in env:, never in a script:\n{run}",
                    step.name
                );
            }
            step
        })
        .collect()
}

/// The job's `SANDGRAPH_CACHE`, its `${{ github.workspace }}` being
/// `work`: a folder in the workspace, which the cache step keeps.
fn job_cache(work: &Path) -> String {
    let workflow = std::fs::read_to_string(work.join(".github/workflows/graph.yml")).unwrap();
    let docs = YamlLoader::load_from_str(&workflow).expect("graph.yml is YAML");
    let jobs = docs[0]["jobs"].as_hash().expect("graph.yml has jobs");
    let job = jobs.values().next().unwrap();
    let value = job["env"]["SANDGRAPH_CACHE"]
        .as_str()
        .expect("the job's env names SANDGRAPH_CACHE");
    let path = value.replace("${{ github.workspace }}", &work.to_string_lossy());
    assert!(!path.contains("${{"), "SANDGRAPH_CACHE: {value}");
    let cached = job["steps"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(|s| s["with"]["path"].as_str())
        .any(|paths| {
            paths
                .lines()
                .any(|p| !p.trim().is_empty() && work.join(p.trim()) == Path::new(&path))
        });
    assert!(cached, "no cache step keeps {value}");
    path
}

/// Whether `if: condition` holds, for the forms the workflow uses:
/// `always()`, `startsWith(github.ref, '<prefix>')` and `env.NAME != ''`.
fn holds(condition: &str, env: &HashMap<&str, String>) -> bool {
    let c = condition.trim();
    if c == "always()" {
        return true;
    }
    if let Some(prefix) = c
        .strip_prefix("startsWith(github.ref, '")
        .and_then(|r| r.strip_suffix("')"))
    {
        return env["GITHUB_REF"].starts_with(prefix);
    }
    if let Some(name) = c
        .strip_prefix("env.")
        .and_then(|r| r.strip_suffix(" != ''"))
    {
        return env.get(name).is_some_and(|v| !v.is_empty());
    }
    panic!("the test cannot evaluate `if: {c}`: teach `holds` the form");
}

/// The folder of the `sandgraph` under test.
fn sandgraph_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_sandgraph"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `sandgraph ARGS` in `dir`, which must succeed; its stdout.
fn sandgraph(dir: &Path, args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_sandgraph"))
        .args(args)
        .current_dir(dir)
        .env("SANDGRAPH_LOG", "off")
        .env("SANDGRAPH_CACHE", dir.join("cache"))
        .output()
        .unwrap();
    assert_ok(&format!("sandgraph {}", args.join(" ")), &o);
    stdout(&o)
}

/// Runs the workflow of the project in `dir` as the test's CI, `env` on
/// top of this process's environment; returns the names of the steps run.
fn run_workflow(dir: &Path, env: &HashMap<&str, String>, key_file: &Path) -> Vec<String> {
    let workflow = std::fs::read_to_string(dir.join(".github/workflows/graph.yml")).unwrap();
    // `sign --key-env` where this sandgraph has it, else the same key from
    // a 0600 file.
    let help = sandgraph(dir, &["sign", "--help"]);
    let key_env = help.contains("--key-env");
    let path = format!(
        "{}:{}",
        sandgraph_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = Vec::new();
    for step in steps(&workflow) {
        let Some(script) = step.run else { continue };
        if let Some(c) = &step.condition
            && !holds(c, env)
        {
            continue;
        }
        let script = if key_env {
            script
        } else {
            script.replace(
                "--key-env SANDGRAPH_SIGNING_KEY",
                &format!("--key {}", key_file.display()),
            )
        };
        let o = Command::new("bash")
            .args(["--noprofile", "--norc", "-eo", "pipefail", "-c", &script])
            .current_dir(dir)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("PATH", &path)
            // The test harness's own RUSTC_BOOTSTRAP (`--report-time` needs
            // it) would make cargo rebuild every dependency.
            .env_remove("RUSTC_BOOTSTRAP")
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "step {:?} failed:\n{script}\n--- stdout\n{}--- stderr\n{}",
            step.name,
            stdout(&o),
            stderr(&o)
        );
        ran.push(step.name);
    }
    ran
}

/// `sandgraph new NAME --lang LANG --template TEMPLATE`, then its workflow
/// on a tag, then the pushed component pulled and verified.
fn workflow_runs_as_written(lang: &str, template: &str) {
    let name = format!("{lang}-{template}-graph");
    let env = folder(&[]);
    let home = CrateHome::new(&format!("workflow-{lang}-{template}"));
    let dir = new_project(
        &env,
        &home,
        &name,
        &["--lang", lang, "--template", template],
    );

    // Nothing generated points into the checkout.
    let checkout = repo().to_string_lossy().into_owned();
    for file in walk(&dir) {
        let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
        assert!(
            !text.contains(&checkout),
            "{} names the checkout {checkout}",
            file.display()
        );
    }

    let registry = OciRegistry::start(Auth::Open);
    let keys = home.path("keys");
    std::fs::create_dir(&keys).unwrap();
    let key_file = keys.join("signing.key");
    sandgraph(&keys, &["keygen", "--out", key_file.to_str().unwrap()]);
    let docker = home.path("docker");
    std::fs::create_dir(&docker).unwrap();

    // Rust crates build in the shared build slot, whose target folder has
    // the wasm dependencies built already.
    let slot = (lang == "rust").then(|| BuildSlot::take(&dir));
    let (work, target) = match &slot {
        Some(s) => (s.dir().to_path_buf(), Some(s.target().to_path_buf())),
        None => (dir.clone(), None),
    };
    let mut vars: HashMap<&str, String> = HashMap::from([
        (
            "SANDGRAPH_SIGNING_KEY",
            std::fs::read_to_string(&key_file).unwrap(),
        ),
        ("GITHUB_REF", format!("refs/tags/{TAG}")),
        ("GITHUB_REF_NAME", TAG.to_owned()),
        ("SANDGRAPH_REGISTRY", format!("{}/graphs", registry.addr())),
        ("SANDGRAPH_PUSH_FLAGS", String::new()),
        // As the job's env: says, with the workspace being `work`.
        ("SANDGRAPH_CACHE", job_cache(&work)),
        ("DOCKER_CONFIG", docker.to_string_lossy().into_owned()),
        ("SANDGRAPH_LOG", "warn".to_owned()),
        // jco 1.35.0 is in npm's cache from example-graphs/js.
        ("npm_config_prefer_offline", "true".to_owned()),
        ("npm_config_audit", "false".to_owned()),
        ("npm_config_fund", "false".to_owned()),
    ]);
    if let Some(t) = &target {
        vars.insert("CARGO_TARGET_DIR", t.to_string_lossy().into_owned());
    }
    let ran = run_workflow(&work, &vars, &key_file);
    for step in [
        "Install sandgraph",
        "Native tests",
        "Build the component",
        "Check the component",
        "Golden cases",
        "Sign the component",
        "Push to the registry",
    ] {
        assert!(
            ran.iter().any(|r| r.starts_with(step)),
            "{step:?} did not run: {ran:?}"
        );
    }
    let junit = std::fs::read_to_string(work.join("junit.xml")).unwrap();
    assert!(junit.contains("<testsuite"), "{junit}");
    drop(slot);

    // The tag's component, pulled into a fresh folder, is the one signed.
    let pulled = home.path("pulled");
    std::fs::create_dir(&pulled).unwrap();
    let reference = format!("{}/graphs/{name}:{TAG}", registry.addr());
    let mut pull = Command::new(env!("CARGO_BIN_EXE_sandgraph"));
    pull.args(["pull", &reference, "--out", "."])
        .current_dir(&pulled)
        .env("DOCKER_CONFIG", &docker)
        .env("SANDGRAPH_LOG", "off");
    assert_ok("sandgraph pull", &pull.output().unwrap());
    let wasm = format!("{name}.wasm");
    assert!(pulled.join(format!("{wasm}.sig")).is_file());
    let public = format!("{}.pub", key_file.display());
    sandgraph(&pulled, &["verify", &wasm, "--key", &public]);
}

#[test]
fn the_rust_basic_workflow_runs_as_written() {
    workflow_runs_as_written("rust", "basic");
}

#[test]
fn the_rust_agent_workflow_runs_as_written() {
    workflow_runs_as_written("rust", "agent");
}

#[test]
fn the_python_basic_workflow_runs_as_written() {
    workflow_runs_as_written("python", "basic");
}

#[test]
fn the_python_agent_workflow_runs_as_written() {
    workflow_runs_as_written("python", "agent");
}

#[test]
fn the_js_basic_workflow_runs_as_written() {
    workflow_runs_as_written("js", "basic");
}

#[test]
fn the_js_agent_workflow_runs_as_written() {
    workflow_runs_as_written("js", "agent");
}

/// A failing step fails the run: the workflow's scripts are not run in a
/// way that hides an error.
#[test]
fn a_failing_step_stops_the_run() {
    let home = CrateHome::new("workflow-failing");
    let dir = home.path("p");
    std::fs::create_dir_all(dir.join(".github/workflows")).unwrap();
    std::fs::write(
        dir.join(".github/workflows/graph.yml"),
        "jobs:\n  graph:\n    steps:\n      - uses: actions/checkout@v4\n      \
         - uses: actions/cache@v4\n      - name: fails\n        run: |\n          false | true\n          \
         echo after\n      - uses: actions/upload-artifact@v4\n",
    )
    .unwrap();
    let vars = HashMap::from([("GITHUB_REF", "refs/heads/main".to_owned())]);
    let run = std::panic::catch_unwind(|| run_workflow(&dir, &vars, Path::new("k")));
    let panic = run.expect_err("the pipefail step fails the run");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("step \"fails\" failed"), "{message}");
}
