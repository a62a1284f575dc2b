//! `sandgraph test [DIR|GRAPH.wasm]`: a graph's golden cases.
//!
//! A case file is a JSON file in the cases folder (`tests/` of a graph
//! crate, or `--cases DIR`, default `tests/` beside a `GRAPH.wasm`). It
//! holds one case object, or an array of them; see [`case`] for the keys.
//! Each case runs the graph once (or, with `steps`, once and then once per
//! resume value on a throwaway durable thread) under the normal sandbox
//! limits and the operator config's grants (a `tools` grant reaches the
//! graph tools of `--graphs DIR`), and its outcome is compared
//! with what the case expects. Cases run in parallel, at most `--jobs` at
//! once. One line per case, a diff of expected and actual for a failure, a
//! summary line; exit 1 when a case failed; `--junit FILE` also writes the
//! results as JUnit XML.

mod case;
mod junit;
mod report;

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandgraph_core::NodeContext;
use sandgraph_factors::http::{HttpCassette, HttpReplay};
use sandgraph_factors::llm::LlmBackend;
use sandgraph_registry::{CallOptions, GraphTool, OperatorConfig, Registry, RegistryOptions};
use sandgraph_runtime::{
    ErrorCode, Graph, RunError, RunOptions, RunOutcome, Runtime, RuntimeConfig, Start,
};
use sandgraph_store::{CompileCache, Durability, Store};
use serde_json::{Map, Value};

use crate::cache::CacheArgs;
use crate::exit::Failure;
use crate::show;

use case::{Begin, Case, Expect};

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

/// What one case came to.
pub(crate) struct CaseResult {
    pub(crate) name: String,
    pub(crate) file: PathBuf,
    pub(crate) time: Duration,
    /// Why it failed; `None`: it passed.
    pub(crate) failure: Option<Mismatch>,
}

/// A failed expectation: what was wrong, and a diff of expected and actual
/// when there is one (both sides pretty JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mismatch {
    pub(crate) message: String,
    pub(crate) diff: Option<String>,
}

impl Mismatch {
    fn new(message: impl Into<String>) -> Self {
        Mismatch {
            message: message.into(),
            diff: None,
        }
    }
}

/// Everything the cases of one run share.
struct Suite {
    runtime: Runtime,
    graph: Arc<Graph>,
    config: OperatorConfig,
    /// The folders of graph tools the graph may call (`--graphs`).
    tools: Vec<PathBuf>,
    /// The compile cache the tools are mounted through, if any.
    cache: Option<CompileCache>,
    /// Where the durable threads of `steps` cases live; removed at the end.
    scratch: Scratch,
}

/// `sandgraph test [DIR|GRAPH.wasm]`.
pub async fn test(args: TestArgs) -> Result<ExitCode, Failure> {
    let started = Instant::now();
    let config = crate::config::LoadedConfig::load(args.config.as_deref())?.config;
    let runtime = sandgraph_factors::runtime(RuntimeConfig {
        load_limits: config.load_limits(),
        ..RuntimeConfig::default()
    })?;
    if !args.target.exists() {
        return Err(RunError::new(
            ErrorCode::InvalidInput,
            format!(
                "{} is neither a graph crate folder nor a graph component (.wasm)",
                args.target.display()
            ),
        )
        .into());
    }
    let scratch = Scratch::new()?;
    let store = args.cache.open();
    let (wasm, cases_dir) = graph_and_cases(&args, &scratch, store.as_ref()).await?;
    let cases = case::load_dir(&cases_dir)?;
    let graph = crate::cache::load(&runtime, store.as_ref(), &wasm).await?;
    if !args.graphs.is_empty() {
        mount_tools(&runtime, &args.graphs, store.clone(), &config).await?;
    }
    let total = cases.len();
    let selected: Vec<Case> = match &args.filter {
        Some(f) => cases.into_iter().filter(|c| c.name.contains(f)).collect(),
        None => cases,
    };
    let filtered_out = total - selected.len();
    let suite = Arc::new(Suite {
        runtime,
        graph,
        config,
        tools: args.graphs.clone(),
        // Kept open while the cases run: the graph tools of `--graphs`
        // are mounted from it for each case.
        cache: store.filter(|_| !args.graphs.is_empty()),
        scratch,
    });
    let jobs = args
        .jobs
        .or_else(|| std::thread::available_parallelism().ok())
        .map_or(1, NonZeroUsize::get);
    outln!(
        "running {} case(s) of graph {}",
        selected.len(),
        show::line(suite.graph.name(), show::MAX_LINE_BYTES)
    );
    let results = run_all(&suite, selected, jobs).await;
    let elapsed = started.elapsed();
    finish(&results, filtered_out, elapsed, suite.graph.name(), &args)
}

