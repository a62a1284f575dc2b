//! `sandgraph lock`, `sandgraph keygen`, `sandgraph sign` and
//! `sandgraph verify`: pinning a folder's graphs and signing components
//! (the formats are in `sandgraph_artifact`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use sandgraph_artifact::keys::MAX_KEY_FILE;
use sandgraph_artifact::{Digest, LockEntry, LockFile, SecretKey, Sidecar, sha256_file};
use sandgraph_registry::{Registry, RegistryOptions};
use sandgraph_runtime::{ErrorCode, RunError, RuntimeConfig};

use crate::cache::CacheArgs;
use crate::exit::Failure;
use crate::show;

fn invalid(message: impl Into<String>) -> Failure {
    RunError::new(ErrorCode::InvalidInput, message).into()
}

fn shown(path: &Path) -> String {
    show::line(&path.display().to_string(), show::MAX_LINE_BYTES)
}

/// `sandgraph lock`
#[derive(clap::Args)]
pub struct LockArgs {
    /// Folder of graph components to pin (writes DIR/sandgraph.lock); repeatable
    #[arg(long = "graphs", value_name = "DIR", required = true)]
    graphs: Vec<PathBuf>,
    /// Operator config, for its load limits [default: the first sandgraph.toml in the working directory or above it]
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Compile cache folder, shared with other sandgraph processes [default: $SANDGRAPH_CACHE, else $XDG_CACHE_HOME/sandgraph/compile, else ~/.cache/sandgraph/compile]
    #[arg(long, value_name = "DIR", conflicts_with = "no_cache")]
    cache: Option<PathBuf>,
    /// Compile every graph, without reading or writing a cache
    #[arg(long)]
    no_cache: bool,
}

/// Writes `sandgraph.lock` in each folder: every `*.wasm` of the folder
/// must mount (its graph name comes from loading it), else nothing is
/// written for that folder.
pub async fn lock(args: LockArgs) -> Result<ExitCode, Failure> {
    // Mounted as `serve` would mount them: a graph whose `describe` needs
    // the operator's load limits loads here too.
    let config = crate::config::LoadedConfig::load(args.config.as_deref())?.config;
    config.check().map_err(crate::mount::registry_failure)?;
    let runtime = sandgraph_factors::runtime(RuntimeConfig {
        load_limits: config.load_limits(),
        ..RuntimeConfig::default()
    })?;
    let cache = crate::cache::open(args.cache.as_deref(), args.no_cache);
    for dir in &args.graphs {
        let before = digests(dir)?;
        let options = RegistryOptions {
            dirs: vec![dir.clone()],
            strict: true,
            config: config.clone(),
            cache: cache.clone(),
            log_warnings: false,
            ..RegistryOptions::default()
        };
        let (_, report) = Registry::open(runtime.clone(), options)
            .await
            .map_err(|e| {
                RunError::new(
                    ErrorCode::Load,
                    format!("cannot lock {}: {e}", dir.display()),
                )
            })?;
        let mut entries = Vec::with_capacity(report.mounted.len());
        for graph in &report.mounted {
            let sha256 = sha256_file(&graph.path).map_err(|e| invalid(e.to_string()))?;
            // A file replaced while it was loaded would pin bytes whose
            // graph name was never read.
            if before.get(&graph.path) != Some(&sha256) {
                return Err(invalid(format!(
                    "{} changed while it was being locked; run `sandgraph lock` again",
                    shown(&graph.path)
                )));
            }
            let file = graph
                .path
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| {
                    invalid(format!(
                        "{}: the file name is not UTF-8; rename it to lock it",
                        shown(&graph.path)
                    ))
                })?
                .to_owned();
            entries.push(LockEntry {
                file,
                name: graph.name.clone(),
                sha256,
            });
        }
        let lock = LockFile::new(entries).map_err(|m| invalid(format!("{}: {m}", shown(dir))))?;
        let path = lock.write(dir).map_err(|e| invalid(e.to_string()))?;
        outln!(
            "locked {} graph{} in {}",
            lock.graphs.len(),
            if lock.graphs.len() == 1 { "" } else { "s" },
            shown(&path)
        );
        for e in &lock.graphs {
            outln!(
                "  {}  {}  sha256:{}",
                show::line(&e.file, show::MAX_LINE_BYTES),
                show::line(&e.name, show::MAX_LINE_BYTES),
                e.sha256
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The sha256 of every `*.wasm` file of `dir`.
fn digests(dir: &Path) -> Result<BTreeMap<PathBuf, Digest>, Failure> {
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

/// `sandgraph keygen`
#[derive(clap::Args)]
pub struct KeygenArgs {
    /// Where to write the secret key (mode 0600); the public key goes to FILE.pub. Neither may exist
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

/// Writes a new ed25519 key pair and prints the key id.
pub async fn keygen(args: KeygenArgs) -> Result<ExitCode, Failure> {
    let key = SecretKey::generate().map_err(Failure::internal)?;
    // A keys folder that does not exist yet is made private (0700): it is
    // where the secret key lives.
    if let Some(parent) = args.out.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.exists()
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| invalid(format!("cannot create {}: {e}", parent.display())))?;
    }
    let public = key
        .write_pair(&args.out)
        .map_err(|e| invalid(e.to_string()))?;
    outln!("key id {}", key.public().id());
    outln!("secret key: {} (keep it private)", shown(&args.out));
    outln!(
        "public key: {} (copy it into the hosts' --trusted-keys folder)",
        shown(&public)
    );
    Ok(ExitCode::SUCCESS)
}

/// `sandgraph sign`
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("secret").required(true).args(["key", "key_env"])))]
pub struct SignArgs {
    /// The graph component to sign (GRAPH.wasm); the signature is written to GRAPH.wasm.sig
    graph: PathBuf,
    /// The secret key file (from `sandgraph keygen`); refused when its group or others may read or write it
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
    /// The environment variable that holds the secret key: the text `sandgraph keygen` writes to its key file (a CI secret)
    #[arg(long, value_name = "VAR")]
    key_env: Option<String>,
    #[command(flatten)]
    cache: CacheArgs,
}

