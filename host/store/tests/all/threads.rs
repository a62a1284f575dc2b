//! Durable threads on real redb files: round trips, value deduplication,
//! pending writes, the three durability modes, the thread lease, history,
//! fork, update, delete, prune, and reopening files written earlier.

use std::collections::BTreeMap;
use std::path::Path;

use redb::{ReadableDatabase, ReadableTable, TableDefinition};
use sandgraph_core::{
    Checkpoint, CheckpointSource, Checkpointer, ErrorCode, TaskRecord, TaskResult,
    new_checkpoint_id,
};
use sandgraph_store::{Durability, Store, StoreError, ThreadStore};
use serde_json::{Value, json};

/// Builds the next checkpoint of a thread: `writes` are applied on top of
/// `parent`'s values, and every written channel gets a new version above
/// all others, as the executor does.
fn next(parent: Option<&Checkpoint>, source: CheckpointSource, writes: Value) -> Checkpoint {
    let mut values = parent.map(|p| p.values.clone()).unwrap_or_default();
    let mut versions = parent
        .map(|p| p.channel_versions.clone())
        .unwrap_or_default();
    let version = versions.values().copied().max().unwrap_or(0) + 1;
    for (channel, value) in writes.as_object().unwrap() {
        values.insert(channel.clone(), value.clone());
        versions.insert(channel.clone(), version);
    }
    Checkpoint {
        id: new_checkpoint_id(parent.map(|p| p.id.as_str())),
        parent: parent.map(|p| p.id.clone()),
        source,
        step: parent.map_or(0, |p| p.step + 1),
        created_at_ms: 1_700_000_000_000,
        channel_versions: versions,
        versions_seen: BTreeMap::from([(
            "node".to_string(),
            BTreeMap::from([("a".to_string(), 1)]),
        )]),
        values,
        pull: ["node".to_string()].into(),
        joins_seen: BTreeMap::new(),
        sends: Vec::new(),
    }
}

fn done(path: &str, writes: Value) -> TaskRecord {
    TaskRecord {
        path: path.into(),
        node: path.rsplit(':').next().unwrap().into(),
        result: TaskResult::Done {
            writes: writes.as_object().unwrap().clone(),
            next: vec!["b".into()],
            sends: Vec::new(),
        },
    }
}

fn interrupted(path: &str, id: &str) -> TaskRecord {
    TaskRecord {
        path: path.into(),
        node: "asker".into(),
        result: TaskResult::Interrupted {
            id: id.into(),
            value: json!({"question": "ok?"}),
            resume: vec![json!("earlier answer")],
        },
    }
}

fn open(dir: &tempfile::TempDir) -> Store {
    Store::open(&dir.path().join("sandgraph.redb")).unwrap()
}

/// Rows of `table` belonging to `thread`, counted on the closed file with
/// redb itself (the store must be dropped first).
fn raw_rows(path: &Path, thread: &str) -> BTreeMap<&'static str, usize> {
    const CHECKPOINTS: TableDefinition<(&str, &str), &str> = TableDefinition::new("checkpoints");
    const BLOBS: TableDefinition<(&str, &str, u64), &str> = TableDefinition::new("blobs");
    const WRITES: TableDefinition<(&str, &str, &str), &str> = TableDefinition::new("writes");
    const THREADS: TableDefinition<&str, &str> = TableDefinition::new("threads");
    let db = redb::Database::open(path).unwrap();
    let tx = db.begin_read().unwrap();
    let mut out = BTreeMap::new();
    let count = |keys: Vec<String>| keys.iter().filter(|k| *k == thread).count();
    let t = tx.open_table(CHECKPOINTS).unwrap();
    out.insert(
        "checkpoints",
        count(
            t.iter()
                .unwrap()
                .map(|e| e.unwrap().0.value().0.to_string())
                .collect(),
        ),
    );
    let t = tx.open_table(BLOBS).unwrap();
    out.insert(
        "blobs",
        count(
            t.iter()
                .unwrap()
                .map(|e| e.unwrap().0.value().0.to_string())
                .collect(),
        ),
    );
    let t = tx.open_table(WRITES).unwrap();
    out.insert(
        "writes",
        count(
            t.iter()
                .unwrap()
                .map(|e| e.unwrap().0.value().0.to_string())
                .collect(),
        ),
    );
    let t = tx.open_table(THREADS).unwrap();
    out.insert("threads", usize::from(t.get(thread).unwrap().is_some()));
    out
}

fn ids(history: &[Checkpoint]) -> Vec<&str> {
    history.iter().map(|c| c.id.as_str()).collect()
}

/// Writes `steps` checkpoints through a sync writer, with a task record
/// against each but the last; returns them oldest first.
async fn write_chain(threads: &ThreadStore, thread: &str, steps: usize) -> Vec<Checkpoint> {
    let writer = threads.begin(thread, "g", Durability::Sync).unwrap();
    let mut out: Vec<Checkpoint> = Vec::new();
    for i in 0..steps {
        let writes = if i == 0 {
            json!({"a": 0, "b": "constant"})
        } else {
            json!({"a": i})
        };
        let source = if i == 0 {
            CheckpointSource::Input
        } else {
            CheckpointSource::Loop
        };
        let c = next(out.last(), source, writes);
        writer.put_checkpoint(&c).await.unwrap();
        if i + 1 < steps {
            writer
                .put_task(&c.id, &done("pull:node", json!({ "a": i + 1 })))
                .await
                .unwrap();
        }
        out.push(c);
    }
    writer.flush().await.unwrap();
    out
}

