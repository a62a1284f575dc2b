//! Mounting folders: good graphs survive bad neighbours, strict mode,
//! ordering, declarations, operator overrides, and the imperative API
//! (scopes, register, create, unregister).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{
    self, at, cached_options, config, folder, open, open_cached, options, runtime,
};
use sandgraph_core::Start;
use sandgraph_registry::{
    CallOptions, MountErrorKind, OperatorConfig, Registry, RegistryError, RegistryEvent,
    RegistryOptions, ToolSource,
};
use sandgraph_runtime::ErrorCode;
use sandgraph_tests::{
    ECHO, GRAPH_BAD_PARAMS, GRAPH_CONTEXT, GRAPH_INVALID_SPEC, GRAPH_RESERVED_NAME, GREET,
    HOSTILE_DESCRIBE_ALLOC, HOSTILE_DESCRIBE_SPIN, HOSTILE_DESCRIBE_TRAP, HOSTILE_INFINITE_LOOP,
};
use serde_json::json;

fn messy_folder() -> tempfile::TempDir {
    let dir = folder(&[
        ("a_echo.wasm", ECHO),
        ("c_echo_again.wasm", ECHO),
        ("greet_graph.wasm", GREET),
        ("e_reserved.wasm", GRAPH_RESERVED_NAME),
        ("f_bad_params.wasm", GRAPH_BAD_PARAMS),
        ("g_invalid_spec.wasm", GRAPH_INVALID_SPEC),
    ]);
    std::fs::write(
        at(dir.path(), "b_broken.wasm"),
        "this is a text file, not wasm",
    )
    .unwrap();
    // Not `.wasm`: ignored. Sub-folders: not searched.
    std::fs::copy(GREET, at(dir.path(), "notes.wasm.txt")).unwrap();
    std::fs::create_dir(at(dir.path(), "sub")).unwrap();
    std::fs::copy(ECHO, dir.path().join("sub/h.wasm")).unwrap();
    dir
}

