//! `sandgraph push` and `sandgraph pull`: their flags and output; the work
//! is `sandgraph_toolkit::oci`'s.

use std::path::PathBuf;
use std::process::ExitCode;

use sandgraph_toolkit::oci::{self, PullOptions, PushOptions};

use crate::cache::CacheArgs;
use crate::exit::Failure;

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

/// Pushes the component and prints its pinned reference.
pub async fn push(args: PushArgs) -> Result<ExitCode, Failure> {
    let options = PushOptions {
        cache: args.cache.choice(),
        graph: args.graph,
        reference: args.reference,
        author: args.author,
        insecure: args.connect.insecure,
    };
    let pinned = oci::push(options).await?;
    outln!("{pinned}");
    Ok(ExitCode::SUCCESS)
}

/// Pulls the component and prints the file written.
pub async fn pull(args: PullArgs) -> Result<ExitCode, Failure> {
    let options = PullOptions {
        reference: args.reference,
        out: args.out,
        insecure: args.connect.insecure,
    };
    let path = oci::pull(options).await?;
    outln!("{}", path.display());
    Ok(ExitCode::SUCCESS)
}
