//! The compile cache: a folder of content-addressed files that any number
//! of sandgraph processes share. Compiled artifacts are keyed by (engine
//! fingerprint, wasm digest), graph specs by wasm digest, and the
//! components that failed to load like artifacts:
//!
//! ```text
//! <dir>/key                                  32 random bytes, 0600
//! <dir>/v1/artifacts/<engine>/<wasm digest>
//! <dir>/v1/specs/<wasm digest>
//! <dir>/v1/failures/<engine>/<wasm digest>
//! ```
//!
//! Every entry is [`MAGIC`], the length of its body, an HMAC-SHA256 under
//! the key bound to its kind and names, then the body; it is used only when
//! it authenticates. An entry is written to a unique temporary file in its
//! folder, fsynced and renamed into place, so a reader sees a whole entry
//! or none, and concurrent writers of one entry each rename a whole file
//! (the last one stays; all hold the same bytes). The folder is kept under
//! a total size by evicting the least recently used entries after writes.

use std::io::{Read, Write};
#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::StoreError;

/// Longest failure message kept in a [`LoadFailure`] entry; a longer one is
/// cut (and marked so). Messages quote guest output (a panic message, a
/// backtrace), and a hostile component must not grow the cache with them.
pub const MAX_LOAD_FAILURE_MESSAGE_BYTES: usize = 4096;

/// The largest artifact entry written or read (its body: the compiled
/// component as the caller stores it). Compiled code runs to about 4x its
/// wasm and components are at most 64 MiB, so a real artifact is well
/// under this; the registry bounds a decompressed artifact by it too.
pub const MAX_ARTIFACT_BYTES: u64 = 1 << 30;

/// The largest spec entry read: a graph's spec is a few KiB of JSON (its
/// nodes, edges and schemas); 16 MiB leaves room for generous schemas and
/// keeps a planted file from being read whole.
pub const MAX_SPEC_BYTES: u64 = 16 << 20;

/// The largest load failure entry read: the JSON of a [`LoadFailure`],
/// whose message is at most [`MAX_LOAD_FAILURE_MESSAGE_BYTES`] (escaped, up
/// to 6 bytes per byte), and a few numbers.
const MAX_FAILURE_BYTES: u64 = 64 << 10;

/// The default bound of the folder's total size. An artifact of a graph
/// with a language runtime inside is 8-15 MB compressed (CPython, a JS
/// engine), a Rust graph's well under 1 MB: 4 GiB keeps a few hundred
/// graph versions compiled per engine, while a cache that nothing else
/// prunes (every new guest digest or sandgraph version adds entries) stays
/// a small share of a disk. See [`CompileCache::with_max_bytes`].
pub const DEFAULT_MAX_CACHE_BYTES: u64 = 4 << 30;

/// How an entry begins: the format's name and version.
const MAGIC: &[u8; 8] = b"sgcache1";

/// The header: [`MAGIC`], the body length (u64 little-endian), the HMAC.
const HEADER_BYTES: usize = MAGIC.len() + 8 + 32;

/// The folder of this format's entries, under the cache folder.
const VERSION_DIR: &str = "v1";

/// A temporary file older than this is a killed writer's leftover (a write
/// takes at most seconds) and is removed when the folder is bounded.
const STALE_TEMP: Duration = Duration::from_secs(3600);

/// How every temporary file's name begins (hidden, never an entry).
const TEMP_PREFIX: &str = ".tmp-";

/// The longest digest or engine fingerprint used as a file name.
const MAX_NAME_BYTES: usize = 128;

/// Why a component failed to load, remembered so the next start skips it
/// at once. The caller decides what is worth remembering (failures caused
/// by the component itself, not by the host's state at the time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadFailure {
    /// The error code (`load`).
    pub code: String,
    /// The error message, at most [`MAX_LOAD_FAILURE_MESSAGE_BYTES`].
    pub message: String,
    /// Unix milliseconds when it failed.
    pub at_ms: u64,
    /// The load limits in force then: wall-clock milliseconds, fuel and
    /// memory bytes. A caller with more generous limits may retry.
    pub timeout_ms: u64,
    /// See `timeout_ms`.
    pub fuel: u64,
    /// See `timeout_ms`.
    pub memory_bytes: u64,
}

