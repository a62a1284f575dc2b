//! `sandgraph run` and `sandgraph inspect`: one graph component, by path.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use sandgraph_runtime::{Graph, RunOptions, RunOutcome, Runtime};
use serde_json::Value;

use crate::cache::CacheArgs;
use crate::config::LimitArgs;
use crate::exit::{self, Failure};
use crate::{print_pretty, read_input, show, threads};

/// Loads the graph at `path` through the compile cache of `cache`. The
/// cache is closed again once the graph is loaded, so a long run does not
/// keep other sandgraph processes from it.
pub(crate) async fn load(
    rt: &Runtime,
    path: &Path,
    cache: &CacheArgs,
) -> Result<Arc<Graph>, Failure> {
    let store = cache.open();
    Ok(crate::cache::load(rt, store.as_ref(), path).await?)
}

/// What `sandgraph run` takes besides the graph and its input.
pub(crate) struct RunArgs<'a> {
    pub limits: &'a LimitArgs,
    pub thread: &'a threads::ThreadArgs,
    pub stream: bool,
    pub configurable: serde_json::Map<String, Value>,
    pub cache: &'a CacheArgs,
}

pub(crate) async fn run(
    path: &Path,
    input: Option<&str>,
    args: RunArgs<'_>,
) -> Result<ExitCode, Failure> {
    let RunArgs {
        limits: limit_args,
        thread,
        stream,
        configurable,
        cache,
    } = args;
    let input = input.map(read_input).transpose()?;
    let rt = sandgraph_factors::runtime(Default::default())?;
    let limits = limit_args.apply(rt.config().default_limits.clone());
    limits.check()?;
    let graph = load(&rt, path, cache).await?;
    let mut context = tool_context(&graph);
    context.configurable = configurable;
    context.configurable.remove("thread_id");
    let opts = RunOptions {
        limits: Some(limits),
        context,
        ..Default::default()
    };
    let mut on_step = |ev: &sandgraph_runtime::StepEvent| {
        if stream && let Ok(line) = serde_json::to_string(ev) {
            eprintln!("{}", show::json(&line));
        }
    };
    if let Some(id) = &thread.thread {
        return threads::run_on_thread(&rt, &graph, id, input, thread, opts, &mut on_step).await;
    }
    let input = input.unwrap_or_else(|| Value::Object(Default::default()));
    match rt.run_streaming(&graph, input, opts, &mut on_step).await? {
        RunOutcome::Completed(state) => {
            print_pretty(&Value::Object(state))?;
            Ok(ExitCode::SUCCESS)
        }
        RunOutcome::Interrupted { interrupts, .. } => {
            // Without a thread there is nothing to resume: say so.
            let list: Vec<Value> = interrupts
                .iter()
                .map(|i| serde_json::json!({"id": i.id, "value": i.value}))
                .collect();
            print_pretty(
                &serde_json::json!({"status": "interrupted", "thread_id": null, "interrupts": list}),
            )?;
            eprintln!("note: run with --thread ID to be able to resume this run");
            Ok(ExitCode::from(exit::INTERRUPTED))
        }
    }
}

pub(crate) fn tool_context(graph: &Graph) -> sandgraph_core::NodeContext {
    sandgraph_core::NodeContext {
        tool: graph.name().to_string(),
        ..Default::default()
    }
}

pub(crate) async fn inspect(path: &Path, mermaid: bool, cache: &CacheArgs) -> Result<(), Failure> {
    let rt = sandgraph_factors::runtime(Default::default())?;
    let graph = load(&rt, path, cache).await?;
    if mermaid {
        print!("{}", show::lines(&graph.spec().to_mermaid()));
        Ok(())
    } else {
        let mut v =
            serde_json::to_value(graph.spec()).map_err(|e| Failure::internal(e.to_string()))?;
        // What the component imports of the brokered capabilities (llm,
        // tools, http): what an operator would have to grant it.
        if let Some(o) = v.as_object_mut() {
            o.insert(
                "capabilities".into(),
                serde_json::json!(graph.capabilities()),
            );
        }
        print_pretty(&v)
    }
}
