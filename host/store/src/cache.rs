//! The compile cache: compiled artifacts keyed by (wasm digest, engine
//! fingerprint), graph specs keyed by wasm digest, and the components that
//! failed to load, keyed like artifacts; every row stored with its HMAC
//! under a key kept outside the database (`<file>.key`) and bound to its
//! row, and used only when it authenticates.

use std::io::{Read, Write};
#[cfg(unix)]
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use redb::{Database, ReadableDatabase, ReadableTableMetadata};
use serde::{Deserialize, Serialize};

use crate::{StoreError, schema};

/// Longest failure message kept in a [`LoadFailure`] row; a longer one is
/// cut (and marked so). Messages quote guest output (a panic message, a
/// backtrace), and a hostile component must not grow the cache with them.
pub const MAX_LOAD_FAILURE_MESSAGE_BYTES: usize = 4096;

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

/// Compiled artifacts, specs and load failures, every row authenticated.
#[derive(Clone)]
pub struct CompileCache {
    db: Arc<Database>,
    key: Arc<KeyFile>,
}

/// An artifact read back from the cache that authenticated.
#[derive(Debug)]
pub struct CachedArtifact {
    /// The serialized compiled component.
    pub bytes: Vec<u8>,
}

/// The key that authenticates every row of the cache: 32 random bytes in
/// `<database>.key`, 0600, made on first use. It is not in the database, so
/// whoever can write the cache file (a shared cache, a restored CI cache)
/// cannot forge an artifact the host will deserialize, nor a spec that
/// renames a graph. The file is opened without following a symbolic link
/// and used only when it is a regular file of 32 bytes owned by this user
/// that no one else may read or write; otherwise the cache is not used.
#[derive(Debug)]
pub(crate) struct KeyFile {
    /// `<database>.key`; `None` for a cache in memory (see
    /// [`KeyFile::in_memory`]).
    path: Option<PathBuf>,
    key: OnceLock<Result<[u8; 32], String>>,
    /// Whether a failure to get the key has been reported (logged once, or
    /// returned by [`CompileCache::check_key`] to a caller who reports it).
    reported: AtomicBool,
}

impl KeyFile {
    /// The key of a cache in memory (a PostgreSQL store's, which has no
    /// file to put a key beside): drawn at random for this process, and no
    /// artifact is stored (they are tens of MB each).
    pub(crate) fn in_memory() -> Self {
        KeyFile {
            path: None,
            key: OnceLock::new(),
            reported: AtomicBool::new(false),
        }
    }

    pub(crate) fn beside(db: &Path) -> Self {
        let mut name = db.as_os_str().to_owned();
        name.push(".key");
        KeyFile {
            path: Some(name.into()),
            key: OnceLock::new(),
            reported: AtomicBool::new(false),
        }
    }

    /// Whether artifacts are stored and trusted (not in memory).
    fn keeps_artifacts(&self) -> bool {
        self.path.is_some()
    }

    fn result(&self) -> &Result<[u8; 32], String> {
        self.key.get_or_init(|| match &self.path {
            None => random_key().map_err(|e| format!("cannot draw a compile cache key: {e}")),
            Some(path) => {
                load_or_make(path).map_err(|e| format!("compile cache key {}: {e}", path.display()))
            }
        })
    }

    /// The key, or `None` when it cannot be read, made, or trusted (then no
    /// row is trusted: every graph is compiled and described). The reason
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

/// Reads the key at `path`, or makes it (0600, never through a symbolic
/// link) when there is none.
fn load_or_make(path: &Path) -> std::io::Result<[u8; 32]> {
    match read_private(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        read => return read,
    }
    let key = random_key()?;
    let mut options = std::fs::OpenOptions::new();
    // create_new (O_EXCL) never follows a symbolic link: one there is
    // "already exists", and then refused by `read_private`.
    options.write(true).create_new(true);
    #[cfg(unix)]
    options.mode(0o600);
    match options.open(path) {
        Ok(mut f) => {
            f.write_all(&key)?;
            f.sync_all()?;
            Ok(key)
        }
        // Another process made it first: use theirs, with the same checks.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_private(path),
        Err(e) => Err(e),
    }
}

/// Reads the key at `path` if it is one this user alone controls: not a
/// symbolic link (opened with `O_NOFOLLOW`), a regular file (`O_NONBLOCK`
/// so a FIFO planted there cannot hang the open), owned by this user,
/// with no permission for group or others, and 32 bytes long. The checks
/// are made on the opened file, so it cannot be swapped between them.
fn read_private(path: &Path) -> std::io::Result<[u8; 32]> {
    let refused = |why: String| std::io::Error::other(format!("{why}: refused"));
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    let mut file = match options.open(path) {
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refused("is a symbolic link".to_owned()));
        }
        opened => opened?,
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refused("is not a regular file".to_owned()));
    }
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