impl LoadFailure {
    /// `message` cut to [`MAX_LOAD_FAILURE_MESSAGE_BYTES`] at a character
    /// boundary, with ` [cut]` appended when it was.
    pub(crate) fn bounded_message(message: &str) -> String {
        const MARK: &str = " [cut]";
        if message.len() <= MAX_LOAD_FAILURE_MESSAGE_BYTES {
            return message.to_owned();
        }
        let mut end = MAX_LOAD_FAILURE_MESSAGE_BYTES - MARK.len();
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}{MARK}", &message[..end])
    }
}

/// The compile cache in a folder: artifacts, specs and load failures,
/// every entry authenticated. Cheap to clone; any number of processes may
/// use one folder at once.
#[derive(Clone, Debug)]
pub struct CompileCache {
    inner: Arc<Inner>,
    /// The bound of the folder's total size.
    max_bytes: u64,
}

#[derive(Debug)]
struct Inner {
    /// The cache folder.
    dir: PathBuf,
    /// `<dir>/key`.
    key: KeyFile,
}

/// An artifact read back from the cache that authenticated.
#[derive(Debug)]
pub struct CachedArtifact {
    /// The serialized compiled component.
    pub bytes: Vec<u8>,
}

/// The kinds of entry: the folder each lives in and the name its HMAC is
/// bound to, so an entry copied to another kind fails.
#[derive(Clone, Copy)]
enum Kind {
    Artifact,
    Spec,
    Failure,
}

impl Kind {
    fn folder(self) -> &'static str {
        match self {
            Kind::Artifact => "artifacts",
            Kind::Spec => "specs",
            Kind::Failure => "failures",
        }
    }

    /// The largest body of an entry of this kind.
    fn max_body(self) -> u64 {
        match self {
            Kind::Artifact => MAX_ARTIFACT_BYTES,
            Kind::Spec => MAX_SPEC_BYTES,
            Kind::Failure => MAX_FAILURE_BYTES,
        }
    }

    /// What an entry of this kind is called in messages.
    fn noun(self) -> &'static str {
        match self {
            Kind::Artifact => "artifact",
            Kind::Spec => "spec",
            Kind::Failure => "load failure",
        }
    }
}

/// The key that authenticates every entry of the cache: 32 random bytes in
/// `<dir>/key`, 0600, made on first use. Whoever can write the cache's
/// entries (a shared cache, a restored CI cache) but not read the key
/// cannot forge an artifact the host will deserialize, nor a spec that
/// renames a graph. The file is opened without following a symbolic link
/// and used only when it is a regular file of 32 bytes owned by this user
/// that no one else may read or write; otherwise the cache is not used.
struct KeyFile {
    path: PathBuf,
    key: OnceLock<Result<[u8; 32], String>>,
    /// Whether a failure to get the key has been reported (logged once, or
    /// returned by [`CompileCache::check_key`] to a caller who reports it).
    reported: AtomicBool,
}

impl std::fmt::Debug for KeyFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key itself.
        f.debug_struct("KeyFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl KeyFile {
    fn result(&self) -> &Result<[u8; 32], String> {
        self.key.get_or_init(|| {
            load_or_make(&self.path)
                .map_err(|e| format!("compile cache key {}: {e}", self.path.display()))
        })
    }

    /// The key, or `None` when it cannot be read, made, or trusted (then no
    /// entry is trusted: every graph is compiled and described). The reason
    /// is logged once.
    fn get(&self) -> Option<&[u8; 32]> {
        match self.result() {
            Ok(key) => Some(key),
            Err(e) => {
                if !self.reported.swap(true, Ordering::Relaxed) {
                    tracing::warn!("{e}; the compile cache is not used");
                }
                None
            }
        }
    }
}

/// 32 bytes from the kernel's random source.
fn random_key() -> std::io::Result<[u8; 32]> {
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
    Ok(key)
}

/// Reads the key at `path`, or makes it when there is none: written whole
/// to a temporary file (0600) and linked to `path`, so a process reading
/// it at the same time never sees it half written, and of two processes
/// making it at once the first link wins and both use that key.
fn load_or_make(path: &Path) -> std::io::Result<[u8; 32]> {
    match read_private(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        read => return read,
    }
    let key = random_key()?;
    let temp = temp_name(path);
    let mut file = new_private_file(&temp)?;
    let made = file
        .write_all(&key)
        .and_then(|()| file.sync_all())
        // A link never replaces what is there, and never follows a
        // symbolic link planted at `path` (one there is "already exists",
        // and then refused by `read_private`).
        .and_then(|()| std::fs::hard_link(&temp, path));
    let _ = std::fs::remove_file(&temp);
    match made {
        Ok(()) => Ok(key),
        // Another process made it first: use theirs, with the same checks.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_private(path),
        Err(e) => Err(e),
    }
}

