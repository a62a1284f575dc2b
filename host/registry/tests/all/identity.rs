//! A grant binds to the component the operator chose, not to the name a
//! component claims: two files claiming one name are both refused (at
//! open and while watching), and a component in a file of another name
//! (not pinned under that name by its folder's lock) is not mounted: it
//! gets neither the name's grants, nor the `tools` calls aimed at it, nor
//! its threads or tool name.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::common::{self, at, cached_options, folder, next_event};
use sandgraph_core::Start;
use sandgraph_factors::llm::LlmBackend;
use sandgraph_registry::{
    CallOptions, MountErrorKind, OperatorConfig, Registry, RegistryError, RegistryEvent,
    RegistryOptions,
};
use sandgraph_tests::{ECHO, GRAPH_LLM, GRAPH_TOOLS, HOSTILE_NAME_SQUAT};
use serde_json::{Value, json};

/// A model that answers every request, so a call that reaches it shows.
struct Answering;

impl sandgraph_llm::Provider for Answering {
    fn chat<'a>(
        &'a self,
        _request: &'a sandgraph_llm::ChatRequest,
    ) -> futures::future::BoxFuture<'a, Result<sandgraph_llm::ChatResponse, sandgraph_llm::LlmError>>
    {
        Box::pin(async move {
            Ok(sandgraph_llm::ChatResponse {
                content: Some("the operator's model answered".into()),
                finish_reason: Some("stop".into()),
                ..Default::default()
            })
        })
    }
}

/// The operator grants `graph_llm` the model and `graph_tools` a call of
/// `graph_llm` and `echo_graph`.
const GRANTS: &str = "[llm.models]\nfast = \"m\"\n\
                      [graphs.graph_llm.grants]\nllm = { models = [\"fast\"] }\n\
                      [graphs.graph_tools.grants]\ntools = { allow = [\"graph_llm\", \"echo_graph\"] }\n";

fn granted(dir: &Path) -> RegistryOptions {
    let config = OperatorConfig::parse(GRANTS, Path::new("sandgraph.toml")).unwrap();
    let llm = LlmBackend {
        provider: Arc::new(Answering),
        models: config.llm_models.clone(),
        default_model: "m".into(),
    };
    RegistryOptions {
        config,
        llm: Some(llm),
        ..cached_options(&[dir])
    }
}

async fn open_granted(dir: &Path) -> (Registry, sandgraph_registry::MountReport) {
    Registry::open(common::runtime(), granted(dir))
        .await
        .unwrap()
}

