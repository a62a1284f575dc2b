//! Folders for the tests that build graph crates with cargo, chosen so a
//! rerun finds the crates' dependencies already built.
//!
//! `sandgraph build` passes rustc `--remap-path-prefix` flags naming the
//! crate's workspace root and target folder; cargo rebuilds every
//! dependency whose flags changed since its last build in that target
//! folder. So a crate written to a new temporary folder on each run, or two
//! crates in different folders sharing a target folder, rebuild all their
//! dependencies on every build. Here each test's crates live at the same
//! path on every run ([`CrateHome`]), with a target folder of their own,
//! the crates of this workspace share one ([`shared_target`]), and the
//! tests' new crates take turns in one folder for their wasm builds
//! ([`BuildSlot`]), so only the first builds the dependencies.

use std::fs::File;
use std::path::{Path, PathBuf};

/// The repository root (host/cli/../..).
pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The target folder of the builds of this workspace's graph crates
/// (`example-graphs/*`, the polyglot hostile twin): one workspace root, so
/// one build of their dependencies serves them all. `cargo test` of a
/// test's crate uses it too: a native build gets no remapping flags.
pub(crate) fn shared_target() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("toolkit-target")
}

/// A folder for one test's graph crates, outside the workspace (as an
/// author's crate is) and at the same path on every run, emptied when the
/// test starts, with target folders of its own under the build's temporary
/// folder. It is locked while the test holds it, so two test processes
/// running the same test take turns.
pub(crate) struct CrateHome {
    dir: PathBuf,
    targets: PathBuf,
    _lock: File,
}

impl CrateHome {
    /// The home of the test `test` (a name unique among the tests).
    pub(crate) fn new(test: &str) -> CrateHome {
        let (dir, lock) = locked_empty_folder(test);
        CrateHome {
            dir,
            targets: targets_root().join(test),
            _lock: lock,
        }
    }

    /// The folder, empty when the test starts.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// `name` in the folder.
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The target folder `name` of the builds of a crate here (one per
    /// crate folder: see the module's note).
    pub(crate) fn target(&self, name: &str) -> PathBuf {
        self.targets.join(name)
    }
}

/// The new crates' turn at `sandgraph build` in one folder with one target
/// folder: a crate built there reuses the wasm dependencies an earlier one
/// built (the four tests that build a new crate took 102 CPU s cold each
/// in a folder of its own, 58 here). It is the crate's folder while the
/// slot is held, which the lock (across test processes too) makes one
/// test at a time.
pub(crate) struct BuildSlot {
    dir: PathBuf,
    target: PathBuf,
    _lock: File,
}

impl BuildSlot {
    /// Waits for the slot, then fills its folder with a copy of the crate
    /// in `krate` (new files: cargo sees them as newer than what the last
    /// crate left built).
    pub(crate) fn take(krate: &Path) -> BuildSlot {
        let (dir, lock) = locked_empty_folder("build-slot");
        copy_dir(krate, &dir);
        BuildSlot {
            dir,
            target: targets_root().join("build-slot"),
            _lock: lock,
        }
    }

    /// The crate's folder in the slot.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The slot's target folder.
    pub(crate) fn target(&self) -> &Path {
        &self.target
    }
}

/// The folder the tests' crate folders live in: outside the workspace, at
/// the same path on every run of this checkout's tests.
fn crates_root() -> PathBuf {
    let tmp = env!("CARGO_TARGET_TMPDIR");
    let checkout = super::sha256_hex(tmp.as_bytes());
    let root = std::env::temp_dir().join(format!("sandgraph-tests-{}", &checkout[..12]));
    std::fs::create_dir_all(&root).unwrap();
    root
}

/// The folder of the crates' target folders, under the build's temporary
/// folder.
fn targets_root() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("crate-targets")
}

/// The folder `name` in [`crates_root`], emptied once its lock is taken;
/// returns it with the held lock.
fn locked_empty_folder(name: &str) -> (PathBuf, File) {
    let root = crates_root();
    let lock = File::create(root.join(format!("{name}.lock"))).unwrap();
    lock.lock().unwrap();
    let dir = root.join(name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap();
    }
    std::fs::create_dir(&dir).unwrap();
    (dir, lock)
}

/// Every file under `dir`, recursively.
pub(crate) fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Copies the files under `from` to the same places under `to`.
pub(crate) fn copy_dir(from: &Path, to: &Path) {
    for file in walk(from) {
        let dest = to.join(file.strip_prefix(from).unwrap());
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&file, &dest).unwrap();
    }
}