/// Opens `path` for reading without following a symbolic link
/// (`O_NOFOLLOW`) and without blocking on a FIFO planted there
/// (`O_NONBLOCK`), and checks it is a regular file; `Err` with the reason.
fn open_regular(path: &Path) -> std::io::Result<(std::fs::File, std::fs::Metadata)> {
    let refused = |why: &str| std::io::Error::other(format!("{why}: refused"));
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    let file = match options.open(path) {
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refused("is a symbolic link"));
        }
        opened => opened?,
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refused("is not a regular file"));
    }
    Ok((file, meta))
}

/// Reads the key at `path` if it is one this user alone controls: not a
/// symbolic link, a regular file ([`open_regular`]), owned by this user,
/// with no permission for group or others, and 32 bytes long. The checks
/// are made on the opened file, so it cannot be swapped between them.
fn read_private(path: &Path) -> std::io::Result<[u8; 32]> {
    let refused = |why: String| std::io::Error::other(format!("{why}: refused"));
    let (mut file, meta) = open_regular(path)?;
    #[cfg(unix)]
    {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me {
            return Err(refused(format!(
                "is owned by uid {}, not by this user (uid {me})",
                meta.uid()
            )));
        }
        let mode = meta.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(refused(format!(
                "has mode {mode:04o}: group or others may read or write it (chmod 600 it)"
            )));
        }
    }
    if meta.len() != 32 {
        return Err(refused(format!("is {} bytes, not 32", meta.len())));
    }
    let mut key = [0u8; 32];
    file.read_exact(&mut key)?;
    Ok(key)
}

/// A name for a temporary file beside `path`: hidden, and unique to this
/// process and call (and to the moment, against a dead process's leftover
/// of the same pid).
fn temp_name(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(
        "{TEMP_PREFIX}{name}-{}-{n}-{nanos}",
        std::process::id()
    ))
}

/// Creates the new file `path`, 0600, never through a symbolic link.
fn new_private_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    // create_new (O_EXCL) never follows a symbolic link.
    options.write(true).create_new(true);
    #[cfg(unix)]
    options.mode(0o600);
    options.open(path)
}

/// Makes the folder `dir` and its missing parents, 0700 (the cache holds
/// compiled native code, for no other user).
fn make_dirs(dir: &Path) -> std::io::Result<()> {
    let mut dirs = std::fs::DirBuilder::new();
    dirs.recursive(true);
    #[cfg(unix)]
    dirs.mode(0o700);
    dirs.create(dir)
}

/// HMAC-SHA256 under `key` of `body`, bound to the entry it belongs to:
/// each part of `names` (its kind, digest and engine) length-prefixed
/// first, so a body copied under another name, or to another kind, fails.
fn entry_mac(key: &[u8; 32], names: &[&str], body: &[u8]) -> hmac::Hmac<sha2::Sha256> {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("hmac takes keys of any length"));
    for part in names {
        mac.update(&(part.len() as u64).to_le_bytes());
        mac.update(part.as_bytes());
    }
    mac.update(body);
    mac
}

/// `name` if it can be a file name of the cache: 1 to [`MAX_NAME_BYTES`]
/// ASCII letters, digits, `-` or `_` (a hex digest or fingerprint).
fn checked_name<'a>(what: &str, name: &'a str) -> Result<&'a str, StoreError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(name)
    } else {
        Err(StoreError::InvalidArgument(format!(
            "compile cache: {what} {name:?} is not 1 to {MAX_NAME_BYTES} letters, digits, '-' or '_'"
        )))
    }
}

/// An entry as found on disk, for [`CompileCache::trim`].
struct Found {
    path: PathBuf,
    bytes: u64,
    used: SystemTime,
}

