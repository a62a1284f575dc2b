//! `--watch`: files added, replaced and removed while the host runs are
//! mounted, remounted and unmounted, with events; half-written files are
//! not mounted; failures are retried on change.

use std::io::Write;
use std::path::Path;

use crate::common::{self, at, events_within, folder, next_event, open, open_cached};
use sandgraph_core::Start;
use sandgraph_registry::{CallOptions, DEBOUNCE, RegistryEvent};
use sandgraph_tests::{ECHO, GREET};
use serde_json::json;

/// `bytes` with a custom section appended: another file, the same graph.
fn with_custom_section(bytes: &[u8], payload: &[u8]) -> Vec<u8> {
    let name = b"sandgraph-test";
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name);
    section.extend_from_slice(payload);
    assert!(section.len() < 128, "one-byte LEB128 size");
    let mut out = bytes.to_vec();
    out.push(0); // custom section id
    out.push(section.len() as u8);
    out.extend_from_slice(&section);
    out
}

/// Writes `bytes` to `path` in one go (through a temporary name and a
/// rename, as a deploy would).
fn deploy(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn mounted(name: &str, path: &Path) -> RegistryEvent {
    RegistryEvent::Mounted {
        name: name.into(),
        path: Some(path.to_path_buf()),
        scope: None,
    }
}

fn unmounted(name: &str, path: &Path) -> RegistryEvent {
    RegistryEvent::Unmounted {
        name: name.into(),
        path: Some(path.to_path_buf()),
        scope: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_added_replaced_and_removed_are_mounted_remounted_and_unmounted() {
    let dir = folder(&[("echo_graph.wasm", ECHO)]);
    let d = dir.path();
    let (registry, _) = open_cached(d).await;
    let mut events = registry.subscribe();
    let _watch = registry.watch().unwrap();

    // Add.
    let greet_path = at(d, "greet_graph.wasm");
    deploy(&greet_path, &std::fs::read(GREET).unwrap());
    assert_eq!(
        next_event(&mut events).await,
        mounted("greet_graph", &greet_path)
    );
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

    // Replace with another build of the same graph: remounted.
    let echo_path = at(d, "echo_graph.wasm");
    let before = registry.get("echo_graph").unwrap();
    let v2 = with_custom_section(&std::fs::read(ECHO).unwrap(), b"v2");
    deploy(&echo_path, &v2);
    assert_eq!(
        next_event(&mut events).await,
        RegistryEvent::Remounted {
            name: "echo_graph".into(),
            path: echo_path.clone(),
        }
    );
    let after = registry.get("echo_graph").unwrap();
    assert!(!std::sync::Arc::ptr_eq(&before, &after));
    assert_eq!(
        after.digest(),
        Some(sandgraph_store::sha256_hex(&v2).as_str())
    );

    // Replace with another graph: the old name leaves; the new one is
    // greet_graph, already mounted from greet_graph.wasm, so both files claim it
    // and neither keeps it (fail closed), each failure naming both.
    deploy(&echo_path, &std::fs::read(GREET).unwrap());
    assert_eq!(
        next_event(&mut events).await,
        unmounted("echo_graph", &echo_path)
    );
    assert_eq!(
        next_event(&mut events).await,
        unmounted("greet_graph", &greet_path)
    );
    let reason = format!(
        "graph name \"greet_graph\" is claimed by 2 files ({}, {}): none of them is mounted, so \
         that no component takes another's name and grants; remove or rename all but one",
        echo_path.display(),
        greet_path.display()
    );
    for path in [&greet_path, &echo_path] {
        assert_eq!(
            next_event(&mut events).await,
            RegistryEvent::Failed {
                path: path.clone(),
                reason: reason.clone(),
            }
        );
    }
    assert!(registry.names().is_empty());

    // Remove greet_graph.wasm: echo_graph.wasm (now holding greet_graph) is
    // the only file claiming the name, but it is not named after it: it is
    // refused as a fresh start would refuse it.
    std::fs::remove_file(&greet_path).unwrap();
    assert_eq!(
        next_event(&mut events).await,
        RegistryEvent::Failed {
            path: echo_path.clone(),
            reason:
                "the component calls itself \"greet_graph\" but the file is echo_graph.wasm, not \
                 greet_graph.wasm, and its folder's sandgraph.lock does not pin it under that \
                 name: it is not mounted, so that no component takes a name's grants, threads or \
                 tool by calling itself that name; rename the file to greet_graph.wasm or pin it \
                 with `sandgraph lock`"
                    .to_owned(),
        }
    );
    assert!(registry.names().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_being_written_is_not_mounted_half_written() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (registry, _) = open_cached(d).await;
    let mut events = registry.subscribe();
    let _watch = registry.watch().unwrap();

    let bytes = std::fs::read(GREET).unwrap();
    let (first, second) = bytes.split_at(bytes.len() / 2);
    let path = at(d, "greet_graph.wasm");
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(first).unwrap();
    file.flush().unwrap();
    // A pause shorter than the debounce, then the rest.
    tokio::time::sleep(DEBOUNCE / 4).await;
    file.write_all(second).unwrap();
    file.flush().unwrap();
    drop(file);

    assert_eq!(next_event(&mut events).await, mounted("greet_graph", &path));
    let rest = events_within(&mut events, DEBOUNCE * 5).await;
    assert!(rest.is_empty(), "one mount and nothing else: {rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_slowly_for_longer_than_a_pass_can_wait_is_postponed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (registry, _) = open_cached(d).await;
    let mut events = registry.subscribe();
    let _watch = registry.watch().unwrap();

    // Writes keep coming for ~3 s, each within the debounce of the last:
    // a pass runs anyway after at most 2 s and must leave the file alone.
    let bytes = std::fs::read(GREET).unwrap();
    let path = at(d, "greet_graph.wasm");
    let mut file = std::fs::File::create(&path).unwrap();
    for chunk in bytes.chunks(bytes.len().div_ceil(60)) {
        file.write_all(chunk).unwrap();
        file.flush().unwrap();
        tokio::time::sleep(DEBOUNCE / 4).await;
    }
    drop(file);

    assert_eq!(next_event(&mut events).await, mounted("greet_graph", &path));
    let rest = events_within(&mut events, DEBOUNCE * 5).await;
    assert!(rest.is_empty(), "one mount and nothing else: {rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_fails_and_is_retried_when_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (registry, _) = open(d).await;
    let mut events = registry.subscribe();
    let _watch = registry.watch().unwrap();

    let path = at(d, "echo_graph.wasm");
    deploy(&path, b"not wasm yet");
    match next_event(&mut events).await {
        RegistryEvent::Failed { path: p, reason } => {
            assert_eq!(p, path);
            assert!(reason.contains("not a wasm file"), "{reason}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    // Touching it without changing it does not retry.
    deploy(&path, b"not wasm yet");
    let quiet = events_within(&mut events, DEBOUNCE * 4).await;
    assert!(quiet.is_empty(), "{quiet:?}");
    // A real change does.
    deploy(&path, &std::fs::read(ECHO).unwrap());
    assert_eq!(next_event(&mut events).await, mounted("echo_graph", &path));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_handle_stops_watching() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (registry, _) = open_cached(d).await;
    let mut events = registry.subscribe();
    let watch = registry.watch().unwrap();
    deploy(&at(d, "echo_graph.wasm"), &std::fs::read(ECHO).unwrap());
    assert_eq!(
        next_event(&mut events).await,
        mounted("echo_graph", &at(d, "echo_graph.wasm"))
    );
    drop(watch);
    deploy(&at(d, "greet_graph.wasm"), &std::fs::read(GREET).unwrap());
    let after = events_within(&mut events, DEBOUNCE * 5).await;
    assert!(after.is_empty(), "{after:?}");
    assert_eq!(registry.names(), ["echo_graph"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_between_open_and_watch_are_picked_up() {
    let dir = folder(&[("echo_graph.wasm", ECHO)]);
    let d = dir.path();
    let (registry, _) = open_cached(d).await;
    let mut events = registry.subscribe();
    std::fs::remove_file(at(d, "echo_graph.wasm")).unwrap();
    deploy(&at(d, "greet_graph.wasm"), &std::fs::read(GREET).unwrap());
    let _watch = registry.watch().unwrap();
    let mut got = vec![next_event(&mut events).await, next_event(&mut events).await];
    got.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(
        got,
        [
            mounted("greet_graph", &at(d, "greet_graph.wasm")),
            unmounted("echo_graph", &at(d, "echo_graph.wasm")),
        ]
    );
}

/// The next event is the failure of `path`, with `needle` in its reason.
async fn expect_failure(
    events: &mut tokio::sync::broadcast::Receiver<RegistryEvent>,
    path: &Path,
    needle: &str,
) {
    match next_event(events).await {
        RegistryEvent::Failed { path: p, reason } => {
            assert_eq!(p, path);
            assert!(reason.contains(needle), "{reason}");
        }
        other => panic!("expected a failure of {}, got {other:?}", path.display()),
    }
}

/// Writes the lock of `dir` pinning `files` (file name, graph name).
fn lock(dir: &Path, files: &[(&str, &str)]) {
    let entries = files
        .iter()
        .map(|(file, name)| sandgraph_artifact::LockEntry {
            file: (*file).into(),
            name: (*name).into(),
            sha256: sandgraph_artifact::sha256_file(&dir.join(file)).unwrap(),
        })
        .collect();
    sandgraph_artifact::LockFile::new(entries)
        .unwrap()
        .write(dir)
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locked_a_changed_file_is_refused_and_its_graph_unmounted_an_extra_one_refused() {
    let dir = folder(&[("echo_graph.wasm", ECHO)]);
    let d = dir.path();
    lock(d, &[("echo_graph.wasm", "echo_graph")]);
    let options = sandgraph_registry::RegistryOptions {
        locked: true,
        ..common::cached_options(&[d])
    };
    let (registry, _) = sandgraph_registry::Registry::open(common::runtime(), options)
        .await
        .unwrap();
    assert_eq!(registry.names(), ["echo_graph"]);
    let mut events = registry.subscribe();
    let _watch = registry.watch().unwrap();

    // Another build of the same graph, not the pinned bytes.
    let echo = at(d, "echo_graph.wasm");
    deploy(
        &echo,
        &with_custom_section(&std::fs::read(ECHO).unwrap(), b"v2"),
    );
    assert_eq!(
        next_event(&mut events).await,
        unmounted("echo_graph", &echo)
    );
    expect_failure(&mut events, &echo, "changed since it was locked").await;
    assert!(registry.names().is_empty());

    // A file the lock does not name.
    let greet = at(d, "greet_graph.wasm");
    deploy(&greet, &std::fs::read(GREET).unwrap());
    expect_failure(&mut events, &greet, "not in").await;

    // The pinned bytes back: mounted again.
    deploy(&echo, &std::fs::read(ECHO).unwrap());
    assert_eq!(next_event(&mut events).await, mounted("echo_graph", &echo));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_keys_a_graph_mounts_once_its_signature_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let keys = tempfile::tempdir().unwrap();
    let key = sandgraph_artifact::SecretKey::generate().unwrap();
    key.write_pair(&keys.path().join("ci")).unwrap();
    let options = sandgraph_registry::RegistryOptions {
        trusted_keys: Some(sandgraph_artifact::TrustedKeys::from_dir(keys.path()).unwrap()),
        ..common::cached_options(&[d])
    };
    let (registry, _) = sandgraph_registry::Registry::open(common::runtime(), options)
        .await
        .unwrap();
    let mut events = registry.subscribe();
    let _watch = registry.watch().unwrap();

    let echo = at(d, "echo_graph.wasm");
    let bytes = std::fs::read(ECHO).unwrap();
    deploy(&echo, &bytes);
    expect_failure(&mut events, &echo, "not signed").await;
    // Signed for another graph name: refused, naming both names.
    sandgraph_artifact::Sidecar::sign(&key, sandgraph_artifact::sha256(&bytes), "research")
        .write_for(&echo)
        .unwrap();
    expect_failure(
        &mut events,
        &echo,
        "the graph is named \"echo_graph\" but its signature",
    )
    .await;
    // The sidecar alone changes: the graph is admitted.
    sandgraph_artifact::Sidecar::sign(&key, sandgraph_artifact::sha256(&bytes), "echo_graph")
        .write_for(&echo)
        .unwrap();
    assert_eq!(next_event(&mut events).await, mounted("echo_graph", &echo));
}