/// The graph component and the cases folder of `args.target`: a crate
/// folder is built into `scratch` first, its cases in its `tests/`; a
/// component's are in `tests/` beside it (`--cases` over both).
async fn graph_and_cases(
    args: &TestArgs,
    scratch: &Scratch,
    cache: Option<&CompileCache>,
) -> Result<(PathBuf, PathBuf), Failure> {
    if args.target.is_dir() {
        let out = scratch.path().join("graph.wasm");
        crate::build::build_to(&args.target, Some(&out), false, cache).await?;
        let cases = args
            .cases
            .clone()
            .unwrap_or_else(|| args.target.join("tests"));
        Ok((out, cases))
    } else {
        let beside = args.target.parent().unwrap_or(Path::new("")).join("tests");
        Ok((args.target.clone(), args.cases.clone().unwrap_or(beside)))
    }
}

/// Mounts the graph tools of `--graphs` once up front: what cannot be
/// mounted is said once (not per case), and the cache holds the rest for
/// the cases' mounts.
async fn mount_tools(
    runtime: &Runtime,
    dirs: &[PathBuf],
    cache: Option<CompileCache>,
    config: &OperatorConfig,
) -> Result<(), Failure> {
    let options = RegistryOptions {
        dirs: dirs.to_vec(),
        cache,
        config: config.clone(),
        log_warnings: false,
        ..RegistryOptions::default()
    };
    let (_, report) = Registry::open(runtime.clone(), options)
        .await
        .map_err(crate::mount::registry_failure)?;
    for w in &report.warnings {
        eprintln!(
            "warning: {}",
            show::line(&w.to_string(), show::MAX_LINE_BYTES)
        );
    }
    Ok(())
}

/// Prints the failures and the summary, writes `--junit`, and exits 1 when
/// a case failed.
fn finish(
    results: &[CaseResult],
    filtered_out: usize,
    elapsed: Duration,
    graph: &str,
    args: &TestArgs,
) -> Result<ExitCode, Failure> {
    report::print_failures(results);
    report::print_summary(results, filtered_out, elapsed);
    if let Some(path) = &args.junit {
        let xml = junit::render(graph, results, elapsed);
        std::fs::write(path, xml).map_err(|e| {
            Failure::from(RunError::new(
                ErrorCode::InvalidInput,
                format!("cannot write the JUnit report {}: {e}", path.display()),
            ))
        })?;
    }
    Ok(if results.iter().any(|r| r.failure.is_some()) {
        ExitCode::from(crate::exit::CHECK_FAILED)
    } else {
        ExitCode::SUCCESS
    })
}

/// Runs the cases, at most `jobs` at once, printing each one's line as it
/// finishes; the results come back in case order.
async fn run_all(suite: &Arc<Suite>, cases: Vec<Case>, jobs: usize) -> Vec<CaseResult> {
    let lanes = Arc::new(tokio::sync::Semaphore::new(jobs.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    let names: Vec<(String, PathBuf)> = cases
        .iter()
        .map(|c| (c.name.clone(), c.file.clone()))
        .collect();
    for (i, case) in cases.into_iter().enumerate() {
        let suite = suite.clone();
        let lanes = lanes.clone();
        tasks.spawn(async move {
            // The semaphore is never closed.
            let _lane = lanes.acquire_owned().await;
            let started = Instant::now();
            let failure = run_case(&suite, &case, i).await.err();
            (
                i,
                CaseResult {
                    name: case.name,
                    file: case.file,
                    time: started.elapsed(),
                    failure,
                },
            )
        });
    }
    let mut results: Vec<Option<CaseResult>> = names.iter().map(|_| None).collect();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((i, result)) => {
                report::print_line(&result);
                results[i] = Some(result);
            }
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => {}
        }
    }
    results
        .into_iter()
        .zip(names)
        .map(|(r, (name, file))| {
            r.unwrap_or_else(|| CaseResult {
                name,
                file,
                time: Duration::ZERO,
                failure: Some(Mismatch::new("the case was cancelled")),
            })
        })
        .collect()
}

/// What a run came to, for comparing.
enum Got {
    Completed(Map<String, Value>),
    Interrupted {
        state: Map<String, Value>,
        interrupts: Vec<Value>,
    },
    Failed(RunError),
}

