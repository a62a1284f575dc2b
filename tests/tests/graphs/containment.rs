//! Issue 11's hostile guests: each ends with its typed error, within its
//! limits, and the host serves the next call.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandgraph_runtime::{
    CancellationToken, ErrorCode, GuestLogLevel, Limits, LogSink, RunOptions, RuntimeConfig,
};
use serde_json::json;

use super::{completed, failed, run, run_with, spin_limits};
use sandgraph_tests::{load, runtime};

/// Safety net for things that must end soon; never a speed claim.
const SOON: Duration = Duration::from_secs(20);

async fn echo_still_served() {
    let state = completed(run(sandgraph_tests::ECHO, json!({"topic": "after"})).await);
    assert_eq!(state["log"], json!(["seen:after"]));
}

#[tokio::test]
pub async fn hostile_fanout_bloat() {
    // 64 tasks, each returning ~14 MB of `0,` (~30x that once parsed):
    // refused by the run's host byte budget while the first outputs parse.
    let start = Instant::now();
    let err = failed(run(sandgraph_tests::HOSTILE_FANOUT_BLOAT, json!({})).await);
    assert_eq!(err.code, ErrorCode::MemoryLimit, "{}", err.message);
    assert!(
        err.message.contains("host byte budget of 64 MiB"),
        "{}",
        err.message
    );
    assert!(err.message.contains("node \"bloat\""), "{}", err.message);
    assert!(start.elapsed() < SOON);
    echo_still_served().await;
}

#[tokio::test]
async fn a_small_host_byte_budget_refuses_a_state_that_outgrows_it() {
    // 1 MiB: echo fits, the bloat graph's first output does not.
    let limits = Limits {
        host_bytes: 1 << 20,
        ..Limits::default()
    };
    let err = failed(
        run_with(
            sandgraph_tests::HOSTILE_FANOUT_BLOAT,
            json!({}),
            limits.clone(),
        )
        .await,
    );
    assert_eq!(err.code, ErrorCode::MemoryLimit);
    assert!(
        err.message.contains("host byte budget of 1 MiB"),
        "{}",
        err.message
    );
    completed(run_with(sandgraph_tests::ECHO, json!({"topic": "x"}), limits).await);
}

#[tokio::test]
async fn run_bytes_count_against_the_host_wide_budget() {
    // The instance cap (20 MiB) lets the guest build its ~14 MB output,
    // and one run's byte budget (64 MiB) would take it; the host budget
    // (24 MiB), which the instance's memory also draws on, does not: the
    // output's bytes are refused by the host budget.
    let config = RuntimeConfig {
        memory_budget: 24 << 20,
        max_instances: 8,
        ..RuntimeConfig::default()
    };
    let rt = sandgraph_factors::runtime(config).unwrap();
    let graph = rt
        .load_file(std::path::Path::new(sandgraph_tests::HOSTILE_FANOUT_BLOAT))
        .await
        .unwrap();
    let limits = Limits {
        memory: 20 << 20,
        instances: 1,
        ..Limits::default()
    };
    let opts = RunOptions {
        limits: Some(limits),
        ..Default::default()
    };
    let err = failed(rt.run(&graph, json!({}), opts).await);
    assert_eq!(err.code, ErrorCode::MemoryLimit, "{}", err.message);
    assert!(
        err.message
            .contains("node \"bloat\" returned 14000013 bytes of JSON")
            && err.message.contains("the host-wide memory budget is spent"),
        "{}",
        err.message
    );
}

#[tokio::test]
pub async fn hostile_many_sends() {
    let start = Instant::now();
    let err = failed(run(sandgraph_tests::HOSTILE_MANY_SENDS, json!({})).await);
    assert_eq!(err.code, ErrorCode::InvalidUpdate, "{}", err.message);
    assert!(
        err.message
            .contains("node \"start\" returned 200000 goto targets and sends"),
        "{}",
        err.message
    );
    assert!(err.message.contains("at most 1024"), "{}", err.message);
    assert!(start.elapsed() < SOON);
    echo_still_served().await;
}

