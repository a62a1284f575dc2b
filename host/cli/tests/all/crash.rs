//! Crash recovery: a real `sandgraph` process is killed with SIGKILL at many
//! points of a multi-step run on a durable thread; running the thread again
//! must finish with the state of an uninterrupted run, never run a task
//! whose result was already saved, and always find the database openable.

use std::collections::HashSet;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

const SLOW_MS: u64 = 300;

struct Attempt {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs the durable graph on `thread`, killing it after `kill_after` when given.
fn attempt(db: &str, thread: &str, input: Option<&str>, kill_after: Option<Duration>) -> Attempt {
    let mut cmd = sandgraph_cmd();
    cmd.args([
        "run",
        sandgraph_tests::GRAPH_DURABLE,
        "--thread",
        thread,
        "--db",
        db,
    ]);
    if let Some(input) = input {
        cmd.args(["--input", input]);
    }
    cmd.env(
        "SANDGRAPH_LOG",
        "sandgraph::guest=info,sandgraph::checkpoint=debug",
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("sandgraph starts");
    if let Some(after) = kill_after {
        std::thread::sleep(after);
        // SIGKILL: no destructor, no flush, no chance to tidy up.
        let _ = child.kill();
    }
    let status = child.wait().expect("sandgraph exits");
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    Attempt {
        code: status.code(),
        stdout,
        stderr,
    }
}

/// Nodes whose task record this attempt saved, and nodes it ran.
fn saved_and_ran(stderr: &str) -> (HashSet<String>, Vec<String>) {
    let mut saved = HashSet::new();
    let mut ran = Vec::new();
    for line in stderr.lines() {
        if line.contains("task record saved")
            && let Some(node) = line.split("node=").nth(1)
        {
            saved.insert(node.split_whitespace().next().unwrap_or("").to_string());
        }
        if let Some(rest) = line.split(" ran ").nth(1) {
            ran.push(rest.split_whitespace().next().unwrap_or("").to_string());
        }
    }
    (saved, ran)
}

#[test]
fn killed_runs_resume_from_the_last_superstep_without_rerunning_saved_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("threads.redb");
    let db = db.to_str().unwrap();
    let input = format!(r#"{{"slow_ms": {SLOW_MS}}}"#);

    // A first run fills the compile cache, so the timed reference run (and
    // every attempt after it) loads the compiled graph: timing a cold
    // compile spread the kill points past the end of warm runs on a busy
    // machine.
    let warm = attempt(db, "warm-up", Some(&input), None);
    assert_eq!(warm.code, Some(0), "{}", warm.stderr);
    let started = std::time::Instant::now();
    let reference = attempt(db, "reference", Some(&input), None);
    // Kill points are spread over the length of an uninterrupted run on this
    // machine, so they land inside the run however fast the machine is.
    let run_ms = started.elapsed().as_millis() as u64;
    assert_eq!(reference.code, Some(0), "{}", reference.stderr);
    let expected: Value = serde_json::from_str(&reference.stdout).unwrap();
    let (saved, ran) = saved_and_ran(&reference.stderr);
    assert_eq!(
        ran,
        ["start", "fast", "slow", "merge", "finish"],
        "{}",
        reference.stderr
    );
    // Every task's record is logged as saved: the check below, that no
    // saved task runs again, reads these lines.
    assert_eq!(
        saved,
        ran.iter().cloned().collect::<HashSet<_>>(),
        "{}",
        reference.stderr
    );

    let mut killed_mid_run = 0;
    const POINTS: u64 = 12;
    // Sweeps of kill points spread over the reference run's length: at
    // least one sweep, and more (up to three) while fewer than half of the
    // kills have landed inside a run (a busy machine makes the reference
    // run slower than the attempts, which then finish before their kill).
    let kill_points = (0..3 * POINTS).map(|i| (i, run_ms * (i % POINTS + 1) / (POINTS + 1)));
    for (i, ms) in kill_points {
        if i >= POINTS && killed_mid_run >= POINTS as usize / 2 {
            break;
        }
        let thread = format!("t{i}");
        let mut saved_so_far: HashSet<String> = HashSet::new();
        let first = attempt(db, &thread, Some(&input), Some(Duration::from_millis(ms)));
        let mut outcome = first;
        for round in 0..6 {
            let (saved, ran) = saved_and_ran(&outcome.stderr);
            for node in &ran {
                assert!(
                    !saved_so_far.contains(node),
                    "kill at {ms} ms, round {round}: {node} ran again after its result was saved\n{}",
                    outcome.stderr
                );
            }
            saved_so_far.extend(saved);
            if outcome.code == Some(0) {
                break;
            }
            killed_mid_run += usize::from(round == 0);
            // The database always opens; a thread killed before its first
            // checkpoint has nothing stored and starts again from its input.
            assert!(
                !outcome.stderr.contains("error[storage]"),
                "{}",
                outcome.stderr
            );
            let resume = attempt(db, &thread, None, None);
            outcome = if resume.stderr.contains("has no stored state") {
                attempt(db, &thread, Some(&input), None)
            } else {
                resume
            };
        }
        assert_eq!(
            outcome.code,
            Some(0),
            "kill at {ms} ms never finished: {}",
            outcome.stderr
        );
        let state: Value = serde_json::from_str(&outcome.stdout).unwrap();
        assert_eq!(state, expected, "kill at {ms} ms");
    }
    // Most kill points must land inside the run, or the test proves little.
    assert!(
        killed_mid_run >= POINTS as usize / 2,
        "only {killed_mid_run} kills landed mid-run"
    );
}

/// The CLI, with the tests' shared compile cache rather than the user's
/// home's.
fn sandgraph_cmd() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandgraph"));
    cmd.env("SANDGRAPH_CACHE", crate::common::cache::shared());
    cmd
}
