//! Runtime benchmarks: the cost of a sandgraph run against the floor of a raw
//! wasmtime call on a fresh instance.
//!
//! `cargo bench -p sandgraph-tests --bench runtime` (about 2–3 minutes on a
//! 2-core machine). Every figure is one iteration:
//!
//! | bench | what one iteration is |
//! |---|---|
//! | `runtime/floor` | raw wasmtime, no sandgraph: fresh `Store` (fuel, epoch deadline, WASI context), `instantiate_async` of `bench-noop`'s `InstancePre`, `call_async` of its no-op export |
//! | `runtime/echo` | `Runtime::run` of `echo` on `{"topic":"hi"}`: one fresh instance, one node |
//! | `runtime/chain10` | `bench-chain`: ten sequential nodes on one instance |
//! | `runtime/fanout8` | `fanout`: split, eight parallel branches (seven extra instances), join |
//! | `runtime/loop100` | `loop`, `{"target":100}`: 100 supersteps, each a node call and a router call |
//! | `runtime/echo_validated` | a tool call's shape: `validate`, then the run of `echo`, in one instance (`Runtime::prepare`, `PreparedRun::validate`, `run_streaming`) |
//! | `runtime/echo_validate_two_instances` | the same with `validate` in an instance of its own (`Runtime::validate`, then `Runtime::run`), as a router's check and run do |
//! | `throughput/echo_64_tasks` | echo runs spread over 64 concurrent tasks; reported as runs/s |
//!
//! Async benches run on a multi-thread tokio runtime with two workers, the
//! shape of the reference machine. Graphs are loaded (compiled and
//! described) once, outside the measurement.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkGroup, Criterion, Throughput, black_box, measurement::WallTime};
use sandgraph_runtime::{Graph, Limits, RunOptions, RunOutcome};
use sandgraph_tests::{load, runtime};
use serde_json::{Value, json};
use tokio::runtime::Runtime as Tokio;
use wasmtime::component::{Component, InstancePre, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Concurrent tasks of the throughput bench.
const TASKS: u64 = 64;
/// Fuel given to each floor store: the runtime's default run budget.
const FLOOR_FUEL: u64 = 200_000_000_000;

fn main() {
    // With RUST_BACKTRACE=1 in the environment every `wasmtime::Error`
    // captures a host backtrace; benchmarks measure the sandbox, not that.
    // SAFETY: first statement of `main`, before any thread exists.
    unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };

    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(3))
        .measurement_time(Duration::from_secs(12))
        .configure_from_args();

    let mut group = criterion.benchmark_group("runtime");
    floor(&mut group, &tokio);
    graph_benches(&mut group, &tokio);
    validated(&mut group, &tokio);
    group.finish();

    let mut group = criterion.benchmark_group("throughput");
    throughput(&mut group, &tokio);
    group.finish();

    let mut group = criterion.benchmark_group("durability");
    durability(&mut group, &tokio);
    group.finish();

    criterion.final_summary();
}

// ---- the floor: raw wasmtime ----

/// Store data of the floor: just what the WASI p2 linker needs.
struct FloorState {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for FloorState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The engine settings of `sandgraph_runtime`'s `engine_config` with the
/// default `RuntimeConfig` (256 instances), copied because the runtime keeps
/// them private. Keep in step with `host/runtime/src/runtime.rs`.
fn floor_engine() -> Engine {
    const INSTANCES: u32 = 256;
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(INSTANCES)
        .total_core_instances(INSTANCES * 8)
        .total_memories(INSTANCES * 2)
        .total_tables(INSTANCES * 4)
        .total_stacks(INSTANCES)
        .max_core_instances_per_component(16)
        .max_memories_per_component(8)
        .max_tables_per_component(32)
        .max_memory_size(4096 << 20)
        .table_elements(100_000)
        .linear_memory_keep_resident(4 << 20)
        .table_keep_resident(4 << 20)
        .async_stack_keep_resident(4 << 20)
        .pagemap_scan(wasmtime::Enabled::Auto);
    let mut config = Config::new();
    config
        .epoch_interruption(true)
        .consume_fuel(true)
        .max_wasm_stack(512 * 1024)
        .wasm_backtrace_max_frames(std::num::NonZeroUsize::new(20))
        .strategy(wasmtime::Strategy::Cranelift)
        .cranelift_opt_level(wasmtime::OptLevel::Speed)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&config).expect("the floor engine config is valid")
}