#[tokio::test]
async fn checkpoints_round_trip_and_an_unchanged_value_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandgraph.redb");
    let store = Store::open(&path).unwrap();
    let threads = store.threads();
    assert!(threads.load("t1").unwrap().is_none());

    let writer = threads.begin("t1", "g", Durability::Sync).unwrap();
    let first = next(
        None,
        CheckpointSource::Input,
        json!({"b": {"deep": [1, 2.5, null]}, "a": 1}),
    );
    writer.put_checkpoint(&first).await.unwrap();
    writer
        .put_task(&first.id, &done("pull:node", json!({"a": 2})))
        .await
        .unwrap();
    let second = next(Some(&first), CheckpointSource::Loop, json!({"a": 2}));
    writer.put_checkpoint(&second).await.unwrap();
    writer.flush().await.unwrap();
    drop(writer);

    let state = threads.load("t1").unwrap().unwrap();
    assert_eq!(
        state.checkpoint, second,
        "every field, values rebuilt from blobs"
    );
    assert_eq!(
        state.checkpoint.values.keys().collect::<Vec<_>>(),
        ["b", "a"],
        "channel order is kept"
    );
    assert!(state.pending.is_empty(), "the head has no task records");
    assert_eq!(threads.checkpoint("t1", &first.id).unwrap().unwrap(), first);
    assert!(
        threads
            .checkpoint("t1", "0000000000000001")
            .unwrap()
            .is_none()
    );

    let info = threads.info("t1").unwrap().unwrap();
    assert_eq!((info.checkpoints, info.blobs, info.step), (2, 3, 1));
    assert_eq!(
        (info.graph.as_str(), info.head.as_str()),
        ("g", second.id.as_str())
    );

    drop((threads, store));
    let rows = raw_rows(&path, "t1");
    assert_eq!(rows["blobs"], 3, "b is stored once, a twice: {rows:?}");
    assert_eq!(rows["checkpoints"], 2);
    assert_eq!(rows["writes"], 1);
    assert_eq!(rows["threads"], 1);
}

async fn load_returns_the_pending_writes_of_the_head_only_in_task_order(store: Store) {
    let threads = store.threads();
    let writer = threads.begin("t", "g", Durability::Sync).unwrap();
    let c1 = next(None, CheckpointSource::Input, json!({"a": 1}));
    writer.put_checkpoint(&c1).await.unwrap();
    writer
        .put_task(&c1.id, &done("pull:old", json!({})))
        .await
        .unwrap();
    let c2 = next(Some(&c1), CheckpointSource::Loop, json!({"a": 2}));
    writer.put_checkpoint(&c2).await.unwrap();
    for record in [
        done("push:10", json!({"x": 10})),
        interrupted("push:2", "int-2"),
        done("pull:b", json!({"x": "b"})),
        done("pull:a", json!({"x": "a"})),
    ] {
        writer.put_task(&c2.id, &record).await.unwrap();
    }
    // A task that runs again replaces its record.
    writer
        .put_task(&c2.id, &done("pull:a", json!({"x": "a again"})))
        .await
        .unwrap();
    // Sync mode holds the records of an unsettled step until flush.
    writer.flush().await.unwrap();

    let state = writer.load().unwrap().unwrap();
    let paths: Vec<&str> = state.pending.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["pull:a", "pull:b", "push:2", "push:10"]);
    assert_eq!(state.pending[0], done("pull:a", json!({"x": "a again"})));
    assert_eq!(state.pending[2], interrupted("push:2", "int-2"));
    let interrupts = state.pending_interrupts();
    assert_eq!(interrupts.len(), 1);
    assert_eq!(interrupts[0].id, "int-2");

    let info = threads.list().unwrap();
    assert_eq!(info.len(), 1);
    assert_eq!((info[0].pending_writes, info[0].pending_interrupts), (4, 1));

    // A record against a checkpoint that does not exist is refused.
    let err = writer
        .put_task("00000000000000ff", &done("pull:a", json!({})))
        .await
        .unwrap_err();
    assert!(err.message.contains("00000000000000ff"), "{err}");
}

