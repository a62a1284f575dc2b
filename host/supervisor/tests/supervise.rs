//! A whole supervised graph against the scripted OpenAI-compatible server:
//! three work items → yield → the coordinator runs them on example graphs →
//! wake → finish with their record ids. And the tables the supervised
//! runs keep (`runs`), and the PostgreSQL migration that moved the
//! journals and the runs into declared tables (`migration`).

#[path = "supervise/migration.rs"]
mod migration;
#[path = "supervise/runs.rs"]
mod runs;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandgraph_controller::ids::graph_edge_id;
use sandgraph_controller::{
    AdmissionStatus, AgentGraphTools, AttemptStatus, OpenAgentGraphs, OperatorEdge, Projection,
    RecordOutcome, WakeStatus, WorkStatus,
};
use sandgraph_llm::{ClientConfig, OpenAiClient, Provider};
use sandgraph_registry::{Registry, RegistryOptions};
use sandgraph_router::AgentConfig;
use sandgraph_store::Store;
use sandgraph_supervisor::{Event, SuperviseError, Supervisor, SupervisorOptions};
use sandgraph_test_llm::demo::supervisor_demo;
use sandgraph_test_llm::{Reply, ScriptedLlm};

async fn registry() -> (Registry, tempfile::TempDir) {
    registry_of(&[
        ("echo_graph.wasm", sandgraph_tests::ECHO),
        ("greet_graph.wasm", sandgraph_tests::GREET),
    ])
    .await
}

/// A registry over a folder of `graphs` ((file name, component) pairs).
async fn registry_of(graphs: &[(&str, &str)]) -> (Registry, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    for (name, path) in graphs {
        std::fs::copy(path, dir.path().join(name)).unwrap();
    }
    let (registry, report) = Registry::open(
        sandgraph_tests::runtime().clone(),
        RegistryOptions {
            dirs: vec![dir.path().to_path_buf()],
            cache: Some(sandgraph_tests::compile_cache()),
            ..RegistryOptions::default()
        },
    )
    .await
    .unwrap();
    assert!(report.warnings.is_empty());
    (registry, dir)
}

fn provider(server: &ScriptedLlm) -> Arc<dyn Provider> {
    Arc::new(
        OpenAiClient::new(ClientConfig {
            base_url: server.base_url(),
            model: "test-model".into(),
            backoff: Duration::from_millis(10),
            ..ClientConfig::default()
        })
        .unwrap(),
    )
}

fn options() -> SupervisorOptions {
    SupervisorOptions {
        wake_backoff: Duration::from_millis(10),
        ..SupervisorOptions::new("test-model")
    }
}

#[test]
fn the_nth_retry_of_a_wake_waits_the_backoff_times_n() {
    let options = SupervisorOptions {
        wake_backoff: Duration::from_millis(250),
        ..SupervisorOptions::new("test-model")
    };
    let waits: Vec<Duration> = (1..=3).map(|n| options.wake_retry_delay(n)).collect();
    assert_eq!(
        waits,
        [250, 500, 750].map(Duration::from_millis),
        "wake_backoff × n"
    );
    // The seed's default: 30 s × n.
    let default = SupervisorOptions::new("test-model");
    assert_eq!(default.wake_retry_delay(2), Duration::from_secs(60));
    // No overflow: the wait saturates.
    let long = SupervisorOptions {
        wake_backoff: Duration::MAX,
        ..SupervisorOptions::new("test-model")
    };
    assert_eq!(long.wake_retry_delay(u32::MAX), Duration::MAX);
}

