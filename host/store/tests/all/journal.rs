//! The routing audit journal: append-only, ordered, filtered, durable.

use sandgraph_store::{JournalEntry, Store};
use serde_json::json;

fn entry(route: &str, attempt: u32, decision: &str) -> JournalEntry {
    JournalEntry {
        seq: 999, // ignored: the journal numbers entries itself
        route_id: route.into(),
        attempt,
        at_ms: 1_700_000_000_000 + u64::from(attempt),
        request: format!("request of {route}"),
        tool: Some("echo_graph".into()),
        args: Some(json!({"input": {"topic": "x"}})),
        decision: decision.into(),
        stage: (decision == "rejected").then(|| "invalid_args".into()),
        reason: None,
        outcome: None,
        model_ms: 3,
        check_ms: 1,
        run_ms: None,
        graph_digest: Some("ab".repeat(32)),
    }
}

#[test]
fn entries_are_numbered_filtered_limited_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    {
        let store = Store::open(&path).unwrap();
        let j = store.journal();
        assert_eq!(j.append(&entry("r1", 1, "rejected")).unwrap(), 1);
        assert_eq!(j.append(&entry("r2", 1, "accepted")).unwrap(), 2);
        assert_eq!(j.append(&entry("r1", 2, "accepted")).unwrap(), 3);
    }
    let store = Store::open(&path).unwrap();
    let j = store.journal();
    let all = j.entries(None, None).unwrap();
    assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(
        all[0],
        JournalEntry {
            seq: 1,
            ..entry("r1", 1, "rejected")
        }
    );
    let r1 = j.entries(Some("r1"), None).unwrap();
    assert_eq!(
        r1.iter().map(|e| (e.seq, e.attempt)).collect::<Vec<_>>(),
        vec![(1, 1), (3, 2)]
    );
    let last = j.entries(None, Some(2)).unwrap();
    assert_eq!(last.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2, 3]);
    assert!(j.entries(Some("none"), None).unwrap().is_empty());
    assert_eq!(j.append(&entry("r3", 1, "fallback")).unwrap(), 4);
}

#[test]
fn supervisor_runs_are_created_once_and_count_turns_durably() {
    use sandgraph_store::SupervisorRun;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    let run = SupervisorRun {
        graph_id: "g1".into(),
        goal: "do it".into(),
        root_session_id: "root".into(),
        turns: 0,
        model: "m".into(),
        created_at: 1,
        updated_at: 1,
    };
    {
        let store = Store::open(&path).unwrap();
        let runs = store.supervisor_runs();
        assert_eq!(runs.create(&run).unwrap(), (run.clone(), true));
        let other = SupervisorRun {
            goal: "other".into(),
            ..run.clone()
        };
        assert_eq!(runs.create(&other).unwrap(), (run.clone(), false));
        assert_eq!(runs.next_turn("g1", 5).unwrap(), 1);
        assert_eq!(runs.next_turn("g1", 6).unwrap(), 2);
        let err = runs.next_turn("nope", 7).unwrap_err();
        assert_eq!(err.to_string(), "no supervised agent graph \"nope\"");
    }
    let store = Store::open(&path).unwrap();
    let runs = store.supervisor_runs();
    let got = runs.get("g1").unwrap().unwrap();
    assert_eq!(
        (got.turns, got.updated_at, got.goal.as_str()),
        (2, 6, "do it")
    );
    assert_eq!(runs.list().unwrap().len(), 1);
    assert_eq!(runs.get("nope").unwrap(), None);
}
