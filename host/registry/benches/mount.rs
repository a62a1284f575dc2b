//! Time to mount a folder of 20 graphs: cold (an empty compile cache: every
//! graph is compiled and described) and warm (a populated cache: nothing is
//! compiled or run at mount), plus warm mount followed by loading every
//! graph (deserializing its cached artifact), what a first call pays.
//!
//! The same folder plus 5 hostile graphs whose `describe` spins (2),
//! allocates until the load memory cap (2) or traps (1): the time until
//! `Registry::open` returns with the 20 good graphs served, on a first
//! start (empty cache: the hostile ones run into the load limits, side by
//! side) and on a second start (the cache remembers their failures: they
//! are skipped at once).
//!
//! `cargo bench -p sandgraph-registry --bench mount`

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use sandgraph_registry::{Registry, RegistryOptions};
use sandgraph_runtime::Runtime;
use sandgraph_store::CompileCache;

const GRAPHS: usize = 20;

/// The hostile graphs added to the folder for the `*_5_hostile` cases,
/// by file name; the duplicates have the same bytes under another name.
const HOSTILE: [(&str, &str); 5] = [
    (
        "hostile_describe_alloc.wasm",
        sandgraph_tests::HOSTILE_DESCRIBE_ALLOC,
    ),
    (
        "hostile_describe_alloc_2.wasm",
        sandgraph_tests::HOSTILE_DESCRIBE_ALLOC,
    ),
    (
        "hostile_describe_spin.wasm",
        sandgraph_tests::HOSTILE_DESCRIBE_SPIN,
    ),
    (
        "hostile_describe_spin_2.wasm",
        sandgraph_tests::HOSTILE_DESCRIBE_SPIN,
    ),
    (
        "hostile_describe_trap.wasm",
        sandgraph_tests::HOSTILE_DESCRIBE_TRAP,
    ),
];

/// A copy of `good` plus the [`HOSTILE`] graphs.
fn with_hostile(good: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(good).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    for (name, path) in HOSTILE {
        std::fs::copy(path, dir.path().join(name)).unwrap();
    }
    dir
}

/// A folder with up to [`GRAPHS`] components of `sandgraph_tests::ALL`
/// that mount (distinct names, loadable, supported parameters).
fn folder(rt: &tokio::runtime::Runtime, runtime: &Runtime) -> tempfile::TempDir {
    let all = tempfile::tempdir().unwrap();
    for (name, path) in sandgraph_tests::ALL {
        std::fs::copy(path, all.path().join(format!("{name}.wasm"))).unwrap();
    }
    let (registry, report) = rt
        .block_on(Registry::open(
            runtime.clone(),
            RegistryOptions {
                dirs: vec![all.path().to_path_buf()],
                log_warnings: false,
                ..RegistryOptions::default()
            },
        ))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for m in report.mounted.iter().take(GRAPHS) {
        std::fs::copy(&m.path, dir.path().join(m.path.file_name().unwrap())).unwrap();
    }
    let n = report.mounted.len().min(GRAPHS);
    if n < GRAPHS {
        eprintln!("only {n} distinct valid graphs in sandgraph_tests::ALL; mounting {n}");
    }
    drop(registry);
    dir
}

async fn mount(runtime: &Runtime, dir: &Path, cache: &CompileCache) -> Registry {
    mount_expecting(runtime, dir, cache, 0).await
}

/// Mounts `dir`; exactly `failing` graphs fail (the hostile ones), and
/// [`GRAPHS`] are served.
async fn mount_expecting(
    runtime: &Runtime,
    dir: &Path,
    cache: &CompileCache,
    failing: usize,
) -> Registry {
    let (registry, report) = Registry::open(
        runtime.clone(),
        RegistryOptions {
            dirs: vec![dir.to_path_buf()],
            cache: Some(cache.clone()),
            log_warnings: false,
            ..RegistryOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(report.warnings.len(), failing, "{:?}", report.warnings);
    assert_eq!(report.mounted.len(), GRAPHS);
    registry
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let runtime = sandgraph_factors::runtime(Default::default()).unwrap();
    let dir = folder(&rt, &runtime);
    let caches = tempfile::tempdir().unwrap();

    let mut group = c.benchmark_group(format!("mount_{GRAPHS}_graphs"));
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(5));

    let mut fresh = 0u64;
    group.bench_function("cold", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let mut stores = Vec::new();
            for _ in 0..iters {
                fresh += 1;
                let path = caches.path().join(format!("cold-{fresh}"));
                stores.push(CompileCache::open(&path).unwrap());
            }
            let runtime = runtime.clone();
            let dir = dir.path().to_path_buf();
            async move {
                let mut total = Duration::ZERO;
                for store in stores {
                    let start = Instant::now();
                    let registry = mount(&runtime, &dir, &store).await;
                    total += start.elapsed();
                    drop(registry);
                }
                total
            }
        });
    });

    let warm = CompileCache::open(&caches.path().join("warm")).unwrap();
    rt.block_on(mount(&runtime, dir.path(), &warm));
    let before = runtime.compile_count();
    group.bench_function("warm", |b| {
        b.to_async(&rt)
            .iter(|| async { mount(&runtime, dir.path(), &warm).await });
    });
    assert_eq!(runtime.compile_count(), before, "a warm mount compiled");

    group.bench_function("warm_then_load_all", |b| {
        b.to_async(&rt).iter(|| async {
            let registry = mount(&runtime, dir.path(), &warm).await;
            for tool in registry.list() {
                tool.graph().await.unwrap();
            }
            registry
        });
    });
    assert_eq!(
        runtime.compile_count(),
        before,
        "loading from the cache compiled"
    );

    // The same folder plus 5 hostile graphs: a first start (empty cache)
    // and a second start (their failures remembered).
    let hostile = with_hostile(dir.path());
    let n = HOSTILE.len();
    group.bench_function("cold_5_hostile", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let mut stores = Vec::new();
            for _ in 0..iters {
                fresh += 1;
                let path = caches.path().join(format!("cold-hostile-{fresh}"));
                stores.push(CompileCache::open(&path).unwrap());
            }
            let runtime = runtime.clone();
            let dir = hostile.path().to_path_buf();
            async move {
                let mut total = Duration::ZERO;
                for store in stores {
                    let start = Instant::now();
                    let registry = mount_expecting(&runtime, &dir, &store, n).await;
                    total += start.elapsed();
                    drop(registry);
                }
                total
            }
        });
    });

    let remembered = CompileCache::open(&caches.path().join("warm-hostile")).unwrap();
    rt.block_on(mount_expecting(&runtime, hostile.path(), &remembered, n));
    assert_eq!(
        remembered.load_failure_count().unwrap(),
        3,
        "one failure per distinct hostile component"
    );
    let before = runtime.compile_count();
    group.bench_function("warm_5_hostile", |b| {
        b.to_async(&rt)
            .iter(|| async { mount_expecting(&runtime, hostile.path(), &remembered, n).await });
    });
    assert_eq!(
        runtime.compile_count(),
        before,
        "a second start compiled a remembered failure"
    );
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
