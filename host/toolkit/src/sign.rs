//! Pinning a folder's graphs ([`Locker`], `sandgraph lock`), making keys
//! ([`keygen`]), signing components ([`sign`]) and verifying them
//! ([`verify`]); the formats are in `sandgraph_artifact`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sandgraph_artifact::keys::MAX_KEY_FILE;
use sandgraph_artifact::{
    Digest, KeyId, LockEntry, LockFile, SecretKey, Sidecar, TrustedKeys, sha256_file,
};
use sandgraph_registry::{OperatorConfig, Registry, RegistryOptions};
use sandgraph_runtime::{ErrorCode, RunError, Runtime, RuntimeConfig};
use sandgraph_store::CompileCache;

use crate::Error;
use crate::cache::CacheChoice;
use crate::show;

fn invalid(message: impl Into<String>) -> Error {
    Error::invalid(message)
}

fn shown(path: &Path) -> String {
    show::line(&path.display().to_string(), show::MAX_LINE_BYTES)
}

/// Pins folders of graphs: mounts them as `serve` would (strictly, under
/// the operator's load limits) and writes each folder's `sandgraph.lock`.
pub struct Locker {
    runtime: Runtime,
    config: OperatorConfig,
    cache: Option<CompileCache>,
}

/// One folder pinned: where its lock file is, and what it holds.
pub struct Locked {
    /// The `sandgraph.lock` written.
    pub path: PathBuf,
    /// Its entries.
    pub lock: LockFile,
}

impl Locker {
    /// A locker under `config` (checked first), loading through `cache`.
    pub fn new(config: OperatorConfig, cache: &CacheChoice) -> Result<Locker, Error> {
        config.check()?;
        let runtime = sandgraph_factors::runtime(RuntimeConfig {
            load_limits: config.load_limits(),
            ..RuntimeConfig::default()
        })?;
        let cache = cache.open();
        Ok(Locker {
            runtime,
            config,
            cache,
        })
    }

    /// Writes `sandgraph.lock` in `dir`: every `*.wasm` of the folder must
    /// mount (its graph name comes from loading it), else nothing is
    /// written.
    pub async fn lock(&self, dir: &Path) -> Result<Locked, Error> {
        let before = digests(dir)?;
        let options = RegistryOptions {
            dirs: vec![dir.to_path_buf()],
            strict: true,
            config: self.config.clone(),
            cache: self.cache.clone(),
            log_warnings: false,
            ..RegistryOptions::default()
        };
        let (_, report) = Registry::open(self.runtime.clone(), options)
            .await
            .map_err(|e| {
                RunError::new(
                    ErrorCode::Load,
                    format!("cannot lock {}: {e}", dir.display()),
                )
            })?;
        let mut entries = Vec::with_capacity(report.mounted.len());
        for graph in &report.mounted {
            entries.push(lock_entry(&graph.path, &graph.name, &before)?);
        }
        let lock = LockFile::new(entries).map_err(|m| invalid(format!("{}: {m}", shown(dir))))?;
        let path = lock.write(dir).map_err(|e| invalid(e.to_string()))?;
        Ok(Locked { path, lock })
    }
}

/// The lock entry of the graph `name` mounted from `path`, whose digest
/// before mounting was in `before`.
fn lock_entry(
    path: &Path,
    name: &str,
    before: &BTreeMap<PathBuf, Digest>,
) -> Result<LockEntry, Error> {
    let sha256 = sha256_file(path).map_err(|e| invalid(e.to_string()))?;
    // A file replaced while it was loaded would pin bytes whose graph name
    // was never read.
    if before.get(path) != Some(&sha256) {
        return Err(invalid(format!(
            "{} changed while it was being locked; run `sandgraph lock` again",
            shown(path)
        )));
    }
    let file = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| {
            invalid(format!(
                "{}: the file name is not UTF-8; rename it to lock it",
                shown(path)
            ))
        })?
        .to_owned();
    Ok(LockEntry {
        file,
        name: name.to_owned(),
        sha256,
    })
}

/// The sha256 of every `*.wasm` file of `dir`.
fn digests(dir: &Path) -> Result<BTreeMap<PathBuf, Digest>, Error> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| invalid(format!("cannot read graph folder {}: {e}", shown(dir))))?;
    let mut out = BTreeMap::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "wasm") && path.is_file() {
            let digest = sha256_file(&path).map_err(|e| invalid(e.to_string()))?;
            out.insert(path, digest);
        }
    }
    Ok(out)
}

/// A key pair [`keygen`] wrote.
pub struct KeyPair {
    /// The public key's id.
    pub key_id: KeyId,
    /// The public key file (the secret key's path with `.pub`).
    pub public: PathBuf,
}

/// Writes a new ed25519 key pair: the secret key to `out` (mode 0600),
/// the public key to `out.pub`; neither may exist.
pub fn keygen(out: &Path) -> Result<KeyPair, Error> {
    let key = SecretKey::generate().map_err(|e| Error::internal(e.to_string()))?;
    // A keys folder that does not exist yet is made private (0700): it is
    // where the secret key lives.
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.exists()
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| invalid(format!("cannot create {}: {e}", parent.display())))?;
    }
    let public = key.write_pair(out).map_err(|e| invalid(e.to_string()))?;
    Ok(KeyPair {
        key_id: key.public().id(),
        public,
    })
}