/// One floor iteration: fresh store, instantiate, call `noop`.
async fn floor_once(engine: &Engine, pre: &InstancePre<FloorState>) {
    let state = FloorState {
        wasi: WasiCtx::builder().build(),
        table: ResourceTable::new(),
    };
    let mut store = Store::new(engine, state);
    store.set_fuel(FLOOR_FUEL).expect("fuel is enabled");
    // No epoch ticker runs on this engine, so the deadline never passes.
    store.set_epoch_deadline(1);
    let instance = pre
        .instantiate_async(&mut store)
        .await
        .expect("bench-noop instantiates");
    let noop = instance
        .get_typed_func::<(), ()>(&mut store, "noop")
        .expect("bench-noop exports `noop: func()`");
    noop.call_async(&mut store, ()).await.expect("noop returns");
}

fn floor(group: &mut BenchmarkGroup<'_, WallTime>, tokio: &Tokio) {
    let engine = floor_engine();
    let bytes = std::fs::read(sandgraph_tests::BENCH_NOOP).expect("bench-noop was built");
    let component = Component::from_binary(&engine, &bytes).expect("bench-noop compiles");
    let mut linker = Linker::<FloorState>::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("WASI p2 links");
    let pre = linker
        .instantiate_pre(&component)
        .expect("WASI p2 satisfies bench-noop's imports");
    tokio.block_on(floor_once(&engine, &pre));

    group.bench_function("floor", |b| {
        b.to_async(tokio).iter(|| floor_once(&engine, &pre));
    });
}

// ---- sandgraph runs ----

fn options(recursion_limit: Option<u32>) -> RunOptions {
    RunOptions {
        limits: recursion_limit.map(|recursion_limit| Limits {
            recursion_limit,
            ..Limits::default()
        }),
        ..RunOptions::default()
    }
}

/// One run to completion; panics on anything else so a broken graph cannot
/// pass for a fast one.
async fn run_once(graph: &Arc<Graph>, input: Value, recursion_limit: Option<u32>) -> Value {
    match runtime().run(graph, input, options(recursion_limit)).await {
        Ok(RunOutcome::Completed(state)) => Value::Object(state),
        Ok(other) => panic!("{}: expected a completed run, got {other:?}", graph.name()),
        Err(e) => panic!("{}: [{}] {}", graph.name(), e.code, e.message),
    }
}

/// A graph bench: its name, component, input, recursion limit, and a check
/// of the final state run once before measuring.
struct Case {
    name: &'static str,
    path: &'static str,
    input: Value,
    recursion_limit: Option<u32>,
    check: fn(&Value),
    /// Criterion samples; fewer for the slow cases so they fit the
    /// measurement time.
    samples: usize,
}

fn graph_benches(group: &mut BenchmarkGroup<'_, WallTime>, tokio: &Tokio) {
    let cases = [
        Case {
            name: "echo",
            path: sandgraph_tests::ECHO,
            input: json!({"topic": "hi"}),
            recursion_limit: None,
            check: |s| assert_eq!(s, &json!({"topic": "hi", "log": ["seen:hi"]})),
            samples: 100,
        },
        Case {
            name: "chain10",
            path: sandgraph_tests::BENCH_CHAIN,
            input: json!({}),
            recursion_limit: None,
            check: |s| {
                let trail: Vec<String> = (0..10).map(|i| format!("n{i}")).collect();
                assert_eq!(s, &json!({ "trail": trail }));
            },
            samples: 100,
        },
        Case {
            name: "fanout8",
            path: sandgraph_tests::FANOUT,
            input: json!({}),
            recursion_limit: None,
            check: |s| assert_eq!(s["count"], json!(8)),
            samples: 100,
        },
        Case {
            name: "loop100",
            path: sandgraph_tests::LOOP_GRAPH,
            input: json!({"target": 100}),
            recursion_limit: Some(200),
            check: |s| assert_eq!(s["n"], json!(100)),
            samples: 30,
        },
    ];
    for case in cases {
        let graph = tokio.block_on(load(case.path));
        let state = tokio.block_on(run_once(&graph, case.input.clone(), case.recursion_limit));
        (case.check)(&state);
        group.sample_size(case.samples);
        group.bench_function(case.name, |b| {
            b.to_async(tokio).iter(|| async {
                black_box(run_once(&graph, case.input.clone(), case.recursion_limit).await)
            });
        });
    }
}