impl From<Result<RunOutcome, RunError>> for Got {
    fn from(r: Result<RunOutcome, RunError>) -> Self {
        match r {
            Ok(RunOutcome::Completed(state)) => Got::Completed(state),
            Ok(RunOutcome::Interrupted { state, interrupts }) => Got::Interrupted {
                state,
                interrupts: interrupts.into_iter().map(|i| i.value).collect(),
            },
            Err(e) => Got::Failed(e),
        }
    }
}

/// Runs one case; `Err` says how it failed.
async fn run_case(suite: &Suite, case: &Case, index: usize) -> Result<(), Mismatch> {
    let graph = &suite.graph;
    // The registry lives as long as the tool: the graph's `tools` calls
    // reach the graph tools mounted in it.
    let (_registry, tool) = case_tool(suite, case).await?;
    let thread = (!case.steps.is_empty()).then(|| format!("case-{index}"));
    let opts = RunOptions {
        limits: Some(tool.limits().clone()),
        context: NodeContext {
            tool: graph.name().to_owned(),
            thread_id: thread.clone(),
            ..NodeContext::default()
        },
        capabilities: tool.capabilities(),
        ..RunOptions::default()
    };
    let input = match &case.begin {
        Begin::Input(v) => Ok(v.clone()),
        Begin::Args(args) => {
            // As `sandgraph call`: the parameters, then `validate`.
            let call = CallOptions {
                thread_id: thread.clone(),
                ..CallOptions::default()
            };
            match tool.check(args, &call).await {
                Ok(()) => Ok(tool.parameters().graph_input(args.clone())),
                Err(e) => Err(e),
            }
        }
    };
    let Some(thread) = thread else {
        let got = match input {
            Ok(input) => suite.runtime.run(graph, input, opts).await.into(),
            Err(e) => Got::Failed(e),
        };
        return compare(&case.expect, &got, false).map_err(|m| m.at("the run"));
    };
    run_steps(suite, case, index, &thread, opts, input).await
}

fn setup(m: String) -> Mismatch {
    Mismatch::new(format!("cannot set the case up: {m}"))
}

/// The graph as a tool of its own registry (returned with it), under the
/// suite's config with the case's limits, grants and cassette over it.
async fn case_tool(suite: &Suite, case: &Case) -> Result<(Registry, GraphTool), Mismatch> {
    let graph = &suite.graph;
    let mut config = suite.config.clone();
    config.limits = config.limits.merged_with(&case.limits);
    if let Some(grants) = &case.grants {
        config
            .graphs
            .entry(graph.name().to_owned())
            .or_default()
            .grants = grants.clone();
    }
    config.check().map_err(|e| setup(e.to_string()))?;
    let (llm, http_cassette) = match &case.cassette {
        Some(path) => cassette(&config, path).map_err(setup)?,
        None => (None, None),
    };
    let options = RegistryOptions {
        dirs: suite.tools.clone(),
        cache: suite.cache.clone(),
        config,
        log_warnings: false,
        llm,
        http_cassette,
        ..RegistryOptions::default()
    };
    let (registry, _) = Registry::open(suite.runtime.clone(), options)
        .await
        .map_err(|e| setup(e.to_string()))?;
    let tool = registry
        .create(graph.clone())
        .map_err(|e| setup(e.to_string()))?;
    Ok((registry, tool))
}

/// A case with `steps`: the first run on the throwaway thread `thread`,
/// then one resume per step, each compared with its expectation.
async fn run_steps(
    suite: &Suite,
    case: &Case,
    index: usize,
    thread: &str,
    opts: RunOptions,
    input: Result<Value, RunError>,
) -> Result<(), Mismatch> {
    let graph = &suite.graph;
    let db = suite.scratch.path().join(format!("case-{index}.redb"));
    let threads = Store::open(&db)
        .map_err(|e| setup(format!("cannot open a thread database: {e}")))?
        .threads();
    let run = |start: Start| {
        let threads = threads.clone();
        let opts = opts.clone();
        async move {
            let writer = threads.begin(thread, graph.name(), Durability::Sync)?;
            let existing = threads.load(thread)?;
            suite
                .runtime
                .run_thread(graph, existing, start, opts, &writer, &mut |_| {})
                .await
        }
    };
    let got = match input {
        Ok(input) => run(Start::Input(input)).await.into(),
        Err(e) => Got::Failed(e),
    };
    compare(&case.expect, &got, true).map_err(|m| m.at("the first run"))?;
    for (i, step) in case.steps.iter().enumerate() {
        let got = run(Start::Resume(step.resume.clone())).await.into();
        let more = i + 1 < case.steps.len();
        compare(&step.expect, &got, more).map_err(|m| m.at(&format!("step {}", i + 1)))?;
    }
    Ok(())
}

