//! `sandgraph check GRAPH.wasm|DIR`: its flags and output; the checks are
//! `sandgraph_toolkit::check`'s.

use std::path::PathBuf;
use std::process::ExitCode;

use sandgraph_toolkit::check;

use crate::cache::CacheArgs;
use crate::exit::Failure;
use crate::show;

/// `sandgraph check`
#[derive(clap::Args)]
pub struct CheckArgs {
    /// A graph component (.wasm), or a folder: every *.wasm in it (not recursive)
    #[arg(value_name = "GRAPH.wasm|DIR")]
    path: PathBuf,
    /// Print one JSON object ({"graphs": [...]}) instead of the report
    #[arg(long)]
    json: bool,
    /// Exit 1 when any graph has a lint warning
    #[arg(long)]
    deny_warnings: bool,
    #[command(flatten)]
    cache: CacheArgs,
}

/// `sandgraph check GRAPH.wasm|DIR [--json] [--deny-warnings]`.
pub async fn check(args: CheckArgs) -> Result<ExitCode, Failure> {
    let reports = check::check(&args.path, &args.cache.choice()).await?;
    if args.json {
        outln!("{}", show::json(&check::to_json(&reports)?));
    } else {
        for report in &reports {
            outln!("{}", check::render(report));
        }
        outln!("{}", check::summary(&reports));
    }
    check::verdict(&reports, args.deny_warnings)?;
    Ok(ExitCode::SUCCESS)
}
