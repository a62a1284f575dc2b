//! Guest languages side by side: the same graphs (`echo` and `loop_graph`)
//! written in Rust, Python and JavaScript, built with `sandgraph build`, and
//! measured in one process with `sandgraph_runtime`.
//!
//! `cargo bench -p sandgraph-cli --bench polyglot` (about 5 minutes on a
//! 2-core machine, most of it compiling CPython twice per run; builds are
//! kept under `target/tmp/polyglot/`, keyed by a digest of their inputs).
//! Needs componentize-py (`python3 -m pip install -r
//! example-graphs/python/requirements.txt`) and jco (`npm ci --prefix
//! example-graphs/js`). Per language:
//!
//! | figure | what it is |
//! |---|---|
//! | size | bytes of the built `echo` component |
//! | compile | `Runtime::compile` of `echo`'s bytes (Cranelift), median |
//! | first load | `load_cached` with an empty compile cache: compile, compress and store the artifact, run `describe` |
//! | cached load | `load_cached` again: read, authenticate and decompress the artifact, deserialize it, reuse the stored spec; median |
//! | cache entry | stored (zstd) bytes of `echo`'s artifact, and its raw size |
//! | echo | `Runtime::run` of `echo` on `{"topic":"x"}`: a fresh store and instance, one node; median |
//! | loop100 | `loop_graph` on `{"target":100}`: one instance, 100 node calls and 100 router calls; median |
//!
//! Then where a cached `echo` run goes: a bare instantiation of the
//! component on the runtime's engine (fresh `Store`, WASI only, no
//! sandgraph state), `Runtime::validate` (the sandbox's instantiation plus
//! one trivial export call) and the whole run, and the minor page faults
//! an echo run takes.
//!
//! Last, brokered model calls (`report-llm.md`): `graph_llm`
//! (tests/guests/graph-llm, and its twins tests/polyglot/{python,js}/llm)
//! asking a loopback scripted model through the `llm` capability. A call's
//! cost is a run with 10 calls less a run with none, over 10; Python and JS
//! also run the same calls from an async node, whose overhead is the
//! one-call run against the sync one.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandgraph_factors::llm::{LlmAccess, LlmBackend, LlmGrant};
use sandgraph_runtime::caps::Capabilities;
use sandgraph_runtime::{Graph, Limits, RunOptions, RunOutcome, Runtime};
use sandgraph_store::{CompileCache, sha256_hex};
use sandgraph_test_llm::{Reply, ScriptedLlm};
use serde_json::{Value, json};
use tokio::runtime::Runtime as Tokio;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, InstancePre, Linker, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

#[derive(Clone, Copy, PartialEq)]
enum Lang {
    Rust,
    Python,
    Js,
}

const LANGS: [Lang; 3] = [Lang::Rust, Lang::Python, Lang::Js];

