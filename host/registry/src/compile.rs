//! The compile cache in use: a component comes from the cached artifact of
//! its wasm digest and this engine, or is compiled and stored; a component
//! that failed to load is remembered, so the next start skips it.

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sandgraph_core::GraphSpec;
use sandgraph_runtime::{Compiled, ErrorCode, Graph, Limits, RunError, Runtime};
use sandgraph_store::{CompileCache, LoadFailure, sha256_hex};

/// A compile at least this long is logged at `info` (see [`Cache::component`]).
const SLOW_COMPILE: Duration = Duration::from_secs(1);

/// zstd level of stored artifacts. Level 3 (zstd's default) measured on a
/// CPython component's artifact: 39 MB to 13 MB, 0.6 s to compress once,
/// under 0.1 s to decompress on each load.
const ARTIFACT_ZSTD_LEVEL: i32 = 3;

/// The largest artifact a cached entry may decompress to, the store's
/// bound on an entry. Artifacts are authenticated before this runs; the
/// bound keeps a corrupt or hostile frame header from asking for an
/// unbounded buffer all the same.
const MAX_ARTIFACT_BYTES: u64 = sandgraph_store::MAX_ARTIFACT_BYTES;

/// The four bytes every zstd frame starts with.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// An artifact as stored: zstd-compressed (a compiled language runtime is
/// tens of MB of machine code and data that compress 4-5x).
fn pack(artifact: &[u8]) -> Result<Vec<u8>, RunError> {
    zstd::bulk::compress(artifact, ARTIFACT_ZSTD_LEVEL).map_err(|e| {
        RunError::new(
            ErrorCode::Load,
            format!("cannot compress a compiled artifact: {e}"),
        )
    })
}

/// The artifact of a stored entry: decompressed when it is a zstd frame;
/// entries written before compression (an ELF image) are used as they are.
fn unpack(stored: Vec<u8>) -> Result<Vec<u8>, RunError> {
    if !stored.starts_with(&ZSTD_MAGIC) {
        return Ok(stored);
    }
    let bad = |e: std::io::Error| {
        RunError::new(
            ErrorCode::Load,
            format!("cannot decompress a cached artifact: {e}"),
        )
    };
    let decoder = zstd::stream::read::Decoder::new(stored.as_slice()).map_err(bad)?;
    let mut artifact = Vec::new();
    decoder
        .take(MAX_ARTIFACT_BYTES + 1)
        .read_to_end(&mut artifact)
        .map_err(bad)?;
    if artifact.len() as u64 > MAX_ARTIFACT_BYTES {
        return Err(RunError::new(
            ErrorCode::Load,
            format!(
                "a cached artifact decompresses to more than {} MiB",
                MAX_ARTIFACT_BYTES >> 20
            ),
        ));
    }
    Ok(artifact)
}

/// Loads the component `bytes` through the compile cache `cache` (`None`:
/// compile), as a mount does: the compiled artifact of its sha256 and this
/// engine is deserialized when the cache holds a good one, else the bytes
/// are compiled and the artifact stored; the spec the component described
/// for the same digest is reused (no guest code runs), else `describe` runs
/// and its spec is stored. For the commands that load one graph by path
/// (`run`, `inspect`, `check`, `test`); the registry's own mounts go
/// through the same cache.
///
/// # Errors
///
/// A `load` error when the bytes are not a loadable graph component.
pub async fn load_cached(
    runtime: &Runtime,
    cache: Option<&CompileCache>,
    bytes: Vec<u8>,
) -> Result<Arc<Graph>, RunError> {
    let cache = Cache {
        store: cache.cloned(),
        fingerprint: Arc::from(runtime.engine_fingerprint()),
    };
    let digest = sha256_hex(&bytes);
    let bytes: Arc<[u8]> = Arc::from(bytes);
    let component = cache.component(runtime, &digest, &bytes).await?;
    if let Some(spec) = cache.spec(&digest) {
        tracing::debug!(digest, "compile cache: reusing the described spec");
        return runtime.load_described(component, spec);
    }
    let graph = runtime.load_component(component).await?;
    cache.put_spec(&digest, graph.spec());
    Ok(graph)
}

