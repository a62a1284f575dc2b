//! `sandgraph supervise`, `--resume` and `agent-graph show` end to end
//! against the scripted OpenAI-compatible server, and crash recovery: the
//! supervise process is killed with SIGKILL at several points of a wave,
//! then resumed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sandgraph_controller::{GraphRecord, IntentClaim, OpenAgentGraphs, ScheduleUpdate};
use sandgraph_store::Store;
use sandgraph_test_llm::demo::{supervisor_demo, supervisor_demo_with};
use sandgraph_test_llm::{Recorded, ScriptedLlm};
use serde_json::Value;

use crate::common::{Env, output_off_runtime, stderr, stdout};

fn supervise_args(server: &ScriptedLlm, tail: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "supervise".into(),
        "--graphs".into(),
        "graphs".into(),
        "--base-url".into(),
        server.base_url(),
        "--model".into(),
        "test-model".into(),
    ];
    args.extend(tail.iter().map(|s| (*s).to_owned()));
    args
}

/// `sandgraph ARGS` in `env`.
fn command(env: &Env, args: &[String]) -> Command {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    env.command(&args)
}

/// `sandgraph ARGS` in `env` to its end, off the async runtime (the
/// scripted model keeps serving).
async fn run(env: &Env, args: Vec<String>) -> Output {
    output_off_runtime(command(env, &args)).await
}

/// A working folder with echo and greet in `graphs/`, its data in
/// `data.redb`.
fn folder() -> Env {
    Env::new(&[
        ("echo_graph.wasm", sandgraph_tests::ECHO),
        ("greet_graph.wasm", sandgraph_tests::GREET),
    ])
    .with_log("warn")
    .with_db("data.redb")
}

#[tokio::test(flavor = "multi_thread")]
async fn supervise_runs_a_graph_to_its_end_and_show_prints_it() {
    let env = folder();
    let server = ScriptedLlm::start((0..10).map(|_| supervisor_demo(Duration::ZERO))).await;
    let out = run(
        &env,
        supervise_args(&server, &["greet three friends", "--graph-id", "g1", "-v"]),
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let printed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(printed["graph_id"], "g1");
    assert_eq!(printed["status"], "finished");
    assert_eq!(printed["result_ids"].as_array().unwrap().len(), 3);
    assert_eq!(printed["turns"], 2);
    let progress = stderr(&out);
    assert!(progress.contains("supervisor turn 1\n  update_agent_graph: Agent graph update committed at revision 1.\n  yield_agent_graph: Yielded agent graph g1"), "{progress}");

    let show = run(&env, vec!["agent-graph".into(), "show".into(), "g1".into()]).await;
    assert!(show.status.success(), "{}", stderr(&show));
    let text = stdout(&show);
    assert!(text.starts_with("agent graph g1 (finished, revision 2, 2 updates)\ngoal: greet three friends\nsupervisor turns: 2\n\nwork:\n  completed graph_work_"), "{text}");
    assert_eq!(text.matches("  completed graph_work_").count(), 3, "{text}");
    assert!(
        text.contains(" preset:greet_graph claim executing — greet Ada\n"),
        "{text}"
    );
    assert!(text.contains("\nrecords:\n  graph_record_"), "{text}");
    assert!(
        text.contains("completed): greet_graph returned {\"name\":\"Ada\""),
        "{text}"
    );
    assert!(text.contains("\nwakes:\n  delivered graph_wake_"), "{text}");
    assert!(text.contains("\nfinished: graph_record_"), "{text}");

    let json = run(
        &env,
        vec![
            "agent-graph".into(),
            "show".into(),
            "g1".into(),
            "--json".into(),
        ],
    )
    .await;
    let v: Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(v["closed"], true);
    assert_eq!(v["work"].as_array().unwrap().len(), 3);
    assert_eq!(v["records"].as_array().unwrap().len(), 3);
    assert_eq!(v["wakes"][0]["wake"]["status"], "delivered");

    let unknown = run(
        &env,
        vec!["agent-graph".into(), "show".into(), "nope".into()],
    )
    .await;
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown).contains("error[invalid_input]: no agent graph nope in this database")
    );

    let resume_unknown = run(&env, supervise_args(&server, &["--resume", "nope"])).await;
    assert_eq!(
        resume_unknown.status.code(),
        Some(2),
        "{}",
        stderr(&resume_unknown)
    );
    let said = stderr(&resume_unknown);
    assert!(
        said.contains("no supervised agent graph nope in "),
        "{said}"
    );
    assert!(
        said.contains(": list the ones it holds with `sandgraph agent-graph list --db "),
        "{said}"
    );
}

