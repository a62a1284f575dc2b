//! Supervised-wave throughput: work items of one agent graph run to their
//! records per second, on one host over redb (the baseline), and on one
//! and three hosts sharing a PostgreSQL database (a throwaway cluster from
//! the tests' fixture). A "host" is a `Store` of its own (its own
//! connections and lease holder) with its own `Coordinator`, all in this
//! process, each running a wave over the same graph at once.
//!
//! Two model latencies: none (the store and the coordination are the
//! cost) and 100 ms per model call (as with a real model, where more hosts
//! means more work in flight).
//!
//! `cargo bench -p sandgraph-supervisor --bench wave`; `WAVE_ITEMS` (default
//! 48) and `WAVE_ROUNDS` (default 3; the median is printed) change the size.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sandgraph_controller::{AgentGraphTools, CallIdentity, OpenAgentGraphs};
use sandgraph_llm::{ClientConfig, OpenAiClient, Provider};
use sandgraph_registry::{Registry, RegistryOptions};
use sandgraph_router::AgentConfig;
use sandgraph_store::Store;
use sandgraph_supervisor::{Coordinator, CoordinatorOptions};
use sandgraph_test_llm::{Reply, ScriptedLlm};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn registry() -> (Registry, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temp dir");
    std::fs::copy(sandgraph_tests::ECHO, dir.path().join("echo_graph.wasm"))
        .expect("echo_graph.wasm");
    let (registry, _) = Registry::open(
        sandgraph_tests::runtime().clone(),
        RegistryOptions {
            dirs: vec![dir.path().to_path_buf()],
            ..RegistryOptions::default()
        },
    )
    .await
    .expect("the registry opens");
    (registry, dir)
}

fn provider(server: &ScriptedLlm) -> Arc<dyn Provider> {
    Arc::new(
        OpenAiClient::new(ClientConfig {
            base_url: server.base_url(),
            model: "m".into(),
            ..ClientConfig::default()
        })
        .expect("a client"),
    )
}

/// Commits `items` echo work items to `graph` through the controller, in
/// updates of at most 32 (the controller's limit).
fn schedule(store: &Store, graph: &str, items: usize) {
    let tools = AgentGraphTools::new(store.agent_graphs(), "root");
    let work: Vec<_> = (0..items)
        .map(|i| serde_json::json!({"subagentId": "echo_graph", "instruction": format!("echo w{i}")}))
        .collect();
    for (n, chunk) in work.chunks(32).enumerate() {
        tools
            .call(
                "update_agent_graph",
                serde_json::json!({"graphId": graph, "addWork": chunk}),
                &CallIdentity {
                    session_id: "root".into(),
                    last_turn: n as u64 + 1,
                    tool_call_id: format!("{graph}-c{n}"),
                },
            )
            .expect("the update commits");
    }
}

/// Runs one wave of `items` items over `hosts` stores at once; returns
/// items per second.
async fn wave(
    hosts: &[Store],
    registry: &Registry,
    graph: &str,
    items: usize,
    latency: Duration,
) -> f64 {
    schedule(&hosts[0], graph, items);
    let reply = Reply::tool_call("echo_graph", r#"{"input":{"topic":"w"}}"#).delay(latency);
    let server = ScriptedLlm::start((0..items).map(|_| reply.clone())).await;
    let coordinators: Vec<Coordinator> = hosts
        .iter()
        .map(|store| {
            Coordinator::new(
                store.agent_graphs(),
                registry.clone(),
                provider(&server),
                AgentConfig::default(),
                CoordinatorOptions {
                    max_new_activations: 4,
                    model: "m".into(),
                    journal: None,
                    threads: None,
                },
            )
        })
        .collect();
    let start = Instant::now();
    let waves = coordinators.iter().map(|c| c.run_wave(graph));
    let mut recorded = 0;
    for report in futures::future::join_all(waves).await {
        recorded += report.expect("the wave runs").records.len();
    }
    let elapsed = start.elapsed();
    let stored = hosts[0]
        .agent_graphs()
        .list_records(graph)
        .expect("records");
    assert_eq!(stored.len(), items, "every item has one record");
    assert_eq!(recorded, items, "each record was written by one host");
    items as f64 / elapsed.as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let items = env_usize("WAVE_ITEMS", 48);
    let rounds = env_usize("WAVE_ROUNDS", 3).max(1);
    let (registry, _graphs) = registry().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let redb = vec![Store::open(&dir.path().join("wave.redb")).expect("redb")];
    let pg = sandgraph_tests::postgres::TestPostgres::shared();
    let url = pg.fresh_db("wave_bench");
    let pg1 = vec![Store::connect(&url).expect("postgres")];
    let pg3: Vec<Store> = (0..3)
        .map(|_| Store::connect(&url).expect("postgres"))
        .collect();
    println!("supervised wave: {items} echo work items, median of {rounds} rounds, items/s");
    for latency in [Duration::ZERO, Duration::from_millis(100)] {
        let mut figures = Vec::new();
        for (name, hosts) in [
            ("redb, 1 host", &redb),
            ("postgres, 1 host", &pg1),
            ("postgres, 3 hosts", &pg3),
        ] {
            let mut runs = Vec::new();
            for round in 0..rounds {
                let graph = format!("wave-{}-{}-{round}", latency.as_millis(), figures.len());
                runs.push(wave(hosts, &registry, &graph, items, latency).await);
            }
            figures.push((name, median(runs)));
        }
        let base = figures[0].1;
        println!("model latency {} ms:", latency.as_millis());
        for (name, rate) in figures {
            println!(
                "  {name:<18} {rate:8.1} items/s  ({:.2}x redb)",
                rate / base
            );
        }
    }
}
