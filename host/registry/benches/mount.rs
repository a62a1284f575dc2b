//! Time to mount a folder of 20 graphs: cold (an empty compile cache: every
//! graph is compiled and described) and warm (a populated cache: nothing is
//! compiled or run at mount), plus warm mount followed by loading every
//! graph (deserializing its cached artifact), what a first call pays.
//!
//! `cargo bench -p sandgraph-registry --bench mount`

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use sandgraph_registry::{Registry, RegistryOptions};
use sandgraph_runtime::Runtime;
use sandgraph_store::Store;

const GRAPHS: usize = 20;

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

async fn mount(runtime: &Runtime, dir: &Path, cache: &Store) -> Registry {
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
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    registry
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let runtime = Runtime::new().unwrap();
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
                let path = caches.path().join(format!("cold-{fresh}.redb"));
                stores.push(Store::open(&path).unwrap());
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

    let warm = Store::open(&caches.path().join("warm.redb")).unwrap();
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
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