impl CompileCache {
    /// The compile cache in the folder `dir`, made (0700) when missing. Its
    /// key (`<dir>/key`) is read or made on first use; see
    /// [`check_key`](CompileCache::check_key). Bounded by
    /// [`DEFAULT_MAX_CACHE_BYTES`].
    pub fn open(dir: &Path) -> Result<CompileCache, StoreError> {
        make_dirs(&dir.join(VERSION_DIR)).map_err(|e| StoreError::Cache {
            path: dir.display().to_string(),
            message: format!("cannot make the folder: {e}"),
        })?;
        Ok(CompileCache {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                key: KeyFile {
                    path: dir.join("key"),
                    key: OnceLock::new(),
                    reported: AtomicBool::new(false),
                },
            }),
            max_bytes: DEFAULT_MAX_CACHE_BYTES,
        })
    }

    /// This cache, keeping its folder's entries under `max_bytes` in all
    /// (instead of [`DEFAULT_MAX_CACHE_BYTES`]).
    pub fn with_max_bytes(mut self, max_bytes: u64) -> CompileCache {
        self.max_bytes = max_bytes;
        self
    }

    /// The cache folder.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Whether the cache's key can be used: `Err` names the key file and
    /// why it is refused (a symbolic link, another owner, a mode that lets
    /// others read or write it, ...). Without a key no entry is trusted or
    /// stored; a caller that reports this error itself is spared the
    /// warning the cache would log.
    pub fn check_key(&self) -> Result<(), StoreError> {
        let key = &self.inner.key;
        match key.result() {
            Ok(_) => Ok(()),
            Err(e) => {
                key.reported.store(true, Ordering::Relaxed);
                Err(StoreError::CacheKey(e.clone()))
            }
        }
    }

    /// The file of an entry.
    fn path(&self, kind: Kind, digest: &str, engine: Option<&str>) -> Result<PathBuf, StoreError> {
        let mut path = self.inner.dir.join(VERSION_DIR).join(kind.folder());
        if let Some(engine) = engine {
            path.push(checked_name("engine fingerprint", engine)?);
        }
        path.push(checked_name("wasm digest", digest)?);
        Ok(path)
    }

    /// The names an entry's HMAC is bound to.
    fn names<'a>(kind: Kind, digest: &'a str, engine: Option<&'a str>) -> Vec<&'a str> {
        let mut names = vec![kind.noun(), digest];
        names.extend(engine);
        names
    }

    /// The body of an entry if it is there and authenticates (its last use
    /// is then recorded, for eviction). One that does not (truncated,
    /// edited, moved from another name or kind, written under another key,
    /// too large, not a regular file) is logged, removed and reported as
    /// missing: the caller computes it again.
    fn read(
        &self,
        kind: Kind,
        digest: &str,
        engine: Option<&str>,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.path(kind, digest, engine)?;
        let Some(key) = self.inner.key.get() else {
            return Ok(None);
        };
        let bad = |why: String| -> Result<Option<Vec<u8>>, StoreError> {
            tracing::warn!(
                wasm_digest = digest,
                "compile cache: ignoring the {} entry {}: {why}; it is computed again",
                kind.noun(),
                path.display()
            );
            remove_entry(&path);
            Ok(None)
        };
        let (file, meta) = match open_regular(&path) {
            Ok(opened) => opened,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return bad(e.to_string()),
        };
        let max = HEADER_BYTES as u64 + kind.max_body();
        if meta.len() > max {
            return bad(format!("{} bytes, more than {max}", meta.len()));
        }
        let mut stored = Vec::with_capacity(meta.len() as usize);
        if let Err(e) = (&file).take(max + 1).read_to_end(&mut stored) {
            return bad(format!("cannot read it: {e}"));
        }
        let Some(body) = unseal(key, &Self::names(kind, digest, engine), &stored) else {
            return bad(
                "it does not authenticate (truncated, edited, moved or from another key)".into(),
            );
        };
        // Recorded for eviction; a failure (a read-only folder) only makes
        // the entry look older.
        let _ = file.set_modified(SystemTime::now());
        tracing::debug!(
            wasm_digest = digest,
            "compile cache: hit: {} {}",
            kind.noun(),
            path.display()
        );
        Ok(Some(body.to_vec()))
    }

    /// Writes an entry (nothing when the cache has no usable key): to a
    /// temporary file in its folder, fsynced, then renamed into place; then
    /// bounds the folder.
    fn write(
        &self,
        kind: Kind,
        digest: &str,
        engine: Option<&str>,
        body: &[u8],
    ) -> Result<(), StoreError> {
        let path = self.path(kind, digest, engine)?;
        let Some(key) = self.inner.key.get() else {
            return Ok(());
        };
        if body.len() as u64 > kind.max_body() {
            return Err(StoreError::InvalidArgument(format!(
                "compile cache: a {} of {} bytes is more than the {} an entry may hold",
                kind.noun(),
                body.len(),
                kind.max_body()
            )));
        }
        let failed = |e: std::io::Error| StoreError::Cache {
            path: path.display().to_string(),
            message: format!("cannot write the {}: {e}", kind.noun()),
        };
        if let Some(parent) = path.parent() {
            make_dirs(parent).map_err(failed)?;
        }
        let sealed = seal(key, &Self::names(kind, digest, engine), body);
        let temp = temp_name(&path);
        let written = new_private_file(&temp).and_then(|mut file| {
            file.write_all(&sealed)?;
            file.sync_all()?;
            drop(file);
            std::fs::rename(&temp, &path)
        });
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(failed(e));
        }
        self.trim();
        Ok(())
    }

    /// Keeps the folder's entries under its bound in all: removes the least
    /// recently used (by modification time, which a hit refreshes) until
    /// they fit, and temporary files of killed writers. Entries other
    /// processes remove meanwhile are skipped. Every write does this; a
    /// caller with a lower bound than the processes that share the folder
    /// may do it on opening.
    pub fn trim(&self) {
        let found = self.entries();
        let mut total: u64 = found.iter().map(|f| f.bytes).sum();
        if total <= self.max_bytes {
            return;
        }
        let mut found = found;
        found.sort_by_key(|f| f.used);
        for entry in found {
            if total <= self.max_bytes {
                break;
            }
            remove_entry(&entry.path);
            total = total.saturating_sub(entry.bytes);
            tracing::debug!(
                "compile cache: evicted {} ({} bytes)",
                entry.path.display(),
                entry.bytes
            );
        }
    }

    /// Every entry file under the version folder (removing stale temporary
    /// files on the way).
    fn entries(&self) -> Vec<Found> {
        let mut found = Vec::new();
        let mut folders = vec![self.inner.dir.join(VERSION_DIR)];
        while let Some(folder) = folders.pop() {
            let Ok(listing) = std::fs::read_dir(&folder) else {
                continue;
            };
            for entry in listing.flatten() {
                let Ok(meta) = entry.metadata() else { continue };
                let path = entry.path();
                if meta.is_dir() {
                    folders.push(path);
                    continue;
                }
                let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                if entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
                    if used.elapsed().is_ok_and(|age| age > STALE_TEMP) {
                        let _ = std::fs::remove_file(&path);
                    }
                    continue;
                }
                found.push(Found {
                    path,
                    bytes: meta.len(),
                    used,
                });
            }
        }
        found
    }

    /// The number of entries of `kind` (all engines).
    fn count(&self, kind: Kind) -> u64 {
        let folder = self.inner.dir.join(VERSION_DIR).join(kind.folder());
        self.entries()
            .iter()
            .filter(|f| f.path.starts_with(&folder))
            .count() as u64
    }

    /// The cached spec JSON of the component with digest `wasm_digest`,
    /// checked against its HMAC under the cache key. An entry that does not
    /// authenticate (edited, swapped from another entry, written under
    /// another key) is removed, logged and reported as missing: the caller
    /// describes the component again rather than take its name and
    /// parameters from an entry it did not write.
    pub fn spec(&self, wasm_digest: &str) -> Result<Option<String>, StoreError> {
        let Some(body) = self.read(Kind::Spec, wasm_digest, None)? else {
            return Ok(None);
        };
        match String::from_utf8(body) {
            Ok(text) => Ok(Some(text)),
            Err(_) => {
                tracing::warn!(
                    wasm_digest,
                    "compile cache: ignoring a spec that is not UTF-8"
                );
                Ok(None)
            }
        }
    }

    /// Records the spec of a component, with its HMAC (nothing when the
    /// cache has no usable key).
    pub fn put_spec(&self, wasm_digest: &str, spec_json: &str) -> Result<(), StoreError> {
        self.write(Kind::Spec, wasm_digest, None, spec_json.as_bytes())
    }

    /// The artifact for `(wasm_digest, engine)`, checked against its HMAC
    /// under the cache key. An entry that does not authenticate (tampered,
    /// truncated, swapped from another entry, written under another key) is
    /// removed, logged and reported as missing, so the caller recompiles
    /// instead of deserializing it.
    pub fn artifact(
        &self,
        wasm_digest: &str,
        engine: &str,
    ) -> Result<Option<CachedArtifact>, StoreError> {
        Ok(self
            .read(Kind::Artifact, wasm_digest, Some(engine))?
            .map(|bytes| CachedArtifact { bytes }))
    }

    /// Stores an artifact (at most [`MAX_ARTIFACT_BYTES`]) with its HMAC
    /// (nothing when the cache has no usable key).
    pub fn put_artifact(
        &self,
        wasm_digest: &str,
        engine: &str,
        artifact: &[u8],
    ) -> Result<(), StoreError> {
        self.write(Kind::Artifact, wasm_digest, Some(engine), artifact)
    }

    /// The recorded load failure of `(wasm_digest, engine)`. An entry that
    /// does not authenticate under the cache key, or does not decode, is
    /// reported as missing (the component is retried), and logged.
    pub fn load_failure(
        &self,
        wasm_digest: &str,
        engine: &str,
    ) -> Result<Option<LoadFailure>, StoreError> {
        let Some(body) = self.read(Kind::Failure, wasm_digest, Some(engine))? else {
            return Ok(None);
        };
        match serde_json::from_slice(&body) {
            Ok(failure) => Ok(Some(failure)),
            Err(e) => {
                tracing::warn!(
                    wasm_digest,
                    "compile cache: ignoring a bad load failure: {e}"
                );
                Ok(None)
            }
        }
    }

    /// Records that `(wasm_digest, engine)` failed to load, replacing any
    /// earlier record, with its HMAC (nothing when the cache has no usable
    /// key); the message is cut to [`MAX_LOAD_FAILURE_MESSAGE_BYTES`].
    pub fn put_load_failure(
        &self,
        wasm_digest: &str,
        engine: &str,
        failure: &LoadFailure,
    ) -> Result<(), StoreError> {
        let bounded = LoadFailure {
            message: LoadFailure::bounded_message(&failure.message),
            ..failure.clone()
        };
        let text = serde_json::to_vec(&bounded).map_err(|e| {
            StoreError::InvalidArgument(format!("cannot encode a load failure: {e}"))
        })?;
        self.write(Kind::Failure, wasm_digest, Some(engine), &text)
    }

    /// Forgets the load failure of `(wasm_digest, engine)` (it loaded after
    /// all, e.g. under more generous limits); `false` when there was none.
    pub fn remove_load_failure(&self, wasm_digest: &str, engine: &str) -> Result<bool, StoreError> {
        let path = self.path(Kind::Failure, wasm_digest, Some(engine))?;
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(StoreError::Cache {
                path: path.display().to_string(),
                message: format!("cannot remove the load failure: {e}"),
            }),
        }
    }

    /// Number of recorded load failures (all engines).
    pub fn load_failure_count(&self) -> Result<u64, StoreError> {
        Ok(self.count(Kind::Failure))
    }

    /// Number of cached artifacts (all engines).
    pub fn artifact_count(&self) -> Result<u64, StoreError> {
        Ok(self.count(Kind::Artifact))
    }

    /// The total size of the cache's entries, in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.entries().iter().map(|f| f.bytes).sum()
    }
}

