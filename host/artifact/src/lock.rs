//! `sandgraph.lock`: the graphs of one folder, pinned.
//!
//! The file is TOML, written by `sandgraph lock` into the folder it pins:
//!
//! ```toml
//! # sandgraph.lock: the graphs of this folder, pinned by `sandgraph lock`.
//! version = 1
//!
//! [[graph]]
//! file = "echo.wasm"
//! name = "echo_graph"
//! sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
//! ```
//!
//! `file` is a file name in the folder (no path), `name` the graph's name
//! (its tool name), `sha256` the digest of the component's bytes. A host run
//! with `--locked` mounts a folder's graphs only when the `*.wasm` files of
//! the folder are exactly those of the lock, byte for byte.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::{ArtifactError, FormatError, read_text};

/// The lock file's name, in the folder it pins.
pub const LOCK_FILE: &str = "sandgraph.lock";

/// The lock format written and read.
pub const LOCK_VERSION: u32 = 1;

/// The largest lock file read. An entry is about 150 bytes, so this holds
/// thousands of graphs; the file sits in a folder that may be writable by
/// others, so it is bounded before parsing.
pub const MAX_LOCK_FILE: usize = 1 << 20;

/// One pinned graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockEntry {
    /// The component's file name in the folder, e.g. `echo.wasm`.
    pub file: String,
    /// The graph's name.
    pub name: String,
    /// The sha256 of the component's bytes.
    pub sha256: Digest,
}

/// The lock of one folder: its graphs sorted by file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockFile {
    /// The graphs, sorted by file name, one entry per file.
    pub graphs: Vec<LockEntry>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLock {
    version: u32,
    #[serde(default)]
    graph: Vec<RawEntry>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    file: String,
    name: String,
    sha256: String,
}

/// How a folder differs from its lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MismatchKind {
    /// The file's bytes are not those pinned.
    Changed {
        /// The pinned digest.
        locked: Digest,
        /// The digest of the file as found.
        found: Digest,
    },
    /// Pinned, but not in the folder.
    Missing,
    /// In the folder, but not pinned.
    Extra,
}

/// A difference between a folder and its lock: the component file, the
/// lock file and what differs. Displayed as an error sentence that says
/// what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockMismatch {
    /// The component file (in the folder, whether or not it exists).
    pub file: PathBuf,
    /// The lock file.
    pub lock: PathBuf,
    /// What differs.
    pub kind: MismatchKind,
}

impl fmt::Display for LockMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dir = self.lock.parent().unwrap_or(Path::new("."));
        let relock = format!(
            "run `sandgraph lock --graphs {}` if the change is intended",
            dir.display()
        );
        match &self.kind {
            MismatchKind::Changed { locked, found } => write!(
                f,
                "{}: changed since it was locked: its sha256 is {found}, {} pins {locked}; {relock}",
                self.file.display(),
                self.lock.display()
            ),
            MismatchKind::Missing => write!(
                f,
                "{}: missing: {} pins it but the folder does not hold it; restore it, or {relock}",
                self.file.display(),
                self.lock.display()
            ),
            MismatchKind::Extra => write!(
                f,
                "{}: not in {}: remove it, or {relock}",
                self.file.display(),
                self.lock.display()
            ),
        }
    }
}

impl std::error::Error for LockMismatch {}

impl LockFile {
    /// A lock of `entries`, sorted by file name.
    ///
    /// # Errors
    ///
    /// Two entries for the same file, or a file name that is not a plain
    /// `*.wasm` name.
    pub fn new(mut entries: Vec<LockEntry>) -> Result<LockFile, FormatError> {
        entries.sort_by(|a, b| a.file.cmp(&b.file));
        for pair in entries.windows(2) {
            if pair[0].file == pair[1].file {
                return Err(FormatError::PinnedTwice(pair[0].file.clone()));
            }
        }
        for e in &entries {
            check_file_name(&e.file)?;
        }
        Ok(LockFile { graphs: entries })
    }

    /// The lock file of `dir`: `dir/sandgraph.lock`.
    pub(crate) fn path_in(dir: &Path) -> PathBuf {
        dir.join(LOCK_FILE)
    }