#[tokio::test]
pub async fn hostile_many_router_sends() {
    // The same 200,000 sends as a router's answer: refused at the WIT
    // boundary with the router's name, before a payload is parsed.
    let start = Instant::now();
    let input = json!({"via_router": true});
    let err = failed(run(sandgraph_tests::HOSTILE_MANY_SENDS, input).await);
    assert_eq!(err.code, ErrorCode::InvalidUpdate, "{}", err.message);
    assert_eq!(
        err.message,
        "router \"destinations\" returned 200000 goto targets and sends; \
         a node result may name at most 1024"
    );
    assert!(start.elapsed() < SOON);
    echo_still_served().await;
}

#[tokio::test]
pub async fn hostile_host_sleep() {
    // Asleep in a host call, where epochs cannot reach it: the wall clock
    // follows the caller's cancellation, not only the 60 s deadline.
    let graph = load(sandgraph_tests::HOSTILE_HOST_SLEEP).await;
    let cancel = CancellationToken::new();
    let opts = RunOptions {
        limits: Some(Limits {
            timeout: Duration::from_secs(60),
            grace: Duration::from_millis(100),
            ..Limits::default()
        }),
        cancel: cancel.clone(),
        ..Default::default()
    };
    let run = tokio::spawn(async move { runtime().run(&graph, json!({}), opts).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!run.is_finished(), "the sleeping node returned early");
    let cancelled = Instant::now();
    cancel.cancel();
    let err = failed(tokio::time::timeout(SOON, run).await.unwrap().unwrap());
    assert_eq!(err.code, ErrorCode::Timeout);
    assert!(err.message.contains("cancelled"), "{}", err.message);
    assert!(
        cancelled.elapsed() < Duration::from_secs(5),
        "the cancellation waited {:?}",
        cancelled.elapsed()
    );
    // Without a cancellation the deadline ends it.
    let err = failed(
        run_with(
            sandgraph_tests::HOSTILE_HOST_SLEEP,
            json!({}),
            spin_limits(200),
        )
        .await,
    );
    assert_eq!(err.code, ErrorCode::Timeout);
    echo_still_served().await;
}

#[tokio::test]
pub async fn hostile_fanout_spin() {
    // One run with 300 spinning tasks holds at most `instances` slots: on a
    // runtime of 16 slots, other runs still get instances while it spins.
    let config = RuntimeConfig {
        max_instances: 16,
        ..RuntimeConfig::default()
    };
    let rt = Arc::new(sandgraph_factors::runtime(config).unwrap());
    let spin = rt
        .load_file(std::path::Path::new(sandgraph_tests::HOSTILE_FANOUT_SPIN))
        .await
        .unwrap();
    let echo = rt
        .load_file(std::path::Path::new(sandgraph_tests::ECHO))
        .await
        .unwrap();
    let hostile = {
        let (rt, spin) = (rt.clone(), spin.clone());
        tokio::spawn(async move {
            let opts = RunOptions {
                limits: Some(spin_limits(3000)),
                ..Default::default()
            };
            rt.run(&spin, json!({"n": 300}), opts).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..20 {
        let started = Instant::now();
        let out = rt
            .run(
                &echo,
                json!({"topic": format!("t{i}")}),
                RunOptions::default(),
            )
            .await;
        assert_eq!(completed(out)["log"], json!([format!("seen:t{i}")]));
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "echo waited {:?}",
            started.elapsed()
        );
    }
    assert!(
        !hostile.is_finished(),
        "the fan-out ended before the echo runs"
    );
    let err = failed(tokio::time::timeout(SOON, hostile).await.unwrap().unwrap());
    assert_eq!(err.code, ErrorCode::Timeout);
}

#[tokio::test]
async fn parallel_tasks_share_one_fuel_budget() {
    // 8 spinning tasks and a 3e9 budget: together they run out, each does
    // not get the whole budget (that would take 8x as long as one).
    let limits = Limits {
        timeout: Duration::from_secs(60),
        fuel: 3_000_000_000,
        ..Limits::default()
    };
    let start = Instant::now();
    let err = failed(
        run_with(
            sandgraph_tests::HOSTILE_FANOUT_SPIN,
            json!({"n": 8}),
            limits,
        )
        .await,
    );
    assert_eq!(err.code, ErrorCode::OutOfFuel, "{}", err.message);
    assert!(start.elapsed() < SOON);
}

#[tokio::test]
async fn a_fan_out_runs_on_a_budget_smaller_than_one_slice() {
    // 64 parallel tasks on 5e8 fuel, less than the slice one call takes:
    // the first call to start holds the whole pool, and the others wait
    // for what it gives back instead of failing out of fuel (they did in
    // most runs). Five runs, since which calls overlap is scheduling.
    let items: Vec<i64> = (1..=64).collect();
    for _ in 0..5 {
        let limits = Limits {
            fuel: 500_000_000,
            ..Limits::default()
        };
        let out = run_with(
            sandgraph_tests::MAP_REDUCE,
            json!({ "items": items }),
            limits,
        )
        .await;
        let state = completed(out);
        assert_eq!(state["total"], json!(89_440), "the sum of 1..=64 squared");
    }
}

#[tokio::test]
pub async fn hostile_describe_spin() {
    let start = Instant::now();
    let err = runtime()
        .load_file(std::path::Path::new(sandgraph_tests::HOSTILE_DESCRIBE_SPIN))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Load);
    assert!(err.message.contains("describe"), "{}", err.message);
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
pub async fn hostile_describe_alloc() {
    // The load clock is lengthened so that only the memory cap can stop
    // this describe: on a loaded machine, filling 64 MiB page by page can
    // take longer than the default 500 ms, and the test is about the cap.
    let mut config = RuntimeConfig::default();
    config.load_limits.timeout = Duration::from_secs(30);
    let runtime = sandgraph_factors::runtime(config).unwrap();
    let err = runtime
        .load_file(std::path::Path::new(
            sandgraph_tests::HOSTILE_DESCRIBE_ALLOC,
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Load);
    assert!(err.message.contains("memory"), "{}", err.message);
}

#[tokio::test]
pub async fn hostile_describe_trap() {
    let err = runtime()
        .load_file(std::path::Path::new(sandgraph_tests::HOSTILE_DESCRIBE_TRAP))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Load);
    assert!(err.message.contains("trapped"), "{}", err.message);
}

#[tokio::test]
pub async fn hostile_escape_error() {
    let err = failed(run(sandgraph_tests::HOSTILE_ESCAPE_ERROR, json!({})).await);
    assert_eq!(err.code, ErrorCode::NodeError);
    assert!(err.message.len() < 5 * 1024, "{} bytes", err.message.len());
    assert!(
        !err.message.chars().any(|c| c.is_control()),
        "a control character reached the message: {:?}",
        &err.message[..200.min(err.message.len())]
    );
    assert!(err.message.contains("more bytes]"), "the cut is not marked");
    assert!(
        err.message
            .starts_with("node \"fail\" failed: \\u{1b}]0;pwned\\u{7}"),
        "{}",
        &err.message[..100]
    );
    echo_still_served().await;
}

#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl LogSink for Recorder {
    fn log(&self, _graph: &str, _level: GuestLogLevel, message: &str) {
        self.0.lock().unwrap().push(message.to_string());
    }
}

#[tokio::test]
pub async fn hostile_log_forge() {
    let sink = Arc::new(Recorder::default());
    let rt = sandgraph_factors::builder(RuntimeConfig::default())
        .sink(sink.clone())
        .build()
        .unwrap();
    let graph = rt
        .load_file(std::path::Path::new(sandgraph_tests::HOSTILE_LOG_FORGE))
        .await
        .unwrap();
    completed(rt.run(&graph, json!({}), RunOptions::default()).await);
    let lines = sink.0.lock().unwrap().clone();
    assert!(!lines.is_empty(), "no log line arrived");
    for line in &lines {
        assert!(!line.chars().any(|c| c.is_control()), "{line:?}");
    }
    assert!(
        lines.iter().any(|l| l.contains("\\nerror[ok]: forged")),
        "{lines:?}"
    );
}