#[tokio::test]
async fn every_durability_mode_has_persisted_everything_after_flush() {
    for mode in Durability::ALL {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sandgraph.redb");
        let store = Store::open(&path).unwrap();
        let threads = store.threads();
        let writer = threads.begin("t", "g", mode).unwrap();
        let c1 = next(None, CheckpointSource::Input, json!({"a": 1, "b": 1}));
        writer.put_checkpoint(&c1).await.unwrap();
        writer
            .put_task(&c1.id, &done("pull:node", json!({"a": 2})))
            .await
            .unwrap();
        let c2 = next(Some(&c1), CheckpointSource::Loop, json!({"a": 2}));
        writer.put_checkpoint(&c2).await.unwrap();
        writer
            .put_task(&c2.id, &interrupted("pull:asker", "i"))
            .await
            .unwrap();
        if mode == Durability::Exit {
            assert!(
                threads.load("t").unwrap().is_none(),
                "exit mode writes nothing before flush"
            );
        }
        writer.flush().await.unwrap();
        writer.flush().await.unwrap();
        drop((writer, threads, store));

        let store = Store::open(&path).unwrap();
        let threads = store.threads();
        let state = threads.load("t").unwrap().unwrap();
        assert_eq!(state.checkpoint, c2, "{mode}");
        assert_eq!(
            state.pending,
            vec![interrupted("pull:asker", "i")],
            "{mode}"
        );
        let history = threads.history("t", None).unwrap();
        assert_eq!(history, vec![c2.clone(), c1.clone()], "{mode}");
        assert_eq!(threads.info("t").unwrap().unwrap().blobs, 3, "{mode}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_mode_commits_in_order() {
    // A task record is accepted only once its checkpoint is stored, and a
    // checkpoint only if it sorts after the head: any reordering fails.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandgraph.redb");
    let store = Store::open(&path).unwrap();
    let threads = store.threads();
    let writer = threads.begin("t", "g", Durability::Async).unwrap();
    let mut last: Option<Checkpoint> = None;
    for i in 0..300 {
        let c = next(last.as_ref(), CheckpointSource::Loop, json!({ "a": i }));
        writer.put_checkpoint(&c).await.unwrap();
        for path in ["pull:x", "pull:y"] {
            writer
                .put_task(&c.id, &done(path, json!({ "a": i })))
                .await
                .unwrap();
        }
        last = Some(c);
    }
    writer.flush().await.unwrap();
    drop(writer);
    let state = threads.load("t").unwrap().unwrap();
    assert_eq!(Some(&state.checkpoint), last.as_ref());
    assert_eq!(state.pending.len(), 2);
    let info = threads.info("t").unwrap().unwrap();
    assert_eq!((info.checkpoints, info.blobs), (300, 300));
    drop((threads, store));
    assert_eq!(raw_rows(&path, "t")["writes"], 600);
}

async fn async_mode_stops_at_the_first_failure_and_flush_reports_it(store: Store) {
    let threads = store.threads();
    let writer = threads.begin("t", "g", Durability::Async).unwrap();
    let c1 = next(None, CheckpointSource::Input, json!({"a": 1}));
    writer.put_checkpoint(&c1).await.unwrap();
    writer.flush().await.unwrap();
    // Queued fine, fails when committed: no such checkpoint.
    writer
        .put_task("00000000000000ff", &done("pull:a", json!({})))
        .await
        .unwrap();
    let err = writer.flush().await.unwrap_err();
    assert!(err.message.contains("00000000000000ff"), "{err}");
    // Nothing after the failure is written, and it is reported again.
    let c2 = next(Some(&c1), CheckpointSource::Loop, json!({"a": 2}));
    let again = writer.put_checkpoint(&c2).await.unwrap_err();
    assert_eq!(again, err);
    assert_eq!(writer.flush().await.unwrap_err(), err);
    drop(writer);
    assert_eq!(threads.load("t").unwrap().unwrap().checkpoint, c1);
}

async fn a_busy_thread_fails_at_once_and_the_lease_is_given_back_on_drop(store: Store) {
    let threads = store.threads();
    let chain = write_chain(&threads, "t1", 2).await;
    for mode in Durability::ALL {
        let writer = threads.begin("t1", "g", mode).unwrap();
        // Every handle made from the store, or a clone of it, sees the lease.
        let other = store.clone().threads();
        let err = other.begin("t1", "g", Durability::Sync).unwrap_err();
        assert!(matches!(err, StoreError::ThreadBusy { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "thread \"t1\" is busy: another run is writing it"
        );
        let run_error = sandgraph_core::RunError::from(err);
        assert_eq!(run_error.code, ErrorCode::ThreadBusy);
        assert_eq!(run_error.code.as_str(), "thread_busy");
        for err in [
            other.delete("t1").unwrap_err(),
            other.prune("t1", 1).unwrap_err(),
            other.fork("t1", &chain[0].id).unwrap_err(),
            other
                .put_update(
                    "t1",
                    &next(Some(&chain[1]), CheckpointSource::Update, json!({})),
                )
                .unwrap_err(),
        ] {
            assert!(
                matches!(err, StoreError::ThreadBusy { .. }),
                "{mode}: {err:?}"
            );
        }
        // Other threads are free.
        drop(other.begin("t2", "g", Durability::Sync).unwrap());
        // Reads need no lease.
        assert!(other.load("t1").unwrap().is_some());
        writer.flush().await.unwrap();
        drop(writer);
        drop(
            other
                .begin("t1", "g", Durability::Sync)
                .expect("free again after drop"),
        );
    }
}

async fn begin_refuses_a_thread_of_another_graph_and_bad_ids(store: Store) {
    let threads = store.threads();
    write_chain(&threads, "t", 1).await;
    let err = threads.begin("t", "other", Durability::Sync).unwrap_err();
    assert!(matches!(err, StoreError::GraphMismatch { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "thread \"t\" belongs to graph \"g\", not \"other\""
    );
    // The failed begin did not keep the lease.
    drop(threads.begin("t", "g", Durability::Sync).unwrap());
    let err = threads.begin("", "g", Durability::Sync).unwrap_err();
    assert!(err.to_string().contains("invalid thread id"), "{err}");

    // A writer refuses a checkpoint id that is not a time-sortable id.
    let writer = threads.begin("t", "g", Durability::Sync).unwrap();
    let head = threads.load("t").unwrap().unwrap().checkpoint;
    let mut bad = next(Some(&head), CheckpointSource::Loop, json!({"a": 9}));
    bad.id = "not-an-id".into();
    let err = writer.put_checkpoint(&bad).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Storage);
    assert!(err.message.contains("not-an-id"), "{err}");
}

async fn history_is_newest_first_with_a_limit(store: Store) {
    let threads = store.threads();
    let chain = write_chain(&threads, "t", 5).await;
    // A thread whose id extends this one's must not leak into its history.
    write_chain(&threads, "t2", 2).await;
    let newest_first: Vec<&str> = chain.iter().rev().map(|c| c.id.as_str()).collect();
    let all = threads.history("t", None).unwrap();
    assert_eq!(ids(&all), newest_first);
    assert_eq!(all[4], chain[0], "values rebuilt for old checkpoints too");
    assert_eq!(
        ids(&threads.history("t", Some(2)).unwrap()),
        newest_first[..2]
    );
    assert!(threads.history("t", Some(0)).unwrap().is_empty());
    let err = threads.history("nope", None).unwrap_err();
    assert_eq!(err.to_string(), "no thread \"nope\"");
}

async fn fork_copies_a_checkpoint_as_the_new_head(store: Store) {
    let threads = store.threads();
    let chain = write_chain(&threads, "t", 3).await;
    let blobs_before = threads.info("t").unwrap().unwrap().blobs;

    let fork = threads.fork("t", &chain[0].id).unwrap();
    assert_eq!(fork.source, CheckpointSource::Fork);
    assert_eq!(fork.parent.as_deref(), Some(chain[0].id.as_str()));
    assert!(fork.id > chain[2].id, "a fork sorts after the old head");
    assert_eq!(
        (&fork.values, &fork.channel_versions, fork.step),
        (&chain[0].values, &chain[0].channel_versions, chain[0].step)
    );
    let state = threads.load("t").unwrap().unwrap();
    assert_eq!(state.checkpoint, fork);
    assert!(state.pending.is_empty(), "the forked step runs afresh");
    assert_eq!(threads.info("t").unwrap().unwrap().blobs, blobs_before);
    assert_eq!(threads.history("t", None).unwrap().len(), 4);

    // A run from the fork reuses versions the abandoned branch already
    // used, with other values: each branch keeps its own.
    let writer = threads.begin("t", "g", Durability::Sync).unwrap();
    let branch = next(Some(&fork), CheckpointSource::Loop, json!({"a": "branch"}));
    assert_eq!(branch.channel_versions, chain[1].channel_versions);
    writer.put_checkpoint(&branch).await.unwrap();
    drop(writer);
    assert_eq!(threads.load("t").unwrap().unwrap().checkpoint, branch);
    assert_eq!(
        threads.checkpoint("t", &chain[1].id).unwrap().unwrap(),
        chain[1]
    );

    let err = threads.fork("t", "00000000000000aa").unwrap_err();
    assert_eq!(
        err.to_string(),
        "thread \"t\" has no checkpoint \"00000000000000aa\""
    );
    assert!(matches!(
        threads.fork("nope", &chain[0].id).unwrap_err(),
        StoreError::UnknownThread { .. }
    ));
}

async fn put_update_writes_a_new_head_and_stores_only_changed_values(store: Store) {
    let threads = store.threads();
    let chain = write_chain(&threads, "t", 2).await;
    let blobs = threads.info("t").unwrap().unwrap().blobs;
    let update = next(
        Some(&chain[1]),
        CheckpointSource::Update,
        json!({"a": "edited"}),
    );
    threads.put_update("t", &update).unwrap();
    let state = threads.load("t").unwrap().unwrap();
    assert_eq!(state.checkpoint, update);
    assert!(state.pending.is_empty());
    assert_eq!(threads.info("t").unwrap().unwrap().blobs, blobs + 1);

    let stale = Checkpoint {
        id: chain[0].id.clone(),
        ..update.clone()
    };
    let err = threads.put_update("t", &stale).unwrap_err();
    assert!(matches!(err, StoreError::StaleCheckpoint { .. }), "{err:?}");
    let err = threads.put_update("nope", &update).unwrap_err();
    assert!(matches!(err, StoreError::UnknownThread { .. }), "{err:?}");
    assert_eq!(threads.load("t").unwrap().unwrap().checkpoint, update);
}

#[tokio::test]
async fn delete_removes_every_row_of_that_thread_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandgraph.redb");
    let store = Store::open(&path).unwrap();
    let threads = store.threads();
    write_chain(&threads, "t", 3).await;
    let keep = write_chain(&threads, "t-other", 3).await;
    assert!(threads.delete("t").unwrap());
    assert!(!threads.delete("t").unwrap(), "already gone");
    assert!(threads.load("t").unwrap().is_none());
    assert!(threads.info("t").unwrap().is_none());
    let list = threads.list().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].id, "t-other");
    assert_eq!(threads.history("t-other", None).unwrap().len(), 3);
    assert_eq!(
        threads.load("t-other").unwrap().unwrap().checkpoint,
        keep[2]
    );
    drop((threads, store));
    let gone = raw_rows(&path, "t");
    assert!(gone.values().all(|n| *n == 0), "{gone:?}");
    let kept = raw_rows(&path, "t-other");
    assert_eq!(
        (kept["checkpoints"], kept["blobs"], kept["writes"]),
        (3, 4, 2)
    );
}

#[tokio::test]
async fn prune_keeps_the_newest_and_removes_only_unreferenced_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandgraph.redb");
    let store = Store::open(&path).unwrap();
    let threads = store.threads();
    // `b` is written once by the first checkpoint; `a` at every step.
    let chain = write_chain(&threads, "t", 5).await;
    assert_eq!(threads.info("t").unwrap().unwrap().blobs, 6);
    let err = threads.prune("t", 0).unwrap_err();
    assert!(err.to_string().contains("at least 1"), "{err}");
    assert_eq!(threads.prune("t", 10).unwrap(), 0);

    assert_eq!(threads.prune("t", 2).unwrap(), 3);
    let history = threads.history("t", None).unwrap();
    assert_eq!(history, vec![chain[4].clone(), chain[3].clone()]);
    let info = threads.info("t").unwrap().unwrap();
    // b's blob lives on (still referenced), a's two newest only.
    assert_eq!((info.checkpoints, info.blobs), (2, 3));
    assert_eq!(threads.load("t").unwrap().unwrap().checkpoint, chain[4]);

    assert_eq!(threads.prune("t", 1).unwrap(), 1);
    assert_eq!(threads.load("t").unwrap().unwrap().checkpoint, chain[4]);
    let err = threads.prune("nope", 1).unwrap_err();
    assert!(matches!(err, StoreError::UnknownThread { .. }), "{err:?}");
    drop((threads, store));
    let rows = raw_rows(&path, "t");
    assert_eq!(
        (rows["checkpoints"], rows["blobs"], rows["writes"]),
        (1, 2, 0)
    );
}

fn sync_mode_works_without_a_tokio_runtime(store: Store) {
    let threads = store.threads();
    let writer = threads.begin("t", "g", Durability::Sync).unwrap();
    let c = next(None, CheckpointSource::Input, json!({"a": 1}));
    futures::executor::block_on(writer.put_checkpoint(&c)).unwrap();
    futures::executor::block_on(writer.flush()).unwrap();
    assert_eq!(threads.load("t").unwrap().unwrap().checkpoint, c);
}

async fn exit_mode_without_flush_writes_nothing(store: Store) {
    let threads = store.threads();
    let writer = threads.begin("t", "g", Durability::Exit).unwrap();
    let c = next(None, CheckpointSource::Input, json!({"a": 1}));
    writer.put_checkpoint(&c).await.unwrap();
    drop(writer);
    assert!(threads.load("t").unwrap().is_none());
}

/// Where the schema 1 fixture lives, and what it holds.
/// A database written at schema 1, committed so later schemas are tested
/// against it (named `.db`: it is test data, not a build output).
const FIXTURE: &str = "tests/fixtures/threads-schema1.db";

fn fixture_chain() -> Vec<Checkpoint> {
    let mut first = next(
        None,
        CheckpointSource::Input,
        json!({"messages": ["hi"], "n": 1}),
    );
    first.id = "0006000000000001".into();
    first.created_at_ms = 1;
    let mut second = next(Some(&first), CheckpointSource::Loop, json!({"n": 2}));
    second.id = "0006000000000002".into();
    second.created_at_ms = 2;
    vec![first, second]
}

/// Writes the fixture's content with this build. With
/// `SANDGRAPH_WRITE_FIXTURES=1` (and only while this build writes schema 1)
/// it regenerates the committed fixture; otherwise it writes a scratch copy
/// and checks the committed fixture loads to the same thread.
#[tokio::test]
async fn the_schema_1_fixture_matches_what_this_build_writes() {
    let regenerate = std::env::var_os("SANDGRAPH_WRITE_FIXTURES").is_some();
    assert!(
        !regenerate || sandgraph_store::SCHEMA_VERSION == 1,
        "only schema 1 builds may regenerate it"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = if regenerate {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE)
    } else {
        dir.path().join("scratch.db")
    };
    let _ = std::fs::remove_file(&path);
    let store = Store::open(&path).unwrap();
    let threads = store.threads();
    let writer = threads.begin("fixture", "chat", Durability::Sync).unwrap();
    let chain = fixture_chain();
    writer.put_checkpoint(&chain[0]).await.unwrap();
    writer.put_checkpoint(&chain[1]).await.unwrap();
    writer
        .put_task(
            &chain[1].id,
            &interrupted("pull:asker", "fixture-interrupt"),
        )
        .await
        .unwrap();
    writer.flush().await.unwrap();
    drop((writer, threads, store));
    redb::Database::open(&path).unwrap().compact().unwrap();
    let fresh = Store::open(&path)
        .unwrap()
        .threads()
        .load("fixture")
        .unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    let copy = dir2.path().join("fixture.db");
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE), &copy).unwrap();
    let committed = Store::open(&copy)
        .unwrap()
        .threads()
        .load("fixture")
        .unwrap();
    assert_eq!(fresh, committed);
}