/// HMAC-SHA256 under `key` of `body`, bound to the row it belongs to:
/// each part of `row` (its kind and key columns) length-prefixed first, so
/// a value copied under another key, or into another table, fails.
fn row_mac(key: &[u8; 32], row: &[&str], body: &[u8]) -> hmac::Hmac<sha2::Sha256> {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("hmac takes keys of any length"));
    for part in row {
        mac.update(&(part.len() as u64).to_le_bytes());
        mac.update(part.as_bytes());
    }
    mac.update(body);
    mac
}

/// HMAC of an artifact, bound to its row (wasm digest and engine).
fn artifact_mac(
    key: &[u8; 32],
    wasm_digest: &str,
    engine: &str,
    artifact: &[u8],
) -> hmac::Hmac<sha2::Sha256> {
    row_mac(key, &[wasm_digest, engine], artifact)
}

/// How a sealed text row begins: this, the hex HMAC, a newline, the text.
const SEAL: &str = "hmac-sha256:";

/// The row parts of a spec (`SPECS`, keyed by wasm digest).
const SPEC_ROW: &str = "spec";

/// The row parts of a load failure (`LOAD_FAILURES`).
const LOAD_FAILURE_ROW: &str = "load failure";

/// `text` as stored in a text row: with its HMAC (see [`row_mac`]).
fn seal(key: &[u8; 32], row: &[&str], text: &str) -> String {
    let mac = hmac::Mac::finalize(row_mac(key, row, text.as_bytes())).into_bytes();
    format!("{SEAL}{}\n{text}", hex::encode(mac))
}

/// The text of a sealed row, if its HMAC is right for `row` under `key`.
fn unseal<'a>(key: &[u8; 32], row: &[&str], stored: &'a str) -> Option<&'a str> {
    let (mac, text) = stored.strip_prefix(SEAL)?.split_once('\n')?;
    let mac = hex::decode(mac).ok()?;
    // verify_slice compares in constant time.
    hmac::Mac::verify_slice(row_mac(key, row, text.as_bytes()), &mac).ok()?;
    Some(text)
}

impl CompileCache {
    pub(crate) fn new(db: Arc<Database>, key: Arc<KeyFile>) -> Self {
        CompileCache { db, key }
    }

    /// Whether the cache's key can be used: `Err` names the key file and
    /// why it is refused (a symbolic link, another owner, a mode that lets
    /// others read or write it, ...). Without a key no row is trusted or
    /// stored; a caller that reports this error itself is spared the
    /// warning the cache would log.
    pub fn check_key(&self) -> Result<(), StoreError> {
        match self.key.result() {
            Ok(_) => Ok(()),
            Err(e) => {
                self.key.reported.store(true, Ordering::Relaxed);
                Err(StoreError::CacheKey(e.clone()))
            }
        }
    }

    /// The cached spec JSON of the component with digest `wasm_digest`,
    /// checked against its HMAC under the cache key. A row that does not
    /// authenticate (edited, swapped from another row, written under
    /// another key or before specs were authenticated) is deleted, logged
    /// and reported as missing: the caller describes the component again
    /// rather than take its name and parameters from a row it did not
    /// write.
    pub fn spec(&self, wasm_digest: &str) -> Result<Option<String>, StoreError> {
        let stored = {
            let tx = self.db.begin_read()?;
            let t = tx.open_table(schema::SPECS)?;
            t.get(wasm_digest)?.map(|v| v.value().to_string())
        };
        let Some(stored) = stored else {
            return Ok(None);
        };
        let Some(key) = self.key.get() else {
            return Ok(None);
        };
        if let Some(text) = unseal(key, &[SPEC_ROW, wasm_digest], &stored) {
            return Ok(Some(text.to_owned()));
        }
        tracing::warn!(
            wasm_digest,
            "compile cache: a cached spec failed authentication (edited, swapped, from another \
             key or an older format); ignoring it, the component is described again"
        );
        let tx = self.db.begin_write()?;
        tx.open_table(schema::SPECS)?.remove(wasm_digest)?;
        tx.commit()?;
        Ok(None)
    }