/// The component at `path` and the name its graph describes itself with,
/// loaded as `run` loads it (through the compile cache).
async fn named(path: &Path, cache: &CacheArgs) -> Result<(Vec<u8>, String), Failure> {
    let bytes = crate::cache::read_component(path)?;
    let rt = sandgraph_factors::runtime(Default::default())?;
    let store = cache.open();
    let graph = sandgraph_registry::load_cached(&rt, store.as_ref(), bytes.clone())
        .await
        .map_err(|e| {
            Failure::from(RunError::new(
                e.code,
                format!("{}: {}", shown(path), e.message),
            ))
        })?;
    Ok((bytes, graph.name().to_owned()))
}

/// Signs the component's sha256 and its graph's name (read by loading
/// it) and writes the sidecar next to it; the component itself is not
/// changed.
pub async fn sign(args: SignArgs) -> Result<ExitCode, Failure> {
    let key = match (&args.key, &args.key_env) {
        (Some(path), _) => SecretKey::read(path).map_err(|e| invalid(e.to_string()))?,
        (None, Some(var)) => key_from_env(var)?,
        // clap requires one of them.
        (None, None) => {
            return Err(invalid(
                "give the secret key with --key FILE or --key-env VAR",
            ));
        }
    };
    let (bytes, name) = named(&args.graph, &args.cache).await?;
    let digest = sandgraph_artifact::sha256(&bytes);
    let sidecar = Sidecar::sign(&key, digest, &name)
        .write_for(&args.graph)
        .map_err(|e| invalid(e.to_string()))?;
    outln!(
        "signed {} (graph \"{}\", sha256:{digest}) with key {}",
        shown(&args.graph),
        show::line(&name, show::MAX_LINE_BYTES),
        key.public().id()
    );
    outln!("wrote {}", shown(&sidecar));
    Ok(ExitCode::SUCCESS)
}

/// The secret key held by the environment variable `var`, bounded as a key
/// file is. No message shows the variable's value.
fn key_from_env(var: &str) -> Result<SecretKey, Failure> {
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

/// `sandgraph verify`
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("keys").required(true).multiple(true).args(["trusted_keys", "key"])))]
pub struct VerifyArgs {
    /// The graph component (its signature is GRAPH.wasm.sig)
    graph: PathBuf,
    /// Folder of trusted public keys (*.pub files); repeatable
    #[arg(long = "trusted-keys", value_name = "DIR")]
    trusted_keys: Vec<PathBuf>,
    /// A trusted public key file (KEY.pub); repeatable
    #[arg(long, value_name = "FILE")]
    key: Vec<PathBuf>,
    #[command(flatten)]
    cache: CacheArgs,
}

/// Checks the component's sidecar against the trusted keys, then that the
/// graph is named as signed (the signature is checked before any of the
/// component's code runs): exit 0 and the signer's key id, or
/// [`crate::exit::CHECK_FAILED`] saying what is wrong.
pub async fn verify(args: VerifyArgs) -> Result<ExitCode, Failure> {
    let keys = crate::mount::trusted_keys(&args.trusted_keys, &args.key)?;
    let digest = sha256_file(&args.graph).map_err(|e| invalid(e.to_string()))?;
    let refused = |message: String| {
        Failure::new(
            "signature",
            crate::exit::CHECK_FAILED,
            show::line(&message, show::MAX_LINE_BYTES),
        )
    };
    let verified = sandgraph_artifact::verify(&args.graph, &digest, &keys)
        .map_err(|e| refused(e.to_string()))?;
    let (bytes, name) = named(&args.graph, &args.cache).await?;
    if sandgraph_artifact::sha256(&bytes) != digest {
        return Err(invalid(format!(
            "{} changed while it was being verified; verify it again",
            shown(&args.graph)
        )));
    }
    if name != verified.name {
        return Err(refused(format!(
            "{}: the graph is named \"{name}\" but its signature vouches for the graph \"{}\"; \
             sign it again if the name changed on purpose",
            args.graph.display(),
            verified.name
        )));
    }
    outln!(
        "verified {} (graph \"{}\", sha256:{digest}): signed by key {} ({})",
        shown(&args.graph),
        show::line(&name, show::MAX_LINE_BYTES),
        verified.key_id,
        shown(&verified.key_file)
    );
    Ok(ExitCode::SUCCESS)
}
