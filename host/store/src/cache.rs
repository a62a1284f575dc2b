//! The compile cache: compiled artifacts keyed by (wasm digest, engine
//! fingerprint), each stored with the digest of its own bytes, graph specs
//! keyed by wasm digest, and the components that failed to load, keyed like
//! artifacts.

use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTableMetadata};
use serde::{Deserialize, Serialize};
use sha2::Digest;

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
    pub fn bounded_message(message: &str) -> String {
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
}

/// An artifact read back from the cache whose bytes matched their digest.
#[derive(Debug)]
pub struct CachedArtifact {
    /// The serialized compiled component.
    pub bytes: Vec<u8>,
}

impl CompileCache {
    pub(crate) fn new(db: Arc<Database>) -> Self {
        CompileCache { db }
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

    /// The artifact for `(wasm_digest, engine)`, checked against its recorded
    /// digest. A record whose bytes do not match is deleted and reported as
    /// missing, so the caller recompiles instead of deserializing bad bytes.
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
        if raw.len() >= 32 {
            let (digest, bytes) = raw.split_at(32);
            if sha2::Sha256::digest(bytes).as_slice() == digest {
                return Ok(Some(CachedArtifact {
                    bytes: bytes.to_vec(),
                }));
            }
        }
        tracing::warn!(
            wasm_digest,
            "cached artifact does not match its digest; discarding it"
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
        let mut value = Vec::with_capacity(32 + artifact.len());
        value.extend_from_slice(&sha2::Sha256::digest(artifact));
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