    /// Records the spec of a component, with its HMAC (nothing when the
    /// cache has no usable key).
    pub fn put_spec(&self, wasm_digest: &str, spec_json: &str) -> Result<(), StoreError> {
        let Some(key) = self.key.get() else {
            return Ok(());
        };
        let sealed = seal(key, &[SPEC_ROW, wasm_digest], spec_json);
        let tx = self.db.begin_write()?;
        tx.open_table(schema::SPECS)?
            .insert(wasm_digest, sealed.as_str())?;
        tx.commit()?;
        Ok(())
    }

    /// The artifact for `(wasm_digest, engine)`, checked against its
    /// HMAC under the cache key (not in the database). A record that does not
    /// authenticate (tampered, swapped from another row, written under
    /// another key or an older format) is deleted, logged and reported as
    /// missing, so the caller recompiles instead of deserializing it.
    pub fn artifact(
        &self,
        wasm_digest: &str,
        engine: &str,
    ) -> Result<Option<CachedArtifact>, StoreError> {
        let raw = {
            let tx = self.db.begin_read()?;
            let t = tx.open_table(schema::ARTIFACTS)?;
            t.get((wasm_digest, engine))?.map(|v| v.value().to_vec())
        };
        let Some(raw) = raw else { return Ok(None) };
        let Some(key) = self.key.get().filter(|_| self.key.keeps_artifacts()) else {
            return Ok(None);
        };
        if raw.len() >= 32 {
            let (mac, bytes) = raw.split_at(32);
            // verify_slice compares in constant time.
            if hmac::Mac::verify_slice(artifact_mac(key, wasm_digest, engine, bytes), mac).is_ok() {
                return Ok(Some(CachedArtifact {
                    bytes: bytes.to_vec(),
                }));
            }
        }
        tracing::warn!(
            wasm_digest,
            "cached artifact failed authentication (tampered, swapped or from another key); discarding it and recompiling"
        );
        let tx = self.db.begin_write()?;
        tx.open_table(schema::ARTIFACTS)?
            .remove((wasm_digest, engine))?;
        tx.commit()?;
        Ok(None)
    }

    /// Stores an artifact with the digest of its bytes.
    pub fn put_artifact(
        &self,
        wasm_digest: &str,
        engine: &str,
        artifact: &[u8],
    ) -> Result<(), StoreError> {
        let Some(key) = self.key.get().filter(|_| self.key.keeps_artifacts()) else {
            // Without a key nothing would be trusted on read: store nothing.
            return Ok(());
        };
        let mut value = Vec::with_capacity(32 + artifact.len());
        value.extend_from_slice(
            &hmac::Mac::finalize(artifact_mac(key, wasm_digest, engine, artifact)).into_bytes(),
        );
        value.extend_from_slice(artifact);
        let tx = self.db.begin_write()?;
        tx.open_table(schema::ARTIFACTS)?
            .insert((wasm_digest, engine), value.as_slice())?;
        tx.commit()?;
        Ok(())
    }