impl Mismatch {
    /// The mismatch with the run it happened in before its message.
    fn at(self, run: &str) -> Mismatch {
        Mismatch {
            message: format!("{run}: {}", self.message),
            diff: self.diff,
        }
    }
}

/// The model and http cassette of a case: both answered from `path`.
fn cassette(
    config: &OperatorConfig,
    path: &Path,
) -> Result<(Option<LlmBackend>, Option<HttpCassette>), String> {
    let provider = sandgraph_llm::cassette::Replay::open(path).map_err(|e| e.to_string())?;
    let http = HttpReplay::open(path).map_err(|e| e.to_string())?;
    // Offline: no key is read and nothing is sent.
    let default_model = crate::config::model::default_model(config);
    Ok((
        Some(LlmBackend {
            provider: Arc::new(provider),
            models: config.llm_models.clone(),
            default_model,
        }),
        Some(HttpCassette::Replay(http)),
    ))
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("<cannot render: {e}>"))
}

fn differs(what: &str, expected: &Value, actual: &Value) -> Mismatch {
    Mismatch {
        message: format!("{what} differs from the expected one (- expected, + actual)"),
        diff: Some(report::line_diff(&pretty(expected), &pretty(actual))),
    }
}

/// Checks one run against its expectation; `more` says resume steps
/// follow, so the run must stop at an interrupt.
fn compare(expect: &Expect, got: &Got, more: bool) -> Result<(), Mismatch> {
    if let Some(code) = &expect.error {
        return match got {
            Got::Failed(e) if e.code.as_str() == code => match &expect.error_contains {
                Some(part) if !e.message.contains(part.as_str()) => Err(Mismatch::new(format!(
                    "failed with error[{code}] as expected, but its message does not contain \
                     {part:?}: {}",
                    show::line(&e.message, show::MAX_LINE_BYTES)
                ))),
                _ => Ok(()),
            },
            Got::Failed(e) => Err(Mismatch::new(format!(
                "expected error[{code}], got error[{}]: {}",
                e.code.as_str(),
                show::line(&e.message, show::MAX_LINE_BYTES)
            ))),
            Got::Completed(_) => Err(Mismatch::new(format!(
                "expected error[{code}], but the run completed"
            ))),
            Got::Interrupted { .. } => Err(Mismatch::new(format!(
                "expected error[{code}], but the run stopped at an interrupt"
            ))),
        };
    }
    let state = match got {
        Got::Failed(e) => {
            return Err(Mismatch::new(format!(
                "the run failed: error[{}]: {}",
                e.code.as_str(),
                show::line(&e.message, show::MAX_LINE_BYTES)
            )));
        }
        Got::Completed(state) => {
            if more || expect.interrupts.is_some() {
                return Err(Mismatch::new(
                    "the run completed, but the case expects it to stop at an interrupt",
                ));
            }
            state
        }
        Got::Interrupted { state, interrupts } => {
            match &expect.interrupts {
                Some(want) => {
                    let (want, got) =
                        (Value::Array(want.clone()), Value::Array(interrupts.clone()));
                    if want != got {
                        return Err(differs("the interrupts' values", &want, &got));
                    }
                }
                None if !more => {
                    return Err(Mismatch {
                        message: "the run stopped at an interrupt, but the case expects it to \
                                  complete: add \"interrupts\" (and \"steps\" to resume it)"
                            .to_owned(),
                        diff: Some(report::block(&pretty(&Value::Array(interrupts.clone())))),
                    });
                }
                None => {}
            }
            state
        }
    };
    let state = Value::Object(state.clone());
    if let Some(want) = &expect.state
        && *want != state
    {
        return Err(differs("the state", want, &state));
    }
    for a in &expect.asserts {
        a.check(&state).map_err(|message| Mismatch {
            message: format!("{message}; the state:"),
            diff: Some(report::block(&pretty(&state))),
        })?;
    }
    Ok(())
}

/// A private folder for the run's scratch files (the crate's build, the
/// thread databases), removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, Failure> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "sandgraph-test-{}-{nanos}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        // `create` fails if the folder exists: nobody else's folder is used.
        builder.create(&path).map_err(|e| {
            Failure::internal(format!(
                "cannot create a scratch folder {}: {e}",
                path.display()
            ))
        })?;
        Ok(Scratch(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
