//! Opening a database file: a process killed while it creates the file
//! leaves nothing a later open refuses.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandgraph_store::Store;

/// The variable naming the database the child below creates.
const CHILD: &str = "SANDGRAPH_STORE_TEST_CREATE";

/// The process the kill test starts (this binary, run with [`CHILD`]): it
/// creates the store [`CHILD`] names. Without the variable it does nothing.
#[test]
fn child_creates_a_store() {
    if let Some(path) = std::env::var_os(CHILD) {
        Store::open(Path::new(&path)).unwrap();
    }
}

#[test]
fn a_process_killed_while_it_creates_its_database_leaves_one_that_opens() {
    let exe = std::env::current_exe().unwrap();
    for round in 0..40u64 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.redb");
        let mut child = Command::new(&exe)
            .args(["--exact", "open::child_creates_a_store", "--quiet"])
            .env(CHILD, &path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // SIGKILL at another moment of the creation each round: once the
        // child has made a file in the folder, after 0 to 2 ms.
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::read_dir(dir.path()).unwrap().next().is_none()
            && child.try_wait().unwrap().is_none()
        {
            assert!(Instant::now() < deadline, "round {round}: no file");
            std::thread::sleep(Duration::from_micros(20));
        }
        std::thread::sleep(Duration::from_micros(round * 50));
        child.kill().unwrap();
        child.wait().unwrap();
        let store = Store::open(&path)
            .unwrap_or_else(|e| panic!("round {round}: killed while creating: {e}"));
        assert_eq!(
            store.schema_version().unwrap(),
            sandgraph_store::SCHEMA_VERSION
        );
    }
}

#[test]
fn leftovers_of_killed_creations_neither_block_nor_linger() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.redb");
    let leftover = |name: String, age: Duration| {
        let file = std::fs::File::create(dir.path().join(&name)).unwrap();
        std::fs::write(dir.path().join(&name), b"half a database").unwrap();
        file.set_modified(std::time::SystemTime::now() - age)
            .unwrap();
        name
    };
    // A dead process with this one's pid left the names this process uses
    // next (their counter is per process: every value it can have reached).
    let pid = std::process::id();
    let mine: Vec<String> = (0..2000)
        .map(|n| leftover(format!(".data.redb.creating-{pid}-{n}"), Duration::ZERO))
        .collect();
    // Another process's, older than a creation can take, and a fresh one
    // (a creation that may still be under way).
    let old = leftover(".data.redb.creating-1-0".into(), Duration::from_secs(3600));
    let fresh = leftover(".data.redb.creating-2-0".into(), Duration::ZERO);
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.schema_version().unwrap(),
        sandgraph_store::SCHEMA_VERSION
    );
    assert!(
        !dir.path().join(old).exists(),
        "a stale leftover is removed"
    );
    assert!(dir.path().join(fresh).exists(), "a fresh one is left alone");
    let replaced = mine.iter().filter(|n| !dir.path().join(n).exists()).count();
    assert_eq!(replaced, 1, "the one this creation used is gone");
}