/// Where the secret key of [`sign`] comes from.
pub enum KeySource {
    /// A key file (from [`keygen`]); refused when its group or others may
    /// read or write it.
    File(PathBuf),
    /// The environment variable holding the text of a key file.
    Env(String),
}

/// What [`sign`] signed.
pub struct Signed {
    /// The graph's name, as loading it told.
    pub name: String,
    /// The component's sha256.
    pub digest: Digest,
    /// The signing key's id.
    pub key_id: KeyId,
    /// The signature file written next to the component.
    pub sidecar: PathBuf,
}

/// The component at `path` and the name its graph describes itself with,
/// loaded as `run` loads it (through the compile cache).
async fn named(path: &Path, cache: &CacheChoice) -> Result<(Vec<u8>, String), Error> {
    let bytes = crate::cache::read_component(path)?;
    let rt = sandgraph_factors::runtime(Default::default())?;
    let store = cache.open();
    let graph = sandgraph_registry::load_cached(&rt, store.as_ref(), bytes.clone())
        .await
        .map_err(|e| RunError::new(e.code, format!("{}: {}", shown(path), e.message)))?;
    Ok((bytes, graph.name().to_owned()))
}

/// Signs the component `graph`'s sha256 and its graph's name (read by
/// loading it) with the key of `key`, and writes the sidecar next to it;
/// the component itself is not changed.
pub async fn sign(graph: &Path, key: &KeySource, cache: &CacheChoice) -> Result<Signed, Error> {
    let key = match key {
        KeySource::File(path) => SecretKey::read(path).map_err(|e| invalid(e.to_string()))?,
        KeySource::Env(var) => key_from_env(var)?,
    };
    let (bytes, name) = named(graph, cache).await?;
    let digest = sandgraph_artifact::sha256(&bytes);
    let sidecar = Sidecar::sign(&key, digest, &name)
        .write_for(graph)
        .map_err(|e| invalid(e.to_string()))?;
    Ok(Signed {
        name,
        digest,
        key_id: key.public().id(),
        sidecar,
    })
}

/// The secret key held by the environment variable `var`, bounded as a key
/// file is. No message shows the variable's value.
fn key_from_env(var: &str) -> Result<SecretKey, Error> {
    let name = show::line(var, show::MAX_LINE_BYTES);
    let refused = |problem: &str| {
        invalid(format!(
            "environment variable {name} {problem}; put the text of a secret key file \
             (`sandgraph keygen --out KEY` writes it to KEY) in it"
        ))
    };
    let Some(value) = std::env::var_os(var) else {
        return Err(refused("is not set"));
    };
    if value.len() > MAX_KEY_FILE {
        return Err(refused(&format!(
            "holds {} bytes, more than a secret key's {MAX_KEY_FILE}-byte limit",
            value.len()
        )));
    }
    let Some(text) = value.to_str() else {
        return Err(refused("is not UTF-8 text"));
    };
    if text.trim().is_empty() {
        return Err(refused("is empty"));
    }
    SecretKey::parse(text).map_err(|m| {
        invalid(format!(
            "environment variable {name} holds no secret key: {m}"
        ))
    })
}

/// The keys of folders of `*.pub` files (`dirs`) and key files (`files`).
pub fn trusted_keys(dirs: &[PathBuf], files: &[PathBuf]) -> Result<TrustedKeys, Error> {
    let mut keys = TrustedKeys::new();
    for dir in dirs {
        keys.add_dir(dir).map_err(|e| invalid(e.to_string()))?;
    }
    for file in files {
        keys.add_file(file).map_err(|e| invalid(e.to_string()))?;
    }
    Ok(keys)
}

/// What [`verify`] found: who signed which graph.
pub struct Verified {
    /// The graph's name, signed and as loading it told.
    pub name: String,
    /// The component's sha256.
    pub digest: Digest,
    /// The id of the key that signed it.
    pub key_id: KeyId,
    /// The trusted key file of that key.
    pub key_file: PathBuf,
}

/// Checks the sidecar of the component `graph` against `keys`, then that
/// the graph is named as signed (the signature is checked before any of
/// the component's code runs). A signature that does not verify is an
/// [`Error::Check`] (`signature`) saying what is wrong.
pub async fn verify(
    graph: &Path,
    keys: &TrustedKeys,
    cache: &CacheChoice,
) -> Result<Verified, Error> {
    let digest = sha256_file(graph).map_err(|e| invalid(e.to_string()))?;
    let refused = |message: String| Error::Check {
        code: "signature",
        message: show::line(&message, show::MAX_LINE_BYTES),
    };
    let verified =
        sandgraph_artifact::verify(graph, &digest, keys).map_err(|e| refused(e.to_string()))?;
    let (bytes, name) = named(graph, cache).await?;
    if sandgraph_artifact::sha256(&bytes) != digest {
        return Err(invalid(format!(
            "{} changed while it was being verified; verify it again",
            shown(graph)
        )));
    }
    if name != verified.name {
        return Err(refused(format!(
            "{}: the graph is named \"{name}\" but its signature vouches for the graph \"{}\"; \
             sign it again if the name changed on purpose",
            graph.display(),
            verified.name
        )));
    }
    Ok(Verified {
        name,
        digest,
        key_id: verified.key_id,
        key_file: verified.key_file,
    })
}