#[test]
fn a_database_written_at_schema_1_still_loads() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copy.redb");
    std::fs::copy(&fixture, &path).unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.schema_version().unwrap(),
        sandgraph_store::SCHEMA_VERSION
    );
    let threads = store.threads();
    let chain = fixture_chain();
    let state = threads.load("fixture").unwrap().unwrap();
    assert_eq!(state.checkpoint, chain[1]);
    assert_eq!(
        state.pending,
        vec![interrupted("pull:asker", "fixture-interrupt")]
    );
    assert_eq!(
        threads.history("fixture", None).unwrap(),
        vec![chain[1].clone(), chain[0].clone()]
    );
    let info = threads.list().unwrap();
    assert_eq!(info.len(), 1);
    assert_eq!(
        (
            info[0].graph.as_str(),
            info[0].checkpoints,
            info[0].blobs,
            info[0].pending_interrupts
        ),
        ("chat", 2, 3, 1)
    );
    // And it can be written on.
    drop(threads.begin("fixture", "chat", Durability::Sync).unwrap());
}

// ---- sync mode: one commit per settled superstep, group commit ----

#[tokio::test]
async fn a_sync_step_commits_the_input_its_records_and_its_checkpoint_in_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandgraph.redb");
    let store = Store::open(&path).unwrap();
    let threads = store.threads();
    let before = threads.commit_count();
    let writer = threads.begin("t", "g", Durability::Sync).unwrap();
    let input = next(None, CheckpointSource::Input, json!({"a": 1, "b": 1}));
    writer.put_checkpoint(&input).await.unwrap();
    writer
        .put_task(&input.id, &done("pull:node", json!({"a": 2})))
        .await
        .unwrap();
    assert!(
        threads.load("t").unwrap().is_none(),
        "the input and the record wait for the step's checkpoint"
    );
    assert_eq!(threads.commit_count(), before);
    let step = next(Some(&input), CheckpointSource::Loop, json!({"a": 2}));
    writer.put_checkpoint(&step).await.unwrap();
    assert_eq!(threads.commit_count(), before + 1, "one commit for step 0");
    assert_eq!(threads.load("t").unwrap().unwrap().checkpoint, step);
    assert_eq!(
        threads.history("t", None).unwrap(),
        vec![step.clone(), input.clone()]
    );
    // `b` is deduplicated against the input held in the same transaction.
    assert_eq!(threads.info("t").unwrap().unwrap().blobs, 3);

    // Every later step is one more commit; flush has nothing left.
    writer
        .put_task(&step.id, &done("pull:node", json!({"a": 3})))
        .await
        .unwrap();
    let third = next(Some(&step), CheckpointSource::Loop, json!({"a": 3}));
    writer.put_checkpoint(&third).await.unwrap();
    writer.flush().await.unwrap();
    assert_eq!(threads.commit_count(), before + 2);
    drop((writer, threads, store));
    let rows = raw_rows(&path, "t");
    assert_eq!((rows["checkpoints"], rows["writes"]), (3, 2), "{rows:?}");
}

