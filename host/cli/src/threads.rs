//! Durable threads on the command line: `run --thread`, and
//! `sandgraph threads list|show|history|delete|prune|fork|update`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;
use sandgraph_runtime::{
    ErrorCode, Graph, RunError, RunOptions, RunOutcome, Runtime, Start, StepEvent,
};
use sandgraph_store::Durability;
use serde_json::{Value, json};

use crate::config::store::{db_path, open_threads, shown, storage};
use crate::exit::{self, Failure};

/// Thread options of `sandgraph run`.
#[derive(clap::Args, Debug, Default)]
pub struct ThreadArgs {
    /// Keep the run's state in a durable thread with this id; running again
    /// on it continues from its state
    #[arg(long, value_name = "ID")]
    pub thread: Option<String>,
    /// Answer the thread's pending interrupt(s): a JSON value, or an object
    /// mapping interrupt ids to values when several are pending
    #[arg(
        long,
        value_name = "JSON",
        requires = "thread",
        conflicts_with = "input"
    )]
    pub resume: Option<String>,
    /// The thread database (default: $SANDGRAPH_DB, else
    /// $XDG_DATA_HOME/sandgraph/threads.redb, else ~/.local/share/sandgraph/threads.redb)
    #[arg(long, visible_alias = "store", value_name = "PATH|URL")]
    pub db: Option<PathBuf>,
    /// When checkpoints reach the disk: sync (before the next superstep),
    /// async (in the background, in order) or exit (when the run ends)
    #[arg(long, default_value = "sync", requires = "thread")]
    pub durability: Durability,
}

/// `sandgraph threads ...`
#[derive(Subcommand, Debug)]
pub enum ThreadsCommand {
    /// List the threads in the database
    List {
        #[arg(long, visible_alias = "store", value_name = "PATH|URL")]
        db: Option<PathBuf>,
    },
    /// Show a thread's current state, next nodes and pending interrupts
    Show {
        thread: String,
        #[arg(long, visible_alias = "store", value_name = "PATH|URL")]
        db: Option<PathBuf>,
    },
    /// Show a thread's checkpoints, newest first
    History {
        thread: String,
        /// At most this many checkpoints
        #[arg(long)]
        limit: Option<usize>,
        #[arg(long, visible_alias = "store", value_name = "PATH|URL")]
        db: Option<PathBuf>,
    },
    /// Delete a thread and everything stored for it
    Delete {
        thread: String,
        #[arg(long, visible_alias = "store", value_name = "PATH|URL")]
        db: Option<PathBuf>,
    },
    /// Keep only the newest N checkpoints of a thread
    Prune {
        thread: String,
        #[arg(long, value_name = "N")]
        keep: usize,
        #[arg(long, visible_alias = "store", value_name = "PATH|URL")]
        db: Option<PathBuf>,
    },
    /// Make a copy of an earlier checkpoint the thread's head; the next run continues from it
    Fork {
        thread: String,
        checkpoint: String,
        #[arg(long, visible_alias = "store", value_name = "PATH|URL")]
        db: Option<PathBuf>,
    },
    /// Update a thread's state as if a node had written the values
    Update {
        thread: String,
        /// The thread's graph component
        #[arg(long)]
        graph: PathBuf,
        /// The writes, a JSON object (or @FILE)
        #[arg(long)]
        values: String,
        /// The node the update is from (default: the node that ran last)
        #[arg(long)]
        as_node: Option<String>,
        #[arg(long, visible_alias = "store", value_name = "PATH|URL")]
        db: Option<PathBuf>,
    },
}

fn invalid(m: impl Into<String>) -> Failure {
    RunError::new(ErrorCode::InvalidInput, m).into()
}

/// Runs `graph` on a durable thread and prints the outcome.
pub async fn run_on_thread(
    rt: &Runtime,
    graph: &std::sync::Arc<Graph>,
    thread: &str,
    input: Option<Value>,
    args: &ThreadArgs,
    opts: RunOptions,
    on_step: &mut (dyn FnMut(&StepEvent) + Send),
) -> Result<ExitCode, Failure> {
    let store = open_threads(args.db.as_deref())?;
    let start = match (&input, &args.resume) {
        (Some(v), _) => Start::Input(v.clone()),
        (None, Some(r)) => Start::Resume(
            sandgraph_core::json::parse_lossless(r, "--resume")
                .map_err(|e| invalid(e.in_document("--resume")))?,
        ),
        (None, None) => Start::Continue,
    };
    let writer = store
        .begin(thread, graph.name(), args.durability)
        .map_err(storage)?;
    let existing = store.load(thread).map_err(storage)?;
    if existing.is_none() && !matches!(start, Start::Input(_)) {
        let what = if args.resume.is_some() {
            "resume"
        } else {
            "continue"
        };
        return Err(invalid(format!(
            "cannot {what} thread {thread:?}: it has no stored state in {}; start it with --input",
            shown(&db_path(args.db.as_deref())?)
        )));
    }
    let mut opts = opts;
    opts.context.thread_id = Some(thread.to_string());
    let outcome = rt
        .run_thread(graph, existing, start, opts, &writer, on_step)
        .await?;
    drop(writer);
    match outcome {
        RunOutcome::Completed(state) => {
            crate::print_pretty(&Value::Object(state))?;
            Ok(ExitCode::SUCCESS)
        }
        RunOutcome::Interrupted { interrupts, .. } => {
            let list: Vec<Value> = interrupts
                .iter()
                .map(|i| json!({"id": i.id, "value": i.value}))
                .collect();
            crate::print_pretty(
                &json!({"status": "interrupted", "thread_id": thread, "interrupts": list}),
            )?;
            Ok(ExitCode::from(exit::INTERRUPTED))
        }
    }
}