/// What the database held when the process died.
#[derive(Debug, Default)]
struct Durable {
    updates: Vec<ScheduleUpdate>,
    claims: Vec<IntentClaim>,
    records: Vec<GraphRecord>,
}

fn durable(db: &Path, graph: &str) -> Durable {
    if !db.exists() {
        return Durable::default();
    }
    let store = Store::open(db).expect("the database opens after a SIGKILL");
    let g = store.agent_graphs();
    Durable {
        updates: g.list_schedule_updates(graph).unwrap(),
        claims: g.list_claims(graph).unwrap(),
        records: g.list_records(graph).unwrap(),
    }
}

fn is_worker(r: &Recorded) -> bool {
    !r.tool_names().iter().any(|t| t == "view_agent_graph")
}

/// The instruction a worker request carries.
fn instruction(r: &Recorded) -> String {
    r.messages()
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_supervise_resumes_without_losing_or_repeating_work() {
    // Workers answer after 300 ms and run one at a time, so a wave lasts
    // about a second; the supervisor answers after 200 ms. The kill points
    // (requests received, then a pause) fall before anything is stored,
    // inside the supervisor's first turn, between the records of the wave,
    // inside the wake turn and just after its finish. Each has its own
    // folder and model server, and all run at once: a kill point mostly
    // waits on the scripted model, and one after another they took 10 s.
    let kill_points: [(usize, u64); 7] = [
        (0, 0),
        (1, 100),
        (2, 100),
        (3, 150),
        (4, 100),
        (5, 100),
        (5, 260),
    ];
    let runs = kill_points
        .into_iter()
        .enumerate()
        .map(|(n, (requests, extra_ms))| kill_and_resume(n, requests, extra_ms));
    let finished = futures::future::join_all(runs).await;
    // The check that finished work never runs again needs some: the kills
    // in the wake turn come after the wave's records.
    assert!(
        finished.iter().any(|&n| n > 0),
        "no kill point had finished work: {finished:?}"
    );
}

/// The `supervise` command starting `graph` afresh.
fn start_args(server: &ScriptedLlm, graph: &str) -> Vec<String> {
    supervise_args(
        server,
        &[
            "greet three friends",
            "--graph-id",
            graph,
            "--max-new-activations",
            "1",
        ],
    )
}

/// Starts `supervise`, kills it with SIGKILL once the model has received
/// `requests` requests and `extra_ms` more have passed, resumes it, and
/// checks that nothing committed was lost and no finished work ran again
/// (`n` names the kill point in failures). Returns how many pieces of work
/// had finished at the kill.
async fn kill_and_resume(n: usize, requests: usize, extra_ms: u64) -> usize {
    let env = folder();
    let server = ScriptedLlm::start(
        (0..40)
            .map(|_| supervisor_demo_with(Duration::from_millis(300), Duration::from_millis(200))),
    )
    .await;
    let graph = format!("crash{n}");
    let mut child = command(&env, &start_args(&server, &graph))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.requests().len() < requests {
        assert!(
            Instant::now() < deadline,
            "kill point {n}: no request {requests}"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "kill point {n}: exited early"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(extra_ms)).await;
    // SIGKILL: no destructor, no flush.
    child.kill().unwrap();
    child.wait().unwrap();
    let before = durable(&env.db(), &graph);
    eprintln!(
        "kill point {n}: {} updates, {} claims, {} records at the kill",
        before.updates.len(),
        before.claims.len(),
        before.records.len()
    );
    let seen = server.requests().len();
    let finished = finished_instructions(&env.db(), &graph);

    let out = run(&env, supervise_args(&server, &["--resume", &graph])).await;
    // A kill before the supervisor run was created leaves nothing to
    // resume; start it again then.
    let out = if out.status.code() == Some(2) && before.updates.is_empty() {
        run(&env, start_args(&server, &graph)).await
    } else {
        out
    };
    assert!(out.status.success(), "kill point {n}: {}", stderr(&out));
    let printed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(printed["status"], "finished", "kill point {n}");

    let after = durable(&env.db(), &graph);
    assert_kept(n, &before, &after);
    assert_once_each(n, &after);
    // No finished work ran again.
    for r in server.requests().iter().skip(seen).filter(|r| is_worker(r)) {
        let i = instruction(r);
        assert!(
            !finished.contains(&i),
            "kill point {n}: finished work {i:?} ran again"
        );
    }
    finished.len()
}

/// The instructions of the work of `graph` that has a record in `db`: they
/// must not reach a worker again.
fn finished_instructions(db: &Path, graph: &str) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    let Ok(store) = Store::open(db) else {
        return set;
    };
    let g = store.agent_graphs();
    let updates = g.list_schedule_updates(graph).unwrap();
    for r in g.list_records(graph).unwrap() {
        for u in &updates {
            for w in &u.request.add_work {
                if Some(&w.work_id) == r.work_id.as_ref() {
                    set.insert(w.instruction.clone());
                }
            }
        }
    }
    set
}

/// Nothing committed at the kill (`before`) was lost: every row is still
/// there, unchanged.
fn assert_kept(n: usize, before: &Durable, after: &Durable) {
    for u in &before.updates {
        assert!(
            after.updates.contains(u),
            "kill point {n}: lost update {}",
            u.request.update_id
        );
    }
    for c in &before.claims {
        let kept = after
            .claims
            .iter()
            .find(|a| a.request.intent_id == c.request.intent_id)
            .unwrap_or_else(|| panic!("kill point {n}: lost claim {}", c.request.intent_id));
        assert_eq!(kept.request, c.request, "kill point {n}");
        assert_eq!(kept.claimed_at, c.claimed_at, "kill point {n}");
    }
    for r in &before.records {
        assert!(
            after.records.contains(r),
            "kill point {n}: lost record {}",
            r.record_id
        );
    }
}

/// Exactly one record and one claim per work item, three in all, one
/// work-adding update (the idempotency key held across processes), and a
/// finish naming every record.
fn assert_once_each(n: usize, after: &Durable) {
    assert_eq!(
        after.records.len(),
        3,
        "kill point {n}: {:?}",
        after.records
    );
    assert_eq!(after.claims.len(), 3, "kill point {n}");
    let adds: usize = after.updates.iter().map(|u| u.request.add_work.len()).sum();
    assert_eq!(adds, 3, "kill point {n}");
    let per_work: BTreeMap<_, usize> = after.records.iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r.work_id.clone()).or_default() += 1;
        m
    });
    assert!(
        per_work.values().all(|c| *c == 1),
        "kill point {n}: {per_work:?}"
    );
    let finish = after
        .updates
        .last()
        .unwrap()
        .request
        .finish
        .clone()
        .expect("finished");
    let mut result_ids = finish.result_ids.clone();
    result_ids.sort();
    let mut record_ids: Vec<String> = after.records.iter().map(|r| r.record_id.clone()).collect();
    record_ids.sort();
    assert_eq!(result_ids, record_ids, "kill point {n}");
}
