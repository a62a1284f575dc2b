//! `sandgraph push` and `sandgraph pull`: a graph component to and from an
//! OCI registry, in the CNCF WebAssembly OCI artifact layout (see
//! `sandgraph_distribution`). The signature sidecar (`GRAPH.wasm.sig`)
//! travels in the manifest and is written back next to the pulled file.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use sandgraph_artifact::{MAX_SIGNATURE_FILE, signature_path};
use sandgraph_distribution::{
    Artifact, ComponentInfo, ConnectOptions, Error, MAX_COMPONENT_BYTES, MAX_SIGNATURE_BYTES,
    Remote,
};

use crate::cache::CacheArgs;
use crate::exit::Failure;

// Whatever `sandgraph sign` may write, a push can carry; whatever a command
// loads, a push can carry.
const _: () = assert!(MAX_SIGNATURE_FILE <= MAX_SIGNATURE_BYTES);
const _: () = assert!(crate::cache::MAX_COMPONENT_BYTES as usize <= MAX_COMPONENT_BYTES);

/// `sandgraph push`
#[derive(clap::Args)]
pub struct PushArgs {
    /// The graph component to push (checked to load as a sandgraph graph first)
    #[arg(value_name = "GRAPH.wasm")]
    graph: PathBuf,
    /// Where to push it: registry/repository:tag, e.g. localhost:5000/graphs/echo:1.0
    #[arg(value_name = "REF")]
    reference: String,
    /// The config's `author` field
    #[arg(long)]
    author: Option<String>,
    #[command(flatten)]
    connect: ConnectArgs,
    #[command(flatten)]
    cache: CacheArgs,
}

/// `sandgraph pull`
#[derive(clap::Args)]
pub struct PullArgs {
    /// What to pull: registry/repository:tag or registry/repository@sha256:<hex>
    #[arg(value_name = "REF")]
    reference: String,
    /// The file to write, or a folder to write <repository name>.wasm into
    #[arg(long, value_name = "FILE|DIR", default_value = ".")]
    out: PathBuf,
    #[command(flatten)]
    connect: ConnectArgs,
}

#[derive(clap::Args)]
struct ConnectArgs {
    /// Allow plain HTTP to a registry that is not on loopback (loopback registries always use HTTP; all others HTTPS)
    #[arg(long)]
    insecure: bool,
}

impl ConnectArgs {
    fn remote(&self, reference: &str) -> Result<Remote, Failure> {
        let remote = Remote::connect(
            reference,
            &ConnectOptions {
                insecure: self.insecure,
                docker_config: None,
            },
        )
        .map_err(failure)?;
        if let Some(note) = &remote.credentials().note {
            eprintln!("warning: {note}");
        }
        Ok(remote)
    }
}

fn failure(e: Error) -> Failure {
    let exit = match e {
        Error::Reference(_) => 2,
        _ => crate::exit::REGISTRY,
    };
    Failure::new(e.code(), exit, e.to_string())
}

/// Reads at most `max` bytes of `path`; `what` names it in errors.
fn read_bounded(path: &Path, max: usize, what: &str) -> Result<Vec<u8>, Failure> {
    let cannot = |e: std::io::Error| {
        Failure::new(
            "invalid_args",
            2,
            format!("cannot read the {what} {}: {e}", path.display()),
        )
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(cannot)?
        .take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() > max {
        return Err(Failure::new(
            "too_large",
            2,
            format!(
                "the {what} {} is larger than {max} bytes, the most a {what} may be",
                path.display()
            ),
        ));
    }
    Ok(bytes)
}

pub async fn push(args: PushArgs) -> Result<ExitCode, Failure> {
    let remote = args.connect.remote(&args.reference)?;
    let component = crate::cache::read_component(&args.graph)?;
    // Only a sandgraph graph is pushed: it must load and describe itself
    // as `run` would load it (through the same compile cache), these very
    // bytes.
    let rt = sandgraph_factors::runtime(Default::default())?;
    let store = args.cache.open();
    let loaded = sandgraph_registry::load_cached(&rt, store.as_ref(), component.clone()).await;
    drop(store);
    let graph = loaded.map_err(|e| {
        Failure::from(sandgraph_runtime::RunError::new(
            e.code,
            format!(
                "{}: {}: only a graph component that loads is pushed",
                args.graph.display(),
                e.message
            ),
        ))
    })?;
    let (exports, imports) = graph.interface_names();
    let interfaces = ComponentInfo { exports, imports };
    let sidecar = signature_path(&args.graph);
    let signature = match sidecar.try_exists() {
        Ok(true) => Some(read_bounded(&sidecar, MAX_SIGNATURE_FILE, "signature")?),
        _ => None,
    };
    let artifact = Artifact {
        component,
        signature,
        interfaces,
        title: Some(graph.name().to_string()),
        author: args.author,
        created: None,
    };
    let pushed = remote.push(&artifact).await.map_err(failure)?;
    eprintln!(
        "pushed {} ({} bytes, {}){}{}",
        args.graph.display(),
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
    outln!("{}", pushed.pinned());
    Ok(ExitCode::SUCCESS)
}

/// The file `--out` names: `<out>/<name>.wasm` for a folder (an existing
/// one, or one written with a trailing `/`), else `out` itself.
fn out_path(out: &Path, name: &str) -> Result<PathBuf, Failure> {
    let as_dir = out.is_dir() || out.as_os_str().to_string_lossy().ends_with('/');
    let path = if as_dir {
        std::fs::create_dir_all(out).map_err(|e| {
            Failure::new(
                "invalid_args",
                2,
                format!("cannot create the folder {}: {e}", out.display()),
            )
        })?;
        out.join(format!("{name}.wasm"))
    } else {
        out.to_path_buf()
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(Failure::new(
            "invalid_args",
            2,
            format!(
                "--out {}: the folder {} does not exist; create it first",
                out.display(),
                parent.display()
            ),
        ));
    }
    Ok(path)
}

/// Writes `bytes` to `path` atomically: a temporary file in the same
/// folder, synced, renamed over `path`; nothing is left behind on failure.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    let cannot = |e: std::io::Error| {
        Failure::new(
            "io",
            crate::exit::INTERNAL,
            format!("cannot write {}: {e}", path.display()),
        )
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

pub async fn pull(args: PullArgs) -> Result<ExitCode, Failure> {
    let remote = args.connect.remote(&args.reference)?;
    let path = out_path(&args.out, remote.name())?;
    let pulled = remote.pull().await.map_err(failure)?;
    write_atomically(&path, &pulled.component)?;
    let sidecar = signature_path(&path);
    match &pulled.signature {
        Some(sig) => write_atomically(&sidecar, sig)?,
        // A sidecar left from an earlier file would not sign this one.
        None if sidecar.exists() => {
            std::fs::remove_file(&sidecar).map_err(|e| {
                Failure::new(
                    "io",
                    crate::exit::INTERNAL,
                    format!(
                        "cannot remove the stale signature {}: {e}",
                        sidecar.display()
                    ),
                )
            })?;
            eprintln!(
                "removed {}: {} carries no signature",
                sidecar.display(),
                args.reference
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
    outln!("{}", path.display());
    Ok(ExitCode::SUCCESS)
}
