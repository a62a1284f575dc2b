//! A graph's golden cases (`sandgraph test [DIR|GRAPH.wasm]`): [`prepare`]
//! a run, then [`Prepared::run`] it into a [`TestReport`].
//!
//! A case file is a JSON file in the cases folder (`tests/` of a graph
//! crate, or `--cases DIR`, default `tests/` beside a `GRAPH.wasm`). It
//! holds one case object, or an array of them; see `case` for the keys.
//! Each case runs the graph once (or, with `steps`, once and then once per
//! resume value on a throwaway durable thread) under the normal sandbox
//! limits and the operator config's grants (a `tools` grant reaches the
//! graph tools of `--graphs DIR`), and its outcome is compared
//! with what the case expects. Cases run in parallel, at most `--jobs` at
//! once. The report is one line per case ([`case_line`]), a diff of
//! expected and actual for a failure, a summary line; it can also be
//! written as JUnit XML ([`TestReport::write_junit`]).

mod case;
mod junit;
mod report;

use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandgraph_core::NodeContext;
use sandgraph_factors::http::{HttpCassette, HttpReplay};
use sandgraph_factors::llm::LlmBackend;
use sandgraph_registry::{
    CallOptions, Checked, GraphTool, OperatorConfig, Registry, RegistryOptions,
};
use sandgraph_runtime::{Graph, RunError, RunOptions, RunOutcome, Runtime, RuntimeConfig, Start};
use sandgraph_store::{CompileCache, Durability, Store};
use serde_json::{Map, Value};

use crate::Error;
use crate::cache::CacheChoice;
use crate::show;

use case::{Begin, Case, Expect};
pub use case::{MAX_ASSERTS, MAX_CASE_FILE_BYTES, MAX_CASES, MAX_NAME_BYTES, MAX_STEPS};
pub use report::{MAX_DIFF_BYTES, MAX_DIFF_LINES, case_line};

/// What to test and how ([`prepare`]).
pub struct TestOptions {
    /// A graph crate folder (built first, cases from its `tests/`), or a
    /// graph component (.wasm).
    pub target: PathBuf,
    /// Folder of the case files (`*.json`); `None`: `tests/` in the crate,
    /// or beside the .wasm.
    pub cases: Option<PathBuf>,
    /// Run only the cases whose name contains this.
    pub filter: Option<String>,
    /// The operator's config: limits, grants, `[llm.models]`.
    pub config: OperatorConfig,
    /// The model of the config's `[llm]` section, for cassettes.
    pub default_model: String,
    /// Folders of graph tools the graph may call through its `tools`
    /// grant (mounted for each case).
    pub graphs: Vec<PathBuf>,
    /// Cases run at once; `None`: the available parallelism.
    pub jobs: Option<NonZeroUsize>,
    /// The compile cache the graph (and the tools) load through.
    pub cache: CacheChoice,
}

/// What one case came to.
pub struct CaseResult {
    /// The case's name.
    pub name: String,
    /// The case file it came from.
    pub file: PathBuf,
    /// How long it ran.
    pub time: Duration,
    /// Why it failed; `None`: it passed.
    pub failure: Option<Mismatch>,
}

/// A failed expectation: what was wrong, and a diff of expected and actual
/// when there is one (both sides pretty JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// What was wrong (not yet made inert).
    pub message: String,
    /// The diff, each line made inert.
    pub diff: Option<String>,
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
    default_model: String,
    /// The folders of graph tools the graph may call (`--graphs`).
    tools: Vec<PathBuf>,
    /// The compile cache the tools are mounted through, if any.
    cache: Option<CompileCache>,
    /// Where the durable threads of `steps` cases live; removed at the end.
    scratch: Scratch,
}

/// A test run ready to start: the graph built or loaded, its cases read
/// and selected.
pub struct Prepared {
    suite: Arc<Suite>,
    selected: Vec<Case>,
    filtered_out: usize,
    jobs: usize,
    started: Instant,
}

/// What a test run came to.
pub struct TestReport {
    /// The graph's name.
    pub graph: String,
    /// Each selected case's result, in case order.
    pub results: Vec<CaseResult>,
    /// The cases the filter left out.
    pub filtered_out: usize,
    /// How long the whole run took.
    pub elapsed: Duration,
}

/// Builds (a crate folder) or loads (a component) the graph of
/// `options.target`, reads its cases and selects them. A crate's build
/// says what it wrote on stderr, as do graph tools that cannot be mounted.
pub async fn prepare(options: TestOptions) -> Result<Prepared, Error> {
    let started = Instant::now();
    let config = options.config.clone();
    let runtime = sandgraph_factors::runtime(RuntimeConfig {
        load_limits: config.load_limits(),
        ..RuntimeConfig::default()
    })?;
    if !options.target.exists() {
        return Err(Error::invalid(format!(
            "{} is neither a graph crate folder nor a graph component (.wasm)",
            options.target.display()
        )));
    }
    let scratch = Scratch::new()?;
    let store = options.cache.open();
    let (wasm, cases_dir) = graph_and_cases(&options, &scratch, store.as_ref()).await?;
    let cases = case::load_dir(&cases_dir)?;
    let graph = crate::cache::load(&runtime, store.as_ref(), &wasm).await?;
    if !options.graphs.is_empty() {
        mount_tools(&runtime, &options.graphs, store.clone(), &config).await?;
    }
    let total = cases.len();
    let selected: Vec<Case> = match &options.filter {
        Some(f) => cases.into_iter().filter(|c| c.name.contains(f)).collect(),
        None => cases,
    };
    let filtered_out = total - selected.len();
    let jobs = options
        .jobs
        .or_else(|| std::thread::available_parallelism().ok())
        .map_or(1, NonZeroUsize::get);
    let suite = Arc::new(Suite {
        runtime,
        graph,
        config,
        default_model: options.default_model,
        // Kept open while the cases run: the graph tools of `--graphs`
        // are mounted from it for each case.
        cache: store.filter(|_| !options.graphs.is_empty()),
        tools: options.graphs,
        scratch,
    });
    Ok(Prepared {
        suite,
        selected,
        filtered_out,
        jobs,
        started,
    })
}