    /// Reads `dir/sandgraph.lock`.
    ///
    /// # Errors
    ///
    /// No lock file (saying to run `sandgraph lock`), an unreadable or
    /// oversized one, or one that does not parse.
    pub fn read(dir: &Path) -> Result<LockFile, ArtifactError> {
        let path = Self::path_in(dir);
        if !path.exists() {
            return Err(ArtifactError::new(
                &path,
                format!(
                    "no lock file: --locked needs one; write it with `sandgraph lock --graphs {}`",
                    dir.display()
                ),
            ));
        }
        let text = read_text(&path, MAX_LOCK_FILE, "lock file")?;
        Self::parse(&text).map_err(|m| ArtifactError::new(&path, m))
    }

    /// Parses the text of a lock file.
    ///
    /// # Errors
    ///
    /// Invalid TOML, an unknown key, another version, a bad digest or file
    /// name, a file pinned twice.
    pub fn parse(text: &str) -> Result<LockFile, FormatError> {
        let raw: RawLock =
            toml::from_str(text).map_err(|e| FormatError::LockSyntax(e.message().to_owned()))?;
        if raw.version != LOCK_VERSION {
            return Err(FormatError::LockVersion {
                found: raw.version,
                supported: LOCK_VERSION,
            });
        }
        let mut entries = Vec::with_capacity(raw.graph.len());
        for e in raw.graph {
            let sha256 = e.sha256.parse().map_err(|m| FormatError::EntryDigest {
                file: e.file.escape_debug().to_string(),
                source: Box::new(m),
            })?;
            entries.push(LockEntry {
                file: e.file,
                name: e.name,
                sha256,
            });
        }
        Self::new(entries)
    }

    /// The TOML text of the lock.
    pub(crate) fn to_toml(&self) -> String {
        let raw = RawLock {
            version: LOCK_VERSION,
            graph: self
                .graphs
                .iter()
                .map(|e| RawEntry {
                    file: e.file.clone(),
                    name: e.name.clone(),
                    sha256: e.sha256.to_hex(),
                })
                .collect(),
        };
        // Strings, integers and arrays of tables always serialize.
        let body = toml::to_string(&raw).unwrap_or_default();
        format!("# {LOCK_FILE}: the graphs of this folder, pinned by `sandgraph lock`.\n{body}")
    }

    /// Writes the lock into `dir` (through a temporary file and a rename,
    /// so a reader never sees half of it); returns its path.
    ///
    /// # Errors
    ///
    /// The file cannot be written.
    pub fn write(&self, dir: &Path) -> Result<PathBuf, ArtifactError> {
        let path = Self::path_in(dir);
        let tmp = dir.join(format!(".{LOCK_FILE}.tmp"));
        let fail = |e: std::io::Error| ArtifactError::new(&path, format!("cannot write: {e}"));
        std::fs::write(&tmp, self.to_toml()).map_err(fail)?;
        std::fs::rename(&tmp, &path).map_err(fail)?;
        Ok(path)
    }

    /// The entry pinning `file` (a file name).
    pub fn entry(&self, file: &str) -> Option<&LockEntry> {
        self.graphs.iter().find(|e| e.file == file)
    }

    /// Whether the component at `path` (in the folder `dir`, locked by
    /// this lock) with the digest `found` is the one pinned.
    ///
    /// # Errors
    ///
    /// [`MismatchKind::Extra`] when the lock does not name the file,
    /// [`MismatchKind::Changed`] when its digest differs.
    pub fn admit(
        &self,
        dir: &Path,
        path: &Path,
        found: &Digest,
    ) -> Result<&LockEntry, LockMismatch> {
        let mismatch = |kind| LockMismatch {
            file: path.to_path_buf(),
            lock: Self::path_in(dir),
            kind,
        };
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let entry = self
            .entry(name)
            .ok_or_else(|| mismatch(MismatchKind::Extra))?;
        if entry.sha256 != *found {
            return Err(mismatch(MismatchKind::Changed {
                locked: entry.sha256,
                found: *found,
            }));
        }
        Ok(entry)
    }

    /// The pinned files of `dir` that are not among `present` (file names).
    pub fn missing<'a>(
        &self,
        dir: &Path,
        present: impl IntoIterator<Item = &'a str>,
    ) -> Vec<LockMismatch> {
        let present: BTreeSet<&str> = present.into_iter().collect();
        self.graphs
            .iter()
            .filter(|e| !present.contains(e.file.as_str()))
            .map(|e| LockMismatch {
                file: dir.join(&e.file),
                lock: Self::path_in(dir),
                kind: MismatchKind::Missing,
            })
            .collect()
    }
}

