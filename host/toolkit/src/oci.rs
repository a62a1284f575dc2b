//! `sandgraph push` and `sandgraph pull`: a graph component to and from an
//! OCI registry, in the CNCF WebAssembly OCI artifact layout (see
//! `sandgraph_distribution`). The signature sidecar (`GRAPH.wasm.sig`)
//! travels in the manifest and is written back next to the pulled file.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sandgraph_artifact::{MAX_SIGNATURE_FILE, signature_path};
use sandgraph_distribution::{
    Artifact, ComponentInfo, ConnectOptions, MAX_COMPONENT_BYTES, MAX_SIGNATURE_BYTES, Remote,
};

use crate::Error;
use crate::cache::CacheChoice;

// Whatever `sandgraph sign` may write, a push can carry; whatever a command
// loads, a push can carry.
const _: () = assert!(MAX_SIGNATURE_FILE <= MAX_SIGNATURE_BYTES);
const _: () = assert!(crate::cache::MAX_COMPONENT_BYTES as usize <= MAX_COMPONENT_BYTES);

/// Connects to the registry of `reference`; a note on its credentials
/// (where they came from, or why none were used) is a warning on stderr.
fn remote(reference: &str, insecure: bool) -> Result<Remote, Error> {
    let remote = Remote::connect(
        reference,
        &ConnectOptions {
            insecure,
            docker_config: None,
        },
    )?;
    if let Some(note) = &remote.credentials().note {
        eprintln!("warning: {note}");
    }
    Ok(remote)
}

/// Reads at most `max` bytes of `path`; `what` names it in errors.
fn read_bounded(path: &Path, max: usize, what: &str) -> Result<Vec<u8>, Error> {
    let cannot =
        |e: std::io::Error| Error::args(format!("cannot read the {what} {}: {e}", path.display()));
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(cannot)?
        .take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() > max {
        return Err(Error::Args {
            code: "too_large",
            message: format!(
                "the {what} {} is larger than {max} bytes, the most a {what} may be",
                path.display()
            ),
        });
    }
    Ok(bytes)
}

/// What to push and where ([`push`]).
pub struct PushOptions {
    /// The graph component; checked to load as a sandgraph graph first.
    pub graph: PathBuf,
    /// `registry/repository:tag`.
    pub reference: String,
    /// The config's `author` field.
    pub author: Option<String>,
    /// Allow plain HTTP to a registry that is not on loopback.
    pub insecure: bool,
    /// The compile cache the check loads through.
    pub cache: CacheChoice,
}

/// Pushes a graph component, with its signature sidecar when it has one,
/// in the wasm OCI artifact layout; returns the pinned reference
/// (`registry/repository@sha256:<hex>`). A line on stderr says what was
/// pushed.
pub async fn push(options: PushOptions) -> Result<String, Error> {
    let remote = remote(&options.reference, options.insecure)?;
    let component = crate::cache::read_component(&options.graph)?;
    // Only a sandgraph graph is pushed: it must load and describe itself
    // as `run` would load it (through the same compile cache), these very
    // bytes.
    let rt = sandgraph_factors::runtime(Default::default())?;
    let store = options.cache.open();
    let loaded = sandgraph_registry::load_cached(&rt, store.as_ref(), component.clone()).await;
    drop(store);
    let graph = loaded.map_err(|e| {
        Error::from(sandgraph_runtime::RunError::new(
            e.code,
            format!(
                "{}: {}: only a graph component that loads is pushed",
                options.graph.display(),
                e.message
            ),
        ))
    })?;
    let (exports, imports) = graph.interface_names();
    let interfaces = ComponentInfo { exports, imports };
    let sidecar = signature_path(&options.graph);
    let signature = match sidecar.try_exists() {
        Ok(true) => Some(read_bounded(&sidecar, MAX_SIGNATURE_FILE, "signature")?),
        _ => None,
    };
    let artifact = Artifact {
        component,
        signature,
        interfaces,
        title: Some(graph.name().to_string()),
        author: options.author,
        created: None,
    };
    let pushed = remote.push(&artifact).await?;
    eprintln!(
        "pushed {} ({} bytes, {}){}{}",
        options.graph.display(),
        artifact.component.len(),
        pushed.layer_digest,
        if artifact.signature.is_some() {
            format!(" with its signature {}", sidecar.display())
        } else {
            String::new()
        },
        if remote.plain_http() {
            " over plain HTTP"
        } else {
            ""
        },
    );
    Ok(pushed.pinned())
}

/// The file `--out` names: `<out>/<name>.wasm` for a folder (an existing
/// one, or one written with a trailing `/`), else `out` itself.
fn out_path(out: &Path, name: &str) -> Result<PathBuf, Error> {
    let as_dir = out.is_dir() || out.as_os_str().to_string_lossy().ends_with('/');
    let path = if as_dir {
        std::fs::create_dir_all(out)
            .map_err(|e| Error::args(format!("cannot create the folder {}: {e}", out.display())))?;
        out.join(format!("{name}.wasm"))
    } else {
        out.to_path_buf()
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(Error::args(format!(
            "--out {}: the folder {} does not exist; create it first",
            out.display(),
            parent.display()
        )));
    }
    Ok(path)
}

/// Writes `bytes` to `path` atomically: a temporary file in the same
/// folder, synced, renamed over `path`; nothing is left behind on failure.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let cannot = |e: std::io::Error| Error::Internal {
        code: "io",
        message: format!("cannot write {}: {e}", path.display()),
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".sandgraph-pull-")
        .tempfile_in(dir)
        .map_err(cannot)?;
    tmp.write_all(bytes).map_err(cannot)?;
    tmp.as_file().sync_all().map_err(cannot)?;
    tmp.persist(path).map_err(|e| cannot(e.error))?;
    Ok(())
}

/// What to pull and where to write it ([`pull`]).
pub struct PullOptions {
    /// `registry/repository:tag` or `registry/repository@sha256:<hex>`.
    pub reference: String,
    /// The file to write, or a folder to write `<repository name>.wasm`
    /// into (an existing one, or one named with a trailing `/`).
    pub out: PathBuf,
    /// Allow plain HTTP to a registry that is not on loopback.
    pub insecure: bool,
}

/// Pulls a graph component, checking its digest, and writes it (and its
/// signature sidecar, when the artifact carries one) atomically; returns
/// the file written. Lines on stderr say what was pulled.
pub async fn pull(options: PullOptions) -> Result<PathBuf, Error> {
    let remote = remote(&options.reference, options.insecure)?;
    let path = out_path(&options.out, remote.name())?;
    let pulled = remote.pull().await?;
    write_atomically(&path, &pulled.component)?;
    let sidecar = signature_path(&path);
    match &pulled.signature {
        Some(sig) => write_atomically(&sidecar, sig)?,
        // A sidecar left from an earlier file would not sign this one.
        None if sidecar.exists() => {
            std::fs::remove_file(&sidecar).map_err(|e| Error::Internal {
                code: "io",
                message: format!(
                    "cannot remove the stale signature {}: {e}",
                    sidecar.display()
                ),
            })?;
            eprintln!(
                "removed {}: {} carries no signature",
                sidecar.display(),
                options.reference
            );
        }
        None => {}
    }
    eprintln!(
        "pulled {}@{} ({} bytes, {}){}",
        remote.repository(),
        pulled.manifest_digest,
        pulled.component.len(),
        pulled.layer_digest,
        if pulled.signature.is_some() {
            format!(" with its signature {}", sidecar.display())
        } else {
            String::new()
        }
    );
    Ok(path)
}