#[tokio::test]
async fn sync_records_of_an_unsettled_step_are_committed_by_flush_and_lost_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let threads = store.threads();
    let chain = write_chain(&threads, "t", 2).await;
    let head = &chain[1];

    // A crash mid-step: the writer goes away without a flush.
    let writer = threads.begin("t", "g", Durability::Sync).unwrap();
    writer
        .put_task(&head.id, &done("pull:a", json!({"x": 1})))
        .await
        .unwrap();
    assert!(writer.load().unwrap().unwrap().pending.is_empty());
    drop(writer);
    let state = threads.load("t").unwrap().unwrap();
    assert_eq!(state.checkpoint, *head);
    assert!(
        state.pending.is_empty(),
        "the finished task of the unsettled step runs again"
    );

    // A run that stops mid-step (an interrupt, a failed task) is flushed:
    // what it held is committed, in one transaction.
    let writer = threads.begin("t", "g", Durability::Sync).unwrap();
    let before = threads.commit_count();
    writer
        .put_task(&head.id, &done("pull:a", json!({"x": 1})))
        .await
        .unwrap();
    writer
        .put_task(&head.id, &interrupted("pull:b", "i"))
        .await
        .unwrap();
    assert!(threads.load("t").unwrap().unwrap().pending.is_empty());
    assert_eq!(threads.commit_count(), before);
    writer.flush().await.unwrap();
    assert_eq!(threads.commit_count(), before + 1);
    assert_eq!(
        threads.load("t").unwrap().unwrap().pending,
        vec![done("pull:a", json!({"x": 1})), interrupted("pull:b", "i")]
    );

    // New input whose first step never settles: flush commits it too.
    let input = next(Some(head), CheckpointSource::Input, json!({"a": 7}));
    writer.put_checkpoint(&input).await.unwrap();
    assert_eq!(threads.load("t").unwrap().unwrap().checkpoint, *head);
    writer.flush().await.unwrap();
    assert_eq!(threads.load("t").unwrap().unwrap().checkpoint, input);
}

