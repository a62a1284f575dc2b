//! Durable threads through an in-memory checkpointer: checkpoints per
//! superstep, task records, interrupts and resume, continuing after a failure.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::support::{Fake, FakeBackend, graph, update};
use futures::future::BoxFuture;
use sandgraph_core::{
    Checkpoint, CheckpointSource, Checkpointer, CompiledGraph, ErrorCode, GraphSpec, NodeOutput,
    Reducer, RunConfig, RunError, RunOutcome, Start, TaskRecord, TaskResult, ThreadState,
    run_thread,
};
use serde_json::{Value, json};

/// Keeps everything in memory, like a store would on disk.
#[derive(Default)]
struct MemSaver {
    checkpoints: Mutex<Vec<Checkpoint>>,
    records: Mutex<Vec<(String, TaskRecord)>>,
    flushes: AtomicUsize,
}

impl Checkpointer for MemSaver {
    fn put_task<'a>(
        &'a self,
        id: &'a str,
        r: &'a TaskRecord,
    ) -> BoxFuture<'a, Result<(), RunError>> {
        // Keyed by (checkpoint, task path), as a store keys them: a task
        // that runs again replaces its record.
        let mut records = self.records.lock().unwrap();
        records.retain(|(i, old)| !(i == id && old.path == r.path));
        records.push((id.to_string(), r.clone()));
        Box::pin(async { Ok(()) })
    }

    fn put_checkpoint<'a>(&'a self, c: &'a Checkpoint) -> BoxFuture<'a, Result<(), RunError>> {
        self.checkpoints.lock().unwrap().push(c.clone());
        Box::pin(async { Ok(()) })
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), RunError>> {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(()) })
    }
}

impl MemSaver {
    fn thread(&self) -> Option<ThreadState> {
        let checkpoint = self.checkpoints.lock().unwrap().last()?.clone();
        let pending = self
            .records
            .lock()
            .unwrap()
            .iter()
            .filter(|(id, _)| *id == checkpoint.id)
            .map(|(_, r)| r.clone())
            .collect();
        Some(ThreadState {
            checkpoint,
            pending,
        })
    }
}

async fn go(
    spec: &GraphSpec,
    fake: &Arc<FakeBackend>,
    saver: &MemSaver,
    start: Start,
) -> Result<RunOutcome, RunError> {
    let graph = Arc::new(CompiledGraph::new(spec.clone()).unwrap());
    let existing = saver.thread();
    run_thread(
        &graph,
        fake,
        existing,
        start,
        &RunConfig::default(),
        &mut |_| {},
        Some(saver),
    )
    .await
}

fn runs_of(fake: &FakeBackend, node: &str) -> usize {
    fake.node_runs().iter().filter(|(n, _)| n == node).count()
}

fn state(outcome: Result<RunOutcome, RunError>) -> Value {
    match outcome {
        Ok(RunOutcome::Completed(s)) => Value::Object(s),
        other => panic!("expected completion, got {other:?}"),
    }
}

fn chain() -> GraphSpec {
    graph(&["a", "b", "c"])
        .channel("log", Reducer::Append)
        .channel("untouched", Reducer::LastValue)
        .entry("a")
        .edge("a", "b")
        .edge("b", "c")
        .finish("c")
        .build()
}

/// The fake for [`chain`]: each node appends its name to `log`.
fn chain_fake() -> Arc<FakeBackend> {
    Fake::new()
        .node("a", log("a"))
        .node("b", log("b"))
        .node("c", log("c"))
        .build()
}

fn log(
    item: &'static str,
) -> impl Fn(&Value, &sandgraph_core::NodeContext) -> Result<NodeOutput, RunError> {
    move |_, _| update(json!({ "log": [item] }))
}