/// `sandgraph threads <command>`.
pub async fn threads(cmd: ThreadsCommand) -> Result<ExitCode, Failure> {
    match cmd {
        ThreadsCommand::List { db } => {
            let list = open_threads(db.as_deref())?.list().map_err(storage)?;
            crate::print_pretty(
                &serde_json::to_value(list).map_err(|e| Failure::internal(e.to_string()))?,
            )?;
        }
        ThreadsCommand::Show { thread, db } => show(&thread, db.as_deref())?,
        ThreadsCommand::History { thread, limit, db } => history(&thread, limit, db.as_deref())?,
        ThreadsCommand::Delete { thread, db } => {
            let deleted = open_threads(db.as_deref())?
                .delete(&thread)
                .map_err(storage)?;
            if !deleted {
                return Err(invalid(format!("no thread {thread:?} to delete")));
            }
            eprintln!("deleted thread {thread:?}");
        }
        ThreadsCommand::Prune { thread, keep, db } => {
            if keep == 0 {
                return Err(invalid(
                    "--keep must be at least 1: the head checkpoint is always kept",
                ));
            }
            let removed = open_threads(db.as_deref())?
                .prune(&thread, keep)
                .map_err(storage)?;
            eprintln!("removed {removed} checkpoint(s) of thread {thread:?}");
        }
        ThreadsCommand::Fork {
            thread,
            checkpoint,
            db,
        } => {
            let c = open_threads(db.as_deref())?
                .fork(&thread, &checkpoint)
                .map_err(storage)?;
            crate::print_pretty(
                &json!({"thread_id": thread, "checkpoint_id": c.id, "parent_id": c.parent}),
            )?;
        }
        ThreadsCommand::Update {
            thread,
            graph,
            values,
            as_node,
            db,
        } => update(&thread, &graph, &values, as_node.as_deref(), db.as_deref()).await?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `threads show`: the thread's head, next nodes and pending interrupts.
fn show(thread: &str, db: Option<&Path>) -> Result<(), Failure> {
    let store = open_threads(db)?;
    let Some(t) = store.load(thread).map_err(storage)? else {
        return Err(invalid(format!(
            "no thread {thread:?} in {}",
            shown(&db_path(db)?)
        )));
    };
    let interrupts: Vec<Value> = t
        .pending_interrupts()
        .iter()
        .map(|i| json!({"id": i.id, "node": i.node, "value": i.value}))
        .collect();
    crate::print_pretty(&json!({
        "thread_id": thread,
        "checkpoint_id": t.checkpoint.id,
        "step": t.checkpoint.step,
        "values": t.checkpoint.values,
        "next": t.checkpoint.next_nodes(),
        "interrupts": interrupts,
    }))
}

/// `threads history`: the thread's checkpoints, newest first.
fn history(thread: &str, limit: Option<usize>, db: Option<&Path>) -> Result<(), Failure> {
    let history = open_threads(db)?.history(thread, limit).map_err(storage)?;
    let rows: Vec<Value> = history
        .iter()
        .map(|c| {
            json!({
                "checkpoint_id": c.id, "parent_id": c.parent, "step": c.step,
                "source": c.source, "created_at_ms": c.created_at_ms,
                "values": c.values, "next": c.next_nodes(),
            })
        })
        .collect();
    crate::print_pretty(&Value::Array(rows))
}

/// `threads update`: the thread's state as if `as_node` (default: the
/// node that ran last) had written `values`.
async fn update(
    thread: &str,
    graph: &Path,
    values: &str,
    as_node: Option<&str>,
    db: Option<&Path>,
) -> Result<(), Failure> {
    let values = crate::read_input(values)?;
    let store = open_threads(db)?;
    let rt = sandgraph_factors::runtime(Default::default())?;
    // Through the default compile cache, as every command loads.
    let cache = crate::cache::open(None, false);
    let graph = crate::cache::load(&rt, cache.as_ref(), graph).await?;
    let Some(t) = store.load(thread).map_err(storage)? else {
        return Err(invalid(format!("no thread {thread:?} to update")));
    };
    let c = rt.update_state(&graph, t, values, as_node).await?;
    store.put_update(thread, &c).map_err(storage)?;
    crate::print_pretty(
        &json!({"thread_id": thread, "checkpoint_id": c.id, "values": c.values, "next": c.next_nodes()}),
    )
}