/// The cache of one registry: the store (if any) and this engine's
/// fingerprint.
#[derive(Clone)]
pub(crate) struct Cache {
    pub(crate) store: Option<CompileCache>,
    pub(crate) fingerprint: Arc<str>,
}

impl Cache {
    /// The cached spec of the component with `digest`, if it parses and
    /// validates; anything else counts as a miss.
    pub(crate) fn spec(&self, digest: &str) -> Option<GraphSpec> {
        let store = self.store.as_ref()?;
        let text = match store.spec(digest) {
            Ok(text) => text?,
            Err(e) => {
                tracing::warn!(digest, "compile cache: cannot read a spec: {e}");
                return None;
            }
        };
        let spec = serde_json::from_str::<GraphSpec>(&text)
            .map_err(|e| e.to_string())
            .and_then(|spec| spec.validate().map(|()| spec).map_err(|e| e.to_string()));
        match spec {
            Ok(spec) => Some(spec),
            Err(e) => {
                tracing::warn!(digest, "compile cache: ignoring a bad cached spec: {e}");
                None
            }
        }
    }

    /// Records the spec a component described.
    pub(crate) fn put_spec(&self, digest: &str, spec: &GraphSpec) {
        let Some(store) = &self.store else { return };
        let stored = serde_json::to_string(spec)
            .map_err(|e| e.to_string())
            .and_then(|text| store.put_spec(digest, &text).map_err(|e| e.to_string()));
        if let Err(e) = stored {
            tracing::warn!(digest, "compile cache: cannot store a spec: {e}");
        }
    }

    /// The recorded load failure of the component with `digest` on this
    /// engine, and whether it still stands under `limits` (the runtime's
    /// load limits): a failure recorded under limits that were not more
    /// generous in every respect (wall clock, fuel, memory) is retried.
    pub(crate) fn load_failure(
        &self,
        digest: &str,
        limits: &Limits,
    ) -> Option<(LoadFailure, bool)> {
        let store = self.store.as_ref()?;
        match store.load_failure(digest, &self.fingerprint) {
            Ok(Some(failure)) => {
                let stands = limits.timeout.as_millis() <= u128::from(failure.timeout_ms)
                    && limits.fuel <= failure.fuel
                    && limits.memory as u64 <= failure.memory_bytes;
                Some((failure, stands))
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(digest, "compile cache: cannot read a load failure: {e}");
                None
            }
        }
    }

    /// Records that the component with `digest` failed to load under
    /// `limits`. Only [`ErrorCode::Load`] failures are recorded: those are
    /// the component's own (an invalid file, a failing or slow `describe`,
    /// an invalid spec); any other code is a condition of the host at the
    /// time (no free instance slot, the host-wide memory budget spent, a
    /// shutdown) and the next start tries again.
    pub(crate) fn put_load_failure(&self, digest: &str, error: &RunError, limits: &Limits) {
        let Some(store) = &self.store else { return };
        if error.code != ErrorCode::Load {
            return;
        }
        let failure = LoadFailure {
            code: error.code.as_str().to_owned(),
            message: error.message.clone(),
            at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            timeout_ms: u64::try_from(limits.timeout.as_millis()).unwrap_or(u64::MAX),
            fuel: limits.fuel,
            memory_bytes: limits.memory as u64,
        };
        if let Err(e) = store.put_load_failure(digest, &self.fingerprint, &failure) {
            tracing::warn!(digest, "compile cache: cannot record a load failure: {e}");
        }
    }

    /// Forgets the load failure of `digest` on this engine (it loaded).
    pub(crate) fn remove_load_failure(&self, digest: &str) {
        let Some(store) = &self.store else { return };
        if let Err(e) = store.remove_load_failure(digest, &self.fingerprint) {
            tracing::warn!(digest, "compile cache: cannot forget a load failure: {e}");
        }
    }

