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
    /// The lock of each folder that has one (every folder when locked).
    locks: BTreeMap<PathBuf, LockFile>,
    /// Whether the locks are enforced (`--locked`); else they only bind
    /// the names of the components they pin (see [`Admitted::check`]).
    locked: bool,
    trusted: Option<TrustedKeys>,
}

/// A sidecar as last seen (size, mtime): the watcher remounts a graph whose
/// signature changed even when the component did not.
pub(crate) type SidecarStamp = Option<(u64, Option<SystemTime>)>;

impl Admission {
    /// Reads the lock of every folder of `dirs`: each must have one when
    /// `locked`; otherwise a folder's lock, when it has a readable one,
    /// only binds the names of the components it pins.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Locked`] listing every folder whose lock is
    /// missing, unreadable or malformed, when `locked`.
    pub(crate) fn new(
        dirs: &[PathBuf],
        locked: bool,
        trusted: Option<TrustedKeys>,
    ) -> Result<Admission, RegistryError> {
        let mut locks = BTreeMap::new();
        let mut problems = Vec::new();
        for dir in dirs {
            if !locked && !dir.join(LOCK_FILE).exists() {
                continue;
            }
            match LockFile::read(dir) {
                Ok(lock) => {
                    locks.insert(dir.clone(), lock);
                }
                Err(e) if locked => problems.push(e.to_string()),
                // Not enforced: the folder's names are then bound by its
                // file names alone.
                Err(e) => tracing::warn!("{e}; its pins are ignored"),
            }
        }
        if !problems.is_empty() {
            return Err(RegistryError::Locked(problems));
        }
        Ok(Admission {
            locks,
            locked,
            trusted,
        })
    }

    /// Whether anything is checked or pinned.
    pub(crate) fn is_open(&self) -> bool {
        self.locks.is_empty() && !self.locked && self.trusted.is_none()
    }

    /// The pinned files missing from the folders, given the files found.
    pub(crate) fn missing(&self, found: &[PathBuf]) -> Vec<LockMismatch> {
        if !self.locked {
            return Vec::new();
        }
        self.locks
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
        let mut admitted = Admitted {
            pinned_name: None,
            enforced: self.locked,
            signed_name: None,
        };
        if self.is_open() {
            return Ok(admitted);
        }
        let digest: Digest = digest
            .parse()
            .map_err(|m: sandgraph_artifact::FormatError| {
                MountWarning::new(path, MountErrorKind::Io, format!("internal: {m}"))
            })?;
        let dir = path.parent().unwrap_or(Path::new(""));
        match self.locks.get(dir) {
            Some(lock) => match lock.admit(dir, path, &digest) {
                Ok(entry) => admitted.pinned_name = Some(entry.name.clone()),
                Err(m) if self.locked => {
                    return Err(MountWarning::new(
                        path,
                        MountErrorKind::Unpinned,
                        reason(&m),
                    ));
                }
                // Not enforced: a file the lock does not pin (or pins with
                // other bytes) is bound by its file name alone.
                Err(_) => {}
            },
            None if self.locked => {
                return Err(MountWarning::new(
                    path,
                    MountErrorKind::Unpinned,
                    "not in a locked graph folder: with --locked only the graphs of the folders' \
                     sandgraph.lock files are mounted"
                        .to_owned(),
                ));
            }
            None => {}
        }
        if let Some(trusted) = &self.trusted {
            let verified = sandgraph_artifact::verify(path, &digest, trusted)
                .map_err(|e| MountWarning::new(path, MountErrorKind::Signature, e.error.message))?;
            admitted.signed_name = Some(verified.name);
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
    /// The graph name its folder's lock pins for these bytes, if any.
    pinned_name: Option<String>,
    /// Whether the lock is enforced (`--locked`).
    enforced: bool,
    /// The graph name its signature vouches for, when signatures are
    /// checked.
    signed_name: Option<String>,
}

impl Admitted {
    /// `built` if it is the graph the lock names (when locked: the same
    /// bytes describe the same graph, unless the guest's `describe` is not
    /// deterministic), bound to its name or not (see [`bind`]).
    ///
    /// # Errors
    ///
    /// [`MountErrorKind::Unpinned`] when locked and the graph's name is
    /// not the one pinned, [`MountErrorKind::Signature`] when it is not
    /// the one its signature vouches for.
    pub(crate) fn check(&self, path: &Path, mut built: Built) -> Result<Built, MountWarning> {
        if let Some(signed) = &self.signed_name
            && signed != built.tool.name()
        {
            return Err(MountWarning::new(
                path,
                MountErrorKind::Signature,
                format!(
                    "the graph is named \"{}\" but its signature {} vouches for the graph \
                     \"{signed}\"; sign it again if the name changed on purpose",
                    built.tool.name(),
                    signature_path(path).display()
                ),
            ));
        }
        match &self.pinned_name {
            Some(name) if self.enforced && name != built.tool.name() => Err(MountWarning::new(
                path,
                MountErrorKind::Unpinned,
                format!(
                    "the graph is named \"{}\" but its folder's {LOCK_FILE} pins the name \"{name}\"; \
                     run `sandgraph lock` again if the change is intended",
                    built.tool.name()
                ),
            )),
            _ => {
                bind(path, self.pinned_name.as_deref(), &mut built);
                Ok(built)
            }
        }
    }
}

/// Binds the graph `built` from the file `path` to its name, or not: a
/// component mounts under its own name only when the operator chose it for
/// that name: the file is named after the graph (`<name>.wasm`, a `-` in
/// the file name standing for a `_` of the graph name, as crate folders
/// name graphs), or the folder's `sandgraph.lock` pins these bytes under
/// that name (`pinned`). Any other component is marked unbound, and
/// [`crate::Registry`] refuses to mount it ([`unbound`]): its grants,
/// `tools` reachability, threads and tool name would otherwise follow a
/// name it chose itself.
pub(crate) fn bind(path: &Path, pinned: Option<&str>, built: &mut Built) {
    let name = built.tool.name();
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    if stem == name || stem.replace('-', "_") == name || pinned == Some(name) {
        return;
    }
    built.tool.unbind();
}

/// Why the unbound graph `name` from `path` is not mounted (see [`bind`]).
pub(crate) fn unbound(path: &Path, name: &str) -> MountWarning {
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    MountWarning::new(
        path,
        MountErrorKind::Unbound,
        format!(
            "the component calls itself \"{name}\" but the file is {file}, not {name}.wasm, and \
             its folder's {LOCK_FILE} does not pin it under that name: it is not mounted, so that \
             no component takes a name's grants, threads or tool by calling itself that name; \
             rename the file to {name}.wasm or pin it with `sandgraph lock`"
        ),
    )
}

/// The mismatch's sentence without its leading file name (a mount warning
/// names the file itself).
fn reason(mismatch: &LockMismatch) -> String {
    let full = mismatch.to_string();
    let prefix = format!("{}: ", mismatch.file.display());
    full.strip_prefix(&prefix).unwrap_or(&full).to_owned()
}
