//! `sandgraph lock`, `sandgraph keygen`, `sandgraph sign` and
//! `sandgraph verify`: their flags and output; the work is
//! `sandgraph_toolkit::sign`'s.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use sandgraph_toolkit::cache::CacheChoice;
use sandgraph_toolkit::sign::{self as toolkit, KeySource, Locker};

use crate::cache::CacheArgs;
use crate::exit::Failure;
use crate::show;

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

/// Writes `sandgraph.lock` in each folder and prints what it pins.
pub async fn lock(args: LockArgs) -> Result<ExitCode, Failure> {
    // Mounted as `serve` would mount them: a graph whose `describe` needs
    // the operator's load limits loads here too.
    let config = crate::config::LoadedConfig::load(args.config.as_deref())?.config;
    let cache = CacheChoice {
        dir: args.cache,
        disabled: args.no_cache,
    };
    let locker = Locker::new(config, &cache)?;
    for dir in &args.graphs {
        let locked = locker.lock(dir).await?;
        let graphs = &locked.lock.graphs;
        outln!(
            "locked {} graph{} in {}",
            graphs.len(),
            if graphs.len() == 1 { "" } else { "s" },
            shown(&locked.path)
        );
        for e in graphs {
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

/// `sandgraph keygen`
#[derive(clap::Args)]
pub struct KeygenArgs {
    /// Where to write the secret key (mode 0600); the public key goes to FILE.pub. Neither may exist
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

/// Writes a new ed25519 key pair and prints the key id.
pub async fn keygen(args: KeygenArgs) -> Result<ExitCode, Failure> {
    let pair = toolkit::keygen(&args.out)?;
    outln!("key id {}", pair.key_id);
    outln!("secret key: {} (keep it private)", shown(&args.out));
    outln!(
        "public key: {} (copy it into the hosts' --trusted-keys folder)",
        shown(&pair.public)
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

/// Signs the component and prints what was signed.
pub async fn sign(args: SignArgs) -> Result<ExitCode, Failure> {
    let key = match (args.key, args.key_env) {
        (Some(path), _) => KeySource::File(path),
        (None, Some(var)) => KeySource::Env(var),
        // clap requires one of them.
        (None, None) => {
            return Err(sandgraph_toolkit::Error::invalid(
                "give the secret key with --key FILE or --key-env VAR",
            )
            .into());
        }
    };
    let signed = toolkit::sign(&args.graph, &key, &args.cache.choice()).await?;
    outln!(
        "signed {} (graph \"{}\", sha256:{}) with key {}",
        shown(&args.graph),
        show::line(&signed.name, show::MAX_LINE_BYTES),
        signed.digest,
        signed.key_id
    );
    outln!("wrote {}", shown(&signed.sidecar));
    Ok(ExitCode::SUCCESS)
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

/// Verifies the component's signature: exit 0 and the signer's key id, or
/// [`crate::exit::CHECK_FAILED`] saying what is wrong.
pub async fn verify(args: VerifyArgs) -> Result<ExitCode, Failure> {
    let keys = toolkit::trusted_keys(&args.trusted_keys, &args.key)?;
    let verified = toolkit::verify(&args.graph, &keys, &args.cache.choice()).await?;
    outln!(
        "verified {} (graph \"{}\", sha256:{}): signed by key {} ({})",
        shown(&args.graph),
        show::line(&verified.name, show::MAX_LINE_BYTES),
        verified.digest,
        verified.key_id,
        shown(&verified.key_file)
    );
    Ok(ExitCode::SUCCESS)
}