/// Removes the entry file `path`; one already gone (another process
/// evicted or replaced it) is no error, and any other failure only leaves
/// it to be found bad again.
fn remove_entry(path: &Path) {
    let _ = std::fs::remove_file(path);
}

/// An entry as stored: [`MAGIC`], the body's length, its HMAC (see
/// [`entry_mac`]), the body.
fn seal(key: &[u8; 32], names: &[&str], body: &[u8]) -> Vec<u8> {
    let mac = hmac::Mac::finalize(entry_mac(key, names, body)).into_bytes();
    let mut sealed = Vec::with_capacity(HEADER_BYTES + body.len());
    sealed.extend_from_slice(MAGIC);
    sealed.extend_from_slice(&(body.len() as u64).to_le_bytes());
    sealed.extend_from_slice(&mac);
    sealed.extend_from_slice(body);
    sealed
}

/// The body of a stored entry, if its header is whole and its HMAC is right
/// for `names` under `key`.
fn unseal<'a>(key: &[u8; 32], names: &[&str], stored: &'a [u8]) -> Option<&'a [u8]> {
    let rest = stored.strip_prefix(MAGIC.as_slice())?;
    let (len, rest) = rest.split_first_chunk::<8>()?;
    let (mac, body) = rest.split_first_chunk::<32>()?;
    if u64::from_le_bytes(*len) != body.len() as u64 {
        return None;
    }
    // verify_slice compares in constant time.
    hmac::Mac::verify_slice(entry_mac(key, names, body), mac).ok()?;
    Some(body)
}

#[cfg(test)]
mod tests;