/// Waits until `n` writers' commits wait behind a paused committer.
fn wait_queued(threads: &ThreadStore, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while threads.queued_commits() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "only {} of {n} commits queued",
            threads.queued_commits()
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// Runs a sync writer of `thread` on its own OS thread: `input` (if any),
/// a task record against it, then `checkpoint`; returns what the last
/// `put_checkpoint` returned.
fn spawn_writer(
    threads: &ThreadStore,
    thread: &str,
    input: Option<Checkpoint>,
    checkpoint: Checkpoint,
) -> std::thread::JoinHandle<Result<Checkpoint, sandgraph_core::RunError>> {
    let writer = threads.begin(thread, "g", Durability::Sync).unwrap();
    std::thread::spawn(move || {
        futures::executor::block_on(async {
            if let Some(input) = &input {
                writer.put_checkpoint(input).await?;
                writer
                    .put_task(&input.id, &done("pull:node", json!({"a": 0})))
                    .await?;
            }
            writer.put_checkpoint(&checkpoint).await?;
            writer.flush().await?;
            Ok(checkpoint)
        })
    })
}

#[test]
fn concurrent_sync_writers_of_one_store_share_one_commit() {
    const WRITERS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let threads = store.threads();
    let before = threads.commit_count();
    let pause = threads.pause_commits();
    let runs: Vec<_> = (0..WRITERS)
        .map(|i| {
            let input = next(None, CheckpointSource::Input, json!({ "a": i }));
            let step = next(Some(&input), CheckpointSource::Loop, json!({ "a": i + 1 }));
            spawn_writer(&threads, &format!("t{i}"), Some(input), step)
        })
        .collect();
    wait_queued(&threads, WRITERS);
    assert_eq!(
        threads.commit_count(),
        before,
        "nothing commits while paused"
    );
    drop(pause);
    for (i, run) in runs.into_iter().enumerate() {
        let step = run.join().unwrap().unwrap();
        let state = threads.load(&format!("t{i}")).unwrap().unwrap();
        assert_eq!(state.checkpoint, step);
        assert_eq!(threads.history(&format!("t{i}"), None).unwrap().len(), 2);
    }
    assert_eq!(
        threads.commit_count(),
        before + 1,
        "{WRITERS} writers, one transaction"
    );
}

#[test]
fn a_writer_that_fails_inside_a_group_commit_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let threads = store.threads();
    let chain = futures::executor::block_on(write_chain(&threads, "bad", 2));
    let before = threads.commit_count();
    let pause = threads.pause_commits();
    // Queued in this order, so the failing writer sits between two others.
    let first = spawn_writer(
        &threads,
        "good-1",
        None,
        next(None, CheckpointSource::Loop, json!({"a": 1})),
    );
    wait_queued(&threads, 1);
    // Valid on its own, refused when committed: it sorts before the head.
    let mut stale = next(Some(&chain[1]), CheckpointSource::Loop, json!({"a": 9}));
    stale.id = "0000000000000001".into();
    let bad = spawn_writer(&threads, "bad", None, stale);
    wait_queued(&threads, 2);
    let last = spawn_writer(
        &threads,
        "good-2",
        None,
        next(None, CheckpointSource::Loop, json!({"a": 2})),
    );
    wait_queued(&threads, 3);
    drop(pause);

    let err = bad.join().unwrap().unwrap_err();
    assert!(
        err.message
            .contains("does not sort after the thread's head"),
        "{err}"
    );
    for (thread, run) in [("good-1", first), ("good-2", last)] {
        let saved = run.join().unwrap().unwrap();
        assert_eq!(threads.load(thread).unwrap().unwrap().checkpoint, saved);
    }
    assert_eq!(threads.load("bad").unwrap().unwrap().checkpoint, chain[1]);
    assert_eq!(
        threads.commit_count(),
        before + 1,
        "the others still share one transaction"
    );
}