#[tokio::test]
async fn a_checkpoint_follows_the_input_and_every_superstep() {
    let fake = chain_fake();
    let saver = MemSaver::default();
    let out = go(
        &chain(),
        &fake,
        &saver,
        Start::Input(json!({"untouched": 1})),
    )
    .await;
    assert_eq!(state(out)["log"], json!(["a", "b", "c"]));
    let cps = saver.checkpoints.lock().unwrap().clone();
    assert_eq!(cps.len(), 4);
    assert_eq!(cps[0].source, CheckpointSource::Input);
    assert!(cps[1..].iter().all(|c| c.source == CheckpointSource::Loop));
    assert_eq!(cps.iter().map(|c| c.step).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert_eq!(cps[0].parent, None);
    for w in cps.windows(2) {
        assert_eq!(w[1].parent.as_deref(), Some(w[0].id.as_str()));
        assert!(w[1].id > w[0].id, "ids sort chronologically");
    }
    // A channel's version changes only when it is written.
    assert_eq!(
        cps[0].channel_versions["untouched"],
        cps[3].channel_versions["untouched"]
    );
    assert!(cps[3].channel_versions["log"] > cps[1].channel_versions["log"]);
    assert_eq!(cps[2].versions_seen["b"], cps[1].channel_versions);
    assert_eq!(cps[3].next_nodes(), Vec::<String>::new());
    assert_eq!(cps[1].next_nodes(), vec!["b".to_string()]);
    // One record per finished task, against the checkpoint it follows.
    let records = saver.records.lock().unwrap().clone();
    assert_eq!(records.len(), 3);
    assert!(matches!(records[0].1.result, TaskResult::Done { .. }));
    assert_eq!(records[1].0, cps[1].id);
    assert_eq!(saver.flushes.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn new_input_continues_from_the_thread_state() {
    let fake = chain_fake();
    let saver = MemSaver::default();
    go(&chain(), &fake, &saver, Start::Input(json!({})))
        .await
        .unwrap();
    let out = go(
        &chain(),
        &fake,
        &saver,
        Start::Input(json!({"log": ["again"]})),
    )
    .await;
    assert_eq!(
        state(out)["log"],
        json!(["a", "b", "c", "again", "a", "b", "c"])
    );
    let cps = saver.checkpoints.lock().unwrap().clone();
    assert_eq!(cps[4].source, CheckpointSource::Input);
    assert_eq!(cps[4].step, 3, "step numbers continue on the thread");
}

#[tokio::test]
async fn finished_siblings_are_not_run_again_after_a_failure() {
    let attempts = Arc::new(AtomicUsize::new(0));
    let seen = attempts.clone();
    let spec = graph(&["fast", "flaky"])
        .channel("log", Reducer::Append)
        .entry("fast")
        .entry("flaky")
        .finish("fast")
        .finish("flaky")
        .build();
    let fake = Fake::new()
        .node("fast", log("fast"))
        .slow_node(
            "flaky",
            std::time::Duration::from_millis(50),
            move |_, _| {
                if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                    Err(RunError::new(ErrorCode::NodeError, "first attempt fails"))
                } else {
                    update(json!({"log": ["flaky"]}))
                }
            },
        )
        .build();
    let saver = MemSaver::default();
    let err = go(&spec, &fake, &saver, Start::Input(json!({})))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::NodeError);
    assert_eq!(
        saver.thread().unwrap().pending.len(),
        1,
        "fast's record was saved"
    );
    let out = go(&spec, &fake, &saver, Start::Continue).await;
    assert_eq!(state(out)["log"], json!(["fast", "flaky"]));
    assert_eq!(runs_of(&fake, "fast"), 1, "fast ran once in all");
    assert_eq!(runs_of(&fake, "flaky"), 2);
}

/// A node that interrupts once per missing answer, `asks` times, then
/// writes its answers.
fn asker(
    asks: usize,
    key: &'static str,
) -> impl Fn(&Value, &sandgraph_core::NodeContext) -> Result<NodeOutput, RunError> {
    move |_, ctx| {
        if ctx.resume.len() < asks {
            return Ok(NodeOutput::Interrupt(
                json!({"ask": key, "n": ctx.resume.len()}),
            ));
        }
        update(json!({ key: ctx.resume.clone() }))
    }
}

#[tokio::test]
async fn one_interrupt_then_resume() {
    let spec = graph(&["ask", "side"])
        .channel("answer", Reducer::LastValue)
        .channel("log", Reducer::Append)
        .entry("ask")
        .entry("side")
        .finish("ask")
        .finish("side")
        .build();
    let fake = Fake::new()
        .node("ask", asker(1, "answer"))
        .node("side", log("side"))
        .build();
    let saver = MemSaver::default();
    let RunOutcome::Interrupted {
        interrupts,
        state: st,
    } = go(&spec, &fake, &saver, Start::Input(json!({})))
        .await
        .unwrap()
    else {
        panic!("expected an interrupt")
    };
    assert_eq!(interrupts.len(), 1);
    assert_eq!(interrupts[0].value, json!({"ask": "answer", "n": 0}));
    assert!(
        st.get("log").is_none(),
        "the interrupted step's writes are not applied"
    );
    let thread = saver.thread().unwrap();
    assert_eq!(thread.pending_interrupts()[0].id, interrupts[0].id);
    let out = go(&spec, &fake, &saver, Start::Resume(json!("yes"))).await;
    let s = state(out);
    assert_eq!(s["answer"], json!(["yes"]));
    assert_eq!(s["log"], json!(["side"]));
    assert_eq!(
        runs_of(&fake, "side"),
        1,
        "the finished sibling did not run again"
    );
    assert_eq!(
        runs_of(&fake, "ask"),
        2,
        "the interrupted node re-ran from its first line"
    );
}

#[tokio::test]
async fn two_interrupts_in_one_node_get_the_kth_value() {
    let spec = graph(&["ask"])
        .channel("answers", Reducer::LastValue)
        .entry("ask")
        .finish("ask")
        .build();
    let fake = Fake::new().node("ask", asker(2, "answers")).build();
    let saver = MemSaver::default();
    let first = go(&spec, &fake, &saver, Start::Input(json!({})))
        .await
        .unwrap();
    let RunOutcome::Interrupted { interrupts: i1, .. } = first else {
        panic!()
    };
    let second = go(&spec, &fake, &saver, Start::Resume(json!(1)))
        .await
        .unwrap();
    let RunOutcome::Interrupted { interrupts: i2, .. } = second else {
        panic!("second interrupt expected")
    };
    assert_eq!(i2[0].value, json!({"ask": "answers", "n": 1}));
    assert_ne!(i1[0].id, i2[0].id, "the k-th interrupt has its own id");
    let out = go(&spec, &fake, &saver, Start::Resume(json!(2))).await;
    assert_eq!(state(out)["answers"], json!([1, 2]));
}

#[tokio::test]
async fn two_pending_interrupts_need_a_map_of_answers() {
    let spec = graph(&["p", "q"])
        .channel("p_ans", Reducer::LastValue)
        .channel("q_ans", Reducer::LastValue)
        .entry("p")
        .entry("q")
        .finish("p")
        .finish("q")
        .build();
    let fake = Fake::new()
        .node("p", asker(1, "p_ans"))
        .node("q", asker(1, "q_ans"))
        .build();
    let saver = MemSaver::default();
    let RunOutcome::Interrupted { interrupts, .. } =
        go(&spec, &fake, &saver, Start::Input(json!({})))
            .await
            .unwrap()
    else {
        panic!()
    };
    assert_eq!(interrupts.len(), 2);
    let err = go(&spec, &fake, &saver, Start::Resume(json!("bare")))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidInput);
    assert!(
        err.message.contains("2 pending interrupts"),
        "{}",
        err.message
    );
    assert!(err.message.contains(&interrupts[0].id), "{}", err.message);
    let mut answers = serde_json::Map::new();
    answers.insert(interrupts[0].id.clone(), json!("P"));
    let err = go(
        &spec,
        &fake,
        &saver,
        Start::Resume(Value::Object(answers.clone())),
    )
    .await
    .unwrap_err();
    assert!(
        err.message.contains("no value for pending interrupt"),
        "{}",
        err.message
    );
    answers.insert(interrupts[1].id.clone(), json!("Q"));
    let s = state(go(&spec, &fake, &saver, Start::Resume(Value::Object(answers))).await);
    assert_eq!(s["p_ans"], json!(["P"]));
    assert_eq!(s["q_ans"], json!(["Q"]));
}