    /// The component of `bytes` (digest `digest`): deserialized from the
    /// cached artifact when there is a good one, else compiled (and the
    /// artifact stored). Compiling and deserializing run on the blocking
    /// pool.
    pub(crate) async fn component(
        &self,
        runtime: &Runtime,
        digest: &str,
        bytes: &Arc<[u8]>,
    ) -> Result<Compiled, RunError> {
        if let Some(component) = self.cached_component(runtime, digest).await {
            tracing::debug!(digest, "compile cache: loaded the compiled artifact");
            return Ok(component);
        }
        let rt = runtime.clone();
        let wasm = bytes.clone();
        let started = Instant::now();
        let component = blocking(move || rt.compile(&wasm)).await?;
        let took = started.elapsed();
        if took >= SLOW_COMPILE {
            // An operator should know where a slow start goes: a component
            // with a language runtime inside (CPython, a JS engine) takes
            // seconds to compile, once per engine and digest.
            tracing::info!(
                digest,
                wasm_bytes = bytes.len(),
                "compiled a component in {:.1} s{}",
                took.as_secs_f64(),
                if self.store.is_some() {
                    "; cached for the next load"
                } else {
                    " (no compile cache: every start pays this)"
                }
            );
        }
        if let Some(store) = self.store.clone() {
            let rt = runtime.clone();
            let fingerprint = self.fingerprint.clone();
            let key = digest.to_owned();
            let c = component.clone();
            let stored = blocking(move || {
                let artifact = pack(&rt.serialize(&c)?)?;
                store
                    .put_artifact(&key, &fingerprint, &artifact)
                    .map_err(|e| RunError::new(ErrorCode::Load, e.to_string()))
            })
            .await;
            match stored {
                Ok(()) => {
                    tracing::debug!(digest, "compile cache: compiled and stored the artifact")
                }
                Err(e) => tracing::warn!("compile cache: cannot store an artifact: {}", e.message),
            }
        }
        Ok(component)
    }

    async fn cached_component(&self, runtime: &Runtime, digest: &str) -> Option<Compiled> {
        let store = self.store.clone()?;
        let rt = runtime.clone();
        let fingerprint = self.fingerprint.clone();
        let key = digest.to_owned();
        let loaded = blocking(move || {
            // The cache checks the artifact against its HMAC and hands out
            // nothing that does not authenticate.
            let Some(artifact) = store
                .artifact(&key, &fingerprint)
                .map_err(|e| RunError::new(ErrorCode::Load, e.to_string()))?
            else {
                return Ok(None);
            };
            let bytes = unpack(artifact.bytes)?;
            // SAFETY: the bytes are what `Runtime::serialize` produced for an
            // engine with this fingerprint (the entry's name), and the cache
            // authenticated them under its key, which only its owner reads.
            unsafe { rt.deserialize(&bytes) }.map(Some)
        })
        .await;
        match loaded {
            Ok(component) => component,
            Err(e) => {
                tracing::warn!(digest, "compile cache: recompiling: {}", e.message);
                None
            }
        }
    }
}

/// Runs `f` on the blocking pool. A panic there (the compiler's, on this
/// component) becomes a load error; a task cancelled by a shutting-down
/// runtime a `timeout`, which is not remembered as the component's failure.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, RunError> + Send + 'static,
) -> Result<T, RunError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(if e.is_panic() {
            RunError::new(
                ErrorCode::Load,
                "compiling the component failed: the compiler panicked",
            )
        } else {
            RunError::new(
                ErrorCode::Timeout,
                "compiling the component was cancelled: the host is shutting down",
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifacts_round_trip_through_the_packing() {
        let artifact: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let packed = pack(&artifact).unwrap();
        assert!(packed.starts_with(&ZSTD_MAGIC));
        assert!(packed.len() < artifact.len() / 4, "{} bytes", packed.len());
        assert_eq!(unpack(packed).unwrap(), artifact);
    }

    #[test]
    fn entries_from_before_compression_are_used_as_they_are() {
        let elf = b"\x7fELF and the rest of an artifact".to_vec();
        assert_eq!(unpack(elf.clone()).unwrap(), elf);
    }

    #[test]
    fn a_broken_frame_is_a_load_error() {
        let mut packed = pack(&[7u8; 4096]).unwrap();
        packed.truncate(packed.len() - 3);
        let err = unpack(packed).unwrap_err();
        assert_eq!(err.code, ErrorCode::Load);
        assert!(err.message.contains("cannot decompress"), "{}", err.message);
    }
}