async fn a_sync_writer_accepts_nothing_after_a_failed_commit(store: Store) {
    let threads = store.threads();
    let chain = write_chain(&threads, "t", 2).await;
    let writer = threads.begin("t", "g", Durability::Sync).unwrap();
    writer
        .put_task(&chain[1].id, &done("pull:a", json!({"x": 1})))
        .await
        .unwrap();
    let mut stale = next(Some(&chain[1]), CheckpointSource::Loop, json!({"a": 9}));
    stale.id = "0000000000000001".into();
    let err = writer.put_checkpoint(&stale).await.unwrap_err();
    // The record went down with the failed transaction, and the writer
    // refuses what would follow it.
    let good = next(Some(&chain[1]), CheckpointSource::Loop, json!({"a": 9}));
    assert_eq!(writer.put_checkpoint(&good).await.unwrap_err(), err);
    assert_eq!(
        writer
            .put_task(&chain[1].id, &done("pull:b", json!({})))
            .await
            .unwrap_err(),
        err
    );
    writer.flush().await.unwrap();
    drop(writer);
    let state = threads.load("t").unwrap().unwrap();
    assert_eq!(state.checkpoint, chain[1]);
    assert!(state.pending.is_empty());
}

// ---------------------------------------------------------------------------
// Conformance: the tests above that take a `Store` run on both backends.

use crate::fixture;

/// A fresh PostgreSQL database (on the test binary's one cluster) for
/// `test`, with a short lease so take-over tests stay quick.
fn postgres(test: &str) -> (std::sync::Arc<fixture::TestPostgres>, Store) {
    let (pg, _, store) = postgres_at(test);
    (pg, store)
}

/// [`postgres`], with the database's URL for a second host.
fn postgres_at(test: &str) -> (std::sync::Arc<fixture::TestPostgres>, String, Store) {
    let pg = fixture::TestPostgres::shared();
    let url = pg.fresh_db(test);
    let store = Store::connect(&url).unwrap();
    (pg, url, store)
}

macro_rules! conformance {
    (async: $($name:ident),* ; sync: $($sync:ident),*) => {
        mod on_redb {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let dir = tempfile::tempdir().unwrap();
                    super::$name(super::open(&dir)).await;
                }
            )*
            $(
                #[test]
                fn $sync() {
                    let dir = tempfile::tempdir().unwrap();
                    super::$sync(super::open(&dir));
                }
            )*
        }
        mod on_postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let (_pg, store) = super::postgres(stringify!($name));
                    super::$name(store).await;
                }
            )*
            $(
                #[test]
                fn $sync() {
                    let (_pg, store) = super::postgres(stringify!($sync));
                    super::$sync(store);
                }
            )*
        }
    };
}

conformance!(
    async: load_returns_the_pending_writes_of_the_head_only_in_task_order,
    async_mode_stops_at_the_first_failure_and_flush_reports_it,
    a_busy_thread_fails_at_once_and_the_lease_is_given_back_on_drop,
    begin_refuses_a_thread_of_another_graph_and_bad_ids,
    history_is_newest_first_with_a_limit,
    fork_copies_a_checkpoint_as_the_new_head,
    put_update_writes_a_new_head_and_stores_only_changed_values,
    exit_mode_without_flush_writes_nothing,
    a_sync_writer_accepts_nothing_after_a_failed_commit;
    sync: sync_mode_works_without_a_tokio_runtime
);

