//! Following the graph folders while the host runs: a notify watcher, a
//! debounce, and a rescan that diffs the folders by (path, sha256).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use notify::event::{AccessKind, AccessMode, EventKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use sandgraph_runtime::CancellationToken;
use sandgraph_store::sha256_hex;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::error::{MountErrorKind, RegistryError};
use crate::registry::{FileStatus, Registry, RegistryEvent, Tracked, list_wasm, read_bounded};
use crate::tool::ToolSource;

/// Quiet time after the last file-system event before the folders are
/// rescanned. A file is mounted only once it has not changed for this long,
/// so a writer that pauses for less than this between writes is never
/// mounted half-written; slower writers should write to another name and
/// rename (files not ending in `.wasm` are ignored).
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// Longest a rescan waits while events keep coming.
const MAX_WAIT: Duration = Duration::from_secs(2);

/// Keeps the registry following its folders; dropping it stops watching.
pub struct WatchHandle {
    _watcher: RecommendedWatcher,
    stop: CancellationToken,
}

impl std::fmt::Debug for WatchHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchHandle").finish_non_exhaustive()
    }
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A file seen changing recently: its size and mtime, and since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Observation {
    size: u64,
    mtime: Option<SystemTime>,
    since: Instant,
}

/// Whether a notify event can change what the folders hold. Opening and
/// reading files (which rescans do) is not.
fn relevant(event: &notify::Event) -> bool {
    match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => {}
        EventKind::Access(_) => return false,
        _ => {}
    }
    event.need_rescan()
        || event.paths.is_empty()
        || event
            .paths
            .iter()
            .any(|p| p.extension().is_some_and(|e| e == "wasm" || e == "sig"))
}

