//! A whole supervised graph against the scripted OpenAI-compatible server:
//! three work items → yield → the coordinator runs them on example graphs →
//! wake → finish with their record ids.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandgraph_agent::AgentConfig;
use sandgraph_controller::{AgentGraphTools, WorkStatus};
use sandgraph_llm::{ClientConfig, OpenAiClient, Provider};
use sandgraph_registry::{Registry, RegistryOptions};
use sandgraph_store::{RecordOutcome, Store, WakeStatus};
use sandgraph_supervisor::{Event, SuperviseError, Supervisor, SupervisorOptions};
use sandgraph_test_llm::demo::supervisor_demo;
use sandgraph_test_llm::{Reply, ScriptedLlm};

async fn registry() -> (Registry, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    for (name, path) in [
        ("echo.wasm", sandgraph_tests::ECHO),
        ("greet.wasm", sandgraph_tests::GREET),
    ] {
        std::fs::copy(path, dir.path().join(name)).unwrap();
    }
    let (registry, report) = Registry::open(
        sandgraph_tests::runtime().clone(),
        RegistryOptions {
            dirs: vec![dir.path().to_path_buf()],
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
    assert_eq!(store.journal().entries(None, None).unwrap().len(), 3);

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
}

