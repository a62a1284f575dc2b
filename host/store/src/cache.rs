//! The compile cache: compiled artifacts keyed by (wasm digest, engine
//! fingerprint), each stored with the digest of its own bytes, and graph
//! specs keyed by wasm digest.

use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTableMetadata};
use sha2::Digest;

use crate::{StoreError, schema};

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