/// `validate` then the run of `echo`: in one instance (a tool call) and in
/// two (`validate` on its own instance first).
fn validated(group: &mut BenchmarkGroup<'_, WallTime>, tokio: &Tokio) {
    let graph = tokio.block_on(load(sandgraph_tests::ECHO));
    let input = json!({"topic": "hi"});
    let expected = json!({"topic": "hi", "log": ["seen:hi"]});
    let one = async |graph: &Arc<Graph>, input: &Value| {
        let run = runtime()
            .prepare(graph, options(None))
            .expect("a prepared run");
        run.validate(input)
            .await
            .expect("validate ran")
            .expect("accepted");
        match run.run_streaming(input.clone(), &mut |_| {}).await {
            Ok(RunOutcome::Completed(state)) => Value::Object(state),
            other => panic!("echo: expected a completed run, got {other:?}"),
        }
    };
    let two = async |graph: &Arc<Graph>, input: &Value| {
        let verdict = runtime().validate(graph, input, options(None)).await;
        verdict.expect("validate ran").expect("accepted");
        run_once(graph, input.clone(), None).await
    };
    assert_eq!(tokio.block_on(one(&graph, &input)), expected);
    assert_eq!(tokio.block_on(two(&graph, &input)), expected);
    group.sample_size(100);
    group.bench_function("echo_validated", |b| {
        b.to_async(tokio)
            .iter(|| async { black_box(one(&graph, &input).await) });
    });
    group.bench_function("echo_validate_two_instances", |b| {
        b.to_async(tokio)
            .iter(|| async { black_box(two(&graph, &input).await) });
    });
}

fn throughput(group: &mut BenchmarkGroup<'_, WallTime>, tokio: &Tokio) {
    let graph = tokio.block_on(load(sandgraph_tests::ECHO));
    let input = json!({"topic": "hi"});
    group.throughput(Throughput::Elements(1));
    group.bench_function("echo_64_tasks", |b| {
        b.to_async(tokio).iter_custom(|runs| {
            let graph = graph.clone();
            let input = input.clone();
            async move {
                let started = Instant::now();
                let tasks: Vec<_> = (0..TASKS)
                    .map(|t| {
                        // Spread `runs` as evenly as possible.
                        let mine = runs / TASKS + u64::from(t < runs % TASKS);
                        let graph = graph.clone();
                        let input = input.clone();
                        tokio::spawn(async move {
                            for _ in 0..mine {
                                black_box(run_once(&graph, input.clone(), None).await);
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await.expect("a throughput task panicked");
                }
                started.elapsed()
            }
        });
    });
}

// ---- durable threads: echo with a checkpointer in each mode ----

fn durability(group: &mut BenchmarkGroup<'_, WallTime>, tokio: &Tokio) {
    use sandgraph_runtime::Start;
    use sandgraph_store::{Durability, Store};
    use std::sync::atomic::{AtomicU64, Ordering};

    let graph = tokio.block_on(load(sandgraph_tests::ECHO));
    let input = json!({"topic": "hi"});
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = Store::open(&dir.path().join("bench.redb"))
        .expect("a thread store")
        .threads();
    let next = AtomicU64::new(0);
    group.sample_size(50);
    group.bench_function("echo_without_checkpointer", |b| {
        b.to_async(tokio)
            .iter(|| async { black_box(run_once(&graph, input.clone(), None).await) });
    });
    // The same runs on a PostgreSQL store (a throwaway local cluster, fsync
    // on): each backend in each mode.
    let pg = sandgraph_tests::postgres::TestPostgres::shared();
    let shared = Store::connect(&pg.fresh_db("bench"))
        .expect("a PostgreSQL store")
        .threads();
    for (backend, store) in [("", &store), ("postgres_", &shared)] {
        for mode in Durability::ALL {
            group.bench_function(format!("echo_{backend}{}", mode.as_str()), |b| {
                b.to_async(tokio).iter(|| async {
                    // A new thread per run, so every run writes its input and
                    // loop checkpoints and one task record.
                    let id = format!("bench-{}", next.fetch_add(1, Ordering::Relaxed));
                    let writer = store.begin(&id, graph.name(), mode).expect("a free thread");
                    let out = runtime()
                        .run_thread(
                            &graph,
                            None,
                            Start::Input(input.clone()),
                            RunOptions::default(),
                            &writer,
                            &mut |_| {},
                        )
                        .await;
                    match out {
                        Ok(RunOutcome::Completed(state)) => black_box(state),
                        other => panic!("echo on a thread: {other:?}"),
                    }
                });
            });
        }
    }
}
