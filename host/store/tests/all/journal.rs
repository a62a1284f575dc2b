//! Supervised runs: created once, turns counted durably.

use sandgraph_store::Store;

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