#[tokio::test(flavor = "multi_thread")]
async fn three_work_items_run_and_the_supervisor_finishes_with_their_records() {
    let server = ScriptedLlm::start((0..8).map(|_| supervisor_demo(Duration::ZERO))).await;
    let (registry, _graphs) = registry().await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("data.redb")).unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let e = events.clone();
    let supervisor = Supervisor::new(
        store.clone(),
        registry,
        provider(&server),
        AgentConfig::default(),
        options(),
        true,
    )
    .on_event(move |ev| e.lock().unwrap().push(ev.clone()));
    let out = supervisor
        .start("say hello to alpha, Ada and beta", Some("g1".into()))
        .await
        .unwrap();
    assert_eq!(out.graph_id, "g1");
    assert_eq!(out.result_ids.len(), 3);
    assert_eq!(out.reason, "all three results are in");
    assert_eq!(out.turns, 2);
    let summaries: Vec<String> = out
        .results
        .iter()
        .map(|r| r["summary"].as_str().unwrap().to_owned())
        .collect();
    let mut sorted = summaries.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        vec![
            r#"echo_graph returned {"topic":"alpha","log":["seen:alpha"]}"#,
            r#"echo_graph returned {"topic":"beta","log":["seen:beta"]}"#,
            r#"greet_graph returned {"name":"Ada","style":"casual","tags":[],"greeting":"Hey Ada!"}"#,
        ]
    );
    // 2 supervisor turns (1 model call each) + 3 workers.
    assert_eq!(server.requests().len(), 5);

    // The store tells the whole story.
    let tools = AgentGraphTools::new(store.agent_graphs(), "supervisor_g1");
    let projection = tools.snapshot("g1").unwrap();
    assert!(projection.closed());
    assert_eq!(projection.revision(), 2);
    assert!(
        projection
            .work()
            .iter()
            .all(|w| w.status() == WorkStatus::Completed)
    );
    assert_eq!(projection.claims().len(), 3);
    assert!(
        projection
            .records()
            .iter()
            .all(|r| r.outcome == Some(RecordOutcome::Completed))
    );
    let wakes = store.agent_graphs().list_supervisor_wakes("g1").unwrap();
    assert_eq!(wakes.len(), 1);
    assert_eq!(wakes[0].status, WakeStatus::Delivered);
    assert_eq!(wakes[0].attempt_count, 1);
    // The routing attempts of the work are journaled.
    let journal = sandgraph_router::Journal::open(&store);
    assert_eq!(journal.entries(None, None).unwrap().len(), 3);

    let events = events.lock().unwrap().clone();
    assert!(matches!(events[0], Event::Turn { turn: 1 }));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Wave { records } if records.len() == 3))
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::WakeDelivered { .. }))
    );

    // Resuming a finished graph runs nothing and returns the same outcome.
    let before = server.requests().len();
    let again = supervisor.resume("g1").await.unwrap();
    assert_eq!(again.result_ids, out.result_ids);
    assert_eq!(server.requests().len(), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_first_message_names_the_goal_and_the_workers() {
    let server = ScriptedLlm::start((0..8).map(|_| supervisor_demo(Duration::ZERO))).await;
    let (registry, _graphs) = registry().await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("data.redb")).unwrap();
    let supervisor = Supervisor::new(
        store,
        registry,
        provider(&server),
        AgentConfig::default(),
        options(),
        false,
    );
    supervisor
        .start("greet everyone", Some("g2".into()))
        .await
        .unwrap();
    let first = &server.requests()[0];
    let user = first.last_content("user").unwrap();
    assert!(
        user.starts_with("Goal: greet everyone\n\nYou supervise agent graph g2."),
        "{user}"
    );
    assert!(
        user.contains("- subagentId \"echo_graph\" (one graph): Echo the given topic."),
        "{user}"
    );
    let system = first.last_content("system").unwrap();
    assert!(
        system.contains("yield"),
        "the prompt section is in the system prompt: {system}"
    );
    assert_eq!(
        first.tool_names(),
        vec![
            "view_agent_graph",
            "update_agent_graph",
            "yield_agent_graph"
        ]
    );
    // The wake lists the three new records.
    let wake = server.requests()[4]
        .last_content("user")
        .unwrap()
        .to_owned();
    assert!(
        wake.starts_with("Agent graph g2: the wave settled. New records:\n- graph_record_"),
        "{wake}"
    );
    assert_eq!(wake.matches("graph_record_").count(), 3);
    assert!(wake.contains("0 work items are still pending"), "{wake}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_supervisor_that_stops_without_finishing_is_reported() {
    let server = ScriptedLlm::start((0..8).map(|_| Reply::text("I am done."))).await;
    let (registry, _graphs) = registry().await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("data.redb")).unwrap();
    let supervisor = Supervisor::new(
        store,
        registry,
        provider(&server),
        AgentConfig::default(),
        options(),
        false,
    );
    let err = supervisor
        .start("anything", Some("g3".into()))
        .await
        .unwrap_err();
    assert!(matches!(err, SuperviseError::Stalled(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "agent graph g3: the supervisor stopped without finishing and nothing is pending"
    );
    // A second start of the same id is refused; resume is the way.
    let err = supervisor
        .start("anything", Some("g3".into()))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "agent graph g3 already exists; continue it with --resume g3"
    );
    let err = supervisor.resume("nope").await.unwrap_err();
    assert_eq!(err.to_string(), "no supervised agent graph nope");
    // A graph id the tools would refuse is refused before anything runs.
    let before = server.requests().len();
    let err = supervisor
        .start("anything", Some(" g9".into()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "invalid_input");
    assert_eq!(
        err.to_string(),
        "invalid agent graph id \" g9\": 1 to 256 characters, no surrounding whitespace, no control characters"
    );
    assert_eq!(server.requests().len(), before);
}

/// The scripted supervisor of the operator test: wave 1 echoes `alpha` on a
/// new preset operator; wave 2 sends `echo gamma` to that same operator;
/// then it finishes with the record of wave 2.
fn operator_script() -> Reply {
    Reply::respond(|request| {
        let user = request.last_content("user").unwrap_or("").to_owned();
        if !request.tool_names().iter().any(|t| t == "view_agent_graph") {
            let word = request
                .messages()
                .iter()
                .find(|m| m["role"] == "user")
                .and_then(|m| m["content"].as_str())
                .and_then(|c| c.split_whitespace().nth(1))
                .unwrap_or("none")
                .to_owned();
            return Reply::tool_call(
                "echo_graph",
                &serde_json::json!({"input": {"topic": word}}).to_string(),
            );
        }
        let graph = "g4";
        if user.starts_with("Goal:") {
            let update = serde_json::json!({"graphId": graph, "idempotencyKey": "w1",
                "addWork": [{"subagentId": "echo_graph", "instruction": "echo alpha"}]});
            return Reply::tool_calls(&[
                ("update_agent_graph", &update.to_string()),
                (
                    "yield_agent_graph",
                    &serde_json::json!({"graphId": graph}).to_string(),
                ),
            ]);
        }
        let word_after = |key: &str| {
            user.split(key)
                .nth(1)
                .map(|rest| {
                    rest.split([',', ' ', ')'])
                        .find(|w| !w.is_empty())
                        .unwrap_or("")
                        .to_owned()
                })
                .unwrap_or_default()
        };
        if !user.contains("seen:gamma") {
            let operator = word_after("operator ");
            let alpha = word_after("- ");
            let update = serde_json::json!({"graphId": graph, "idempotencyKey": "w2",
                "addWork": [{"targetKind": "existing_operator", "operatorId": operator,
                    "instruction": "echo gamma", "inputIds": [alpha]}]});
            return Reply::tool_calls(&[
                ("update_agent_graph", &update.to_string()),
                (
                    "yield_agent_graph",
                    &serde_json::json!({"graphId": graph}).to_string(),
                ),
            ]);
        }
        let record = word_after("- ");
        let finish = serde_json::json!({"graphId": graph, "idempotencyKey": "finish",
            "finish": {"resultIds": [record], "reason": "gamma is in"}});
        Reply::tool_call("update_agent_graph", &finish.to_string())
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn an_existing_operator_continues_on_its_thread_and_keeps_the_graph_state() {
    let server = ScriptedLlm::start((0..12).map(|_| operator_script())).await;
    let (registry, _graphs) = registry().await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("data.redb")).unwrap();
    let supervisor = Supervisor::new(
        store.clone(),
        registry,
        provider(&server),
        AgentConfig::default(),
        options(),
        false,
    );
    let out = supervisor
        .start("echo twice", Some("g4".into()))
        .await
        .unwrap();
    assert_eq!(out.result_ids.len(), 1);
    // The second run on the operator's thread started from the first's
    // state: the append-reducer log holds both topics.
    assert_eq!(
        out.results[0]["summary"],
        r#"echo_graph returned {"topic":"gamma","log":["seen:alpha","seen:gamma"]}"#
    );
    let projection = Projection::load(&store.agent_graphs(), "g4").unwrap();
    let provisions = store.agent_graphs().list_provisions("g4").unwrap();
    assert_eq!(
        provisions.len(),
        1,
        "the operator work reused the provision"
    );
    let work = projection.work();
    assert_eq!(work.len(), 2);
    assert_eq!(work[1].work().target.kind.as_str(), "operator");
    assert_eq!(work[1].work().target.id, provisions[0].operator_id);
    // The input record's summary reached the worker with the instruction.
    let alpha = projection.records()[0].record_id.clone();
    let gamma_request = server
        .requests()
        .into_iter()
        .find(|r| {
            r.last_content("user")
                .is_some_and(|u| u.starts_with("echo gamma"))
        })
        .unwrap();
    assert_eq!(
        gamma_request.last_content("user").unwrap(),
        format!(
            "echo gamma\n\nInput {alpha}: echo_graph returned {{\"topic\":\"alpha\",\"log\":[\"seen:alpha\"]}}\n"
        )
    );
    let thread = format!("{}/echo_graph", provisions[0].target_session_id);
    let threads = store.threads().list().unwrap();
    assert!(
        threads
            .iter()
            .any(|t| t.id == thread && t.graph == "echo_graph"),
        "{threads:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_work_runs_the_profile_and_unknown_agents_fail_as_records() {
    let script = || {
        Reply::respond(|request| {
            let user = request.last_content("user").unwrap_or("").to_owned();
            if !request.tool_names().iter().any(|t| t == "view_agent_graph") {
                // The profile allows greet_graph only.
                assert_eq!(request.tool_names(), vec!["greet_graph"]);
                assert_eq!(request.body["model"], "writer-model");
                return Reply::tool_call("greet_graph", r#"{"name":"Ada","style":"formal"}"#);
            }
            if user.starts_with("Goal:") {
                assert!(
                    user.contains("- agentId \"writer\" (a routing agent): writes greetings"),
                    "{user}"
                );
                let update = serde_json::json!({"graphId": "g5", "idempotencyKey": "w1", "addWork": [
                    {"agentId": "writer", "instruction": "greet Ada formally"},
                    {"agentId": "ghost", "instruction": "haunt"},
                ]});
                return Reply::tool_calls(&[
                    ("update_agent_graph", &update.to_string()),
                    ("yield_agent_graph", r#"{"graphId":"g5"}"#),
                ]);
            }
            finish_with_records("g5", &user, "done")
        })
    };
    let server = ScriptedLlm::start((0..10).map(|_| script())).await;
    let (registry, _graphs) = registry().await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("data.redb")).unwrap();
    let config = sandgraph_registry::OperatorConfig::parse(
        "[agents.writer]\ndescription = \"writes greetings\"\nmodel = \"writer-model\"\nallow = [\"greet_graph\"]\n",
        std::path::Path::new("sandgraph.toml"),
    )
    .unwrap();
    let agents = AgentConfig::from_operator(&config).unwrap();
    let supervisor = Supervisor::new(
        store.clone(),
        registry,
        provider(&server),
        agents,
        options(),
        false,
    );
    let out = supervisor.start("greet", Some("g5".into())).await.unwrap();
    assert_eq!(out.result_ids.len(), 2);
    let projection = Projection::load(&store.agent_graphs(), "g5").unwrap();
    let statuses: Vec<(&str, WorkStatus)> = projection
        .work()
        .iter()
        .map(|w| (w.work().target.id.as_str(), w.status()))
        .collect();
    assert_eq!(
        statuses,
        vec![
            ("writer", WorkStatus::Completed),
            ("ghost", WorkStatus::Failed)
        ]
    );
    let ghost = projection
        .records()
        .iter()
        .find(|r| r.outcome == Some(RecordOutcome::Failed))
        .unwrap();
    assert_eq!(
        ghost.summary,
        "failed: unknown agent ghost (agents: writer)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_wake_delivery_is_retried_and_then_exhausted() {
    let demo = || supervisor_demo(Duration::ZERO);
    let fail = || Reply::status(500, r#"{"error":{"message":"overloaded"}}"#);
    // Turn 1 and three workers succeed; the wake turn's first attempt gets
    // four 500s (the client's own retries), the second attempt succeeds.
    let server = ScriptedLlm::start(vec![
        demo(),
        demo(),
        demo(),
        demo(),
        fail(),
        fail(),
        fail(),
        fail(),
        demo(),
    ])
    .await;
    let (reg1, _graphs1) = registry().await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("data.redb")).unwrap();
    let supervisor = Supervisor::new(
        store.clone(),
        reg1,
        provider(&server),
        AgentConfig::default(),
        options(),
        false,
    );
    let out = supervisor.start("retry", Some("g6".into())).await.unwrap();
    assert_eq!(out.result_ids.len(), 3);
    let wakes = store.agent_graphs().list_supervisor_wakes("g6").unwrap();
    assert_eq!(wakes.len(), 1);
    assert_eq!(wakes[0].status, WakeStatus::Delivered);
    assert_eq!(wakes[0].attempt_count, 2);
    let attempts = store
        .agent_graphs()
        .list_supervisor_wake_attempts("g6", &wakes[0].wake_id)
        .unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].status, AttemptStatus::RetryableFailed);
    assert!(
        attempts[0]
            .failure_reason
            .as_deref()
            .unwrap()
            .contains("overloaded")
    );
    assert_eq!(attempts[1].status, AttemptStatus::Delivered);

    // Every attempt failing exhausts the wake and ends with the model error.
    let mut replies = vec![demo(), demo(), demo(), demo()];
    replies.extend((0..12).map(|_| fail()));
    let server = ScriptedLlm::start(replies).await;
    let (reg2, _graphs2) = registry().await;
    let supervisor = Supervisor::new(
        store.clone(),
        reg2,
        provider(&server),
        AgentConfig::default(),
        options(),
        false,
    );
    let err = supervisor
        .start("retry", Some("g7".into()))
        .await
        .unwrap_err();
    assert!(matches!(err, SuperviseError::Llm(_)), "{err:?}");
    let wakes = store.agent_graphs().list_supervisor_wakes("g7").unwrap();
    assert_eq!(wakes[0].attempt_count, 3);
    assert_eq!(wakes[0].status, WakeStatus::RetryableFailed);
    // Resuming finds the attempts used up: the wake is exhausted.
    let server = ScriptedLlm::start([]).await;
    let (reg3, _graphs3) = registry().await;
    let supervisor = Supervisor::new(
        store.clone(),
        reg3,
        provider(&server),
        AgentConfig::default(),
        options(),
        false,
    );
    let err = supervisor.resume("g7").await.unwrap_err();
    assert!(
        err.to_string()
            .contains("could not be delivered in 3 attempts"),
        "{err}"
    );
    let wakes = store.agent_graphs().list_supervisor_wakes("g7").unwrap();
    assert_eq!(wakes[0].status, WakeStatus::Exhausted);
}

/// Commits four `echo_graph` work items on `graph` and starts a model
/// whose every worker request notes how many records `graph` had when it
/// arrived (in `seen`) and answers after 150 ms.
async fn four_echo_items(store: &Store, graph: &str, seen: Arc<Mutex<Vec<usize>>>) -> ScriptedLlm {
    let tools = AgentGraphTools::new(store.agent_graphs(), "root");
    let work: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .map(
            |w| serde_json::json!({"subagentId": "echo_graph", "instruction": format!("echo {w}")}),
        )
        .collect();
    tools
        .call(
            "update_agent_graph",
            serde_json::json!({"graphId": graph, "addWork": work}),
            &sandgraph_controller::CallIdentity {
                session_id: "root".into(),
                last_turn: 1,
                tool_call_id: "c1".into(),
            },
        )
        .unwrap();
    let (st, graph) = (store.clone(), graph.to_owned());
    let reply = move || {
        let (s, st, graph) = (seen.clone(), st.clone(), graph.clone());
        Reply::respond(move |request| {
            let records = st.agent_graphs().list_records(&graph).unwrap().len();
            s.lock().unwrap().push(records);
            let word = request
                .last_content("user")
                .and_then(|u| u.split_whitespace().nth(1))
                .unwrap_or("x")
                .to_owned();
            Reply::tool_call(
                "echo_graph",
                &serde_json::json!({"input": {"topic": word}}).to_string(),
            )
            .delay(Duration::from_millis(150))
        })
    };
    ScriptedLlm::start((0..4).map(|_| reply())).await
}

fn coordinator(
    store: &Store,
    registry: Registry,
    server: &ScriptedLlm,
    max_new_activations: usize,
) -> sandgraph_supervisor::Coordinator {
    sandgraph_supervisor::Coordinator::new(
        store.agent_graphs(),
        registry,
        provider(server),
        AgentConfig::default(),
        sandgraph_supervisor::CoordinatorOptions {
            max_new_activations,
            model: "m".into(),
            journal: None,
            threads: None,
        },
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wave_runs_at_most_max_new_activations_work_items_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("data.redb")).unwrap();
    // With 2 slots, the third and fourth start only after a record.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let server = four_echo_items(&store, "g8", seen.clone()).await;
    let (registry, _graphs) = registry().await;
    let coordinator = coordinator(&store, registry, &server, 2);
    let report = coordinator.run_wave("g8").await.unwrap();
    assert_eq!(report.records.len(), 4);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4);
    assert_eq!(&seen[..2], &[0, 0], "{seen:?}");
    assert!(seen[2] >= 1 && seen[3] >= 2, "{seen:?}");
    // A second wave finds nothing left to run.
    let again = coordinator.run_wave("g8").await.unwrap();
    assert!(again.records.is_empty());
    assert_eq!(server.requests().len(), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wave_counts_under_the_run_slots_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("data.redb")).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let server = four_echo_items(&store, "g10", seen.clone()).await;
    let (registry, _graphs) = registry().await;
    let coordinator = coordinator(&store, registry, &server, 4);
    // The host's slots are all taken: nothing starts.
    let slots = Arc::new(tokio::sync::Semaphore::new(0));
    coordinator.count_runs_under(slots.clone());
    let wave = tokio::spawn({
        let c = coordinator.clone();
        async move { c.run_wave("g10").await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(server.requests().is_empty(), "work ran without a slot");
    // One slot frees: the four items run one after the other, though the
    // wave alone would run them all at once.
    slots.add_permits(1);
    let report = wave.await.unwrap().unwrap();
    assert_eq!(report.records.len(), 4);
    assert_eq!(*seen.lock().unwrap(), [0, 1, 2, 3]);
    assert_eq!(slots.available_permits(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_gets_an_edge_from_the_operator_of_each_input_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("data.redb")).unwrap();
    let tools = AgentGraphTools::new(store.agent_graphs(), "root");
    let update = |turn: u64, work: serde_json::Value| {
        let call = sandgraph_controller::CallIdentity {
            session_id: "root".into(),
            last_turn: turn,
            tool_call_id: format!("c{turn}"),
        };
        let args = serde_json::json!({"graphId": "g11", "addWork": [work]});
        tools.call("update_agent_graph", args, &call).unwrap()
    };
    let echo = || Reply::tool_call("echo_graph", r#"{"input":{"topic":"t"}}"#);
    let server = ScriptedLlm::start(vec![echo(), echo()]).await;
    let (registry, _graphs) = registry().await;
    let coordinator = coordinator(&store, registry, &server, 1);
    update(
        1,
        serde_json::json!({"workId": "w-a", "subagentId": "echo_graph", "instruction": "echo a"}),
    );
    let alpha = coordinator.run_wave("g11").await.unwrap().records.remove(0);
    update(
        2,
        serde_json::json!({"workId": "w-b", "subagentId": "echo_graph", "instruction": "echo b",
            "inputIds": [alpha.record_id, "graph_record_not_written"]}),
    );
    assert_eq!(coordinator.run_wave("g11").await.unwrap().records.len(), 1);
    let graphs = store.agent_graphs();
    let a = graphs
        .read_provision_by_work("g11", "w-a")
        .unwrap()
        .unwrap();
    let b = graphs
        .read_provision_by_work("g11", "w-b")
        .unwrap()
        .unwrap();
    assert!(a.edges.is_empty(), "{a:?}");
    assert_eq!(alpha.operator_id, a.operator_id);
    assert_eq!(
        b.edges,
        vec![OperatorEdge {
            edge_id: graph_edge_id("g11", &a.operator_id, &b.operator_id),
            from_operator_id: a.operator_id.clone(),
            to_operator_id: b.operator_id.clone(),
        }]
    );
    // The view counts alpha's record once along that edge; b's own record
    // has no edge to follow.
    let view = Projection::load(&graphs, "g11")
        .unwrap()
        .view_page(None)
        .unwrap();
    assert_eq!(view.value["readiness"]["routesCount"], 1);
}

/// Waits, up to 20 s, until `done` holds.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn stopping_or_replacing_running_work_cancels_its_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("data.redb")).unwrap();
    let tools = AgentGraphTools::new(store.agent_graphs(), "root");
    let turns = std::sync::atomic::AtomicU64::new(0);
    let update = |args: serde_json::Value| {
        let turn = turns.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let call = sandgraph_controller::CallIdentity {
            session_id: "root".into(),
            last_turn: turn,
            tool_call_id: format!("c{turn}"),
        };
        tools.call("update_agent_graph", args, &call).unwrap()
    };
    // Both slow items sleep an hour in a host call; the replacement echoes.
    let sleep = || Reply::tool_call("hostile_host_sleep", r#"{"input":{}}"#);
    let echo = Reply::tool_call("echo_graph", r#"{"input":{"topic":"new"}}"#);
    let server = ScriptedLlm::start(vec![sleep(), sleep(), echo]).await;
    let (registry, _graphs) = registry_of(&[
        (
            "hostile_host_sleep.wasm",
            sandgraph_tests::HOSTILE_HOST_SLEEP,
        ),
        ("echo_graph.wasm", sandgraph_tests::ECHO),
    ])
    .await;
    let coordinator = coordinator(&store, registry, &server, 2);
    let slow = |id: &str| serde_json::json!({"workId": id, "subagentId": "hostile_host_sleep", "instruction": "sleep"});
    update(serde_json::json!({"graphId": "g12", "addWork": [slow("w-stop"), slow("w-old")]}));
    let wave = tokio::spawn({
        let c = coordinator.clone();
        async move { c.run_wave("g12").await }
    });
    let graphs = store.agent_graphs();
    let executing = |work: &str| {
        Projection::load(&graphs, "g12")
            .unwrap()
            .claim_of(work)
            .is_some_and(|c| c.admission_status == AdmissionStatus::Executing)
    };
    eventually("both slow items to run", || {
        executing("w-stop") && executing("w-old") && server.requests().len() == 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cut_at = std::time::Instant::now();
    update(serde_json::json!({"graphId": "g12",
        "stop": [{"targetId": "w-stop", "reason": "too slow"}]}));
    update(
        serde_json::json!({"graphId": "g12", "addWork": [{"workId": "w-new",
        "subagentId": "echo_graph", "instruction": "echo new", "replaces": "w-old"}]}),
    );
    let report = tokio::time::timeout(Duration::from_secs(20), wave)
        .await
        .expect("the cancelled runs end")
        .unwrap()
        .unwrap();
    // Far below the 30 s run timeout: the sandbox was cancelled.
    assert!(
        cut_at.elapsed() < Duration::from_secs(10),
        "{:?}",
        cut_at.elapsed()
    );
    let mut outcomes: Vec<(String, Option<RecordOutcome>, String)> = report
        .records
        .iter()
        .map(|r| (r.work_id.clone().unwrap(), r.outcome, r.summary.clone()))
        .collect();
    outcomes.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        outcomes,
        [
            ("w-old", "cancelled: replaced by w-new"),
            ("w-stop", "cancelled: stopped: too slow")
        ]
        .map(|(w, s)| (w.to_owned(), Some(RecordOutcome::Cancelled), s.to_owned()))
    );
    let projection = Projection::load(&graphs, "g12").unwrap();
    for work in ["w-stop", "w-old"] {
        assert_eq!(
            projection.work_item(work).unwrap().status(),
            WorkStatus::Cancelled
        );
        let claim = projection.claim_of(work).unwrap();
        assert_eq!(claim.admission_status, AdmissionStatus::Cancelled);
    }
    let view = projection.view_page(None).unwrap();
    assert!(view.text.contains("[cancelled] w-stop"), "{}", view.text);
    // The replacement runs in the next wave; the cancelled work never
    // runs again.
    let next = coordinator.run_wave("g12").await.unwrap();
    assert_eq!(next.records.len(), 1);
    assert_eq!(next.records[0].work_id.as_deref(), Some("w-new"));
    assert_eq!(next.records[0].outcome, Some(RecordOutcome::Completed));
    assert!(
        coordinator
            .run_wave("g12")
            .await
            .unwrap()
            .records
            .is_empty()
    );
    assert_eq!(server.requests().len(), 3);
}

/// The supervisor's last call: finish `graph` with every record id its
/// wake message `user` lists.
fn finish_with_records(graph: &str, user: &str, reason: &str) -> Reply {
    let ids: Vec<&str> = user
        .split_whitespace()
        .filter(|w| w.starts_with("graph_record_"))
        .collect();
    let finish = serde_json::json!({"graphId": graph, "idempotencyKey": "f",
        "finish": {"resultIds": ids, "reason": reason}});
    Reply::tool_call("update_agent_graph", &finish.to_string())
}

/// The scripted supervisor of the interrupt test: one work item on
/// `graph_interrupt`, then finish with its record. Workers call the graph.
fn interrupt_script() -> Reply {
    Reply::respond(|request| {
        if !request.tool_names().iter().any(|t| t == "view_agent_graph") {
            return Reply::tool_call("graph_interrupt", r#"{"input":{}}"#);
        }
        let user = request.last_content("user").unwrap_or("").to_owned();
        if user.starts_with("Goal:") {
            let update = serde_json::json!({"graphId": "g9", "idempotencyKey": "w1",
                "addWork": [{"subagentId": "graph_interrupt", "instruction": "ask for approval"}]});
            return Reply::tool_calls(&[
                ("update_agent_graph", &update.to_string()),
                ("yield_agent_graph", r#"{"graphId":"g9"}"#),
            ]);
        }
        finish_with_records("g9", &user, "asked")
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_supervised_run_is_on_disk_when_it_is_recorded() {
    let server = ScriptedLlm::start((0..6).map(|_| interrupt_script())).await;
    let (registry, _graphs) =
        registry_of(&[("graph_interrupt.wasm", sandgraph_tests::GRAPH_INTERRUPT)]).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("data.redb");
    let summary = {
        let supervisor = Supervisor::new(
            Store::open(&db).unwrap(),
            registry,
            provider(&server),
            AgentConfig::default(),
            options(),
            false,
        );
        let out = supervisor.start("ask", Some("g9".into())).await.unwrap();
        assert_eq!(out.result_ids.len(), 1);
        out.results[0]["summary"].as_str().unwrap().to_owned()
        // The supervisor and its store are dropped here.
    };
    assert!(
        summary.starts_with(
            r#"graph_interrupt returned {"status":"interrupted","thread_id":"operator_session_"#
        ),
        "{summary}"
    );
    // A fresh open of the file finds the operator's thread waiting at the
    // interrupt the record reported.
    let store = Store::open(&db).unwrap();
    let provisions = store.agent_graphs().list_provisions("g9").unwrap();
    assert_eq!(provisions.len(), 1);
    let thread = format!("{}/graph_interrupt", provisions[0].target_session_id);
    assert!(
        summary.contains(&format!(r#""thread_id":"{thread}""#)),
        "{summary}"
    );
    let info = store
        .threads()
        .info(&thread)
        .unwrap()
        .expect("the supervised thread is stored");
    assert_eq!(info.graph, "graph_interrupt");
    assert_eq!(info.pending_interrupts, 1);
    let state = store.threads().load(&thread).unwrap().unwrap();
    let interrupts = state.pending_interrupts();
    assert_eq!(
        interrupts[0].value,
        serde_json::json!({"question": "approve?"})
    );
    assert_eq!(
        state.checkpoint.values["log"],
        serde_json::json!(["prepared"])
    );
}

// Context overflow in wake delivery (seed-contracts §2.11): one
// compaction, then one bounded partial delivery.

/// Work items of the context tests: with each record's summary cut to 500
/// characters in a wake, 32 records take about 4,500 estimated tokens,
/// well over the system prompt and tool definitions.
const CONTEXT_ITEMS: usize = 32;

/// The refusal of a model whose context the request exceeds (OpenAI's
/// wording).
fn context_refusal() -> Reply {
    Reply::status(
        400,
        r#"{"error":{"message":"This model's maximum context length is 4096 tokens. However, your messages resulted in 6000 tokens.","code":"context_length_exceeded"}}"#,
    )
}

/// The scripted supervisor and workers of the context tests on `graph`:
/// the goal adds [`CONTEXT_ITEMS`] echo items whose records are long; a
/// wake finishes with every record of the store. With `view_first`, the
/// wake turn views the graph first, and the requests after that view are
/// refused as over the context while `refusals` is above 0 (shared by
/// every reply of the script).
fn context_script(
    store: &Store,
    graph: &str,
    view_first: bool,
    refusals: Arc<Mutex<usize>>,
) -> Reply {
    let (store, graph) = (store.clone(), graph.to_owned());
    Reply::respond(move |request| {
        if !request.tool_names().iter().any(|t| t == "view_agent_graph") {
            let word = request
                .last_content("user")
                .and_then(|u| u.split_whitespace().nth(1))
                .unwrap_or("x")
                .to_owned();
            let topic = format!("{word}-{}", "long".repeat(200));
            return Reply::tool_call(
                "echo_graph",
                &serde_json::json!({"input": {"topic": topic}}).to_string(),
            );
        }
        let user = request.messages()[1]["content"].as_str().unwrap_or("");
        if user.starts_with("Goal:") {
            let work: Vec<_> = (0..CONTEXT_ITEMS)
                .map(|i| serde_json::json!({"subagentId": "echo_graph", "instruction": format!("echo t{i}")}))
                .collect();
            let update =
                serde_json::json!({"graphId": graph, "idempotencyKey": "w", "addWork": work});
            return Reply::tool_calls(&[
                ("update_agent_graph", &update.to_string()),
                (
                    "yield_agent_graph",
                    &serde_json::json!({"graphId": graph}).to_string(),
                ),
            ]);
        }
        let after_a_tool =
            request.messages().last().and_then(|m| m["role"].as_str()) == Some("tool");
        let compacted = user.contains("Compacted to fit");
        if view_first && (after_a_tool || compacted) {
            let mut left = refusals.lock().unwrap();
            if *left > 0 {
                *left -= 1;
                return context_refusal();
            }
        }
        if view_first && !after_a_tool && !compacted {
            return Reply::tool_call(
                "view_agent_graph",
                &serde_json::json!({"graphId": graph}).to_string(),
            );
        }
        let ids: Vec<String> = store
            .agent_graphs()
            .list_records(&graph)
            .unwrap()
            .into_iter()
            .map(|r| r.record_id)
            .collect();
        let finish = serde_json::json!({"graphId": graph, "idempotencyKey": "f",
            "finish": {"resultIds": ids, "reason": "done"}});
        Reply::tool_call("update_agent_graph", &finish.to_string())
    })
}

/// Runs graph `graph` with the context script and `budget`; returns the
/// outcome, the events and the supervisor requests after the first turn's.
async fn supervise_within(
    store: &Store,
    graph: &str,
    budget: u64,
    view_first: bool,
    refusals: usize,
) -> (
    Result<sandgraph_supervisor::SuperviseOutcome, SuperviseError>,
    Vec<Event>,
    Vec<sandgraph_test_llm::Recorded>,
) {
    let refusals = Arc::new(Mutex::new(refusals));
    let server = ScriptedLlm::start(
        (0..CONTEXT_ITEMS + 8).map(|_| context_script(store, graph, view_first, refusals.clone())),
    )
    .await;
    let (registry, _graphs) = registry().await;
    let events = Arc::new(Mutex::new(Vec::new()));
    let e = events.clone();
    let supervisor = Supervisor::new(
        store.clone(),
        registry,
        provider(&server),
        AgentConfig::default(),
        SupervisorOptions {
            context_budget_tokens: budget,
            ..options()
        },
        false,
    )
    .on_event(move |ev| e.lock().unwrap().push(ev.clone()));
    let out = supervisor.start("long records", Some(graph.into())).await;
    let wake_requests = server
        .requests()
        .into_iter()
        .filter(|r| r.tool_names().iter().any(|t| t == "view_agent_graph"))
        .skip(1)
        .collect();
    let events = events.lock().unwrap().clone();
    (out, events, wake_requests)
}

fn compactions(events: &[Event]) -> Vec<Event> {
    events
        .iter()
        .filter(|e| matches!(e, Event::Compacted { .. }))
        .cloned()
        .collect()
}

fn listed_records(user: &str) -> usize {
    user.lines()
        .filter(|l| l.starts_with("- graph_record_"))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wake_over_the_context_budget_is_compacted_once_and_delivered_partial() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("data.redb")).unwrap();
    let (out, events, wakes) = supervise_within(&store, "ga", 5_000, false, 0).await;
    out.unwrap();
    let compacted = compactions(&events);
    assert_eq!(compacted.len(), 1, "{compacted:?}");
    let Event::Compacted {
        turn,
        estimated_tokens,
        budget_tokens,
        digested_calls,
        omitted,
        reported,
    } = compacted[0]
    else {
        unreachable!()
    };
    assert_eq!(
        (turn, budget_tokens, digested_calls, reported),
        (2, 5_000, 0, false)
    );
    assert!(estimated_tokens > 5_000, "{estimated_tokens}");
    assert!(omitted > 0 && omitted < CONTEXT_ITEMS, "{omitted}");
    // The model never saw the whole wake: its one wake request is the
    // partial one, within the budget, and says what it leaves out.
    assert_eq!(wakes.len(), 1);
    let user = wakes[0].messages()[1]["content"].as_str().unwrap();
    assert!(
        user.starts_with("Agent graph ga: the wave settled. New records:\n"),
        "{user}"
    );
    assert_eq!(listed_records(user), CONTEXT_ITEMS - omitted);
    assert!(
        user.contains(&format!(
            "Omitted: records={omitted} (left out to fit the context budget; these are the first ones; view_agent_graph lists every record, paging with nextCursor)\n"
        )),
        "{user}"
    );
    assert!(serde_json::to_vec(&wakes[0].body).unwrap().len() <= 4 * 5_000);
    let delivered = store.agent_graphs().list_supervisor_wakes("ga").unwrap();
    assert_eq!(delivered[0].status, WakeStatus::Delivered);
    assert_eq!(delivered[0].attempt_count, 1);

    // With the budget at the whole wake's estimate, nothing changes: the
    // same graph gets the whole wake, uncompacted.
    let (out, events, wakes) = supervise_within(&store, "gb", estimated_tokens, false, 0).await;
    out.unwrap();
    assert!(compactions(&events).is_empty(), "{events:?}");
    let user = wakes[0].messages()[1]["content"].as_str().unwrap();
    assert_eq!(listed_records(user), CONTEXT_ITEMS);
    assert!(!user.contains("Omitted"), "{user}");
    // One token less compacts.
    let (out, events, _) = supervise_within(&store, "gc", estimated_tokens - 1, false, 0).await;
    out.unwrap();
    assert_eq!(compactions(&events).len(), 1, "{events:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_context_refusal_digests_the_turn_and_delivers_a_partial_wake() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("data.redb")).unwrap();
    let (out, events, wakes) = supervise_within(
        &store,
        "gr",
        sandgraph_supervisor::DEFAULT_CONTEXT_BUDGET_TOKENS,
        true,
        1,
    )
    .await;
    assert_eq!(out.unwrap().result_ids.len(), CONTEXT_ITEMS);
    let compacted = compactions(&events);
    assert_eq!(compacted.len(), 1, "{compacted:?}");
    let Event::Compacted {
        digested_calls,
        omitted,
        reported,
        ..
    } = compacted[0]
    else {
        unreachable!()
    };
    assert!(reported);
    assert_eq!(digested_calls, 1);
    assert!(omitted > 0, "{omitted}");
    // The wake turn: the view, the refused request, then the compacted
    // one: the partial wake and the digest of the view, nothing else.
    assert_eq!(wakes.len(), 3);
    assert_eq!(wakes[1].messages().len(), 4);
    let retried = wakes[2].messages();
    assert_eq!(retried.len(), 2, "{retried:?}");
    let user = retried[1]["content"].as_str().unwrap();
    assert_eq!(listed_records(user), CONTEXT_ITEMS - omitted);
    assert!(
        user.contains(&format!("Omitted: records={omitted} (")),
        "{user}"
    );
    assert!(
        user.contains("Compacted to fit the context budget: the results of your 1 earlier tool calls in this turn are left out"),
        "{user}"
    );
    assert!(
        user.contains("- view_agent_graph {\"graphId\":\"gr\"} -> "),
        "{user}"
    );
    // One delivery attempt.
    let delivered = store.agent_graphs().list_supervisor_wakes("gr").unwrap();
    assert_eq!(delivered[0].status, WakeStatus::Delivered);
    assert_eq!(delivered[0].attempt_count, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wake_refused_again_after_its_compaction_fails_the_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("data.redb")).unwrap();
    let (out, events, wakes) = supervise_within(
        &store,
        "gf",
        sandgraph_supervisor::DEFAULT_CONTEXT_BUDGET_TOKENS,
        true,
        2,
    )
    .await;
    let err = out.unwrap_err();
    assert_eq!(err.code(), "context_overflow");
    assert!(
        err.to_string().starts_with(
            "agent graph gf: supervisor turn 2: the model refused the compacted conversation as over its context: request failed with status 400: This model's maximum context length"
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .ends_with("raise [controller].context_budget_tokens if the model's context allows"),
        "{err}"
    );
    assert_eq!(compactions(&events).len(), 1);
    // The view, the refused request, the refused compacted one: no more.
    assert_eq!(wakes.len(), 3);
    let wake = &store.agent_graphs().list_supervisor_wakes("gf").unwrap()[0];
    assert_eq!(wake.status, WakeStatus::RetryableFailed);
    let attempts = store
        .agent_graphs()
        .list_supervisor_wake_attempts("gf", &wake.wake_id)
        .unwrap();
    assert_eq!(attempts.len(), 1);
    assert!(
        attempts[0]
            .failure_reason
            .as_deref()
            .unwrap()
            .contains("refused the compacted conversation"),
        "{attempts:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_that_does_not_fit_even_compacted_sends_nothing() {
    let server = ScriptedLlm::start([]).await;
    let (registry, _graphs) = registry().await;
    let dir = tempfile::tempdir().unwrap();
    let supervisor = Supervisor::new(
        Store::open(&dir.path().join("data.redb")).unwrap(),
        registry,
        provider(&server),
        AgentConfig::default(),
        SupervisorOptions {
            context_budget_tokens: 100,
            ..options()
        },
        false,
    );
    let err = supervisor
        .start("tiny", Some("gt".into()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "context_overflow");
    assert!(
        err.to_string().contains("even compacted, with 2 of its 2 workers left out, over the context budget of 100 tokens"),
        "{err}"
    );
    assert!(server.requests().is_empty());
}
