//! Admission: whether a component may be mounted at all, decided from its
//! bytes before anything is compiled or run.
//!
//! Two checks, each on when the host asks for it:
//! - **locked** ([`RegistryOptions::locked`](crate::RegistryOptions::locked),
//!   `--locked`): every folder holds a `sandgraph.lock` (read once, when the
//!   registry opens), and a file of a folder mounts only when the lock pins
//!   its name with its sha256. [`Registry::open`](crate::Registry::open)
//!   fails as a whole when a folder has no lock, or when the `*.wasm` files
//!   differ from the lock (a changed, missing or extra graph). While
//!   watching, a file that changes, or appears, against the lock is refused
//!   and not mounted; a graph it replaced is unmounted (the registry never
//!   serves what is not on disk).
//! - **trusted keys** ([`RegistryOptions::trusted_keys`](crate::RegistryOptions::trusted_keys),
//!   `--trusted-keys DIR`): a file mounts only with a `<file>.sig` sidecar
//!   that signs its sha256 with one of the keys. A graph refused is a mount
//!   warning like any other mount failure (skipped; startup fails with
//!   `strict`).
//!
//! Components mounted as bytes ([`Registry::mount_bytes`](crate::Registry::mount_bytes))
//! have no lock entry and no sidecar, so either check refuses them; graphs
//! already loaded by the caller ([`Registry::register`](crate::Registry::register))
//! are the caller's responsibility.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sandgraph_artifact::{Digest, LOCK_FILE, LockFile, LockMismatch, TrustedKeys, signature_path};

use crate::error::{MountErrorKind, MountWarning, RegistryError};
use crate::tool::Built;

/// The locks and keys a registry admits components by.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    /// The lock of each folder, when locked.
    locks: Option<BTreeMap<PathBuf, LockFile>>,
    trusted: Option<TrustedKeys>,
}

/// A sidecar as last seen (size, mtime): the watcher remounts a graph whose
/// signature changed even when the component did not.
pub(crate) type SidecarStamp = Option<(u64, Option<SystemTime>)>;

impl Admission {
    /// Reads the lock of every folder of `dirs` when `locked`.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Locked`] listing every folder whose lock is
    /// missing, unreadable or malformed.
    pub(crate) fn new(
        dirs: &[PathBuf],
        locked: bool,
        trusted: Option<TrustedKeys>,
    ) -> Result<Admission, RegistryError> {
        let locks = if locked {
            let mut locks = BTreeMap::new();
            let mut problems = Vec::new();
            for dir in dirs {
                match LockFile::read(dir) {
                    Ok(lock) => {
                        locks.insert(dir.clone(), lock);
                    }
                    Err(e) => problems.push(e.to_string()),
                }
            }
            if !problems.is_empty() {
                return Err(RegistryError::Locked(problems));
            }
            Some(locks)
        } else {
            None
        };
        Ok(Admission { locks, trusted })
    }

    /// Whether anything is checked.
    pub(crate) fn is_open(&self) -> bool {
        self.locks.is_none() && self.trusted.is_none()
    }

    /// The pinned files missing from the folders, given the files found.
    pub(crate) fn missing(&self, found: &[PathBuf]) -> Vec<LockMismatch> {
        let Some(locks) = &self.locks else {
            return Vec::new();
        };
        locks
            .iter()
            .flat_map(|(dir, lock)| {
                let names = found
                    .iter()
                    .filter(|p| p.parent() == Some(dir.as_path()))
                    .filter_map(|p| p.file_name().and_then(|n| n.to_str()));
                lock.missing(dir, names)
            })
            .collect()
    }

    /// Whether the component at `path`, whose bytes have the sha256
    /// `digest` (hex), may be mounted; when locked, the graph name its lock
    /// entry pins (see [`Admitted::check`]).
    ///
    /// # Errors
    ///
    /// [`MountErrorKind::Unpinned`] when it differs from its folder's lock
    /// (or is in no locked folder), [`MountErrorKind::Signature`] when its
    /// signature is missing or refused.
    pub(crate) fn admit(&self, path: &Path, digest: &str) -> Result<Admitted, MountWarning> {
        let mut admitted = Admitted { pinned_name: None };
        if self.is_open() {
            return Ok(admitted);
        }
        let digest: Digest = digest.parse().map_err(|m: String| {
            MountWarning::new(path, MountErrorKind::Io, format!("internal: {m}"))
        })?;
        if let Some(locks) = &self.locks {
            let dir = path.parent().unwrap_or(Path::new(""));
            let Some(lock) = locks.get(dir) else {
                return Err(MountWarning::new(
                    path,
                    MountErrorKind::Unpinned,
                    "not in a locked graph folder: with --locked only the graphs of the folders' \
                     sandgraph.lock files are mounted"
                        .to_owned(),
                ));
            };
            let entry = lock
                .admit(dir, path, &digest)
                .map_err(|m| MountWarning::new(path, MountErrorKind::Unpinned, reason(&m)))?;
            admitted.pinned_name = Some(entry.name.clone());
        }
        if let Some(trusted) = &self.trusted {
            sandgraph_artifact::verify(path, &digest, trusted)
                .map_err(|e| MountWarning::new(path, MountErrorKind::Signature, e.error.message))?;
        }
        Ok(admitted)
    }

    /// The sidecar of `path` as it is now, when signatures are checked.
    pub(crate) fn sidecar_stamp(&self, path: &Path) -> SidecarStamp {
        self.trusted.as_ref()?;
        let meta = std::fs::metadata(signature_path(path)).ok()?;
        Some((meta.len(), meta.modified().ok()))
    }
}

/// A component admitted from its bytes; what remains to check once it is
/// built.
pub(crate) struct Admitted {
    /// The graph name its lock entry pins, when locked.
    pinned_name: Option<String>,
}

impl Admitted {
    /// `built` if it is the graph the lock names: the same bytes describe
    /// the same graph, unless the guest's `describe` is not deterministic.
    ///
    /// # Errors
    ///
    /// [`MountErrorKind::Unpinned`] when the graph's name is not the one
    /// pinned.
    pub(crate) fn check(&self, path: &Path, built: Built) -> Result<Built, MountWarning> {
        match &self.pinned_name {
            Some(name) if name != built.tool.name() => Err(MountWarning::new(
                path,
                MountErrorKind::Unpinned,
                format!(
                    "the graph is named \"{}\" but its folder's {LOCK_FILE} pins the name \"{name}\"; \
                     run `sandgraph lock` again if the change is intended",
                    built.tool.name()
                ),
            )),
            _ => Ok(built),
        }
    }
}

/// The mismatch's sentence without its leading file name (a mount warning
/// names the file itself).
fn reason(mismatch: &LockMismatch) -> String {
    let full = mismatch.to_string();
    let prefix = format!("{}: ", mismatch.file.display());
    full.strip_prefix(&prefix).unwrap_or(&full).to_owned()
}