impl Lang {
    fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JS",
        }
    }

    /// The folder of `graph` (`echo`, `loop` or `llm`) in this language.
    fn source(self, graph: &str) -> PathBuf {
        let repo = repo();
        match (self, graph) {
            (Lang::Rust, "llm") => repo.join("tests/guests/graph-llm"),
            (Lang::Rust, _) => repo.join("example-graphs").join(graph),
            (_, "loop" | "llm") => repo.join("tests/polyglot").join(self.name()).join(graph),
            (_, _) => repo.join("example-graphs").join(self.name()).join(graph),
        }
    }

    /// What a build reads besides the graph's folder.
    fn inputs(self) -> Vec<PathBuf> {
        let repo = repo();
        let mut inputs = vec![repo.join("wit")];
        match self {
            Lang::Rust => {
                inputs.push(repo.join("guest-sdk/src"));
                inputs.push(repo.join("host/spec/src"));
                inputs.push(repo.join("Cargo.lock"));
            }
            Lang::Python => inputs.push(repo.join("guest-sdk/python/sandgraph")),
            Lang::Js => inputs.push(repo.join("guest-sdk/js")),
        }
        inputs
    }

    /// Compile samples: a CPython compile takes 15-20 s.
    fn compile_samples(self) -> usize {
        match self {
            Lang::Rust => 10,
            Lang::Python => 2,
            Lang::Js => 4,
        }
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

fn tmp() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

// ---- builds ----

/// Folders a digest of sources skips: tool output and installed packages.
const SKIPPED: [&str; 5] = ["node_modules", "__pycache__", "target", "dist", ".venv"];

/// Feeds every file under `path` (sorted, names and contents) into `out`.
fn digest_tree(path: &Path, out: &mut Vec<u8>) {
    if path.is_file() {
        out.extend_from_slice(path.to_string_lossy().as_bytes());
        out.push(0);
        out.extend_from_slice(&std::fs::read(path).expect("a readable input"));
        out.push(0);
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for entry in entries {
        let name = entry.file_name().unwrap_or_default().to_string_lossy();
        if SKIPPED.contains(&name.as_ref()) || name.ends_with(".wasm") || name.ends_with(".redb") {
            continue;
        }
        digest_tree(&entry, out);
    }
}

/// `graph` built from `lang`'s sources by `sandgraph build --no-cache`,
/// once per change of its inputs (sources, SDK, WIT, the binary).
fn built(lang: Lang, graph: &str) -> PathBuf {
    let bin = env!("CARGO_BIN_EXE_sandgraph");
    let source = lang.source(graph);
    let meta = std::fs::metadata(bin).expect("the sandgraph binary");
    let mut inputs = format!("{} {:?}", meta.len(), meta.modified().ok()).into_bytes();
    digest_tree(&source, &mut inputs);
    for path in lang.inputs() {
        digest_tree(&path, &mut inputs);
    }
    let key = &sha256_hex(&inputs)[..16];
    let dir = tmp().join("polyglot");
    std::fs::create_dir_all(&dir).expect("a build folder");
    let out = dir.join(format!("{}-{graph}-{key}.wasm", lang.name()));
    if out.is_file() {
        return out;
    }
    let partial = out.with_extension("partial");
    let mut cmd = Command::new(bin);
    cmd.args(["build", source.to_str().unwrap(), "--out"])
        .arg(&partial)
        .arg("--no-cache")
        .env("SANDGRAPH_LOG", "off")
        // The toolkit tests' wasm target folder: not the one `cargo bench`
        // holds locked.
        .env("CARGO_TARGET_DIR", tmp().join("toolkit-target"));
    // The loop graphs live outside example-graphs/js: use its pinned jco.
    let jco = repo().join("example-graphs/js/node_modules/.bin/jco");
    if std::env::var_os("SANDGRAPH_JCO").is_none() && jco.is_file() {
        cmd.env("SANDGRAPH_JCO", jco);
    }
    let started = Instant::now();
    let o = cmd.output().expect("the sandgraph binary runs");
    assert!(
        o.status.success(),
        "sandgraph build {} failed:\n{}",
        source.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!(
        "built {} {graph} in {:.1} s",
        lang.name(),
        started.elapsed().as_secs_f64()
    );
    std::fs::rename(&partial, &out).expect("the build is kept");
    out
}

// ---- timing ----

fn median(mut samples: Vec<Duration>) -> Duration {
    assert!(!samples.is_empty());
    samples.sort();
    samples[samples.len() / 2]
}

/// Repeats `f` (after `warm` unmeasured calls) until `budget` is spent or
/// `max` samples are taken, at least `min`; the median.
fn sample<F: FnMut()>(warm: usize, min: usize, max: usize, budget: Duration, mut f: F) -> Duration {
    for _ in 0..warm {
        f();
    }
    let started = Instant::now();
    let mut samples = Vec::new();
    while samples.len() < min || (samples.len() < max && started.elapsed() < budget) {
        let t = Instant::now();
        f();
        samples.push(t.elapsed());
    }
    median(samples)
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 10.0 {
        format!("{ms:.1} ms")
    } else if ms >= 1.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{:.1} µs", ms * 1e3)
    }
}

fn mb(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MB", bytes as f64 / 1e6)
    } else {
        format!("{} KB", bytes / 1000)
    }
}

// ---- runs ----

fn options(runtime: &Runtime, recursion_limit: u32) -> RunOptions {
    RunOptions {
        limits: Some(Limits {
            recursion_limit,
            ..runtime.config().default_limits.clone()
        }),
        ..RunOptions::default()
    }
}

/// One run to completion; panics on anything else, so a broken graph cannot
/// pass for a fast one.
async fn run_once(runtime: &Runtime, graph: &Arc<Graph>, input: &Value, limit: u32) -> Value {
    match runtime
        .run(graph, input.clone(), options(runtime, limit))
        .await
    {
        Ok(RunOutcome::Completed(state)) => Value::Object(state),
        Ok(other) => panic!("{}: expected a completed run, got {other:?}", graph.name()),
        Err(e) => panic!("{}: [{}] {}", graph.name(), e.code, e.message),
    }
}

// ---- a bare instantiation ----

/// Store data of a bare instantiation: what the WASI p2 linker needs.
struct Bare {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for Bare {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// `component` pre-instantiated on the runtime's own engine with WASI p2;
/// sandgraph's imports trap (nothing here calls them).
fn bare_pre(runtime: &Runtime, component: &Component) -> InstancePre<Bare> {
    let engine = runtime.engine();
    let mut linker = Linker::<Bare>::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("WASI p2 links");
    for (name, item) in component.component_type().imports(engine) {
        let (true, ComponentItem::ComponentInstance(instance)) =
            (name.starts_with("sandgraph:"), item.ty)
        else {
            continue;
        };
        let mut stub = linker.instance(name).expect("a sandgraph import");
        for (func, item) in instance.exports(engine) {
            if let ComponentItem::ComponentFunc(_) = item.ty {
                stub.func_new(func, |_, _, _, _| {
                    Err(wasmtime::format_err!("not available in the bench"))
                })
                .expect("a stub");
            }
        }
    }
    linker.instantiate_pre(component).expect("instantiable")
}

/// A fresh store and instance of `pre`, dropped at once.
async fn bare_instantiate(runtime: &Runtime, pre: &InstancePre<Bare>) {
    let mut store = wasmtime::Store::new(
        runtime.engine(),
        Bare {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
        },
    );
    store.set_fuel(u64::MAX / 2).expect("fuel is enabled");
    // The runtime's epoch ticker runs: a deadline far away.
    store.set_epoch_deadline(u64::MAX / 2);
    pre.instantiate_async(&mut store)
        .await
        .expect("the component instantiates");
}

/// Minor page faults of this process so far.
fn minor_faults() -> i64 {
    // SAFETY: getrusage writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    usage.ru_minflt
}

// ---- one language ----

struct Figures {
    size: usize,
    loop_size: usize,
    compile: Duration,
    first_load: Duration,
    cached_load: Duration,
    entry: usize,
    artifact: usize,
    echo: Duration,
    loop100: Duration,
    bare: Duration,
    validate: Duration,
    faults: f64,
}

fn measure(tokio: &Tokio, runtime: &Runtime, lang: Lang) -> Figures {
    let echo_bytes = std::fs::read(built(lang, "echo")).expect("the echo build");
    let loop_bytes = std::fs::read(built(lang, "loop")).expect("the loop build");
    eprintln!("{}: compiling echo", lang.name());

    let mut compiles = Vec::new();
    let mut component = None;
    for _ in 0..lang.compile_samples() {
        let t = Instant::now();
        let c = runtime.compile(&echo_bytes).expect("echo compiles");
        compiles.push(t.elapsed());
        component = Some(c);
    }
    let component = component.expect("at least one compile");
    let artifact = runtime.serialize(&component).expect("serializes").len();

    let dir = tempfile::tempdir().expect("a temp dir");
    let store = CompileCache::open(dir.path()).expect("a compile cache");
    let load = |bytes: &[u8]| {
        tokio
            .block_on(sandgraph_registry::load_cached(
                runtime,
                Some(&store),
                bytes.to_vec(),
            ))
            .unwrap_or_else(|e| panic!("{} loads: [{}] {}", lang.name(), e.code, e.message))
    };
    let t = Instant::now();
    load(&echo_bytes);
    let first_load = t.elapsed();
    let entry = store
        .artifact(&sha256_hex(&echo_bytes), &runtime.engine_fingerprint())
        .expect("the cache reads")
        .expect("the first load stored the artifact")
        .bytes
        .len();
    let cached_load = sample(1, 5, 20, Duration::from_secs(5), || {
        load(&echo_bytes);
    });
    let echo = load(&echo_bytes);
    let looping = load(&loop_bytes);

    eprintln!("{}: runs", lang.name());
    let input = json!({"topic": "x"});
    let state = tokio.block_on(run_once(runtime, &echo, &input, 25));
    assert_eq!(state, json!({"topic": "x", "log": ["seen:x"]}));
    let echo_run = sample(10, 20, 1000, Duration::from_secs(8), || {
        tokio.block_on(run_once(runtime, &echo, &input, 25));
    });
    let target = json!({"target": 100});
    let state = tokio.block_on(run_once(runtime, &looping, &target, 200));
    assert_eq!(state, json!({"n": 100, "target": 100}));
    let loop100 = sample(2, 5, 200, Duration::from_secs(8), || {
        tokio.block_on(run_once(runtime, &looping, &target, 200));
    });

    let pre = bare_pre(runtime, component.component());
    let bare = sample(10, 20, 1000, Duration::from_secs(4), || {
        tokio.block_on(bare_instantiate(runtime, &pre));
    });
    let opts = options(runtime, 25);
    let validate = sample(10, 20, 1000, Duration::from_secs(4), || {
        let out = tokio.block_on(runtime.validate(&echo, &input, opts.clone()));
        assert!(matches!(out, Ok(Ok(()))), "echo validates: {out:?}");
    });

    // Minor page faults per echo run: the pages of the snapshot a run
    // touches first (copy-on-write faults on a freshly mapped image).
    let runs = 200;
    let before = minor_faults();
    for _ in 0..runs {
        tokio.block_on(run_once(runtime, &echo, &input, 25));
    }
    let faults = (minor_faults() - before) as f64 / f64::from(runs);

    Figures {
        faults,
        size: echo_bytes.len(),
        loop_size: loop_bytes.len(),
        compile: median(compiles),
        first_load,
        cached_load,
        entry,
        artifact,
        echo: echo_run,
        loop100,
        bare,
        validate,
    }
}

fn main() {
    // Benchmarks measure the sandbox, not host backtrace capture.
    // SAFETY: first statement of `main`, before any thread exists.
    unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    // SAFETY: as above; the bench's model client reads its key from here.
    unsafe { std::env::set_var(LLM_KEY_VAR, "bench-key") };
    // `cargo bench` passes `--bench`; a filter picks languages.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let langs: Vec<Lang> = LANGS
        .into_iter()
        .filter(|l| filter.is_empty() || filter.iter().any(|f| f == l.name()))
        .collect();

    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let runtime = tokio
        .block_on(async { sandgraph_factors::runtime(Default::default()) })
        .expect("a runtime");
    let figures: Vec<(Lang, Figures)> = langs
        .iter()
        .map(|&lang| (lang, measure(&tokio, &runtime, lang)))
        .collect();
    report(&figures);
    let server = tokio.block_on(ScriptedLlm::start([]));
    let llm: Vec<(Lang, LlmFigures)> = langs
        .iter()
        .map(|&lang| (lang, measure_llm(&tokio, &runtime, &server, lang)))
        .collect();
    report_llm(&llm);
}

// ---- brokered model calls ----

/// Model calls of a measured run: a call costs the difference to a run
/// without calls, over this.
const LLM_CALLS: u64 = 10;
/// The key variable of the bench's model client (a loopback server reads
/// no key, but a client needs one).
const LLM_KEY_VAR: &str = "SANDGRAPH_BENCH_LLM_KEY";

struct LlmFigures {
    /// One brokered call: (run with [`LLM_CALLS`] - run with none) / calls.
    per_call: Duration,
    /// A run with one call from the sync node.
    sync1: Duration,
    /// The same from the async node (Python and JS).
    async1: Option<Duration>,
}

/// The `llm` grant of alias `fast`, served by `server`.
fn llm_caps(server: &ScriptedLlm) -> Capabilities {
    let client = sandgraph_llm::OpenAiClient::new(sandgraph_llm::ClientConfig {
        base_url: server.base_url(),
        model: "default-model".into(),
        api_key_env: LLM_KEY_VAR.into(),
        max_retries: 0,
        ..Default::default()
    })
    .expect("the bench's client config is valid");
    Capabilities::default().with(LlmAccess {
        grant: LlmGrant {
            models: vec!["fast".into()],
            ..LlmGrant::default()
        },
        backend: Some(LlmBackend {
            provider: Arc::new(client),
            models: [("fast".to_owned(), "deepseek-chat".to_owned())].into(),
            default_model: "default-model".into(),
        }),
    })
}

fn measure_llm(tokio: &Tokio, runtime: &Runtime, server: &ScriptedLlm, lang: Lang) -> LlmFigures {
    let bytes = match lang {
        Lang::Rust => std::fs::read(sandgraph_tests::GRAPH_LLM),
        _ => std::fs::read(built(lang, "llm")),
    }
    .expect("the llm build");
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = CompileCache::open(dir.path()).expect("a compile cache");
    let graph = tokio
        .block_on(sandgraph_registry::load_cached(
            runtime,
            Some(&store),
            bytes,
        ))
        .unwrap_or_else(|e| panic!("{} loads: [{}] {}", lang.name(), e.code, e.message));
    let caps = llm_caps(server);
    eprintln!("{}: llm calls", lang.name());
    let run = |calls: u64, mode: &str| {
        let mut input = json!({"question": "hi", "calls": calls});
        if lang != Lang::Rust {
            input["mode"] = json!(mode);
        }
        let options = RunOptions {
            capabilities: caps.clone(),
            ..options(runtime, 25)
        };
        for _ in 0..calls {
            server.push(Reply::text("ok"));
        }
        let state = match tokio.block_on(runtime.run(&graph, input, options)) {
            Ok(RunOutcome::Completed(state)) => state,
            Ok(other) => panic!("{}: expected a completed run, got {other:?}", lang.name()),
            Err(e) => panic!("{}: [{}] {}", lang.name(), e.code, e.message),
        };
        let answers = state["answers"].as_array().map_or(0, Vec::len);
        assert_eq!(answers as u64, calls, "{}: {state:?}", lang.name());
        assert!(
            state["answers"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|a| a["content"] == "ok"),
            "{}: {state:?}",
            lang.name()
        );
    };
    let budget = Duration::from_secs(6);
    let none = sample(3, 10, 300, budget, || run(0, "sync"));
    let many = sample(2, 10, 300, budget, || run(LLM_CALLS, "sync"));
    let sync1 = sample(3, 10, 300, budget, || run(1, "sync"));
    let async1 = (lang != Lang::Rust).then(|| sample(3, 10, 300, budget, || run(1, "async")));
    LlmFigures {
        per_call: many.saturating_sub(none) / LLM_CALLS as u32,
        sync1,
        async1,
    }
}

fn report_llm(figures: &[(Lang, LlmFigures)]) {
    let rust = figures
        .iter()
        .find(|(l, _)| *l == Lang::Rust)
        .map(|(_, f)| f.per_call.as_secs_f64());
    let mut out = String::from(
        "| | brokered llm call | vs Rust | run, 1 call, sync node | run, 1 call, async node | async overhead |\n\
         |---|---|---|---|---|---|\n",
    );
    for (lang, f) in figures {
        let ratio = match rust {
            Some(r) if r > 0.0 => format!("{:.2}x", f.per_call.as_secs_f64() / r),
            _ => "-".into(),
        };
        let (async1, overhead) = match f.async1 {
            Some(a) => (
                ms(a),
                format!(
                    "{:+.1}%",
                    (a.as_secs_f64() / f.sync1.as_secs_f64() - 1.0) * 100.0
                ),
            ),
            None => ("-".into(), "-".into()),
        };
        out.push_str(&format!(
            "| {} | {} | {ratio} | {} | {async1} | {overhead} |\n",
            lang.title(),
            ms(f.per_call),
            ms(f.sync1)
        ));
    }
    println!("\n{out}");
    let path = tmp().join("polyglot/report-llm.md");
    std::fs::write(&path, &out).expect("the report is written");
    println!("(also in {})", path.display());
}

fn report(figures: &[(Lang, Figures)]) {
    let rust = figures
        .iter()
        .find(|(l, _)| *l == Lang::Rust)
        .map(|(_, f)| f);
    let ratio = |v: f64, base: Option<f64>| match base {
        Some(b) if b > 0.0 => format!(" ({:.0}x)", v / b),
        _ => String::new(),
    };
    type Row = (&'static str, fn(&Figures) -> f64, fn(&Figures) -> String);
    let rows: Vec<Row> = vec![
        ("component size (echo)", |f| f.size as f64, |f| mb(f.size)),
        (
            "component size (loop)",
            |f| f.loop_size as f64,
            |f| mb(f.loop_size),
        ),
        (
            "compile (echo)",
            |f| f.compile.as_secs_f64(),
            |f| ms(f.compile),
        ),
        (
            "first load, empty cache",
            |f| f.first_load.as_secs_f64(),
            |f| ms(f.first_load),
        ),
        (
            "cached-artifact load",
            |f| f.cached_load.as_secs_f64(),
            |f| ms(f.cached_load),
        ),
        (
            "cache entry (zstd / raw)",
            |f| f.entry as f64,
            |f| format!("{} / {}", mb(f.entry), mb(f.artifact)),
        ),
        ("run: echo", |f| f.echo.as_secs_f64(), |f| ms(f.echo)),
        (
            "run: loop100",
            |f| f.loop100.as_secs_f64(),
            |f| ms(f.loop100),
        ),
        (
            "bare instantiation",
            |f| f.bare.as_secs_f64(),
            |f| ms(f.bare),
        ),
        (
            "instantiate + validate call",
            |f| f.validate.as_secs_f64(),
            |f| ms(f.validate),
        ),
        (
            "minor page faults per echo run",
            |f| f.faults,
            |f| format!("{:.0}", f.faults),
        ),
    ];
    let mut out = String::new();
    out.push_str("| |");
    for (lang, _) in figures {
        out.push_str(&format!(" {} |", lang.title()));
    }
    out.push_str("\n|---|");
    for _ in figures {
        out.push_str("---|");
    }
    out.push('\n');
    for (name, value, shown) in rows {
        out.push_str(&format!("| {name} |"));
        for (lang, f) in figures {
            let r = if *lang == Lang::Rust {
                String::new()
            } else {
                ratio(value(f), rust.map(value))
            };
            out.push_str(&format!(" {}{r} |", shown(f)));
        }
        out.push('\n');
    }
    println!("\n{out}");
    let path = tmp().join("polyglot/report.md");
    std::fs::write(&path, &out).expect("the report is written");
    println!("(also in {})", path.display());
}
