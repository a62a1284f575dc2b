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