    /// The recorded load failure of `(wasm_digest, engine)`. A row that
    /// does not authenticate under the cache key, or does not decode, is
    /// reported as missing (the component is retried), and logged.
    pub fn load_failure(
        &self,
        wasm_digest: &str,
        engine: &str,
    ) -> Result<Option<LoadFailure>, StoreError> {
        let stored = {
            let tx = self.db.begin_read()?;
            let t = tx.open_table(schema::LOAD_FAILURES)?;
            t.get((wasm_digest, engine))?.map(|v| v.value().to_owned())
        };
        let Some(stored) = stored else {
            return Ok(None);
        };
        let Some(key) = self.key.get() else {
            return Ok(None);
        };
        let Some(text) = unseal(key, &[LOAD_FAILURE_ROW, wasm_digest, engine], &stored) else {
            tracing::warn!(
                wasm_digest,
                "compile cache: ignoring a load failure row that failed authentication"
            );
            return Ok(None);
        };
        match serde_json::from_str(text) {
            Ok(failure) => Ok(Some(failure)),
            Err(e) => {
                tracing::warn!(wasm_digest, "ignoring a bad load failure row: {e}");
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
        let Some(key) = self.key.get() else {
            return Ok(());
        };
        let bounded = LoadFailure {
            message: LoadFailure::bounded_message(&failure.message),
            ..failure.clone()
        };
        let text = serde_json::to_string(&bounded)
            .map_err(|e| StoreError::Db(format!("cannot encode a load failure: {e}")))?;
        let sealed = seal(key, &[LOAD_FAILURE_ROW, wasm_digest, engine], &text);
        let tx = self.db.begin_write()?;
        tx.open_table(schema::LOAD_FAILURES)?
            .insert((wasm_digest, engine), sealed.as_str())?;
        tx.commit()?;
        Ok(())
    }

    /// Forgets the load failure of `(wasm_digest, engine)` (it loaded after
    /// all, e.g. under more generous limits); `false` when there was none.
    pub fn remove_load_failure(&self, wasm_digest: &str, engine: &str) -> Result<bool, StoreError> {
        let tx = self.db.begin_write()?;
        let removed = tx
            .open_table(schema::LOAD_FAILURES)?
            .remove((wasm_digest, engine))?
            .is_some();
        tx.commit()?;
        Ok(removed)
    }

    /// Number of recorded load failures (all engines).
    pub fn load_failure_count(&self) -> Result<u64, StoreError> {
        let tx = self.db.begin_read()?;
        Ok(tx.open_table(schema::LOAD_FAILURES)?.len()?)
    }

    /// Number of cached artifacts (all engines).
    pub fn artifact_count(&self) -> Result<u64, StoreError> {
        let tx = self.db.begin_read()?;
        Ok(tx.open_table(schema::ARTIFACTS)?.len()?)
    }

    #[cfg(test)]
    pub(crate) fn corrupt_for_test(&self, wasm_digest: &str, engine: &str) {
        use redb::ReadableTable;
        let tx = self.db.begin_write().unwrap();
        {
            let mut t = tx.open_table(schema::ARTIFACTS).unwrap();
            let mut v = t
                .get((wasm_digest, engine))
                .unwrap()
                .unwrap()
                .value()
                .to_vec();
            let last = v.len() - 1;
            v[last] ^= 0xff;
            t.insert((wasm_digest, engine), v.as_slice()).unwrap();
        }
        tx.commit().unwrap();
    }
}

#[cfg(test)]
impl CompileCache {
    /// The stored value of the spec row of `wasm_digest`, as it is.
    pub(crate) fn raw_spec_for_test(&self, wasm_digest: &str) -> Option<String> {
        let tx = self.db.begin_read().unwrap();
        let t = tx.open_table(schema::SPECS).unwrap();
        t.get(wasm_digest).unwrap().map(|v| v.value().to_owned())
    }

    /// Stores `value` as the spec row of `wasm_digest`, as it is.
    pub(crate) fn put_raw_spec_for_test(&self, wasm_digest: &str, value: &str) {
        let tx = self.db.begin_write().unwrap();
        tx.open_table(schema::SPECS)
            .unwrap()
            .insert(wasm_digest, value)
            .unwrap();
        tx.commit().unwrap();
    }

    /// Replaces `from` by `to` in the load failure row of `(wasm_digest,
    /// engine)`, as an editor of the file would.
    pub(crate) fn edit_load_failure_for_test(
        &self,
        wasm_digest: &str,
        engine: &str,
        from: &str,
        to: &str,
    ) {
        use redb::ReadableTable;
        let tx = self.db.begin_write().unwrap();
        {
            let mut t = tx.open_table(schema::LOAD_FAILURES).unwrap();
            let v = t
                .get((wasm_digest, engine))
                .unwrap()
                .unwrap()
                .value()
                .replace(from, to);
            t.insert((wasm_digest, engine), v.as_str()).unwrap();
        }
        tx.commit().unwrap();
    }
}

#[cfg(test)]
mod tests {
    use crate::Store;

    #[test]
    fn artifacts_need_the_key_beside_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.redb");
        let store = Store::open(&path).unwrap();
        store
            .compile_cache()
            .put_artifact("w", "e", b"compiled bytes")
            .unwrap();
        drop(store);
        // Another key (the old one lost, or the database copied elsewhere):
        // the artifact does not authenticate and is dropped.
        std::fs::remove_file(dir.path().join("c.redb.key")).unwrap();
        let store = Store::open(&path).unwrap();
        assert!(store.compile_cache().artifact("w", "e").unwrap().is_none());
        assert_eq!(store.compile_cache().artifact_count().unwrap(), 0);
        drop(store);
        // A key others can read is not trusted: nothing is stored or used.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let key = dir.path().join("c.redb.key");
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
            let store = Store::open(&path).unwrap();
            let cache = store.compile_cache();
            cache.put_artifact("w", "e", b"compiled bytes").unwrap();
            assert!(cache.artifact("w", "e").unwrap().is_none());
            cache.put_spec("w", "{}").unwrap();
            assert!(cache.spec("w").unwrap().is_none());
            let err = cache.check_key().unwrap_err().to_string();
            assert!(err.contains("c.redb.key"), "{err}");
            assert!(err.contains("has mode 0644"), "{err}");
        }
    }

