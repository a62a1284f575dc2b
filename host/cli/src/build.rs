//! `sandgraph build DIR [--out FILE]`: its flags and output; the build is
//! `sandgraph_toolkit::build`'s.

use std::path::PathBuf;
use std::process::ExitCode;

use sandgraph_toolkit::build::BuildOptions;

use crate::cache::CacheArgs;
use crate::exit::Failure;

/// How `sandgraph build` builds, for its `--help`.
const BUILD_HELP: &str = "\
Profile: the crate is built with the cargo profile `sandgraph` for wasm32-wasip2. \
Unless the crate's workspace Cargo.toml defines [profile.sandgraph] with its own \
`inherits`, it inherits `release`. The size settings opt-level = \"s\", lto = true and \
codegen-units = 1 fill in every key that [profile.sandgraph] (or the profile it \
inherits) does not set: the crate's own settings win. Debug info is always stripped \
(debug = false, strip = \"debuginfo\"; function names stay) unless --debug keeps full DWARF.

Reproducible: the rust sysroot, the cargo home, the workspace root and the target \
directory are remapped (--remap-path-prefix, after your RUSTFLAGS or \
CARGO_ENCODED_RUSTFLAGS, else joined to the config's target.wasm32-wasip2.rustflags; \
cargo then ignores a config's build.rustflags), so the same source and lock file \
give the same sha256 wherever they are built. The digest is printed.";

/// `sandgraph build DIR [--out FILE]`
#[derive(clap::Args)]
#[command(after_long_help = BUILD_HELP)]
pub struct BuildArgs {
    /// The graph's folder: a Rust crate (Cargo.toml), a Python graph (pyproject.toml) or a JavaScript graph (package.json)
    dir: PathBuf,
    /// Where to write the component [default: GRAPH.wasm in the current folder, GRAPH being the name the graph describes itself with]
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Keep full debug info (DWARF) in the component; by default it is stripped (function names stay, for backtraces)
    #[arg(long)]
    debug: bool,
    #[command(flatten)]
    cache: CacheArgs,
}

/// Builds the graph and says what it wrote (on stderr).
pub async fn build(args: BuildArgs) -> Result<ExitCode, Failure> {
    let cache = args.cache.open();
    let built = sandgraph_toolkit::build::build(&BuildOptions {
        dir: &args.dir,
        out: args.out.as_deref(),
        debug: args.debug,
        cache: cache.as_ref(),
    })
    .await?;
    eprintln!("{built}");
    Ok(ExitCode::SUCCESS)
}