impl Prepared {
    /// The number of cases that will run.
    pub fn case_count(&self) -> usize {
        self.selected.len()
    }

    /// The graph's name.
    pub fn graph_name(&self) -> &str {
        self.suite.graph.name()
    }

    /// Runs the cases, at most the options' `jobs` at once; `on_case` is
    /// called with each one's result as it finishes.
    pub async fn run(self, on_case: impl FnMut(&CaseResult)) -> TestReport {
        let results = run_all(&self.suite, self.selected, self.jobs, on_case).await;
        TestReport {
            graph: self.suite.graph.name().to_owned(),
            results,
            filtered_out: self.filtered_out,
            elapsed: self.started.elapsed(),
        }
    }
}

impl TestReport {
    /// Whether every case passed.
    pub fn passed(&self) -> bool {
        self.results.iter().all(|r| r.failure.is_none())
    }

    /// The failed cases, each with its file, message and diff; `None` when
    /// none failed.
    pub fn failures(&self) -> Option<String> {
        report::failures(&self.results)
    }

    /// `test result: ok. 3 passed; 0 failed; 1 filtered out; finished in 0.42s`.
    pub fn summary(&self) -> String {
        report::summary(&self.results, self.filtered_out, self.elapsed)
    }

    /// Writes the results as JUnit XML to `path`.
    pub fn write_junit(&self, path: &Path) -> Result<(), Error> {
        let xml = junit::render(&self.graph, &self.results, self.elapsed);
        std::fs::write(path, xml).map_err(|e| {
            Error::invalid(format!(
                "cannot write the JUnit report {}: {e}",
                path.display()
            ))
        })
    }
}

/// The graph component and the cases folder of `options.target`: a crate
/// folder is built into `scratch` first, its cases in its `tests/`; a
/// component's are in `tests/` beside it (`cases` over both).
async fn graph_and_cases(
    options: &TestOptions,
    scratch: &Scratch,
    cache: Option<&CompileCache>,
) -> Result<(PathBuf, PathBuf), Error> {
    let target = &options.target;
    if target.is_dir() {
        let out = scratch.path().join("graph.wasm");
        let built = crate::build::build(&crate::build::BuildOptions {
            dir: target,
            out: Some(&out),
            debug: false,
            cache,
        })
        .await?;
        eprintln!("{built}");
        let cases = options
            .cases
            .clone()
            .unwrap_or_else(|| target.join("tests"));
        Ok((out, cases))
    } else {
        let beside = target.parent().unwrap_or(Path::new("")).join("tests");
        Ok((target.clone(), options.cases.clone().unwrap_or(beside)))
    }
}

/// Mounts the graph tools of `dirs` once up front: what cannot be
/// mounted is said once (not per case), and the cache holds the rest for
/// the cases' mounts.
async fn mount_tools(
    runtime: &Runtime,
    dirs: &[PathBuf],
    cache: Option<CompileCache>,
    config: &OperatorConfig,
) -> Result<(), Error> {
    let options = RegistryOptions {
        dirs: dirs.to_vec(),
        cache,
        config: config.clone(),
        log_warnings: false,
        ..RegistryOptions::default()
    };
    let (_, report) = Registry::open(runtime.clone(), options).await?;
    for w in &report.warnings {
        eprintln!(
            "warning: {}",
            show::line(&w.to_string(), show::MAX_LINE_BYTES)
        );
    }
    Ok(())
}

/// Runs the cases, at most `jobs` at once, calling `on_case` with each
/// one's result as it finishes; the results come back in case order.
async fn run_all(
    suite: &Arc<Suite>,
    cases: Vec<Case>,
    jobs: usize,
    mut on_case: impl FnMut(&CaseResult),
) -> Vec<CaseResult> {
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
                on_case(&result);
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
            tool.check(args, &call).await.map(Checked::into_input)
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
        Some(path) => cassette(&config, &suite.default_model, path).map_err(setup)?,
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
    default_model: &str,
    path: &Path,
) -> Result<(Option<LlmBackend>, Option<HttpCassette>), String> {
    let provider = sandgraph_llm::cassette::Replay::open(path).map_err(|e| e.to_string())?;
    let http = HttpReplay::open(path).map_err(|e| e.to_string())?;
    // Offline: no key is read and nothing is sent.
    Ok((
        Some(LlmBackend {
            provider: Arc::new(provider),
            models: config.llm_models.clone(),
            default_model: default_model.to_owned(),
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
    fn new() -> Result<Scratch, Error> {
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
            Error::internal(format!(
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