    /// A spec row edited in the file (a squatter renaming itself to the
    /// name another graph's grants are written for), written under another
    /// key, or in the format before specs were authenticated, is not
    /// believed: it reads as missing, and is gone.
    #[test]
    fn a_spec_row_that_does_not_authenticate_is_not_believed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.redb");
        let store = Store::open(&path).unwrap();
        let cache = store.compile_cache();
        cache.put_spec("w", r#"{"name":"squatter"}"#).unwrap();
        assert_eq!(
            cache.spec("w").unwrap().as_deref(),
            Some(r#"{"name":"squatter"}"#)
        );
        let sealed = cache.raw_spec_for_test("w").unwrap();
        assert!(sealed.starts_with("hmac-sha256:"), "{sealed}");
        // Edited: renamed, the HMAC kept.
        cache.put_raw_spec_for_test("w", &sealed.replace("squatter", "research"));
        assert_eq!(cache.spec("w").unwrap(), None);
        assert_eq!(cache.raw_spec_for_test("w"), None, "the bad row is gone");
        // Moved: a good row under another digest.
        cache.put_raw_spec_for_test("x", &sealed);
        assert_eq!(cache.spec("x").unwrap(), None);
        // Unsealed, as written before specs were authenticated.
        cache.put_raw_spec_for_test("w", r#"{"name":"research"}"#);
        assert_eq!(cache.spec("w").unwrap(), None);
        // Written under another key (a cache file from elsewhere).
        let other = tempfile::tempdir().unwrap();
        let forged = {
            let store = Store::open(&other.path().join("c.redb")).unwrap();
            let cache = store.compile_cache();
            cache.put_spec("w", r#"{"name":"research"}"#).unwrap();
            cache.raw_spec_for_test("w").unwrap()
        };
        cache.put_raw_spec_for_test("w", &forged);
        assert_eq!(cache.spec("w").unwrap(), None);
    }

    #[test]
    fn a_load_failure_row_that_does_not_authenticate_is_not_believed() {
        use super::LoadFailure;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("c.redb")).unwrap();
        let cache = store.compile_cache();
        let failure = LoadFailure {
            code: "load".into(),
            message: "describe trapped".into(),
            at_ms: 1,
            timeout_ms: 500,
            fuel: 1,
            memory_bytes: 1,
        };
        cache.put_load_failure("w", "e", &failure).unwrap();
        assert_eq!(cache.load_failure("w", "e").unwrap(), Some(failure));
        cache.edit_load_failure_for_test("w", "e", "describe trapped", "describe trapped!");
        assert_eq!(cache.load_failure("w", "e").unwrap(), None);
    }

    /// The key file is opened without following a symbolic link, and must
    /// be this user's own: anything else is refused with an error naming
    /// the file, and then no row is stored or trusted.
    #[cfg(unix)]
    #[test]
    fn a_key_file_this_user_does_not_alone_control_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.redb");
        let key = dir.path().join("c.redb.key");
        let refused = |why: &str| {
            let store = Store::open(&path).unwrap();
            let cache = store.compile_cache();
            let err = cache.check_key().unwrap_err().to_string();
            assert!(
                err.contains(&format!("compile cache key {}", key.display())),
                "{err}"
            );
            assert!(err.contains(why), "{err}");
            assert!(err.ends_with("refused"), "{err}");
            cache.put_artifact("w", "e", b"compiled bytes").unwrap();
            cache.put_spec("w", "{}").unwrap();
            assert!(cache.artifact("w", "e").unwrap().is_none());
            assert!(cache.spec("w").unwrap().is_none());
        };
        // A symbolic link to a good key (0600, 32 bytes, ours).
        let elsewhere = tempfile::tempdir().unwrap();
        let target = elsewhere.path().join("planted.key");
        std::fs::write(&target, [7u8; 32]).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&target, &key).unwrap();
        refused("is a symbolic link");
        // A dangling one is not followed to make a key there either.
        std::fs::remove_file(&target).unwrap();
        refused("is a symbolic link");
        assert!(!target.exists(), "no key made through the link");
        std::fs::remove_file(&key).unwrap();
        // Not a regular file.
        std::fs::create_dir(&key).unwrap();
        refused("is not a regular file");
        std::fs::remove_dir(&key).unwrap();
        // Not 32 bytes.
        std::fs::write(&key, b"short").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        refused("is 5 bytes, not 32");
        // Writable by the group.
        std::fs::write(&key, [7u8; 32]).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o620)).unwrap();
        refused("has mode 0620");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        // Owned by another user: only root can make one.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let c = std::ffi::CString::new(key.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a valid NUL-terminated path.
            assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
            refused("is owned by uid 65534, not by this user (uid 0)");
            // SAFETY: as above.
            assert_eq!(unsafe { libc::chown(c.as_ptr(), 0, 0) }, 0);
        }
        // Ours, 0600, 32 bytes: used.
        let store = Store::open(&path).unwrap();
        store.compile_cache().check_key().unwrap();
    }

    #[test]
    fn artifacts_round_trip_and_corruption_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("c.redb")).unwrap();
        let cache = store.compile_cache();
        assert!(cache.artifact("w", "e").unwrap().is_none());
        cache.put_artifact("w", "e", b"compiled bytes").unwrap();
        assert_eq!(
            cache.artifact("w", "e").unwrap().unwrap().bytes,
            b"compiled bytes"
        );
        // Another engine fingerprint is another key.
        assert!(cache.artifact("w", "other").unwrap().is_none());
        cache.corrupt_for_test("w", "e");
        assert!(
            cache.artifact("w", "e").unwrap().is_none(),
            "corrupt bytes are never handed out"
        );
        assert_eq!(
            cache.artifact_count().unwrap(),
            0,
            "and the bad record is gone"
        );
    }

    #[test]
    fn load_failures_round_trip_per_engine_and_are_bounded() {
        use super::{LoadFailure, MAX_LOAD_FAILURE_MESSAGE_BYTES};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.redb");
        let failure = LoadFailure {
            code: "load".into(),
            message: format!("describe failed: {}", "é".repeat(10_000)),
            at_ms: 1_700_000_000_000,
            timeout_ms: 500,
            fuel: 5_000_000_000,
            memory_bytes: 64 << 20,
        };
        {
            let cache = Store::open(&path).unwrap().compile_cache();
            assert!(cache.load_failure("w", "e").unwrap().is_none());
            cache.put_load_failure("w", "e", &failure).unwrap();
        }
        let cache = Store::open(&path).unwrap().compile_cache();
        let read = cache.load_failure("w", "e").unwrap().unwrap();
        assert!(read.message.len() <= MAX_LOAD_FAILURE_MESSAGE_BYTES);
        assert!(read.message.starts_with("describe failed: é"));
        assert!(
            read.message.ends_with(" [cut]"),
            "{}",
            &read.message[4000..]
        );
        assert_eq!((read.code.as_str(), read.at_ms), ("load", failure.at_ms));
        assert_eq!(
            (read.timeout_ms, read.fuel, read.memory_bytes),
            (500, 5_000_000_000, 64 << 20)
        );
        // Another engine, or another digest, is another key.
        assert!(cache.load_failure("w", "other").unwrap().is_none());
        assert!(cache.load_failure("x", "e").unwrap().is_none());
        assert_eq!(cache.load_failure_count().unwrap(), 1);
        assert!(cache.remove_load_failure("w", "e").unwrap());
        assert!(!cache.remove_load_failure("w", "e").unwrap());
        assert!(cache.load_failure("w", "e").unwrap().is_none());
    }

    #[test]
    fn specs_round_trip_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.redb");
        Store::open(&path)
            .unwrap()
            .compile_cache()
            .put_spec("w", r#"{"name":"x"}"#)
            .unwrap();
        let store = Store::open(&path).unwrap();
        assert_eq!(
            store.compile_cache().spec("w").unwrap().as_deref(),
            Some(r#"{"name":"x"}"#)
        );
    }
}
