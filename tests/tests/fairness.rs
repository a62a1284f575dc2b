//! Runaway guests must not starve other runs: they yield their worker on
//! every epoch tick, so short runs keep completing beside them.

use std::time::Duration;

use sandgraph_runtime::{ErrorCode, Limits, RunOptions, RunOutcome};
use sandgraph_tests::{ECHO, HOSTILE_INFINITE_LOOP, load, runtime};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_keep_completing_while_runaway_guests_spin() {
    let spin = load(HOSTILE_INFINITE_LOOP).await;
    let echo = load(ECHO).await;
    let spin_limits = Limits {
        timeout: Duration::from_secs(6),
        grace: Duration::from_millis(100),
        fuel: u64::MAX / 2,
        ..Limits::default()
    };
    // More spinners than worker threads.
    let spinners: Vec<_> = (0..4)
        .map(|_| {
            let (spin, limits) = (spin.clone(), spin_limits.clone());
            tokio::spawn(async move {
                runtime()
                    .run(
                        &spin,
                        json!({}),
                        RunOptions {
                            limits: Some(limits),
                            ..Default::default()
                        },
                    )
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    for i in 0..40 {
        let topic = format!("t{i}");
        let out = runtime()
            .run(&echo, json!({"topic": topic}), RunOptions::default())
            .await
            .unwrap();
        let RunOutcome::Completed(state) = out else {
            panic!("echo did not complete")
        };
        assert_eq!(state["log"], json!([format!("seen:{topic}")]));
    }
    // Every echo run finished while all the spinners were still running.
    for s in &spinners {
        assert!(!s.is_finished(), "a spinner ended before the echo runs did");
    }
    for s in spinners {
        let err = s.await.unwrap().unwrap_err();
        assert_eq!(err.code, ErrorCode::Timeout);
    }
}
