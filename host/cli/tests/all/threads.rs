//! `sandgraph run --thread` and `sandgraph threads …` end to end on a real
//! redb file: interrupt and resume, history, show, prune, fork, delete.

use std::process::{Command, Output};

use serde_json::{Value, json};

fn sandgraph(db: &str, args: &[&str]) -> Output {
    sandgraph_cmd()
        .args(args)
        .args(["--db", db])
        .env("SANDGRAPH_LOG", "off")
        .output()
        .expect("the sandgraph binary runs")
}

fn json_out(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

#[test]
fn approval_interrupts_resumes_and_its_history_can_be_managed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("threads.redb");
    let db = db.to_str().unwrap();
    let g = sandgraph_tests::APPROVAL;

    let o = sandgraph(
        db,
        &["run", g, "--thread", "t1", "--input", r#"{"topic":"wasm"}"#],
    );
    assert_eq!(
        o.status.code(),
        Some(20),
        "interrupted has its own exit code"
    );
    let v = json_out(&o);
    assert_eq!(v["status"], json!("interrupted"));
    assert_eq!(v["thread_id"], json!("t1"));
    assert_eq!(
        v["interrupts"][0]["value"]["draft"],
        json!("A short note about wasm.")
    );
    assert_eq!(
        v["interrupts"][0].as_object().unwrap().len(),
        2,
        "id and value"
    );

    let show = json_out(&sandgraph(db, &["threads", "show", "t1"]));
    assert_eq!(show["next"], json!(["review"]));
    assert_eq!(show["interrupts"][0]["id"], v["interrupts"][0]["id"]);

    let o = sandgraph(db, &["run", g, "--thread", "t1", "--resume", r#""no""#]);
    assert_eq!(o.status.code(), Some(20));
    assert_eq!(
        json_out(&o)["interrupts"][0]["value"]["draft"],
        json!("A short note about wasm (revision 1).")
    );
    let o = sandgraph(db, &["run", g, "--thread", "t1", "--resume", r#""yes""#]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let done = json_out(&o);
    assert_eq!(done["published"], json!(true));
    assert_eq!(done["revisions"], json!(1));

    let history = json_out(&sandgraph(db, &["threads", "history", "t1"]));
    let rows = history.as_array().unwrap();
    assert!(rows.len() >= 5);
    assert_eq!(rows[0]["values"]["published"], json!(true), "newest first");
    let limited = json_out(&sandgraph(
        db,
        &["threads", "history", "t1", "--limit", "2"],
    ));
    assert_eq!(limited.as_array().unwrap().len(), 2);

    // Fork from the checkpoint before the approval: the thread asks again.
    let before = rows
        .iter()
        .find(|r| r["next"] == json!(["review"]))
        .expect("a checkpoint waiting for review");
    let fork = json_out(&sandgraph(
        db,
        &[
            "threads",
            "fork",
            "t1",
            before["checkpoint_id"].as_str().unwrap(),
        ],
    ));
    assert_eq!(fork["parent_id"], before["checkpoint_id"]);
    let o = sandgraph(db, &["run", g, "--thread", "t1"]);
    assert_eq!(
        o.status.code(),
        Some(20),
        "continuing the fork reaches the review again"
    );

    let o = sandgraph(db, &["threads", "prune", "t1", "--keep", "2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pruned = json_out(&sandgraph(db, &["threads", "history", "t1"]));
    assert_eq!(pruned.as_array().unwrap().len(), 2);

    let list = json_out(&sandgraph(db, &["threads", "list"]));
    assert_eq!(list[0]["id"], json!("t1"));
    assert!(sandgraph(db, &["threads", "delete", "t1"]).status.success());
    assert_eq!(json_out(&sandgraph(db, &["threads", "list"])), json!([]));
}

#[test]
fn resume_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("threads.redb");
    let db = db.to_str().unwrap();
    let o = sandgraph(
        db,
        &[
            "run",
            sandgraph_tests::APPROVAL,
            "--thread",
            "nope",
            "--resume",
            r#""yes""#,
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("error[invalid_input]: cannot resume thread \"nope\""),
        "{err}"
    );
    let o = sandgraph(
        db,
        &[
            "run",
            sandgraph_tests::ECHO,
            "--thread",
            "e",
            "--input",
            r#"{"topic":"a"}"#,
        ],
    );
    assert!(o.status.success());
    let o = sandgraph(
        db,
        &[
            "run",
            sandgraph_tests::ECHO,
            "--thread",
            "e",
            "--resume",
            r#""x""#,
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no pending interrupt"));
    // An unquoted string is told, once, how to quote it.
    let o = sandgraph(
        db,
        &[
            "run",
            sandgraph_tests::ECHO,
            "--thread",
            "e",
            "--resume",
            "yes",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).trim_end(),
        "error[invalid_input]: --resume is not valid json: expected value at line 1 column 1 \
         (a json string needs double quotes: \"yes\", in a shell '\"yes\"')"
    );
    // Running again on the thread continues from its state.
    let o = sandgraph(
        db,
        &[
            "run",
            sandgraph_tests::ECHO,
            "--thread",
            "e",
            "--input",
            r#"{"topic":"b"}"#,
        ],
    );
    assert_eq!(json_out(&o)["log"], json!(["seen:a", "seen:b"]));
}

#[test]
fn every_durability_mode_is_on_disk_when_run_reports() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("threads.redb");
    let db = path.to_str().unwrap();
    let stored = |thread: &str| {
        let store = sandgraph_store::Store::open(&path).unwrap();
        let state = store.threads().load(thread).unwrap();
        state.unwrap_or_else(|| panic!("{thread} is not stored"))
    };
    for mode in ["sync", "async", "exit"] {
        let thread = format!("t-{mode}");
        let run = |start: &[&str]| {
            let g = sandgraph_tests::APPROVAL;
            let mut args = vec!["run", g, "--thread", &thread, "--durability", mode];
            args.extend(start);
            sandgraph(db, &args)
        };
        let o = run(&["--input", r#"{"topic":"disks"}"#]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(20), "{mode}: {err}");
        // The process is gone: a fresh open of the file finds the thread
        // waiting at the interrupt it printed.
        let printed = json_out(&o);
        let interrupts = stored(&thread).pending_interrupts();
        assert_eq!(interrupts.len(), 1, "{mode}");
        let id = &printed["interrupts"][0]["id"];
        assert_eq!(json!(interrupts[0].id), *id, "{mode}");
        let draft = &interrupts[0].value["draft"];
        assert_eq!(*draft, json!("A short note about disks."), "{mode}");
        // So does the end of the resumed run.
        let o = run(&["--resume", r#""yes""#]);
        assert!(
            o.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let state = stored(&thread);
        assert!(state.pending_interrupts().is_empty(), "{mode}");
        assert_eq!(state.checkpoint.values["published"], json!(true), "{mode}");
    }
}

/// The CLI, with the tests' shared compile cache rather than the user's
/// home's.
fn sandgraph_cmd() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandgraph"));
    cmd.env("SANDGRAPH_CACHE", crate::common::cache::shared());
    cmd
}
