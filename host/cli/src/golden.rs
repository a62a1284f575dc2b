//! `sandgraph test [DIR|GRAPH.wasm]`: its flags and output; the cases are
//! run by `sandgraph_toolkit::golden`. One line per case, a diff of
//! expected and actual for a failure, a summary line; exit 1 when a case
//! failed; `--junit FILE` also writes the results as JUnit XML.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::ExitCode;

use sandgraph_toolkit::golden::{self, TestOptions};

use crate::cache::CacheArgs;
use crate::exit::Failure;
use crate::show;

/// `sandgraph test`
#[derive(clap::Args)]
pub struct TestArgs {
    /// A graph crate folder (built first, cases from its tests/), or a graph component (.wasm)
    #[arg(value_name = "DIR|GRAPH.wasm", default_value = ".")]
    target: PathBuf,
    /// Folder of the case files (*.json) [default: tests/ in the crate, or beside the .wasm]
    #[arg(long, value_name = "DIR")]
    cases: Option<PathBuf>,
    /// Run only the cases whose name contains SUBSTR
    #[arg(long, value_name = "SUBSTR")]
    filter: Option<String>,
    /// Also write the results as JUnit XML to FILE
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Operator config (limits, grants, [llm.models]) [default: the first sandgraph.toml in the working directory or above it]
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Folder of graph tools the graph may call through its `tools` grant (mounted for each case, as `call --graphs` does); repeatable
    #[arg(long = "graphs", value_name = "DIR")]
    graphs: Vec<PathBuf>,
    /// Cases run at once [default: the available parallelism]
    #[arg(long, value_name = "N")]
    jobs: Option<NonZeroUsize>,
    #[command(flatten)]
    cache: CacheArgs,
}

/// `sandgraph test [DIR|GRAPH.wasm]`.
pub async fn test(args: TestArgs) -> Result<ExitCode, Failure> {
    let config = crate::config::LoadedConfig::load(args.config.as_deref())?.config;
    let prepared = golden::prepare(TestOptions {
        default_model: crate::config::model::default_model(&config),
        config,
        cache: args.cache.choice(),
        target: args.target,
        cases: args.cases,
        filter: args.filter,
        graphs: args.graphs,
        jobs: args.jobs,
    })
    .await?;
    outln!(
        "running {} case(s) of graph {}",
        prepared.case_count(),
        show::line(prepared.graph_name(), show::MAX_LINE_BYTES)
    );
    let report = prepared
        .run(|result| outln!("{}", golden::case_line(result)))
        .await;
    if let Some(failures) = report.failures() {
        outln!("{failures}");
    }
    outln!("{}", report.summary());
    if let Some(path) = &args.junit {
        report.write_junit(path)?;
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::exit::CHECK_FAILED)
    })
}