/// Two hosts (two connections to one database): a thread one host writes
/// is busy for the other, and free again once the writer is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_thread_is_busy_across_hosts() {
    let (_pg, url, a) = postgres_at("busy_across_hosts");
    let b = Store::connect(&url).unwrap();
    let writer = a.threads().begin("t", "g", Durability::Sync).unwrap();
    let err = b.threads().begin("t", "g", Durability::Sync).unwrap_err();
    assert!(matches!(err, StoreError::ThreadBusy { .. }), "{err}");
    let err = b.threads().delete("t").unwrap_err();
    assert!(matches!(err, StoreError::ThreadBusy { .. }), "{err}");
    drop(writer);
    b.threads().begin("t", "g", Durability::Sync).unwrap();
}

/// Fencing: host A's lease expires (A is paused: no renewal, no write),
/// host B takes the thread over and writes; when A wakes up, its next
/// checkpoint is refused with `LeaseLost` and nothing of it is written.
#[test]
fn on_postgres_a_host_that_lost_its_lease_cannot_write() {
    let (_pg, url, a) = postgres_at("lost_lease");
    let a = a.with_thread_lease(std::time::Duration::from_millis(300));
    let b = Store::connect(&url)
        .unwrap()
        .with_thread_lease(std::time::Duration::from_millis(300));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // No runtime is current while A begins: its lease is not renewed, as
    // for a host that stopped running.
    let a_writer = a.threads().begin("t", "g", Durability::Sync).unwrap();
    let first = next(None, CheckpointSource::Loop, json!({"a": 1}));
    rt.block_on(a_writer.put_checkpoint(&first)).unwrap();
    let err = b.threads().begin("t", "g", Durability::Sync).unwrap_err();
    assert!(matches!(err, StoreError::ThreadBusy { .. }), "{err}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let b_writer = b.threads().begin("t", "g", Durability::Sync).unwrap();
    let from_b = next(Some(&first), CheckpointSource::Loop, json!({"a": 2}));
    rt.block_on(b_writer.put_checkpoint(&from_b)).unwrap();
    let from_a = next(Some(&first), CheckpointSource::Loop, json!({"a": 3}));
    let err = rt.block_on(a_writer.put_checkpoint(&from_a)).unwrap_err();
    assert_eq!(err.code, sandgraph_core::ErrorCode::ThreadBusy, "{err}");
    assert!(err.message.contains("taken over by another host"), "{err}");
    let head = b.threads().load("t").unwrap().unwrap().checkpoint;
    assert_eq!(head.id, from_b.id, "only the current holder wrote");
    assert_eq!(
        ids(&b.threads().history("t", None).unwrap()),
        [from_b.id.as_str(), first.id.as_str()]
    );
    // A's drop must not release B's lease.
    drop(a_writer);
    let err = a.threads().begin("t", "g", Durability::Sync).unwrap_err();
    assert!(matches!(err, StoreError::ThreadBusy { .. }), "{err}");
}

/// Fencing by operations outside a run: host A's lease expires while A is
/// paused, and host B forks, updates, deletes or prunes the thread (each
/// refused while the lease was live). When A wakes up, its next checkpoint
/// is refused with `LeaseLost`, and what B did stands.
#[test]
fn on_postgres_an_operation_outside_a_run_fences_a_paused_writer() {
    let ttl = std::time::Duration::from_millis(300);
    let (_pg, url, a) = postgres_at("fenced_by_operation");
    let a = a.with_thread_lease(ttl);
    let b = Store::connect(&url).unwrap().with_thread_lease(ttl);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for op in ["fork", "update", "delete", "prune"] {
        let thread = format!("t-{op}");
        // No runtime is current while A begins: its lease is not renewed.
        let a_writer = a.threads().begin(&thread, "g", Durability::Sync).unwrap();
        let first = next(None, CheckpointSource::Loop, json!({"a": 1}));
        let second = next(Some(&first), CheckpointSource::Loop, json!({"a": 2}));
        rt.block_on(a_writer.put_checkpoint(&first)).unwrap();
        rt.block_on(a_writer.put_checkpoint(&second)).unwrap();
        let err = b.threads().delete(&thread).unwrap_err();
        assert!(matches!(err, StoreError::ThreadBusy { .. }), "{op}: {err}");
        std::thread::sleep(ttl + std::time::Duration::from_millis(200));
        let threads = b.threads();
        let head = match op {
            "fork" => Some(threads.fork(&thread, &first.id).unwrap().id),
            "update" => {
                let update = next(Some(&second), CheckpointSource::Update, json!({"a": 9}));
                threads.put_update(&thread, &update).unwrap();
                Some(update.id)
            }
            "delete" => {
                assert!(threads.delete(&thread).unwrap());
                None
            }
            _ => {
                assert_eq!(threads.prune(&thread, 1).unwrap(), 1);
                Some(second.id.clone())
            }
        };
        // Every channel new: nothing refers to a value B may have removed.
        let late = next(Some(&second), CheckpointSource::Loop, json!({"a": 3}));
        let err = rt.block_on(a_writer.put_checkpoint(&late)).unwrap_err();
        assert_eq!(err.code, ErrorCode::ThreadBusy, "{op}: {err}");
        assert!(
            err.message.contains("taken over by another host"),
            "{op}: {err}"
        );
        let stored = threads.load(&thread).unwrap().map(|s| s.checkpoint.id);
        assert_eq!(stored, head, "{op}: B's result stands");
        drop(a_writer);
        // The thread is free again for a new run (and only one).
        let again = a.threads().begin(&thread, "g", Durability::Sync).unwrap();
        let err = b
            .threads()
            .begin(&thread, "g", Durability::Sync)
            .unwrap_err();
        assert!(matches!(err, StoreError::ThreadBusy { .. }), "{op}: {err}");
        drop(again);
    }
}
