//! The compile cache: a warm start compiles nothing, bad artifacts are
//! recompiled, concurrent first calls load a graph once, and a graph that
//! failed to load is skipped at once until its file changes.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{at, folder, fresh_runtime, options};
use sandgraph_core::Start;
use sandgraph_registry::{CallOptions, MountErrorKind, MountReport, Registry, RegistryOptions};
use sandgraph_runtime::{CancellationToken, Limits, RunOptions, Runtime, RuntimeConfig};
use sandgraph_store::CompileCache;
use sandgraph_tests::{
    ECHO, GREET, HOSTILE_DESCRIBE_ALLOC, HOSTILE_DESCRIBE_SPIN, HOSTILE_DESCRIBE_TRAP,
    HOSTILE_HOST_SLEEP,
};
use serde_json::json;

async fn open_cached(rt: &Runtime, dir: &Path, store: &CompileCache) -> Registry {
    let opts = RegistryOptions {
        cache: Some(store.clone()),
        ..options(&[dir])
    };
    let (registry, report) = Registry::open(rt.clone(), opts).await.unwrap();
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    registry
}

fn greet_args() -> serde_json::Value {
    json!({"name": "Ada", "style": "formal"})
}

/// Every stored artifact file of the cache folder `dir`, sorted.
fn artifact_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for engine in std::fs::read_dir(dir.join("v1/artifacts")).unwrap() {
        for file in std::fs::read_dir(engine.unwrap().path()).unwrap() {
            files.push(file.unwrap().path());
        }
    }
    files.sort();
    files
}

/// Flips the last byte of every stored artifact of the cache folder `dir`.
fn corrupt_artifacts(dir: &Path) -> usize {
    let files = artifact_files(dir);
    for file in &files {
        let mut v = std::fs::read(file).unwrap();
        *v.last_mut().unwrap() ^= 0xff;
        std::fs::write(file, v).unwrap();
    }
    files.len()
}