impl Registry {
    /// Starts following the folders: a `.wasm` file added, replaced or
    /// removed is mounted, remounted or unmounted, with a
    /// [`RegistryEvent`] each. Changes are picked up [`DEBOUNCE`] after the
    /// last file-system event; a file still being written waits for the
    /// next pass. A file that fails to mount emits
    /// [`RegistryEvent::Failed`] and is retried when it changes (or, for a
    /// duplicate name, when a name is freed). A replacement that fails
    /// leaves its name unmounted: the folder is the source of truth.
    ///
    /// Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Watch`] when there is no tokio runtime or a folder
    /// cannot be watched.
    pub fn watch(&self) -> Result<WatchHandle, RegistryError> {
        let first = self.dirs().first().cloned().unwrap_or_default();
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| RegistryError::Watch {
            path: first.clone(),
            message: "watching needs a tokio runtime".into(),
        })?;
        let (tx, rx) = mpsc::unbounded_channel::<()>();
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            let wake = match res {
                Ok(event) => relevant(&event),
                Err(e) => {
                    tracing::warn!("watching graph folders: {e}");
                    true
                }
            };
            if wake {
                // The receiver is gone only after the watch stopped.
                let _ = tx.send(());
            }
        })
        .map_err(|e| RegistryError::Watch {
            path: first,
            message: e.to_string(),
        })?;
        for dir in self.dirs() {
            watcher
                .watch(dir, RecursiveMode::NonRecursive)
                .map_err(|e| RegistryError::Watch {
                    path: dir.clone(),
                    message: e.to_string(),
                })?;
        }
        let stop = CancellationToken::new();
        runtime.spawn(watch_loop(self.clone(), rx, stop.clone()));
        Ok(WatchHandle {
            _watcher: watcher,
            stop,
        })
    }

    /// One pass over the folders; `true` when some file was still changing
    /// and needs another pass.
    pub(crate) async fn rescan(&self) -> bool {
        let _scan = self.inner.scan.lock().await;
        let (files, errors) = list_wasm(self.dirs());
        let mut unreadable = BTreeSet::new();
        for e in errors {
            tracing::warn!("{e}");
            if let RegistryError::Dir { path, .. } = e {
                unreadable.insert(path);
            }
        }
        let present: BTreeMap<PathBuf, std::fs::Metadata> = files.into_iter().collect();
        let tracked: BTreeMap<PathBuf, Tracked> = self.state().files.clone();
        let mut postponed = false;
        // Files mounted (or failed) in this pass: not retried again in it.
        let mut applied = BTreeSet::new();

        let mut freed = self.forget_removed(&tracked, &present, &unreadable);

        let now = SystemTime::now();
        for (path, meta) in &present {
            let prev = tracked.get(path);
            let (size, mtime) = (meta.len(), meta.modified().ok());
            let sidecar = self.inner.admission.sidecar_stamp(path);
            if prev.is_some_and(|t| t.size == size && t.mtime == mtime && t.sidecar == sidecar) {
                continue;
            }
            if !settled(self, path, size, mtime, now) {
                postponed = true;
                continue;
            }
            let Some(bytes) = read_stable(path, size, mtime) else {
                postponed = true;
                continue;
            };
            self.state().observations.remove(path);
            let digest = sha256_hex(&bytes);
            if let Some(t) = prev
                && t.digest == digest
                && t.sidecar == sidecar
            {
                // Touched, same content.
                if let Some(t) = self.state().files.get_mut(path) {
                    t.size = size;
                    t.mtime = mtime;
                }
                continue;
            }
            // As it is now: a contest settled earlier in this pass may have
            // unmounted it.
            let old = match self.state().files.get(path).map(|t| &t.status) {
                Some(FileStatus::Mounted(name)) => Some(name.clone()),
                _ => None,
            };
            freed |= self
                .apply(path, bytes, digest, size, mtime, old.as_deref())
                .await;
            applied.insert(path.clone());
        }

        if freed {
            self.retry_duplicates(&applied).await;
        }
        self.retry_uncontested().await;
        postponed
    }

    /// Forgets the tracked files that are gone (not those of a folder that
    /// could not be read this pass), unmounting their graphs; `true` when
    /// a name was freed.
    fn forget_removed(
        &self,
        tracked: &BTreeMap<PathBuf, Tracked>,
        present: &BTreeMap<PathBuf, std::fs::Metadata>,
        unreadable: &BTreeSet<PathBuf>,
    ) -> bool {
        let mut freed = false;
        for (path, t) in tracked {
            let in_unreadable = path.parent().is_some_and(|d| unreadable.contains(d));
            if present.contains_key(path) || in_unreadable {
                continue;
            }
            let mut state = self.state();
            state.files.remove(path);
            state.observations.remove(path);
            drop(state);
            match &t.status {
                FileStatus::Mounted(name) => freed |= self.unmount_file(name, path),
                // One claimant fewer: another may now be the only one.
                FileStatus::Contested(_) => freed = true,
                FileStatus::Failed(_) => {}
            }
        }
        freed
    }

    /// Mounts (or remounts over `old`) the new content of `path`; `true`
    /// when a name was freed.
    async fn apply(
        &self,
        path: &Path,
        bytes: Vec<u8>,
        digest: String,
        size: u64,
        mtime: Option<SystemTime>,
        old: Option<&str>,
    ) -> bool {
        let sidecar = self.inner.admission.sidecar_stamp(path);
        let built = match self.inner.admission.admit(path, &digest) {
            Ok(admitted) => self
                .build(bytes, ToolSource::File(path.to_path_buf()))
                .await
                .and_then(|built| admitted.check(path, built)),
            Err(refused) => Err(refused),
        };
        let contest = match &built {
            Ok(b) => self.claimants(b.tool.name(), path),
            Err(_) => Vec::new(),
        };
        let mut claimed = None;
        let outcome = match (built, old) {
            (Ok(built), old) if !contest.is_empty() => {
                // Fail closed: neither this file nor the others claiming
                // its name keep it.
                let name = built.tool.name().to_owned();
                if let Some(old) = old {
                    self.unmount_file(old, path);
                }
                let mut all = contest;
                all.push(path.to_path_buf());
                all.sort();
                self.contest(&name, &all, path);
                claimed = Some(name.clone());
                Err(crate::registry::contested_warning(path, &name, &all))
            }
            (Ok(built), Some(old)) => self.replace(old, path, built),
            (Ok(built), None) => self.insert(built, None),
            (Err(w), old) => {
                if let Some(old) = old {
                    self.unmount_file(old, path);
                }
                Err(w)
            }
        };
        let (status, freed) = match outcome {
            Ok((tool, notices)) => {
                notices.iter().for_each(|n| self.log(n));
                let freed = old.is_some_and(|o| o != tool.name());
                (FileStatus::Mounted(tool.name().to_owned()), freed)
            }
            Err(w) => {
                self.fail(&w);
                let status = match claimed {
                    Some(name) => FileStatus::Contested(name),
                    None => FileStatus::Failed(w.kind),
                };
                (status, old.is_some())
            }
        };
        self.state().files.insert(
            path.to_path_buf(),
            Tracked {
                digest,
                size,
                mtime,
                sidecar,
                status,
            },
        );
        freed
    }

    /// Logs `w` and emits it as [`RegistryEvent::Failed`].
    fn fail(&self, w: &crate::MountWarning) {
        self.log(w);
        self.emit(RegistryEvent::Failed {
            path: w.path.clone(),
            reason: sandgraph_core::text::guest_message(&w.reason),
        });
    }

    /// The files but `path` whose graph claims `name` (mounted under it,
    /// or contesting it).
    fn claimants(&self, name: &str, path: &Path) -> Vec<PathBuf> {
        self.state()
            .files
            .iter()
            .filter(|(p, t)| {
                p.as_path() != path
                    && matches!(&t.status, FileStatus::Mounted(n) | FileStatus::Contested(n) if n == name)
            })
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Marks the files of `all` but `newcomer` as contesting `name`: the
    /// one mounted under it is unmounted, and each is reported failed.
    fn contest(&self, name: &str, all: &[PathBuf], newcomer: &Path) {
        for other in all.iter().filter(|p| p.as_path() != newcomer) {
            let was_mounted = {
                let mut state = self.state();
                match state.files.get_mut(other) {
                    Some(t) => {
                        let mounted = t.status == FileStatus::Mounted(name.to_owned());
                        t.status = FileStatus::Contested(name.to_owned());
                        mounted
                    }
                    None => false,
                }
            };
            if was_mounted {
                self.unmount_file(name, other);
                self.fail(&crate::registry::contested_warning(other, name, all));
            }
        }
    }

    /// Mounts the files contesting a name they are now the only one to
    /// claim (the others left or took another name), as a fresh start
    /// would.
    async fn retry_uncontested(&self) {
        let contesting: Vec<(PathBuf, String, Tracked)> = self
            .state()
            .files
            .iter()
            .filter_map(|(p, t)| match &t.status {
                FileStatus::Contested(name) => Some((p.clone(), name.clone(), t.clone())),
                _ => None,
            })
            .collect();
        for (path, name, t) in contesting {
            if !self.claimants(&name, &path).is_empty() {
                continue;
            }
            let Some(bytes) = read_stable(&path, t.size, t.mtime) else {
                continue;
            };
            let digest = sha256_hex(&bytes);
            self.apply(&path, bytes, digest, t.size, t.mtime, None)
                .await;
        }
    }

    /// Mounts again the files that failed on a duplicate name, but those
    /// of `applied`.
    async fn retry_duplicates(&self, applied: &BTreeSet<PathBuf>) {
        let waiting: Vec<(PathBuf, Tracked)> = self
            .state()
            .files
            .iter()
            .filter(|(p, t)| {
                t.status == FileStatus::Failed(MountErrorKind::Duplicate) && !applied.contains(*p)
            })
            .map(|(p, t)| (p.clone(), t.clone()))
            .collect();
        for (path, t) in waiting {
            let Some(bytes) = read_stable(&path, t.size, t.mtime) else {
                continue;
            };
            let digest = sha256_hex(&bytes);
            self.apply(&path, bytes, digest, t.size, t.mtime, None)
                .await;
        }
    }
}