/// The first answer of a `graph_llm`-shaped run of `registry`'s `graph_llm`.
async fn ask(registry: &Registry) -> Value {
    let out = registry
        .get("graph_llm")
        .expect("graph_llm is mounted")
        .run(
            Start::Input(json!({"input": {}})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    out.value
}

fn contested(name: &str, files: &[&PathBuf]) -> String {
    let list: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    format!(
        "graph name \"{name}\" is claimed by {} files ({}): none of them is mounted, so that no \
         component takes another's name and grants; remove or rename all but one",
        files.len(),
        list.join(", ")
    )
}

fn unbound(name: &str, file: &str) -> String {
    format!(
        "the component calls itself \"{name}\" but the file is {file}, not {name}.wasm, and its \
         folder's sandgraph.lock does not pin it under that name: it is not mounted, so that no \
         component takes a name's grants, threads or tool by calling itself that name; rename \
         the file to {name}.wasm or pin it with `sandgraph lock`"
    )
}

/// The warnings of `report` about `path`, as (kind, reason).
fn warnings_about(
    report: &sandgraph_registry::MountReport,
    path: &Path,
) -> Vec<(MountErrorKind, String)> {
    report
        .warnings
        .iter()
        .filter(|w| w.path == path)
        .map(|w| (w.kind, w.reason.clone()))
        .collect()
}

#[tokio::test]
async fn two_files_claiming_one_name_are_both_refused_and_the_error_names_both() {
    // `aaa.wasm` sorts first: it used to win the name and its grant.
    let dir = folder(&[
        ("aaa.wasm", HOSTILE_NAME_SQUAT),
        ("graph_llm.wasm", GRAPH_LLM),
        ("echo_graph.wasm", ECHO),
    ]);
    let d = dir.path();
    let (squat, real) = (at(d, "aaa.wasm"), at(d, "graph_llm.wasm"));
    let (registry, report) = open_granted(d).await;
    assert_eq!(registry.names(), ["echo_graph"]);
    let warnings: Vec<(&Path, MountErrorKind, &str)> = report
        .warnings
        .iter()
        .map(|w| (w.path.as_path(), w.kind, w.reason.as_str()))
        .collect();
    let reason = contested("graph_llm", &[&squat, &real]);
    assert_eq!(
        warnings,
        [
            (squat.as_path(), MountErrorKind::Duplicate, reason.as_str()),
            (real.as_path(), MountErrorKind::Duplicate, reason.as_str()),
        ]
    );
    // Strict: a failure listing both.
    let opts = RegistryOptions {
        strict: true,
        ..granted(d)
    };
    let err = Registry::open(common::runtime(), opts).await.unwrap_err();
    assert!(
        matches!(err, RegistryError::Strict(ref w) if w.len() == 2),
        "{err}"
    );
    // Without the squatter the operator's graph is mounted with its grant.
    std::fs::remove_file(&squat).unwrap();
    let (registry, report) = open_granted(d).await;
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    let state = ask(&registry).await;
    assert_eq!(
        state["answers"][0]["content"],
        json!("the operator's model answered"),
        "{state}"
    );
}

#[tokio::test]
async fn a_squatter_never_receives_the_grants_of_the_name_it_claims() {
    let dir = folder(&[
        ("aaa.wasm", HOSTILE_NAME_SQUAT),
        ("graph_tools.wasm", GRAPH_TOOLS),
        ("echo_graph.wasm", ECHO),
    ]);
    let d = dir.path();
    let (registry, report) = open_granted(d).await;
    // Not mounted: the name is not its file's, and the refusal says so.
    assert!(registry.get("graph_llm").is_none());
    assert_eq!(
        warnings_about(&report, &at(d, "aaa.wasm")),
        [(MountErrorKind::Unbound, unbound("graph_llm", "aaa.wasm"))]
    );
    // A graph granted a `tools` call of `graph_llm` does not reach it (nor
    // list it), while its other target, bound by its file name, works.
    let tools = registry.get("graph_tools").unwrap();
    assert!(tools.identity_bound());
    let call = |target: &str| {
        let tools = tools.clone();
        let args = json!({"input": {"tool": target, "args": {"input": {"topic": "x"}}}});
        async move {
            tools
                .run(Start::Input(args), CallOptions::default(), &mut |_| {})
                .await
                .unwrap()
                .value
        }
    };
    let state = call("graph_llm").await;
    assert_eq!(state["error"]["kind"], json!("not_found"), "{state}");
    assert!(
        state["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no tool named graph_llm is mounted"),
        "{state}"
    );
    assert_eq!(state["listed"], json!(["echo_graph"]), "{state}");
    let state = call("echo_graph").await;
    assert_eq!(state["result"]["log"], json!(["seen:x"]), "{state}");
}

#[tokio::test]
async fn a_lock_entry_binds_a_file_of_another_name_to_the_name_it_pins() {
    let dir = folder(&[("llm.wasm", GRAPH_LLM)]);
    let d = dir.path();
    // Not bound by its file name: not mounted.
    let (registry, report) = open_granted(d).await;
    assert!(registry.get("graph_llm").is_none());
    assert_eq!(
        warnings_about(&report, &at(d, "llm.wasm")),
        [(MountErrorKind::Unbound, unbound("graph_llm", "llm.wasm"))]
    );
    // Pinned under its name by the folder's lock (not --locked): bound.
    let entry = sandgraph_artifact::LockEntry {
        file: "llm.wasm".into(),
        name: "graph_llm".into(),
        sha256: sandgraph_artifact::sha256_file(&d.join("llm.wasm")).unwrap(),
    };
    sandgraph_artifact::LockFile::new(vec![entry.clone()])
        .unwrap()
        .write(d)
        .unwrap();
    let (registry, report) = open_granted(d).await;
    let about_the_file: Vec<_> = report
        .notices
        .iter()
        .filter(|n| n.path == d.join("llm.wasm"))
        .collect();
    assert!(about_the_file.is_empty(), "{about_the_file:?}");
    assert!(registry.get("graph_llm").unwrap().identity_bound());
    let state = ask(&registry).await;
    assert_eq!(
        state["answers"][0]["content"],
        json!("the operator's model answered"),
        "{state}"
    );
    // A squatter's bytes under the pinned file name are not what the lock
    // pins: not bound, not mounted.
    std::fs::copy(HOSTILE_NAME_SQUAT, d.join("llm.wasm")).unwrap();
    let (registry, report) = open_granted(d).await;
    assert!(registry.get("graph_llm").is_none());
    assert_eq!(
        warnings_about(&report, &at(d, "llm.wasm")),
        [(MountErrorKind::Unbound, unbound("graph_llm", "llm.wasm"))]
    );
}

fn mounted(name: &str, path: &Path) -> RegistryEvent {
    RegistryEvent::Mounted {
        name: name.into(),
        path: Some(path.to_path_buf()),
        scope: None,
    }
}

/// Copies `from` to `to` through a temporary name and a rename.
fn deploy(from: &str, to: &Path) {
    let tmp = to.with_extension("tmp");
    std::fs::copy(from, &tmp).unwrap();
    std::fs::rename(&tmp, to).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_watching_a_newcomer_claiming_a_mounted_name_unmounts_both_and_no_grant_passes() {
    let dir = folder(&[("graph_llm.wasm", GRAPH_LLM)]);
    let d = dir.path();
    let (squat, real) = (at(d, "aaa.wasm"), at(d, "graph_llm.wasm"));
    let (registry, _) = open_granted(d).await;
    let mut events = registry.subscribe();
    let _watch = registry.watch().unwrap();

    // The squatter arrives: the name is taken from both, each failure
    // naming both files.
    deploy(HOSTILE_NAME_SQUAT, &squat);
    let mut seen = vec![
        next_event(&mut events).await,
        next_event(&mut events).await,
        next_event(&mut events).await,
    ];
    seen.sort_by_key(|e| format!("{e:?}"));
    let reason = contested("graph_llm", &[&squat, &real]);
    let failed = |path: &PathBuf| RegistryEvent::Failed {
        path: path.clone(),
        reason: reason.clone(),
    };
    let mut expected = vec![
        RegistryEvent::Unmounted {
            name: "graph_llm".into(),
            path: Some(real.clone()),
            scope: None,
        },
        failed(&squat),
        failed(&real),
    ];
    expected.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(seen, expected);
    assert!(registry.get("graph_llm").is_none());

    // The operator's graph leaves: the squatter is the only claimant left,
    // and still not mounted.
    std::fs::remove_file(&real).unwrap();
    assert_eq!(
        next_event(&mut events).await,
        RegistryEvent::Failed {
            path: squat.clone(),
            reason: unbound("graph_llm", "aaa.wasm"),
        }
    );
    assert!(registry.get("graph_llm").is_none());

    // The operator's graph comes back: mounted with its grant.
    deploy(GRAPH_LLM, &real);
    assert_eq!(next_event(&mut events).await, mounted("graph_llm", &real));
    let state = ask(&registry).await;
    assert_eq!(
        state["answers"][0]["content"],
        json!("the operator's model answered"),
        "{state}"
    );
}