#[tokio::test]
async fn a_second_start_with_a_warm_cache_compiles_nothing() {
    let dir = folder(&[("echo_graph.wasm", ECHO), ("greet_graph.wasm", GREET)]);
    let cache_dir = tempfile::tempdir().unwrap();
    let store = CompileCache::open(cache_dir.path()).unwrap();

    // Cold: each graph compiled once, at mount; the first call compiles
    // nothing more.
    let rt = fresh_runtime();
    let registry = open_cached(&rt, dir.path(), &store).await;
    assert_eq!(rt.compile_count(), 2);
    let greet = registry.get("greet_graph").unwrap();
    assert!(greet.is_loaded());
    greet
        .run(
            Start::Input(greet_args()),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(rt.compile_count(), 2);
    assert_eq!(store.artifact_count().unwrap(), 2);
    drop(registry);

    // Warm: a new runtime (a new process) compiles nothing at mount, and
    // loads nothing until a call.
    let rt = fresh_runtime();
    let registry = open_cached(&rt, dir.path(), &store).await;
    assert_eq!(rt.compile_count(), 0, "mounting compiled");
    assert_eq!(registry.names(), ["echo_graph", "greet_graph"]);
    let greet = registry.get("greet_graph").unwrap();
    assert!(!greet.is_loaded(), "registration is only registration");
    assert_eq!(greet.description(), "Greet someone, formally or casually.");
    // Invalid arguments do not load the graph either.
    greet
        .run(
            Start::Input(json!({"name": 1})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap_err();
    assert!(!greet.is_loaded());
    let out = greet
        .run(
            Start::Input(greet_args()),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(out.value["greeting"], json!("Good day, Ada."));
    assert!(greet.is_loaded());
    assert_eq!(rt.compile_count(), 0, "the first call compiled");
    let echo = registry.get("echo_graph").unwrap();
    echo.run(
        Start::Input(json!({"input": {"topic": "t"}})),
        CallOptions::default(),
        &mut |_| {},
    )
    .await
    .unwrap();
    assert_eq!(rt.compile_count(), 0);
}

#[tokio::test]
async fn without_a_cache_every_start_compiles_once_per_graph() {
    let dir = folder(&[("echo_graph.wasm", ECHO), ("greet_graph.wasm", GREET)]);
    for _ in 0..2 {
        let rt = fresh_runtime();
        let (registry, _) = Registry::open(rt.clone(), options(&[dir.path()]))
            .await
            .unwrap();
        assert_eq!(rt.compile_count(), 2);
        let greet = registry.get("greet_graph").unwrap();
        greet
            .run(
                Start::Input(greet_args()),
                CallOptions::default(),
                &mut |_| {},
            )
            .await
            .unwrap();
        greet
            .run(
                Start::Input(greet_args()),
                CallOptions::default(),
                &mut |_| {},
            )
            .await
            .unwrap();
        assert_eq!(rt.compile_count(), 2, "memoized");
    }
}

#[tokio::test]
async fn a_corrupt_artifact_is_recompiled_and_replaced() {
    let dir = folder(&[("greet_graph.wasm", GREET)]);
    let cache_dir = tempfile::tempdir().unwrap();
    let cache_path = cache_dir.path();
    {
        let store = CompileCache::open(cache_path).unwrap();
        let rt = fresh_runtime();
        open_cached(&rt, dir.path(), &store).await;
        assert_eq!(rt.compile_count(), 1);
    }
    assert_eq!(corrupt_artifacts(cache_path), 1);

    let store = CompileCache::open(cache_path).unwrap();
    let rt = fresh_runtime();
    let registry = open_cached(&rt, dir.path(), &store).await;
    assert_eq!(rt.compile_count(), 0, "the spec is still good");
    let greet = registry.get("greet_graph").unwrap();
    let out = greet
        .run(
            Start::Input(greet_args()),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(out.value["greeting"], json!("Good day, Ada."));
    assert_eq!(rt.compile_count(), 1, "the bad artifact was not used");
    drop(registry);

    // The recompiled artifact was stored: the next start is warm again.
    let rt = fresh_runtime();
    let registry = open_cached(&rt, dir.path(), &store).await;
    registry
        .get("greet_graph")
        .unwrap()
        .run(
            Start::Input(greet_args()),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(rt.compile_count(), 0);
}

#[tokio::test]
async fn an_artifact_that_does_not_deserialize_is_recompiled() {
    let dir = folder(&[("greet_graph.wasm", GREET)]);
    let cache_dir = tempfile::tempdir().unwrap();
    let store = CompileCache::open(cache_dir.path()).unwrap();
    let rt = fresh_runtime();
    let registry = open_cached(&rt, dir.path(), &store).await;
    let digest = registry
        .get("greet_graph")
        .unwrap()
        .digest()
        .unwrap()
        .to_owned();
    drop(registry);
    // Bytes that match their recorded digest but are no compiled component.
    store
        .put_artifact(&digest, &rt.engine_fingerprint(), b"\x7fELF not really")
        .unwrap();

    let rt = fresh_runtime();
    let registry = open_cached(&rt, dir.path(), &store).await;
    let out = registry
        .get("greet_graph")
        .unwrap()
        .run(
            Start::Input(greet_args()),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(out.value["greeting"], json!("Good day, Ada."));
    assert_eq!(rt.compile_count(), 1);
}

#[tokio::test]
async fn a_bad_cached_spec_is_a_miss() {
    let dir = folder(&[("greet_graph.wasm", GREET)]);
    let cache_dir = tempfile::tempdir().unwrap();
    let store = CompileCache::open(cache_dir.path()).unwrap();
    let digest = sandgraph_store::sha256_hex(&std::fs::read(GREET).unwrap());
    store
        .put_spec(&digest, r#"{"name": "greet_graph", "channels": "nope"}"#)
        .unwrap();
    let rt = fresh_runtime();
    let registry = open_cached(&rt, dir.path(), &store).await;
    assert_eq!(rt.compile_count(), 1, "described again");
    assert!(registry.get("greet_graph").unwrap().is_loaded());
    // And the good spec replaced the bad one.
    let text = store.spec(&digest).unwrap().unwrap();
    assert!(text.contains("\"greet_graph\""), "{text}");
    assert!(!text.contains("nope"), "{text}");
}

/// A spec entry edited in the cache folder, as whoever can write it
/// (not its key) could: greet's cached spec renamed to `research`, a name
/// the operator may have written grants for. The entry is not believed: greet
/// is described again at mount (it loads, though its artifact is cached)
/// and keeps its own name; no `research` is mounted.
#[tokio::test]
async fn a_tampered_cached_spec_does_not_rename_a_graph() {
    let dir = folder(&[("greet_graph.wasm", GREET)]);
    let cache_dir = tempfile::tempdir().unwrap();
    let cache_path = cache_dir.path();
    {
        let store = CompileCache::open(cache_path).unwrap();
        let rt = fresh_runtime();
        let registry = open_cached(&rt, dir.path(), &store).await;
        assert_eq!(registry.names(), ["greet_graph"]);
    }
    let specs: Vec<_> = std::fs::read_dir(cache_path.join("v1/specs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(specs.len(), 1);
    // The entry: a 48-byte header (format, body length, HMAC), the spec.
    let stored = std::fs::read(&specs[0]).unwrap();
    let (header, text) = stored.split_at(48);
    let text = std::str::from_utf8(text).unwrap();
    assert!(text.contains("\"greet_graph\""), "{text}");
    let renamed = text.replace("\"greet_graph\"", "\"research\"");
    // The HMAC kept, the length fixed.
    let mut edited = header[..8].to_vec();
    edited.extend_from_slice(&(renamed.len() as u64).to_le_bytes());
    edited.extend_from_slice(&header[16..]);
    edited.extend_from_slice(renamed.as_bytes());
    std::fs::write(&specs[0], edited).unwrap();

    let store = CompileCache::open(cache_path).unwrap();
    let rt = fresh_runtime();
    let registry = open_cached(&rt, dir.path(), &store).await;
    assert_eq!(registry.names(), ["greet_graph"]);
    assert!(registry.get("research").is_none());
    let greet = registry.get("greet_graph").unwrap();
    assert!(
        greet.is_loaded(),
        "described again, not taken from the entry"
    );
    assert_eq!(rt.compile_count(), 0, "the artifact still authenticates");
    let out = greet
        .run(
            Start::Input(greet_args()),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap();
    assert_eq!(out.value["greeting"], json!("Good day, Ada."));
}

async fn concurrent_first_calls(registry: &Registry, n: usize) {
    let greet = registry.get("greet_graph").unwrap();
    assert!(!greet.is_loaded());
    let calls = (0..n).map(|i| {
        let greet = Arc::clone(&greet);
        async move {
            greet
                .run(
                    Start::Input(json!({"name": format!("n{i}"), "style": "casual"})),
                    CallOptions::default(),
                    &mut |_| {},
                )
                .await
        }
    });
    for (i, out) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        assert_eq!(out.unwrap().value["greeting"], json!(format!("Hey n{i}!")));
    }
}

#[tokio::test]
async fn concurrent_first_calls_on_a_cold_graph_compile_it_once() {
    let dir = folder(&[("greet_graph.wasm", GREET)]);
    let cache_dir = tempfile::tempdir().unwrap();
    let cache_path = cache_dir.path();
    {
        let store = CompileCache::open(cache_path).unwrap();
        open_cached(&fresh_runtime(), dir.path(), &store).await;
    }
    // The spec is cached, the artifact is not usable: the graph is mounted
    // without compiling and compiled at first need.
    corrupt_artifacts(cache_path);
    let store = CompileCache::open(cache_path).unwrap();
    let rt = fresh_runtime();
    let registry = open_cached(&rt, dir.path(), &store).await;
    assert_eq!(rt.compile_count(), 0);
    concurrent_first_calls(&registry, 8).await;
    assert_eq!(rt.compile_count(), 1, "8 concurrent first calls");
    drop(registry);

    // With a good artifact, concurrent first calls compile nothing.
    let rt = fresh_runtime();
    let registry = open_cached(&rt, dir.path(), &store).await;
    concurrent_first_calls(&registry, 8).await;
    assert_eq!(rt.compile_count(), 0);
}

/// Opens `dir` with the cache `store`, whatever fails to mount.
async fn open_reporting(rt: &Runtime, dir: &Path, store: &CompileCache) -> (Registry, MountReport) {
    let opts = RegistryOptions {
        cache: Some(store.clone()),
        ..options(&[dir])
    };
    Registry::open(rt.clone(), opts).await.unwrap()
}

fn reasons(report: &MountReport) -> Vec<(String, &str)> {
    report
        .warnings
        .iter()
        .map(|w| {
            assert_eq!(w.kind, MountErrorKind::Load, "{w}");
            let file = w.path.file_name().unwrap().to_string_lossy().into_owned();
            (file, w.reason.as_str())
        })
        .collect()
}

const SKIPPED: &str = "skipped: failed to load earlier (cached): ";
const RETRIED: &str = "; it is retried when the file changes";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graph_that_failed_to_load_is_skipped_at_once_until_its_file_changes() {
    let dir = folder(&[
        ("echo_graph.wasm", ECHO),
        ("b_spin.wasm", HOSTILE_DESCRIBE_SPIN),
        ("c_alloc.wasm", HOSTILE_DESCRIBE_ALLOC),
        ("d_trap.wasm", HOSTILE_DESCRIBE_TRAP),
    ]);
    let d = dir.path();
    let cache_dir = tempfile::tempdir().unwrap();
    let store = CompileCache::open(cache_dir.path()).unwrap();

    // First start: every component compiled, the three hostile ones fail
    // under the load limits and are remembered.
    let rt = fresh_runtime();
    let started = Instant::now();
    let (registry, first) = open_reporting(&rt, d, &store).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(registry.names(), ["echo_graph"]);
    assert_eq!(rt.compile_count(), 4);
    let first: Vec<(String, String)> = reasons(&first)
        .into_iter()
        .map(|(f, r)| (f, r.to_owned()))
        .collect();
    let files: Vec<&str> = first.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(files, ["b_spin.wasm", "c_alloc.wasm", "d_trap.wasm"]);
    assert!(
        first.iter().all(|(_, r)| !r.starts_with("skipped")),
        "{first:?}"
    );
    assert_eq!(store.load_failure_count().unwrap(), 3);
    drop(registry);

    // Second start (a new process): skipped at once, with the first error,
    // nothing compiled or run.
    let rt = fresh_runtime();
    let started = Instant::now();
    let (registry, second) = open_reporting(&rt, d, &store).await;
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    assert_eq!(registry.names(), ["echo_graph"]);
    assert_eq!(rt.compile_count(), 0, "a remembered failure was compiled");
    let second = reasons(&second);
    assert_eq!(second.len(), 3);
    for ((file, reason), (first_file, first_reason)) in second.iter().zip(&first) {
        assert_eq!(file, first_file);
        assert_eq!(*reason, format!("{SKIPPED}{first_reason}{RETRIED}"));
    }
    drop(registry);

    // The files change: the spin is replaced by greet (mounted), the trap
    // becomes the alloc (failed before: skipped at once), the alloc is
    // unchanged.
    std::fs::remove_file(at(d, "b_spin.wasm")).unwrap();
    std::fs::copy(GREET, at(d, "greet_graph.wasm")).unwrap();
    std::fs::copy(HOSTILE_DESCRIBE_ALLOC, at(d, "d_trap.wasm")).unwrap();
    let rt = fresh_runtime();
    let (registry, third) = open_reporting(&rt, d, &store).await;
    assert_eq!(registry.names(), ["echo_graph", "greet_graph"]);
    assert_eq!(rt.compile_count(), 1, "only the new bytes were compiled");
    let third = reasons(&third);
    let files: Vec<&str> = third.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(files, ["c_alloc.wasm", "d_trap.wasm"]);
    assert!(
        third.iter().all(|(_, r)| r.starts_with(SKIPPED)),
        "{third:?}"
    );
}

#[tokio::test]
async fn more_generous_load_limits_retry_a_remembered_failure() {
    let dir = folder(&[("hostile_describe_trap.wasm", HOSTILE_DESCRIBE_TRAP)]);
    let cache_dir = tempfile::tempdir().unwrap();
    let store = CompileCache::open(cache_dir.path()).unwrap();
    let rt = fresh_runtime();
    open_reporting(&rt, dir.path(), &store).await;
    assert_eq!(store.load_failure_count().unwrap(), 1);

    // The same limits, or tighter: skipped.
    let tighter = sandgraph_factors::runtime(RuntimeConfig {
        max_instances: 4,
        load_limits: Limits {
            timeout: Duration::from_millis(200),
            ..Limits::for_load()
        },
        ..RuntimeConfig::default()
    })
    .unwrap();
    let (_, report) = open_reporting(&tighter, dir.path(), &store).await;
    assert!(
        report.warnings[0].reason.starts_with(SKIPPED),
        "{:?}",
        report.warnings
    );
    assert_eq!(tighter.compile_count(), 0);

    // A longer load deadline: tried again (and it fails again, described).
    let generous = sandgraph_factors::runtime(RuntimeConfig {
        max_instances: 4,
        load_limits: Limits {
            timeout: Duration::from_secs(2),
            ..Limits::for_load()
        },
        ..RuntimeConfig::default()
    })
    .unwrap();
    let (_, report) = open_reporting(&generous, dir.path(), &store).await;
    let reason = &report.warnings[0].reason;
    assert!(reason.starts_with("describe failed: "), "{reason}");
    // Now recorded under the generous limits: skipped by them too.
    let again = sandgraph_factors::runtime(generous.config().clone()).unwrap();
    let (_, report) = open_reporting(&again, dir.path(), &store).await;
    assert!(report.warnings[0].reason.starts_with(SKIPPED));
    assert_eq!(again.compile_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_that_finds_the_host_busy_is_not_remembered() {
    // One instance slot, held by a run sleeping in a host call while the
    // folder mounts.
    let rt = sandgraph_factors::runtime(RuntimeConfig {
        max_instances: 1,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let sleeper = rt.load_file(Path::new(HOSTILE_HOST_SLEEP)).await.unwrap();
    let cancel = CancellationToken::new();
    let run = {
        let (rt, sleeper, cancel) = (rt.clone(), sleeper.clone(), cancel.clone());
        tokio::spawn(async move {
            let opts = RunOptions {
                limits: Some(Limits {
                    timeout: Duration::from_secs(20),
                    ..Limits::default()
                }),
                cancel,
                ..RunOptions::default()
            };
            rt.run(&sleeper, json!({}), opts).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    if run.is_finished() {
        panic!("the sleeper ended early: {:?}", run.await.unwrap());
    }

    let dir = folder(&[("echo_graph.wasm", ECHO)]);
    let cache_dir = tempfile::tempdir().unwrap();
    let store = CompileCache::open(cache_dir.path()).unwrap();
    let (registry, report) = open_reporting(&rt, dir.path(), &store).await;
    assert!(registry.names().is_empty());
    let reason = &report.warnings[0].reason;
    assert!(
        reason.starts_with("cannot load the graph now: "),
        "{reason}"
    );
    assert_eq!(
        store.load_failure_count().unwrap(),
        0,
        "the host's state is not the component's failure"
    );

    cancel.cancel();
    run.await.unwrap().unwrap_err();
    let (registry, report) = open_reporting(&rt, dir.path(), &store).await;
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert_eq!(registry.names(), ["echo_graph"]);
}

/// Swaps the stored artifact files of two graphs.
fn swap_artifacts(dir: &Path) {
    let files = artifact_files(dir);
    assert_eq!(files.len(), 2, "two cached artifacts");
    let first = std::fs::read(&files[0]).unwrap();
    std::fs::copy(&files[1], &files[0]).unwrap();
    std::fs::write(&files[1], first).unwrap();
}

#[tokio::test]
async fn an_artifact_swapped_for_another_graphs_is_recompiled_not_deserialized() {
    let dir = folder(&[("echo_graph.wasm", ECHO), ("greet_graph.wasm", GREET)]);
    let cache_dir = tempfile::tempdir().unwrap();
    let cache_path = cache_dir.path();
    {
        let store = CompileCache::open(cache_path).unwrap();
        let rt = fresh_runtime();
        let registry = open_cached(&rt, dir.path(), &store).await;
        assert_eq!(rt.compile_count(), 2);
        drop(registry);
    }
    // Each file now holds the other graph's compiled code with a valid MAC
    // for that other entry: both must be refused.
    swap_artifacts(cache_path);
    let store = CompileCache::open(cache_path).unwrap();
    let rt = fresh_runtime();
    let registry = open_cached(&rt, dir.path(), &store).await;
    for (name, args, key, want) in [
        (
            "greet_graph",
            greet_args(),
            "greeting",
            json!("Good day, Ada."),
        ),
        (
            "echo_graph",
            json!({"input": {"topic": "t"}}),
            "log",
            json!(["seen:t"]),
        ),
    ] {
        let out = registry
            .get(name)
            .unwrap()
            .run(Start::Input(args), CallOptions::default(), &mut |_| {})
            .await
            .unwrap();
        assert_eq!(out.value[key], want, "{name}");
    }
    assert_eq!(rt.compile_count(), 2, "both swapped artifacts recompiled");
    // The key lives in the cache folder, owner-only.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let key = cache_dir.path().join("key");
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