fn check_file_name(file: &str) -> Result<(), FormatError> {
    let plain =
        !file.is_empty() && !file.contains(['/', '\\']) && file != ".." && file.ends_with(".wasm");
    if plain {
        Ok(())
    } else {
        Err(FormatError::FileName(
            file.escape_debug().take(200).collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::sha256;

    fn entry(file: &str, bytes: &[u8]) -> LockEntry {
        LockEntry {
            file: file.into(),
            name: file.trim_end_matches(".wasm").into(),
            sha256: sha256(bytes),
        }
    }

    #[test]
    fn the_lock_round_trips_through_its_file_sorted() {
        let dir = tempfile::tempdir().unwrap();
        let lock = LockFile::new(vec![entry("b.wasm", b"b"), entry("a.wasm", b"a")]).unwrap();
        assert_eq!(lock.graphs[0].file, "a.wasm");
        let path = lock.write(dir.path()).unwrap();
        assert_eq!(path, dir.path().join(LOCK_FILE));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("version = 1"), "{text}");
        assert!(text.contains("[[graph]]"), "{text}");
        assert_eq!(LockFile::read(dir.path()).unwrap(), lock);
    }

    #[test]
    fn a_missing_lock_file_says_how_to_write_one() {
        let dir = tempfile::tempdir().unwrap();
        let err = LockFile::read(dir.path()).unwrap_err();
        assert_eq!(err.path, dir.path().join(LOCK_FILE));
        assert!(err.message.contains("sandgraph lock --graphs"), "{err}");
    }

    #[test]
    fn bad_lock_files_are_refused_with_the_reason() {
        let digest = "0".repeat(64);
        let cases = [
            ("version = 2\n", "version 2 is not supported"),
            ("version = 1\nextra = 1\n", "not a valid lock file"),
            (
                "version = 1\n[[graph]]\nfile = \"a.wasm\"\nname = \"a\"\nsha256 = \"xyz\"\n",
                "64 hex digits",
            ),
            (
                &format!(
                    "version = 1\n[[graph]]\nfile = \"../a.wasm\"\nname = \"a\"\nsha256 = \"{digest}\"\n"
                ),
                "not a component file name",
            ),
            (
                &format!(
                    "version = 1\n[[graph]]\nfile = \"a.wasm\"\nname = \"a\"\nsha256 = \"{digest}\"\n\
                     [[graph]]\nfile = \"a.wasm\"\nname = \"b\"\nsha256 = \"{digest}\"\n"
                ),
                "pinned twice",
            ),
        ];
        for (text, expected) in cases {
            let err = LockFile::parse(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text:?}: {err}");
        }
    }

    #[test]
    fn admit_tells_changed_from_extra_and_missing_lists_the_absent() {
        let dir = Path::new("graphs");
        let lock = LockFile::new(vec![entry("a.wasm", b"a"), entry("b.wasm", b"b")]).unwrap();
        assert_eq!(
            lock.admit(dir, &dir.join("a.wasm"), &sha256(b"a"))
                .unwrap()
                .name,
            "a"
        );
        let changed = lock
            .admit(dir, &dir.join("a.wasm"), &sha256(b"A"))
            .unwrap_err();
        assert_eq!(
            changed.kind,
            MismatchKind::Changed {
                locked: sha256(b"a"),
                found: sha256(b"A")
            }
        );
        let text = changed.to_string();
        assert!(
            text.starts_with("graphs/a.wasm: changed since it was locked"),
            "{text}"
        );
        assert!(text.contains("graphs/sandgraph.lock pins"), "{text}");
        let extra = lock
            .admit(dir, &dir.join("c.wasm"), &sha256(b"c"))
            .unwrap_err();
        assert_eq!(extra.kind, MismatchKind::Extra);
        assert!(
            extra.to_string().contains("not in graphs/sandgraph.lock"),
            "{extra}"
        );
        let missing = lock.missing(dir, ["a.wasm"]);
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].file, dir.join("b.wasm"));
        assert!(missing[0].to_string().contains("missing"), "{}", missing[0]);
    }
}