/// Whether `path` has stopped changing: its mtime is at least [`DEBOUNCE`]
/// old, or (for an mtime in the future or a coarse clock) its size and
/// mtime were the same at a pass at least [`DEBOUNCE`] ago.
fn settled(
    registry: &Registry,
    path: &Path,
    size: u64,
    mtime: Option<SystemTime>,
    now: SystemTime,
) -> bool {
    let old_enough = mtime
        .and_then(|m| now.duration_since(m).ok())
        .is_some_and(|age| age >= DEBOUNCE);
    if old_enough {
        return true;
    }
    let mut state = registry.state();
    let obs = &mut state.observations;
    match obs.get(path) {
        Some(o) if o.size == size && o.mtime == mtime => o.since.elapsed() >= DEBOUNCE,
        _ => {
            obs.insert(
                path.to_path_buf(),
                Observation {
                    size,
                    mtime,
                    since: Instant::now(),
                },
            );
            false
        }
    }
}

/// The bytes of `path` if it still has the size and mtime it was listed
/// with after reading it, i.e. no writer got in between.
fn read_stable(path: &Path, size: u64, mtime: Option<SystemTime>) -> Option<Vec<u8>> {
    let bytes = read_bounded(path).ok()?;
    let after = std::fs::metadata(path).ok()?;
    (bytes.len() as u64 == size && after.len() == size && after.modified().ok() == mtime)
        .then_some(bytes)
}

async fn watch_loop(
    registry: Registry,
    mut rx: mpsc::UnboundedReceiver<()>,
    stop: CancellationToken,
) {
    // A first pass picks up what changed between `open` and `watch`.
    let mut due = Some(Instant::now());
    let mut first_event: Option<Instant> = None;
    loop {
        let wait = async {
            match due {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            msg = rx.recv() => match msg {
                Some(()) => {
                    let now = Instant::now();
                    let first = *first_event.get_or_insert(now);
                    due = Some((now + DEBOUNCE).min(first + MAX_WAIT));
                }
                None => return,
            },
            () = wait => {
                due = None;
                first_event = None;
                let postponed = tokio::select! {
                    () = stop.cancelled() => return,
                    p = registry.rescan() => p,
                };
                if postponed {
                    due = Some(Instant::now() + DEBOUNCE);
                }
            }
        }
    }
}