#[tokio::test]
async fn broken_duplicate_reserved_and_unsupported_graphs_do_not_block_the_good_ones() {
    let dir = messy_folder();
    let d = dir.path();
    let (registry, report) = open(d).await;

    let mounted: Vec<(&str, &Path)> = report
        .mounted
        .iter()
        .map(|m| (m.name.as_str(), m.path.as_path()))
        .collect();
    // Both files claiming echo_graph are refused.
    assert_eq!(
        mounted,
        [("greet_graph", at(d, "greet_graph.wasm").as_path())]
    );
    assert_eq!(registry.names(), ["greet_graph"]);

    let warnings: Vec<(&Path, MountErrorKind, &str)> = report
        .warnings
        .iter()
        .map(|w| (w.path.as_path(), w.kind, w.reason.as_str()))
        .collect();
    assert_eq!(warnings.len(), 6, "{warnings:#?}");
    let contested = format!(
        "graph name \"echo_graph\" is claimed by 2 files ({}, {}): none of them is mounted, so \
         that no component takes another's name and grants; remove or rename all but one",
        at(d, "a_echo.wasm").display(),
        at(d, "c_echo_again.wasm").display()
    );
    assert_eq!(
        warnings[0],
        (
            at(d, "a_echo.wasm").as_path(),
            MountErrorKind::Duplicate,
            contested.as_str()
        )
    );
    assert_eq!(warnings[1].0, at(d, "b_broken.wasm"));
    assert_eq!(warnings[1].1, MountErrorKind::Load);
    assert!(
        warnings[1].2.contains("not a wasm file"),
        "{}",
        warnings[1].2
    );
    assert_eq!(
        warnings[2],
        (
            at(d, "c_echo_again.wasm").as_path(),
            MountErrorKind::Duplicate,
            contested.as_str()
        )
    );
    assert_eq!(
        warnings[3],
        (
            at(d, "e_reserved.wasm").as_path(),
            MountErrorKind::Reserved,
            "the name \"run_code\" is reserved"
        )
    );
    assert_eq!(
        warnings[4],
        (
            at(d, "f_bad_params.wasm").as_path(),
            MountErrorKind::UnsupportedSchema,
            "unsupported JSON schema: parameters.x.required must be true when present"
        )
    );
    assert_eq!(warnings[5].0, at(d, "g_invalid_spec.wasm"));
    assert_eq!(warnings[5].1, MountErrorKind::Load);
    assert!(
        warnings[5]
            .2
            .contains(r#"edge "a" -> "b": unknown target node "b""#),
        "{}",
        warnings[5].2
    );
    // Displayed as `<path>: <reason>`.
    assert_eq!(
        report.warnings[3].to_string(),
        format!(
            "{}: the name \"run_code\" is reserved",
            at(d, "e_reserved.wasm").display()
        )
    );

    // The good graphs work.
    let out = registry
        .get("greet_graph")
        .unwrap()
        .run(
            Start::Input(json!({"name": "Ada", "style": "casual"})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(out.value["greeting"], json!("Hey Ada!"));
}

#[tokio::test]
async fn strict_mode_turns_the_warnings_into_a_failure() {
    let dir = messy_folder();
    let opts = RegistryOptions {
        strict: true,
        ..options(&[dir.path()])
    };
    let err = Registry::open(runtime(), opts).await.unwrap_err();
    let RegistryError::Strict(warnings) = &err else {
        panic!("expected a strict failure, got {err}");
    };
    assert_eq!(warnings.len(), 6);
    let msg = err.to_string();
    assert!(
        msg.starts_with("6 graphs failed to mount (strict): "),
        "{msg}"
    );
    assert!(msg.contains("the name \"run_code\" is reserved"), "{msg}");

    // A clean folder passes strict mode.
    let clean = folder(&[("greet_graph.wasm", GREET)]);
    let opts = RegistryOptions {
        strict: true,
        ..cached_options(&[clean.path()])
    };
    let (registry, report) = Registry::open(runtime(), opts).await.unwrap();
    assert!(report.warnings.is_empty());
    assert_eq!(registry.names(), ["greet_graph"]);
}

#[tokio::test]
async fn one_name_claimed_in_two_folders_is_refused_whatever_order_they_are_given() {
    let root = tempfile::tempdir().unwrap();
    let d1 = root.path().join("d1");
    let d2 = root.path().join("d2");
    sandgraph_tests::copy_graphs(
        &d1,
        &[("echo_graph.wasm", ECHO), ("greet_graph.wasm", GREET)],
    );
    sandgraph_tests::copy_graphs(&d2, &[("echo_graph.wasm", ECHO)]);
    for dirs in [[&d1, &d2], [&d2, &d1]] {
        let (registry, report) = Registry::open(runtime(), cached_options(&[dirs[0], dirs[1]]))
            .await
            .unwrap();
        // Neither file gets echo_graph: no order decides who holds a name.
        assert_eq!(registry.names(), ["greet_graph"]);
        let refused: Vec<(&Path, MountErrorKind)> = report
            .warnings
            .iter()
            .map(|w| (w.path.as_path(), w.kind))
            .collect();
        assert_eq!(
            refused,
            [
                (
                    d1.join("echo_graph.wasm").as_path(),
                    MountErrorKind::Duplicate
                ),
                (
                    d2.join("echo_graph.wasm").as_path(),
                    MountErrorKind::Duplicate
                ),
            ]
        );
        for w in &report.warnings {
            assert!(
                w.reason
                    .contains(&d1.join("echo_graph.wasm").display().to_string())
                    && w.reason
                        .contains(&d2.join("echo_graph.wasm").display().to_string()),
                "{w}"
            );
        }
    }
}

#[tokio::test]
async fn a_missing_folder_is_an_error_naming_it() {
    let root = tempfile::tempdir().unwrap();
    let missing = root.path().join("nope");
    let err = Registry::open(runtime(), options(&[&missing]))
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Dir { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with(&format!("cannot read graph folder {}: ", missing.display())),
        "{err}"
    );
}

#[tokio::test]
async fn declarations_come_from_the_spec_and_a_tool_without_parameters_gets_a_notice() {
    let dir = folder(&[
        ("echo_graph.wasm", ECHO),
        ("greet_graph.wasm", GREET),
        ("hostile_infinite_loop.wasm", HOSTILE_INFINITE_LOOP),
    ]);
    let (registry, report) = open_cached(dir.path()).await;
    let flags: Vec<(String, bool, bool)> = registry
        .list()
        .iter()
        .map(|t| (t.name().to_owned(), t.model_visible(), t.routable()))
        .collect();
    assert_eq!(
        flags,
        [
            ("echo_graph".to_owned(), true, true),
            ("greet_graph".to_owned(), true, true),
            // Defaults: not a model-visible tool, listed for routing.
            ("hostile_infinite_loop".to_owned(), false, true),
        ]
    );
    let names = |tools: Vec<std::sync::Arc<sandgraph_registry::GraphTool>>| {
        tools
            .iter()
            .map(|t| t.name().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(registry.tools()), ["echo_graph", "greet_graph"]);
    assert_eq!(
        names(registry.graph_tools()),
        ["echo_graph", "greet_graph", "hostile_infinite_loop"]
    );
    // echo_graph is `as_tool` without parameters: advice, not a failure.
    assert!(report.warnings.is_empty());
    assert_eq!(report.notices.len(), 1, "{:?}", report.notices);
    assert_eq!(report.notices[0].path, at(dir.path(), "echo_graph.wasm"));
    assert_eq!(report.notices[0].kind, MountErrorKind::Advice);
    assert!(
        report.notices[0].reason.starts_with(
            "graph \"echo_graph\" is a model-visible tool without declared parameters"
        ),
        "{}",
        report.notices[0].reason
    );
}

#[tokio::test]
async fn the_operator_config_overrides_declarations_and_sets_limits_per_graph() {
    let dir = folder(&[
        ("echo_graph.wasm", ECHO),
        ("greet_graph.wasm", GREET),
        ("hostile_infinite_loop.wasm", HOSTILE_INFINITE_LOOP),
    ]);
    let cfg = config(
        "[graphs.greet_graph]\nas_tool = false\nas_graph_tool = false\n\n\
         [graphs.echo_graph]\nas_graph_tool = false\n\n\
         [graphs.hostile_infinite_loop]\nas_tool = true\ntimeout_ms = 200\n\n\
         [graphs.not_here]\nas_tool = true\n",
    );
    let opts = RegistryOptions {
        config: cfg,
        ..cached_options(&[dir.path()])
    };
    let (registry, report) = Registry::open(runtime(), opts).await.unwrap();
    let names = |tools: Vec<std::sync::Arc<sandgraph_registry::GraphTool>>| {
        tools
            .iter()
            .map(|t| t.name().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(registry.tools()),
        ["echo_graph", "hostile_infinite_loop"]
    );
    assert_eq!(names(registry.graph_tools()), ["hostile_infinite_loop"]);
    // All still mounted and callable by name.
    assert_eq!(registry.names().len(), 3);
    // A table naming no graph is reported.
    assert!(
        report
            .notices
            .iter()
            .any(|n| n.reason == "[graphs.not_here] matches no mounted graph"
                && n.path == Path::new("sandgraph.toml")),
        "{:?}",
        report.notices
    );

    // The per-graph timeout stops the spinning graph.
    let tool = registry.get("hostile_infinite_loop").unwrap();
    assert_eq!(tool.timeout_ms(), 200);
    let start = Instant::now();
    let err = tool
        .run(
            Start::Input(json!({"input": {}})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Timeout);
    assert!(err.message.contains("timeout of 200 ms"), "{}", err.message);
    assert!(start.elapsed() < Duration::from_secs(10));
    // Others keep the defaults.
    assert_eq!(registry.get("echo_graph").unwrap().timeout_ms(), 30_000);
}

#[tokio::test]
async fn per_graph_limits_stay_under_the_operator_caps_and_the_graph_timeout_under_both() {
    let dir = folder(&[
        ("graph_context.wasm", GRAPH_CONTEXT),
        ("greet_graph.wasm", GREET),
    ]);
    let open_with = |text: &str| {
        let opts = RegistryOptions {
            config: config(text),
            ..cached_options(&[dir.path()])
        };
        async move { Registry::open(runtime(), opts).await.unwrap().0 }
    };
    // graph_context declares 5000 ms.
    let r = open_with("").await;
    assert_eq!(r.get("graph_context").unwrap().timeout_ms(), 5000);
    assert_eq!(r.get("greet_graph").unwrap().timeout_ms(), 30_000);
    let r = open_with("[limits]\ntimeout_ms = 1000\nfuel = 1000000\n").await;
    assert_eq!(r.get("graph_context").unwrap().timeout_ms(), 1000);
    assert_eq!(r.get("greet_graph").unwrap().limits().fuel, 1_000_000);
    let r = open_with(
        "[limits]\ntimeout_ms = 1000\n[graphs.greet_graph]\ntimeout_ms = 9000\nrecursion_limit = 3\n\
         [graphs.graph_context]\ntimeout_ms = 700\n",
    )
    .await;
    let greet = r.get("greet_graph").unwrap();
    assert_eq!(greet.timeout_ms(), 1000, "never raised above the cap");
    assert_eq!(greet.limits().recursion_limit, 3);
    assert_eq!(r.get("graph_context").unwrap().timeout_ms(), 700);
    assert_eq!(
        r.get("graph_context").unwrap().definition()["timeout_ms"],
        json!(700)
    );
}

#[tokio::test]
async fn config_files_are_read_and_their_errors_name_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandgraph.toml");
    std::fs::write(&path, "[graphs.greet_graph]\nas_tool = true\n").unwrap();
    let cfg = OperatorConfig::load(&path).unwrap();
    assert_eq!(cfg.graph("greet_graph").unwrap().as_tool, Some(true));
    std::fs::write(&path, "[graphs.greet_graph]\nas_tol = true\n").unwrap();
    let err = OperatorConfig::load(&path).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{}:2:1: unknown field `as_tol`", path.display())),
        "{err}"
    );
    let err = OperatorConfig::load(&dir.path().join("missing.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("missing.toml: cannot read the file: "),
        "{err}"
    );
}

#[tokio::test]
async fn scopes_shadow_global_tools_and_take_their_entries_with_them() {
    let dir = folder(&[("echo_graph.wasm", ECHO), ("greet_graph.wasm", GREET)]);
    let (registry, _) = open_cached(dir.path()).await;
    let mut events = registry.subscribe();
    let scope = registry.scope("agent-1");
    // Another component under a global name: echo's bytes, scoped.
    let other = folder(&[
        ("echo_graph.wasm", ECHO),
        ("graph_context.wasm", GRAPH_CONTEXT),
    ]);
    let shadow = scope
        .mount_file(&at(other.path(), "echo_graph.wasm"))
        .await
        .unwrap();
    let own = registry
        .mount_file(&at(other.path(), "graph_context.wasm"), Some(&scope))
        .await
        .unwrap();
    assert_eq!(own.name(), "graph_context");
    assert_eq!(
        common::next_event(&mut events).await,
        RegistryEvent::Mounted {
            name: "echo_graph".into(),
            path: Some(at(other.path(), "echo_graph.wasm")),
            scope: Some("agent-1".into()),
        }
    );
    common::next_event(&mut events).await;

    // The scope sees its own echo_graph; the global view is unchanged.
    let seen = scope.get("echo_graph").unwrap();
    assert!(std::sync::Arc::ptr_eq(&seen, &shadow));
    assert_eq!(
        registry.get("echo_graph").unwrap().source(),
        &ToolSource::File(at(dir.path(), "echo_graph.wasm"))
    );
    let listed: Vec<String> = scope
        .list()
        .iter()
        .map(|t| format!("{}@{}", t.name(), t.source().label(t.name())))
        .collect();
    assert_eq!(
        listed,
        [
            format!(
                "echo_graph@{}",
                at(other.path(), "echo_graph.wasm").display()
            ),
            format!(
                "graph_context@{}",
                at(other.path(), "graph_context.wasm").display()
            ),
            format!(
                "greet_graph@{}",
                at(dir.path(), "greet_graph.wasm").display()
            ),
        ]
    );
    assert!(registry.get("graph_context").is_none(), "scoped only");
    assert_eq!(registry.names(), ["echo_graph", "greet_graph"]);
    // Names are unique within a scope.
    let dup = scope
        .mount_file(&at(other.path(), "echo_graph.wasm"))
        .await
        .unwrap_err();
    assert_eq!(dup.kind, MountErrorKind::Duplicate);

    // Another scope does not see them.
    let scope2 = registry.scope("agent-2");
    assert_eq!(
        scope2.get("echo_graph").unwrap().source(),
        &ToolSource::File(at(dir.path(), "echo_graph.wasm"))
    );
    assert!(scope2.get("graph_context").is_none());

    // Dropping the scope removes its entries, with events.
    drop(scope);
    let mut gone = vec![
        common::next_event(&mut events).await,
        common::next_event(&mut events).await,
    ];
    gone.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(
        gone,
        [
            RegistryEvent::Unmounted {
                name: "echo_graph".into(),
                path: Some(at(other.path(), "echo_graph.wasm")),
                scope: Some("agent-1".into()),
            },
            RegistryEvent::Unmounted {
                name: "graph_context".into(),
                path: Some(at(other.path(), "graph_context.wasm")),
                scope: Some("agent-1".into()),
            },
        ]
    );
    assert_eq!(registry.names(), ["echo_graph", "greet_graph"]);
    assert!(scope2.get("graph_context").is_none());
    // A scope of another registry is refused.
    let (other_registry, _) = open_cached(dir.path()).await;
    let foreign = other_registry.scope("x");
    let err = registry
        .mount_file(&at(other.path(), "graph_context.wasm"), Some(&foreign))
        .await
        .unwrap_err();
    assert_eq!(err.kind, MountErrorKind::ForeignScope);
}

#[tokio::test]
async fn create_builds_a_one_off_tool_of_a_loaded_graph_and_registers_nothing() {
    let registry = Registry::empty(runtime(), OperatorConfig::default(), None);
    // The reserved name is refused.
    let reserved = sandgraph_tests::load(GRAPH_RESERVED_NAME).await;
    assert_eq!(reserved.name(), "run_code");
    assert_eq!(
        registry.create(reserved).unwrap_err().kind,
        MountErrorKind::Reserved
    );
    let echo = sandgraph_tests::load(ECHO).await;
    let one_off = registry.create(echo).unwrap();
    assert_eq!(one_off.name(), "echo_graph");
    assert_eq!(one_off.source(), &ToolSource::Graph);
    assert!(registry.get("echo_graph").is_none());
    let out = one_off
        .run(
            Start::Input(json!({"input": {"topic": "x"}})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(out.value, json!({"topic": "x", "log": ["seen:x"]}));
    // A graph loaded by another runtime (engine) is refused.
    let foreign = sandgraph_factors::runtime(Default::default())
        .unwrap()
        .load_file(Path::new(ECHO))
        .await
        .unwrap();
    let err = registry.create(foreign).unwrap_err();
    assert_eq!(err.kind, MountErrorKind::Load);
    assert!(err.reason.contains("another runtime"), "{}", err.reason);
}

#[tokio::test]
async fn an_oversized_file_is_refused_without_reading_it_whole() {
    let dir = folder(&[("greet_graph.wasm", GREET)]);
    let big = std::fs::File::create(at(dir.path(), "big.wasm")).unwrap();
    // Sparse: instant to create.
    big.set_len((64 << 20) + 1).unwrap();
    drop(big);
    let (registry, report) = open_cached(dir.path()).await;
    assert_eq!(registry.names(), ["greet_graph"]);
    assert_eq!(report.warnings.len(), 1);
    assert_eq!(report.warnings[0].kind, MountErrorKind::Io);
    assert_eq!(
        report.warnings[0].reason,
        "cannot read the file: the file is larger than the 64 MiB limit for a graph component"
    );
}

/// Whether `reason` names a load limit that stops a spinning `describe`:
/// the fuel budget, or the deadline when the machine is too busy for the
/// fuel to run out first.
fn names_a_spin_limit(reason: &str) -> bool {
    reason.contains("describe used up the load fuel budget of 5000000000")
        || reason.contains("describe did not finish within the load limit of 500 ms")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphs_whose_describe_spins_allocates_or_traps_are_stopped_by_the_load_limits() {
    let dir = folder(&[
        ("a_spin.wasm", HOSTILE_DESCRIBE_SPIN),
        ("b_alloc.wasm", HOSTILE_DESCRIBE_ALLOC),
        ("echo_graph.wasm", ECHO),
        ("d_trap.wasm", HOSTILE_DESCRIBE_TRAP),
        ("e_spin_again.wasm", HOSTILE_DESCRIBE_SPIN),
        ("greet_graph.wasm", GREET),
    ]);
    let d = dir.path();
    let started = Instant::now();
    let (registry, report) = open(d).await;
    let elapsed = started.elapsed();
    // A safety net, not a benchmark: each hostile describe ends within the
    // 600 ms load deadline, and they run side by side. (Before the load
    // limits a spinning describe alone took about 27 s.)
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    assert_eq!(registry.names(), ["echo_graph", "greet_graph"]);
    let warnings: Vec<(&Path, MountErrorKind, &str)> = report
        .warnings
        .iter()
        .map(|w| (w.path.as_path(), w.kind, w.reason.as_str()))
        .collect();
    let paths: Vec<&Path> = warnings.iter().map(|w| w.0).collect();
    assert_eq!(
        paths,
        [
            at(d, "a_spin.wasm").as_path(),
            at(d, "b_alloc.wasm").as_path(),
            at(d, "d_trap.wasm").as_path(),
            at(d, "e_spin_again.wasm").as_path(),
        ],
        "in path order, whatever finished first"
    );
    assert!(warnings.iter().all(|w| w.1 == MountErrorKind::Load));
    assert!(names_a_spin_limit(warnings[0].2), "{}", warnings[0].2);
    assert!(names_a_spin_limit(warnings[3].2), "{}", warnings[3].2);
    assert_eq!(
        warnings[1].2,
        "describe exceeded the load memory cap of 64 MiB per instance"
    );
    assert!(
        warnings[2]
            .2
            .starts_with("describe failed: describe trapped"),
        "{}",
        warnings[2].2
    );
    assert!(
        warnings[2]
            .2
            .contains("describe refuses to describe itself"),
        "the panic message: {}",
        warnings[2].2
    );
    // The good graphs serve.
    let out = registry
        .get("echo_graph")
        .unwrap()
        .run(
            Start::Input(json!({"input": {"topic": "t"}})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(out.value["topic"], json!("t"));

    // Strict mode names them all.
    let opts = RegistryOptions {
        strict: true,
        ..options(&[d])
    };
    let err = Registry::open(runtime(), opts).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("4 graphs failed to mount (strict): "),
        "{err}"
    );
}

#[tokio::test]
async fn locked_opening_fails_on_a_changed_missing_or_extra_graph_and_mounts_the_pinned_set() {
    let dir = common::folder(&[("echo_graph.wasm", sandgraph_tests::ECHO)]);
    let d = dir.path();
    let locked = || RegistryOptions {
        locked: true,
        ..cached_options(&[d])
    };
    let refused = |e: RegistryError| match e {
        RegistryError::Locked(problems) => problems.join("\n"),
        other => panic!("expected a lock failure, got {other}"),
    };
    let err = Registry::open(runtime(), locked()).await.unwrap_err();
    assert!(refused(err).contains("no lock file"));

    let entry = sandgraph_artifact::LockEntry {
        file: "echo_graph.wasm".into(),
        name: "echo_graph".into(),
        sha256: sandgraph_artifact::sha256_file(&d.join("echo_graph.wasm")).unwrap(),
    };
    sandgraph_artifact::LockFile::new(vec![entry.clone()])
        .unwrap()
        .write(d)
        .unwrap();
    let (registry, report) = Registry::open(runtime(), locked()).await.unwrap();
    assert_eq!(registry.names(), ["echo_graph"]);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);

    // The bytes pinned, under another graph name.
    let renamed = sandgraph_artifact::LockEntry {
        name: "other_graph".into(),
        ..entry.clone()
    };
    sandgraph_artifact::LockFile::new(vec![renamed])
        .unwrap()
        .write(d)
        .unwrap();
    let err = refused(Registry::open(runtime(), locked()).await.unwrap_err());
    assert!(err.contains("pins the name \"other_graph\""), "{err}");
    sandgraph_artifact::LockFile::new(vec![entry.clone()])
        .unwrap()
        .write(d)
        .unwrap();

    std::fs::copy(sandgraph_tests::GREET, d.join("greet_graph.wasm")).unwrap();
    let err = refused(Registry::open(runtime(), locked()).await.unwrap_err());
    assert!(err.contains("greet_graph.wasm: not in"), "{err}");
    std::fs::remove_file(d.join("greet_graph.wasm")).unwrap();

    let mut bytes = std::fs::read(d.join("echo_graph.wasm")).unwrap();
    bytes.extend_from_slice(&[0, 1, 0]); // an empty custom section
    std::fs::write(d.join("echo_graph.wasm"), &bytes).unwrap();
    let err = refused(Registry::open(runtime(), locked()).await.unwrap_err());
    assert!(
        err.contains("echo_graph.wasm: changed since it was locked"),
        "{err}"
    );

    std::fs::remove_file(d.join("echo_graph.wasm")).unwrap();
    let err = refused(Registry::open(runtime(), locked()).await.unwrap_err());
    assert!(err.contains("echo_graph.wasm: missing"), "{err}");
}
