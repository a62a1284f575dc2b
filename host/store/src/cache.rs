//! The compile cache: compiled artifacts keyed by (wasm digest, engine
//! fingerprint), each stored with its HMAC under a key kept outside the
//! database (`<file>.key`), graph specs keyed by wasm digest, and the
//! components that failed to load, keyed like
//! artifacts.

use std::sync::Arc;

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

/// Compiled artifacts and specs.
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

/// The key that authenticates cached artifacts: 32 random bytes in
/// `<database>.key`, 0600, made on first use. It is not in the database, so
/// whoever can write the cache file (a shared cache, a restored CI cache)
/// cannot forge an artifact the host will deserialize.
#[derive(Debug)]
pub(crate) struct KeyFile {
    path: std::path::PathBuf,
    key: std::sync::OnceLock<Option<[u8; 32]>>,
}

impl KeyFile {
    /// No key: no artifact is trusted (the in-memory cache of a
    /// PostgreSQL store, which has no file to put a key beside).
    pub(crate) fn disabled() -> Self {
        KeyFile {
            path: std::path::PathBuf::new(),
            key: std::sync::OnceLock::from(None),
        }
    }

    pub(crate) fn beside(db: &std::path::Path) -> Self {
        let mut name = db.as_os_str().to_owned();
        name.push(".key");
        KeyFile {
            path: name.into(),
            key: std::sync::OnceLock::new(),
        }
    }

    /// The key, or `None` when it cannot be read, made, or trusted (then no
    /// artifact is trusted: every graph is compiled).
    fn get(&self) -> Option<&[u8; 32]> {
        self.key
            .get_or_init(|| match self.load_or_make() {
                Ok(key) => Some(key),
                Err(e) => {
                    tracing::warn!(
                        "compile cache key {}: {e}; cached artifacts are not used",
                        self.path.display()
                    );
                    None
                }
            })
            .as_ref()
    }

    fn load_or_make(&self) -> std::io::Result<[u8; 32]> {
        use std::io::{Read, Write};
        #[cfg(unix)]
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        match std::fs::File::open(&self.path) {
            Ok(mut f) => {
                #[cfg(unix)]
                if f.metadata()?.permissions().mode() & 0o077 != 0 {
                    return Err(std::io::Error::other(
                        "readable or writable by others than its owner: refused",
                    ));
                }
                let mut key = [0u8; 32];
                f.read_exact(&mut key)?;
                Ok(key)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = [0u8; 32];
                std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
                let mut options = std::fs::OpenOptions::new();
                options.write(true).create_new(true);
                #[cfg(unix)]
                options.mode(0o600);
                match options.open(&self.path) {
                    Ok(mut f) => {
                        f.write_all(&key)?;
                        f.sync_all()?;
                        Ok(key)
                    }
                    // Another process made it first: use theirs.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        let mut key = [0u8; 32];
                        std::fs::File::open(&self.path)?.read_exact(&mut key)?;
                        Ok(key)
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }
}

/// HMAC-SHA256 of an artifact under `key`, bound to the row it belongs to
/// (wasm digest and engine), so a row copied under another key fails.
fn artifact_mac(
    key: &[u8; 32],
    wasm_digest: &str,
    engine: &str,
    artifact: &[u8],
) -> hmac::Hmac<sha2::Sha256> {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("hmac takes keys of any length"));
    for part in [wasm_digest.as_bytes(), engine.as_bytes()] {
        mac.update(&(part.len() as u64).to_le_bytes());
        mac.update(part);
    }
    mac.update(artifact);
    mac
}

impl CompileCache {
    pub(crate) fn new(db: Arc<Database>, key: Arc<KeyFile>) -> Self {
        CompileCache { db, key }
    }

    /// The cached spec JSON of the component with digest `wasm_digest`.
    pub fn spec(&self, wasm_digest: &str) -> Result<Option<String>, StoreError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(schema::SPECS)?;
        Ok(t.get(wasm_digest)?.map(|v| v.value().to_string()))
    }

    /// Records the spec of a component.
    pub fn put_spec(&self, wasm_digest: &str, spec_json: &str) -> Result<(), StoreError> {
        let tx = self.db.begin_write()?;
        tx.open_table(schema::SPECS)?
            .insert(wasm_digest, spec_json)?;
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
        let Some(key) = self.key.get() else {
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
        let Some(key) = self.key.get() else {
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
    /// does not decode is reported as missing (the component is retried).
    pub fn load_failure(
        &self,
        wasm_digest: &str,
        engine: &str,
    ) -> Result<Option<LoadFailure>, StoreError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(schema::LOAD_FAILURES)?;
        let Some(text) = t.get((wasm_digest, engine))?.map(|v| v.value().to_owned()) else {
            return Ok(None);
        };
        match serde_json::from_str(&text) {
            Ok(failure) => Ok(Some(failure)),
            Err(e) => {
                tracing::warn!(wasm_digest, "ignoring a bad load failure row: {e}");
                Ok(None)
            }
        }
    }

    /// Records that `(wasm_digest, engine)` failed to load, replacing any
    /// earlier record; the message is cut to
    /// [`MAX_LOAD_FAILURE_MESSAGE_BYTES`].
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
        let text = serde_json::to_string(&bounded)
            .map_err(|e| StoreError::Db(format!("cannot encode a load failure: {e}")))?;
        let tx = self.db.begin_write()?;
        tx.open_table(schema::LOAD_FAILURES)?
            .insert((wasm_digest, engine), text.as_str())?;
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
        }
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