#[tokio::test]
async fn resuming_without_a_thread_or_an_interrupt_is_a_clear_error() {
    let fake = chain_fake();
    let saver = MemSaver::default();
    let err = go(&chain(), &fake, &saver, Start::Resume(json!("x")))
        .await
        .unwrap_err();
    assert!(err.message.contains("no checkpoint"), "{}", err.message);
    go(&chain(), &fake, &saver, Start::Input(json!({})))
        .await
        .unwrap();
    let err = go(&chain(), &fake, &saver, Start::Resume(json!("x")))
        .await
        .unwrap_err();
    assert!(
        err.message.contains("no pending interrupt"),
        "{}",
        err.message
    );
    // Continuing a finished thread is a no-op that returns its state.
    let s = state(go(&chain(), &fake, &saver, Start::Continue).await);
    assert_eq!(s["log"], json!(["a", "b", "c"]));
}

#[tokio::test]
async fn update_state_writes_as_a_node_and_triggers_its_edges() {
    let fake = chain_fake();
    let saver = MemSaver::default();
    go(&chain(), &fake, &saver, Start::Input(json!({})))
        .await
        .unwrap();
    let graph = Arc::new(CompiledGraph::new(chain()).unwrap());
    let thread = saver.thread().unwrap();
    let head = thread.checkpoint.id.clone();
    // Without as_node: the last node that ran ("c").
    let cp = sandgraph_core::update_state(
        &graph,
        &fake,
        thread.clone(),
        json!({"log": ["edited"]}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(cp.source, CheckpointSource::Update);
    assert_eq!(cp.parent.as_deref(), Some(head.as_str()));
    assert_eq!(cp.values["log"], json!(["a", "b", "c", "edited"]));
    assert!(cp.next_nodes().is_empty(), "c has no outgoing edge");
    // As "a": a's edge triggers b next.
    let cp = sandgraph_core::update_state(
        &graph,
        &fake,
        thread.clone(),
        json!({"log": ["x"]}),
        Some("a"),
    )
    .await
    .unwrap();
    assert_eq!(cp.next_nodes(), vec!["b".to_string()]);
    let err = sandgraph_core::update_state(&graph, &fake, thread.clone(), json!({}), Some("nope"))
        .await
        .unwrap_err();
    assert!(err.message.contains("\"nope\""), "{}", err.message);
    // What enters a state is lossless JSON: a final state is not checked
    // again.
    let unsafe_int = json!({"log": [{"n": 9_007_199_254_740_992_i64}]});
    let err = sandgraph_core::update_state(&graph, &fake, thread, unsafe_int, Some("a"))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidInput);
    assert_eq!(
        err.message,
        "the state update is not lossless json at $.log[0].n: \
         integer 9007199254740992 is outside the safe range ±(2^53-1)"
    );
}

#[tokio::test]
async fn update_state_of_a_strict_graph_refuses_unknown_keys() {
    let strict = || {
        let mut spec = chain();
        spec.strict = true;
        spec
    };
    let fake = chain_fake();
    let saver = MemSaver::default();
    go(&strict(), &fake, &saver, Start::Input(json!({})))
        .await
        .unwrap();
    let graph = Arc::new(CompiledGraph::new(strict()).unwrap());
    let thread = saver.thread().unwrap();
    let err = sandgraph_core::update_state(&graph, &fake, thread, json!({"logs": [1]}), Some("a"))
        .await
        .unwrap_err();
    assert_eq!(err.code, sandgraph_core::ErrorCode::InvalidInput);
    assert!(
        err.message.starts_with(
            "the state update (as node \"a\") of strict graph \"test-graph\" has key \"logs\" (did you mean \"log\"?)"
        ),
        "{}",
        err.message
    );
}
