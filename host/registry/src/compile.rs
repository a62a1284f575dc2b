//! The compile cache in use: a component comes from the cached artifact of
//! its wasm digest and this engine, or is compiled and stored.

use std::sync::Arc;

use sandgraph_core::GraphSpec;
use sandgraph_runtime::{ErrorCode, RunError, Runtime};
use sandgraph_store::CompileCache;
use wasmtime::component::Component;

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

    /// The component of `bytes` (digest `digest`): deserialized from the
    /// cached artifact when there is a good one, else compiled (and the
    /// artifact stored). Compiling and deserializing run on the blocking
    /// pool.
    pub(crate) async fn component(
        &self,
        runtime: &Runtime,
        digest: &str,
        bytes: &Arc<[u8]>,
    ) -> Result<Component, RunError> {
        if let Some(component) = self.cached_component(runtime, digest).await {
            return Ok(component);
        }
        let rt = runtime.clone();
        let wasm = bytes.clone();
        let component = blocking(move || rt.compile(&wasm)).await?;
        if let Some(store) = self.store.clone() {
            let rt = runtime.clone();
            let fingerprint = self.fingerprint.clone();
            let digest = digest.to_owned();
            let c = component.clone();
            let stored = blocking(move || {
                let artifact = rt.serialize(&c)?;
                store
                    .put_artifact(&digest, &fingerprint, &artifact)
                    .map_err(|e| RunError::new(ErrorCode::Load, e.to_string()))
            })
            .await;
            if let Err(e) = stored {
                tracing::warn!("compile cache: cannot store an artifact: {}", e.message);
            }
        }
        Ok(component)
    }

    async fn cached_component(&self, runtime: &Runtime, digest: &str) -> Option<Component> {
        let store = self.store.clone()?;
        let rt = runtime.clone();
        let fingerprint = self.fingerprint.clone();
        let key = digest.to_owned();
        let loaded = blocking(move || {
            // The store checks the artifact against the digest recorded
            // with it and hands out nothing on a mismatch.
            let Some(artifact) = store
                .artifact(&key, &fingerprint)
                .map_err(|e| RunError::new(ErrorCode::Load, e.to_string()))?
            else {
                return Ok(None);
            };
            // SAFETY: the bytes are what `Runtime::serialize` produced for an
            // engine with this fingerprint (the key), and the store verified
            // them against the sha256 recorded when they were written.
            unsafe { rt.deserialize(&artifact.bytes) }.map(Some)
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

/// Runs `f` on the blocking pool; a panic there becomes a load error.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, RunError> + Send + 'static,
) -> Result<T, RunError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(RunError::new(
            ErrorCode::Load,
            format!("compiling the component failed: {e}"),
        ))
    })
}
